"""Run by tests/distributed/test_due_at_once_distributed.py: two growth stages due at once when a fit starts, under
FSDP1 or FSDP2 on 2 CPU ranks (gloo), or its one-process twin.

    python tests/due_at_once_script.py OUT_DIR {single|fsdp1|fsdp2} {first|resume}

``first`` trains 5 steps without growth and saves a full checkpoint at step 4; ``resume`` resumes it with stages at
steps 2 (n_embd 32 -> 48) and 3 (n_head 4 -> 8, new heads join their groups) added: both are due at the first
batch, so the callback grows twice in a row. The second growth starts right after the first one's loss check, a
forward without backward, after which FSDP1 keeps its root unit (embedding, final norm, head) unsharded; its
optimizer-state gather must still read the shards. Each rank writes the final (gathered) weights to
OUT_DIR/final-<mode>-rank<r>.pt.
"""

import sys
from pathlib import Path

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import ModelParallelStrategy
from torch.distributed.tensor import DTensor

sys.path.insert(0, str(Path(__file__).parent))
from _tiny import TinyModule, exit_now, make_trainer, paper_stage
from ddp_script import Float64FSDPPrecision

from lightning_sparkling import WidthGrowthCallback
from lightning_sparkling.parallel.testing import CPUFSDPStrategy

STAGES = [paper_stage(2, n_embd=48, rewarmup_ratio=2.0, rewarmup_steps=3),
          paper_stage(3, n_head=8, rewarmup_ratio=2.0, rewarmup_steps=3)]
SAVE_AT, MAX_STEPS = 4, 8


class SaveFull(Callback):
    def __init__(self, path: Path) -> None:
        self.path = path

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == SAVE_AT and not self.path.exists():
            if isinstance(trainer.strategy, ModelParallelStrategy):
                trainer.strategy._save_distributed_checkpoint = False
            trainer.save_checkpoint(self.path)


if __name__ == "__main__":
    out, mode, phase = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    out.mkdir(parents=True, exist_ok=True)
    module = TinyModule(max_steps=MAX_STEPS, emulate_ranks=2 if mode == "single" else 0, dtype=torch.float64)
    kwargs = {}
    if mode == "fsdp1":
        kwargs = dict(strategy=CPUFSDPStrategy(use_orig_params=True, state_dict_type="full"), devices=2,
                      plugins=[Float64FSDPPrecision()])
    elif mode == "fsdp2":
        kwargs = dict(strategy=ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1), devices=2)
    checkpoint = out / f"{mode}.ckpt"
    if phase == "first":
        trainer = make_trainer([SaveFull(checkpoint)], max_steps=SAVE_AT + 1, **kwargs)
        trainer.fit(module)
    else:
        callback = WidthGrowthCallback(STAGES)
        trainer = make_trainer([callback], max_steps=MAX_STEPS, **kwargs)
        trainer.fit(module, ckpt_path=str(checkpoint))
        assert callback.backend.name == mode and module.model.config.n_head == 8
        state = {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu().clone()
                 for k, v in module.model.state_dict().items()}
        torch.save(state, out / f"final-{mode}-rank{trainer.global_rank}.pt")
    if torch.distributed.is_initialized():  # an orderly gloo shutdown (avoids an abort at interpreter exit)
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    exit_now()
