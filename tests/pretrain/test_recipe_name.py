"""One name for the recipe of resolved stages (issue 49): ``sparkling measure`` labels its cell with it and
``sparkling plan --map`` matches on it, so the cell measured for a config is the cell plan finds for that config;
the readable label and a note in words say what a reader needs, and no label is a compound string."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from lightning_sparkling.growth.recipes import RECIPES
from lightning_sparkling.growth.stage import GrowthStage
from lightning_sparkling.pretrain.measure import command as measure_module
from lightning_sparkling.pretrain.cli import _read_maps, main, parse
from lightning_sparkling.pretrain.advice.measured import MAP_PATH, load_map
from lightning_sparkling.pretrain.advice.planning import plan, run_recipe
from lightning_sparkling.pretrain.advice.recipe_words import RecipeName, recipe_name
from lightning_sparkling.pretrain.advice.run_plan import plan_run

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_cli import tiny_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.yaml"))
MOE_EXAMPLES = {"olmoe_inner_2x.yaml", "two_stage.yaml"}  # seconds to plan (32 experts): their own schedule only;
# their categories under WSD are GROWTHS' experts and two-stage below
OLD_LABEL = "here the keys of"
OLD_NOTE = "grows a stage that adds none as paper does"  # issue 49's note, gone with issue 52's one name

# one stage list per kind of growth the issue names (a tiny LLaMA-MLP model: 2 layers, n_embd 32)
GROWTHS = {
    "depth": [{"at_step": 6, "n_layer": 4, "rewarmup_steps": 3}],
    "width": [{"at_step": 6, "n_embd": 64, "intermediate_size": 128, "rewarmup_steps": 3}],
    "experts": [{"at_step": 6, "mlp_class_name": "LLaMAMoE", "n_expert": 4, "n_expert_per_token": 2,
                 "rewarmup_steps": 3}],
    "two-stage": [{"at_step": 4, "n_embd": 48, "intermediate_size": 96, "rewarmup_steps": 2},
                  {"at_step": 7, "n_embd": 64, "intermediate_size": 128, "rewarmup_steps": 2}],
}


# ------------------------------------------------------------------------------------------------- the one function
@pytest.mark.parametrize("stages, key, label, note", [
    # a width stage: the recipe is its own name, no note
    ([GrowthStage(100, n_embd=128, recipe="wsd")], "wsd", "wsd", None),
    ([GrowthStage(100, n_embd=128, recipe="random-zero-3x")], "random-zero-3x", "random-zero-3x", None),
    ([GrowthStage(100, n_embd=128, recipe=r) for r in ("recommended",) * 2], "recommended", "recommended", None),
    # a depth-only stage: wsd and random-zero-3x set the paper's keys there, so it is one plan with one name
    # (issue 52: the stages form of a --suggest block and the same schedule under auto are matched and labelled
    # alike)
    ([GrowthStage(100, n_layer=8, recipe="wsd")], "paper", "paper", None),
    ([GrowthStage(100, n_layer=8, recipe="random-zero-3x")], "paper", "paper", None),
    ([GrowthStage(100, n_layer=8, recipe="random-zero")], "random-zero", "random-zero", None),  # its 10x applies
    # the loop left out (rewarmup_scope all): recommended grows this width stage as the paper does
    ([GrowthStage(100, n_embd=128, recipe="recommended", rewarmup_scope="all")], "paper", "recommended",
     "recommended grows this stage as paper does, so the measured map names it paper"),
    # a key the stage sets itself
    ([GrowthStage(100, n_embd=128, recipe="random-zero-3x", rewarmup_ratio=5.0)], "paper", "random-zero-3x",
     "the stage sets rewarmup_ratio itself, so the measured map names it paper (its keys are no named recipe's)"),
    ([GrowthStage(100, n_embd=128, recipe="wsd", rewarmup_ratio=10.0)], "random-zero", "wsd",
     "the stage sets rewarmup_ratio itself, so the measured map names it random-zero"),
    # stages of two recipes
    ([GrowthStage(100, n_embd=64, recipe="paper"), GrowthStage(200, n_embd=128, recipe="random-zero-3x")], "paper",
     "paper", "the stages name the recipes paper, random-zero-3x; the measured map names them paper (their keys are "
              "no named recipe's)"),
])
def test_recipe_name_keys_a_named_recipe_and_labels_what_the_stages_grew_by(stages, key, label, note):
    name = recipe_name(stages)
    assert name == RecipeName(key, label, note)
    assert name.key in RECIPES and run_recipe(stages) == key  # the map's name: a plain recipe name
    assert OLD_LABEL not in name.describe() and "," not in name.key


# ------------------------------------------------------------------------ measure's cell is the cell plan then finds
def _fake_train(runs, jobs, **kwargs):
    """``train_runs`` without training: each run's ``summary.json`` as a finished run writes it (scratch at a larger
    budget lower), so ``sparkling measure`` takes every other step of its real path."""
    for r in runs:
        r.run_dir.mkdir(parents=True, exist_ok=True)
        loss = 4.0 if r.kind == "growth" else 4.05 - 0.1 * (r.budget - 1)
        (r.run_dir / "summary.json").write_text(json.dumps({"status": "completed", "val_loss": loss,
                                                            "flops": r.flops, "fit_seconds": 1.0}))
    return []


def _measure_then_plan(config: Path, tmp_path: Path, *args: str) -> tuple[dict, str, object]:
    """``sparkling measure`` of ``config`` (training faked), then ``sparkling plan --map`` of its ``measure.json``
    for the same config: the result, the advice plan gives, and the resolved run."""
    out = tmp_path / "out"
    argv = ["--config", str(config), "--out_dir", str(out), *args]
    assert main(["measure", *argv, "--budgets", "2"]) == 0
    result = json.loads((out / "measure.json").read_text())
    _, run, _ = parse(argv, "plan")
    report = plan(run, print_report=False, cells=_read_maps([str(out / "measure.json")]))
    return result, report["regime_advice"], run


def _assert_found(result: dict, advice: str, run) -> None:
    (cell,) = result["cells"]
    name = recipe_name(run.stages)
    assert cell["recipe"] == name.key and cell["recipe"] in RECIPES, cell["recipe"]
    assert result["growth_recipe"] == name.label and result["recipe_note"] == name.note
    # plan found this measurement: the advice describes the cell measure wrote (its `where` names this measure)
    assert f"docs/BENCHMARKS.md, {cell['where']})" in advice, advice
    assert f"growth.recipe {name.label}, {run.train.lr_schedule} schedule" in advice
    assert OLD_LABEL not in json.dumps(result) and OLD_LABEL not in advice


@pytest.mark.parametrize("schedule", ["cosine", "wsd"])
@pytest.mark.parametrize("growth", list(GROWTHS))
def test_plan_finds_the_cell_measure_wrote_for_the_same_config(tmp_path, monkeypatch, growth, schedule):
    monkeypatch.setattr(measure_module, "train_runs", _fake_train)
    config = tiny_config(tmp_path / "cache", growth={"stages": GROWTHS[growth]}, rms_monitor=None)
    config["train"].update(lr_schedule=schedule, save_interval=None)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    result, advice, run = _measure_then_plan(path, tmp_path)
    _assert_found(result, advice, run)
    if growth == "depth" and schedule == "wsd":  # wsd's keys on new blocks are the paper's: one name (issue 52)
        assert (result["cells"][0]["recipe"], result["growth_recipe"]) == ("paper", "paper")
        assert result["recipe_note"] is None and OLD_NOTE not in advice
        # the package's own depth cells under WSD (stored as paper) are still this run's without --map
        own = plan_run(run).advice.cell
        assert own in load_map() and (own.category, own.recipe, own.schedule) == ("depth", "paper", "wsd")


@pytest.mark.parametrize("example, schedule", [(e, s) for e in EXAMPLES for s in ("cosine", "wsd")
                                               if s == "cosine" or e not in MOE_EXAMPLES])
def test_plan_finds_the_cell_measure_wrote_for_every_example(tmp_path, monkeypatch, example, schedule):
    monkeypatch.setattr(measure_module, "train_runs", _fake_train)
    config = yaml.safe_load((ROOT / "examples" / example).read_text())
    assert config.get("train", {}).get("lr_schedule", "cosine") == "cosine"  # the examples' own schedule
    result, advice, run = _measure_then_plan(ROOT / "examples" / example, tmp_path, "--train.lr_schedule", schedule)
    _assert_found(result, advice, run)



def test_no_stored_or_advised_recipe_label_is_a_compound_string():
    """Every cell of the package's map is labelled with a plain recipe name, the one plan matches on."""
    data = json.loads(MAP_PATH.read_text(encoding="utf-8"))
    assert {cell["recipe"] for cell in data["cells"]} <= set(RECIPES)
    assert OLD_LABEL not in MAP_PATH.read_text(encoding="utf-8")
