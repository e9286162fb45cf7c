"""Run by tests/growth/test_baselines.py: two growth stages with the paper-baseline options on (uneven split,
perturbation, scaled optimizer state; then a random split with a faster decay, whose baseline LR the earlier stage's new
entries re-warm against) under DDP or FSDP2 (2 CPU ranks, gloo), or its one-process twin computing the same global
batch. (``rewarmup_scope='all'`` is the same group-LR mechanism as ``decay_speedup`` with another target.)

    python tests/baselines_ddp_script.py OUT_DIR {ddp|fsdp2|single}

Each rank writes the final (gathered) weights to OUT_DIR/<mode>-rank<r>.pt.
"""

import argparse
import sys
from pathlib import Path

import torch
from lightning.pytorch.strategies import ModelParallelStrategy
from torch.distributed.tensor import DTensor

sys.path.insert(0, str(Path(__file__).parent))
from _tiny import TinyModule, exit_now, make_trainer, paper_stage

from lightning_sparkling import WidthGrowthCallback

MAX_STEPS = 12
STAGES = [
    paper_stage(3, n_embd=64, intermediate_size=128, split="uneven", perturb=0.05, optimizer_state="scaled",
                rewarmup_steps=2),
    paper_stage(6, intermediate_size=192, split="random", decay_speedup=0.5, rewarmup_steps=2),  # 1.5x
]

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("mode", choices=["ddp", "fsdp2", "single"])
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    module = TinyModule(max_steps=MAX_STEPS, emulate_ranks=2 if args.mode == "single" else 0)
    kwargs = {}
    if args.mode == "ddp":
        kwargs = dict(strategy="ddp", devices=2)
    elif args.mode == "fsdp2":
        kwargs = dict(strategy=ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1), devices=2)
    trainer = make_trainer([WidthGrowthCallback(STAGES)], max_steps=MAX_STEPS, **kwargs)
    trainer.fit(module)
    state = {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu()
             for k, v in module.model.state_dict().items()}
    torch.save({"state": state}, out / f"{args.mode}-rank{trainer.global_rank}.pt")
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    exit_now()
