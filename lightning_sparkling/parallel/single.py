"""Growth backends for a model held whole by every process: one device (``SingleDeviceStrategy``) and DDP.

The model is grown in place (:func:`~lightning_sparkling.growth.surgery.grow_model`), the optimizer patched in
place, and new-entry slices address the parameters directly. Under DDP every rank grows identically (the growth
seed is rank-independent); what DDP adds is the re-wrap: DDP registered its gradient hooks on the Parameters that
existed when it wrapped the module, so without a new wrapper nothing errors but the ranks silently drift apart.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.strategies import DDPStrategy, DeepSpeedStrategy, SingleDeviceStrategy

from lightning_sparkling.parallel.base import BaseBackend


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


class SingleBackend(BaseBackend):
    """One device (CPU or GPU): grow in place, nothing to re-wrap (every step is :class:`BaseBackend`'s).

    Example::

        backend = SingleBackend()
        result = backend.grow(trainer, pl_module, pl_module.model, GrowthStage(100, n_embd=256), seed=0,
                              stage_index=0)
    """

    name = "single"

    @classmethod
    def accepts(cls, strategy: Any) -> bool:
        return isinstance(strategy, SingleDeviceStrategy)


class DDPBackend(SingleBackend):
    """DDP (``"ddp"``, ``"ddp_spawn"``, ...): every rank grows its replica identically, then the LightningModule is
    wrapped anew (:func:`rewrap_after_growth`)."""

    name = "ddp"

    @classmethod
    def accepts(cls, strategy: Any) -> bool:
        # DeepSpeed is a DDPStrategy that owns the parameters and optimizer state (ZeRO partitions): not this one
        return isinstance(strategy, DDPStrategy) and not isinstance(strategy, DeepSpeedStrategy)

    @classmethod
    def make_strategy(cls, world_size: int) -> Any:
        return "ddp"  # Lightning's own, by name

    def rewrap(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        rewrap_after_growth(trainer, pl_module)
