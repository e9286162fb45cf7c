"""Run by tests/distributed/test_heads_distributed.py: a width growth, then two attention-heads growths (the second one
into a named litgpt config) under DDP, FSDP2 or FSDP1 on 2 CPU ranks (gloo), or its one-process twin.

    python tests/heads_dist_script.py OUT_DIR {single|ddp|fsdp2|fsdp1} [--accumulate N] [--resume CKPT] [--tag=TAG]

On the tiny model (4 heads of size 8 in 2 key/value groups, n_embd 32):

- stage 0 (step 4): n_embd 32 -> 48, MLP 64 -> 97 (an odd width, sharded unevenly); its re-warmup runs past both
  heads growths, so its new entries (the qkv's new columns, among others) must be carried through them;
- stage 1 (step 8): n_head 4 -> 8 in the same 2 groups: the new heads join their group, old heads 2 and 3 move to
  positions 4 and 5, the k and v blocks shift (qkv rows 64 -> 96; the new rows are two runs, the stage 0 columns
  of the moved rows several);
- stage 2 (step 12): ``model_name="tiny-h12-g3"``, a named litgpt config registered here (the tiny config with
  n_embd 49, 12 heads in 3 groups: a new key/value group, copied by a seeded draw from 2 groups, not an integer
  ratio; MLP 97): qkv rows 96 -> 144, new rows in three runs (q heads 8-11 at 64:96, k group 2 at 112:120, v
  group 2 at 136:144). FSDP2 splits the rows at 72, inside the first run; ``attn.proj`` (49 x 96) and every n_embd
  tensor are split 25/24.

Each rank writes the final (gathered) weights, its optimizer's param-group layout, the symmetry metrics, the
config and, right after each growth and at the end, which entries its new-entry LR hook addresses per stage
(:func:`coverage`) to OUT_DIR/<mode>-acc<N>/final<tag>-rank<r>.pt. Uninterrupted multi-process runs save
checkpoints at step 10 (after the first heads growth, before the second) and 14 (after both): DDP a full file,
FSDP2 and FSDP1 a sharded directory and a full file.
"""

import sys
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback
from litgpt.config import name_to_config
from torch.distributed.tensor import DTensor

sys.path.insert(0, str(Path(__file__).parent))
from _tiny import SEQ, VOCAB, TinyModule, make_trainer, paper_stage
from depth_dist_script import SaveAt, backend_kwargs, finish, layout, script_args

from lightning_sparkling import WidthGrowthCallback
from lightning_sparkling.callbacks.growth import find_gpt
from lightning_sparkling.growth.optim_state import NewEntryRegion
from lightning_sparkling.growth.surgery import clean_name

MAX_STEPS = 16
SAVE_AT = (10, 14)
#: the named litgpt config of stage 2 (registered like litgpt's own, so that ``Config.from_name`` finds it)
TARGET = "tiny-h12-g3"
name_to_config[TARGET] = dict(name=TARGET, n_embd=49, n_head=12, n_query_groups=3, head_size=8, intermediate_size=97,
                              n_layer=2, vocab_size=VOCAB, padded_vocab_size=VOCAB, block_size=SEQ,
                              mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm", bias=False, parallel_residual=False)
STAGES = [
    paper_stage(4, n_embd=48, intermediate_size=97, rewarmup_ratio=2.0, rewarmup_steps=6),
    paper_stage(8, n_head=8, rewarmup_ratio=1.5, rewarmup_steps=3),
    paper_stage(12, model_name=TARGET, rewarmup_ratio=3.0, rewarmup_steps=2, optimizer_state="copy"),
]


def full_state(module) -> dict[str, torch.Tensor]:
    """The GPT's gathered state dict (FSDP1: a full state dict with plain GPT names)."""
    return {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu().clone()
            for k, v in module.model.state_dict().items()}


@torch.no_grad()
def coverage(callback: WidthGrowthCallback, module) -> list[dict[str, torch.Tensor]]:
    """Per stage grown so far, how many times each entry of the model is addressed as that stage's new entry on
    some rank: ``+1`` through the views the new-entry LR hook rescales (this rank's part of the carried global
    slices, ``backend.new_entry_pieces``), then gathered. The weights are put back afterwards."""
    gpt = find_gpt(module)
    callback.backend.reshard(module, gpt)
    pieces_of = callback.backend.new_entry_pieces(module, gpt)
    params = [(clean_name(n), p) for n, p in gpt.named_parameters()]
    saved = [p.data.clone() for _, p in params]
    found = []
    for regions in callback._regions:
        for _, p in params:
            p.data.zero_()
        for name, p in params:
            if regions.get(name):
                for view in NewEntryRegion(p, pieces_of(p, regions[name]), lambda: 0.0).views():
                    view.add_(1)
        found.append({name: t for name, t in full_state(module).items() if name in regions})
    for (_, p), value in zip(params, saved):
        p.data.copy_(value)
    return found


class RecordCoverage(Callback):
    """:func:`coverage` at the first optimizer step after each growth, where the new-entry LR hook acts (after
    backward: every FSDP unit holds its shard; the growth's loss check leaves FSDP1's root unit unsharded until
    then), under the layout of that moment: FSDP1's flat shards and FSDP2's row chunks split each model
    differently."""

    def __init__(self, callback: WidthGrowthCallback) -> None:
        self.callback = callback
        self.found: dict[int, list[dict[str, torch.Tensor]]] = {}

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        step = trainer.global_step
        if step in {stage.at_step for stage in STAGES} and step not in self.found:
            self.found[step] = coverage(self.callback, pl_module)


if __name__ == "__main__":
    args = script_args()
    out = Path(args.out) / f"{args.mode}-acc{args.accumulate}"
    out.mkdir(parents=True, exist_ok=True)
    module = TinyModule(max_steps=MAX_STEPS, accumulate=args.accumulate,
                        emulate_ranks=2 if args.mode == "single" else 0, dtype=torch.float64)
    callbacks = [WidthGrowthCallback(STAGES, symmetry_every_n_steps=3)]  # heads symmetry read through the backend
    callbacks.append(RecordCoverage(callbacks[0]))
    kwargs = backend_kwargs(args.mode)
    if args.mode != "single" and not args.resume:
        callbacks.append(SaveAt(out, SAVE_AT))
    trainer = make_trainer(callbacks, max_steps=MAX_STEPS, accumulate=args.accumulate, **kwargs)
    trainer.fit(module, ckpt_path=args.resume)
    assert callbacks[0].backend.name == args.mode, (callbacks[0].backend, args.mode)  # grown through its backend
    state = full_state(module)
    config = find_gpt(module).config
    torch.save({"state": state, "losses": module.losses, "layout": layout(trainer.optimizers[0]),
                "symmetry": callbacks[0].last_symmetry,
                "config": {k: getattr(config, k) for k in ("n_embd", "n_head", "n_query_groups", "head_size",
                                                           "intermediate_size", "name")},
                "coverage": {**callbacks[1].found, MAX_STEPS: coverage(callbacks[0], module)}},
               out / f"final{args.tag}-rank{trainer.global_rank}.pt")
    finish()
