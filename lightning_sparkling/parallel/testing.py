"""Running Lightning's FSDP1 strategy on CPU ranks, for tests and benchmarks on machines without GPUs.

torch's FSDP1 (``FullyShardedDataParallel``) runs on CPU with the gloo backend, but Lightning's ``FSDPStrategy``
refuses any accelerator other than CUDA. :class:`CPUFSDPStrategy` lifts that check so that growth under FSDP1 can
be tested on 2 CPU processes, exactly as DDP and FSDP2 are. It is not meant for training: use ``FSDPStrategy`` on
GPUs.
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from typing import Any

import torch
from lightning.pytorch.strategies import FSDPStrategy

__all__ = ["CPUFSDPStrategy"]


def _full_state_dict_context_cpu(module: torch.nn.Module, world_size: int, rank0_only: bool = True) -> Any:
    """Lightning's full-state-dict context without ``offload_to_cpu``: on CPU ranks, FSDP1's "offload" aliases the
    gathered parameters, which FSDP frees before the state dict clones them (a segfault). GPUs are unaffected."""
    from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig, StateDictType
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    return FSDP.state_dict_type(module, StateDictType.FULL_STATE_DICT,
                                FullStateDictConfig(offload_to_cpu=False, rank0_only=rank0_only),
                                FullOptimStateDictConfig(offload_to_cpu=False, rank0_only=rank0_only))


class CPUFSDPStrategy(FSDPStrategy):
    """``FSDPStrategy`` on CPU ranks (gloo), for tests and benchmarks.

    Three differences from ``FSDPStrategy``, each only what CPU ranks need:

    - it is a subclass, which Lightning's "FSDP needs a GPU accelerator" check (an exact type test) lets through;
    - ``model_sharded_context`` gives FSDP ``device_id=cpu``, where Lightning passes the CPU device's index
      (``None``, which FSDP1 reads as "find an accelerator");
    - full (not sharded) checkpoints are gathered without ``offload_to_cpu`` (on CPU it aliases freed memory). This
      replaces Lightning's ``_get_full_state_dict_context`` in its FSDP modules for the rest of the process.

    Example::

        trainer = L.Trainer(accelerator="cpu", devices=2, strategy=CPUFSDPStrategy(use_orig_params=True))
    """

    def setup_environment(self) -> None:
        import lightning.fabric.strategies.fsdp as fabric_fsdp
        import lightning.pytorch.strategies.fsdp as pytorch_fsdp

        fabric_fsdp._get_full_state_dict_context = _full_state_dict_context_cpu
        pytorch_fsdp._get_full_state_dict_context = _full_state_dict_context_cpu
        super().setup_environment()

    @contextmanager
    def model_sharded_context(self) -> Generator[None, None, None]:
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import enable_wrap

        with enable_wrap(wrapper_cls=FullyShardedDataParallel, cpu_offload=self.cpu_offload,
                         mixed_precision=self.mixed_precision_config, sharding_strategy=self.sharding_strategy,
                         device_id=torch.device("cpu"), **self.kwargs):
            yield
