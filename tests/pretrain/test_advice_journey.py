"""The advice loop as a user walks it (issue 52), one test per kind of config: ``plan --suggest`` -> paste the start
model and the ``growth:`` block -> ``plan`` -> a tiny ``measure`` -> ``plan --map measure.json``. Each step cites the
cell of the step before it: ``plan`` cites the cell ``--suggest`` cited, ``measure``'s summary cites it too, and
``plan --map`` then cites the cell ``measure`` wrote, under the same category, recipe and schedule (one match).

The cells ``--suggest`` reads are a map file near these tiny runs' token ratio (the package's map holds nothing
there). ``measure``'s runs are faked (each run's ``summary.json`` written as a finished run writes it, so ``measure``
takes every other step of its real path), except the depth journey's, which trains for real.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import yaml

from lightning_sparkling.pretrain.measure import command as measure_module
from lightning_sparkling.pretrain.cli import main, parse
from lightning_sparkling.pretrain.advice.measured import load_map
from lightning_sparkling.pretrain.advice.planning import plan
from lightning_sparkling.pretrain.advice.run_plan import stage_plans

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_cli import tiny_config, write_config
from test_suggest import paste

MOE = {"mlp_class_name": "LLaMAMoE", "n_expert": 4, "n_expert_per_token": 2, "moe_intermediate_size": 64}
JOURNEYS = {
    # a depth start: the config grows 2 -> 4 layers; --suggest ends at its 4 layers
    "depth start": dict(model={}, growth={"stages": [{"at_step": 6, "n_layer": 4, "rewarmup_steps": 3}]},
                        cell={"axis": "depth", "factors": {"n_layer": 2}}),
    # a target that grows nothing: the config's 4 layers are the model to end at
    "target": dict(model={"n_layer": 4}, growth={"stages": []},
                   cell={"axis": "depth", "factors": {"n_layer": 4}, "growth_at": 0.25}),
    # a width config: hidden and MLP 2x
    "width": dict(model={}, growth={"stages": [{"at_step": 6, "n_embd": 64, "intermediate_size": 128,
                                                "rewarmup_steps": 3}]},
                  cell={"axis": "joint", "recipe": "random-zero-3x"}),
    # an experts config: dense -> MoE upcycling to 4 experts, top-2
    "experts": dict(model={}, growth={"stages": [{"at_step": 6, "mlp_class_name": "LLaMAMoE", "n_expert": 4,
                                                  "n_expert_per_token": 2, "rewarmup_steps": 3}]},
                    cell={"axis": "upcycle", "init": "copy", "growth_at": 0.5, "start_delta": -0.02,
                          "start_sd": 0.01, "start_seeds_above": 0}),
    # the README's progressive: form (2 -> 4 -> 8 there; 1 -> 2 -> 4 at this size), G_stack's copy
    "progressive": dict(model={"n_layer": 1},
                        growth={"progressive": {"n_layer": [1, 2, 4], "at_fraction": [0.5, 0.75],
                                                "depth_init": "copy", "rewarmup_steps": 2}},
                        cell={"axis": "depth", "init": "copy", "factors": {"n_layer": 4},
                              "stages": [{"at_fraction": 0.5, "factors": {"n_layer": 2}, "depth_init": "copy"},
                                         {"at_fraction": 0.75, "factors": {"n_layer": 2}, "depth_init": "copy"}]}),
}


def _fake_train(runs, jobs, **kwargs):
    """``train_runs`` without training: growth ends 0.05 below scratch at equal FLOPs in every seed."""
    for r in runs:
        r.run_dir.mkdir(parents=True, exist_ok=True)
        loss = 4.0 if r.kind == "growth" else 4.05 - 0.1 * (r.budget - 1)
        (r.run_dir / "summary.json").write_text(json.dumps({"status": "completed", "val_loss": loss,
                                                            "flops": r.flops, "fit_seconds": 1.0}))
    return []


def _config(tmp_path: Path, journey: dict) -> dict:
    config = tiny_config(tmp_path / "cache", rms_monitor=None, num_threads=1, seed=3, out_dir=str(tmp_path / "run"))
    config["model_config"].update(journey["model"])
    config["growth"] = journey["growth"]
    config["train"].update(max_steps=12, save_interval=None, lr_schedule="wsd", lr_decay_fraction=0.1)
    config["eval"] = {"interval": 6, "max_iters": 2}
    return config


def _cells(tmp_path: Path, ratio: float, cell: dict) -> Path:
    """A map file of one cell near ``ratio`` training tokens per parameter that paid in every seed."""
    base = {"recipe": "paper", "schedule": "wsd", "growth_at": 0.5, "tokens_per_param": round(ratio, 3),
            "delta": -0.05, "sd": 0.01, "seeds": 3, "seeds_above": 0, "speedup": 1.2, "speedup_sd": 0.02,
            "where": "the journey's cell", "params": 100_000}
    path = tmp_path / "cells.json"
    path.write_text(json.dumps({"cells": [{**base, **cell}]}))
    load_map.cache_clear()
    return path


def _flat(text: str) -> str:
    return " ".join(text.split())  # rich wraps long lines


@pytest.mark.parametrize("name", list(JOURNEYS))
def test_suggest_paste_plan_measure_plan_map(tmp_path, capsys, monkeypatch, name):
    journey = JOURNEYS[name]
    config = _config(tmp_path, journey)
    path = write_config(tmp_path / "run.yaml", config)
    _, run, _ = parse(["--config", str(path)], "plan")
    target = (stage_plans(run)[-1].new_config if run.stages else run.model_config)
    ratio = plan(run, print_report=False)["total_tokens"] / plan(run, print_report=False)["active_params"][-1]
    cells = _cells(tmp_path, ratio, journey["cell"])

    # 1. plan --suggest: a start model and a block that end at the config's model, citing the journey's cell
    assert main(["plan", "--config", str(path), "--suggest", "--map", str(cells)]) == 0
    out = capsys.readouterr().out
    block = re.search(r"^model_config:\n(?:  .*\n)+growth:\n(?:  .*\n)+", out, flags=re.M)
    assert block and "the journey's cell" in out and ": growth paid there;" in out, out
    suggested = yaml.safe_load(block.group(0))
    cited = re.search(r"^evidence: (.*?): growth paid there;", out, flags=re.M).group(1)

    # 2. paste it; 3. plan cites the same cell, and the pasted run ends at the config's model on its tokens
    pasted = write_config(tmp_path / "pasted.yaml", paste(config, suggested["model_config"], suggested["growth"]))
    assert main(["plan", "--config", str(pasted), "--map", str(cells)]) == 0
    planned = _flat(capsys.readouterr().out)
    assert cited in planned and "growth paid there" in planned, planned
    assert "nothing was measured" not in planned
    _, again, _ = parse(["--config", str(pasted)], "plan")
    assert stage_plans(again)[-1].new_config == target and again.total_tokens == run.total_tokens

    # 4. a tiny measure of the pasted config: its summary cites the same cell, its cell keeps the category
    if name != "depth start":
        monkeypatch.setattr(measure_module, "train_runs", _fake_train)
    assert main(["measure", "--config", str(pasted), "--budgets", "1", "--jobs", "2", "--map", str(cells)]) == 0
    measured = _flat(capsys.readouterr().out)
    assert f"the map's cell for this config (what sparkling plan cited): {cited}" in measured, measured
    result = json.loads((tmp_path / "run" / "measure.json").read_text())
    (written,) = result["cells"]
    journey_cell = json.loads(cells.read_text())["cells"][0]
    assert (written["axis"], written["recipe"], written["schedule"]) == (journey_cell["axis"], journey_cell["recipe"],
                                                                         "wsd")
    assert written.get("init") == journey_cell.get("init")
    assert len(written.get("stages") or [None]) == len(journey_cell.get("stages") or [None])
    assert written["arch"] == "llama" and written["ceiling"] >= 1

    # 5. plan --map measure.json cites the cell measure wrote (its `where` names this measure)
    load_map.cache_clear()
    assert main(["plan", "--config", str(pasted), "--map", str(tmp_path / "run" / "measure.json")]) == 0
    final = _flat(capsys.readouterr().out)
    assert f"docs/BENCHMARKS.md, {written['where']})" in _flat(final), final
    word = {"paid": "growth paid there", "cost": "growth cost near", "no measurable difference":
            "no measurable difference near"}
    from lightning_sparkling.pretrain.advice.verdict import verdict

    assert word[verdict(written["delta"], written["sd"], written["seeds"], written["seeds_above"])] in final
