"""FSDP2 growth backend (``ModelParallelStrategy`` with ``tensor_parallel_size=1``: ``fully_shard``, DTensors).

There is no API to reshard a ``fully_shard``-ed module to new shapes, so a growth is a round trip: the grown GPT
is built on the meta device where the old one sits, the LightningModule's own ``configure_model`` shards it, and
it is filled one old block at a time from gathered full tensors grown by
:func:`~lightning_sparkling.growth.surgery.grow_tensors` (:func:`grow_sharded`; under a depth growth one old block
fills its kept block, wherever it moved, and every new block copied from it). Optimizer state travels the same
way (:func:`plan_sharded_optimizer_patch`). :class:`FSDP2Backend` is the
:class:`~lightning_sparkling.parallel.base.GrowthBackend` built on these; model surgery itself
(:mod:`lightning_sparkling.growth.surgery`) knows nothing of strategies.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import lightning.pytorch as pl
import torch
from torch.distributed.tensor import DTensor, distribute_tensor

from lightning_sparkling.growth.optim_state import OptimizerPatch, plan_optimizer_patch
from lightning_sparkling.growth.plan import GrowthError, checked_plan
from lightning_sparkling.growth.stage import GrowthStage
from lightning_sparkling.growth.surgery import (
    GrowthResult,
    UndoLog,
    derived_buffers,
    grow_tensors,
    is_tied,
)
from lightning_sparkling.parallel.base import (
    ShardedBackend,
    grown_values,
    place_meta_gpt,
    rebuilt_result_params,
)

if TYPE_CHECKING:
    from litgpt import GPT

    from lightning_sparkling.growth.plan import GrowthPlan


# ------------------------------------------------------------------------------------------------ FSDP2 (DTensor)
def is_sharded(model: torch.nn.Module) -> bool:
    """Whether ``model``'s parameters are DTensors (FSDP2 ``fully_shard`` / ``ModelParallelStrategy``)."""
    return any(isinstance(p, DTensor) for p in model.parameters())


def reshard(model: torch.nn.Module) -> None:
    """Return every FSDP2 module of ``model`` to its sharded parameters. After a forward without backward (the
    post-growth loss check) FSDP2 keeps the root's parameters unsharded, and ``named_parameters()`` would then
    not give the DTensors the optimizer holds."""
    from torch.distributed.fsdp import FSDPModule

    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.reshard()


def full_tensor(t: torch.Tensor) -> torch.Tensor:
    """The whole tensor on every rank (a collective for DTensors; the tensor itself otherwise)."""
    return t.full_tensor() if isinstance(t, DTensor) else t


def shard_like(full: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``full`` (identical on every rank) laid out like the DTensor ``like``: each rank keeps its own shard, no
    communication. A plain ``like`` gives ``full`` on its device and dtype."""
    full = full.to(device=like.device, dtype=like.dtype)
    if isinstance(like, DTensor):
        return distribute_tensor(full, like.device_mesh, like.placements, src_data_rank=None)
    return full


def local_piece(param: torch.Tensor, piece: tuple[slice, ...]) -> tuple[torch.Tensor, tuple[slice, ...]] | None:
    """Map a slice of the *global* tensor to ``(local tensor, local slice)`` of this rank's shard, or ``None``
    when this rank holds none of it. Plain tensors map to themselves. FSDP2 shards dim 0 in ``torch.chunk``
    order (``Shard(0)`` on a 1-D mesh); other layouts are refused."""
    if not isinstance(param, DTensor):
        return param.data, piece
    local = param.to_local()
    placements = param.placements
    if len(placements) != 1 or not (placements[0].is_shard(0) or placements[0].is_replicate()):
        raise GrowthError(f"new-entry learning rate: unsupported DTensor layout {placements} (FSDP2 Shard(0) only)")
    if placements[0].is_replicate():
        return local, piece
    found = shard0_piece(param.shape[0], param.device_mesh.size(), param.device_mesh.get_local_rank(), piece)
    return None if found is None else (local, found)


def shard0_piece(size: int, world: int, rank: int, piece: tuple[slice, ...]) -> tuple[slice, ...] | None:
    """The part of the global slice ``piece`` (rows: a ``start:stop`` slice or ``:``) that rank ``rank`` of
    ``world`` holds when dim 0 (``size`` rows) is split in ``torch.chunk`` order (FSDP2's ``Shard(0)``), as a
    slice of its local shard; ``None`` when it holds none of it.

    Example::

        >>> shard0_piece(49, 2, 1, (slice(20, 30), slice(0, 4)))  # rank 1 holds rows 25..48
        (slice(0, 5, None), slice(0, 4, None))
    """
    chunk = -(-size // world)  # torch.chunk: ceil-sized chunks, the last ones shorter or empty
    start = min(rank * chunk, size)
    stop = min(start + chunk, size)
    rows = piece[0] if piece else slice(None)
    lo = max(rows.start or 0, start)
    hi = min(size if rows.stop is None else rows.stop, stop)
    if hi <= lo:
        return None
    return (slice(lo - start, hi - start), *piece[1:])


def build_sharded_gpt(pl_module: pl.LightningModule, old_gpt: torch.nn.Module, config: object,
                      swap: UndoLog) -> torch.nn.Module:
    """Put a ``GPT(config)`` built on the meta device where ``old_gpt`` sits, let the module's own
    ``configure_model`` shard it, then allocate the local shards (``to_empty``) and copy the non-persistent
    buffers (RoPE cache) from ``old_gpt``. Values are uninitialized: the caller fills them."""
    device = next(iter(old_gpt.buffers())).device
    new = place_meta_gpt(pl_module, old_gpt, old_gpt, config, swap)
    pl_module.configure_model()
    if not is_sharded(new):
        raise GrowthError(
            "after growth, the LightningModule's configure_model() did not shard the new GPT; under "
            "ModelParallelStrategy configure_model must fully_shard self.model (and its blocks) whenever they are "
            "not sharded yet (see lightning_sparkling.parallel.shard_gpt)"
        )
    new.to_empty(device=device)
    for name, buf in old_gpt.named_buffers():  # RoPE cos/sin: head size and positions do not change
        target = new.get_buffer(name)
        if target.shape == buf.shape:  # a grown buffer (a router's score correction) is filled by the growth
            target.copy_(buf)
    with torch.no_grad():
        for name, value in derived_buffers(new, old_gpt.config).items():  # an axis changed e.g. rope_base
            new.get_buffer(name).copy_(value)
    return new


def _param_groups(gpt: torch.nn.Module) -> list[list[str]]:
    """Parameter names grouped by block (``transformer.h.i``) and the rest: the unit gathered at a time."""
    groups: dict[str, list[str]] = {}
    for name, _ in gpt.named_parameters():
        parts = name.split(".")
        key = ".".join(parts[:3]) if name.startswith("transformer.h.") else name
        groups.setdefault(key, []).append(name)
    return list(groups.values())


@torch.no_grad()
def grow_sharded(pl_module: pl.LightningModule, gpt: GPT, stage: GrowthStage, *, seed: int,
                 stage_index: int, plan: GrowthPlan | None = None) -> GrowthResult:
    """FSDP2 growth: build the grown GPT sharded by the module's ``configure_model`` and fill it one old block at a
    time from gathered full tensors (peak memory: both sharded models plus one full old block and what grows from
    it: its grown self and, under a depth growth, its new copies).

    Every parameter of the new GPT is a new DTensor: ``old_params`` / ``new_params`` pair each kept tensor (by its
    grown name) with its predecessor, ``added`` each new block's tensor with its source's old DTensor. The new GPT
    replaces the old one on the LightningModule; ``GrowthResult.rollback()`` puts the old one back.
    """
    reshard(gpt)
    tied = is_tied(gpt)
    plan = checked_plan(plan, gpt.config, stage, seed=seed, stage_index=stage_index, tied_embeddings=tied)
    swap = UndoLog()
    start = time.perf_counter()
    try:
        new = build_sharded_gpt(pl_module, gpt, plan.new_config, swap)
        old_named = dict(gpt.named_parameters())
        new_named = dict(new.named_parameters())
        filled: set[str] = set()
        for names in _param_groups(gpt):
            full = {n: full_tensor(old_named[n].detach()) for n in names}
            for name, value in grown_values(plan, full).items():
                target = new_named.get(name)
                if target is None:
                    continue  # the second name of a tied weight: one Parameter, filled under the first
                local = shard_like(value, target)
                (target.to_local() if isinstance(target, DTensor) else target.data).copy_(
                    local.to_local() if isinstance(local, DTensor) else local)
                filled.add(name)
            del full
        buffers = {name: buf for name, buf in gpt.named_buffers() if name in plan.tensors}
        for name, value in grow_tensors(plan, buffers).items():  # persistent buffers a plan grows
            new.get_buffer(name).copy_(value)
        missing = sorted(set(new_named) - filled)
        if missing:
            raise GrowthError(f"FSDP2 growth left parameters of the grown GPT unfilled: {missing[:6]}")
        old_params, new_params, added = rebuilt_result_params(plan, old_named, new_named)
    except BaseException:
        swap.undo()
        raise
    return GrowthResult(plan=plan, old_params=old_params, new_params=new_params, added=added,
                        order=tuple(new.parameters()), seconds=time.perf_counter() - start, _swap=swap)


@torch.no_grad()
def plan_sharded_optimizer_patch(optimizer: torch.optim.Optimizer, result: GrowthResult,
                                 recipe: str) -> OptimizerPatch:
    """The optimizer patch of an FSDP2 growth: every parameter of the GPT is a new DTensor; per-element state of
    grown parameters is gathered, grown by ``recipe`` and re-sharded like the new parameter, one tensor at a time;
    state of unchanged parameters is carried over as is. A depth growth's new-block parameters join their source's
    param group with state grown from the source's (gathered too).

    Gathering is a collective: every rank walks the same param groups and ``result.added`` (built from the new
    GPT's ``named_parameters()``) in the same order, and every rank holds state for every DTensor parameter (an
    empty local shard has empty state tensors), so the ranks gather alike."""
    return plan_optimizer_patch(optimizer, result, recipe, to_full=full_tensor, like_param=shard_like)


# ------------------------------------------------------------------------------------------------ the backend
class FSDP2Backend(ShardedBackend):
    """FSDP2 through ``ModelParallelStrategy``: the module's ``configure_model`` must ``fully_shard`` ``self.model``
    (its blocks, then the GPT) whenever they are not sharded yet, so that it can shard the grown GPT too
    (:func:`lightning_sparkling.parallel.shard_gpt` does). A GPT that ``configure_model`` left unsharded is
    grown in place, as on one device.

    Example::

        trainer = L.Trainer(strategy=ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1), ...)
        select_backend(trainer.strategy)  # FSDP2Backend()
    """

    name = "fsdp2"
    compile_per_block = True

    @classmethod
    def accepts(cls, strategy: Any) -> bool:
        from lightning.pytorch.strategies import ModelParallelStrategy

        return isinstance(strategy, ModelParallelStrategy)

    @classmethod
    def make_strategy(cls, world_size: int) -> Any:
        from lightning.pytorch.strategies import ModelParallelStrategy

        return ModelParallelStrategy(data_parallel_size=world_size, tensor_parallel_size=1)

    @classmethod
    def prepare_model(cls, pl_module: pl.LightningModule, gpt: torch.nn.Module) -> torch.nn.Module:
        from lightning_sparkling.parallel.sharding import shard_gpt

        return gpt if pl_module.device_mesh is None else shard_gpt(gpt, pl_module.device_mesh)

    @classmethod
    def check_strategy(cls, strategy: Any) -> None:
        tp = getattr(strategy, "_tensor_parallel_size", 1)  # "auto" is resolved to the local device count by now
        if tp != 1:
            raise GrowthError(
                f"ModelParallelStrategy(tensor_parallel_size={tp}): tensor parallelism is not supported by "
                "GrowthCallback; use ModelParallelStrategy(data_parallel_size=<devices x nodes>, "
                "tensor_parallel_size=1) for FSDP2"
            )

    def grow(self, trainer: pl.Trainer, pl_module: pl.LightningModule, gpt: torch.nn.Module, stage: GrowthStage, *,
             seed: int, stage_index: int, plan: GrowthPlan | None = None) -> GrowthResult:
        if not is_sharded(gpt):  # in place, as on one device
            return super().grow(trainer, pl_module, gpt, stage, seed=seed, stage_index=stage_index, plan=plan)
        return grow_sharded(pl_module, gpt, stage, seed=seed, stage_index=stage_index, plan=plan)

    def plan_optimizer_patch(self, optimizer: torch.optim.Optimizer, result: GrowthResult,
                             recipe: str) -> OptimizerPatch:
        if any(isinstance(p, DTensor) for p in result.new_params.values()):
            return plan_sharded_optimizer_patch(optimizer, result, recipe)
        return super().plan_optimizer_patch(optimizer, result, recipe)

    def reshard(self, pl_module: pl.LightningModule, gpt: torch.nn.Module) -> None:
        if is_sharded(gpt):
            reshard(gpt)

    def new_entry_pieces(self, pl_module: pl.LightningModule,
                         gpt: torch.nn.Module) -> Callable[[torch.Tensor, Sequence[tuple[slice, ...]]], list]:
        return lambda param, pieces: [lp for lp in (local_piece(param, piece) for piece in pieces) if lp is not None]

    def full_tensors(self, pl_module: pl.LightningModule, gpt: torch.nn.Module,
                     names: Iterable[str]) -> Iterator[tuple[str, torch.Tensor]]:
        self.reshard(pl_module, gpt)
        params = dict(gpt.named_parameters(remove_duplicate=False))  # tied: wte and lm_head both by name
        return ((name, full_tensor(params[name].detach())) for name in names)

    def rebuild(self, trainer: pl.Trainer, pl_module: pl.LightningModule, gpt: torch.nn.Module,
                config: object) -> None:
        build_sharded_gpt(pl_module, gpt, config, UndoLog())
