"""One growth backend per Lightning strategy, chosen once per fit by :func:`select_backend`.

- :mod:`~lightning_sparkling.parallel.base`: the :class:`GrowthBackend` protocol;
- :mod:`~lightning_sparkling.parallel.single`: one device and DDP (grow in place; DDP re-wraps);
- :mod:`~lightning_sparkling.parallel.fsdp2`: FSDP2 through ``ModelParallelStrategy`` (DTensor round trip);
- :mod:`~lightning_sparkling.parallel.fsdp1`: FSDP1 through ``FSDPStrategy(use_orig_params=True)``;
- :mod:`~lightning_sparkling.parallel.testing`: FSDP1 on CPU ranks, for tests and benchmarks;
- :mod:`~lightning_sparkling.parallel.sharding`: :func:`shard_gpt` (FSDP2) and :func:`wrap_gpt` (FSDP1), what a
  LightningModule's ``configure_model`` calls so that the backends can grow the GPT;
- :mod:`~lightning_sparkling.parallel.activation_checkpointing`: :func:`checkpoint_blocks` (block by block, plain
  names, new blocks of a growth follow);
- :mod:`~lightning_sparkling.parallel.compile`: :func:`compile_gpt` (whole GPT or per block) and what a growth does
  to compiled code (:func:`recompile_after_growth`).
"""

from __future__ import annotations

from typing import Any

from lightning_sparkling.growth.errors import GrowthError
from lightning_sparkling.parallel.activation_checkpointing import checkpoint_blocks
from lightning_sparkling.parallel.base import GrowthBackend
from lightning_sparkling.parallel.compile import compile_gpt
from lightning_sparkling.parallel.sharding import shard_gpt, wrap_gpt

__all__ = ["SUPPORTED", "GrowthBackend", "check_strategy_supported", "checkpoint_blocks", "compile_gpt",
           "select_backend", "shard_gpt", "wrap_gpt"]

#: what :func:`select_backend` accepts, for messages
SUPPORTED = ("a single device", "strategy='ddp'", "FSDP2 via ModelParallelStrategy(tensor_parallel_size=1)",
             "FSDPStrategy(use_orig_params=True)")


def select_backend(strategy: Any) -> GrowthBackend:
    """The growth backend for a Lightning strategy (or a ``Trainer``, whose ``strategy`` is used).

    Supported: one device (CPU or GPU), DDP (``"ddp"``, ``"ddp_spawn"``), FSDP2 through
    ``ModelParallelStrategy`` with ``tensor_parallel_size=1``, and FSDP1 through ``FSDPStrategy`` with
    ``use_orig_params=True``. DeepSpeed and tensor parallelism are refused.

    Args:
        strategy: ``trainer.strategy`` (or the trainer).

    Raises:
        GrowthError: naming the strategy and the supported ones, for a strategy growth cannot handle.

    Example::

        backend = select_backend(trainer.strategy)   # in Callback.setup
        backend.name                                 # "single", "ddp", "fsdp2" or "fsdp1"
    """
    from lightning.pytorch.strategies import (
        DDPStrategy,
        DeepSpeedStrategy,
        FSDPStrategy,
        ModelParallelStrategy,
        SingleDeviceStrategy,
        Strategy,
    )

    if not isinstance(strategy, Strategy):  # a Trainer (or anything holding one as .strategy)
        strategy = strategy.strategy
    if isinstance(strategy, DeepSpeedStrategy):  # a DDPStrategy subclass: refuse it before the DDP check
        raise GrowthError(
            f"strategy {type(strategy).__name__} is not supported by GrowthCallback: DeepSpeed owns the "
            "parameters and optimizer state (ZeRO partitions), so they cannot be grown mid-fit; use strategy='ddp', "
            "FSDP2 via ModelParallelStrategy, or FSDPStrategy(use_orig_params=True)"
        )
    if isinstance(strategy, FSDPStrategy):
        if not strategy.kwargs.get("use_orig_params"):
            raise GrowthError(
                "FSDPStrategy(use_orig_params=False) gives the optimizer flattened parameters that growth cannot "
                "patch: pass FSDPStrategy(use_orig_params=True, ...) and wrap the GPT in configure_model() with "
                "lightning_sparkling.parallel.wrap_gpt"
            )
        from lightning_sparkling.parallel.fsdp1 import FSDP1Backend

        return FSDP1Backend()
    if isinstance(strategy, ModelParallelStrategy):
        tp = getattr(strategy, "_tensor_parallel_size", 1)  # "auto" is resolved to the local device count by now
        if tp != 1:
            raise GrowthError(
                f"ModelParallelStrategy(tensor_parallel_size={tp}): tensor parallelism is not supported by "
                "GrowthCallback; use ModelParallelStrategy(data_parallel_size=<devices x nodes>, "
                "tensor_parallel_size=1) for FSDP2"
            )
        from lightning_sparkling.parallel.fsdp2 import FSDP2Backend

        return FSDP2Backend()
    if isinstance(strategy, DDPStrategy):
        from lightning_sparkling.parallel.single import DDPBackend

        return DDPBackend()
    if isinstance(strategy, SingleDeviceStrategy):
        from lightning_sparkling.parallel.single import SingleBackend

        return SingleBackend()
    raise GrowthError(
        f"strategy {type(strategy).__name__} is not supported by GrowthCallback: use a single device, "
        "strategy='ddp', FSDP2 via ModelParallelStrategy, or FSDPStrategy(use_orig_params=True) (DeepSpeed and "
        "tensor parallelism cannot be grown mid-fit by this version)"
    )


def check_strategy_supported(trainer: Any) -> None:
    """Refuse, naming it, a strategy growth cannot handle (:func:`select_backend` without keeping the backend)."""
    select_backend(trainer)


def __getattr__(name: str) -> Any:
    if name == "SUPPORTED_STRATEGIES":  # the strategy classes select_backend accepts (kept for old imports)
        from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy, ModelParallelStrategy, SingleDeviceStrategy

        return (SingleDeviceStrategy, DDPStrategy, ModelParallelStrategy, FSDPStrategy)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
