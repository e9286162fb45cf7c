"""Growth axes as plug-ins: one module per kind of size a stage can grow, read through one protocol.

A stage's sizes fall into *axes*, each a module of this package registered in :func:`registered_axes`:

==========  ===========================================  ==================================================
axis        sizes (``litgpt.Config``)                    kind
==========  ===========================================  ==================================================
``width``   ``n_embd``, ``intermediate_size``,           channels: new rows / columns of existing tensors
            ``moe_intermediate_size``
``heads``   ``n_head``, ``n_query_groups``               channels: new heads laid out in litgpt's fused ``qkv``
``depth``   ``n_layer``                                  structural: new blocks (G_stack, MIDAS)
``experts`` ``n_expert``, ``n_expert_per_token``         structural: new experts; dense -> MoE
==========  ===========================================  ==================================================

An axis says which :class:`~lightning_sparkling.growth.stage.GrowthStage` keys are its own and checks them, refuses
a model it cannot grow, gives the grown ``litgpt.Config`` fields, gives the channel dimensions it grows
(:class:`~lightning_sparkling.growth.plan.AxisChange`\\ s: :meth:`GrowthAxis.dimensions`), plans the tensors it adds
or moves (:meth:`GrowthAxis.plan`) and, when it adds or replaces modules (a *structural* change: depth adds blocks,
experts add experts or turn an MLP into a mixture of experts), rebuilds those modules in
:func:`~lightning_sparkling.growth.surgery.swap_in` and renames what it moves (:meth:`GrowthAxis.carry`). It
describes itself for ``sparkling plan``, the growth log and the summary (:meth:`GrowthAxis.details`,
:meth:`GrowthAxis.describe`, :meth:`GrowthAxis.report`) and gives the copies the symmetry diagnostics watch
(:meth:`GrowthAxis.copy_pairs`). What the measured map calls a stage is the map's vocabulary, not an axis'
(:mod:`lightning_sparkling.pretrain.measured_axes`).

The plan (:func:`~lightning_sparkling.growth.plan.plan_growth`), the surgery, the optimizer patch, every parallel
backend, the callbacks and the summary call the registered axes without naming any of them. The tensors on a growing channel dimension are planned from one table of litgpt's
layout (:func:`~lightning_sparkling.growth.axes.channels.channel_tensors`: which tensor reads or writes which
channels); a tensor of a new module is planned like a new block's (``block_init``, ``source``), so the optimizer
patch, the re-warmup of new entries and resume carry it with no axis-specific code. Adding an axis is its module
and one line in :func:`registered_axes` (``docs/ARCHITECTURE.md``, "Growth axes as plug-ins").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch
import torch.nn as nn


@dataclass
class AxisPlan:
    """What one axis contributes to a :class:`~lightning_sparkling.growth.plan.GrowthPlan`.

    Attributes:
        change: the axis' own description of the growth (kept in ``GrowthPlan.changes[axis.name]``).
        tensors: ``{grown name: TensorPlan}`` of the tensors it adds, moves or grows.
        axes: ``{name: AxisChange}`` of the dimensions it grows (e.g. the router's expert rows).
        replace: ``tensors`` is the whole plan so far, re-keyed (depth: every block tensor under its new position),
            instead of entries added to it.
    """

    change: Any
    tensors: dict = field(default_factory=dict)
    axes: dict = field(default_factory=dict)
    replace: bool = False


@dataclass
class PlanContext:
    """What :func:`~lightning_sparkling.growth.plan.plan_growth` hands every axis' :meth:`GrowthAxis.plan`.

    Attributes:
        config / new_config: litgpt ``Config`` before and after. stage: the (resolved) stage.
        old_model: ``GPT(config)`` on the meta device. old_shapes: its ``{state_dict name: shape}``.
        axes: the channel dimensions that grow (every axis' :meth:`GrowthAxis.dimensions`).
        tensors: the tensor plans so far (channels first, then each axis' in registry order).
        seed / stage_index / tied_embeddings: as given to ``plan_growth``.
    """

    config: Any
    new_config: Any
    stage: Any
    old_model: nn.Module
    old_shapes: dict
    axes: dict
    tensors: dict
    seed: int
    stage_index: int
    tied_embeddings: bool


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

    def active(self, stage) -> bool:
        """Whether ``stage`` grows this axis."""

    def check_stage(self, stage) -> None:
        """Refuse bad values of the axis' own stage keys (no model needed); ``ValueError`` naming key and fix."""

    def check_model(self, config, stage) -> None:
        """Refuse a model this axis cannot grow by ``stage``, before anything changes (``GrowthError``)."""

    def config_values(self, config, stage) -> dict[str, Any]:
        """The ``litgpt.Config`` fields the growth sets."""

    def dimensions(self, config, stage, *, seed: int, stage_index: int) -> tuple[Any, dict]:
        """``(change, {name: AxisChange})``: the channel dimensions the axis grows (before any tensor is planned),
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



class BaseAxis:
    """Defaults of :class:`GrowthAxis`: nothing to check, no fields, dimensions, tensors, modules or copies."""

    name = ""
    sizes: tuple[str, ...] = ()
    structural = False

    @property
    def symmetry_key(self) -> str:
        return self.name

    def active(self, stage) -> bool:
        return any(getattr(stage, size, None) is not None for size in self.sizes)

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


_EXTRA_AXES: list[GrowthAxis] = []


def register_axis(axis: GrowthAxis) -> GrowthAxis:
    """Add ``axis`` to the registry (after the built-in ones): the one line a new axis needs besides its module.

    Raises:
        ValueError: for an axis whose name or sizes an axis already registered has.

    Example::

        >>> class Frozen(BaseAxis):
        ...     name = "frozen"
        >>> axis = register_axis(Frozen())
        >>> [a.name for a in registered_axes()][-1]
        'frozen'
        >>> unregister_axis(axis)
    """
    for known in registered_axes():
        if known.name == axis.name or set(known.sizes) & set(axis.sizes):
            raise ValueError(f"axis {axis.name!r} (sizes {axis.sizes}) clashes with the registered axis {known.name!r} "
                             f"(sizes {known.sizes}); give it its own name and sizes")
    _EXTRA_AXES.append(axis)
    return axis


def unregister_axis(axis: GrowthAxis) -> None:
    """Remove an axis :func:`register_axis` added."""
    _EXTRA_AXES.remove(axis)


def registered_axes() -> tuple[GrowthAxis, ...]:
    """Every axis, in the order plans apply them: the channel axes (their dimensions), then the structural ones,
    then those :func:`register_axis` added."""
    from lightning_sparkling.growth.axes.depth import DEPTH
    from lightning_sparkling.growth.axes.experts import EXPERTS
    from lightning_sparkling.growth.axes.heads import HEADS
    from lightning_sparkling.growth.axes.width import WIDTH

    return (WIDTH, HEADS, DEPTH, EXPERTS, *_EXTRA_AXES)


def active_axes(stage) -> tuple[GrowthAxis, ...]:
    """The axes ``stage`` grows.

    Example::

        >>> from lightning_sparkling.growth.stage import GrowthStage
        >>> [axis.name for axis in active_axes(GrowthStage(10, n_expert=8))]
        ['experts']
        >>> [axis.name for axis in active_axes(GrowthStage(10, n_embd=64, n_layer=8))]
        ['width', 'depth']
    """
    return tuple(axis for axis in registered_axes() if axis.active(stage))


def axis_of_size() -> dict[str, GrowthAxis]:
    """``{litgpt.Config size: the axis that changes it}``."""
    return {size: axis for axis in registered_axes() for size in axis.sizes}


def plugin_sizes() -> dict[str, str]:
    """``{litgpt.Config size: the structural axis that changes it}`` for the sizes outside the stage's width, head
    and layer keys (e.g. ``n_expert``).

    Example::

        >>> plugin_sizes()["n_expert"]
        'experts'
    """
    from lightning_sparkling.growth.stage import SIZE_AXES

    return {size: axis.name for axis in registered_axes() for size in axis.sizes if size not in SIZE_AXES}


def structural_sizes() -> set[str]:
    """The sizes of the axes that add or replace modules (``n_layer``, ``n_expert``, ...)."""
    return {size for axis in registered_axes() if axis.structural for size in axis.sizes}


def plan_axes(plan) -> tuple[GrowthAxis, ...]:
    """The axes a :class:`~lightning_sparkling.growth.plan.GrowthPlan` holds a change of."""
    return tuple(axis for axis in registered_axes() if axis.name in plan.changes)


def describe_changes(plan) -> dict[str, str]:
    """``{axis name: one line}`` for every axis of ``plan`` that describes itself in a line of its own
    (``sparkling plan``, the growth log)."""
    lines = {axis.name: axis.describe(plan) for axis in plan_axes(plan)}
    return {name: line for name, line in lines.items() if line is not None}


def size_details(plan) -> dict[str, str]:
    """``{size: detail}`` of every axis of ``plan`` (the growth log's ``old -> new`` lines)."""
    out: dict[str, str] = {}
    for axis in plan_axes(plan):
        out.update(axis.details(plan))
    return out
