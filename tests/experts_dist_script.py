"""Run by tests/distributed/test_experts_distributed.py: experts growth (dense -> MoE, then 2x experts, then a depth
growth) under DDP, FSDP2 or FSDP1 on 2 CPU ranks (gloo), or its one-process twin.

    python tests/experts_dist_script.py OUT_DIR {single|ddp|fsdp2|fsdp1} [--accumulate N] [--resume CKPT] [--tag=TAG]
                                        [--first-k=K] [--with-widths]

Stage 0 (step 4) turns every MLP of the tiny 2-block model into 3 experts, 2 per token (drop-upcycle: the copies
differ); stage 1 (step 8) grows them to 6 experts, 4 per token (copy, optimizer state copied); stage 2 (step 12)
deepens the model to 3 blocks (``middle``). 3 and 6 experts of 64 x 32 and a 3-row router shard unevenly over 2
ranks. Each rank writes the final (gathered) weights, its optimizer's param-group layout and the symmetry metrics to
OUT_DIR/<mode>-acc<N>/final<tag>-rank<r>.pt. Uninterrupted multi-process runs save checkpoints at step 6 and 10
(between the growths): DDP a full file, FSDP2 and FSDP1 a sharded directory and a full file. ``--first-k=K``:
stage 0 keeps the first K blocks dense (``first_k_dense_replace``) and stage 1 repeats it. ``--with-widths``: stage 0
also widens the hidden size to 48 and the MLP to 96 (so expert 0 is the MLP widened and the new experts copy it
widened), stage 1 also widens the experts' inner size to 112 (uneven over 2 ranks) and deepens the model to 3 blocks
(the new block's experts copies of its source's), stage 2 deepens it to 4.
"""

import os
import sys
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor

sys.path.insert(0, str(Path(__file__).parent))
from _tiny import TinyModule, make_trainer, paper_stage
from depth_dist_script import SaveAt, backend_kwargs, finish, layout, script_args

from lightning_sparkling import GrowthStage, WidthGrowthCallback

MAX_STEPS = 15
SAVE_AT = (6, 10)  # between the growths


def stages(first_k: int | None = None, with_widths: bool = False) -> list[GrowthStage]:
    if with_widths:  # experts with widths, then with widths and depth, in one stage each; then depth alone
        return [
            paper_stage(4, mlp_class_name="LLaMAMoE", n_expert=3, n_expert_per_token=2, expert_init="drop-upcycle",
                        n_embd=48, intermediate_size=96, rewarmup_ratio=2.0, rewarmup_steps=2),
            paper_stage(8, n_expert=6, n_expert_per_token=4, moe_intermediate_size=112, n_layer=3,
                        depth_order="middle", optimizer_state="copy", rewarmup_ratio=1.5, rewarmup_steps=2),
            paper_stage(12, n_layer=4, depth_order="interleave", rewarmup_steps=2),
        ]
    return [
        paper_stage(4, mlp_class_name="LLaMAMoE", n_expert=3, n_expert_per_token=2, expert_init="drop-upcycle",
                    rewarmup_ratio=2.0, rewarmup_steps=2, first_k_dense_replace=first_k),
        paper_stage(8, n_expert=6, n_expert_per_token=4, optimizer_state="copy", rewarmup_ratio=1.5, rewarmup_steps=2,
                    first_k_dense_replace=first_k),
        paper_stage(12, n_layer=3, depth_order="middle", rewarmup_steps=2),
    ]


def first_k_arg() -> int | None:
    """``--first-k=K``, taken off the command line before :func:`script_args` reads it. Lightning starts rank 1 with
    this process's (edited) command line, so the value travels to it in the environment."""
    for arg in sys.argv[1:]:
        if arg.startswith("--first-k="):
            sys.argv.remove(arg)
            os.environ["EXPERTS_DIST_FIRST_K"] = arg.split("=", 1)[1]
    value = os.environ.get("EXPERTS_DIST_FIRST_K")
    return int(value) if value else None


def with_widths_arg() -> bool:
    """``--with-widths``, taken off the command line (and passed to rank 1 in the environment) as ``--first-k``."""
    if "--with-widths" in sys.argv:
        sys.argv.remove("--with-widths")
        os.environ["EXPERTS_DIST_WITH_WIDTHS"] = "1"
    return os.environ.get("EXPERTS_DIST_WITH_WIDTHS") == "1"


if __name__ == "__main__":
    first_k = first_k_arg()
    with_widths = with_widths_arg()
    args = script_args()
    out = Path(args.out) / f"{args.mode}-acc{args.accumulate}"
    out.mkdir(parents=True, exist_ok=True)
    module = TinyModule(max_steps=MAX_STEPS, accumulate=args.accumulate,
                        emulate_ranks=2 if args.mode == "single" else 0, dtype=torch.float64)
    # symmetry read through the backend
    callbacks = [WidthGrowthCallback(stages(first_k, with_widths), symmetry_every_n_steps=3)]
    kwargs = backend_kwargs(args.mode)
    if args.mode != "single" and not args.resume:
        callbacks.append(SaveAt(out, SAVE_AT))
    trainer = make_trainer(callbacks, max_steps=MAX_STEPS, accumulate=args.accumulate, **kwargs)
    trainer.fit(module, ckpt_path=args.resume)
    assert callbacks[0].backend.name == args.mode, (callbacks[0].backend, args.mode)  # grown through its backend
    state = {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu()
             for k, v in module.model.state_dict().items()}  # FSDP1: a full state dict with plain GPT names
    torch.save({"state": state, "losses": module.losses, "layout": layout(trainer.optimizers[0]),
                "symmetry": callbacks[0].last_symmetry, "n_layer": module.model.config.n_layer,
                "n_expert": module.model.config.n_expert,
                "first_k_dense_replace": module.model.config.first_k_dense_replace,
                "n_embd": module.model.config.n_embd,
                "moe_intermediate_size": module.model.config.moe_intermediate_size},
               out / f"final{args.tag}-rank{trainer.global_rank}.pt")
    finish()
