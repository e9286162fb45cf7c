"""benchmarks/campaign.py (issue 38): the queue and its dry run, the deadline, and the tiny CPU mode end to end (a
second call trains nothing: every finished run is in the results file)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import types
from datetime import datetime, timezone
from pathlib import Path

import pytest

from lightning_sparkling.pretrain.measure import measure_runs

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import campaign


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
        assert (c["wall_speedup"] is None
                and c["wall_clock_note"].startswith("not compared: the runs trained 3 at a time"))
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



#: ``sparkling pretrain`` replaced: a completed summary at once, but the run named by $FAKE_STUCK (a part of its
#: out_dir) ignores SIGTERM (as a run that is compiling does until its next step) and sleeps, its pid in
#: ``stuck.pid``; with $FAKE_INTERRUPT it first sends SIGTERM to the campaign (a user's ``kill``)
FAKE_PRETRAIN = """
import json, os, signal, sys, time
import yaml
config = yaml.safe_load(open(sys.argv[sys.argv.index("--config") + 1]))
out = config["out_dir"]
if os.environ["FAKE_STUCK"] in out:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    open(os.path.join(out, "stuck.pid"), "w").write(str(os.getpid()))
    if os.environ.get("FAKE_INTERRUPT"):
        os.kill(os.getppid(), signal.SIGTERM)
    time.sleep(60)
loss = {"growth": 5.0, "scratch-x1": 5.2, "scratch-x2": 4.8}[os.path.basename(os.path.dirname(out))]
open(os.path.join(out, "summary.json"), "w").write(json.dumps(
    {"status": "completed", "val_loss": loss, "wall_clock_seconds": 0.1}))
"""


@pytest.fixture
def fake_runs(tmp_path, monkeypatch):
    """The tiny campaign (3 runs at a time) trained by :data:`FAKE_PRETRAIN` (no model, no tokenizer): the depth
    cell's growth run is stuck. The loop's tick is a tenth of a second, a stopped run is killed 0.5 s after its
    SIGTERM, and the clock passes the deadline (without $FAKE_INTERRUPT) once the 5 other runs are in the results
    file. Returns the stuck run's ``stuck.pid``."""
    script = tmp_path / "fake_pretrain.py"
    script.write_text(FAKE_PRETRAIN)
    monkeypatch.setattr(measure_runs, "PRETRAIN", (sys.executable, str(script)))
    monkeypatch.setattr(measure_runs, "STOP_GRACE_S", 0.5)
    monkeypatch.setattr(measure_runs, "prepare_data", lambda run: None)  # no tokenizer: the stand-in reads no data
    growth = tmp_path / "runs" / "tiny" / "depth" / "depth-stack-copy-zero" / "seed1" / "growth"
    monkeypatch.setenv("FAKE_STUCK", f"{growth}/")
    results = tmp_path / "results.jsonl"

    def past_deadline() -> bool:
        return (not os.environ.get("FAKE_INTERRUPT") and (growth / "seed1" / "stuck.pid").exists()
                and results.is_file() and len(results.read_text().splitlines()) == 5)

    real = time
    monkeypatch.setattr(measure_runs, "time", types.SimpleNamespace(
        time=lambda: real.time() + (3600 if past_deadline() else 0), sleep=lambda s: real.sleep(s / 10),
        perf_counter=real.perf_counter, monotonic=real.monotonic))
    return growth / "seed1" / "stuck.pid"


def _argv(tmp_path: Path) -> list[str]:
    return ["--tiny", "--seeds", "1", "--jobs", "3", "--deadline", "+10", "--out", str(tmp_path / "runs"),
            "--results", str(tmp_path / "results.jsonl")]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_deadline_stops_the_runs_and_the_campaign_ends_cleanly(tmp_path, fake_runs, capsys):
    """The GPU checks of 2026-11-28: at its deadline the campaign stopped its runs, then died of a KeyboardInterrupt
    (the deadline was raised as one, and the step's timeout signalled it while it waited, run by run, on runs that
    had not exited yet). Now the deadline stops the runs (one that ignores SIGTERM is killed), says what finished and
    what was stopped, writes the complete cells and exits 0, within seconds of the deadline."""
    start = time.monotonic()
    assert campaign.main(_argv(tmp_path)) == 0
    assert time.monotonic() - start < 20  # the stuck run sleeps 60 s: killed, not waited for
    out = capsys.readouterr().out
    assert "stopped: growth seed 1 (unfinished, trained again next time)" in out
    assert "deadline: 5 run(s) finished, 0 failed, 1 stopped (trained again next time), 0 not started" in out
    assert _gone(int(fake_runs.read_text()))  # killed after its grace
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(lines) == 5 and not any(e["axis"] == "depth" and e["kind"] == "growth" for e in lines)
    cells = json.loads((tmp_path / "results.cells.json").read_text())
    assert [c["axis"] for c in cells] == ["joint"]  # the complete cell; depth's waits for its growth run
    assert f"wrote {tmp_path / 'results.cells.json'}: 1 complete cell(s)" in out


def test_an_interrupt_stops_the_runs_and_the_campaign_exits_130(tmp_path, fake_runs, capsys, monkeypatch):
    """A SIGTERM from the user, not the deadline: the runs are stopped (one that ignores SIGTERM is killed), the
    campaign exits 130 and writes no cells file, and the SIGTERM handler is given back."""
    monkeypatch.setenv("FAKE_INTERRUPT", "1")
    start = time.monotonic()
    assert campaign.main(_argv(tmp_path)) == 130
    assert time.monotonic() - start < 20  # the stuck run sleeps 60 s: killed, not waited for
    captured = capsys.readouterr()
    assert "stopped: growth seed 1 (unfinished, trained again next time)" in captured.out
    assert "campaign: interrupted" in captured.err and "deadline" not in captured.out
    assert _gone(int(fake_runs.read_text()))
    assert not (tmp_path / "results.cells.json").exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_a_signal_while_the_runs_stop_is_held_until_every_run_is_stopped(monkeypatch):
    """A second Ctrl-C while the runs stop leaves none running: it is raised once every run is gone."""
    monkeypatch.setattr(measure_runs, "STOP_GRACE_S", 0.5)
    before = signal.getsignal(signal.SIGINT)  # Python's default_int_handler, or what a pytest-xdist worker set
    stubborn = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(60)"
    procs = [subprocess.Popen([sys.executable, "-c", stubborn], stdout=subprocess.PIPE) for _ in range(2)]
    for proc in procs:
        proc.stdout.readline()  # SIGTERM ignored from here on
    lines = []

    def log(line: str) -> None:
        lines.append(line)
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C again, once a run is stopped

    running = [(proc, types.SimpleNamespace(name=name), proc.stdout, 0.0) for proc, name in zip(procs, "ab")]
    with pytest.raises(KeyboardInterrupt):
        measure_runs._stop(running, log)
    assert lines == ["stopped: a (unfinished, trained again next time)",
                     "stopped: b (unfinished, trained again next time)"]
    assert all(proc.returncode is not None for proc in procs) and running == []
    assert signal.getsignal(signal.SIGINT) is before  # the handler in place before the stop, restored


def _on_gpus(tmp_path, monkeypatch, count: int, jobs: int, *more: str, visible: str | None = None) -> int:
    """The tiny campaign (2 cells x 3 runs) on a faked node of ``count`` GPUs (:mod:`_fake_gpu`), ``jobs`` at a time;
    ``accelerator: gpu`` set on every run (the stand-in trains nothing)."""
    from _fake_gpu import fake_gpu_node

    fake_gpu_node(monkeypatch, tmp_path, count)
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    monkeypatch.setenv("FAKE_ROOT", str(tmp_path / "runs"))
    monkeypatch.setenv("FAKE_RUNS", str(min(jobs, 6)))
    return campaign.main(["--tiny", "--seeds", "1", "--jobs", str(jobs), "--deadline", "+10", "--out",
                          str(tmp_path / "runs"), "--results", str(tmp_path / "results.jsonl"), "--set",
                          "accelerator=gpu", *more])


def test_on_a_gpu_node_each_run_gets_its_own_gpu_and_port_and_the_wall_clock_counts(tmp_path, monkeypatch):
    from _fake_gpu import launched

    assert _on_gpus(tmp_path, monkeypatch, count=8, jobs=6) == 0
    envs = launched(tmp_path / "runs")
    assert sorted(e["CUDA_VISIBLE_DEVICES"] for e in envs.values()) == ["0", "1", "2", "3", "4", "5"]
    assert len({e["MASTER_PORT"] for e in envs.values()}) == 6
    lines = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(lines) == 6 and all(e["alone"] and e["jobs"] == 6 and e["device"] == "Fake GPU" for e in lines)
    cells = json.loads((tmp_path / "results.cells.json").read_text())
    assert len(cells) == 2 and all(c["wall_clock_note"] is None and c["wall_speedup"] for c in cells)


def test_more_runs_than_gpus_take_the_gpus_in_turn_and_say_they_shared(tmp_path, monkeypatch):
    """Several small runs on one GPU on purpose (the campaign's --jobs auto on one H200): the runs go round the
    visible GPUs, and the cells carry the shared-device note."""
    from _fake_gpu import launched

    assert _on_gpus(tmp_path, monkeypatch, count=8, jobs=4, visible="2,5") == 0
    gpus = [e["CUDA_VISIBLE_DEVICES"] for e in launched(tmp_path / "runs").values()]
    assert len(gpus) == 6 and set(gpus) == {"2", "5"}, gpus  # 4 at a time on 2 GPUs: both taken, nothing else
    cells = json.loads((tmp_path / "results.cells.json").read_text())
    assert all(c["wall_speedup"] is None and c["wall_clock_note"].startswith("not compared") for c in cells)


def test_devices_auto_with_several_runs_on_gpus_is_refused_before_any_run(tmp_path, monkeypatch, capsys):
    assert _on_gpus(tmp_path, monkeypatch, 8, 4, "--set", "devices=auto", "--set", "train.global_batch_size=8",
                    "--set", "train.micro_batch_size=1") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --jobs 4 with devices auto: each run would take all 8 visible GPUs; give devices as a "
                   "number, e.g. --devices 2 (--jobs 4 x devices 2 fits)"], err
    assert not (tmp_path / "results.jsonl").exists() and not list((tmp_path / "runs").rglob("env.json"))
