"""Parallelism side of a growth: which strategies can grow, DDP re-wrapping, and FSDP2 (DTensor) growth.

Model surgery (:mod:`lightning_sparkling.growth.surgery`) knows nothing of strategies; the callback calls
:func:`rewrap_after_growth` once the grown model and patched optimizers are in place. FSDP1 lives in
:mod:`lightning_sparkling.parallel.fsdp1`.
"""

from __future__ import annotations

import time

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import (
    DDPStrategy,
    DeepSpeedStrategy,
    FSDPStrategy,
    ModelParallelStrategy,
    SingleDeviceStrategy,
)
from torch.distributed.tensor import DTensor, distribute_tensor

from lightning_sparkling.growth.optim_state import OptimizerPatch, plan_optimizer_patch
from lightning_sparkling.growth.plan import GrowthError, plan_growth
from lightning_sparkling.growth.stage import GrowthStage
from lightning_sparkling.growth.surgery import (
    GrowthResult,
    _Swap,
    clean_name,
    grow_tensors,
)

SUPPORTED_STRATEGIES = (SingleDeviceStrategy, DDPStrategy, ModelParallelStrategy, FSDPStrategy)


def check_strategy_supported(trainer: pl.Trainer) -> None:
    """Refuse, at setup and naming it, a strategy growth cannot handle.

    Supported: one device (CPU or GPU), DDP (``"ddp"``, ``"ddp_spawn"``), FSDP2 through
    ``ModelParallelStrategy`` with ``tensor_parallel_size=1``, and FSDP1 through ``FSDPStrategy`` with
    ``use_orig_params=True``. DeepSpeed and tensor parallelism are refused.
    """
    strategy = trainer.strategy
    if isinstance(strategy, DeepSpeedStrategy):  # a DDPStrategy subclass: refuse it before the DDP check
        raise GrowthError(
            f"strategy {type(strategy).__name__} is not supported by WidthGrowthCallback: DeepSpeed owns the "
            "parameters and optimizer state (ZeRO partitions), so they cannot be grown mid-fit; use strategy='ddp', "
            "FSDP2 via ModelParallelStrategy, or FSDPStrategy(use_orig_params=True)"
        )
    if isinstance(strategy, FSDPStrategy):
        if not strategy.kwargs.get("use_orig_params"):
            raise GrowthError(
                "FSDPStrategy(use_orig_params=False) gives the optimizer flattened parameters that growth cannot "
                "patch: pass FSDPStrategy(use_orig_params=True, ...) and wrap the GPT in configure_model() with "
                "lightning_sparkling.pretrain.module.wrap_gpt"
            )
        return
    if isinstance(strategy, ModelParallelStrategy):
        tp = getattr(strategy, "_tensor_parallel_size", 1)  # "auto" is resolved to the local device count by now
        if tp != 1:
            raise GrowthError(
                f"ModelParallelStrategy(tensor_parallel_size={tp}): tensor parallelism is not supported by "
                "WidthGrowthCallback; use ModelParallelStrategy(data_parallel_size=<devices x nodes>, "
                "tensor_parallel_size=1) for FSDP2"
            )
        return
    if isinstance(strategy, SUPPORTED_STRATEGIES):
        return
    raise GrowthError(
        f"strategy {type(strategy).__name__} is not supported by WidthGrowthCallback: use a single device, "
        "strategy='ddp', FSDP2 via ModelParallelStrategy, or FSDPStrategy(use_orig_params=True) (DeepSpeed and "
        "tensor parallelism cannot be grown mid-fit by this version)"
    )


def rewrap_after_growth(trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
    """Make the strategy see the grown parameters.

    - single device: nothing to do;
    - DDP: DDP registered its gradient hooks on the old Parameters; without a re-wrap nothing errors but ranks
      drift apart. ``configure_ddp`` wraps the LightningModule anew (broadcasting rank 0's parameters in place,
      so optimizer references stay valid).
    """
    strategy = trainer.strategy
    if isinstance(strategy, DDPStrategy):
        strategy.model = pl_module
        strategy.configure_ddp()


# ------------------------------------------------------------------------------------------------ FSDP2 (DTensor)
def is_sharded(model: torch.nn.Module) -> bool:
    """Whether ``model``'s parameters are DTensors (FSDP2 ``fully_shard`` / ``ModelParallelStrategy``)."""
    return any(isinstance(p, DTensor) for p in model.parameters())


def check_sharding_supported(model: torch.nn.Module) -> None:
    """Refuse DTensor layouts other than FSDP2's ``Shard(0)`` over a 1-D mesh (e.g. tensor parallel plans)."""
    for name, p in model.named_parameters():
        if isinstance(p, DTensor) and (p.device_mesh.ndim != 1 or not all(
                pl.is_shard(0) or pl.is_replicate() for pl in p.placements)):
            raise GrowthError(
                f"parameter {name!r} is laid out as {p.placements} on a {p.device_mesh.ndim}-D mesh: only FSDP2 "
                "(fully_shard, Shard(0) on one data-parallel dimension) can be grown; tensor parallel plans cannot"
            )


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
    size, world = param.shape[0], param.device_mesh.size()
    rank = param.device_mesh.get_local_rank()
    chunk = -(-size // world)  # torch.chunk: ceil-sized chunks, the last ones shorter or empty
    start = min(rank * chunk, size)
    stop = min(start + chunk, size)
    rows = piece[0] if piece else slice(None)
    lo = max(rows.start or 0, start)
    hi = min(size if rows.stop is None else rows.stop, stop)
    if hi <= lo:
        return None
    return local, (slice(lo - start, hi - start), *piece[1:])


def _parent_and_attr(root: torch.nn.Module, child: torch.nn.Module) -> tuple[torch.nn.Module, str]:
    for name, module in root.named_modules():
        if module is child and name:
            parent_name, _, attr = name.rpartition(".")
            return root.get_submodule(parent_name), attr
    raise GrowthError("the GPT to grow (or its FSDP1 wrapper) is not a submodule of the LightningModule")


def place_meta_gpt(pl_module: torch.nn.Module, where: torch.nn.Module, old_gpt: torch.nn.Module, config: object,
                   swap: _Swap) -> torch.nn.Module:
    """Build ``GPT(config)`` on the meta device, tied and with the sequence length like ``old_gpt``, and put it in
    ``where``'s place on the LightningModule (the GPT itself under FSDP2, its FSDP1 wrapper under FSDP1), in ``swap``."""
    from litgpt.model import GPT

    parent, attr = _parent_and_attr(pl_module, where)
    with torch.device("meta"):
        new = GPT(config)
    # the dtype of every parameter as in old_gpt (GPT(config) builds in the default dtype: a bf16-true or float64
    # model would otherwise come back float32); FSDP1 and activation checkpointing prefix the names
    dtypes = {clean_name(name): p.dtype for name, p in old_gpt.named_parameters()}
    for name, param in list(new.named_parameters()):
        dtype = dtypes.get(name, param.dtype)
        if dtype != param.dtype:
            owner, _, leaf = name.rpartition(".")
            setattr(new.get_submodule(owner), leaf, torch.nn.Parameter(param.to(dtype), param.requires_grad))
    if old_gpt.lm_head.weight is old_gpt.transformer.wte.weight:
        new.transformer.wte.weight = new.lm_head.weight
    new.max_seq_length = old_gpt.max_seq_length
    swap.set(parent, attr, new)
    return new


def build_sharded_gpt(pl_module: pl.LightningModule, old_gpt: torch.nn.Module, config: object,
                      swap: _Swap) -> torch.nn.Module:
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
            "not sharded yet (see lightning_sparkling.pretrain.module.shard_gpt)"
        )
    new.to_empty(device=device)
    for name, buf in old_gpt.named_buffers():  # RoPE cos/sin: head size and positions do not change
        new.get_buffer(name).copy_(buf)
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
def grow_sharded(pl_module: pl.LightningModule, gpt: torch.nn.Module, stage: GrowthStage, *, seed: int,
                 stage_index: int) -> GrowthResult:
    """FSDP2 growth: build the grown GPT sharded by the module's ``configure_model`` and fill it one block at a
    time from gathered full tensors (peak memory: both sharded models plus one full block, old and grown).

    The new GPT replaces the old one on the LightningModule; ``GrowthResult.rollback()`` puts the old one back.
    """
    reshard(gpt)
    tied = gpt.lm_head.weight is gpt.transformer.wte.weight
    plan = plan_growth(gpt.config, stage, seed=seed, stage_index=stage_index, tied_embeddings=tied)
    swap = _Swap()
    start = time.perf_counter()
    try:
        new = build_sharded_gpt(pl_module, gpt, plan.new_config, swap)
        old_params = dict(gpt.named_parameters())
        new_params = dict(new.named_parameters())
        for names in _param_groups(gpt):
            full = {n: full_tensor(old_params[n].detach()) for n in names}
            grown = grow_tensors(plan, full)
            for n in names:
                value = grown.get(n, full[n])
                target = new_params[n]
                local = shard_like(value, target)
                (target.to_local() if isinstance(target, DTensor) else target.data).copy_(
                    local.to_local() if isinstance(local, DTensor) else local)
            del full, grown
        for n, p in old_params.items():
            new_params[n].requires_grad_(p.requires_grad)
    except BaseException:
        swap.undo()
        raise
    return GrowthResult(plan=plan, old_params=old_params, new_params=new_params,
                        seconds=time.perf_counter() - start, _swap=swap)


@torch.no_grad()
def plan_sharded_optimizer_patch(optimizer: torch.optim.Optimizer, result: GrowthResult,
                                 recipe: str) -> OptimizerPatch:
    """The optimizer patch of an FSDP2 growth: every parameter of the GPT is a new DTensor; per-element state of
    grown parameters is gathered, grown by ``recipe`` and re-sharded like the new parameter, one tensor at a time;
    state of unchanged parameters is carried over as is."""
    return plan_optimizer_patch(optimizer, result, recipe, to_full=full_tensor, like_param=shard_like)
