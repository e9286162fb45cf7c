"""``sparkling pretrain`` on one GPU (skipped without one): bf16-mixed and bf16-true, alone and under Lightning's
FSDPStrategy (FSDP1, one rank): the run grows mid-run, the grown model keeps its dtype, the RMS dashboard is
written, the litgpt checkpoint loads, and a resume from a checkpoint saved before the growth ends at the
uninterrupted run's weights (up to the GPU's non-deterministic kernels)."""

from __future__ import annotations

import json
import math

import pytest
import torch
import yaml

from _dist import rel_diff
from lightning_sparkling.pretrain.cli import main

from test_cli import _tb_scalars, tiny_config, write_config

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

CASES = [("auto", "bf16-mixed"), ("auto", "bf16-true"), ("fsdp1", "bf16-mixed")]


def _weights(folder) -> dict:
    return torch.load(folder / "lit_model.pth", weights_only=True, map_location="cpu")


@pytest.mark.parametrize("strategy, precision", CASES, ids=[f"{s}-{p}" for s, p in CASES])
def test_pretrain_on_gpu_grows_in_bf16_and_resumes(tmp_path, strategy, precision):
    config = tiny_config(tmp_path / "cache", accelerator="gpu", precision=precision, strategy=strategy)
    config_file = write_config(tmp_path / "gpu.yaml", config)
    out = tmp_path / "out"
    assert main(["pretrain", "--config", str(config_file), "--out_dir", str(out)]) == 0

    summary = json.loads((out / "summary.json").read_text())
    assert summary["final_model_config"]["n_embd"] == 64 and summary["steps"] == 12
    assert [e["global_step"] for e in summary["growth_events"]] == [6]  # what happened, not what was planned
    assert math.isfinite(summary["train_loss"]) and math.isfinite(summary["val_loss"])
    final = _weights(out / "final")
    expected = torch.bfloat16 if precision == "bf16-true" else torch.float32
    assert {t.dtype for t in final.values()} == {expected}  # the grown tensors kept the run's dtype
    assert final["transformer.h.0.mlp.proj.weight"].shape == (64, 128)
    assert yaml.safe_load((out / "final" / "model_config.yaml").read_text())["intermediate_size"] == 128
    run = _tb_scalars(out / "logs")
    assert run.growth_steps() == [(6, 0)]
    steps, rms = run.scalars["rms/residual/block_00"]
    assert max(steps) >= 10 and all(math.isfinite(v) and v > 0 for v in rms)

    resumed = tmp_path / "resumed"
    assert main(["pretrain", "--config", str(config_file), "--out_dir", str(resumed), "--resume",
                 str(out / "checkpoints" / "step-00000005.ckpt")]) == 0
    again = json.loads((resumed / "summary.json").read_text())
    assert again["resumed_from"].endswith("step-00000005.ckpt")
    assert [e["global_step"] for e in again["growth_events"]] == [6]
    # the growth happened in the resumed run, at the same step, to the same weights (GPU kernels such as the
    # embedding's backward use atomics, so the last bits may differ; a wrong growth or state is off by far more)
    assert rel_diff(_weights(resumed / "final"), final) < 2e-2
