"""benchmarks/gpu_checks.sh in its CPU mode: the steps it runs and their arguments (dry), each step under its own
timeout within the deadline, the campaign given the deadline as an epoch, results and status in $OUT."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_checks.sh"


def _run(tmp_path: Path, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHON": sys.executable, **env}
    return subprocess.run(["bash", str(SCRIPT)], cwd=ROOT, env=full, capture_output=True, text=True, timeout=timeout)


def _steps(tmp_path: Path) -> dict[str, str]:
    lines = (tmp_path / "out" / "steps.txt").read_text().splitlines()
    return dict(line.split(": ", 1) for line in lines)


def _stub(tmp_path: Path, body: str) -> Path:
    stub = tmp_path / "campaign.py"
    stub.write_text(f"import sys, time\n{body}\n")
    return stub


def test_gpu_mode_runs_the_compiled_fused_bf16_path(tmp_path):
    proc = _run(tmp_path, DRY="1", CAMPAIGN=str(_stub(tmp_path, "")))
    assert proc.returncode == 0, proc.stderr
    steps = _steps(tmp_path)
    assert list(steps) == ["throughput", "growth_cost", "campaign", "tests"]
    for arg in ("--compile true", "--precision bf16-mixed", "--accelerator gpu", "--size gpu"):
        assert arg in steps["throughput"], arg
    assert "--device cuda" in steps["growth_cost"]
    assert steps["tests"].endswith("-m gpu -rs tests")
    deadline = int(steps["campaign"].split("--deadline ")[1])
    assert abs(deadline - (time.time() + 540 - 30)) < 15  # the default DEADLINE, less the packing time
    # only $OUT comes back from the device: the campaign appends there, starting from the committed results
    out = tmp_path / "out"
    assert f"--results {out}/campaign.jsonl" in steps["campaign"] and "--tiny" not in steps["campaign"]
    committed = ROOT / "benchmarks" / "results" / "campaign.jsonl"
    assert (out / "campaign.jsonl").read_bytes() == committed.read_bytes()


def test_cpu_mode_runs_the_tiny_campaign(tmp_path):
    proc = _run(tmp_path, MODE="cpu", DRY="1", CAMPAIGN=str(_stub(tmp_path, "")))
    assert proc.returncode == 0, proc.stderr
    campaign = _steps(tmp_path)["campaign"]
    assert "--tiny" in campaign and f"--results {tmp_path / 'out'}/campaign_tiny.jsonl" in campaign, campaign


def test_cpu_mode_is_tiny_and_skips_a_missing_campaign(tmp_path):
    proc = _run(tmp_path, MODE="cpu", DRY="1", CAMPAIGN=str(tmp_path / "missing.py"))
    assert proc.returncode == 0, proc.stderr
    steps = _steps(tmp_path)
    assert list(steps) == ["throughput", "growth_cost", "tests"]
    assert "--tiny" in steps["throughput"] and "--compile false" in steps["throughput"]
    assert "--device cpu" in steps["growth_cost"] and "--collect-only" in steps["tests"]
    assert "campaign skipped" in (tmp_path / "out" / "status.txt").read_text()


def test_a_bad_mode_is_refused(tmp_path):
    proc = _run(tmp_path, MODE="tpu", DRY="1")
    assert proc.returncode == 2 and "error: MODE=tpu" in proc.stderr


def test_the_campaign_gets_the_deadline_and_its_own_timeout(tmp_path):
    """A campaign that would run past the deadline is stopped by its step's timeout; the status says so, within
    the deadline."""
    record = tmp_path / "argv.txt"
    stub = _stub(tmp_path, f"open({str(record)!r}, 'w').write(' '.join(sys.argv[1:])); print('cell 1 done')\n"
                           "time.sleep(120)")
    start = time.time()
    proc = _run(tmp_path, MODE="cpu", STEPS="campaign", DEADLINE="60", CAMPAIGN=str(stub))
    took = time.time() - start
    assert proc.returncode == 0, proc.stderr
    assert took < 60, took
    argv = record.read_text().split()
    at = argv.index("--deadline")  # after the mode's own arguments (the CPU mode: --tiny, its results in $OUT)
    assert "--tiny" in argv[:at] and abs(int(argv[at + 1]) - (start + 60 - 30)) < 5
    status = (tmp_path / "out" / "status.txt").read_text()
    assert "campaign exit 124" in status, status  # killed by its timeout (time left - 20 s)
    assert "cell 1 done" in (tmp_path / "out" / "campaign.log").read_text()
    assert (tmp_path / "out" / "all.tgz").is_file()


@pytest.mark.slow
def test_cpu_mode_growth_cost_step_writes_its_results(tmp_path):
    proc = _run(tmp_path, timeout=400, MODE="cpu", STEPS="growth_cost", DEADLINE="300")
    assert proc.returncode == 0, proc.stderr
    assert "growth_cost exit 0" in (tmp_path / "out" / "status.txt").read_text(), proc.stdout
    assert (tmp_path / "out" / "growth_cost_cpu.json").is_file()
    assert "torch" in (tmp_path / "out" / "env.txt").read_text()
