"""Run by tests/test_ddp.py: a two-stage growth under DDP, FSDP2 or FSDP1 (2 ranks), or its one-process twin.

    python tests/ddp_script.py OUT_DIR {ddp|fsdp2|fsdp1|fsdp1-cuda|single} [--resume CKPT] [--tag=TAG]

``fsdp1`` runs Lightning's ``FSDPStrategy`` on 2 CPU ranks (gloo) through a subclass that lifts Lightning's
GPU-only check and gives FSDP the CPU as its device (torch's FSDP1 runs on CPU with gloo; Lightning refuses it
only because it never tests it there). ``fsdp1-cuda`` is the plain ``FSDPStrategy`` on 2 GPUs (nccl).

Lightning's launcher re-runs this same command for rank 1. Each rank writes the final (gathered) weights to
OUT_DIR/<mode><tag>-rank<r>.pt. Uninterrupted multi-process runs save checkpoints at steps 4 (before growth), 8 (right at the first
growth) and 12 (between growths): DDP full files, FSDP2 sharded directories and full files.
"""

import argparse
import sys
from contextlib import contextmanager
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy
from torch.distributed.tensor import DTensor

sys.path.insert(0, str(Path(__file__).parent))
from _tiny import TinyModule, make_trainer  # noqa: E402

from lightning_sparkling import GrowthStage, WidthGrowthCallback  # noqa: E402

MAX_STEPS = 24
GROWTH_AT = 8
SAVE_AT = (4, 8, 12)  # before the first growth, right at it (new entries not stepped yet), between growths


class SaveAt(Callback):
    """Saves checkpoints `full<step>.ckpt` (one file) and, under FSDP2/FSDP1, `sharded<step>.ckpt` (a directory).
    Listed after the growth callback, so the checkpoint at the growth step holds the grown model."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.done: set[int] = set()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step in SAVE_AT and step not in self.done:
            self.done.add(step)
            strategy = trainer.strategy
            if isinstance(strategy, ModelParallelStrategy):
                trainer.save_checkpoint(self.out / f"sharded{step}.ckpt")
                strategy._save_distributed_checkpoint = False
                trainer.save_checkpoint(self.out / f"full{step}.ckpt")
                strategy._save_distributed_checkpoint = True
            elif isinstance(strategy, FSDPStrategy):
                trainer.save_checkpoint(self.out / f"sharded{step}.ckpt")
                strategy._state_dict_type = "full"
                trainer.save_checkpoint(self.out / f"full{step}.ckpt")
                strategy._state_dict_type = "sharded"
            else:
                trainer.save_checkpoint(self.out / f"full{step}.ckpt")


def _full_state_dict_context_cpu(module, world_size: int, rank0_only: bool = True):
    """Lightning's full-state-dict context without ``offload_to_cpu``: on CPU ranks, FSDP1's "offload" aliases the
    gathered parameters, which are freed before the state dict clones them (a segfault). GPUs are unaffected."""
    from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig, StateDictType
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    return FSDP.state_dict_type(module, StateDictType.FULL_STATE_DICT,
                                FullStateDictConfig(offload_to_cpu=False, rank0_only=rank0_only),
                                FullOptimStateDictConfig(offload_to_cpu=False, rank0_only=rank0_only))


class CPUFSDPStrategy(FSDPStrategy):
    """``FSDPStrategy`` on CPU ranks, for tests: a subclass is not caught by Lightning's GPU-only check, FSDP1
    needs ``device_id=cpu`` where Lightning passes the CPU device's index (``None``), and full state dicts must not
    be "offloaded" to the CPU they are already on."""

    def setup_environment(self) -> None:
        import lightning.fabric.strategies.fsdp as fabric_fsdp
        import lightning.pytorch.strategies.fsdp as pytorch_fsdp

        fabric_fsdp._get_full_state_dict_context = _full_state_dict_context_cpu
        pytorch_fsdp._get_full_state_dict_context = _full_state_dict_context_cpu
        super().setup_environment()

    @contextmanager
    def model_sharded_context(self):
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import enable_wrap

        with enable_wrap(wrapper_cls=FullyShardedDataParallel, cpu_offload=self.cpu_offload,
                         mixed_precision=self.mixed_precision_config, sharding_strategy=self.sharding_strategy,
                         device_id=torch.device("cpu"), **self.kwargs):
            yield


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("mode", choices=["ddp", "fsdp2", "fsdp1", "fsdp1-cuda", "single"])
    parser.add_argument("--resume", default=None)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    out = Path(args.out) / args.mode
    out.mkdir(parents=True, exist_ok=True)
    stages = [GrowthStage(GROWTH_AT, n_embd=64, intermediate_size=128, rewarmup_steps=4),
              GrowthStage(16, intermediate_size=192, init="random-copy", rewarmup_steps=4)]
    module = TinyModule(max_steps=MAX_STEPS, accumulate=2, emulate_ranks=2 if args.mode == "single" else 0)
    callbacks = [WidthGrowthCallback(stages)]
    kwargs = {}
    if args.mode == "ddp":
        kwargs = dict(strategy="ddp", devices=2)
    elif args.mode == "fsdp2":
        kwargs = dict(strategy=ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1), devices=2)
    elif args.mode == "fsdp1":
        kwargs = dict(strategy=CPUFSDPStrategy(use_orig_params=True, state_dict_type="sharded"), devices=2)
    elif args.mode == "fsdp1-cuda":
        kwargs = dict(strategy=FSDPStrategy(use_orig_params=True, state_dict_type="sharded"), devices=2,
                      accelerator="cuda", deterministic=False)
    if args.mode != "single" and not args.resume:
        callbacks.append(SaveAt(out))
    trainer = make_trainer(callbacks, max_steps=MAX_STEPS, accumulate=2, **kwargs)
    trainer.fit(module, ckpt_path=args.resume)
    state = {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu()
             for k, v in module.model.state_dict().items()}  # FSDP1: a full state dict with plain GPT names
    torch.save({"state": state, "losses": module.losses}, out / f"final{args.tag}-rank{trainer.global_rank}.pt")
    if torch.distributed.is_initialized():  # an orderly gloo shutdown (avoids an abort at interpreter exit)
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
