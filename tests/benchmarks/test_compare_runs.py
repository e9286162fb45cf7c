"""benchmarks/compare_runs.py: two runs are the same run only when weights, optimizer state and logged scalars agree
bit for bit; and the configs of benchmarks/identity/ are valid ``sparkling pretrain`` configs that grow every axis."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compare_runs():
    spec = importlib.util.spec_from_file_location("compare_runs_under_test", ROOT / "benchmarks" / "compare_runs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(path: Path, weight: torch.Tensor, exp_avg: torch.Tensor, loss: float) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    (path / "final").mkdir(parents=True)
    (path / "checkpoints").mkdir()
    torch.save({"w": weight}, path / "final" / "lit_model.pth")
    torch.save({"optimizer_states": [{"state": {0: {"exp_avg": exp_avg, "step": torch.tensor(3.0)}}}]},
               path / "checkpoints" / "step-3.ckpt")
    writer = SummaryWriter(str(path / "logs"))
    writer.add_scalar("train_loss", loss, 3)
    writer.add_scalar("throughput/tokens_per_sec", 1000.0 + loss, 3)  # wall-clock: never compared
    writer.add_scalar("train/device/items_per_sec", 900.0 + loss, 3)  # TokenThroughputMonitor's: wall-clock too
    writer.add_scalar("train/device/mfu", 0.3 + loss, 3)
    writer.close()
    return path


def test_the_same_run_and_each_kind_of_difference(tmp_path: Path, compare_runs):
    w, m = torch.randn(4, 3), torch.randn(4, 3)
    base = _run(tmp_path / "a", w, m, 2.5)
    assert compare_runs.compare(base, _run(tmp_path / "same", w.clone(), m.clone(), 2.5)) == []
    w2 = w.clone()
    w2[1, 2] = torch.nextafter(w2[1, 2], torch.tensor(10.0))  # one ulp
    assert compare_runs.compare(base, _run(tmp_path / "w", w2, m, 2.5)) == ["weights: w differs"]
    assert compare_runs.compare(base, _run(tmp_path / "m", w, m * 2, 2.5)) == [
        "step-3.ckpt: optimizer /0/state/0/exp_avg differs"]
    assert compare_runs.compare(base, _run(tmp_path / "s", w, m, 2.4)) == ["scalar train_loss differs"]
    assert compare_runs.main([str(base), str(tmp_path / "w")]) == 1 and compare_runs.main([str(base), str(base)]) == 0


@pytest.mark.parametrize("name", ["every_axis.yaml", "width_heads_depth_map.yaml"])
def test_identity_configs_plan_every_axis(name):
    from lightning_sparkling.pretrain.cli import parse, plan

    _, run, _ = parse(["--config", str(ROOT / "benchmarks" / "identity" / name)])
    report = plan(run, print_report=False)
    grown = {axis for stage in report["stages"] for axis in stage["sizes"]}
    assert {"n_embd", "n_head", "n_layer"} <= grown
    if name == "every_axis.yaml":
        assert "n_expert" in grown and len(report["stages"]) == 5
