"""Growth under DDP with 2 CPU ranks (gloo): ends where one process with the same global batch ends, ranks
agree exactly, and resuming a checkpoint saved after growth matches the uninterrupted run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).with_name("ddp_script.py")
pytestmark = pytest.mark.slow


def _run(*args: str) -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]


def _rel_diff(a: dict, b: dict) -> float:
    num = sum(float((a[k].double() - b[k].double()).norm() ** 2) for k in a)
    den = sum(float(b[k].double().norm() ** 2) for k in b)
    return (num / den) ** 0.5


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    _run(str(out), "ddp")
    _run(str(out), "single")
    _run(str(out), "ddp", "--resume", str(out / "ckpt" / "step=12.ckpt"), "--tag=-resumed")
    return out


def test_ddp_two_stage_growth_matches_single_process(runs):
    ddp = [torch.load(runs / f"ddp-rank{r}.pt") for r in (0, 1)]
    single = torch.load(runs / "single-rank0.pt")
    assert ddp[0]["state"]["transformer.h.0.mlp.proj.weight"].shape == (64, 192)  # both stages applied
    for name in ddp[0]["state"]:  # every rank holds identical weights
        assert torch.equal(ddp[0]["state"][name], ddp[1]["state"][name]), name
    assert _rel_diff(ddp[0]["state"], single["state"]) < 1e-4


def test_ddp_resume_after_growth_matches_uninterrupted(runs):
    resumed = torch.load(runs / "ddp-resumed-rank0.pt")
    reference = torch.load(runs / "ddp-rank0.pt")
    assert _rel_diff(resumed["state"], reference["state"]) < 1e-6
    other = torch.load(runs / "ddp-resumed-rank1.pt")
    for name in resumed["state"]:
        assert torch.equal(resumed["state"][name], other["state"][name]), name
