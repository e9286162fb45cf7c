"""The axis protocol (:class:`GrowthAxis`) and its defaults (:class:`BaseAxis`): what every growth axis (a plug-in,
see :mod:`lightning_sparkling.growth.axes`) gives and what the plan, the surgery, the backends, the callbacks and
the reports call on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import torch
import torch.nn as nn

from lightning_sparkling.growth.types import AxisPlan, PlanContext

__all__ = ["BaseAxis", "GrowthAxis"]


@runtime_checkable
class GrowthAxis(Protocol):
    """One kind of size a stage can grow (see the module docstring); :class:`BaseAxis` gives the defaults."""

    name: str
    #: the ``litgpt.Config`` sizes the axis changes (e.g. ``("n_expert", "n_expert_per_token")``)
    sizes: tuple[str, ...]
    #: whether it adds or replaces modules (depth, experts) rather than channels of existing tensors
    structural: bool
    #: the ``symmetry/stage_k/<key>`` tag of its copied modules (:meth:`copy_pairs`)
    symmetry_key: str
    #: a registered (user's) axis' own :class:`~lightning_sparkling.growth.stage.GrowthStage` keys: a frozen dataclass
    #: of the keys and their defaults, held in ``GrowthStage.extra`` (read with ``stage.get(key)``), or ``None`` (a
    #: built-in axis' keys are fields of ``GrowthStage``)
    stage_keys: type | None

    def active(self, stage) -> bool:
        """Whether ``stage`` grows this axis."""

    def copies(self, stage) -> bool:
        """Whether some of the entries ``stage`` adds on this axis start as copies of old ones (what the symmetry
        diagnostics and ``symmetry_target`` act on)."""

    def check_stage(self, stage) -> None:
        """Refuse bad values of the axis' own stage keys (no model needed); ``ValueError`` naming key and fix."""

    def check_model(self, config, stage) -> None:
        """Refuse a model this axis cannot grow by ``stage``, before anything changes (``GrowthError``)."""

    def config_values(self, config, stage) -> dict[str, Any]:
        """The ``litgpt.Config`` fields the growth sets."""

    def dimensions(self, config, stage, *, seed: int, stage_index: int) -> tuple[Any, dict]:
        """``(change, {name: ChannelChange})``: the channel dimensions the axis grows (before any tensor is planned),
        and its record of the change (``None``: recorded by :meth:`plan`, or nothing to record)."""

    def plan(self, ctx: PlanContext) -> AxisPlan | None:
        """The tensors and dimensions of the growth (shapes and sources only, no values); ``None``: nothing beyond
        :meth:`dimensions`."""

    def finish_tensors(self, plan, grown: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Post-process the grown tensors of a (possibly partial) set, e.g. re-draw some channels."""

    def restructure(self, swap, model: nn.Module, plan, fresh: Mapping[str, torch.Tensor]) -> None:
        """Add or replace modules of ``model`` (through ``swap``, so a failure restores the model)."""

    def carry(self, plan, name: str) -> str | None | type[NotImplemented]:
        """The grown model's name of pre-growth tensor ``name`` when this axis moves it (``None``: gone), or
        ``NotImplemented`` when it does not move it."""

    def copy_pairs(self, plan) -> tuple[tuple[str, str], ...]:
        """``(source, copy)`` tensors, by grown-model name, of new modules that start as copies (what the symmetry
        diagnostics compare); empty when nothing is copied."""

    def details(self, plan) -> dict[str, str]:
        """``{size: detail}`` printed after each size's ``old -> new`` in the growth log."""

    def describe(self, plan) -> str | None:
        """One line of its own for ``plan``, the growth log and the summary (``None``: its sizes' details say it)."""

    def report(self, plan, stage) -> dict[str, Any]:
        """Entries of ``sparkling plan``'s JSON stage report the axis owns (present, ``None``, when inactive)."""

    def target_key(self, size: str, stage) -> str | None:
        """The stage's own key to name when a size a named target sets (``size``, of this axis) conflicts with it
        (depth: ``depth_map``), or ``None``."""


class BaseAxis:
    """Defaults of :class:`GrowthAxis`: nothing to check, no fields, dimensions, tensors, modules or copies."""

    name = ""
    sizes: tuple[str, ...] = ()
    structural = False
    stage_keys: type | None = None

    @property
    def symmetry_key(self) -> str:
        return self.name

    def active(self, stage) -> bool:
        """Whether ``stage`` sets one of :attr:`sizes` (a field, or a key of a registered axis' ``stage_keys``)."""
        return any(_stage_value(stage, size) is not None for size in self.sizes)

    def copies(self, stage) -> bool:
        return False

    def check_stage(self, stage) -> None:
        return None

    def check_model(self, config, stage) -> None:
        return None

    def config_values(self, config, stage) -> dict[str, Any]:
        return {}

    def dimensions(self, config, stage, *, seed: int, stage_index: int) -> tuple[Any, dict]:
        return None, {}

    def plan(self, ctx: PlanContext) -> AxisPlan | None:
        return None

    def finish_tensors(self, plan, grown: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return grown

    def restructure(self, swap, model: nn.Module, plan, fresh: Mapping[str, torch.Tensor]) -> None:
        return None

    def carry(self, plan, name: str):
        return NotImplemented

    def copy_pairs(self, plan) -> tuple[tuple[str, str], ...]:
        return ()

    def details(self, plan) -> dict[str, str]:
        return {}

    def describe(self, plan) -> str | None:
        return None

    def report(self, plan, stage) -> dict[str, Any]:
        return {}

    def target_key(self, size: str, stage) -> str | None:
        """The stage's own key to name when a size a named target sets (``size``, of this axis) conflicts with it
        (depth: ``depth_map``), or ``None``."""
        return None


def _stage_value(stage, key: str) -> Any:
    """``stage.get(key)`` (a field or a registered axis' key), ``None`` for a key that is neither."""
    try:
        return stage.get(key)
    except AttributeError:
        return None
