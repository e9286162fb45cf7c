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
from typing import Any

import torch

from lightning_sparkling.growth.bias_correction import fresh_bias_factor
from lightning_sparkling.growth.lr_formulas import (
    DECAY_SHAPES,
    WSD_DECAY_SHAPES,
    _check_wsd,
    rewarmup_lr,
    rewarmup_wsd_lr,
    warmup_cosine_lr,
    warmup_stable_decay_lr,
    wsd_decay_start,
    wsd_lr,
)
from lightning_sparkling.growth.rewarmup_schedule import RewarmupHolder, RewarmupLambda, RewarmupLR
from lightning_sparkling.growth.schedule_checks import check_growth_before_decay

__all__ = ["DECAY_SHAPES", "SCHEDULES", "WSD_DECAY_SHAPES", "RewarmupHolder", "RewarmupLR", "RewarmupLambda",
           "ScheduleKind", "WSDLambda", "WarmupCosineLambda", "WarmupStableDecay", "baseline_decay", "baseline_of",
           "build_schedule", "check_growth_before_decay", "fresh_bias_factor", "rewarmup_lr", "rewarmup_wsd_lr",
           "schedule_kind", "scheduler_min_lr", "warmup_cosine_lr", "warmup_stable_decay_lr", "wsd_decay_start",
           "wsd_lr"]


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
    """The paper's baseline schedule (registry entry ``cosine``) as a ``LambdaLR`` multiplier of the base LR.

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
        fn = fns[group]
        if fn is not None and all(f is not None for f in fns):
            return float(scheduler.base_lrs[group]) * fn.min_lr_ratio
        return None
    if isinstance(scheduler, torch.optim.lr_scheduler.CosineAnnealingLR):
        return float(scheduler.eta_min)
    return None
