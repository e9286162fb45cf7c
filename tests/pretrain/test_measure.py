"""``sparkling measure`` (issue 38): the config's growth run against its grown shape from scratch at several budgets,
end to end on CPU; its statistics; its refusals."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import yaml

from lightning_sparkling.pretrain.cli import main, parse
from lightning_sparkling.pretrain.measure.command import parse_budgets
from lightning_sparkling.pretrain.measure.measure_stats import compare
from lightning_sparkling.pretrain.advice.measured import load_map
from lightning_sparkling.pretrain.advice.planning import plan

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_cli import tiny_config

from _fake_gpu import fake_gpu_node, launched


def _config(tmp_path: Path, **sections) -> Path:
    config = tiny_config(tmp_path / "cache", rms_monitor=None, num_threads=1, out_dir=str(tmp_path / "run"), seed=3,
                         **sections)
    config["train"]["save_interval"] = None
    config["eval"] = {"interval": 5, "max_iters": 2}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_measure_end_to_end_writes_a_cell_plan_reads_and_resumes(tmp_path, capsys):
    config = _config(tmp_path)
    argv = ["measure", "--config", str(config), "--budgets", "2", "--jobs", "3", "--train.max_steps", "10"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    root = tmp_path / "run" / "measure"
    growth, x1, x2 = root / "growth" / "seed3", root / "scratch-x1" / "seed3", root / "scratch-x2" / "seed3"
    # the dotted override reached every run; the growth run grew, the scratch runs trained the grown shape
    g, s1, s2 = _summary(growth), _summary(x1), _summary(x2)
    assert g["steps"] == 10 and len(g["growth_events"]) == 1
    assert s1["growth_events"] == [] and s1["active_params"] == [g["active_params"][-1]]
    assert math.isclose(s1["flops"], g["flops"], rel_tol=0.15) and math.isclose(s2["flops"], 2 * g["flops"],
                                                                                rel_tol=0.15)
    # the cell: Δ at equal FLOPs is the growth run's final val loss minus scratch x1's, read from their summaries
    result = json.loads((tmp_path / "run" / "measure.json").read_text())
    (cell,) = result["cells"]
    assert cell["delta"] == pytest.approx(g["val_loss"] - s1["val_loss"], abs=1e-3)
    assert cell["seeds"] == 1 and cell["seeds_above"] == int(g["val_loss"] > s1["val_loss"])
    assert cell["axis"] == "joint" and cell["device"] == "cpu" and cell["precision"] == "32-true"
    assert cell["params"] == g["total_params"][-1] and 0 < cell["embedding_share"] < 1
    assert [r["name"] for r in result["runs"]] == ["growth seed 3", "scratch x1 seed 3", "scratch x2 seed 3"]
    assert "Δ at equal FLOPs" in out and "[3/3]" in out
    # three runs at a time: their seconds count each other, so no wall-clock ratio, and the reason (issue 45)
    assert result["wall_speedup"] is None and result["jobs"] == 3
    assert "wall-clock time to the same loss: not compared: the runs trained 3 at a time" in out
    assert not any("wall_speedup" in s for s in result["per_seed"].values())
    # each run's steady seconds: its phases' median step times x their steps (the growth run has two phases)
    assert 0 < g["steady_seconds"] <= g["fit_seconds"] and 0 < s1["steady_seconds"] <= s1["fit_seconds"]
    # plan --map reads it: the run's own measurement is the nearest cell
    (measured,) = load_map(tmp_path / "run" / "measure.json")
    _, run, _ = parse(["--config", str(config), "--train.max_steps", "10"], "plan")
    report = plan(run, print_report=False, cells=(*load_map(), measured))
    assert "sparkling measure --config" in report["regime_advice"]
    assert main(["plan", "--config", str(config), "--train.max_steps", "10", "--map",
                 str(tmp_path / "run" / "measure.json")]) == 0
    # an interrupted (here: finished) measurement trains nothing again
    assert main(argv) == 0
    assert "3 runs, 3 already finished, 0 to train" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--seeds", "0"], "--seeds '0': give a whole number >= 1"),
    (["--jobs", "many"], "--jobs 'many': give a whole number >= 1"),
    (["--budgets", "0,2"], "--budgets '0,2': give multiples of the growth run's FLOPs"),
    (["--growth.stages", "[]"], "growth.stages is empty"),
    (["--train.max_steps", "-1"], "train.max_steps"),
    (["--eval.final_validation", "false"], "eval.final_validation: false"),
])
def test_bad_input_is_one_error_line_before_anything_is_written(tmp_path, capsys, args, message):
    config = _config(tmp_path)
    with pytest.raises(SystemExit) if args[0] == "--train.max_steps" else _nothing():
        assert main(["measure", "--config", str(config), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not (tmp_path / "run").exists()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_budgets_always_hold_equal_flops():
    assert parse_budgets("2,0.7") == (0.7, 1.0, 2.0)
    assert parse_budgets("1") == (1.0,)


def test_compare_reads_speedup_delta_and_wall_time_per_seed():
    growth = {1: {"loss": 3.9, "flops": 1e12, "seconds": 100.0}, 2: {"loss": 4.0, "flops": 1e12, "seconds": 100.0}}
    scratch = {b: {s: {"loss": loss, "flops": b * 1e12, "seconds": 200.0 * b} for s in (1, 2)}
               for b, loss in ((0.5, 4.2), (1.0, 4.0), (2.0, 3.8))}
    out = compare(growth, scratch)
    assert out["per_seed"][1]["delta"] == pytest.approx(-0.1) and out["per_seed"][2]["delta"] == pytest.approx(0.0)
    assert out["delta"] == pytest.approx(-0.05) and out["seeds_above"] == 0 and out["seeds"] == 2
    assert out["per_seed"][1]["speedup"] == pytest.approx(2 ** 0.5)  # halfway 1x -> 2x in log-FLOPs
    assert out["per_seed"][2]["speedup"] == pytest.approx(1.0)
    # wall-clock: scratch takes 200 s per 1e12 FLOPs, growth 100 s for its 1e12
    assert out["per_seed"][1]["wall_speedup"] == pytest.approx(2 * 2 ** 0.5)
    assert out["speedup"] == pytest.approx((2 ** 0.5 + 1) / 2)
    # a seed beyond the largest budget: no mean speed-up, the seed says how far
    growth[2]["loss"] = 3.5
    out = compare(growth, scratch)
    assert out["speedup"] is None and out["per_seed"][2]["speedup"] == "> 2.00x" and out["seeds_above"] == 0
    with pytest.raises(ValueError, match="scratch budget 1.0"):
        compare(growth, {2.0: scratch[2.0]})


def test_plan_refuses_a_map_that_is_not_one_in_one_line(tmp_path, capsys):
    config = _config(tmp_path)
    (tmp_path / "bad.json").write_text('{"cells": [{"axis": "joint"}]}')
    for path in (tmp_path / "missing.json", tmp_path / "bad.json"):
        with pytest.raises(SystemExit) as exc:
            main(["plan", "--config", str(config), "--map", str(path)])
        assert exc.value.code == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"error: --map {path}: not a measured map"), err


def test_measure_takes_a_two_rank_ddp_config(tmp_path):
    """Multi-device keys reach every run: each is a 2-rank DDP run (gloo on CPU), with accumulation 1 there, in
    bf16-mixed with fused AdamW and clipping (issue 45: every such run failed at step 1)."""
    config = _config(tmp_path)
    assert main(["measure", "--config", str(config), "--budgets", "1", "--devices", "2", "--strategy", "ddp",
                 "--precision", "bf16-mixed", "--train.max_steps", "10"]) == 0  # a GPU user's path (fused, clipped)
    root = tmp_path / "run" / "measure"
    for run_dir in (root / "growth" / "seed3", root / "scratch-x1" / "seed3"):
        log = (run_dir / "run.log").read_text()
        assert "micro_batch_size 4 x 2 device(s) x 1 accumulation" in log, log[:400]
        assert "precision bf16-mixed, optimizer AdamW" in log, log[:400]
        assert _summary(run_dir)["status"] == "completed"
    assert len(_summary(root / "growth" / "seed3")["growth_events"]) == 1
    (cell,) = json.loads((tmp_path / "run" / "measure.json").read_text())["cells"]
    assert cell["seeds"] == 1 and cell["speedup"] is None  # one budget: no loss curve to read a speed-up from


def test_measure_help_names_its_options_and_writes_nothing(tmp_path, capsys):
    assert main(["measure", "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: sparkling measure --config RUN.yaml") and all(
        opt in out for opt in ("--budgets", "--seeds", "--jobs", "sparkling pretrain --help"))



@pytest.fixture
def gpu_node(tmp_path, monkeypatch):
    """A faked node of 8 GPUs and a ``sparkling pretrain`` that records its environment (:mod:`_fake_gpu`); returns
    a function reading each run's recorded environment, by run folder."""
    fake_gpu_node(monkeypatch, tmp_path)
    monkeypatch.setenv("FAKE_ROOT", str(tmp_path / "run" / "measure"))
    return lambda: launched(tmp_path / "run" / "measure")


def _measure_on(tmp_path, monkeypatch, jobs: int, devices, accelerator: str = "gpu", budgets: str = "2,3",
                *more: str):
    runs = 1 + len(parse_budgets(budgets))  # the growth run and scratch at each budget (1 always among them)
    monkeypatch.setenv("FAKE_RUNS", str(min(runs, jobs)))
    config = _config(tmp_path)
    return main(["measure", "--config", str(config), "--budgets", budgets, "--jobs", str(jobs), "--accelerator",
                 accelerator, "--devices", str(devices), "--train.max_steps", "10", *more])


def test_measure_jobs_on_a_gpu_node_gives_each_run_its_own_gpus_and_port(tmp_path, monkeypatch, capsys, gpu_node):
    """``--jobs 4`` with ``devices: 2`` on 8 GPUs: 4 processes at once, on 0,1 / 2,3 / 4,5 / 6,7, each with its own
    master port; alone on their GPUs, so the wall-clock ratio is given (no "shared a device" note)."""
    assert _measure_on(tmp_path, monkeypatch, jobs=4, devices=2) == 0
    envs = gpu_node()
    assert sorted(e["CUDA_VISIBLE_DEVICES"] for e in envs.values()) == ["0,1", "2,3", "4,5", "6,7"]
    assert envs["growth/seed3"]["CUDA_VISIBLE_DEVICES"] == "0,1"  # the first run, the first slice
    ports = [int(e["MASTER_PORT"]) for e in envs.values()]
    assert len(set(ports)) == 4 and all(1024 < p < 65536 for p in ports)
    result = json.loads((tmp_path / "run" / "measure.json").read_text())
    assert result["gpus"] == ["0,1", "2,3", "4,5", "6,7"] and result["jobs"] == 4
    assert result["wall_clock_note"] is None and result["wall_speedup"] is not None
    assert result["cells"][0]["device"] == "Fake GPU"
    assert "not compared" not in capsys.readouterr().out


def test_measure_jobs_beyond_the_visible_gpus_is_refused_before_any_run(tmp_path, monkeypatch, capsys, gpu_node):
    assert _measure_on(tmp_path, monkeypatch, jobs=5, devices=2) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --jobs 5 x devices 2 = 10 GPUs, 8 visible: use --jobs 4"], err
    assert not (tmp_path / "run").exists()  # nothing launched, nothing written


def test_measure_slices_an_existing_cuda_visible_devices(tmp_path, monkeypatch, capsys, gpu_node):
    """A node slice handed to this process (CUDA_VISIBLE_DEVICES=3,5,6,7) is sliced further; 3 jobs of 2 do not fit
    it, and the error says which GPUs it counted."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5,6,7")
    assert _measure_on(tmp_path, monkeypatch, jobs=3, devices=2) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --jobs 3 x devices 2 = 6 GPUs, 4 visible (CUDA_VISIBLE_DEVICES=3,5,6,7): use --jobs 2"]
    assert _measure_on(tmp_path, monkeypatch, jobs=2, devices=2, budgets="1") == 0
    envs = gpu_node()
    assert envs["growth/seed3"]["CUDA_VISIBLE_DEVICES"] == "3,5"
    assert envs["scratch-x1/seed3"]["CUDA_VISIBLE_DEVICES"] == "6,7"


def test_measure_jobs_with_devices_auto_on_gpus_asks_for_a_number(tmp_path, monkeypatch, capsys, gpu_node):
    assert _measure_on(tmp_path, monkeypatch, 3, "auto", "gpu", "2,3", "--train.micro_batch_size", "1") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --jobs 3 with devices auto: each run would take all 8 visible GPUs; give devices as a "
                   "number, e.g. --devices 2 (--jobs 3 x devices 2 fits)"], err
    assert not (tmp_path / "run").exists()


def test_measure_jobs_on_the_cpu_changes_only_the_master_ports(tmp_path, monkeypatch, capsys, gpu_node):
    """On the CPU (even where GPUs are visible) nothing is sliced: no CUDA_VISIBLE_DEVICES, distinct master ports,
    and the runs shared the cores, so no wall-clock ratio."""
    assert _measure_on(tmp_path, monkeypatch, jobs=2, devices=2, accelerator="cpu", budgets="1") == 0
    envs = gpu_node()
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs.values()] == [None, None]
    assert len({e["MASTER_PORT"] for e in envs.values()}) == 2
    result = json.loads((tmp_path / "run" / "measure.json").read_text())
    assert result["gpus"] == [None, None] and result["wall_clock_note"].startswith("not compared: the runs trained 2")


def test_place_jobs_slices_shares_in_turn_or_refuses_with_the_fix():
    from lightning_sparkling.pretrain.measure.placement import PlacementError, place_jobs

    eight = [str(i) for i in range(8)]
    p = place_jobs(3, 2, "cuda", gpus=eight)
    assert p.describe() == ["0,1", "2,3", "4,5"] and p.alone and len(set(p.ports)) == 3
    assert p.env(2) == {"CUDA_VISIBLE_DEVICES": "4,5", "MASTER_PORT": str(p.ports[2])}
    shared = place_jobs(5, 3, "gpu", gpus=eight, share=True)  # 2 slices of 3 (GPUs 6, 7 left over), in turn
    assert shared.describe() == ["0,1,2", "3,4,5", "0,1,2", "3,4,5", "0,1,2"] and not shared.alone
    one = place_jobs(1, "auto", "cuda", gpus=eight)  # one job: every visible GPU, the environment's own
    assert one.describe() == [None] and one.env(0) == {} and one.alone
    cpu = place_jobs(3, 2, "cpu", gpus=eight)
    assert cpu.describe() == [None] * 3 and not cpu.alone and set(cpu.env(0)) == {"MASTER_PORT"}
    with pytest.raises(PlacementError, match=r"^--jobs 1 x devices 10 = 10 GPUs, 8 visible: use devices 8 or fewer$"):
        place_jobs(1, 10, "cuda", gpus=eight, share=True)
    with pytest.raises(PlacementError, match=r"^--jobs 2 x devices 1 = 2 GPUs, 0 visible: make GPUs visible or use"):
        place_jobs(2, 1, "cuda", gpus=[])
