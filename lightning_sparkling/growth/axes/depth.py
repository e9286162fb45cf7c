"""The depth axis: ``n_layer`` (G_stack, MIDAS; prts's layer maps). Which old block each block of the grown model
comes from, and how a new block starts, is :mod:`~lightning_sparkling.growth.depth_maps` (pure functions of integers and
names); this plug-in turns it into tensor plans (every block tensor under its new position, a new block's with
``block_init``), new ``Block`` modules, and the names of kept blocks that move.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn as nn

from lightning_sparkling.growth.axes.base import BaseAxis
from lightning_sparkling.growth.axes.registry import register_axis
from lightning_sparkling.growth.axes.width import check_larger, check_positive_sizes
from lightning_sparkling.growth.depth_maps import (
    DEPTH_INITS,
    DEPTH_ORDERS,
    DEPTH_SIZE_KEY,
    DepthChange,
    block_name,
    depth_change,
    depth_config_values,
    describe_depth,
    fresh_block_init,
    litgpt_init_std,
    split_block_name,
)
from lightning_sparkling.growth.depth_scaling import branch_factor, check_depth_scaling, scale_branch_outputs
from lightning_sparkling.growth.errors import GrowthError, StageError, check_choice
from lightning_sparkling.growth.types import AxisPlan, PlanContext, TensorPlan


def place_blocks(width: dict, old_shapes: dict[str, tuple[int, ...]], depth: DepthChange, init_std: float) -> dict:
    """The per-tensor plans of a stage with a depth change: ``width`` (the channel plans, by pre-growth name) for
    tensors outside the blocks; for every block tensor of the grown model, its source's channel plan (or an unchanged
    one) under its new name, with ``block_init`` set for a new block's tensors. Blocks that neither move nor grow
    are left out, as for a width growth."""
    tensors = {name: spec for name, spec in width.items() if split_block_name(name) is None}
    by_block: dict[int, list[str]] = {}
    for name in old_shapes:
        found = split_block_name(name)
        if found is not None:
            by_block.setdefault(found[0], []).append(found[1])
    for position, (index, fresh) in enumerate(zip(depth.source, depth.fresh)):
        for rest in by_block[index]:
            old = block_name(index, rest)
            new = block_name(position, rest)
            spec = width.get(old) or TensorPlan(old, old_shapes[old], old_shapes[old], ())
            if fresh:
                how = fresh_block_init(rest, len(spec.new_shape), depth.init)
                tensors[new] = dataclasses.replace(spec, name=new, source=old, block_init=how,
                                                   init_std=init_std if how == "normal" else 0.0)
            elif new != old or old in width:
                tensors[new] = dataclasses.replace(spec, name=new, source=old if new != old else "")
    return tensors


def check_depth_map_key(stage) -> None:
    """Refuse a ``depth_map`` that is not a list of old-block indices in first-occurrence order, or that contradicts
    ``depth_order`` / ``n_layer``; store it as a tuple and set ``n_layer`` from its length."""
    given = stage.depth_map
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence) or not given or any(
            isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in given):
        raise StageError(f"GrowthStage(depth_map={given!r}): must be a non-empty list of old-block indices "
                         "(integers >= 0), one per block of the grown model, e.g. [0, 1, 0, 1]",
                         key="depth_map")
    depth_map = tuple(given)
    object.__setattr__(stage, "depth_map", depth_map)  # a list from YAML / JSON: a tuple, so stages compare
    seen = 0
    for j, i in enumerate(depth_map):
        if i > seen:
            raise StageError(f"GrowthStage(depth_map={list(depth_map)}): position {j} holds old block {i} before old "
                             f"block {seen} first appears; the first occurrence of each old block must come in order "
                             "0, 1, 2, ... (it is the old block itself, later ones are its copies, and old blocks keep "
                             "their order), e.g. [0, 1, 0, 1] (stack) or [0, 0, 1, 1] (interleave)", key="depth_map")
        seen += i == seen
    if stage.depth_order != "stack":
        raise StageError(f"GrowthStage(depth_map={list(depth_map)}, depth_order={stage.depth_order!r}): give one "
                         "of them; the map says where every block goes (drop depth_order)",
                         key="depth_map")
    if stage.model_name is not None or stage.model_config is not None:
        return  # the target sets n_layer; the map's length is checked against it when planned
    if stage.n_layer is None:
        object.__setattr__(stage, "n_layer", len(depth_map))
    elif stage.n_layer != len(depth_map):
        raise StageError(f"GrowthStage(depth_map={list(depth_map)}, n_layer={stage.n_layer!r}): the map has "
                         f"{len(depth_map)} entries, one per block of the grown model; give n_layer="
                         f"{len(depth_map)} or leave n_layer out", key="n_layer")


class DepthAxis(BaseAxis):
    """The depth plug-in (:class:`~lightning_sparkling.growth.axes.GrowthAxis`)."""

    name = "depth"
    sizes = (DEPTH_SIZE_KEY,)
    structural = True
    symmetry_key = DEPTH_SIZE_KEY

    def target_key(self, size: str, stage) -> str | None:
        return "depth_map" if stage.depth_map is not None else None

    def check_stage(self, stage) -> None:
        """The depth keys: a ``depth_map`` (which sets ``n_layer`` from its length), a positive ``n_layer``, a known
        ``depth_init``, ``depth_order`` and ``depth_scaling``."""
        if stage.depth_map is not None:
            check_depth_map_key(stage)
        check_positive_sizes(stage, self.sizes, "a layer count")
        check_choice("depth_init", stage.depth_init, DEPTH_INITS)
        check_choice("depth_order", stage.depth_order, DEPTH_ORDERS)
        check_depth_scaling(stage)  # one of DEPTH_SCALINGS, not with an experts growth in the same stage

    def copies(self, stage) -> bool:
        """New blocks copied from old ones (``depth_init`` ``copy`` or ``copy-zero``)."""
        return stage.n_layer is not None and stage.depth_init.startswith("copy")

    def check_model(self, config, stage) -> None:
        check_larger(config, stage, self.sizes)
        if stage.depth_scaling != "none" and (config.post_attention_norm or config.post_mlp_norm):
            raise GrowthError(f"GrowthStage(depth_scaling={stage.depth_scaling!r}) on a model with post-branch "
                              "norms (post_attention_norm / post_mlp_norm): the branch output is normalized after "
                              "its projection, so scaling the projection does not scale the branch; use "
                              "depth_scaling none", key="depth_scaling")

    def change(self, config, stage) -> DepthChange:
        return depth_change(config.n_layer, stage.n_layer, stage.depth_order, stage.depth_init, stage.depth_map)

    def config_values(self, config, stage) -> dict[str, Any]:
        """``n_layer`` and the per-block lists, each block taking its source's
        (:func:`~lightning_sparkling.growth.depth_maps.depth_config_values`).

        Raises:
            GrowthError: keyed by ``depth_map`` / ``depth_order`` / ``n_layer`` where the order does not fit.
        """
        try:
            return depth_config_values(config, self.change(config, stage))
        except ValueError as err:  # a StageError names its key (depth_map, depth_order, n_layer)
            raise GrowthError(str(err), key=getattr(err, "key", None)) from err

    def plan(self, ctx: PlanContext) -> AxisPlan:
        """Every block tensor under its new position; a new block's tensors start from their source by
        ``depth_init`` (``normal`` draws with litgpt's init std of the grown width)."""
        depth = self.change(ctx.config, ctx.stage)
        tensors = place_blocks(ctx.tensors, ctx.old_shapes, depth, litgpt_init_std(ctx.new_config.n_embd))
        factor = branch_factor(depth.old, depth.new, ctx.stage.depth_scaling)
        if factor != 1.0:  # depth_scaling: every block's output projections, kept blocks in place too
            shapes = {name: spec.new_shape for name, spec in tensors.items()}
            in_place = {i for i, j in depth.kept_position.items() if i == j}  # blocks that keep their name
            for name, shape in ctx.old_shapes.items():
                found = split_block_name(name)
                if found is not None and found[0] in in_place and name not in shapes:
                    shapes[name] = shape
            tensors = scale_branch_outputs(tensors, shapes, factor)
        return AxisPlan(change=depth, tensors=tensors, replace=True)

    def restructure(self, swap, model: nn.Module, plan, fresh: Mapping[str, torch.Tensor]) -> None:
        """A new ``transformer.h`` holding the kept blocks (same module objects, ``block_idx`` set to their new
        position) and new ``Block(grown config, j)`` modules filled with ``fresh`` (new ``Parameter``\\ s; buffers
        copied from the source block)."""
        from litgpt.model import Block

        depth: DepthChange = plan.changes[self.name]
        old_blocks = list(model.transformer.h)
        old_params = dict(model.named_parameters())  # by pre-growth name: what a new block's tensors start from
        blocks = []
        for j, (index, is_new) in enumerate(zip(depth.source, depth.fresh)):
            source = old_blocks[index]
            if not is_new:
                for module in source.modules():
                    if "block_idx" in module.__dict__ and module.block_idx != j:
                        swap.set(module, "block_idx", j)
                blocks.append(source)
                continue
            with torch.device("meta"):
                block = Block(plan.new_config, j)
            source_params = dict(source.named_parameters())
            for name, param in list(block.named_parameters()):
                owner, _, attr = name.rpartition(".")
                spec = plan.tensors.get(f"transformer.h.{j}.{name}")
                # the tensor it starts from (a new expert: its source expert of the source block), else the source
                # block's tensor of that name, else (a module neither has) its own flag
                like = old_params.get(spec.source_name) if spec is not None else None
                like = like if like is not None else source_params.get(name, param)
                value = fresh[f"transformer.h.{j}.{name}"]
                block.get_submodule(owner)._parameters[attr] = nn.Parameter(value, requires_grad=like.requires_grad)
            for name, buffer in source.named_buffers():
                owner, _, attr = name.rpartition(".")
                block.get_submodule(owner)._buffers[attr] = buffer.clone()
            blocks.append(block)
        swap.set(model.transformer, "h", nn.ModuleList(blocks))

    def carry(self, plan, name: str):
        """A kept block's tensor under its new position (``None`` for a block index the model lacks)."""
        found = split_block_name(name)
        if found is None:
            return NotImplemented
        position = plan.changes[self.name].kept_position.get(found[0])
        return None if position is None else block_name(position, found[1])

    def copy_pairs(self, plan) -> tuple[tuple[str, str], ...]:
        """``(source block's tensor, new block's copy)`` of every weight matrix of a copied new block (by grown
        name: the source is the kept block at its new position; new modules of kept blocks, e.g. experts added in the
        same stage, are another axis' copies)."""
        copies = plan.changes[self.name].copies()
        pairs = []
        for name, spec in plan.tensors.items():
            found = split_block_name(name)
            if spec.block_init == "copy" and len(spec.new_shape) >= 2 and found is not None and found[0] in copies:
                pairs.append((block_name(copies[found[0]], found[1]), name))
        return tuple(pairs)

    def keeps_function(self, plan, model=None) -> bool | None:
        """Kept when every new block adds nothing (``copy-zero`` / ``random-zero``: output projections zeroed; the
        old blocks keep their order) and no ``depth_scaling`` rescales the old ones; ``copy`` adds a block's output a
        second time."""
        return plan.stage.depth_init != "copy" and plan.stage.depth_scaling == "none"

    def details(self, plan) -> dict[str, str]:
        """E.g. ``{"n_layer": "stack, copy-zero: new 4<-0, 5<-1, 6<-2, 7<-3"}``."""
        depth: DepthChange = plan.changes[self.name]
        return {DEPTH_SIZE_KEY: f"{depth.order}, {depth.init}: {describe_depth(depth)}"}

    def report(self, plan, stage) -> dict[str, Any]:
        depth = plan.changes.get(self.name)
        if depth is None:
            return {"depth": None}
        return {"depth": {"order": depth.order, "init": stage.depth_init, "map": describe_depth(depth),
                          "source": list(depth.source), "scaling": stage.depth_scaling,
                          "branch_factor": branch_factor(depth.old, depth.new, stage.depth_scaling)}}


DEPTH = register_axis(DepthAxis())
"""The registered depth axis."""
