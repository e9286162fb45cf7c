"""Growth backends for a model held whole by every process: one device (``SingleDeviceStrategy``) and DDP.

The model is grown in place (:func:`~lightning_sparkling.growth.surgery.grow_model`), the optimizer patched in
place, and new-entry slices address the parameters directly. Under DDP every rank grows identically (the growth
seed is rank-independent); what DDP adds is the re-wrap: DDP registered its gradient hooks on the Parameters that
existed when it wrapped the module, so without a new wrapper nothing errors but the ranks silently drift apart.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import DDPStrategy

from lightning_sparkling.growth.optim_state import OptimizerPatch, plan_optimizer_patch
from lightning_sparkling.growth.surgery import GrowthResult, grow_model
from lightning_sparkling.parallel.base import PieceMapper, ResumeFn

if TYPE_CHECKING:
    from lightning_sparkling.growth.plan import GrowthPlan
    from lightning_sparkling.growth.stage import GrowthStage


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


class SingleBackend:
    """One device (CPU or GPU): grow in place, nothing to re-wrap.

    Example::

        backend = SingleBackend()
        result = backend.grow(trainer, pl_module, pl_module.model, GrowthStage(100, n_embd=256), seed=0,
                              stage_index=0)
    """

    name = "single"
    restores_after_fit_start = False

    def check_model(self, pl_module: pl.LightningModule, gpt: torch.nn.Module) -> None:
        pass  # grow_model checks the GPT itself

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
            state = (checkpoint.get("callbacks") or {}).get(state_key)
            if state:
                on_state(state)
            return original(checkpoint)

        pl_module.on_load_checkpoint = on_load_checkpoint
        return lambda: pl_module.__dict__.pop("on_load_checkpoint", None)

    def regrow(self, trainer: pl.Trainer, pl_module: pl.LightningModule, gpt: torch.nn.Module,
               plans: Sequence[GrowthPlan]) -> None:
        for plan in plans:  # values are overwritten by the checkpoint's
            grow_model(gpt, plan.stage, seed=plan.seed, stage_index=plan.stage_index, plan=plan)


class DDPBackend(SingleBackend):
    """DDP (``"ddp"``, ``"ddp_spawn"``, ...): every rank grows its replica identically, then the LightningModule is
    wrapped anew (:func:`rewrap_after_growth`)."""

    name = "ddp"

    def rewrap(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        rewrap_after_growth(trainer, pl_module)
