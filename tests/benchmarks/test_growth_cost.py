"""benchmarks/growth_cost.py end to end at its smallest size: the growth and scratch workers run, the JSON holds
the figures the tables in docs/BENCHMARKS.md read, on the CPU and (GPU-marked) on CUDA, where memory is the
allocator's per-phase peak."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "growth_cost.py"
pytestmark = pytest.mark.slow


def _run(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "cost.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--sizes", "12M", "--steps", "2", "--batch", "1", "--seq",
                           "64", "--threads", "1", "--out", str(out), *args], capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def _check(result: dict, device: str, precision: str) -> dict:
    assert result["precision"] == precision and len(result["rows"]) == 1
    row = result["rows"][0]
    assert row["device"] == device and row["params_before"] < row["params_after"]
    assert row["growth_s"] > 0 and row["floor_copy_s"] > 0 and row["grown_step_s"] > 0 and row["scratch_step_s"] > 0
    # the growth holds old and grown weights and state at once, never more than training the grown model does
    assert row["bytes_before_mib"] < row["bytes_after_mib"] <= row["growth_peak_mib"]
    assert row["growth_peak_mib"] <= row["grown_train_peak_mib"] * 1.10
    return row


def test_growth_cost_on_cpu(tmp_path):
    _check(_run(tmp_path), "cpu", "32-true")


def test_gpu_checks_cpu_mode_runs_growth_cost_as_tested_here():
    """benchmarks/gpu_checks.sh's CPU mode passes the arguments the test above runs (that run is its growth_cost
    step's check; the step's command line is test_gpu_checks.py's dry run)."""
    text = (SCRIPT.parent / "gpu_checks.sh").read_text()
    cpu = text[text.index("\nelse\n"):]
    assert "COST=(--device cpu --sizes 12M --steps 2 --batch 1 --seq 64 --threads 1)" in cpu


def test_unknown_size_is_refused_by_name(tmp_path):
    proc = subprocess.run([sys.executable, str(SCRIPT), "--sizes", "99M"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--sizes: unknown 99M (known: 12M, 39M, 91M, 350M, 1.4B)" in proc.stderr


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_growth_cost_on_cuda_in_bf16(tmp_path):
    row = _check(_run(tmp_path, "--device", "cuda"), torch.cuda.get_device_name(0), "bf16-mixed")
    assert row["rss_before_growth_mib"] < row["growth_peak_mib"]  # allocated bytes, not the process' RSS
