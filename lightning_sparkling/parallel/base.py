"""``GrowthBackend``: what a strategy must provide so that :class:`~lightning_sparkling.callbacks.growth.
GrowthCallback` can grow a model trained under it.

The callback owns *when* a growth happens and the bookkeeping around it (stages, records, re-warmup schedulers,
logging, rollback on failure); a backend owns *how* the model and its optimizer state are grown, re-wrapped or
re-sharded under one strategy. One backend is chosen per fit, in ``setup``, by
:func:`~lightning_sparkling.parallel.select_backend`. The tensor math itself is strategy-free
(:mod:`lightning_sparkling.growth`): a backend only gets full tensors to it and puts the grown ones back where the
strategy wants them, in the spirit of torchtitan's ``parallelize`` functions or Lightning's strategies, which each
own their wrap and unwrap.

Adding a strategy is one new module in this package with a class implementing every method below, and one
``isinstance`` line in :func:`~lightning_sparkling.parallel.select_backend`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch

if TYPE_CHECKING:
    import lightning.pytorch as pl

    from lightning_sparkling.growth.optim_state import OptimizerPatch
    from lightning_sparkling.growth.plan import GrowthPlan
    from lightning_sparkling.growth.stage import GrowthStage
    from lightning_sparkling.growth.surgery import GrowthResult

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
