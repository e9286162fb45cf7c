"""When stages grow and what a growth does to the rest of the schedule: ``at_fraction`` -> ``at_step``
(:func:`fraction_step`, :func:`resolve_timing`), the stages' order and sequence rules, the end of the decay after a
growth (:func:`decay_end`) and the new entries' re-warmup window (:func:`rewarmup_window`, :func:`check_rewarmup_fits`).
It reads stages; it imports none (:class:`~lightning_sparkling.growth.stage.GrowthStage` re-exports it all).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

from lightning_sparkling.growth.errors import StageError

StageLike = Any
"""A :class:`~lightning_sparkling.growth.stage.GrowthStage` (which imports this module, so it is named here in
words only)."""

__all__ = ["check_rewarmup_fits", "check_stage_order", "check_stage_sequence", "decay_end", "fraction_step",
           "resolve_timing", "rewarmup_window"]


def fraction_step(fraction: float, max_steps: int) -> int:
    """The growth step of ``at_fraction=fraction`` in a run of ``max_steps`` optimizer steps: ``ceil(fraction *
    max_steps)``, the first step by which at least that fraction of the run has trained (as ``at_tokens`` rounds up),
    the product taken on the decimal value written (``0.07 * 100`` is 7, not the float's 7.000000000000001).

    Example::

        >>> fraction_step(0.07, 100), fraction_step(0.25, 30), fraction_step(1 / 3, 300)
        (7, 8, 100)
    """
    return math.ceil(Fraction(repr(float(fraction))) * max_steps)


def resolve_timing(stages: Sequence[StageLike], max_steps: int | None) -> list[StageLike]:
    """``stages`` with every ``at_fraction`` turned into its ``at_step``
    (:meth:`~lightning_sparkling.growth.stage.GrowthStage.resolved`), then
    checked to grow in strictly increasing step order (:func:`check_stage_order`).

    Raises:
        ValueError: for an ``at_fraction`` without ``max_steps``, or stages out of order once resolved.

    Example::

        >>> from lightning_sparkling.growth.stage import GrowthStage
        >>> [s.at_step for s in resolve_timing([GrowthStage(10, n_embd=64), GrowthStage(at_fraction=0.5,
        ...                                     n_embd=128)], 100)]
        [10, 50]
    """
    resolved = [s.resolved(max_steps) for s in stages]
    check_stage_order(resolved, given=stages)
    return resolved


def check_stage_order(stages: Sequence[StageLike], *, given: Sequence[StageLike] | None = None) -> None:
    """Refuse stages not in strictly increasing ``at_step`` order (stages still holding an ``at_fraction`` are
    skipped: their order is checked once resolved). ``given``: the stages as the user wrote them, for the message.

    Raises:
        ValueError: naming every stage's step (and fraction).
    """
    steps = [s.at_step for s in stages if s.at_step is not None]
    if any(b <= a for a, b in zip(steps, steps[1:])):
        written = [f"{s.at_step} (at_fraction={g.at_fraction})" if g.at_fraction is not None else str(s.at_step)
                   for s, g in zip(stages, given or stages)]
        raise ValueError(f"stages must be in strictly increasing at_step order, got at_step=[{', '.join(written)}]")


def decay_end(stage: StageLike, max_steps: int, growth_step: int | None = None) -> int:
    """The step at which the schedule after a growth reaches its final LR: ``max_steps``, or with
    ``decay_speedup = s`` the earlier ``t_e + max(1, round((1 - s) (max_steps - t_e)))`` (``t_e``: the growth step,
    ``stage.at_step`` unless given).

    Example::

        >>> from lightning_sparkling.growth.stage import GrowthStage
        >>> decay_end(GrowthStage(100, n_embd=128, decay_speedup=0.25), 300)
        250
    """
    t_e = stage.at_step if growth_step is None else growth_step
    if not stage.decay_speedup or max_steps <= t_e:
        return max_steps
    return t_e + max(1, round((1 - stage.decay_speedup) * (max_steps - t_e)))


def check_stage_sequence(stages: StageLike | list[StageLike] | tuple[StageLike, ...]) -> None:
    """Refuse ``rewarmup_scope='all'`` or ``decay_speedup`` on a stage that is not the last one.

    Both redefine the learning rate of every old entry for the rest of the run; a later stage would then need a
    baseline of its own (which LR is "the LR at growth", which end its re-warmup decays to). The paper uses them in
    single-expansion comparisons only.

    Raises:
        ValueError: naming the stage and the key.
    """
    stages = list(stages) if isinstance(stages, (list, tuple)) else [stages]
    for k, stage in enumerate(stages[:-1]):
        if stage.changes_baseline:
            key = "rewarmup_scope" if stage.rewarmup_scope == "all" else "decay_speedup"
            raise StageError(
                f"GrowthStage(at_step={stage.at_step}) {key}={getattr(stage, key)!r}: changes the learning rate of "
                f"every parameter for the rest of the run, so only the last stage may set it (stage {k} of "
                f"{len(stages)} sets it)", key=key, stage=k)


def rewarmup_window(stage: StageLike, max_steps: int) -> tuple[int, int, int] | None:
    """Where a stage's new-entry re-warmup lies in a run of ``max_steps`` optimizer steps.

    Returns ``(warmup_end, tail_steps, steps_left)``: the linear re-warmup covers the optimizer steps taken at
    ``global_step`` ``at_step .. warmup_end - 1``, the cosine tail then runs ``tail_steps`` steps down to ``min_lr``
    at ``max_steps`` (at :func:`decay_end` with ``decay_speedup``); ``steps_left`` = that end ``- at_step``.
    ``None`` when the stage has no re-warmup.

    Example::

        >>> from lightning_sparkling.growth.stage import GrowthStage
        >>> rewarmup_window(GrowthStage(100, n_embd=128, rewarmup_steps=20), 300)
        (120, 180, 200)
    """
    if stage.rewarmup_ratio is None:
        return None
    end = decay_end(stage, max_steps)
    steps_left = end - stage.at_step
    warmup_end = stage.at_step + stage.rewarmup_steps
    return warmup_end, end - warmup_end, steps_left


def check_rewarmup_fits(stages: StageLike | list[StageLike] | tuple[StageLike, ...], max_steps: int,
                        *, names: list[str] | None = None) -> None:
    """Refuse a stage whose re-warmup cannot finish inside the run.

    The new entries of a stage re-warm linearly for ``rewarmup_steps`` steps, then decay by cosine to ``min_lr``
    at ``max_steps``. When ``at_step + rewarmup_steps >= max_steps`` the LR is still climbing (or at its peak)
    at the last step while the old entries have decayed to ``min_lr``: the run ends on a half-done schedule.

    Args:
        stages: the growth stages, in order.
        max_steps: the run's last optimizer step.
        names: how to call each stage in the message (default ``GrowthStage(at_step=...)``), e.g. the config key.

    Raises:
        ValueError: naming the stage, its re-warmup, the steps left and the fix.

    Example::

        >>> from lightning_sparkling.growth.stage import GrowthStage
        >>> check_rewarmup_fits([GrowthStage(100, n_embd=128)], max_steps=300)
        Traceback (most recent call last):
        ...
        lightning_sparkling.growth.errors.StageError: GrowthStage(at_step=100): rewarmup_steps=250 does not fit ...
    """
    stages = list(stages) if isinstance(stages, (list, tuple)) else [stages]
    for k, stage in enumerate(stages):
        window = rewarmup_window(stage, max_steps)
        if window is None:
            continue
        _, tail, left = window
        if tail >= 1:
            continue
        name = names[k] if names else f"GrowthStage(at_step={stage.at_step})"
        # e.g. a tenth of the steps left; with 1 step left only 0 (no ramp) fits, and there is nothing to suggest
        example = f" (e.g. {max(1, left // 10)}, a tenth of the steps left)" if left >= 2 else ""
        faster = f", decay_speedup={stage.decay_speedup}" if stage.decay_speedup else ""
        raise StageError(
            f"{name}: rewarmup_steps={stage.rewarmup_steps} does not fit in the {left} steps left after the growth "
            f"(at_step={stage.at_step}, max_steps={max_steps}{faster}): the new entries' LR would still be rising at "
            f"the last step instead of decaying to min_lr. Set rewarmup_steps to at most {max(0, left - 1)}{example}, "
            f"grow earlier, or raise max_steps", key="rewarmup_steps",
            stage=k,
        )
