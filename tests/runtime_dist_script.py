"""Run by tests/distributed/test_runtime_distributed.py: activation checkpointing (and, with ``--compile BACKEND``,
``torch.compile`` per block under FSDP2, of the whole GPT under DDP) with a depth growth on 2 CPU ranks (gloo).

    python tests/runtime_dist_script.py OUT_DIR {ddp|fsdp2} [--accumulate N] [--compile BACKEND]

Fits ``LitGPTPretrainModule`` twice in one launch, without and with ``activation_checkpointing``, each growing the
2-block model to 4 blocks (``stack``) at step 3 of 6. Each rank writes, per run, its micro-batch losses, the final
(gathered) weights, which blocks are checkpointed and how often each block's MLP started in the last micro-batch
(2 when it is recomputed in the backward) to OUT_DIR/<mode>-rank<r>.pt.
"""

import argparse
import functools
import sys
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import ModelParallelStrategy
from torch.distributed.tensor import DTensor

sys.path.insert(0, str(Path(__file__).parent))
from _tiny import exit_now, tiny_config

from lightning_sparkling import GrowthCallback, GrowthStage
from lightning_sparkling.parallel.activation_checkpointing import is_checkpointed
from lightning_sparkling.parallel.compile import is_compiled
from lightning_sparkling.pretrain.training.module import LitGPTPretrainModule

ADAMW = {"class_path": "torch.optim.AdamW", "init_args": {"lr": 3e-3, "weight_decay": 0.1, "betas": [0.9, 0.95]}}
MAX_STEPS = 6


class Record(Callback):
    """Micro-batch losses; MLP starts per block during the last micro-batch (pre-hooks: a recomputation stops early,
    inside the MLP)."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.calls: dict[int, int] = {}
        self._handles: list = []

    def _count(self, i, module, args) -> None:
        self.calls[i] = self.calls.get(i, 0) + 1

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        for h in self._handles:
            h.remove()
        self.calls = {}
        self._handles = [b.mlp.register_forward_pre_hook(functools.partial(self._count, i))
                         for i, b in enumerate(pl_module.model.transformer.h)]

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))


def fit(mode: str, accumulate: int, checkpointing: bool, compile_backend: str | None) -> dict:
    torch.compiler.reset()
    torch.manual_seed(0)
    data = torch.utils.data.DataLoader(torch.randint(0, 64, (2 * 4 * MAX_STEPS * accumulate, 17)), batch_size=4)
    module = LitGPTPretrainModule(tiny_config(), ADAMW, max_steps=MAX_STEPS, lr_warmup_steps=1,
                                  activation_checkpointing=checkpointing,
                                  compile={"backend": compile_backend} if compile_backend else False)
    record = Record()
    growth = GrowthCallback([GrowthStage(3, n_layer=4, depth_order="stack", rewarmup_ratio=None)])
    strategy = "ddp" if mode == "ddp" else ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1)
    trainer = L.Trainer(max_steps=MAX_STEPS, accelerator="cpu", devices=2, strategy=strategy, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        deterministic=True, accumulate_grad_batches=accumulate, callbacks=[record, growth])
    trainer.fit(module, data)
    assert growth.backend.name == mode, (growth.backend.name, mode)
    state = {k: (v.full_tensor() if isinstance(v, DTensor) else v).detach().cpu()
             for k, v in module.model.state_dict().items()}
    blocks = module.model.transformer.h
    return {"losses": record.losses, "state": state, "calls": record.calls, "rank": trainer.global_rank,
            "checkpointed": [is_checkpointed(b) for b in blocks], "compiled": is_compiled(module),
            "summary": {k: v for k, v in growth.summaries[0].items() if k in ("compiled", "first_step_seconds")}}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("mode", choices=["ddp", "fsdp2"])
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--compile", default=None)
    args = parser.parse_args()
    runs = {name: fit(args.mode, args.accumulate, name == "checkpointed", args.compile)
            for name in ("plain", "checkpointed")}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(runs, out / f"{args.mode}-rank{runs['plain']['rank']}.pt")
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
    exit_now()
