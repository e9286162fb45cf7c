"""Run by tests/distributed/test_ddp.py: a two-stage growth under DDP, FSDP2 or FSDP1 (2 ranks), or its one-process
twin.

    python tests/ddp_script.py OUT_DIR {ddp|fsdp2|fsdp1|fsdp1-cuda|single} [--accumulate N] [--resume CKPT] [--tag=TAG]
        [--ranks N]

``fsdp1`` runs Lightning's ``FSDPStrategy`` on 2 CPU ranks (gloo) through
``lightning_sparkling.parallel.testing.CPUFSDPStrategy``, a subclass that lifts Lightning's GPU-only check (torch's
FSDP1 runs on CPU with gloo). ``fsdp1-cuda`` is the plain ``FSDPStrategy`` on 2 GPUs (nccl), or on one with
``--ranks 1`` (then ``single --ranks 1`` is its one-process twin).

Lightning's launcher re-runs this same command for rank 1. Each rank writes the final (gathered) weights to
OUT_DIR/<mode>-acc<N>/final<tag>-rank<r>.pt. The second stage grows the MLP to an odd width (191), so FSDP2 and FSDP1
shard it unevenly over the 2 ranks. ``--accumulate 1`` is the path where Lightning runs forward and backward inside
``optimizer.step`` (after the step pre-hooks); ``2`` runs the first micro-batch's backward before it. Uninterrupted
multi-process runs save checkpoints at steps 4 (before growth), 8 (right at the first growth) and 12 (between growths):
DDP full files, FSDP2 sharded directories and full files.
"""

import argparse
import sys
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.plugins.precision import FSDPPrecision
from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy
from torch.distributed.tensor import DTensor

sys.path.insert(0, str(Path(__file__).parent))
from _tiny import TinyModule, exit_now, make_trainer, paper_stage

from lightning_sparkling import GrowthStage, WidthGrowthCallback
from lightning_sparkling.parallel.testing import CPUFSDPStrategy

MAX_STEPS = 24
GROWTH_AT = 8
SAVE_AT = (4, 8, 12)  # before the first growth, right at it (new entries not stepped yet), between growths


class Float64FSDPPrecision(FSDPPrecision):
    """Lightning's FSDP precision plugin offers no 64-bit setting ("32-true" casts the model to float32): this one
    keeps the float64 weights and has FSDP1 compute and reduce in float64, like the other strategies here."""

    def __init__(self) -> None:
        super().__init__("32-true")
        self._desired_input_dtype = torch.float64

    @property
    def mixed_precision_config(self):
        from torch.distributed.fsdp import MixedPrecision

        return MixedPrecision(param_dtype=torch.float64, reduce_dtype=torch.float64, buffer_dtype=torch.float64)


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


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("mode", choices=["ddp", "fsdp2", "fsdp1", "fsdp1-cuda", "single"])
    parser.add_argument("--accumulate", type=int, default=2)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--tag", default="")
    parser.add_argument("--ranks", type=int, default=2,
                        help="ranks of the run (fsdp1-cuda: GPUs; single: the ranks whose global batch it computes)")
    args = parser.parse_args()
    out = Path(args.out) / f"{args.mode}-acc{args.accumulate}"
    out.mkdir(parents=True, exist_ok=True)
    # the first stage runs the symmetry loop (a check every 2 steps, boost up to 4x): its decisions read full tensors
    # through the backend, so ranks must gather and decide alike for DDP/FSDP to end where one process ends
    stages = [paper_stage(GROWTH_AT, n_embd=64, intermediate_size=128, rewarmup_steps=4, symmetry_target=0.2,
                          symmetry_interval=2, symmetry_max_boost=4.0),
              # recipe auto (resolved on each rank from the module's schedule; its keys set here win)
              GrowthStage(16, intermediate_size=191, init="random-copy", rewarmup_ratio=2.0, rewarmup_steps=3)]
    # float64 weights on CPU: one process and 2 ranks agree to ~5e-7 (float32: ~4e-5) unless something really differs
    module = TinyModule(max_steps=MAX_STEPS, accumulate=args.accumulate,
                        emulate_ranks=args.ranks if args.mode == "single" else 0,
                        dtype=torch.float32 if args.mode == "fsdp1-cuda" else torch.float64)
    callbacks = [WidthGrowthCallback(stages)]
    kwargs = {}
    if args.mode == "ddp":
        kwargs = dict(strategy="ddp", devices=2)
    elif args.mode == "fsdp2":
        kwargs = dict(strategy=ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1), devices=2)
    elif args.mode == "fsdp1":
        kwargs = dict(strategy=CPUFSDPStrategy(use_orig_params=True, state_dict_type="sharded"), devices=2,
                      plugins=[Float64FSDPPrecision()])
    elif args.mode == "fsdp1-cuda":
        kwargs = dict(strategy=FSDPStrategy(use_orig_params=True, state_dict_type="sharded"), devices=args.ranks,
                      accelerator="cuda", deterministic=False)
    if args.mode != "single" and not args.resume:
        callbacks.append(SaveAt(out))
    trainer = make_trainer(callbacks, max_steps=MAX_STEPS, accumulate=args.accumulate, **kwargs)
    trainer.fit(module, ckpt_path=args.resume)
    backend = {"single": "single", "ddp": "ddp", "fsdp2": "fsdp2", "fsdp1": "fsdp1", "fsdp1-cuda": "fsdp1"}[args.mode]
    assert callbacks[0].backend.name == backend, (callbacks[0].backend, args.mode)  # grown through its backend
    state = {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu()
             for k, v in module.model.state_dict().items()}  # FSDP1: a full state dict with plain GPT names
    boosts = [float(r["symmetry_boost"]) for r in callbacks[0].state_dict()["records"]]  # the loop's decisions
    recipes = [s["recipe"] for s in callbacks[0].summaries]  # every growth of the run, a resumed one's too
    torch.save({"state": state, "losses": module.losses, "boosts": boosts, "recipes": recipes},
               out / f"final{args.tag}-rank{trainer.global_rank}.pt")
    if torch.distributed.is_initialized():  # an orderly gloo shutdown (avoids an abort at interpreter exit)
        torch.distributed.barrier()  # both ranks' results are on disk
        torch.distributed.destroy_process_group()
    exit_now()
