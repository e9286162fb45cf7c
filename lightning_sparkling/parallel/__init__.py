"""One growth backend per Lightning strategy, chosen once per fit by :func:`select_backend`.

- :mod:`~lightning_sparkling.parallel.base`: the :class:`GrowthBackend` protocol, the shared steps
  (:class:`BaseBackend`, :class:`ShardedBackend`);
- :mod:`~lightning_sparkling.parallel.registry`: the backends by name (:func:`register_backend`), read by
  :func:`select_backend`, the CLI's strategy choices and checks, its Trainer and its module
  (:func:`backend_class_for`);
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
from lightning_sparkling.parallel.base import BaseBackend, GrowthBackend, ShardedBackend
from lightning_sparkling.parallel.compile import compile_gpt
from lightning_sparkling.parallel.registry import (
    backend_class_for,
    backend_entry_for,
    cli_backend,
    cli_strategies,
    register_backend,
    registered_backends,
    unregister_backend,
)
from lightning_sparkling.parallel.sharding import shard_gpt, wrap_gpt

__all__ = ["BaseBackend", "GrowthBackend", "ShardedBackend", "backend_class_for", "backend_entry_for",
           "check_strategy_supported", "checkpoint_blocks", "cli_backend", "cli_strategies", "compile_gpt",
           "register_backend", "registered_backends", "select_backend", "shard_gpt", "unregister_backend", "wrap_gpt"]

# the built-in backends, in the order select_backend tries them (and its message lists them)
register_backend("single", "lightning_sparkling.parallel.single:SingleBackend", usage="a single device")
register_backend("ddp", "lightning_sparkling.parallel.single:DDPBackend", usage="strategy='ddp'", cli_strategy="ddp")
register_backend("fsdp2", "lightning_sparkling.parallel.fsdp2:FSDP2Backend",
                 usage="FSDP2 via ModelParallelStrategy(tensor_parallel_size=1)", cli_strategy="fsdp2",
                 cli_help="FSDP2 sharding")
register_backend("fsdp1", "lightning_sparkling.parallel.fsdp1:FSDP1Backend",
                 usage="FSDPStrategy(use_orig_params=True)", cli_strategy="fsdp1", cli_help="FSDP1", cuda_only=True,
                 supports_compile=False, supports_activation_checkpointing=False, whole_matrices=False)


def select_backend(strategy: Any) -> GrowthBackend:
    """The growth backend for a Lightning strategy (or a ``Trainer``, whose ``strategy`` is used): the first
    registered backend (:func:`registered_backends`) whose class accepts it, after that class' own check of the
    strategy's settings.

    Supported as built in: one device (CPU or GPU), DDP (``"ddp"``, ``"ddp_spawn"``), FSDP2 through
    ``ModelParallelStrategy`` with ``tensor_parallel_size=1``, and FSDP1 through ``FSDPStrategy`` with
    ``use_orig_params=True``. DeepSpeed and tensor parallelism are refused.

    Args:
        strategy: ``trainer.strategy`` (or the trainer).

    Raises:
        GrowthError: naming the strategy and the supported ones, for a strategy no backend takes; a backend's own
            error naming the setting, for a strategy it takes but cannot grow under as configured.

    Example::

        backend = select_backend(trainer.strategy)   # in Callback.setup
        backend.name                                 # "single", "ddp", "fsdp2" or "fsdp1"
    """
    from lightning.pytorch.strategies import Strategy

    if not isinstance(strategy, Strategy):  # a Trainer (or anything holding one as .strategy)
        strategy = strategy.strategy
    cls = backend_class_for(strategy)
    if cls is not None:
        cls.check_strategy(strategy)
        return cls()
    raise GrowthError(
        f"strategy {type(strategy).__name__} is not supported by GrowthCallback: use "
        f"{', '.join(e.usage for e in registered_backends())} (DeepSpeed and tensor parallelism cannot be grown "
        "mid-fit by this version)"
    )


def check_strategy_supported(trainer: Any) -> None:
    """Refuse, naming it, a strategy growth cannot handle (:func:`select_backend` without keeping the backend)."""
    select_backend(trainer)

