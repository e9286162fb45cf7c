"""Run by tests/test_ddp.py: a two-stage growth under DDP (2 CPU ranks, gloo), or its one-process twin.

    python tests/ddp_script.py OUT_DIR {ddp|single} [--resume CKPT] [--save-at STEP]

Lightning's DDP launcher re-runs this same command for rank 1. Each rank writes its final weights to
OUT_DIR/<mode>-rank<r>.pt.
"""

import argparse
import sys
from pathlib import Path

import torch
from lightning.pytorch.callbacks import ModelCheckpoint

sys.path.insert(0, str(Path(__file__).parent))
from _tiny import TinyModule, make_trainer  # noqa: E402

from lightning_sparkling import GrowthStage, WidthGrowthCallback  # noqa: E402

MAX_STEPS = 24

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("mode", choices=["ddp", "single"])
    parser.add_argument("--resume", default=None)
    parser.add_argument("--tag", default="")
    args = parser.parse_args()
    out = Path(args.out)
    stages = [GrowthStage(8, n_embd=64, intermediate_size=128, rewarmup_steps=4),
              GrowthStage(16, intermediate_size=192, init="random-copy", rewarmup_steps=4)]
    module = TinyModule(max_steps=MAX_STEPS, accumulate=2, emulate_ranks=2 if args.mode == "single" else 0)
    callbacks = [WidthGrowthCallback(stages)]
    kwargs = {}
    if args.mode == "ddp":
        kwargs = dict(strategy="ddp", devices=2)
        if not args.resume:
            callbacks.append(ModelCheckpoint(dirpath=out / "ckpt", filename="{step}", every_n_train_steps=1,
                                             save_top_k=-1))
            kwargs["enable_checkpointing"] = True
    trainer = make_trainer(callbacks, max_steps=MAX_STEPS, accumulate=2, **kwargs)
    trainer.fit(module, ckpt_path=args.resume)
    state = {k: v.detach().cpu() for k, v in module.model.state_dict().items()}
    torch.save({"state": state, "config": module.model.config.n_embd, "losses": module.losses},
               out / f"{args.mode}{args.tag}-rank{trainer.global_rank}.pt")
