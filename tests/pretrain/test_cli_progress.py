"""What a ``sparkling pretrain`` user reads while it trains: the progress bar counts optimizer steps against
``max_steps`` (with tokens and loss), with gradient accumulation, across data epochs and after a resume (Lightning's
own bar read ``Epoch 0/-2`` and ``300/149`` after a resume)."""

from __future__ import annotations

import lightning as L
import torch

from lightning_sparkling.pretrain.cli import _callbacks_module
from lightning_sparkling.pretrain.training.module import LitGPTPretrainModule

CONFIG = dict(n_layer=1, n_embd=16, n_head=2, block_size=8, vocab_size=32, padded_vocab_size=32,
              mlp_class_name="LLaMAMLP", intermediate_size=32, norm_class_name="RMSNorm", bias=False)
TOKENS_PER_STEP = 4 * 8  # 2 micro-batches of 2 sequences of 8 tokens


class BarReader(L.Callback):
    """Reads the training bar after every micro-batch (after the bar's own update)."""

    def __init__(self, bar) -> None:
        self.bar = bar
        self.seen: list[tuple[int, float, float, str, dict]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        task = self.bar.train_progress_bar
        metrics = self.bar.get_metrics(trainer, pl_module)
        self.seen.append((trainer.global_step, task.completed, task.total, str(task.description), metrics))


def _fit(max_steps: int, ckpt_path=None, tmp_path=None):
    bar = _callbacks_module().StepProgressBar(TOKENS_PER_STEP)
    reader = BarReader(bar)
    module = LitGPTPretrainModule(CONFIG, {"class_path": "torch.optim.AdamW", "init_args": {"lr": 1e-3}},
                                  max_steps=max_steps, lr_warmup_steps=1)
    # 6 micro-batches per data epoch = 3 optimizer steps: the runs below cross several epochs
    data = torch.utils.data.DataLoader(torch.randint(0, 32, (12, 9), generator=torch.Generator().manual_seed(0)),
                                       batch_size=2)
    trainer = L.Trainer(max_steps=max_steps, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_model_summary=False, accumulate_grad_batches=2, callbacks=[bar, reader],
                        default_root_dir=tmp_path, num_sanity_val_steps=0, limit_val_batches=0)
    trainer.fit(module, data, ckpt_path=ckpt_path)
    return trainer, reader


def test_bar_counts_optimizer_steps_against_max_steps(tmp_path):
    trainer, reader = _fit(4, tmp_path=tmp_path)
    assert [(step, completed, total) for step, completed, total, _, _ in reader.seen] == \
        [(s, s, 4) for s in (0, 1, 1, 2, 2, 3, 3, 4)]  # 2 micro-batches per step, over 2 data epochs
    description, metrics = reader.seen[-1][3], reader.seen[-1][4]
    assert "Epoch" not in description and "step" in description
    assert metrics["tokens"] == "128" and "train_loss" in metrics and "v_num" not in metrics
    trainer.save_checkpoint(tmp_path / "step4.ckpt")

    _, resumed = _fit(7, ckpt_path=tmp_path / "step4.ckpt", tmp_path=tmp_path)
    # after a resume: the bar continues at the global step, against the new max_steps (not 300/149)
    assert [(step, completed, total) for step, completed, total, _, _ in resumed.seen] == \
        [(s, s, 7) for s in (4, 5, 5, 6, 6, 7)]
    assert resumed.seen[-1][4]["tokens"] == f"{7 * TOKENS_PER_STEP}"
