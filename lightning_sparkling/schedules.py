"""Learning-rate schedules of the paper: the warmup-cosine baseline ``f`` (Eq. 13) and the asymmetric
re-warmup of new entries (Eq. 15)."""

from __future__ import annotations

import math


def warmup_cosine_lr(step: int, *, warmup_steps: int, total_steps: int, lr_init: float, lr_max: float,
                     lr_min: float) -> float:
    """The paper's ``f(t; T_w, T, eta_0, eta_max, eta_min)``: linear warmup, then cosine decay (Eq. 13-14).

    ``lr_init + (lr_max - lr_init) t / T_w`` for ``0 <= t < T_w``; ``lr_min + (lr_max - lr_min) psi((t - T_w) /
    (T - T_w))`` with ``psi(x) = (1 + cos(pi x)) / 2`` for ``T_w <= t <= T``; ``lr_min`` after ``T``.

    Example::

        >>> warmup_cosine_lr(0, warmup_steps=10, total_steps=100, lr_init=0.0, lr_max=1.0, lr_min=0.1)
        0.0
        >>> warmup_cosine_lr(10, warmup_steps=10, total_steps=100, lr_init=0.0, lr_max=1.0, lr_min=0.1)
        1.0
        >>> warmup_cosine_lr(100, warmup_steps=10, total_steps=100, lr_init=0.0, lr_max=1.0, lr_min=0.1)
        0.1
    """
    if warmup_steps < 0 or total_steps < warmup_steps:
        raise ValueError(f"need 0 <= warmup_steps <= total_steps, got warmup_steps={warmup_steps}, "
                         f"total_steps={total_steps}")
    if step < warmup_steps:
        return lr_init + (lr_max - lr_init) * step / warmup_steps
    if step >= total_steps:
        return lr_min
    progress = (step - warmup_steps) / (total_steps - warmup_steps)
    return lr_min + (lr_max - lr_min) * 0.5 * (1.0 + math.cos(math.pi * progress))


def rewarmup_lr(step: int, *, growth_step: int, lr_at_growth: float, ratio: float, warmup_steps: int,
                total_steps: int, min_lr: float) -> float:
    """Learning rate of a stage's new entries (paper Eq. 15):
    ``f(step - t_e; tau_w, T - t_e, eta_e, ratio * eta_e, eta_min)``.

    Starts at ``lr_at_growth`` for the first step after growth (``step == growth_step``), rises linearly to
    ``ratio * lr_at_growth`` over ``warmup_steps``, then decays by cosine to ``min_lr`` at ``total_steps``.

    Example::

        >>> kw = dict(growth_step=100, lr_at_growth=1e-3, ratio=1.3, warmup_steps=10, total_steps=200, min_lr=1e-5)
        >>> rewarmup_lr(100, **kw), round(rewarmup_lr(110, **kw), 6), rewarmup_lr(200, **kw)
        (0.001, 0.0013, 1e-05)
    """
    if step < growth_step:
        raise ValueError(f"rewarmup_lr is defined from the growth step on: step={step} < growth_step={growth_step}")
    horizon = total_steps - growth_step
    return warmup_cosine_lr(step - growth_step, warmup_steps=min(warmup_steps, max(horizon, 0)),
                            total_steps=max(horizon, 0), lr_init=lr_at_growth, lr_max=ratio * lr_at_growth,
                            lr_min=min_lr)


class WarmupCosineLambda:
    """The paper's baseline schedule as a ``LambdaLR`` multiplier of the optimizer's base LR.

    ``LambdaLR(optimizer, WarmupCosineLambda(warmup_steps, total_steps, min_lr_ratio))`` gives
    ``warmup_cosine_lr(step, lr_init=0, lr_max=base_lr, lr_min=min_lr_ratio * base_lr)``. The growth callback
    recognises it and reads ``min_lr`` from it exactly (``min_lr_ratio * base_lr``).

    Args:
        warmup_steps: linear warmup length ``T_w``.
        total_steps: ``T``, where the LR reaches ``min_lr_ratio * base_lr``.
        min_lr_ratio: ``eta_min / eta_max``.
        init_lr_ratio: ``eta_0 / eta_max`` (0: warm up from zero).

    Example::

        >>> f = WarmupCosineLambda(warmup_steps=10, total_steps=100, min_lr_ratio=0.1)
        >>> f(0), f(10), f(100)
        (0.0, 1.0, 0.1)
    """

    def __init__(self, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.1,
                 init_lr_ratio: float = 0.0) -> None:
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.min_lr_ratio = float(min_lr_ratio)
        self.init_lr_ratio = float(init_lr_ratio)
        warmup_cosine_lr(0, warmup_steps=self.warmup_steps, total_steps=self.total_steps, lr_init=0, lr_max=1,
                         lr_min=0)  # validates the steps

    def __call__(self, step: int) -> float:
        return warmup_cosine_lr(step, warmup_steps=self.warmup_steps, total_steps=self.total_steps,
                                lr_init=self.init_lr_ratio, lr_max=1.0, lr_min=self.min_lr_ratio)

    def __repr__(self) -> str:
        return (f"WarmupCosineLambda(warmup_steps={self.warmup_steps}, total_steps={self.total_steps}, "
                f"min_lr_ratio={self.min_lr_ratio}, init_lr_ratio={self.init_lr_ratio})")
