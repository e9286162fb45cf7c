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


def _scope_raw() -> dict:
    """Synthetic ``--scopes`` step times (ms): whole compiles 300 s, 200 s and 280 s at its first steps, per block 30 s,
    40 s and 8 s; steady rounds with one slow outlier step each."""
    def rounds(t: float) -> list[list[float]]:
        return [[t, t, 5 * t], [t, 9 * t, t], [t, t, t]]

    raw = {}
    for scope, firsts, steady in (("whole", (300e3, 200e3, 280e3), (1800, 3800, 9000)),
                                  ("blocks", (30e3, 40e3, 8e3), (2000, 3800, 8000))):
        raw[scope] = {}
        for phase, first, t in zip(("base", "width", "depth"), firsts, steady):
            raw[scope][f"{phase}_first_ms"] = first
            raw[scope][f"{phase}_first_cpu_ms"] = first / 2
            raw[scope][f"{phase}_steady_ms"] = rounds(t)
            raw[scope][f"{phase}_steady_cpu_ms"] = rounds(t / 2)
    return raw


def test_scope_table_is_whole_against_per_block():
    table = _module().summarize_scopes(_scope_raw())
    assert list(table) == [f"{p}_{k}_s" for p in ("base", "width", "depth")
                           for k in ("first", "first_cpu", "steady", "steady_cpu")]
    assert table["base_first_s"] == {"whole": 300.0, "blocks": 30.0, "whole_over_blocks": 10.0}
    assert table["depth_first_cpu_s"]["whole_over_blocks"] == pytest.approx(35.0)
    # a steady step: the median of each round's median, so an outlier step moves nothing
    assert table["base_steady_s"] == {"whole": 1.8, "blocks": 2.0, "whole_over_blocks": pytest.approx(0.9)}
    assert table["width_steady_cpu_s"]["whole_over_blocks"] == pytest.approx(1.0)
    assert table["depth_steady_s"]["whole_over_blocks"] == pytest.approx(9 / 8)


def test_scope_smoke_run_and_its_summary(tmp_path, monkeypatch):
    """The ``--scopes`` run end to end on a tiny GPT (backend eager: no code generated), then ``--summarize``; in
    this process (the script's own imports are the cost of a subprocess)."""
    import torch

    module, out = _module(), tmp_path / "scope.json"
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))  # the script sets it: restored after
    threads = torch.get_num_threads()
    monkeypatch.setattr(sys, "argv", ["compile_cost.py", "--scopes", "--n-layer", "2", "--n-embd", "16", "--seq", "8",
                                      "--batch", "2", "--vocab", "32", "--rounds", "2", "--window", "1",
                                      "--backend", "eager", "--out", str(out)])
    try:
        module.main()
    finally:
        torch.set_num_threads(threads)
        torch.compiler.reset()
    result = json.loads(out.read_text())
    assert len(result["machine"]["loadavg_start"]) == 3 and len(result["machine"]["loadavg_end"]) == 3
    assert [len(r) for r in result["raw_ms"]["blocks"]["depth_steady_ms"]] == [1, 1]
    table = result["table"]
    assert set(table) >= {"base_first_s", "width_first_s", "depth_first_s", "base_steady_cpu_s"}
    assert all(row["whole"] > 0 and row["blocks"] > 0 for row in table.values())
    saved = dict(table)
    result["table"] = {}
    out.write_text(json.dumps(result))
    monkeypatch.setattr(sys, "argv", ["compile_cost.py", "--summarize", str(out)])
    module.main()
    assert json.loads(out.read_text())["table"] == saved
