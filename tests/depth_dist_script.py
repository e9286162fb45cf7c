"""Run by tests/distributed/test_depth_distributed.py: depth growth (then depth + width in one stage) under DDP, FSDP2
or FSDP1 on 2 CPU ranks (gloo), or its one-process twin.

    python tests/depth_dist_script.py OUT_DIR {single|ddp|fsdp2|fsdp1} [--accumulate N] [--resume CKPT] [--tag=TAG]

Stage 0 (step 6) deepens the tiny 2-block model to 4 blocks (``interleave``, ``copy``: the kept block 1 moves to
position 2, new blocks 1 and 3 copy blocks 0 and 1; optimizer state ``drop``); stage 1 (step 12) deepens it to 5
blocks (``middle``, ``copy-zero``) and widens it in the same stage to ``n_embd=48`` and an odd MLP inner size 97, so
FSDP2 and FSDP1 shard it unevenly over the 2 ranks. Each rank writes the final (gathered) weights, its optimizer's
param-group layout (parameter shapes in order) and the symmetry metrics to
OUT_DIR/<mode>-acc<N>/final<tag>-rank<r>.pt. Uninterrupted multi-process runs save checkpoints at step 8 (between
the two growths): DDP a full file, FSDP2 and FSDP1 a sharded directory and a full file.
"""

import argparse
import sys
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy
from torch.distributed.tensor import DTensor

sys.path.insert(0, str(Path(__file__).parent))
from _tiny import TinyModule, exit_now, make_trainer, paper_stage
from ddp_script import Float64FSDPPrecision

from lightning_sparkling import WidthGrowthCallback
from lightning_sparkling.parallel.testing import CPUFSDPStrategy

MAX_STEPS = 18
SAVE_AT = (8,)  # after the depth growth (step 6), before the depth + width growth (step 12)
STAGES = [
    # optimizer_state="drop": new blocks start with zero moments as under "asymmetric", and a kept block keeps its
    # state wherever it moves (the moved block 1 is a new parameter under FSDP2 and FSDP1, the same one on one device)
    paper_stage(6, n_layer=4, depth_order="interleave", depth_init="copy", rewarmup_ratio=2.0, rewarmup_steps=3,
                optimizer_state="drop"),
    paper_stage(12, n_layer=5, depth_order="middle", n_embd=48, intermediate_size=97, rewarmup_ratio=1.5,
                rewarmup_steps=2),
]


class SaveAt(Callback):
    """Saves `full<step>.ckpt` (one file) and, under FSDP2/FSDP1, `sharded<step>.ckpt` (a directory); listed after
    the growth callback."""

    def __init__(self, out: Path, steps: tuple[int, ...] = SAVE_AT) -> None:
        self.out = out
        self.steps = steps
        self.done: set[int] = set()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        step = trainer.global_step
        if step in self.steps and step not in self.done:
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


def script_args() -> argparse.Namespace:
    """The command line of the 2-rank scripts: ``out mode [--accumulate N] [--resume CKPT] [--tag T]``."""
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("mode", choices=["single", "ddp", "fsdp2", "fsdp1"])
    parser.add_argument("--accumulate", type=int, default=2)
    parser.add_argument("--resume", default=None)
    parser.add_argument("--tag", default="")
    return parser.parse_args()


def backend_kwargs(mode: str) -> dict:
    """``Trainer`` keywords of a backend on 2 CPU ranks (nothing for ``single``)."""
    if mode == "ddp":
        return dict(strategy="ddp", devices=2)
    if mode == "fsdp2":
        return dict(strategy=ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1), devices=2)
    if mode == "fsdp1":
        return dict(strategy=CPUFSDPStrategy(use_orig_params=True, state_dict_type="sharded"), devices=2,
                    plugins=[Float64FSDPPrecision()])
    return {}


def finish() -> None:
    """An orderly gloo shutdown once both ranks' results are on disk, then exit at once."""
    if torch.distributed.is_initialized():  # avoids an abort at interpreter exit
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    exit_now()


def layout(optimizer: torch.optim.Optimizer) -> list[list[tuple[int, ...]]]:
    """Global shapes of each param group's parameters, in order (FSDP1: this rank's 1-D views, so their count)."""
    return [[tuple(p.shape) for p in group["params"]] for group in optimizer.param_groups]


if __name__ == "__main__":
    args = script_args()
    out = Path(args.out) / f"{args.mode}-acc{args.accumulate}"
    out.mkdir(parents=True, exist_ok=True)
    module = TinyModule(max_steps=MAX_STEPS, accumulate=args.accumulate,
                        emulate_ranks=2 if args.mode == "single" else 0, dtype=torch.float64)
    callbacks = [WidthGrowthCallback(STAGES, symmetry_every_n_steps=3)]  # depth symmetry read through the backend
    kwargs = backend_kwargs(args.mode)
    if args.mode != "single" and not args.resume:
        callbacks.append(SaveAt(out))
    trainer = make_trainer(callbacks, max_steps=MAX_STEPS, accumulate=args.accumulate, **kwargs)
    trainer.fit(module, ckpt_path=args.resume)
    assert callbacks[0].backend.name == args.mode, (callbacks[0].backend, args.mode)  # grown through its backend
    state = {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu()
             for k, v in module.model.state_dict().items()}  # FSDP1: a full state dict with plain GPT names
    torch.save({"state": state, "losses": module.losses, "layout": layout(trainer.optimizers[0]),
                "symmetry": callbacks[0].last_symmetry, "n_layer": module.model.config.n_layer},
               out / f"final{args.tag}-rank{trainer.global_rank}.pt")
    finish()
