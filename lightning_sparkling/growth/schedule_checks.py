"""The schedule checks a growth needs: a growth inside the WSD decay phase is refused (the CLI) or warned about (the
callback)."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["check_growth_before_decay"]


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
