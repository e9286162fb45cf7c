"""FSDP1 side of a growth (``FSDPStrategy`` with ``use_orig_params=True``).

Under FSDP1 each wrapped unit (a ``FullyShardedDataParallel`` instance: every block, and the GPT itself for the
embedding, final norm and head) flattens the original parameters it owns into one ``FlatParameter`` and keeps
an even 1-D shard of it per rank. With ``use_orig_params=True`` the original ``Parameter`` objects stay (the
optimizer holds them) and, outside forward/backward, are 1-D views of this rank's piece of their flattened
values; their optimizer state has the same 1-D shape.

There is no API to reshard an FSDP1 unit to new shapes, so a growth is a round trip, one unit at a time
(peak memory: the sharded old and new models plus one unit gathered, old and grown):

1. a ``GPT(grown config)`` is built on the meta device where the old wrapped GPT sits and the LightningModule's
   own ``configure_model`` wraps it (inside ``strategy.model_sharded_context()``, as Lightning calls it); FSDP
   materializes it unit by unit;
2. per old unit: ``summon_full_params(old, recurse=False)`` gathers the unit's own parameters,
   :func:`~lightning_sparkling.growth.surgery.grow_tensors` grows them, and ``summon_full_params(new, recurse=False,
   writeback=True)`` writes them into the shards of every new unit it fills (:func:`unit_sources`: the unit of the
   same name, and under a depth growth the units of the new blocks copied from it, a moved block's at its new
   position);
3. optimizer state travels the same way: a state tensor has the shape of its parameter's shard, so it is put
   in the parameter's place for the length of one ``summon_full_params`` (the weights are stashed and put back),
   which gathers it with FSDP's own unshard logic (padding, alignment, shared parameters); the grown state is
   scattered into the new shards in the same way.

The new-entry learning rate needs, for each original parameter, which part of its flattened values this rank
holds; that is read from ``FlatParameter._shard_param_infos`` (see :func:`shard_range`), the one place this
module relies on FSDP1 internals.

:class:`FSDP1Backend` is the :class:`~lightning_sparkling.parallel.base.GrowthBackend` built on these.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

from lightning_sparkling.growth.optim_state import (
    OptimizerPatch,
    check_optimizer_supported,
    grow_state,
    moves_only,
    plan_param_moves,
)
from lightning_sparkling.growth.plan import GrowthError, checked_plan
from lightning_sparkling.growth.stage import GrowthStage
from lightning_sparkling.growth.surgery import GrowthResult, UndoLog, clean_name, derived_buffers, is_tied
from lightning_sparkling.parallel.base import (ShardedBackend, grown_values, parent_and_attr, place_meta_gpt,
                                            rebuilt_result_params)
from lightning_sparkling.parallel.sharding import wrap_gpt

if TYPE_CHECKING:
    import lightning.pytorch as pl
    from litgpt import GPT

    from lightning_sparkling.growth.plan import GrowthPlan


def fsdp1_wrapper(root: nn.Module, gpt: nn.Module) -> FSDP | None:
    """The FSDP1 unit that wraps ``gpt`` itself inside ``root`` (``None`` when ``gpt`` is not FSDP1-wrapped)."""
    for module in root.modules():
        if isinstance(module, FSDP) and module.module is gpt:
            return module
    return None


def check_fsdp1_layout(pl_module: nn.Module, gpt: nn.Module) -> None:
    """Refuse FSDP1 layouts growth cannot rebuild: the GPT must be wrapped as one unit inside the LightningModule
    (``configure_model``: ``self.model = wrap_gpt(self.model)``), with ``use_orig_params=True``."""
    wrapper = fsdp1_wrapper(pl_module, gpt)
    if wrapper is None or wrapper is pl_module:
        raise GrowthError("under FSDPStrategy the GPT must be wrapped by the LightningModule's configure_model(), not "
                          "by the strategy's auto_wrap_policy around the whole LightningModule: in configure_model() "
                          "call `self.model = lightning_sparkling.parallel.wrap_gpt(self.model)` (wraps each block, "
                          "then the GPT)")
    if any(not unit._use_orig_params for unit in FSDP.fsdp_modules(wrapper)):
        raise GrowthError("FSDPStrategy(use_orig_params=False) flattens the parameters the optimizer sees, so growth "
                          "cannot patch them: pass FSDPStrategy(use_orig_params=True)")


def _unit_prefix(wrapper: FSDP, unit: FSDP) -> str:
    """Clean name of ``unit``'s module relative to the GPT (``""`` for the GPT's own unit)."""
    if unit is wrapper:
        return ""
    for name, module in wrapper.module.named_modules():
        if module is unit:
            return clean_name(name) + "."
    raise GrowthError("an FSDP unit is not inside the wrapped GPT")


def owned_params(wrapper: FSDP, unit: FSDP) -> dict[str, tuple[nn.Module, str]]:
    """``{clean GPT name: (module, attribute)}`` of the parameters ``unit`` itself flattens (not those of units
    nested in it); tied parameters appear once, under their first name."""
    prefix = _unit_prefix(wrapper, unit)
    out: dict[str, tuple[nn.Module, str]] = {}
    seen: set[int] = set()

    def walk(module: nn.Module, path: str) -> None:
        for attr, p in module._parameters.items():
            if p is not None and id(p) not in seen:
                seen.add(id(p))
                out[clean_name(prefix + path + attr)] = (module, attr)
        for child_name, child in module._modules.items():
            if child is not None and not isinstance(child, FSDP):
                walk(child, path + child_name + ".")

    walk(unit.module, "")
    return out


def units(wrapper: FSDP) -> list[FSDP]:
    """The FSDP1 units of a wrapped GPT, its own first (a unit's summon must not be the first use of a nested one)."""
    return FSDP.fsdp_modules(wrapper)


def _source_name(plan: GrowthPlan, name: str) -> str:
    """The pre-growth tensor a tensor of the grown model derives from (itself when the plan leaves it out)."""
    spec = plan.tensors.get(name)
    return spec.source_name if spec is not None else name


def unit_sources(plan: GrowthPlan, old: FSDP, new: FSDP) -> list[tuple[FSDP, list[FSDP]]]:
    """``[(old unit, the new units filled from it)]`` in the old units' order (the GPT's own unit first): each new
    unit comes from the one old unit that owns the sources of all its parameters. Without a depth growth that is
    the unit of the same name; under one, a new block's unit comes from its source block's unit (a kept block's
    unit from its own, wherever it moved).

    Raises:
        GrowthError: when ``configure_model`` wrapped the grown GPT into units that do not map onto the old ones.
    """
    old_units = units(old)
    owner = {name: i for i, unit in enumerate(old_units) for name in owned_params(old, unit)}
    targets: list[list[FSDP]] = [[] for _ in old_units]
    for unit in units(new):
        sources = {owner.get(_source_name(plan, name)) for name in owned_params(new, unit)}
        if len(sources) != 1 or None in sources:
            raise GrowthError(
                "after growth, configure_model() wrapped the new GPT into FSDP units that do not map onto the old "
                f"ones (unit {_unit_prefix(new, unit) or '<GPT>'!r} takes tensors of {len(sources)} old units): wrap "
                "the same way whatever the model's width and depth (each block its own unit, then the GPT)"
            )
        source = sources.pop()
        assert source is not None  # refused above
        targets[source].append(unit)
    return [(unit, found) for unit, found in zip(old_units, targets) if found]


def reshard_units(wrapper: FSDP) -> None:
    """Free the unsharded parameters that FSDP1 keeps after a forward without backward: the root unit (and, under
    ``SHARD_GRAD_OP``, every unit) is not resharded after its forward, only after backward. While a unit's unsharded
    flat parameter is allocated, ``summon_full_params`` does not gather: it hands back that buffer, as it was at the
    forward. The growth writes optimizer state into the shards and gathers it (:func:`gather_values`), so after the
    post-growth loss check, a validation or sanity-check forward, every unit must hold only its shard again (FSDP1
    internals: ``FlatParamHandle.needs_unshard`` and ``_runtime_utils._reshard``, torch >= 2.1)."""
    from torch.distributed.fsdp._runtime_utils import _reshard

    for unit in FSDP.fsdp_modules(wrapper):
        handle = getattr(unit, "_handle", None)
        if handle is None or not handle.uses_sharded_strategy:
            continue
        if hasattr(handle.flat_param, "_full_param_padded") and not handle.needs_unshard():  # set at FSDP's lazy init
            _reshard(unit, handle, True)


@contextmanager
def _gathered(wrapper: FSDP, unit: FSDP, *, writeback: bool = False) -> Iterator[dict[str, nn.Parameter]]:
    """``{clean name: full parameter}`` of the parameters ``unit`` owns, while they are gathered."""
    owned = owned_params(wrapper, unit)
    with FSDP.summon_full_params(unit, recurse=False, writeback=writeback):
        yield {name: getattr(module, attr) for name, (module, attr) in owned.items()}


@contextmanager
def _stashed(params: list[nn.Parameter]) -> Iterator[None]:
    """Keep this rank's shard of ``params`` and put it back on exit (their storage is borrowed meanwhile)."""
    stash = [p.detach().clone() for p in params]
    try:
        yield
    finally:
        with torch.no_grad():
            for p, saved in zip(params, stash):
                p.copy_(saved)


def gather_values(wrapper: FSDP, unit: FSDP, values: Mapping[str, torch.Tensor | None]) -> dict[str, torch.Tensor]:
    """Full tensors of per-parameter values laid out like this rank's shards (optimizer state), for the
    parameters of ``unit`` named in ``values`` (a collective: every rank calls it with the same names; a rank
    without a value for a name passes ``None``, read as zeros).

    The values are written into the parameters' shard storage for the length of one ``summon_full_params``, so
    FSDP's own unshard gathers them; the weights are put back afterwards.
    """
    owned = owned_params(wrapper, unit)
    params = {name: getattr(module, attr) for name, (module, attr) in owned.items()}
    with torch.no_grad(), _stashed(list(params.values())):
        for name, p in params.items():  # a missing value reads as zeros
            value = values.get(name)
            p.zero_() if value is None else p.copy_(value.reshape(p.shape))
        with _gathered(wrapper, unit) as full:
            return {name: full[name].detach().clone() for name in values if name in full}


def scatter_values(wrapper: FSDP, unit: FSDP, fulls: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """This rank's shards of full per-parameter tensors (the inverse of :func:`gather_values`): the values are
    written into the gathered parameters and FSDP's write-back splits them; weights are put back afterwards."""
    owned = owned_params(wrapper, unit)
    params = {name: getattr(module, attr) for name, (module, attr) in owned.items()}
    with torch.no_grad(), _stashed(list(params.values())):
        with _gathered(wrapper, unit, writeback=True) as full:
            for name, p in full.items():
                p.copy_(fulls[name]) if name in fulls else p.zero_()
        return {name: params[name].detach().clone() for name in fulls}


@dataclass
class FSDP1GrowthResult(GrowthResult):
    """A growth under FSDP1: also the old and new wrapped GPTs (the optimizer patch pairs their units)."""

    old_wrapper: FSDP | None = field(default=None, repr=False)
    new_wrapper: FSDP | None = field(default=None, repr=False)


def build_wrapped_gpt(pl_module: Any, strategy: Any, old_wrapper: FSDP, config: object, swap: UndoLog) -> FSDP:
    """Put a meta-device ``GPT(config)`` where ``old_wrapper`` sits and let the module's ``configure_model`` wrap
    it, inside ``strategy.model_sharded_context()`` as Lightning does; FSDP materializes it unit by unit. The
    strategy's activation checkpointing is applied to it, and the RoPE buffers are copied from the old GPT. Returns
    the new wrapper (weights are not meaningful yet)."""
    old_gpt = old_wrapper.module
    parent, attr = parent_and_attr(pl_module, old_wrapper)
    new = place_meta_gpt(pl_module, old_wrapper, old_gpt, config, swap)
    with strategy.model_sharded_context():
        pl_module.configure_model()
    wrapper = getattr(parent, attr)
    if not isinstance(wrapper, FSDP) or wrapper.module is not new:
        raise GrowthError(
            "after growth, the LightningModule's configure_model() did not wrap the new GPT: under FSDPStrategy it "
            "must wrap self.model whenever it is not wrapped yet (`self.model = wrap_gpt(self.model)`)"
        )
    # Lightning applies FSDPStrategy(activation_checkpointing_policy=...) once, in setup, to the wrapped module:
    # the new GPT needs it too, or the grown model would train without it (and with far more activation memory)
    checkpointing = getattr(strategy, "_activation_checkpointing_kwargs", None)
    if checkpointing:
        from lightning.fabric.strategies.fsdp import _setup_activation_checkpointing

        _setup_activation_checkpointing(wrapper, checkpointing)
    buffers = {clean_name(n): b for n, b in old_gpt.named_buffers()}
    with torch.no_grad():
        for name, buf in new.named_buffers():  # RoPE cos/sin: head size and positions do not change
            if clean_name(name) in buffers and buf.shape == buffers[clean_name(name)].shape:
                buf.copy_(buffers[clean_name(name)])
        for name, value in derived_buffers(new, old_gpt.config).items():  # an axis changed e.g. rope_base
            new.get_buffer(name).copy_(value)
    return wrapper


def named_params(wrapper: FSDP) -> dict[str, nn.Parameter]:
    """``{clean name: Parameter}`` of the wrapped GPT (the objects the optimizer holds)."""
    return {clean_name(n): p for n, p in wrapper.module.named_parameters()}


@torch.no_grad()
def grow_fsdp1(pl_module: Any, strategy: Any, gpt: GPT, stage: GrowthStage, *, seed: int,
               stage_index: int, plan: GrowthPlan | None = None) -> FSDP1GrowthResult:
    """FSDP1 growth: build the grown GPT wrapped by the module's ``configure_model`` and fill it one unit at a
    time from gathered old units (see the module docstring). ``rollback()`` puts the old wrapped GPT back."""
    old_wrapper = fsdp1_wrapper(pl_module, gpt)
    check_fsdp1_layout(pl_module, gpt)
    assert old_wrapper is not None  # check_fsdp1_layout refuses a GPT without one
    reshard_units(old_wrapper)  # a forward without backward before (validation, a growth due at once) leaves units full
    tied = is_tied(gpt)
    plan = checked_plan(plan, gpt.config, stage, seed=seed, stage_index=stage_index, tied_embeddings=tied)
    swap = UndoLog()
    start = time.perf_counter()
    try:
        new_wrapper = build_wrapped_gpt(pl_module, strategy, old_wrapper, plan.new_config, swap)
        for old_unit, new_units in unit_sources(plan, old_wrapper, new_wrapper):
            with _gathered(old_wrapper, old_unit) as full:
                old_full = {n: p.detach().clone() for n, p in full.items()}
            grown = grown_values(plan, old_full)
            for new_unit in new_units:  # the unit itself, and under a depth growth the units of its copies
                with _gathered(new_wrapper, new_unit, writeback=True) as full:
                    for name, p in full.items():
                        p.copy_(grown[name])
            del old_full, grown
        old_named, new_named = named_params(old_wrapper), named_params(new_wrapper)
        old_params, new_params, added = rebuilt_result_params(plan, old_named, new_named)
    except BaseException:
        swap.undo()
        raise
    return FSDP1GrowthResult(plan=plan, old_params=old_params, new_params=new_params, added=added,
                             order=tuple(new_named.values()), seconds=time.perf_counter() - start, _swap=swap,
                             old_wrapper=old_wrapper, new_wrapper=new_wrapper)


def _agreed_state_keys(optimizer: torch.optim.Optimizer, names: Mapping[int, str]) -> dict[str, list[str]]:
    """``{param name: per-element state keys}`` agreed by every rank (a rank whose shard of a parameter is empty
    may hold no state for it)."""
    local: dict[str, list[str]] = {}
    for p, state in optimizer.state.items():
        name = names.get(id(p))
        if name is not None:
            local[name] = sorted(k for k, v in state.items() if isinstance(v, torch.Tensor) and v.ndim > 0)
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return local
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, local)
    agreed: dict[str, set[str]] = {}
    for rank_keys in gathered:
        for name, keys in rank_keys.items():
            agreed.setdefault(name, set()).update(keys)
    return {name: sorted(keys) for name, keys in agreed.items()}


def _agreed_scalars(optimizer: torch.optim.Optimizer, names: Mapping[int, str]) -> dict[str, dict[str, float]]:
    """``{param name: {scalar state key: value}}`` agreed by every rank: the largest over the ranks. A rank whose
    shard of a parameter is empty gets no gradient for it, so torch does not advance its ``step`` there; the ranks
    that hold entries have the true count. A growth that moves shard boundaries (new experts, wider tensors) must
    not carry such a stale count into a shard that now holds entries."""
    local: dict[str, dict[str, float]] = {}
    for p, state in optimizer.state.items():
        name = names.get(id(p))
        if name is not None:
            local[name] = {k: float(v) for k, v in state.items() if isinstance(v, torch.Tensor) and v.ndim == 0}
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return local
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, local)
    agreed: dict[str, dict[str, float]] = {}
    for rank_values in gathered:
        for name, values in rank_values.items():
            for key, value in values.items():
                mine = agreed.setdefault(name, {})
                mine[key] = max(mine.get(key, value), value)
    return agreed


def _scalar_state(state: dict, template: dict | None, agreed: Mapping[str, float] | None = None) -> dict:
    """The scalar state (``step``) of a parameter, at the value the ranks agree on (:func:`_agreed_scalars`); a rank
    that held no state for it (an empty shard) takes its keys from another parameter."""
    base = state if state or not template else template
    out = {k: (v.clone() if isinstance(v, torch.Tensor) and base is template else v) for k, v in base.items()
           if not (isinstance(v, torch.Tensor) and v.ndim > 0)}
    for key, value in (agreed or {}).items():
        if isinstance(out.get(key), torch.Tensor) and float(out[key]) != value:
            out[key] = torch.full_like(out[key], value)
    return out


@torch.no_grad()
def plan_fsdp1_optimizer_patch(optimizer: torch.optim.Optimizer, result: FSDP1GrowthResult,
                               recipe: str) -> OptimizerPatch:
    """The optimizer patch of an FSDP1 growth (nothing is modified): every parameter of the GPT is swapped for
    its successor in the new wrapped GPT; a depth growth's new-block parameters join their source's param group
    (in the grown model's parameter order, as ``configure_optimizers`` builds it at a resume). Per-element state
    is gathered one old unit and one state key at a time, grown by ``recipe`` (a new block's from its source's)
    and split into the shards of every new unit that old unit fills (:func:`gather_values` /
    :func:`scatter_values`). Scalar state (``step``) is kept, and cloned for a new block's parameters."""
    check_optimizer_supported(optimizer)
    plan = result.plan
    old_wrapper, new_wrapper = result.old_wrapper, result.new_wrapper
    assert old_wrapper is not None and new_wrapper is not None  # grow_fsdp1 sets both
    old_by_name = named_params(old_wrapper)  # pre-growth names
    held = {id(p) for group in optimizer.param_groups for p in group["params"]}
    in_optimizer = {n for n, p in old_by_name.items() if id(p) in held}
    keys = {n: k for n, k in _agreed_state_keys(optimizer, {id(p): n for n, p in old_by_name.items()}).items()
            if n in in_optimizer}
    template = next((s for s in optimizer.state.values() if s), None)
    scalars = _agreed_scalars(optimizer, {id(p): n for n, p in old_by_name.items()})  # a collective

    def scalar_state(old: nn.Parameter, name: str, new: nn.Parameter) -> dict | None:
        """Only the scalar state (every tensor 0-dim, so a new block's gets cloned whole), at the ranks' agreed
        value; per-element state is gathered, grown and scattered below, one old unit at a time."""
        state = optimizer.state.get(old, {})
        if state or keys.get(_source_name(plan, name)):
            return _scalar_state(state, template, scalars.get(_source_name(plan, name)))
        return None

    patch = plan_param_moves(optimizer, result, scalar_state)
    new_param = {**result.new_params, **{n: new for n, (_, new) in result.added.items()}}
    for old_unit, new_units in unit_sources(plan, old_wrapper, new_wrapper):
        unit_names = [n for n in owned_params(old_wrapper, old_unit) if keys.get(n)]
        for key in sorted({k for n in unit_names for k in keys[n]}):
            names = [n for n in unit_names if key in keys[n]]
            local = {n: optimizer.state.get(old_by_name[n], {}).get(key) for n in names}
            full = gather_values(old_wrapper, old_unit, local)
            for new_unit in new_units:
                grown: dict[str, torch.Tensor] = {}
                for n in owned_params(new_wrapper, new_unit):
                    source = _source_name(plan, n)
                    if source not in full or new_param[n] not in patch.new_state:
                        continue
                    spec = plan.tensors.get(n)
                    grown[n] = full[source] if spec is None or moves_only(spec) else cast(torch.Tensor, grow_state(
                        key, full[source], spec, plan.channels, recipe, type(optimizer).__name__))  # a tensor's
                shards = scatter_values(new_wrapper, new_unit, grown)
                for n in grown:
                    patch.new_state[new_param[n]][key] = shards[n]
                del grown, shards
            del full
    return patch


# ------------------------------------------------------------------------------------------- new-entry slices
def shard_range(param: torch.Tensor, root: nn.Module) -> tuple[tuple[int, int], tuple[int, ...]] | None:
    """``((start, stop), shape)``: the range of the flattened original parameter that this rank's shard view of
    ``param`` holds, and the parameter's original shape; ``None`` when this rank holds none of it. Read from
    ``FlatParameter._shard_param_infos`` / ``_shapes`` of the unit owning it (FSDP1 internals, torch >= 2.1)."""
    for unit in FSDP.fsdp_modules(root):
        handle = getattr(unit, "_handle", None)
        if handle is None:
            continue
        flat = handle.flat_param
        for orig, info, shape in zip(flat._params or (), flat._shard_param_infos, flat._shapes):
            if orig is param:
                if not info.in_shard:
                    return None
                return (int(info.intra_param_start_idx), int(info.intra_param_end_idx) + 1), tuple(shape)
    raise GrowthError("a parameter of the wrapped GPT belongs to no FSDP1 unit (use_orig_params=True needed)")


def iter_full_params(wrapper: FSDP, names: list[str]) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, full tensor)`` for the named parameters of a wrapped GPT, in the order of ``names`` (the
    symmetry metric of a depth growth reads each copied block's tensor right after its source's); each run of
    consecutive names owned by one unit is gathered at once. Each tensor is valid only until the next is yielded.
    Names no unit owns (a tied ``transformer.wte.weight``) are skipped. A collective: every rank must run it to
    the end, with the same names."""
    owner = {name: unit for unit in units(wrapper) for name in owned_params(wrapper, unit)}
    wanted = [n for n in names if n in owner]
    run: list[str] = []
    for i, name in enumerate(wanted):
        run.append(name)
        if i + 1 < len(wanted) and owner[wanted[i + 1]] is owner[name]:
            continue
        with _gathered(wrapper, owner[name]) as full:
            for member in run:
                yield member, full[member].detach()
        run = []


@dataclass(frozen=True)
class FlatPiece:
    """A rectangular block of an original parameter, addressed in this rank's 1-D shard view of it:
    ``shard[start:stop]`` viewed as ``(-1, row)`` (``row=0``: plain 1-D) then ``[:, c0:c1]``. Called on the
    parameter at step time, so it follows FSDP re-pointing the view."""

    start: int
    stop: int
    row: int = 0
    c0: int = 0
    c1: int = 0

    def __call__(self, shard: torch.Tensor) -> torch.Tensor:
        flat = shard.view(-1)[self.start: self.stop]
        return flat if self.row == 0 else flat.view(-1, self.row)[:, self.c0: self.c1]


def flat_pieces(shape: tuple[int, ...], piece: tuple[slice, ...], start: int, stop: int) -> list[FlatPiece]:
    """The part of the block ``piece`` of a tensor of ``shape`` that falls in its flattened range
    ``[start, stop)``, as at most three :class:`FlatPiece` (a partial first row, whole rows, a partial last row),
    offsets relative to ``start``.

    Example::

        >>> # column 2 of a (4, 3) tensor; this rank holds flattened elements 1..10: rows 1-2 whole, row 0 in part
        >>> [(p.start, p.stop, p.row) for p in flat_pieces((4, 3), (slice(None), slice(2, 3)), 1, 11)]
        [(2, 8, 3), (1, 2, 0)]
    """
    if len(shape) == 1:
        rows = piece[0] if piece else slice(None)
        lo, hi, _ = rows.indices(shape[0])
        lo, hi = max(lo, start), min(hi, stop)
        return [FlatPiece(lo - start, hi - start)] if hi > lo else []
    if len(shape) != 2:
        raise GrowthError(f"new-entry learning rate under FSDP1: {len(shape)}-D parameters are not supported")
    n_rows, n_cols = shape
    rows = piece[0] if len(piece) > 0 else slice(None)
    cols = piece[1] if len(piece) > 1 else slice(None)
    r0, r1, _ = rows.indices(n_rows)
    c0, c1, _ = cols.indices(n_cols)
    out: list[FlatPiece] = []
    # whole rows of the shard: first row starting at or after `start`, last ending at or before `stop`
    full_lo = max(r0, -(-start // n_cols))
    full_hi = min(r1, stop // n_cols)
    partial = []
    if full_hi > full_lo:
        out.append(FlatPiece(full_lo * n_cols - start, full_hi * n_cols - start, n_cols, c0, c1))
        partial = [r for r in (full_lo - 1, full_hi) if r0 <= r < r1]
    else:
        partial = list(range(max(r0, start // n_cols), min(r1, -(-stop // n_cols))))
    for r in partial:
        lo, hi = max(r * n_cols + c0, start), min(r * n_cols + c1, stop)
        if hi > lo:
            out.append(FlatPiece(lo - start, hi - start))
    return out


# ------------------------------------------------------------------------------------------------ the backend
class FSDP1Backend(ShardedBackend):
    """FSDP1 through ``FSDPStrategy(use_orig_params=True)``: the module's ``configure_model`` must wrap the GPT as
    one unit inside the LightningModule (:func:`lightning_sparkling.parallel.wrap_gpt`: each block, then
    the GPT) whenever it is not wrapped yet, so that it can wrap the grown GPT too.

    Example::

        trainer = L.Trainer(strategy=FSDPStrategy(use_orig_params=True), ...)
        select_backend(trainer.strategy)  # FSDP1Backend()
    """

    name = "fsdp1"

    @classmethod
    def accepts(cls, strategy: Any) -> bool:
        from lightning.pytorch.strategies import FSDPStrategy

        return isinstance(strategy, FSDPStrategy)

    @classmethod
    def make_strategy(cls, world_size: int) -> Any:
        from lightning.pytorch.strategies import FSDPStrategy

        return FSDPStrategy(use_orig_params=True, state_dict_type="sharded")

    @classmethod
    def prepare_model(cls, pl_module: pl.LightningModule, gpt: nn.Module) -> nn.Module:
        return wrap_gpt(gpt)  # each block, then the GPT (as one unit inside the LightningModule)

    @classmethod
    def check_strategy(cls, strategy: Any) -> None:
        if not strategy.kwargs.get("use_orig_params"):
            raise GrowthError(
                "FSDPStrategy(use_orig_params=False) gives the optimizer flattened parameters that growth cannot "
                "patch: pass FSDPStrategy(use_orig_params=True, ...) and wrap the GPT in configure_model() with "
                "lightning_sparkling.parallel.wrap_gpt"
            )

    def check_model(self, pl_module: pl.LightningModule, gpt: nn.Module) -> None:
        super().check_model(pl_module, gpt)
        check_fsdp1_layout(pl_module, gpt)

    def grow(self, trainer: pl.Trainer, pl_module: pl.LightningModule, gpt: nn.Module, stage: GrowthStage, *,
             seed: int, stage_index: int, plan: GrowthPlan | None = None) -> GrowthResult:
        return grow_fsdp1(pl_module, trainer.strategy, gpt, stage, seed=seed, stage_index=stage_index, plan=plan)

    def plan_optimizer_patch(self, optimizer: torch.optim.Optimizer, result: GrowthResult,
                             recipe: str) -> OptimizerPatch:
        return plan_fsdp1_optimizer_patch(optimizer, cast(FSDP1GrowthResult, result), recipe)  # grow()'s result

    def forward_module(self, pl_module: pl.LightningModule, gpt: nn.Module) -> nn.Module:
        return fsdp1_wrapper(pl_module, gpt) or gpt  # through its root unit, which gathers

    def reshard(self, pl_module: pl.LightningModule, gpt: nn.Module) -> None:
        wrapper = fsdp1_wrapper(pl_module, gpt)
        if wrapper is not None:  # the root unit stays unsharded after a forward without backward
            reshard_units(wrapper)

    def new_entry_pieces(self, pl_module: pl.LightningModule,
                         gpt: nn.Module) -> Callable[[torch.Tensor, Sequence[tuple[slice, ...]]], list]:
        wrapper = fsdp1_wrapper(pl_module, gpt)
        if wrapper is None:
            return super().new_entry_pieces(pl_module, gpt)

        def pieces_of(param: torch.Tensor, pieces: Sequence[tuple[slice, ...]]) -> list:
            held = shard_range(param, wrapper)  # param is this rank's 1-D view of its flattened values
            if held is None:
                return []
            (start, stop), shape = held
            return [(param, fp) for piece in pieces for fp in flat_pieces(shape, piece, start, stop)]

        return pieces_of

    def full_tensors(self, pl_module: pl.LightningModule, gpt: nn.Module,
                     names: Iterable[str]) -> Iterator[tuple[str, torch.Tensor]]:
        wrapper = fsdp1_wrapper(pl_module, gpt)
        if wrapper is not None:  # gathered one unit at a time
            return iter_full_params(wrapper, list(names))
        return super().full_tensors(pl_module, gpt, names)

    def rebuild(self, trainer: pl.Trainer, pl_module: pl.LightningModule, gpt: nn.Module, config: object) -> None:
        check_fsdp1_layout(pl_module, gpt)
        wrapper = fsdp1_wrapper(pl_module, gpt)
        assert wrapper is not None  # check_fsdp1_layout refuses a GPT without one
        build_wrapped_gpt(pl_module, trainer.strategy, wrapper, config, UndoLog())
