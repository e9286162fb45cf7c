"""``GrowthBackend``: what a strategy must provide so that :class:`~lightning_sparkling.callbacks.growth.
GrowthCallback` can grow a model trained under it.

The callback owns *when* a growth happens and the bookkeeping around it (stages, records, re-warmup schedulers,
logging, rollback on failure); a backend owns *how* the model and its optimizer state are grown, re-wrapped or
re-sharded under one strategy. One backend is chosen per fit, in ``setup``, by
:func:`~lightning_sparkling.parallel.select_backend`. The tensor math itself is strategy-free
(:mod:`lightning_sparkling.growth`): a backend only gets full tensors to it and puts the grown ones back where the
strategy wants them, in the spirit of torchtitan's ``parallelize`` functions or Lightning's strategies, which each
own their wrap and unwrap.

Adding a strategy is one new module with a subclass of :class:`BaseBackend` (a model whole on every rank) or
:class:`ShardedBackend` (a strategy that loads checkpoints into the live sharded model) overriding the steps that
differ and saying which strategies it takes (:meth:`BaseBackend.accepts`), and one
:func:`~lightning_sparkling.parallel.registry.register_backend` line:
:func:`~lightning_sparkling.parallel.select_backend`, its error message and the CLI's ``strategy`` choices are read
from the registry. What the CLI needs of it comes from the backend too: the Lightning strategy the CLI trains under
(:meth:`BaseBackend.make_strategy`), what the LightningModule's ``configure_model`` does to the GPT so that the
backend can grow it (:meth:`BaseBackend.prepare_model`, :attr:`BaseBackend.compile_per_block`), and the facts its
configuration checks need before Lightning is imported, on the registry entry
(:class:`~lightning_sparkling.parallel.registry.BackendEntry`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

from lightning_sparkling.growth.depth_maps import split_block_name
from lightning_sparkling.growth.errors import GrowthError
from lightning_sparkling.growth.optim_state import OptimizerPatch, plan_optimizer_patch
from lightning_sparkling.growth.plan import GrowthPlan
from lightning_sparkling.growth.record import GROWTH_STATE_KEY, growth_state
from lightning_sparkling.growth.stage import GrowthStage
from lightning_sparkling.growth.surgery import (GrowthResult, UndoLog, clean_name, grow_model, grow_tensors,
                                               grown_max_seq_length, result_params)

if TYPE_CHECKING:  # Lightning is imported once a fit runs, never by this module
    import lightning.pytorch as pl

#: ``(parameter the optimizer holds, global slices of its new entries) -> pieces`` for
#: :class:`~lightning_sparkling.growth.optim_state.NewEntryRegion` (what this rank holds of those slices)
PieceMapper = Callable[[torch.Tensor, Sequence[tuple[slice, ...]]], list]

#: called by a resume hook with the growth callback's state found in a checkpoint, before any weight is loaded
ResumeFn = Callable[[dict[str, Any]], None]


@runtime_checkable
class GrowthBackend(Protocol):
    """How growth is done under one Lightning strategy.

    Every method that gathers is a collective: under a multi-process strategy, every rank calls it, in the same
    order. ``gpt`` is always the litgpt ``GPT`` found inside ``pl_module`` at the time of the call (it changes
    object under sharded strategies, which rebuild it).

    Attributes:
        name: short name for messages (``"single"``, ``"ddp"``, ``"fsdp2"``, ``"fsdp1"``).
        restores_after_fit_start: ``True`` when the strategy loads a checkpoint's model *and optimizer* state into
            the live objects after ``on_fit_start`` (FSDP1/FSDP2): a resume then regrows the model, rebuilds the
            optimizers and re-registers the new-entry LR at once, inside :meth:`hook_resume`'s hook. ``False``
            when the weights are loaded before the strategy sets up (single device, DDP): the callback's
            ``on_fit_start`` re-registers the schedulers as for any fit.

    Example::

        backend = select_backend(trainer.strategy)
        result = backend.grow(trainer, pl_module, gpt, stage, seed=0, stage_index=0)
        patches = [backend.plan_optimizer_patch(opt, result, stage.optimizer_state) for opt in trainer.optimizers]
    """

    name: str
    restores_after_fit_start: bool

    def check_model(self, pl_module: pl.LightningModule, gpt: torch.nn.Module) -> None:
        """At fit start, refuse (``GrowthError``) a model layout this backend cannot grow (e.g. a tensor-parallel
        DTensor plan, a GPT not wrapped as one FSDP1 unit)."""
        ...

    def grow(self, trainer: pl.Trainer, pl_module: pl.LightningModule, gpt: torch.nn.Module, stage: GrowthStage, *,
             seed: int, stage_index: int, plan: GrowthPlan | None = None) -> GrowthResult:
        """Grow ``gpt`` by ``stage`` and put the grown model where the strategy trains it (in place for a plain
        model; sharded models are rebuilt unit by unit: gather, grow, reshard). ``GrowthResult.rollback()`` must
        undo it completely. ``plan``: the stage's plan on ``gpt``, computed once by the callback's dry run (applied
        only where it fits: :func:`~lightning_sparkling.growth.plan.checked_plan`); ``None`` plans here."""
        ...

    def plan_optimizer_patch(self, optimizer: torch.optim.Optimizer, result: GrowthResult,
                             recipe: str) -> OptimizerPatch:
        """The optimizer patch of a growth (nothing modified yet): parameter swaps and per-element state grown by
        ``recipe``, laid out like the new parameters."""
        ...

    def forward_module(self, pl_module: pl.LightningModule, gpt: torch.nn.Module) -> torch.nn.Module:
        """The module to call for the post-growth loss check (the GPT itself, or the wrapper that gathers it)."""
        ...

    def reshard(self, pl_module: pl.LightningModule, gpt: torch.nn.Module) -> None:
        """Put the parameters back in the layout the optimizer holds after a forward without backward (FSDP2
        leaves the root unsharded); a no-op where nothing is sharded."""
        ...

    def rewrap(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Make the strategy see the grown parameters once model and optimizers are patched (DDP: wrap anew)."""
        ...

    def new_entry_pieces(self, pl_module: pl.LightningModule, gpt: torch.nn.Module) -> PieceMapper:
        """A function mapping a parameter and the global slices of its new entries to what this rank holds of
        them, in the form :class:`~lightning_sparkling.growth.optim_state.NewEntryRegion` takes."""
        ...

    def full_tensors(self, pl_module: pl.LightningModule, gpt: torch.nn.Module,
                     names: Iterable[str]) -> Iterator[tuple[str, torch.Tensor]]:
        """``(name, full tensor)`` for the named parameters (clean GPT names; tied ones under either name), in the
        order of ``names`` (a depth growth's symmetry metric reads each copied block's tensor right after its
        source's), each valid until the next is yielded; for the symmetry metric. A collective when sharded: run it
        to the end."""
        ...

    def hook_resume(self, trainer: pl.Trainer, pl_module: pl.LightningModule, state_key: str,
                    on_state: ResumeFn) -> Callable[[], None]:
        """Arrange for ``on_state(checkpoint["callbacks"][state_key])`` to run when a checkpoint holding that state
        is loaded, before its weights are; returns a function removing the hook (called when training starts)."""
        ...

    def regrow(self, trainer: pl.Trainer, pl_module: pl.LightningModule, gpt: torch.nn.Module,
               plans: Sequence[GrowthPlan]) -> None:
        """Give a freshly built model the shapes of a checkpoint grown by ``plans`` (values come from the
        checkpoint); where :attr:`restores_after_fit_start`, also rebuild the optimizers over the new model."""
        ...


class BaseBackend:
    """The shared steps of every backend, for a model that is whole on every rank (one device; DDP's replicas):
    grow in place (:func:`~lightning_sparkling.growth.surgery.grow_model`), patch the optimizer in place, nothing to
    re-wrap or reshard, new entries addressed on the parameters themselves, a resume regrown from the module's
    ``on_load_checkpoint`` (before Lightning loads the weights). A backend overrides the steps its strategy does
    differently, and says which strategies it takes.

    Attributes:
        name: short name for messages and the registry (``"single"``, ``"ddp"``, ``"fsdp2"``, ``"fsdp1"``).
        restores_after_fit_start: see :class:`GrowthBackend`.
        compile_per_block: ``compile`` compiles each block rather than the whole GPT (a sharded GPT: torchtitan's
            way under FSDP2).

    Example::

        class MyBackend(BaseBackend):
            name = "mine"

            @classmethod
            def accepts(cls, strategy) -> bool:
                return type(strategy).__name__ == "MyStrategy"

            @classmethod
            def make_strategy(cls, world_size):
                return MyStrategy(world_size)

        register_backend("mine", "my_package.my_backend:MyBackend", usage="MyStrategy()", cli_strategy="mine")
    """

    name = ""
    restores_after_fit_start = False
    compile_per_block = False

    @classmethod
    def accepts(cls, strategy: Any) -> bool:
        """Whether this backend grows models trained under ``strategy`` (a Lightning ``Strategy``)."""
        return False

    @classmethod
    def check_strategy(cls, strategy: Any) -> None:
        """Refuse (``GrowthError``, naming the setting and the fix) a strategy it accepts but cannot grow under as
        configured (e.g. FSDP1 without ``use_orig_params=True``)."""
        return None

    @classmethod
    def make_strategy(cls, world_size: int) -> Any:
        """The Lightning strategy (a ``Strategy``, or a name Lightning knows) the CLI trains under when its
        ``strategy`` value selects this backend. A strategy that writes sharded checkpoint directories gets them
        written atomically by the CLI.

        Args:
            world_size: devices x nodes of the run.

        Raises:
            NotImplementedError: for a backend the CLI cannot select (no ``cli_strategy`` of its own).

        Example::

            DDPBackend.make_strategy(2)    # "ddp"
            FSDP2Backend.make_strategy(2)  # ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1)
        """
        raise NotImplementedError(f"backend {cls.name or cls.__name__!r} makes no Lightning strategy for the CLI: "
                                  "override make_strategy(world_size)")

    @classmethod
    def prepare_model(cls, pl_module: pl.LightningModule, gpt: torch.nn.Module) -> torch.nn.Module:
        """What ``LightningModule.configure_model`` does to the GPT so that this backend can grow it under its
        strategy (FSDP2: shard it over the module's ``device_mesh``; FSDP1: wrap it; one device, DDP: nothing).
        Idempotent: a growth calls ``configure_model`` again on a grown GPT.

        Args:
            pl_module: the LightningModule (its ``device_mesh``, its ``trainer``).
            gpt: the litgpt ``GPT`` (or what an earlier call returned).

        Returns:
            The module to keep as the GPT (``gpt`` itself, or its wrapper: assign it back).

        Example::

            def configure_model(self):
                cls = backend_class_for(self.trainer.strategy)
                if cls is not None:
                    self.model = cls.prepare_model(self, self.model)
        """
        return gpt

    def check_model(self, pl_module: pl.LightningModule, gpt: torch.nn.Module) -> None:
        pass  # grow_model checks the GPT itself when it grows

    def grow(self, trainer: pl.Trainer, pl_module: pl.LightningModule, gpt: torch.nn.Module, stage: GrowthStage, *,
             seed: int, stage_index: int, plan: GrowthPlan | None = None) -> GrowthResult:
        return grow_model(gpt, stage, seed=seed, stage_index=stage_index, plan=plan)

    def plan_optimizer_patch(self, optimizer: torch.optim.Optimizer, result: GrowthResult,
                             recipe: str) -> OptimizerPatch:
        return plan_optimizer_patch(optimizer, result, recipe)

    def forward_module(self, pl_module: pl.LightningModule, gpt: torch.nn.Module) -> torch.nn.Module:
        return gpt

    def reshard(self, pl_module: pl.LightningModule, gpt: torch.nn.Module) -> None:
        pass

    def rewrap(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        pass

    def new_entry_pieces(self, pl_module: pl.LightningModule, gpt: torch.nn.Module) -> PieceMapper:
        return lambda param, pieces: [(param.data, piece) for piece in pieces]

    def full_tensors(self, pl_module: pl.LightningModule, gpt: torch.nn.Module,
                     names: Iterable[str]) -> Iterator[tuple[str, torch.Tensor]]:
        params = dict(gpt.named_parameters(remove_duplicate=False))  # tied: wte and lm_head both by name
        return ((name, params[name].detach()) for name in names)

    def hook_resume(self, trainer: pl.Trainer, pl_module: pl.LightningModule, state_key: str,
                    on_state: ResumeFn) -> Callable[[], None]:
        """Lightning calls ``LightningModule.on_load_checkpoint`` before it loads the state_dict (a callback's own
        state comes only after it), so the module's hook is wrapped, on this instance, until training starts."""
        original = pl_module.on_load_checkpoint

        def on_load_checkpoint(checkpoint: dict[str, Any]) -> None:
            state = callback_state(checkpoint.get("callbacks"), state_key)
            if state:
                on_state(state)
            return original(checkpoint)

        pl_module.on_load_checkpoint = on_load_checkpoint
        return lambda: pl_module.__dict__.pop("on_load_checkpoint", None)

    def regrow(self, trainer: pl.Trainer, pl_module: pl.LightningModule, gpt: torch.nn.Module,
               plans: Sequence[GrowthPlan]) -> None:
        for plan in plans:  # values are overwritten by the checkpoint's
            grow_model(gpt, plan.stage, seed=plan.seed, stage_index=plan.stage_index, plan=plan)


class ShardedBackend(BaseBackend):
    """The shared steps of a strategy that loads a checkpoint's weights and optimizer state straight into the live
    sharded model after ``on_fit_start`` (FSDP1, FSDP2): a resume is hooked on ``strategy.load_checkpoint``
    (:func:`hook_strategy_resume`) and regrows the model and its optimizers there (:meth:`rebuild`, then the
    strategy's ``setup_optimizers``); a grown model is wrapped or sharded by the module's ``configure_model`` when it
    is built, so nothing is re-wrapped after; a tensor-parallel DTensor layout is refused at fit start
    (:func:`check_sharding_supported`). A subclass grows by rebuilding too, pairing the parameters of the rebuilt
    GPT with the old ones by :func:`rebuilt_result_params`."""

    restores_after_fit_start = True

    def check_model(self, pl_module: pl.LightningModule, gpt: torch.nn.Module) -> None:
        check_sharding_supported(gpt)

    def hook_resume(self, trainer: pl.Trainer, pl_module: pl.LightningModule, state_key: str,
                    on_state: ResumeFn) -> Callable[[], None]:
        return hook_strategy_resume(trainer, state_key, on_state)

    def rebuild(self, trainer: pl.Trainer, pl_module: pl.LightningModule, gpt: torch.nn.Module,
                config: object) -> None:
        """Put a ``GPT(config)`` where ``gpt`` sits, wrapped or sharded by the module's ``configure_model`` as the
        strategy wants it (values unset: a resume loads them)."""
        raise NotImplementedError(f"backend {self.name or type(self).__name__!r}: override rebuild()")

    def regrow(self, trainer: pl.Trainer, pl_module: pl.LightningModule, gpt: torch.nn.Module,
               plans: Sequence[GrowthPlan]) -> None:
        self.rebuild(trainer, pl_module, gpt, plans[-1].new_config)  # values come from the checkpoint
        trainer.strategy.setup_optimizers(trainer)


def check_sharding_supported(model: torch.nn.Module) -> None:
    """Refuse DTensor layouts other than FSDP2's ``Shard(0)`` over a 1-D mesh (e.g. tensor parallel plans)."""
    from torch.distributed.tensor import DTensor

    for name, p in model.named_parameters():
        if isinstance(p, DTensor) and (p.device_mesh.ndim != 1 or not all(
                place.is_shard(0) or place.is_replicate() for place in p.placements)):
            raise GrowthError(
                f"parameter {name!r} is laid out as {p.placements} on a {p.device_mesh.ndim}-D mesh: only FSDP2 "
                "(fully_shard, Shard(0) on one data-parallel dimension) can be grown; tensor parallel plans cannot"
            )


def rebuilt_result_params(plan: GrowthPlan, old_named: Mapping[str, torch.nn.Parameter],
                          new_named: Mapping[str, torch.nn.Parameter]) -> tuple[dict, dict, dict]:
    """``(old_params, new_params, added)`` of a growth that rebuilt the GPT
    (:func:`~lightning_sparkling.growth.surgery.result_params`: every parameter is a new object), each new parameter
    trained or frozen like its predecessor (a new block's like its source)."""
    old_params, new_params, added = result_params(plan, old_named, new_named)
    for name, new_param in new_params.items():
        new_param.requires_grad_(old_params[name].requires_grad)
    for source, new_param in added.values():
        new_param.requires_grad_(source.requires_grad)
    return old_params, new_params, added


def peek_callback_state(checkpoint_path: Any, state_key: str) -> dict[str, Any] | None:
    """A callback's state in a checkpoint, without loading its tensors (``meta.pt`` of a sharded directory, or
    the full file memory-mapped)."""
    path = Path(checkpoint_path)
    if path.is_dir():
        meta = path / "meta.pt"
        checkpoint = torch.load(meta, map_location="cpu", weights_only=False) if meta.is_file() else {}
    else:
        checkpoint = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    return callback_state(checkpoint.get("callbacks"), state_key)


def callback_state(callbacks: dict[str, Any] | None, state_key: str) -> Any:
    """``callbacks[state_key]``, or for the growth callback's key its state under a former key too
    (:func:`~lightning_sparkling.growth.record.growth_state`); ``None`` when absent."""
    if state_key == GROWTH_STATE_KEY:
        return growth_state(callbacks)
    return (callbacks or {}).get(state_key)


def hook_strategy_resume(trainer: pl.Trainer, state_key: str, on_state: ResumeFn) -> Callable[[], None]:
    """FSDP2 (``ModelParallelStrategy``) and FSDP1 (``FSDPStrategy``) load weights *and optimizer states* straight
    into the live sharded model in ``strategy.load_checkpoint`` (after ``on_fit_start``), so that call is wrapped:
    the checkpoint's callback state is peeked (:func:`peek_callback_state`) and handed to ``on_state`` before
    Lightning loads. Returns the function that removes the wrapper."""
    strategy = trainer.strategy
    original = strategy.load_checkpoint

    def load_checkpoint(checkpoint_path, *args, **kwargs):
        state = peek_callback_state(checkpoint_path, state_key)
        if state:
            on_state(state)
        return original(checkpoint_path, *args, **kwargs)

    strategy.load_checkpoint = load_checkpoint
    return lambda: strategy.__dict__.pop("load_checkpoint", None)


def parent_and_attr(root: torch.nn.Module, child: torch.nn.Module) -> tuple[torch.nn.Module, str]:
    """``(parent module, attribute name)`` of ``child`` inside ``root`` (where a sharded backend puts the rebuilt
    GPT or its wrapper back).

    Raises:
        GrowthError: when ``child`` is not a submodule of ``root``.
    """
    for name, module in root.named_modules():
        if module is child and name:
            parent_name, _, attr = name.rpartition(".")
            return root.get_submodule(parent_name), attr
    raise GrowthError("the GPT to grow (or its FSDP1 wrapper) is not a submodule of the LightningModule")


# ------------------------------------------------------------------ the sharded backends' shared round trip
def grown_values(plan: GrowthPlan, full: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every tensor of the grown model that derives from the pre-growth tensors ``full`` (one unit gathered, by
    pre-growth names), by grown name: the planned ones (:func:`~lightning_sparkling.growth.surgery.grow_tensors`:
    under a depth growth, an old block's kept tensors under their new position and every new block's copy of them)
    and the unplanned ones (unchanged, under :meth:`~lightning_sparkling.growth.plan.GrowthPlan.carry`'s name)."""
    grown = grow_tensors(plan, full)
    for name, value in full.items():
        carried = plan.carry(name)
        if carried is not None and carried not in grown:
            grown[carried] = value
    return grown


def place_meta_gpt(pl_module: torch.nn.Module, where: torch.nn.Module, old_gpt: torch.nn.Module, config: object,
                   swap: UndoLog) -> torch.nn.Module:
    """Build ``GPT(config)`` on the meta device, tied and with the sequence length of ``old_gpt``
    (:func:`~lightning_sparkling.growth.surgery.grown_max_seq_length`: a target's ``block_size`` moves it), and put
    it in ``where``'s place on the LightningModule (the GPT itself under FSDP2, its FSDP1 wrapper under FSDP1), in
    ``swap``."""
    from litgpt.model import GPT

    parent, attr = parent_and_attr(pl_module, where)
    with torch.device("meta"):
        new = GPT(config)
    # the dtype of every parameter as in old_gpt (GPT(config) builds in the default dtype: a bf16-true or float64
    # model would otherwise come back float32); FSDP1 and activation checkpointing prefix the names. A new block of
    # a depth growth takes the dtypes of the old blocks' tensors of the same name.
    dtypes = {clean_name(name): p.dtype for name, p in old_gpt.named_parameters()}
    block_dtypes = {found[1]: dtype for name, dtype in dtypes.items() if (found := split_block_name(name)) is not None}
    # a new module of a plug-in axis (a new expert, a new router): the dtype of the old tensors of its pattern
    # (indices as *), else the dtype most of the model has
    pattern_dtypes = {_index_pattern(name): dtype for name, dtype in dtypes.items()}
    counts = Counter(dtypes.values())
    model_dtype = counts.most_common(1)[0][0] if counts else None
    for name, param in list(new.named_parameters()):
        found = split_block_name(name)
        fallback = pattern_dtypes.get(_index_pattern(name), model_dtype or param.dtype)
        dtype = dtypes.get(name, block_dtypes.get(found[1], fallback) if found is not None else fallback)
        if dtype != param.dtype:
            owner, _, leaf = name.rpartition(".")
            setattr(new.get_submodule(owner), leaf, torch.nn.Parameter(param.to(dtype), param.requires_grad))
    if old_gpt.lm_head.weight is old_gpt.transformer.wte.weight:
        new.transformer.wte.weight = new.lm_head.weight
    new.max_seq_length = grown_max_seq_length(old_gpt.max_seq_length, old_gpt.config, config)  # a target's block_size
    swap.set(parent, attr, new)
    return new


def _index_pattern(name: str) -> str:
    """``name`` with every module index as ``*`` (``transformer.h.*.mlp.experts.*.fc_1.weight``)."""
    return re.sub(r"(?<=\.)\d+(?=\.)", "*", name)
