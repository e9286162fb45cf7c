"""``sparkling pretrain`` logs Lightning's throughput metrics (tokens/s, FLOPs/s; MFU where the device's peak is
known) with FLOPs per batch that are litgpt's (``measure_flops``) and change at the growth step, under gradient
accumulation 1 and 2; one tokens/s tag."""

from __future__ import annotations

from pathlib import Path

import pytest

from _litgpt_flops import litgpt_measured_flops
from lightning_sparkling.dashboards.plotting import load_run
from lightning_sparkling.growth.compute import count_params
from lightning_sparkling.pretrain.cli import main

from test_cli import MODEL, tiny_config, write_config

GROW_AT = 4


@pytest.mark.parametrize("micro", [8, 4])  # global batch 8: accumulation 1 and 2
def test_pretrain_logs_flops_per_batch_that_change_at_the_growth(tmp_path: Path, micro: int):
    config = tiny_config(tmp_path / "cache", train={"micro_batch_size": micro, "max_steps": 7, "save_interval": None},
                         eval={"interval": 100, "max_iters": 1}, rms_monitor=None,
                         growth={"stages": [{"at_step": GROW_AT, "n_embd": 64, "intermediate_size": 128,
                                                      "rewarmup_steps": 1}]})
    out = tmp_path / "out"
    assert main(["pretrain", "--config", str(write_config(tmp_path / "c.yaml", config)), "--out_dir", str(out)]) == 0
    run = load_run(out / "logs")
    steps, per_batch = run.scalars["train/flops_per_batch"]
    tokens = micro * 32  # seq_len 32
    small, big = litgpt_measured_flops(_config(32, 64), micro), litgpt_measured_flops(_config(64, 128), micro)
    assert small != 6 * count_params(_config(32, 64))[0] * tokens  # litgpt's count, not the paper's 6 N D
    # the growth's step ran the small model, the steps after it the grown one: within 1% of litgpt's figure
    assert dict(zip(map(int, steps), per_batch)) == pytest.approx({s: small if s < GROW_AT else big
                                                                   for s in range(7)}, rel=0.01)
    lengths_steps, lengths = run.scalars["train/lengths"]
    assert lengths[-1] == 7 * 8 * 32
    assert "train/device/items_per_sec" in run.scalars and "train/device/flops_per_sec" in run.scalars
    assert [tag for tag in run.scalars if "tokens_per_sec" in tag or "items_per_sec" in tag] == \
        ["train/device/items_per_sec"]  # one tokens/s
    assert "train/device/mfu" not in run.scalars  # Lightning knows no peak for a CPU


def _config(n_embd: int, intermediate_size: int):
    from litgpt import Config

    return Config(**{**MODEL, "n_embd": n_embd, "intermediate_size": intermediate_size, "head_size": 8,
                     "vocab_size": 512, "padded_vocab_size": 512, "block_size": 32})
