"""Run by tests/growth/test_depth_operating_points.py: the depth operating points (4x depth in one stage, an
``at_fraction`` stage with an explicit ``depth_map``) under DDP, FSDP2 or FSDP1 on 2 CPU ranks (gloo), or its
one-process twin.

    python tests/depth4x_dist_script.py OUT_DIR {single|ddp|fsdp2|fsdp1} [--accumulate N] [--resume CKPT] [--tag=TAG]

Stage 0 (step 5) deepens the tiny 2-block model 4x, to 8 blocks (``stack``, ``copy-zero``: the model is stacked on
itself four times); stage 1 (``at_fraction=0.6`` of 18 steps: step 11) grows 8 -> 10 blocks by the depth map
``(0, 1, 1, 2, 3, 4, 5, 6, 7, 7)`` (``copy``: blocks 1 and 7 duplicated in place, the kept blocks 2-7 move) and widens
to ``n_embd=48`` and an odd MLP inner size 97 in the same stage (sharded unevenly). Each rank writes the final
(gathered) weights, the growth steps and the model's block count to OUT_DIR/<mode>-acc<N>/final<tag>-rank<r>.pt.
Uninterrupted multi-process runs save checkpoints at step 8 (between the growths): DDP a full file, FSDP2 and FSDP1
a sharded directory.
"""

import sys
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor

sys.path.insert(0, str(Path(__file__).parent))
from _tiny import TinyModule, make_trainer, paper_stage
from depth_dist_script import SaveAt, backend_kwargs, finish, layout, script_args

from lightning_sparkling import WidthGrowthCallback

MAX_STEPS = 18
DEPTH_MAP = (0, 1, 1, 2, 3, 4, 5, 6, 7, 7)
STAGES = [
    paper_stage(5, n_layer=8, rewarmup_ratio=2.0, rewarmup_steps=3),
    paper_stage(at_fraction=0.6, depth_map=DEPTH_MAP, depth_init="copy", n_embd=48, intermediate_size=97,
                rewarmup_ratio=1.5, rewarmup_steps=2),
]

if __name__ == "__main__":
    args = script_args()
    out = Path(args.out) / f"{args.mode}-acc{args.accumulate}"
    out.mkdir(parents=True, exist_ok=True)
    module = TinyModule(max_steps=MAX_STEPS, accumulate=args.accumulate,
                        emulate_ranks=2 if args.mode == "single" else 0, dtype=torch.float64)
    callbacks = [WidthGrowthCallback(STAGES, symmetry_every_n_steps=0)]
    kwargs = backend_kwargs(args.mode)
    if args.mode != "single" and not args.resume:
        callbacks.append(SaveAt(out, steps=(8,)))
    trainer = make_trainer(callbacks, max_steps=MAX_STEPS, accumulate=args.accumulate, **kwargs)
    trainer.fit(module, ckpt_path=args.resume)
    assert callbacks[0].backend.name == args.mode, (callbacks[0].backend, args.mode)
    state = {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu()
             for k, v in module.model.state_dict().items()}
    torch.save({"state": state, "layout": layout(trainer.optimizers[0]), "n_layer": module.model.config.n_layer,
                "grown_at": [s["global_step"] for s in callbacks[0].summaries],
                "at_steps": [s.at_step for s in callbacks[0].stages]},
               out / f"final{args.tag}-rank{trainer.global_rank}.pt")
    finish()
