"""``TokenThroughputMonitor``: the FLOPs per batch it logs change at the growth step, to the grown model's, and the
FLOPs/s and MFU of a window that spans the growth count each batch with the model that ran it (read from the CSV
log, against FLOPs counted from the models' parameters)."""

from __future__ import annotations

import csv
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger

from lightning_sparkling import GrowthStage, WidthGrowthCallback
from lightning_sparkling.callbacks.throughput import TokenThroughputMonitor
from lightning_sparkling.pretrain.module import LitGPTPretrainModule

CONFIG = dict(n_embd=32, n_head=4, n_layer=2, block_size=16, vocab_size=64, padded_vocab_size=64,
              mlp_class_name="LLaMAMLP", intermediate_size=64, norm_class_name="RMSNorm", bias=False)
GROW_AT, STEPS, BATCH, SEQ = 4, 9, 2, 16
PEAK = 1e12  # the device's peak FLOP/s as the test declares it (Lightning knows none for a CPU)


def _logged(log_dir: Path) -> dict[str, dict[int, float]]:
    """``{tag: {step: value}}`` of a CSVLogger's metrics.csv."""
    out: dict[str, dict[int, float]] = {}
    with open(next(log_dir.rglob("metrics.csv"))) as f:
        for row in csv.DictReader(f):
            for key, value in row.items():
                if key != "step" and value not in ("", None):
                    out.setdefault(key, {})[int(row["step"])] = float(value)
    return out


def _flops(n_embd: int, intermediate_size: int) -> float:
    """6 N D of one micro-batch, N counted from a model of that shape built here (a width growth keeps the heads:
    head_size 8)."""
    from litgpt import GPT, Config

    with torch.device("meta"):
        model = GPT(Config(**{**CONFIG, "n_embd": n_embd, "intermediate_size": intermediate_size, "head_size": 8}))
    return 6.0 * sum(p.numel() for p in model.parameters()) * BATCH * SEQ


@pytest.mark.parametrize("accumulate", [1, 2])
def test_flops_per_batch_changes_at_the_growth_and_mfu_follows(tmp_path, monkeypatch, accumulate):
    monkeypatch.setattr("lightning.pytorch.callbacks.throughput_monitor.get_available_flops", lambda *a: PEAK)
    window = 3 * accumulate
    module = LitGPTPretrainModule(CONFIG, "AdamW", max_steps=STEPS, lr_warmup_steps=1)
    data = torch.utils.data.DataLoader(torch.randint(0, 64, (STEPS * accumulate * BATCH, SEQ + 1)), batch_size=BATCH)
    val = torch.utils.data.DataLoader(torch.randint(0, 64, (4, SEQ + 1)), batch_size=BATCH)
    trainer = L.Trainer(max_steps=STEPS, accelerator="cpu", accumulate_grad_batches=accumulate, log_every_n_steps=1,
                        val_check_interval=3 * accumulate, check_val_every_n_epoch=None, num_sanity_val_steps=0,
                        logger=CSVLogger(str(tmp_path)), enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False,
                        callbacks=[TokenThroughputMonitor(window_size=window),
                                   WidthGrowthCallback(GrowthStage(GROW_AT, n_embd=64, intermediate_size=128))])
    trainer.fit(module, data, val)
    assert module.model.config.n_embd == 64
    logged = _logged(tmp_path)
    assert "val_loss" in logged and not [k for k in logged if k.startswith("validate")]  # validation: timed, unlogged
    small, big = _flops(32, 64), _flops(64, 128)
    per_batch = logged["train/flops_per_batch"]
    assert sorted(per_batch) == list(range(STEPS))
    # the step that grows ran the small model; every step after it the grown one
    assert per_batch == {s: small if s <= GROW_AT - 1 else big for s in range(STEPS)}, per_batch
    assert logged["train/lengths"][STEPS - 1] == STEPS * accumulate * BATCH * SEQ
    times, rates, mfu = logged["train/time"], logged["train/device/flops_per_sec"], logged["train/device/mfu"]
    # a window ending right after the growth holds batches of both models; Lightning's rate leaves the first out
    first_full = window // accumulate - 1
    for step in range(first_full, STEPS):
        if accumulate == 1:
            batches = [per_batch[s] for s in range(step - window + 2, step + 1)]
            expected = sum(batches) / (times[step] - times[step - window + 1])
            assert rates[step] == pytest.approx(expected, rel=1e-6), step
        assert mfu[step] == pytest.approx(rates[step] / PEAK, rel=1e-9), step
    assert first_full <= GROW_AT  # the windows checked include one that spans the growth
