"""The reproduce grid trains through the measure engine's loop (``measure_runs.train_runs``, issue 41): one loop,
the grid's order, environment, done check (old runs included), resume and Ctrl-C, with a stand-in for
``sparkling pretrain`` that only writes ``summary.json`` (no model is trained)."""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import signal
import sys
from pathlib import Path

import pytest
import yaml

from lightning_sparkling.pretrain.measure import measure_runs

ROOT = Path(__file__).resolve().parents[2]

FAKE_PRETRAIN = """
import json, os, sys, time
import yaml
config = yaml.safe_load(open(sys.argv[sys.argv.index("--config") + 1]))
with open(os.environ["FAKE_PRETRAIN_LOG"], "a") as f:
    f.write(config["out_dir"] + "\\n")
if os.environ.get("FAKE_PRETRAIN_SLEEP"):
    time.sleep(60)
summary = {"status": "completed", "wall_clock_seconds": 0.5, "omp": os.environ.get("OMP_NUM_THREADS"),
           "warnings": os.environ.get("PYTHONWARNINGS")}
open(os.path.join(config["out_dir"], "summary.json"), "w").write(json.dumps(summary))
"""


@pytest.fixture(scope="module")
def repro():
    spec = importlib.util.spec_from_file_location("reproduce_grid_loop_under_test",
                                                  ROOT / "benchmarks" / "reproduce.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


@pytest.fixture(scope="module")
def planned(repro, tmp_path_factory):
    """Two rows of the tiny joint axis, two seeds; "naive growth" and "ablation: RMS only" share their runs."""
    out = tmp_path_factory.mktemp("grid")
    cells, refused = repro.plan_grid("tiny", repro.resolve_size("tiny"), ["joint"],
                                     ["naive growth", "SPARKLING", "ablation: RMS only"], [1, 2], out)
    assert refused == [] and len(cells) == 6 and len({c["run_dir"] for c in cells}) == 4
    return cells


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """``sparkling pretrain`` replaced by a script that logs the run dir it was given and writes a completed
    summary; ``train_runs`` spied on. Returns (the started run dirs, the train_runs calls)."""
    script = tmp_path / "fake_pretrain.py"
    script.write_text(FAKE_PRETRAIN)
    started = tmp_path / "started.txt"
    started.touch()
    monkeypatch.setenv("FAKE_PRETRAIN_LOG", str(started))
    monkeypatch.setattr(measure_runs, "PRETRAIN", (sys.executable, str(script)))
    calls = []
    real = measure_runs.train_runs

    def spy(runs, *args, **kwargs):
        calls.append((list(runs), args, kwargs))
        return real(runs, *args, **kwargs)

    monkeypatch.setattr(measure_runs, "train_runs", spy)
    return (lambda: started.read_text().splitlines()), calls


def _fresh(cells, tmp_path):
    """The cells (copies) moved under ``tmp_path`` (each test its own run dirs)."""
    base = Path(cells[0]["run_dir"]).parents[3]
    return [{**copy.deepcopy(c), "run_dir": str(tmp_path / Path(c["run_dir"]).relative_to(base))} for c in cells]


def test_grid_trains_each_distinct_run_once_seed_major_through_train_runs(repro, planned, fake, tmp_path):
    started, calls = fake
    cells = _fresh(planned, tmp_path)
    lines = []
    repro.run_grid(cells, 2, log=lines.append)
    # one loop: the engine's, with the grid's environment, every distinct run once, seed 1's rows first
    ((runs, args, kwargs),) = calls
    assert args == (2, lines.append, {"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}) and kwargs == {}
    assert all(isinstance(r, measure_runs.TrainingRun) for r in runs)
    assert [r.name for r in runs] == ["joint | naive growth seed 1", "joint | SPARKLING seed 1",
                                      "joint | naive growth seed 2", "joint | SPARKLING seed 2"]
    assert sorted(started()) == sorted({c["run_dir"] for c in cells})
    for cell in {c["run_dir"]: c for c in reversed(cells)}.values():  # the first cell of a run dir is its run
        run_dir = Path(cell["run_dir"])
        assert yaml.safe_load((run_dir / "config.yaml").read_text()) == {**cell["config"], "out_dir": str(run_dir)}
        assert not (run_dir / "measure_config.yaml").exists()
        summary = json.loads((run_dir / "summary.json").read_text())
        assert summary["omp"] == "1" and summary["warnings"] == "ignore"
        assert repro.is_done(run_dir, cell["config"])
    assert lines[0] == "4 runs, 0 already finished, 4 to train (2 at a time)"
    assert any(ln.startswith("[4/4] joint | ") and ": ok, 0 s" in ln for ln in lines), lines
    # a second grid trains nothing
    lines.clear()
    repro.run_grid(cells, 2, log=lines.append)
    assert lines == ["4 runs, 4 already finished, 0 to train (2 at a time)"] and len(started()) == 4


def test_done_check_accepts_old_runs_and_retrains_changed_or_stale_ones(repro, planned, fake, tmp_path):
    started, _ = fake
    cells = _fresh(planned, tmp_path)
    first = {}
    for cell in cells:  # the first cell of each run dir is its run
        first.setdefault(cell["run_dir"], cell)
    old, changed, stale, failed = (Path(d) for d in first)
    for run_dir in (old, changed, stale, failed):
        run_dir.mkdir(parents=True)
        saved = copy.deepcopy({**first[str(run_dir)]["config"], "out_dir": str(run_dir)})
        if run_dir == old:  # saved before growth.recipe existed, summary before status existed
            assert saved["growth"].pop("recipe") == "paper"
            summary = {"val_loss": 3.0}
        else:
            summary = {"status": "failed" if run_dir == failed else "completed"}
        if run_dir == changed:
            saved["train"] = {**saved["train"], "max_steps": saved["train"]["max_steps"] + 1}
        (run_dir / "config.yaml").write_text(yaml.safe_dump(saved, sort_keys=False))
        if run_dir != stale:  # stale: no summary (an interrupted run), a leftover file
            (run_dir / "summary.json").write_text(json.dumps(summary))
        (run_dir / "leftover.txt").write_text("x")
    assert repro.is_done(old, first[str(old)]["config"])
    assert not any(repro.is_done(d, first[str(d)]["config"]) for d in (changed, stale, failed))
    # a recipe the old run could not have had is another run
    other = {**first[str(old)]["config"], "growth": {**first[str(old)]["config"]["growth"], "recipe": "recommended"}}
    assert not repro.is_done(old, other)
    lines = []
    repro.run_grid(cells, 1, log=lines.append)
    assert lines[0] == "4 runs, 1 already finished, 3 to train (1 at a time)"
    assert started() == [str(stale), str(changed), str(failed)]  # seed 1 before seed 2, each from the start
    assert (old / "leftover.txt").exists() and not (stale / "leftover.txt").exists()


def test_ctrl_c_stops_the_subprocesses_and_exits_130(repro, planned, fake, tmp_path, monkeypatch):
    _ = fake  # the stand-in for sparkling pretrain
    cells = _fresh(planned, tmp_path)
    monkeypatch.setenv("FAKE_PRETRAIN_SLEEP", "1")
    lines = []

    def log(line: str) -> None:
        lines.append(line)
        if line.startswith("start ") and sum(ln.startswith("start ") for ln in lines) == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # `kill` of the grid, once both runs are going

    with pytest.raises(SystemExit) as exc:
        repro.run_grid(cells, 2, log=log)
    assert exc.value.code == 130
    stopped = [ln for ln in lines if ln.startswith("stopped: ")]
    assert stopped == ["stopped: joint | naive growth seed 1 (unfinished, trained again next time)",
                       "stopped: joint | SPARKLING seed 1 (unfinished, trained again next time)"]
    assert not any((Path(c["run_dir"]) / "summary.json").exists() for c in cells)
    assert signal.getsignal(signal.SIGTERM) is not measure_runs._raise_interrupt
