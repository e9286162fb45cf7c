"""Growth axes as plug-ins: one module per kind of size a stage can grow, read through one protocol.

A stage's sizes fall into *axes*. An axis says which :class:`~lightning_sparkling.growth.stage.GrowthStage` keys are
its own and checks them, refuses a model it cannot grow, gives the grown ``litgpt.Config`` fields, plans the tensors
it adds or changes (:class:`~lightning_sparkling.growth.plan.TensorPlan`\\ s, and the
:class:`~lightning_sparkling.growth.plan.AxisChange`\\ s of the dimensions that grow), and, when it adds or replaces
modules (a *structural* change: depth adds blocks, experts add experts or turn an MLP into a mixture of experts),
rebuilds those modules in :func:`~lightning_sparkling.growth.surgery.swap_in`. The plan, the surgery and the
optimizer patch call the registered axes without naming any of them; a tensor of a new module is planned like a new
block's (``block_init``, ``source``), so the optimizer patch, the re-warmup of new entries and resume carry it with
no axis-specific code.

Today :mod:`~lightning_sparkling.growth.axes.experts` is the one plug-in; width, heads and depth still live in
:mod:`~lightning_sparkling.growth.plan` and move in later (``docs/ARCHITECTURE.md``, "Growth axes as plug-ins").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import torch
import torch.nn as nn


@dataclass
class AxisPlan:
    """What one plug-in axis contributes to a :class:`~lightning_sparkling.growth.plan.GrowthPlan`.

    Attributes:
        change: the axis' own description of the growth (kept in ``GrowthPlan.changes[axis.name]``).
        tensors: ``{grown name: TensorPlan}`` of the tensors it adds, moves or grows.
        axes: ``{name: AxisChange}`` of the dimensions it grows (e.g. the router's expert rows).
    """

    change: Any
    tensors: dict = field(default_factory=dict)
    axes: dict = field(default_factory=dict)


@runtime_checkable
class GrowthAxis(Protocol):
    """One kind of size a stage can grow (see the module docstring)."""

    name: str
    #: the ``litgpt.Config`` sizes the axis changes, reported by ``size_changes`` (e.g. ``("n_expert", ...)``)
    sizes: tuple[str, ...]

    def active(self, stage) -> bool:
        """Whether ``stage`` grows this axis."""

    def check_stage(self, stage) -> None:
        """Refuse bad values of the axis' own stage keys (no model needed); ``ValueError`` naming key and fix."""

    def check_model(self, config, stage) -> None:
        """Refuse a model this axis cannot grow by ``stage``, before anything changes (``GrowthError``)."""

    def config_values(self, config, stage) -> dict[str, Any]:
        """The ``litgpt.Config`` fields the growth sets."""

    def plan(self, config, new_config, stage, old_model: nn.Module, *, seed: int, stage_index: int) -> AxisPlan:
        """The tensors and dimensions of the growth (shapes and sources only, no values)."""

    def finish_tensors(self, plan, grown: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Post-process the grown tensors of a (possibly partial) set, e.g. re-draw some channels."""

    def restructure(self, swap, model: nn.Module, plan, fresh: Mapping[str, torch.Tensor]) -> None:
        """Add or replace modules of ``model`` (through ``swap``, so a failure restores the model)."""

    def copy_pairs(self, plan) -> tuple[tuple[str, str], ...]:
        """``(source, copy)`` tensors, by grown-model name, of new modules that start as copies (what the symmetry
        diagnostics compare); empty when nothing is copied."""

    def describe(self, plan) -> str:
        """One line for ``plan``, the growth log and the summary."""


def registered_axes() -> tuple[GrowthAxis, ...]:
    """Every plug-in axis, in the order plans apply them."""
    from lightning_sparkling.growth.axes.experts import EXPERTS

    return (EXPERTS,)


def active_axes(stage) -> tuple[GrowthAxis, ...]:
    """The plug-in axes ``stage`` grows.

    Example::

        >>> from lightning_sparkling.growth.stage import GrowthStage
        >>> [axis.name for axis in active_axes(GrowthStage(10, n_expert=8))]
        ['experts']
        >>> active_axes(GrowthStage(10, n_embd=64))
        ()
    """
    return tuple(axis for axis in registered_axes() if axis.active(stage))


def plugin_sizes() -> dict[str, str]:
    """``{litgpt.Config size: the plug-in axis that changes it}``.

    Example::

        >>> plugin_sizes()["n_expert"]
        'experts'
    """
    return {size: axis.name for axis in registered_axes() for size in axis.sizes}


def plan_axes(plan) -> tuple[GrowthAxis, ...]:
    """The plug-in axes a :class:`~lightning_sparkling.growth.plan.GrowthPlan` holds a change of."""
    return tuple(axis for axis in registered_axes() if axis.name in plan.changes)


def describe_changes(plan) -> dict[str, str]:
    """``{axis name: one line}`` for every plug-in axis of ``plan`` (``sparkling plan``, the growth log)."""
    return {axis.name: axis.describe(plan) for axis in plan_axes(plan)}
