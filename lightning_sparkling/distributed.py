"""Parallelism side of a growth: what a strategy needs after the model's parameters were replaced.

Model surgery (:mod:`lightning_sparkling.surgery`) knows nothing of strategies; the callback calls
:func:`rewrap_after_growth` once the grown model and patched optimizers are in place.
"""

from __future__ import annotations

import lightning.pytorch as pl
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy

from lightning_sparkling.plan import GrowthError


SUPPORTED_STRATEGIES = (SingleDeviceStrategy, DDPStrategy)


def check_strategy_supported(trainer: pl.Trainer) -> None:
    """Refuse, at setup and naming it, a strategy growth cannot handle.

    Supported: one device (CPU or GPU) and DDP (``"ddp"``, ``"ddp_spawn"``, any number of nodes). Sharded
    strategies (FSDP, ModelParallel/FSDP2), DeepSpeed and tensor parallelism are refused: growing their sharded
    parameters needs a gather -> grow -> re-shard round trip that is not implemented yet.
    """
    strategy = trainer.strategy
    if isinstance(strategy, SUPPORTED_STRATEGIES):
        return
    raise GrowthError(
        f"strategy {type(strategy).__name__} is not supported by WidthGrowthCallback yet: use a single device or "
        "strategy='ddp' (sharded strategies such as FSDP, ModelParallelStrategy, DeepSpeed and tensor parallel "
        "cannot be grown mid-fit by this version)"
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
