"""The types the growth plan and the axes (plug-ins) share: a growing channel dimension (:class:`ChannelChange`), one
grown dimension of a tensor (:class:`DimGrowth`), one tensor's plan (:class:`TensorPlan`), what an axis adds to a
plan (:class:`AxisPlan`), what the plan hands every axis (:class:`PlanContext`), the undo log an axis' ``restructure``
writes through (:class:`UndoLog`), and the names the axes' signatures give a stage and a plan (:data:`StageLike`,
:data:`PlanLike`).

They sit in a module of their own, importing nothing of the package, so that :mod:`~lightning_sparkling.growth.plan`
(which runs the axes) and the axes (which build these) import them without importing each other.

A growing dimension of channels is a *channel dimension* (``docs/ARCHITECTURE.md``'s glossary), never an "axis" (a
growth plug-in).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn as nn

if TYPE_CHECKING:
    from litgpt import GPT


__all__ = ["AxisPlan", "ChannelChange", "DimGrowth", "PlanContext", "PlanLike", "StageLike", "TensorPlan", "UndoLog"]


StageLike = Any
"""A :class:`~lightning_sparkling.growth.stage.GrowthStage` (read its keys by name, a registered axis' own with
``stage.get(key)``). ``growth/stage.py`` imports the axes, and the package has no import cycle, not even for type
checking (``tests/pretrain/test_import_graph.py``), so the axes' signatures name it by this alias."""

PlanLike = Any
"""A :class:`~lightning_sparkling.growth.plan.GrowthPlan` (``plan.stage``, ``plan.changes.get(axis.name)``,
``plan.tensors``, ``plan.channels``, ``plan.old_config`` / ``new_config``), named by this alias for the reason
:data:`StageLike` gives (``growth/plan.py`` imports the axes)."""


@dataclass(frozen=True)
class ChannelChange:
    """One channel dimension that grows in a stage (a width, the heads' ``attn_q`` / ``attn_qkv`` / ``attn_kv``, the
    experts' router rows), shared by every tensor on it.

    Attributes:
        name: ``n_embd``, ``intermediate_size``, ``moe_intermediate_size``, ``shared_expert_size``, ``attn_q``, ...
        old: width before. new: width after.
        alpha: the fan-in scale for the readers of this width.
        src: copy index map, shape ``(new - old,)``: new channel ``old + j`` copies ``src[j]``. Shared by every
            tensor on this width.
        split: ``None`` (even split), or the per-channel multipliers of the even fan-in share, shape ``(new,)``
            (:func:`~lightning_sparkling.growth.scaling.split_shares`), applied on top of ``alpha`` to every copied
            fan-in dimension of this width.
        layout / fresh: for a channel dimension whose old channels move (attention heads in litgpt's fused layout),
            the old channel each new channel takes and which new channels are new entries, shape ``(new,)``; ``None``
            for an appended one (old channels stay at ``0..old-1``, new ones follow and copy ``src``).
    """

    name: str
    old: int
    new: int
    alpha: float
    src: torch.Tensor = field(repr=False)
    split: torch.Tensor | None = field(default=None, repr=False)
    layout: torch.Tensor | None = field(default=None, repr=False)
    fresh: torch.Tensor | None = field(default=None, repr=False)

    def copy_positions(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(new, source)``: the positions of the new channels in the grown tensor and of the channel each copies
        (for the symmetry metric, which reads grown tensors)."""
        if self.layout is None:
            return torch.arange(self.old, self.new), self.src
        assert self.fresh is not None  # set with layout
        kept = torch.full((self.old,), -1, dtype=torch.long)
        kept[self.layout[~self.fresh]] = (~self.fresh).nonzero().flatten()
        new = self.fresh.nonzero().flatten()
        return new, kept[self.layout[new]]

    def kept_positions(self) -> torch.Tensor:
        """For every old channel, its position in the grown tensor."""
        if self.layout is None:
            return torch.arange(self.old)
        assert self.fresh is not None  # set with layout
        kept = torch.full((self.old,), -1, dtype=torch.long)
        kept[self.layout[~self.fresh]] = (~self.fresh).nonzero().flatten()
        return kept


@dataclass(frozen=True)
class DimGrowth:
    """One growing dimension of a tensor: ``dim`` grows along channel dimension ``channel`` (a
    :class:`ChannelChange`'s name) as ``role`` with init ``mode``.

    ``new_runs`` / ``old_runs``: on a channel dimension laid out anew (heads), the ``(start, stop)`` runs of new and of
    old entries along ``dim`` of the grown tensor; ``None`` on an appended one (old ``0..old``, new ``old..new``)."""

    dim: int
    channel: str
    role: str  # "fan_out" | "fan_in"
    mode: str  # "copy" | "random" | "zero"
    new_runs: tuple[tuple[int, int], ...] | None = None
    old_runs: tuple[tuple[int, int], ...] | None = None


@dataclass(frozen=True)
class TensorPlan:
    """How one tensor (a ``state_dict`` entry of the GPT) grows.

    The dimensions in ``dims`` are applied in order (rows before columns), then the whole tensor is multiplied by
    ``scale`` (``alpha`` for fan-in weights, compensation factors for ``scale_embeddings`` / tied embeddings).
    ``unit_offset`` marks a Gemma-style ``RMSNorm`` whose effective weight is ``1 + w``: ``scale`` then applies
    to ``1 + w``.

    Under a depth growth ``name`` is the tensor's name in the grown model and ``source`` the pre-growth tensor it
    derives from (``""``: the same name). A tensor of a *new* block has a ``block_init`` (``copy``: its source's
    values, grown by ``dims`` and ``scale``; ``zero``, ``one``, or ``normal`` with standard deviation ``init_std``)
    and is new as a whole.
    """

    name: str
    old_shape: tuple[int, ...]
    new_shape: tuple[int, ...]
    dims: tuple[DimGrowth, ...]
    scale: float = 1.0
    unit_offset: bool = False
    source: str = ""
    block_init: str | None = None
    init_std: float = 0.0

    @property
    def source_name(self) -> str:
        """The pre-growth tensor this one derives from."""
        return self.source or self.name

    @property
    def fresh(self) -> bool:
        """Whether the tensor belongs to a new block (every entry is new)."""
        return self.block_init is not None

    def new_region(self) -> list[tuple[slice, ...]]:
        """Disjoint rectangular pieces covering the entries that did not exist before the growth.

        For a weight grown on rows and columns this is ``[rows_new, 0:cols_new]`` and ``[0:rows_old, cols_new]``.
        Every slice is an explicit ``start:stop`` range of the grown shape (never an open ``:``), so a region stays
        exactly these entries when a later stage grows the same tensor again: entries a later stage adds belong
        to that stage alone.

        Example::

            >>> plan = TensorPlan("w", (2, 3), (4, 5), (DimGrowth(0, "a", "fan_out", "copy"),
            ...                                        DimGrowth(1, "b", "fan_in", "copy")))
            >>> plan.new_region()
            [(slice(2, 4, None), slice(0, 5, None)), (slice(0, 2, None), slice(3, 5, None))]
        """
        if self.fresh:
            return [tuple(slice(0, size) for size in self.new_shape)]
        new_runs, old_runs = {}, {}
        for d in self.dims:
            new_runs[d.dim] = (d.new_runs if d.new_runs is not None
                               else ((self.old_shape[d.dim], self.new_shape[d.dim]),))
            old_runs[d.dim] = d.old_runs if d.old_runs is not None else ((0, self.old_shape[d.dim]),)
        pieces = []
        grown = sorted(new_runs)
        for k, dim in enumerate(grown):
            choices = [[slice(0, size)] for size in self.new_shape]
            for earlier in grown[:k]:
                choices[earlier] = [slice(a, b) for a, b in old_runs[earlier]]
            choices[dim] = [slice(a, b) for a, b in new_runs[dim]]
            pieces += [tuple(index) for index in itertools.product(*choices)]
        return pieces


@dataclass
class AxisPlan:
    """What one axis contributes to a :class:`~lightning_sparkling.growth.plan.GrowthPlan`.

    Attributes:
        change: the axis' own description of the growth (kept in ``GrowthPlan.changes[axis.name]``).
        tensors: ``{grown name: TensorPlan}`` of the tensors it adds, moves or grows.
        channels: ``{name: ChannelChange}`` of the channel dimensions it grows (e.g. the router's expert rows).
        replace: ``tensors`` is the whole plan so far, re-keyed (depth: every block tensor under its new position),
            instead of entries added to it.
    """

    change: Any
    tensors: dict = field(default_factory=dict)
    channels: dict = field(default_factory=dict)
    replace: bool = False


@dataclass
class PlanContext:
    """What :func:`~lightning_sparkling.growth.plan.plan_growth` hands every axis' :meth:`GrowthAxis.plan`.

    Attributes:
        config / new_config: litgpt ``Config`` before and after. stage: the (resolved) stage.
        old_model: ``GPT(config)`` on the meta device. old_shapes: its ``{state_dict name: shape}``.
        channels: the channel dimensions that grow (every axis' :meth:`GrowthAxis.dimensions`), by name.
        tensors: the tensor plans so far (channels first, then each axis' in registry order).
        seed / stage_index / tied_embeddings: as given to ``plan_growth``.
    """

    config: Any
    new_config: Any
    stage: Any
    old_model: GPT
    old_shapes: dict
    channels: dict
    tensors: dict
    seed: int
    stage_index: int
    tied_embeddings: bool


class UndoLog:
    """Attribute and parameter assignments that can be undone in reverse order: what
    :func:`~lightning_sparkling.growth.surgery.swap_in` and an axis' ``restructure`` write through, so a failure
    restores the model (importable from :mod:`~lightning_sparkling.growth.surgery` as before).

    Example::

        >>> linear = nn.Linear(2, 3)
        >>> swap = UndoLog()
        >>> swap.set(linear, "out_features", 4)
        >>> swap.undo()
        >>> linear.out_features
        3
    """

    def __init__(self) -> None:
        self._log: list[tuple[nn.Module, str, bool, object]] = []

    def set(self, module: nn.Module, attr: str, value: object) -> None:
        if attr in module._parameters:
            self._log.append((module, attr, True, module._parameters[attr]))
            module._parameters[attr] = cast("nn.Parameter | None", value)  # a parameter's slot
        elif attr in module._modules:
            self._log.append((module, attr, False, module._modules[attr]))
            setattr(module, attr, value)
        elif attr in module._buffers:
            self._log.append((module, attr, False, module._buffers[attr]))
            module._buffers[attr] = cast("torch.Tensor | None", value)  # a buffer's slot
        else:
            self._log.append((module, attr, False, module.__dict__[attr]))
            setattr(module, attr, value)

    def undo(self) -> None:
        for module, attr, is_param, old in reversed(self._log):
            if is_param:
                module._parameters[attr] = cast("nn.Parameter | None", old)  # what the slot held
            else:
                setattr(module, attr, old)
        self._log.clear()
