"""A LightningModule written as a user writes one (none of ``_tiny.py``'s helpers): a litgpt ``GPT``, byte-level
data from a fixed byte string, ``AdamW`` and a hand-written warmup-cosine ``LambdaLR``.
``tests/callbacks/test_user_module.py`` trains it; run as a script it trains it under DDP on 2 CPU ranks (gloo):

    python tests/user_module_script.py OUT_DIR

Lightning's launcher re-runs this same command for rank 1. Each rank writes its final weights to
OUT_DIR/final-rank<r>.pt.
"""

from __future__ import annotations

import copy
import math
import sys
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from litgpt import GPT, Config
from torch.utils.data import DataLoader, Dataset

TEXT = (b"It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
        b"foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light. ") * 4
BLOCK = 16
MIN_LR = 3e-4


class ByteWindows(Dataset):
    """48 windows of ``BLOCK + 1`` bytes of ``TEXT`` (inputs and next-byte targets): 12 batches of 4 an epoch."""

    def __init__(self, data: bytes = TEXT, block: int = BLOCK) -> None:
        self.ids = torch.tensor(list(data), dtype=torch.long)
        self.block = block

    def __len__(self) -> int:
        return 48

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.ids[i * self.block: i * self.block + self.block + 1]


def warmup_cosine(warmup: int, total: int, floor: float):
    """LR multiplier: linear warm-up, then cosine down to ``floor``."""
    def f(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))
    return f


def small_config() -> Config:
    return Config(name="bytes-tiny", block_size=BLOCK, vocab_size=256, padded_vocab_size=256, n_layer=2, n_head=4,
                  n_query_groups=4, n_embd=32, intermediate_size=64, bias=False, norm_class_name="RMSNorm",
                  mlp_class_name="LLaMAMLP", rotary_percentage=1.0, parallel_residual=False)


class MyModule(L.LightningModule):
    """A byte-level language model.

    Args:
        lr: AdamW's peak LR. max_steps: the schedule's length.
        build_in: ``"init"`` builds the GPT in ``__init__``, ``"configure_model"`` there.
        partial: the optimizer leaves ``lm_head`` out (``self.model.transformer.parameters()``).
        teacher: distil from a frozen second GPT (``self.teacher``) as well.
        ema: keep an EMA copy of the model (``self.ema``, frozen, updated after each step).
    """

    def __init__(self, lr: float = 3e-3, max_steps: int = 10, build_in: str = "init", partial: bool = False,
                 teacher: bool = False, ema: bool = False) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.model: GPT | None = None
        if build_in == "init":
            self.model = self._build()
        self.teacher = self._build(seed=1).requires_grad_(False) if teacher else None
        self.ema = copy.deepcopy(self.model).requires_grad_(False) if ema else None
        self.losses: list[float] = []

    def _build(self, seed: int = 0) -> GPT:
        torch.manual_seed(seed)
        return GPT(small_config())

    def configure_model(self) -> None:
        if self.model is None:
            self.model = self._build()

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        logits = self.model(batch[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1).float(), batch[:, 1:].flatten())
        if self.teacher is not None:
            with torch.no_grad():
                target = self.teacher(batch[:, :-1]).float().softmax(-1)
            loss = loss + F.cross_entropy(logits.flatten(0, 1).float(), target.flatten(0, 1))
        self.losses.append(float(loss.detach()))
        self.log("train_loss", loss)
        return loss

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        if self.ema is not None and self.ema.config == self.model.config:  # the EMA of a grown model restarts
            with torch.no_grad():
                for e, p in zip(self.ema.parameters(), self.model.parameters()):
                    e.lerp_(p, 0.1)

    def configure_optimizers(self):
        params = self.model.transformer.parameters() if self.hparams.partial else self.model.parameters()
        optimizer = torch.optim.AdamW(params, lr=self.hparams.lr, weight_decay=0.1)
        schedule = warmup_cosine(2, self.hparams.max_steps, MIN_LR / self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def train_dataloader(self) -> DataLoader:
        return DataLoader(ByteWindows(), batch_size=4, shuffle=False)


def main(out: Path) -> None:
    from lightning_sparkling import GrowthCallback, GrowthStage

    growth = GrowthCallback(GrowthStage(4, n_embd=64, intermediate_size=128, rewarmup_steps=2), min_lr=MIN_LR)
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy="ddp", max_steps=8, callbacks=[growth], logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        deterministic=True)
    module = MyModule(max_steps=8)
    trainer.fit(module)
    out.mkdir(parents=True, exist_ok=True)
    torch.save(module.model.state_dict(), out / f"final-rank{trainer.global_rank}.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
    sys.stdout.flush()
    import os

    os._exit(0)  # gloo's threads may still hold tensors at interpreter teardown (see _tiny.exit_now)
