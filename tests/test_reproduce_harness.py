"""``benchmarks/reproduce.py``, the harness behind every "does growth pay" figure in the README: the iso-FLOPs row
really gets the growth row's FLOPs, each axis grows what and when it says, identical configurations train once,
and the paired statistics are the per-seed differences (checked on hand-made run directories, no training)."""

from __future__ import annotations

import importlib.util
import json
import math
import statistics
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def repro():
    spec = importlib.util.spec_from_file_location("reproduce_under_test", ROOT / "benchmarks" / "reproduce.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop(spec.name, None)


@pytest.mark.parametrize("axis", ["inner", "hidden", "joint", "two-stage", "joint-25", "joint-75"])
def test_iso_flops_row_gets_the_growth_rows_flops(repro, axis, tmp_path):
    """The from-scratch large row trains for the step count whose ``6 N D`` is nearest the growth row's FLOPs
    (recomputed here from the parameters per phase, not read from the harness' own total)."""
    size = repro.resolve_size("tiny")
    cells, refused = repro.plan_grid("tiny", size, [axis], ["SPARKLING", "scratch large (iso-FLOPs)"], [1],
                                     tmp_path)
    assert refused == []
    grown = next(c for c in cells if c["row"] == "SPARKLING")["compute"]
    iso = next(c for c in cells if c["row"] != "SPARKLING")["compute"]
    tps = grown["tokens_per_step"]
    by_hand = sum(6.0 * n * tps * k for n, k in zip(grown["active_params"], grown["phase_steps"]))
    assert grown["flops"] == pytest.approx(by_hand, rel=1e-12)
    per_step = 6.0 * iso["active_params"][-1] * tps
    assert iso["active_params"] == [grown["active_params"][-1]]  # the grown shape from the first step
    assert abs(iso["steps"] * per_step - by_hand) <= per_step / 2
    assert iso["steps"] < grown["steps"]


def test_axes_grow_what_and_when_they_say(repro):
    size = repro.resolve_size("quick")
    small, large, steps = size["small"], size["large"], 1000
    assert repro.axis_stages("inner", size, steps) == [
        {"at_step": 500, "intermediate_size": large["intermediate_size"], "rewarmup_steps": 50}]
    assert repro.axis_stages("hidden", size, steps)[0]["n_embd"] == large["n_embd"]
    assert [s["at_step"] for s in repro.axis_stages("joint-25", size, steps)] == [250]
    assert [s["at_step"] for s in repro.axis_stages("joint-75", size, steps)] == [750]
    two = repro.axis_stages("two-stage", size, steps)
    assert [s["at_step"] for s in two] == [333, 666]
    assert two[0]["n_embd"] == (small["n_embd"] + large["n_embd"]) // 2
    assert two[1]["intermediate_size"] == large["intermediate_size"]
    with pytest.raises(ValueError, match="unknown axis 'joint-50'"):
        repro.axis_stages("joint-50", size, steps)


def test_rows_pin_the_paper_recipe_and_identical_configs_train_once(repro, tmp_path):
    """Every growth row is its keys on top of the paper's recipe (the CLI's default would add the symmetry loop);
    "ablation: RMS only" is naive growth at 2x and "recommended recipe" is "symmetry target 0.5", so each pair
    points at one run directory."""
    size = repro.resolve_size("tiny")
    config = repro.build_config(size, "joint", repro.ROWS["SPARKLING"], seed=2)
    assert config["growth"]["recipe"] == "paper" and config["seed"] == 2 and config["growth"]["seed"] == 2
    assert repro.build_config(size, "joint", repro.ROWS["recommended recipe"], 1)["growth"]["recipe"] == "recommended"
    rows = ["naive growth", "ablation: RMS only", "SPARKLING", "symmetry target 0.5", "recommended recipe",
            "symmetry target 0.8"]
    cells, _ = repro.plan_grid("tiny", size, ["joint"], rows, [1, 2], tmp_path)
    dirs = {(c["row"], c["seed"]): c["run_dir"] for c in cells}
    assert dirs[("naive growth", 1)] == dirs[("ablation: RMS only", 1)]
    assert dirs[("symmetry target 0.5", 2)] == dirs[("recommended recipe", 2)] != dirs[("symmetry target 0.8", 2)]
    assert len(set(dirs.values())) == 2 * 4
    assert dirs[("naive growth", 1)] != dirs[("naive growth", 2)] != dirs[("SPARKLING", 2)]


def _fake_run(run_dir: Path, val_loss: float | None, status: str = "completed", curve: dict | None = None,
              symmetry: dict | None = None) -> None:
    from torch.utils.tensorboard import SummaryWriter

    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps({"status": status, "val_loss": val_loss,
                                                      "wall_clock_seconds": 60.0}))
    writer = SummaryWriter(str(run_dir / "logs"))
    for step, value in (curve or {}).items():
        writer.add_scalar("val_loss", value, step)
    for tag, value in (symmetry or {}).items():
        writer.add_scalar(tag, value, 10)
    writer.close()


def test_paired_differences_are_per_seed(repro, tmp_path):
    """Three seeds of SPARKLING and iso-FLOPs scratch, a row with one seed missing and one failed: the row's
    difference is paired by seed (mean, sample sd, t-interval, seeds where the row is worse), missing and failed
    seeds are named, and the curve's in-loop validation steps are shifted to the optimizer step that ran them."""
    losses = {"SPARKLING": [3.40, 3.50, 3.45], "scratch large (iso-FLOPs)": [3.30, 3.45, 3.47],
              "naive growth": [3.44, None, None]}  # seed 2 never ran, seed 3 failed
    compute = {"steps": 1000, "tokens_per_step": 10, "eval_interval": 250, "active_params": [100, 200],
               "phase_steps": [500, 500]}
    cells = []
    for row, values in losses.items():
        for seed, loss in enumerate(values, start=1):
            run_dir = tmp_path / repro.slug(row) / f"seed{seed}"
            cells.append({"axis": "joint", "row": row, "seed": seed, "run_dir": str(run_dir), "compute": compute,
                          "note": ""})
            if row == "naive growth" and seed == 2:
                continue  # never ran
            _fake_run(run_dir, loss, status="failed" if loss is None else "completed",
                      curve={249: 4.0, 999: loss or 9.0, 1000: loss or 9.0},
                      symmetry={"symmetry/stage_0/n_embd": 0.5 + seed / 10})
    table = repro.collect(cells)["joint"]

    ref = losses["SPARKLING"]
    iso = losses["scratch large (iso-FLOPs)"]
    diffs = [i - r for i, r in zip(iso, ref)]
    entry = table["scratch large (iso-FLOPs)"]
    assert entry["diff"]["per_seed"] == pytest.approx(diffs)
    assert entry["diff"]["mean"] == pytest.approx(statistics.fmean(diffs))
    assert entry["diff"]["sd"] == pytest.approx(statistics.stdev(diffs))
    assert entry["diff"]["ci95"] == pytest.approx(4.303 * statistics.stdev(diffs) / math.sqrt(3))
    assert entry["diff"]["wins"] == sum(d > 0 for d in diffs) == 1
    assert table["SPARKLING"]["diff_iso_flops"]["per_seed"] == pytest.approx([-d for d in diffs])
    assert "diff" not in table["SPARKLING"]  # no difference of a row to itself
    assert table["SPARKLING"]["mean"] == pytest.approx(statistics.fmean(ref))

    naive = table["naive growth"]
    assert naive["seeds"] == {1: 3.44} and naive["not_run"] == [2] and naive["failed"] == [3]
    assert naive["diff"]["n"] == 1 and naive["diff"]["sd"] is None
    assert naive["symmetry_end"] == {"n_embd": pytest.approx(0.6)}
    assert table["SPARKLING"]["symmetry_end"] == {"n_embd": pytest.approx(0.7)}

    curve = table["SPARKLING"]["curves"][1]
    assert [p["step"] for p in curve] == [250, 1000]  # 249 -> 250; 999 -> 1000, overwritten by the final value
    assert curve[0]["flops"] == pytest.approx(6 * 100 * 10 * 250)
    assert curve[1]["flops"] == pytest.approx(6 * 10 * (100 * 500 + 200 * 500))
    assert curve[1]["val_loss"] == pytest.approx(ref[0])


def test_dry_run_lists_the_cells_and_trains_nothing(repro, tmp_path, capsys):
    out = tmp_path / "runs"
    assert repro.main(["--size", "tiny", "--axes", "joint-75", "--rows", "SPARKLING", "--seeds", "2", "--dry-run",
                       "--out", str(out), "--results", str(tmp_path / "results")]) == 0
    text = capsys.readouterr().out
    assert "joint-75 | SPARKLING" in text and "seed 2: 40 steps" in text
    assert not out.exists()
    with pytest.raises(SystemExit):
        repro.main(["--size", "tiny", "--axes", "sideways", "--dry-run", "--out", str(out)])
    assert "unknown axes ['sideways']" in capsys.readouterr().err


def test_generated_configs_are_valid_sparkling_configs(repro, tmp_path):
    """What the harness writes is what ``sparkling pretrain --config`` reads (the package parses it)."""
    size = repro.resolve_size("tiny")
    config = repro.build_config(size, "two-stage", repro.ROWS["recommended recipe"], seed=1)
    compute, why = repro.check_config(config)
    assert why is None, why
    assert compute["growth_steps"] == [13, 26] and len(compute["active_params"]) == 3
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    assert yaml.safe_load(path.read_text())["growth"]["stages"][1]["at_step"] == 26
