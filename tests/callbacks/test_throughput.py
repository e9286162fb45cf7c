"""``TokenThroughputMonitor``: the FLOPs per batch it logs are litgpt's (``measure_flops`` on a meta-device model, as
``litgpt pretrain`` measures them, reproduced here), change at the growth step to the grown model's, and the FLOP/s and
MFU of a window that spans the growth count each batch with the model that ran it (read from the CSV log).
``measured_flops_per_batch`` on an MoE model counts what the real routing costs."""

from __future__ import annotations

import csv
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.fabric.utilities.throughput import measure_flops
from lightning.pytorch.loggers import CSVLogger
from litgpt import GPT, Config
from litgpt.utils import chunked_cross_entropy

from _litgpt_flops import litgpt_measured_flops
from lightning_sparkling import GrowthStage, WidthGrowthCallback
from lightning_sparkling.callbacks.throughput import TokenThroughputMonitor, measured_flops_per_batch
from lightning_sparkling.growth.compute import count_params
from lightning_sparkling.pretrain.training.module import LitGPTPretrainModule

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
    """litgpt's FLOPs of one micro-batch of a model of that shape, built here (a width growth keeps the heads:
    head_size 8)."""
    return litgpt_measured_flops(Config(**{**CONFIG, "n_embd": n_embd, "intermediate_size": intermediate_size,
                                            "head_size": 8}), BATCH)


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
                                   WidthGrowthCallback(GrowthStage(GROW_AT, n_embd=64, intermediate_size=128,
                                                                   rewarmup_steps=2))])
    trainer.fit(module, data, val)
    assert module.model.config.n_embd == 64
    logged = _logged(tmp_path)
    assert "val_loss" in logged and not [k for k in logged if k.startswith("validate")]  # validation: timed, unlogged
    small, big = _flops(32, 64), _flops(64, 128)
    per_batch = logged["train/flops_per_batch"]
    assert sorted(per_batch) == list(range(STEPS))
    # the step that grows ran the small model; every step after it the grown one: litgpt's figure within 1%
    assert per_batch == pytest.approx({s: small if s <= GROW_AT - 1 else big for s in range(STEPS)}, rel=0.01)
    assert big > 2 * small and small != pytest.approx(6 * count_params(Config(**CONFIG))[0] * BATCH * SEQ, rel=0.001)
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


def test_measured_flops_are_litgpts_and_count_the_real_moe_routing():
    config = Config(**CONFIG)
    assert measured_flops_per_batch(config, BATCH) == litgpt_measured_flops(config, BATCH)
    assert measured_flops_per_batch(config, BATCH, SEQ // 2) < measured_flops_per_batch(config, BATCH)
    # forward + backward is 3x the forward (every matmul's backward is two of its size)
    with torch.device("meta"):
        model, x = GPT(config), torch.randint(0, 1, (BATCH, SEQ))
        forward = measure_flops(model, lambda: model(x))
    assert measured_flops_per_batch(config, BATCH) == 3 * forward
    # an MoE model: litgpt's routing has no meta shapes; the even split costs what the real routing does, counted
    # here on real CPU tensors (with attention as plain matmuls: the CPU's fused attention kernel has no counter)
    for moe in (dict(n_expert=4, n_expert_per_token=1, moe_intermediate_size=16),
                dict(n_expert=3, n_expert_per_token=2, moe_intermediate_size=24, n_shared_expert=1)):
        config = Config(**{**CONFIG, "mlp_class_name": "LLaMAMoE", **moe})
        torch.manual_seed(0)
        model, x = GPT(config), torch.randint(0, 64, (BATCH, SEQ))
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            real = measure_flops(model, lambda: model(x), lambda y: chunked_cross_entropy(y, x, chunk_size=0))
        assert measured_flops_per_batch(config, BATCH) == real, moe
