"""``StageRecord``: the state of one applied growth stage, as the growth callback keeps and checkpoints it.

Pure Python (no torch, no Lightning): the callback writes one at each growth, the new-entry LR rebuilds the stage's
re-warmup from it (:func:`~lightning_sparkling.growth.baselines.record_rewarmup_lambda`), the symmetry loop updates
its boost, and checkpoints hold :meth:`StageRecord.to_dict` (a plain dict of string keys, read back with
:meth:`StageRecord.from_dict`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

_UNSET: Any = object()

GROWTH_STATE_KEY = "GrowthCallback"
"""The key of the growth callback's state in a Lightning checkpoint's ``callbacks`` (``GrowthCallback.state_key``,
the callback's name). Read it with :func:`growth_state`."""


def growth_state(callbacks: Mapping[str, Any] | None) -> Any:
    """The growth callback's state in a checkpoint's ``callbacks`` dict (under :data:`GROWTH_STATE_KEY`); ``None``
    when it holds none.

    Args:
        callbacks: ``checkpoint["callbacks"]`` (``None``: a checkpoint without callback states).

    Example::

        >>> growth_state({"GrowthCallback": {"grown": 2}}), growth_state({"ModelCheckpoint": {}})
        ({'grown': 2}, None)
        >>> growth_state(None) is None
        True
    """
    return (callbacks or {}).get(GROWTH_STATE_KEY)


@dataclasses.dataclass
class StageRecord:
    """One applied stage.

    Args:
        stage_index: the stage's index in the callback's stages.
        global_step: the optimizer steps taken when it grew (``t_e``).
        lr_at_growth: per flat param group (optimizer by optimizer, group by group), the group's LR at the growth.
        min_lr: per flat param group, the LR the new entries' re-warmup decays to (``None``: no re-warmup).
        total_steps: ``trainer.max_steps`` at the growth (``T``).
        betas: per flat param group, Adam's ``betas`` (``bias_correction='fresh'`` only, else ``None``).
        symmetry_boost: the symmetry loop's multiplier of the new entries' LR (1: the schedule only).
        symmetry_done: whether the symmetry loop stopped (``True`` without a ``symmetry_target``).
        lr_decay: per flat param group, the baseline's decay phase the re-warmup follows (``{"decay_start": D,
            "decay_shape": shape}`` under a schedule with a stable phase, else ``None``), or ``None`` when no group
            has one; unset until the stage's re-warmup scheduler is registered (a checkpoint then has no key).

    Example::

        >>> r = StageRecord(0, 10, [1e-3], [1e-5], 100)
        >>> StageRecord.from_dict(r.to_dict()) == r, "lr_decay" in r.to_dict()
        (True, False)
    """

    stage_index: int
    global_step: int
    lr_at_growth: list[float]
    min_lr: list[float] | None
    total_steps: int
    betas: list[list[float]] | None = None
    symmetry_boost: float = 1.0
    symmetry_done: bool = True
    lr_decay: list[dict[str, Any] | None] | None = _UNSET

    @property
    def has_lr_decay(self) -> bool:
        """Whether :attr:`lr_decay` was set (the re-warmup scheduler was registered)."""
        return self.lr_decay is not _UNSET

    def decay_of(self, flat: int) -> dict[str, Any] | None:
        """The baseline decay phase flat param group ``flat``'s re-warmup follows (``None``: the cosine tail)."""
        if not self.has_lr_decay or self.lr_decay is None:
            return None
        return self.lr_decay[flat]

    def to_dict(self) -> dict[str, Any]:
        """The checkpointed form: a plain dict of string keys (``lr_decay`` only once it is set)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "lr_decay"}
        if self.has_lr_decay:
            out["lr_decay"] = self.lr_decay
        return {k: _plain(v) for k, v in out.items()}

    @classmethod
    def from_dict(cls, state: Mapping[str, Any]) -> StageRecord:
        """A record from a checkpoint's dict (:meth:`to_dict`; a key it lacks takes its default)."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: _plain(v) for k, v in state.items() if k in known})


def _plain(value: Any) -> Any:
    """A deep copy of lists and dicts (records are mutated after growth; checkpoints must not share them)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_plain(v) for v in value]
    return value
