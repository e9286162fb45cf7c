"""Parallelism side of a growth: what a strategy needs after the model's parameters were replaced.

Model surgery (:mod:`lightning_sparkling.surgery`) knows nothing of strategies; the callback calls
:func:`rewrap_after_growth` once the grown model and patched optimizers are in place.
"""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy

from lightning_sparkling.plan import GrowthError


def check_strategy_supported(trainer: pl.Trainer) -> None:
    """Refuse strategies growth cannot handle, naming them (called at setup)."""
    strategy = trainer.strategy
    name = type(strategy).__name__
    if "DeepSpeed" in name:
        raise GrowthError(f"strategy {name} is not supported by WidthGrowthCallback: use 'ddp' or FSDP")
    if isinstance(strategy, (SingleDeviceStrategy, DDPStrategy)):
        return


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
