"""benchmarks/campaign.py (issue 38): the queue and its dry run, the deadline, and the tiny CPU mode end to end (a
second call trains nothing: every finished run is in the results file)."""

from __future__ import annotations

import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import campaign  # noqa: E402


def test_the_queue_is_ordered_size_then_seed_then_axis():
    cells = campaign.queue(["gpu-s", "gpu-m"], [1, 2])
    assert [c.key for c in cells[:3]] == ["gpu-s/joint/random-zero-ratio-3/seed1",
                                          "gpu-s/depth/depth-stack-copy-zero/seed1",
                                          "gpu-s/joint/random-zero-ratio-3/seed2"]
    assert [c.size for c in cells] == ["gpu-s"] * 4 + ["gpu-m"] * 4


def test_dry_run_lists_the_gpu_ladder_with_sizes_tokens_and_gpu_minutes(tmp_path, capsys):
    assert campaign.main(["--dry-run", "--out", str(tmp_path), "--results", str(tmp_path / "r.jsonl")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 13 and out[-1].startswith("12 cells, ~")
    small = [line for line in out if line.startswith("gpu-s/")]
    medium = [line for line in out if line.startswith("gpu-m/")]
    for line in small + medium:
        params = float(line.split()[1].removesuffix("M"))
        tokens = float(line.split("params,")[1].split()[0])
        assert tokens >= 20, line
        assert (4 <= params <= 20) if line.startswith("gpu-s/") else (30 <= params <= 100), line
    # the joint cells are the ladder's rungs: 5-20M and 50-100M parameters
    assert 5 <= float(small[0].split()[1].removesuffix("M")) <= 20
    assert 50 <= float(medium[0].split()[1].removesuffix("M")) <= 100
    # the rungs docs/BENCHMARKS.md ("The size ladder") and the README name: a change to a size's table changes them
    assert {line.split()[1] + " " + line.split()[3] for line in small + medium} == {
        "8.39M 20.3", "4.98M 34.2", "54.54M 20.1", "33.57M 32.6"}
    minutes = [float(line.split("~")[1].split()[0]) for line in small]
    assert all(5 <= m <= 12 for m in minutes), minutes  # a gpu-s cell: about 8 minutes of one H100


def test_deadline_forms():
    now = datetime(2026, 11, 26, 22, 0, tzinfo=timezone.utc).timestamp()
    assert campaign.parse_deadline("+9", now) == now + 540
    assert campaign.parse_deadline("+30s", now) == now + 30
    assert campaign.parse_deadline("22:30", now) == now + 1800
    assert campaign.parse_deadline("2026-11-26T23:00:00+00:00", now) == now + 3600
    with pytest.raises(ValueError, match="--deadline 'soon'"):
        campaign.parse_deadline("soon", now)


def test_tiny_mode_trains_appends_and_never_repeats_a_run(tmp_path, capsys):
    results = tmp_path / "results.jsonl"
    argv = ["--tiny", "--seeds", "1", "--jobs", "3", "--deadline", "+10", "--out", str(tmp_path / "runs"),
            "--results", str(results), "--set", f"data.cache_dir={tmp_path / 'cache'}"]
    assert campaign.main(argv) == 0
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert sorted((e["axis"], e["run"]) for e in lines) == sorted(
        (axis, run) for axis in ("joint", "depth") for run in ("growth seed 1", "scratch x1 seed 1",
                                                              "scratch x2 seed 1"))
    assert all(e["device"] == "cpu" and e["loss"] > 0 and e["seconds"] > 0 for e in lines)
    cells = json.loads(results.with_suffix(".cells.json").read_text())
    assert {c["axis"] for c in cells} == {"joint", "depth"}
    for c in cells:
        growth = next(e for e in lines if e["cell"] == c["cell"] and e["kind"] == "growth")
        same = next(e for e in lines if e["cell"] == c["cell"] and e["budget"] == 1.0 and e["kind"] == "scratch")
        assert c["delta"] == pytest.approx(growth["loss"] - same["loss"], abs=1e-3)
        assert "speedup" in c and c["params"] > 0
        # three runs at a time on one machine: no wall-clock ratio, and the cell says why (issue 45)
        assert c["wall_speedup"] is None and c["wall_clock_note"].startswith("not compared: the runs trained 3 at a time")
    assert all(e["jobs"] == 3 for e in lines)
    # a run finished on this machine but never recorded (e.g. the process died before appending): recorded, not
    # trained again
    results.write_text("\n".join(json.dumps(e) for e in lines[1:]) + "\n")
    capsys.readouterr()
    assert campaign.main(argv) == 0
    assert "start " not in capsys.readouterr().out  # nothing trained
    assert len(results.read_text().splitlines()) == len(lines)
    capsys.readouterr()
    assert campaign.main(argv) == 0  # a second session: nothing left
    assert "every run of the queue is in the results file" in capsys.readouterr().out
    assert len(results.read_text().splitlines()) == len(lines)


def test_a_past_deadline_trains_nothing(tmp_path, capsys):
    results = tmp_path / "results.jsonl"
    assert campaign.main(["--tiny", "--seeds", "1", "--jobs", "1", "--deadline", "+0s", "--out",
                          str(tmp_path / "runs"), "--results", str(results)]) == 0
    assert not results.exists() or results.read_text() == ""
    assert "not started" in capsys.readouterr().out


def test_a_failed_run_is_reported_by_its_error_line_and_the_campaign_goes_on(tmp_path, capsys):
    """Issue 45: the campaign survives a failed run. The depth cell's growth run (its first) fails its config check
    (its re-warmup cannot fit after the growth); the cell's scratch runs after it still train and are recorded, one
    at a time (each entry says ``jobs`` 1), and the failure names its cause."""
    results = tmp_path / "results.jsonl"
    argv = ["--tiny", "--seeds", "1", "--jobs", "1", "--deadline", "+10", "--out", str(tmp_path / "runs"),
            "--results", str(results), "--set", f"data.cache_dir={tmp_path / 'cache'}"]
    real_runs, real_queue = campaign.cell_runs, campaign.queue

    def break_growth(cell, out, overrides=()):
        runs, facts = real_runs(cell, out, overrides)
        runs[0].config["growth"]["stages"][0]["rewarmup_steps"] = 100  # more than the steps after the growth
        return runs, facts

    campaign.cell_runs = break_growth
    campaign.queue = lambda *a, **k: [c for c in real_queue(*a, **k) if c.axis == "depth"]
    try:
        assert campaign.main(argv) == 0
    finally:
        campaign.cell_runs, campaign.queue = real_runs, real_queue
    out = capsys.readouterr().out
    assert "growth seed 1: FAILED (exit 2: error: growth.stages[0].rewarmup_steps: rewarmup_steps=100" in out
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert sorted(e["run"] for e in lines) == ["scratch x1 seed 1", "scratch x2 seed 1"]  # went on after it
    assert all(e["jobs"] == 1 and e["axis"] == "depth" for e in lines)
    assert json.loads(results.with_suffix(".cells.json").read_text()) == []  # an incomplete cell is not written
