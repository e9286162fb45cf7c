"""``sparkling plan --suggest``: the measured best growth for a run's schedule and token ratio as a ``growth:`` block
that parses back as the run's growth, with the cell's size, token ratio, seeds and distance; a plain "no measured
growth fits" when nothing does; ``--map FILE`` adds cells."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from lightning_sparkling.pretrain.cli import main, parse
from lightning_sparkling.pretrain.measured import load_map
from test_cli import tiny_config, write_config

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))


def _suggested(capsys, argv: list[str]) -> tuple[str, dict | None]:
    assert main(["plan", *argv, "--suggest"]) == 0
    out = capsys.readouterr().out
    match = re.search(r"^growth:\n(?:  .*\n)+", out, flags=re.M)
    return out, yaml.safe_load(match.group(0))["growth"] if match else None


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_gets_a_block_that_parses_back_or_a_plain_no(example, tmp_path, capsys):
    out, growth = _suggested(capsys, ["--config", str(example)])
    if growth is None:
        assert out.startswith("no measured growth fits this run: no cell of the map under train.lr_schedule "), out
        assert "sparkling measure --config RUN.yaml" in out
        return
    assert re.search(r"evidence: .*; measured at [\d.]+ tokens per parameter against this run's [\d.]+ with this "
                     r"growth \([\d.]+x apart\); on [\d.]+[kMB] parameters.*, [\d.e+]+x smaller than this run's "
                     r"[\d.]+[kMB]; 3 seeds", out), out
    config = yaml.safe_load(example.read_text())
    config["growth"] = growth
    _, run, _ = parse(["--config", str(write_config(tmp_path / "suggested.yaml", config))], "plan")
    stage = run.stages[0]
    assert len(run.stages) == 1 and stage.at_step == pytest.approx(growth["stages"][0]["at_fraction"] * run.steps,
                                                                   abs=1)
    assert run.growth.recipe == growth["recipe"]


def test_the_quickstart_is_told_plainly_that_nothing_fits(capsys):
    out, growth = _suggested(capsys, ["--config", str(EXAMPLES[0].with_name("quickstart.yaml"))])
    assert growth is None and "no measured growth fits this run" in out


def _cell(**keys) -> dict:
    cell = {"axis": "depth", "recipe": "wsd", "schedule": "wsd", "growth_at": 0.5, "tokens_per_param": 0.1,
            "delta": -0.2, "sd": 0.01, "seeds": 3, "seeds_above": 0, "speedup": 1.7, "speedup_sd": 0.05,
            "where": "a test cell", "params": 200_000, "factors": {"n_layer": 4}}
    return {**cell, **keys}


def test_a_map_file_s_cell_is_suggested_with_its_factors_and_only_under_its_schedule(tmp_path, capsys):
    config = tiny_config(tmp_path / "cache", train={"max_steps": 40, "lr_schedule": "wsd"})
    argv = ["--config", str(write_config(tmp_path / "tiny.yaml", config))]
    out, growth = _suggested(capsys, argv)
    assert growth is None  # the package's map has nothing near this tiny run
    cells = tmp_path / "measure.json"
    cells.write_text(json.dumps({"cells": [_cell(), _cell(schedule="cosine", speedup=3.0, recipe="paper")]}))
    load_map.cache_clear()
    out, growth = _suggested(capsys, [*argv, "--map", str(cells)])
    assert growth == {"recipe": "wsd", "stages": [{"at_fraction": 0.5, "n_layer": 8, "rewarmup_steps": 9}]}, out
    assert "speed-up at equal loss 1.70x ± 0.05 (3 seeds)" in out and "a test cell" in out
    _, cosine = _suggested(capsys, [*argv, "--train.lr_schedule", "cosine", "--map", str(cells)])
    assert cosine["recipe"] == "paper"  # the cosine cell, under a cosine schedule


def test_a_cell_far_in_token_ratio_or_that_did_not_pay_is_no_fit(tmp_path, capsys):
    config = tiny_config(tmp_path / "cache", train={"max_steps": 40, "lr_schedule": "wsd"})
    argv = ["--config", str(write_config(tmp_path / "tiny.yaml", config))]
    cells = tmp_path / "measure.json"
    cells.write_text(json.dumps({"cells": [_cell(tokens_per_param=5.0), _cell(delta=0.1, speedup=0.9)]}))
    out, growth = _suggested(capsys, [*argv, "--map", str(cells)])
    assert growth is None and "The nearest cell of this schedule: depth, wsd, wsd" in out


def test_a_multi_stage_cell_is_suggested_as_its_whole_schedule(tmp_path, capsys):
    """Issue 46: the 20+ tokens-per-parameter leader grows 2 -> 4 -> 8 layers at 50% and 75% with G_stack's full copy.
    ``--suggest`` pastes both stages (each factor on the sizes before it, its ``depth_init``), each re-warmup short
    enough to end before the next growth, and the block resolves as the run's growth."""
    config = tiny_config(tmp_path / "cache", train={"max_steps": 40, "lr_schedule": "wsd"})
    argv = ["--config", str(write_config(tmp_path / "tiny.yaml", config))]
    stages = [{"at_fraction": 0.5, "factors": {"n_layer": 2}, "depth_init": "copy"},
              {"at_fraction": 0.75, "factors": {"n_layer": 2}, "depth_init": "copy"}]
    cells = tmp_path / "measure.json"
    cells.write_text(json.dumps({"cells": [_cell(stages=stages, init="copy", speedup=1.3)]}))
    load_map.cache_clear()
    out, growth = _suggested(capsys, [*argv, "--map", str(cells)])
    assert growth == {"recipe": "wsd", "stages": [
        {"at_fraction": 0.5, "n_layer": 4, "depth_init": "copy", "rewarmup_steps": 4},
        {"at_fraction": 0.75, "n_layer": 8, "depth_init": "copy", "rewarmup_steps": 4}]}, out
    _, run, _ = parse([*argv, "--growth", json.dumps(growth)], "plan")
    assert [(s.at_step, s.n_layer, s.depth_init) for s in run.stages] == [(20, 4, "copy"), (30, 8, "copy")]


def test_a_copy_depth_cell_is_matched_only_with_copy_runs(tmp_path):
    """The map keys depth cells by ``depth_init`` where it is not ``copy-zero`` (``run_init``), as it keys experts
    cells by ``expert_init``: a ``copy-zero`` run is not told what a ``copy`` schedule measured."""
    from lightning_sparkling.growth.stage import GrowthStage
    from lightning_sparkling.pretrain.measured import MeasuredCell, advise

    cells = [MeasuredCell.from_json(_cell(init="copy", tokens_per_param=20.0, delta=-0.08, speedup=1.25))]
    kwargs = dict(total_steps=100, tokens_per_param=20.0, recipe="wsd", schedule="wsd", cells=cells)
    copied = advise([GrowthStage(50, n_layer=8, depth_init="copy", recipe="wsd")], **kwargs)
    zeroed = advise([GrowthStage(50, n_layer=8, recipe="wsd")], **kwargs)
    assert copied.cell is cells[0] and copied.init == "copy"
    assert zeroed.cell is None
