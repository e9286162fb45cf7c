"""The learning-rate formulas, as plain functions of the step: the warmup-stable-decay family (the paper's
warmup-cosine baseline ``f``, Eq. 13, and WSD), its decay shapes (:data:`DECAY_SHAPES`), and the new entries'
re-warmup on them (paper Eq. 15: :func:`rewarmup_lr`; under WSD :func:`rewarmup_wsd_lr`). The registry that names
them is :mod:`~lightning_sparkling.growth.schedules`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["DECAY_SHAPES", "WSD_DECAY_SHAPES", "rewarmup_lr", "rewarmup_wsd_lr", "warmup_cosine_lr",
           "warmup_stable_decay_lr", "wsd_decay_start", "wsd_lr"]


def _linear_decay(x: float) -> float:
    return 1.0 - x


def _cosine_decay(x: float) -> float:
    return 0.5 * (1.0 + math.cos(math.pi * x))


def _sqrt_decay(x: float) -> float:
    return 1.0 - math.sqrt(x)


DECAY_SHAPES: dict[str, Callable[[float], float]] = {
    "linear": _linear_decay,
    "cosine": _cosine_decay,
    # 1 - sqrt(x): Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations"
    "sqrt": _sqrt_decay,
}
"""Decay multiplier ``phi(x)`` at progress ``x`` in ``[0, 1]`` of the decay phase, by shape name: 1 at its start, 0 at
its end (``lr = lr_min + (lr_max - lr_min) phi(x)``)."""

WSD_DECAY_SHAPES = tuple(DECAY_SHAPES)
"""The decay shapes of :func:`wsd_lr` (``lr_decay_shape`` in the CLI)."""


def warmup_stable_decay_lr(step: float, *, warmup_steps: int, decay_start: float, total_steps: int, lr_init: float,
                           lr_max: float, lr_min: float, decay_shape: str) -> float:
    """The one formula of every registered schedule: ``lr_init + (lr_max - lr_init) t / T_w`` for ``t < T_w``;
    ``lr_max`` for ``T_w <= t < D``; ``lr_min + (lr_max - lr_min) phi((t - D) / (T - D))`` for ``D <= t < T`` with
    ``phi = DECAY_SHAPES[decay_shape]``; ``lr_min`` from ``T`` on.

    Example::

        >>> warmup_stable_decay_lr(95, warmup_steps=10, decay_start=90, total_steps=100, lr_init=0.0, lr_max=1.0,
        ...                        lr_min=0.0, decay_shape="linear")
        0.5
    """
    if step < warmup_steps:
        return lr_init + (lr_max - lr_init) * step / warmup_steps
    if step >= total_steps:
        return lr_min
    if step < decay_start:
        return lr_max
    return lr_min + (lr_max - lr_min) * DECAY_SHAPES[decay_shape]((step - decay_start) / (total_steps - decay_start))


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
    return warmup_stable_decay_lr(step, warmup_steps=warmup_steps, decay_start=warmup_steps, total_steps=total_steps,
                                  lr_init=lr_init, lr_max=lr_max, lr_min=lr_min, decay_shape="cosine")


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



def _check_wsd(decay_fraction: float, decay_shape: str) -> None:
    if not (isinstance(decay_fraction, (int, float)) and 0 < decay_fraction <= 1):
        raise ValueError(f"decay_fraction={decay_fraction!r} must be in (0, 1] (the share of the run spent decaying)")
    if decay_shape not in WSD_DECAY_SHAPES:
        raise ValueError(f"decay_shape={decay_shape!r}: choose one of {', '.join(WSD_DECAY_SHAPES)}")


def wsd_decay_start(*, warmup_steps: int, total_steps: int, decay_fraction: float) -> int:
    """First step of the WSD decay phase: ``max(warmup_steps, total_steps - ceil(decay_fraction * total_steps))``
    (the product rounded to 9 decimals first, so ``0.2 * 300`` decays over 60 steps, not 61).

    The LR of the step taken at ``decay_start`` is still the peak; the decay reaches ``lr_min`` at ``total_steps``.
    ``decay_fraction=1``: no stable phase (warmup, then decay).

    Example::

        >>> wsd_decay_start(warmup_steps=10, total_steps=300, decay_fraction=0.2)
        240
        >>> wsd_decay_start(warmup_steps=10, total_steps=100, decay_fraction=1.0)
        10
    """
    _check_wsd(decay_fraction, "linear")
    if warmup_steps < 0 or total_steps < warmup_steps:
        raise ValueError(f"need 0 <= warmup_steps <= total_steps, got warmup_steps={warmup_steps}, "
                         f"total_steps={total_steps}")
    decay_steps = math.ceil(round(decay_fraction * total_steps, 9))
    return max(int(warmup_steps), int(total_steps) - decay_steps)


def wsd_lr(step: float, *, warmup_steps: int, total_steps: int, lr_init: float, lr_max: float, lr_min: float,
           decay_fraction: float = 0.2, decay_shape: str = "linear") -> float:
    """Warmup-stable-decay: linear warmup, the peak held, then a decay over the last ``decay_fraction`` of the run.

    With ``D = wsd_decay_start(...)``: ``lr_init + (lr_max - lr_init) t / T_w`` for ``0 <= t < T_w``; ``lr_max`` for
    ``T_w <= t < D``; ``lr_min + (lr_max - lr_min) phi((t - D) / (T - D))`` for ``D <= t <= T`` with
    ``phi(x) = 1 - x`` (``linear``), ``(1 + cos(pi x)) / 2`` (``cosine``) or ``1 - sqrt(x)`` (``sqrt``): the shapes
    of :data:`DECAY_SHAPES`; ``lr_min`` after ``T``. Defined for
    real-valued ``t`` too (``decay_speedup`` evaluates it between steps).

    litgpt 0.5.13 has no WSD schedule (its ``pretrain`` decays by cosine only), hence the choice of shapes here.

    Example::

        >>> kw = dict(warmup_steps=10, total_steps=100, lr_init=0.0, lr_max=1.0, lr_min=0.1)
        >>> wsd_lr(5, **kw), wsd_lr(50, **kw), wsd_lr(80, **kw), wsd_lr(90, **kw), wsd_lr(100, **kw)
        (0.5, 1.0, 1.0, 0.55, 0.1)
    """
    _check_wsd(decay_fraction, decay_shape)
    start = wsd_decay_start(warmup_steps=warmup_steps, total_steps=total_steps, decay_fraction=decay_fraction)
    return warmup_stable_decay_lr(step, warmup_steps=warmup_steps, decay_start=start, total_steps=total_steps,
                                  lr_init=lr_init, lr_max=lr_max, lr_min=lr_min, decay_shape=decay_shape)


def rewarmup_wsd_lr(step: float, *, growth_step: int, lr_at_growth: float, ratio: float, warmup_steps: int,
                    total_steps: int, min_lr: float, decay_start: float, decay_shape: str = "linear") -> float:
    """Learning rate of a stage's new entries when the baseline is WSD: the re-warmup, then the baseline's shape.

    ``r(t)`` rises linearly from ``lr_at_growth`` (at ``t = growth_step``) to ``ratio * lr_at_growth`` over
    ``warmup_steps`` and holds there; the baseline's decay multiplier ``s(t)`` is 1 before ``decay_start``,
    ``phi((t - decay_start) / (total_steps - decay_start))`` (the :func:`wsd_lr` shape) after it and 0 from
    ``total_steps`` on. The new entries' LR is ``min_lr + (r(t) - min_lr) s(t) / s(growth_step)``:

    - a growth in the stable phase: the peak ``ratio * lr_at_growth`` is held until ``decay_start``, then decays with
      the baseline's decay (same start step, same shape) to ``min_lr`` at ``total_steps``;
    - a re-warmup that runs into the decay phase is decayed while it rises (continuous, still ``min_lr`` at the end);
    - a growth inside the decay phase (refused by the CLI, warned by the callback) starts at ``lr_at_growth`` and
      follows the remaining decay scaled by ``r``.

    Example::

        >>> kw = dict(growth_step=100, lr_at_growth=1e-3, ratio=1.5, warmup_steps=10, total_steps=300, min_lr=0.0,
        ...           decay_start=240)
        >>> rewarmup_wsd_lr(100, **kw), rewarmup_wsd_lr(110, **kw), rewarmup_wsd_lr(239, **kw)
        (0.001, 0.0015, 0.0015)
        >>> round(rewarmup_wsd_lr(270, **kw), 9), rewarmup_wsd_lr(300, **kw)
        (0.00075, 0.0)
    """
    if step < growth_step:
        raise ValueError(f"rewarmup_wsd_lr is defined from the growth step on: step={step} < growth_step={growth_step}")
    if decay_shape not in WSD_DECAY_SHAPES:
        raise ValueError(f"decay_shape={decay_shape!r}: choose one of {', '.join(WSD_DECAY_SHAPES)}")
    if step >= total_steps:
        return min_lr
    peak = ratio * lr_at_growth
    ramp = peak if step - growth_step >= warmup_steps else (
        lr_at_growth + (peak - lr_at_growth) * (step - growth_step) / warmup_steps)

    def s(t: float) -> float:
        if t < decay_start:
            return 1.0
        return DECAY_SHAPES[decay_shape]((t - decay_start) / (total_steps - decay_start))

    at_growth, now = s(growth_step), s(step)
    if now == at_growth:  # stable phase (or no decay yet since the growth): exactly the re-warmup
        return ramp
    return min_lr + (ramp - min_lr) * now / at_growth
