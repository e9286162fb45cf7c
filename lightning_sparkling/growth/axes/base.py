"""The axis protocol (:class:`GrowthAxis`) and its defaults (:class:`BaseAxis`): what every growth axis (a plug-in,
see :mod:`lightning_sparkling.growth.axes`) gives and what the plan, the surgery, the backends, the callbacks and
the reports call on it.

**Required and optional.** An axis needs a ``name``, its ``sizes`` (``litgpt.Config`` fields) and one way to grow:
:meth:`~GrowthAxis.config_values` (the ``litgpt.Config`` fields it sets: enough for a field that is not a shape, e.g.
``rope_base``), :meth:`~GrowthAxis.dimensions` (channel dimensions of existing tensors) or :meth:`~GrowthAxis.plan`
(tensors of new or moved modules). Everything else is optional: :class:`BaseAxis` gives every member a default that
does nothing, so a subclass writes only what it does. :func:`~lightning_sparkling.growth.axes.register_axis`
refuses an object that lacks a member (e.g. a class that does not subclass :class:`BaseAxis` and forgets
``report``), and :func:`~lightning_sparkling.growth.plan.plan_growth` refuses an active axis whose growth changes
nothing (no config field, no tensor).

**When each member runs.** :meth:`~GrowthAxis.check_stage` runs for every registered axis when a
:class:`~lightning_sparkling.growth.stage.GrowthStage` is built; ``report`` for every registered axis in ``sparkling
plan``. Every other method runs for the axes :meth:`~GrowthAxis.active` in the stage, **each time, whether or not
the axis recorded a change** (``dimensions`` / ``plan`` may return none; an axis reads its record with
``plan.changes.get(self.name)``):

- planning (:func:`~lightning_sparkling.growth.plan.plan_growth`: the CLI's dry run, the callback's setup,
  ``grow_model``): ``check_model``, ``config_values``, ``dimensions``, ``plan``; ``target_key`` for a named target;
- growing (:func:`~lightning_sparkling.growth.surgery.grow_model`): ``finish_tensors``, ``restructure`` (one device;
  the FSDP backends build the grown ``GPT`` from the grown config instead), ``carry`` (for every pre-growth tensor
  name);
- reporting: ``details`` and ``describe`` (the growth log, ``sparkling plan``), ``copy_pairs`` (the symmetry
  diagnostics), ``copies`` (:attr:`GrowthStage.copies <lightning_sparkling.growth.stage.GrowthStage.copies>`).

A plain ``ValueError`` or ``TypeError`` from ``check_stage`` / ``check_model`` is reported as the refusal of the
axis' stage key (a :class:`~lightning_sparkling.growth.errors.StageError` /
:class:`~lightning_sparkling.growth.errors.GrowthError`, the CLI's ``error: growth.stages[k].<key>: ...``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch
import torch.nn as nn

from lightning_sparkling.growth.types import AxisPlan, ChannelChange, PlanContext, PlanLike, StageLike, UndoLog

if TYPE_CHECKING:  # litgpt imports Lightning: named for type checkers only
    from litgpt import Config

__all__ = ["BaseAxis", "GrowthAxis"]


@runtime_checkable
class GrowthAxis(Protocol):
    """One kind of size a stage can grow (see the module docstring: what is required, what is optional, and when
    each member runs); :class:`BaseAxis` gives the defaults."""

    #: the axis' name (``GrowthPlan.changes`` key, the growth log's line, the measured map's category)
    name: str
    #: the ``litgpt.Config`` sizes the axis changes (e.g. ``("n_expert", "n_expert_per_token")``), each a field of
    #: ``litgpt.Config``; the growth log and ``GrowthCallback.summaries`` name their ``old -> new``
    sizes: tuple[str, ...]
    #: whether it adds or replaces modules (depth, experts) rather than channels of existing tensors
    structural: bool
    #: the ``symmetry/stage_k/<key>`` tag of its copied modules (:meth:`copy_pairs`)
    symmetry_key: str
    #: a registered (user's) axis' own :class:`~lightning_sparkling.growth.stage.GrowthStage` keys: a frozen dataclass
    #: of the keys and their defaults, held in ``GrowthStage.extra`` (read with ``stage.get(key)``), or ``None`` (a
    #: built-in axis' keys are fields of ``GrowthStage``)
    stage_keys: type | None

    def active(self, stage: StageLike) -> bool:
        """Whether ``stage`` grows this axis (optional: :class:`BaseAxis` says whether it sets one of
        :attr:`sizes`)."""

    def copies(self, stage: StageLike) -> bool:
        """Whether some of the entries ``stage`` adds on this axis start as copies of old ones (what the symmetry
        diagnostics and ``symmetry_target`` act on; optional: ``False``)."""

    def check_stage(self, stage: StageLike) -> None:
        """Refuse bad values of the axis' own stage keys (no model needed), at every ``GrowthStage(...)``:
        :class:`~lightning_sparkling.growth.errors.StageError` (or a plain ``ValueError``) naming key and fix
        (optional)."""

    def check_model(self, config: Config, stage: StageLike) -> None:
        """Refuse a model this axis cannot grow by ``stage``, before anything changes:
        :class:`~lightning_sparkling.growth.errors.GrowthError` (or a plain ``ValueError``) naming key and fix
        (optional)."""

    def config_values(self, config: Config, stage: StageLike) -> dict[str, Any]:
        """The ``litgpt.Config`` fields the growth sets (each a field of ``litgpt.Config``; optional: ``{}``, but an
        axis that sets none must grow tensors by :meth:`dimensions` or :meth:`plan`)."""

    def dimensions(self, config: Config, stage: StageLike, *, seed: int,
                   stage_index: int) -> tuple[Any, dict[str, ChannelChange]]:
        """``(change, {name: ChannelChange})``: the channel dimensions the axis grows (before any tensor is planned),
        and its record of the change (``None``: recorded by :meth:`plan`, or nothing to record; optional)."""

    def plan(self, ctx: PlanContext) -> AxisPlan | None:
        """The tensors and dimensions of the growth (shapes and sources only, no values); ``None``: nothing beyond
        :meth:`dimensions` (optional)."""

    def finish_tensors(self, plan: PlanLike, grown: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Post-process the grown tensors of a (possibly partial) set, e.g. re-draw some channels (optional:
        ``grown`` as it is)."""

    def restructure(self, swap: UndoLog, model: nn.Module, plan: PlanLike,
                    fresh: Mapping[str, torch.Tensor]) -> None:
        """Add or replace modules of ``model`` (through ``swap``, so a failure restores the model; optional)."""

    def carry(self, plan: PlanLike, name: str) -> str | None | type[NotImplemented]:
        """The grown model's name of pre-growth tensor ``name`` when this axis moves it (``None``: gone), or
        ``NotImplemented`` when it does not move it (optional: ``NotImplemented``)."""

    def copy_pairs(self, plan: PlanLike) -> tuple[tuple[str, str], ...]:
        """``(source, copy)`` tensors, by grown-model name, of new modules that start as copies (what the symmetry
        diagnostics compare); empty when nothing is copied (optional)."""

    def details(self, plan: PlanLike) -> dict[str, str]:
        """``{size: detail}`` printed after each size's ``old -> new`` in the growth log (optional: ``{}``, the
        sizes' ``old -> new`` alone)."""

    def describe(self, plan: PlanLike) -> str | None:
        """One line of its own for ``plan``, the growth log and the summary (``None``: its sizes' ``old -> new``
        say it; optional)."""

    def report(self, plan: PlanLike, stage: StageLike) -> dict[str, Any]:
        """Entries of ``sparkling plan``'s JSON stage report the axis owns (present, ``None``, when inactive;
        optional: ``{}``)."""

    def target_key(self, size: str, stage: StageLike) -> str | None:
        """The stage's own key to name when a size a named target sets (``size``, of this axis) conflicts with it
        (depth: ``depth_map``), or ``None`` (optional)."""


class BaseAxis:
    """Defaults of :class:`GrowthAxis`: nothing to check, no fields, dimensions, tensors, modules or copies. A
    subclass sets ``name`` and ``sizes`` and overrides what it does (see :mod:`.base` for what is required).

    Example::

        >>> import dataclasses
        >>> @dataclasses.dataclass(frozen=True)
        ... class Keys:
        ...     rope_base: int | None = None
        >>> class Rope(BaseAxis):
        ...     name, sizes, stage_keys = "rope", ("rope_base",), Keys
        ...     def config_values(self, config, stage):
        ...         return {"rope_base": stage.get("rope_base")}
        >>> Rope().symmetry_key, Rope().copies(None)
        ('rope', False)
    """

    name = ""
    sizes: tuple[str, ...] = ()
    structural = False
    stage_keys: type | None = None

    @property
    def symmetry_key(self) -> str:
        return self.name

    def active(self, stage: StageLike) -> bool:
        """Whether ``stage`` sets one of :attr:`sizes` (a field, or a key of a registered axis' ``stage_keys``)."""
        return any(_stage_value(stage, size) is not None for size in self.sizes)

    def copies(self, stage: StageLike) -> bool:
        return False

    def check_stage(self, stage: StageLike) -> None:
        return None

    def check_model(self, config: Config, stage: StageLike) -> None:
        return None

    def config_values(self, config: Config, stage: StageLike) -> dict[str, Any]:
        return {}

    def dimensions(self, config: Config, stage: StageLike, *, seed: int,
                   stage_index: int) -> tuple[Any, dict[str, ChannelChange]]:
        return None, {}

    def plan(self, ctx: PlanContext) -> AxisPlan | None:
        return None

    def finish_tensors(self, plan: PlanLike, grown: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return grown

    def restructure(self, swap: UndoLog, model: nn.Module, plan: PlanLike,
                    fresh: Mapping[str, torch.Tensor]) -> None:
        return None

    def carry(self, plan: PlanLike, name: str) -> str | None | type[NotImplemented]:
        return NotImplemented

    def copy_pairs(self, plan: PlanLike) -> tuple[tuple[str, str], ...]:
        return ()

    def details(self, plan: PlanLike) -> dict[str, str]:
        return {}

    def describe(self, plan: PlanLike) -> str | None:
        return None

    def keeps_function(self, plan: PlanLike, model: nn.Module | None = None) -> bool | None:
        """Whether the axis' part of ``plan`` keeps the model's function (the logits): ``True`` kept, ``False``
        changes, ``None`` no claim (the default; or it depends on values only ``model`` holds). What the growth log
        and ``sparkling plan`` say comes from here (:func:`~lightning_sparkling.growth.axes.keeps_function`)."""
        return None

    def report(self, plan: PlanLike, stage: StageLike) -> dict[str, Any]:
        return {}

    def target_key(self, size: str, stage: StageLike) -> str | None:
        """The stage's own key to name when a size a named target sets (``size``, of this axis) conflicts with it
        (depth: ``depth_map``), or ``None``."""
        return None


def _stage_value(stage: StageLike, key: str) -> Any:
    """``stage.get(key)`` (a field or a registered axis' key), ``None`` for a key that is neither."""
    try:
        return stage.get(key)
    except AttributeError:
        return None
