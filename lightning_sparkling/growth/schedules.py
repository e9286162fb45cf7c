"""Learning-rate schedules: one registry of warmup-stable-decay schedules, and the new entries' re-warmup on them.

Every baseline schedule is one :class:`WarmupStableDecay` description: a linear warmup, a stable phase at the peak,
then a decay of a registered shape (:data:`DECAY_SHAPES`) to ``min_lr`` at the end of the run. A schedule name
(``train.lr_schedule``) is one :class:`ScheduleKind` entry of :data:`SCHEDULES`:

- ``cosine``: the paper's warmup-cosine baseline ``f`` (Eq. 13): no stable phase, a cosine decay;
- ``wsd``: warmup-stable-decay (MiniCPM; Hägele et al. 2024): the decay over the last ``decay_fraction`` of the run,
  of shape ``linear`` (default), ``cosine`` or ``sqrt`` (``1 - sqrt``, the cooldown Hägele et al. found best).

The CLI's allowed names, the optimizer builder, the module, the stage checks, the growth callback and the advice read
the registry (:func:`schedule_kind`, :func:`build_schedule`, :func:`baseline_of`); adding a schedule or a decay shape
is one entry here. The new entries' re-warmup (paper Eq. 15, :func:`rewarmup_lr`) follows a baseline whose entry has a
stable phase (:func:`rewarmup_wsd_lr`: it holds its peak and decays with the baseline's decay).

litgpt 0.5.13's ``pretrain`` has only its warmup-cosine ``get_lr`` (no WSD and no decay option)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any

import torch


def _linear_decay(x: float) -> float:
    return 1.0 - x


def _cosine_decay(x: float) -> float:
    return 0.5 * (1.0 + math.cos(math.pi * x))


def _sqrt_decay(x: float) -> float:
    return 1.0 - math.sqrt(x)


DECAY_SHAPES: dict[str, Callable[[float], float]] = {
    "linear": _linear_decay,
    "cosine": _cosine_decay,
    "sqrt": _sqrt_decay,  # 1 - sqrt(x): Hägele et al. 2024, "Scaling Laws and Compute-Optimal Training Beyond Fixed ..."
}
"""Decay multiplier ``phi(x)`` at progress ``x`` in ``[0, 1]`` of the decay phase, by shape name: 1 at its start, 0 at
its end (``lr = lr_min + (lr_max - lr_min) phi(x)``)."""

WSD_DECAY_SHAPES = tuple(DECAY_SHAPES)
"""The decay shapes of :func:`wsd_lr` (``lr_decay_shape`` in the CLI)."""


@dataclasses.dataclass(frozen=True)
class ScheduleKind:
    """One named schedule of the registry (:data:`SCHEDULES`): how its :class:`WarmupStableDecay` is built.

    Args:
        name: the name (``train.lr_schedule``, ``LitGPTPretrainModule(lr_schedule=...)``).
        stable_phase: whether it holds the peak before its decay. Then ``decay_fraction`` / ``decay_shape`` come
            from the config, a growth inside the decay is refused (the CLI) or warned about (the callback), and the
            new entries' re-warmup holds its peak and decays with the baseline (:func:`rewarmup_wsd_lr`); without, it
            decays over the whole run after the warmup with ``decay_shape`` and the new entries get the paper's
            cosine tail (:func:`rewarmup_lr`).
        decay_shape: the shape of a schedule without a stable phase.
        recipe: the growth recipe measured best under it (``growth.recipe: auto``; docs/BENCHMARKS.md).
    """

    name: str
    stable_phase: bool
    decay_shape: str | None
    recipe: str

    def build(self, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.1, *, decay_fraction: float = 0.2,
              decay_shape: str = "linear", init_lr_ratio: float = 0.0) -> WarmupStableDecay:
        """This schedule's ``LambdaLR`` multiplier (``decay_fraction`` / ``decay_shape``: with a stable phase only).
        """
        if self.stable_phase:
            return WSDLambda(warmup_steps, total_steps, min_lr_ratio, decay_fraction, decay_shape, init_lr_ratio)
        return WarmupCosineLambda(warmup_steps, total_steps, min_lr_ratio, init_lr_ratio)


SCHEDULES: dict[str, ScheduleKind] = {
    "cosine": ScheduleKind("cosine", stable_phase=False, decay_shape="cosine", recipe="random-zero-3x"),
    "wsd": ScheduleKind("wsd", stable_phase=True, decay_shape=None, recipe="wsd"),
}
"""The schedule registry: name -> :class:`ScheduleKind` (the CLI's ``train.lr_schedule`` choices, in order)."""


def schedule_kind(name: str) -> ScheduleKind:
    """The registry entry of ``name``.

    Raises:
        ValueError: for a name not in :data:`SCHEDULES`, naming the choices.
    """
    if name not in SCHEDULES:
        raise ValueError(f"lr_schedule={name!r}: choose {' or '.join(repr(n) for n in SCHEDULES)}")
    return SCHEDULES[name]


def build_schedule(name: str, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.1, *,
                   decay_fraction: float = 0.2, decay_shape: str = "linear",
                   init_lr_ratio: float = 0.0) -> WarmupStableDecay:
    """The ``LambdaLR`` multiplier of the registered schedule ``name`` (:meth:`ScheduleKind.build`).

    Example::

        >>> round(build_schedule("wsd", 10, 100, 0.1, decay_fraction=0.2, decay_shape="sqrt")(90), 4)  # 1 - sqrt(1/2)
        0.3636
        >>> build_schedule("cosine", 10, 100, 0.1)(100)
        0.1
    """
    return schedule_kind(name).build(warmup_steps, total_steps, min_lr_ratio, decay_fraction=decay_fraction,
                                     decay_shape=decay_shape, init_lr_ratio=init_lr_ratio)


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


def check_growth_before_decay(at_steps: Sequence[int], *, decay_start: int, total_steps: int,
                              names: Sequence[str] | None = None, setting: str = "") -> None:
    """Refuse a growth inside the WSD decay phase (``at_step >= decay_start``).

    Under WSD the point of growing is to train the new capacity at the stable (peak) LR before the decay; a growth at
    or after ``decay_start`` hands it only the decaying tail. The CLI turns the error into a ``ConfigError`` naming
    ``growth.stages[k].at_step``; the callback warns instead (Python users may do it on purpose).

    Args:
        at_steps: the growth steps, one per stage.
        decay_start: the first step of the decay phase (:func:`wsd_decay_start`, ``WSDLambda.decay_start``).
        total_steps: the run's last step.
        names: how to call each stage in the message (default ``GrowthStage(at_step=...)``).
        setting: what sets the decay phase, for the message (e.g. ``", train.lr_decay_fraction=0.2"``).

    Raises:
        ValueError: naming the stage, its step, the decay phase and the fix.

    Example::

        >>> check_growth_before_decay([100, 250], decay_start=240, total_steps=300)
        Traceback (most recent call last):
        ...
        ValueError: GrowthStage(at_step=250): the growth at step 250 falls inside the WSD decay phase ...
    """
    for k, at in enumerate(at_steps):
        if at < decay_start:
            continue
        name = names[k] if names else f"GrowthStage(at_step={at})"
        raise ValueError(
            f"{name}: the growth at step {at} falls inside the WSD decay phase (steps {decay_start}..{total_steps}"
            f"{setting}), so the new entries would never train at the stable LR: grow before step {decay_start} "
            "(the point of WSD for growth is a growth in the stable phase), or shorten the decay"
        )


def fresh_bias_factor(k: int, t: int, betas: tuple[float, float]) -> float:
    """How much larger a fresh Adam's update is than the update of an entry whose tensor has taken ``t`` steps,
    for an entry whose moments started at zero ``k`` steps ago (``1 <= k <= t``).

    Adam's bias correction divides the first moment by ``1 - beta1^t`` and the second by ``1 - beta2^t``, with one
    step count ``t`` per tensor. New entries of a grown tensor start at zero state (``S' = [S, 0]``) but share the
    tensor's ``t``, so their moments are corrected as if they were mature:
    ``m_k / (1 - beta1^t) / sqrt(v_k / (1 - beta2^t))`` instead of a fresh optimizer's
    ``m_k / (1 - beta1^k) / sqrt(v_k / (1 - beta2^k))``. The ratio of the two (``eps`` aside) is

    ``(1 - beta1^t) / (1 - beta1^k) * sqrt((1 - beta2^k) / (1 - beta2^t))``.

    With ``betas=(0.9, 0.95)`` the first update after growth is ``2.24x`` the shared-step one (the shared step
    gives ``0.45`` of a fresh optimizer's), the factor dips to ``0.91`` near ``k = 20`` and tends to 1.

    Example::

        >>> round(fresh_bias_factor(1, 1000, (0.9, 0.95)), 3), round(fresh_bias_factor(200, 1000, (0.9, 0.95)), 3)
        (2.236, 1.0)
    """
    if not 1 <= k <= t:
        raise ValueError(f"fresh_bias_factor needs 1 <= k <= t, got k={k}, t={t}")
    beta1, beta2 = betas
    return (1.0 - beta1**t) / (1.0 - beta1**k) * math.sqrt((1.0 - beta2**k) / (1.0 - beta2**t))


@dataclasses.dataclass(repr=False, eq=False)
class WarmupStableDecay:
    """A registered schedule as a ``LambdaLR`` multiplier of the optimizer's base LR: the description of one member of
    the warmup-stable-decay family (:func:`warmup_stable_decay_lr` with ``lr_init = init_lr_ratio``, ``lr_max = 1``,
    ``lr_min = min_lr_ratio`` and ``D =`` :attr:`decay_start`). Build it with :func:`build_schedule`;
    :class:`WarmupCosineLambda` and :class:`WSDLambda` are its two registered forms.

    Picklable; ``LambdaLR`` checkpoints hold its ``__dict__`` (the fields), and restore it onto the freshly built one.

    Args:
        warmup_steps: linear warmup length ``T_w``.
        total_steps: ``T`` (the run's ``max_steps``), where the LR reaches ``min_lr_ratio * base_lr``.
        min_lr_ratio: ``eta_min / eta_max``.
        decay_fraction: the share of the run spent decaying, in ``(0, 1]`` (:func:`wsd_decay_start`; 1: no stable
            phase).
        decay_shape: a name of :data:`DECAY_SHAPES`.
        init_lr_ratio: ``eta_0 / eta_max`` (0: warm up from zero).
        schedule: its registry name (:data:`SCHEDULES`).
    """

    warmup_steps: int
    total_steps: int
    min_lr_ratio: float = 0.1
    decay_fraction: float = 1.0
    decay_shape: str = "cosine"
    init_lr_ratio: float = 0.0
    schedule: str = "cosine"

    def __post_init__(self) -> None:
        self.warmup_steps, self.total_steps = int(self.warmup_steps), int(self.total_steps)
        self.min_lr_ratio, self.init_lr_ratio = float(self.min_lr_ratio), float(self.init_lr_ratio)
        _check_wsd(self.decay_fraction, self.decay_shape)
        self.decay_fraction, self.decay_shape = float(self.decay_fraction), str(self.decay_shape)
        schedule_kind(self.schedule)
        if self.warmup_steps < 0 or self.total_steps < self.warmup_steps:
            raise ValueError(f"need 0 <= warmup_steps <= total_steps, got warmup_steps={self.warmup_steps}, "
                             f"total_steps={self.total_steps}")

    @property
    def kind(self) -> ScheduleKind:
        """Its registry entry."""
        return SCHEDULES[getattr(self, "schedule", "cosine")]

    @property
    def decay_start(self) -> int:
        """The first step of the decay phase (:func:`wsd_decay_start`; ``warmup_steps`` without a stable phase)."""
        return wsd_decay_start(warmup_steps=self.warmup_steps, total_steps=self.total_steps,
                               decay_fraction=self.decay_fraction)

    def __call__(self, step: float) -> float:
        return warmup_stable_decay_lr(step, warmup_steps=self.warmup_steps, decay_start=self.decay_start,
                                      total_steps=self.total_steps, lr_init=self.init_lr_ratio, lr_max=1.0,
                                      lr_min=self.min_lr_ratio, decay_shape=self.decay_shape)


class WarmupCosineLambda(WarmupStableDecay):
    """The paper's baseline schedule (registry entry ``cosine``) as a ``LambdaLR`` multiplier of the optimizer's base LR.

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
        super().__init__(warmup_steps, total_steps, min_lr_ratio, decay_fraction=1.0, decay_shape="cosine",
                         init_lr_ratio=init_lr_ratio, schedule="cosine")

    def __repr__(self) -> str:
        return (f"WarmupCosineLambda(warmup_steps={self.warmup_steps}, total_steps={self.total_steps}, "
                f"min_lr_ratio={self.min_lr_ratio}, init_lr_ratio={self.init_lr_ratio})")


class WSDLambda(WarmupStableDecay):
    """Warmup-stable-decay (registry entry ``wsd``) as a ``LambdaLR`` multiplier of the optimizer's base LR
    (:func:`wsd_lr`).

    ``LambdaLR(optimizer, WSDLambda(warmup_steps, total_steps, min_lr_ratio, decay_fraction, decay_shape))`` gives
    ``wsd_lr(step, lr_init=init_lr_ratio * base_lr, lr_max=base_lr, lr_min=min_lr_ratio * base_lr, ...)``. The growth
    callback recognises it: it reads ``min_lr`` from it exactly (``min_lr_ratio * base_lr``), and the new entries'
    re-warmup then holds its peak and decays with this schedule's decay phase (:func:`rewarmup_wsd_lr`, from
    :attr:`decay_start`, same shape).

    Args:
        warmup_steps: linear warmup length ``T_w``.
        total_steps: ``T`` (the run's ``max_steps``), where the LR reaches ``min_lr_ratio * base_lr``.
        min_lr_ratio: ``eta_min / eta_max``.
        decay_fraction: the share of the run spent decaying, in ``(0, 1]`` (see :func:`wsd_decay_start`).
        decay_shape: ``linear``, ``cosine`` or ``sqrt`` (:data:`DECAY_SHAPES`).
        init_lr_ratio: ``eta_0 / eta_max`` (0: warm up from zero).

    Example::

        >>> f = WSDLambda(warmup_steps=10, total_steps=100, min_lr_ratio=0.1)
        >>> f(0), f(10), f(80), f(90), f(100), f.decay_start
        (0.0, 1.0, 1.0, 0.55, 0.1, 80)
    """

    def __init__(self, warmup_steps: int, total_steps: int, min_lr_ratio: float = 0.1, decay_fraction: float = 0.2,
                 decay_shape: str = "linear", init_lr_ratio: float = 0.0) -> None:
        super().__init__(warmup_steps, total_steps, min_lr_ratio, decay_fraction=decay_fraction,
                         decay_shape=decay_shape, init_lr_ratio=init_lr_ratio, schedule="wsd")

    def __repr__(self) -> str:
        return (f"WSDLambda(warmup_steps={self.warmup_steps}, total_steps={self.total_steps}, "
                f"min_lr_ratio={self.min_lr_ratio}, decay_fraction={self.decay_fraction}, "
                f"decay_shape={self.decay_shape!r}, init_lr_ratio={self.init_lr_ratio})")


def baseline_of(fn: Any) -> WarmupStableDecay | None:
    """The registered schedule a ``LambdaLR`` multiplier is, or ``None`` for any other function (a user's own
    lambda, whose decay the growth callback cannot see)."""
    return fn if isinstance(fn, WarmupStableDecay) else None


def baseline_decay(fn: Any) -> dict[str, Any] | None:
    """What the new entries' re-warmup follows of a baseline multiplier ``fn``: ``{"decay_start": D,
    "decay_shape": shape}`` when it is a registered schedule with a stable phase (the re-warmup then holds its peak and
    decays with it, :func:`rewarmup_wsd_lr`), else ``None`` (the paper's cosine tail, :func:`rewarmup_lr`). The form
    the growth callback checkpoints in its stage record (``lr_decay``)."""
    found = baseline_of(fn)
    if found is None or not found.kind.stable_phase:
        return None
    return {"decay_start": int(found.decay_start), "decay_shape": found.decay_shape}


def scheduler_min_lr(scheduler: Any, group: int) -> float | None:
    """The LR a scheduler reaches at the end of the run for param group ``group``, where it is exact: a ``LambdaLR``
    of a registered schedule (``min_lr_ratio * base_lr``) or a ``CosineAnnealingLR`` (``eta_min``); else ``None``."""
    if isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
        fns = [baseline_of(f) for f in scheduler.lr_lambdas]
        if all(f is not None for f in fns):
            return scheduler.base_lrs[group] * fns[group].min_lr_ratio
        return None
    if isinstance(scheduler, torch.optim.lr_scheduler.CosineAnnealingLR):
        return float(scheduler.eta_min)
    return None


class RewarmupLambda:
    """``rewarmup_lr`` as an absolute-LR lambda of the steps since growth (picklable: ``LambdaLR`` saves its
    ``__dict__`` in checkpoints).

    With ``decay_start`` (the baseline is WSD: :class:`WSDLambda`) it is :func:`rewarmup_wsd_lr` instead: the peak is
    held until ``decay_start``, then decays with ``decay_shape`` to ``min_lr`` at ``total_steps``.

    With ``betas`` (``bias_correction='fresh'``) the LR is multiplied by :func:`fresh_bias_factor` of the update
    about to be taken: ``k = steps_since_growth + 1`` updates of the new entries, ``t = growth_step + k`` of their
    tensor (one optimizer step per global step since the start of training).
    """

    def __init__(self, *, growth_step: int, lr_at_growth: float, ratio: float, warmup_steps: int, total_steps: int,
                 min_lr: float, betas: tuple[float, float] | None = None, decay_start: float | None = None,
                 decay_shape: str = "linear") -> None:
        self.growth_step = int(growth_step)
        self.lr_at_growth = float(lr_at_growth)
        self.ratio = float(ratio)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.min_lr = float(min_lr)
        self.betas = None if betas is None else (float(betas[0]), float(betas[1]))
        self.decay_start = None if decay_start is None else float(decay_start)
        self.decay_shape = str(decay_shape)

    def __call__(self, steps_since_growth: int) -> float:
        kw = dict(growth_step=self.growth_step, lr_at_growth=self.lr_at_growth, ratio=self.ratio,
                  warmup_steps=self.warmup_steps, total_steps=self.total_steps, min_lr=self.min_lr)
        if getattr(self, "decay_start", None) is None:  # getattr: lambdas pickled before WSD existed
            lr = rewarmup_lr(self.growth_step + steps_since_growth, **kw)
        else:
            lr = rewarmup_wsd_lr(self.growth_step + steps_since_growth, **kw, decay_start=self.decay_start,
                                 decay_shape=self.decay_shape)
        if getattr(self, "betas", None) is None:  # getattr: lambdas pickled before the key existed
            return lr
        k = steps_since_growth + 1
        return lr * fresh_bias_factor(k, self.growth_step + k, self.betas)


class NewEntryLRHolder(torch.optim.Optimizer):
    """A parameter-less optimizer whose param groups only *hold* the learning rate of one growth stage's new
    entries: group ``j`` mirrors param group ``j`` of the trained optimizers (flattened in order). Its ``step`` does
    nothing. It exists so that a ``LambdaLR`` (:class:`RewarmupLR`) in ``trainer.lr_scheduler_configs`` is
    stepped, checkpointed and restored by Lightning like any other scheduler, and is visible to
    ``LearningRateMonitor``."""

    def __init__(self, n_groups: int) -> None:
        groups = [{"params": [torch.zeros(0, requires_grad=True)], "lr": 0.0} for _ in range(n_groups)]
        super().__init__(groups, defaults={"lr": 0.0})

    def step(self, closure=None):  # noqa: D102 - holds learning rates only
        return None


class RewarmupLR(torch.optim.lr_scheduler.LambdaLR):
    """The new-entry learning-rate scheduler of one stage: ``LambdaLR`` over a :class:`NewEntryLRHolder` with
    base LR 1 and one :class:`RewarmupLambda` per mirrored param group, so ``holder.param_groups[j]["lr"]`` is
    ``rewarmup_lr(growth_step + last_epoch, ...)`` for that group.

    Example::

        >>> lam = RewarmupLambda(growth_step=10, lr_at_growth=1e-3, ratio=1.3, warmup_steps=5, total_steps=100,
        ...                      min_lr=0.0)
        >>> sched = RewarmupLR([lam])
        >>> sched.optimizer.param_groups[0]["lr"]
        0.001
        >>> for _ in range(5):
        ...     sched.step()
        >>> round(sched.optimizer.param_groups[0]["lr"], 6)
        0.0013
    """

    def __init__(self, lambdas: list[RewarmupLambda]) -> None:
        holder = NewEntryLRHolder(len(lambdas))
        for group in holder.param_groups:
            group["lr"] = 1.0
        super().__init__(holder, lr_lambda=list(lambdas))
        holder._opt_called = True  # the holder never steps: silence torch's "scheduler before optimizer" check

    def lr_for(self, group: int) -> float:
        """The new entries' LR for the next optimizer step, from the lambda (never a stale group value)."""
        return float(self.lr_lambdas[group](self.last_epoch))

    def state_dict(self) -> dict:
        """``LambdaLR``'s state without the lambdas: they are rebuilt from the growth callback's stage record (the
        config) and ``last_epoch`` (the step), never restored from a checkpoint."""
        state = super().state_dict()
        state["lr_lambdas"] = [None] * len(self.lr_lambdas)
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        # checkpoints written before 0.2 hold each lambda's __dict__: ignored, the lambdas given here are the same
        state_dict = {**state_dict, "lr_lambdas": [None] * len(self.lr_lambdas)}
        super().load_state_dict(state_dict)
        # LambdaLR restores last_epoch but not the groups' lr: refresh them (LearningRateMonitor reads them)
        for group, lam in zip(self.optimizer.param_groups, self.lr_lambdas):
            group["lr"] = float(lam(self.last_epoch))
