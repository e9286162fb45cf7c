"""benchmarks/compile_cost.py's summary from step times: compile and recompile time net of the steady step, the
speed-up per phase, and the RMS monitor's cost at ``every_n_steps: 50`` (its logging steps against its other steps,
each phase on its own). Synthetic step times, so every figure is known; ``--summarize`` recomputes a saved result."""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "compile_cost.py"


def _module():
    spec = importlib.util.spec_from_file_location("compile_cost", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _times(grow_at: int = 20, steps: int = 60, every: int = 10):
    eager = [0.4] * grow_at + [1.0] * (steps - grow_at)
    compiled = [0.3] * grow_at + [0.8] * (steps - grow_at)
    compiled[0], compiled[grow_at] = 50.3, 20.8  # compile, recompile
    monitored = list(compiled)
    monitored[1], monitored[grow_at + 1] = 3.3, 2.8  # a logging step runs eagerly, the next one compiles
    for i in range(0, steps, every):
        monitored[i] = eager[i] if i else 0.4
    return eager, compiled, monitored


def test_summary_figures():
    module = _module()
    args = argparse.Namespace(grow_at=20, every=10)
    e, c, m = _times()
    out = module.summarize(args, e, c, m, {"first_step_seconds": 20.9, "growth_seconds": 0.1})
    assert out["compile_s"] == pytest.approx(50.0) and out["recompile_s"] == pytest.approx(20.0)
    assert out["monitored_first_compiled_step_s"] == 3.3 and out["monitored_first_step_after_growth_s"] == 2.8
    before, after = out["before"], out["after"]
    assert before["speedup"] == pytest.approx(0.4 / 0.3) and after["speedup"] == pytest.approx(1.0 / 0.8)
    assert before["logging_step_cost_ms"] == pytest.approx(100) and after["logging_step_cost_ms"] == pytest.approx(200)
    assert before["monitor_pct_at_50"] == pytest.approx(100 * 0.1 / 50 / 0.3)
    assert after["monitor_pct_at_50"] == pytest.approx(100 * 0.2 / 50 / 0.8)
    assert after["monitor_bound_pct_at_50"] == pytest.approx(100 * 0.2 / 50 / 0.8)


def test_summarize_a_saved_result(tmp_path):
    e, c, m = _times()
    saved = tmp_path / "result.json"
    saved.write_text(json.dumps({"args": {"grow_at": 20, "every": 10}, "first_step_seconds": 20.9,
                                 "raw_ms": {k: [1e3 * t for t in v] for k, v in
                                            (("eager", e), ("compiled", c), ("monitored", m))}}))
    proc = subprocess.run([sys.executable, str(SCRIPT), "--summarize", str(saved)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(saved.read_text())
    assert result["compile_s"] == pytest.approx(50.0) and result["first_step_seconds_logged"] == 20.9
    assert result["after"]["monitor_pct_at_50"] == pytest.approx(0.5)
