"""``sparkling plan --suggest`` (issues 46, 52): where to start and how to grow so that the run ends at the model its
config names, on its own token budget. The printed start model (``model_config`` keys) and ``growth:`` block, pasted,
plan to exactly the config's final model and tokens, and ``plan`` of the pasted config cites the cell ``--suggest``
cited; a size a cell's factors do not divide is rounded and said; a tie or a loss is never suggested."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from lightning_sparkling.growth.compute import count_params
from lightning_sparkling.pretrain.cli import main, parse
from lightning_sparkling.pretrain.advice.measured import load_map
from lightning_sparkling.pretrain.advice.planning import plan
from lightning_sparkling.pretrain.advice.run_plan import stage_plans
from test_cli import tiny_config, write_config

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
Q8 = {"name": "q8", "n_layer": 8, "n_embd": 64, "n_head": 4, "n_query_groups": 4, "head_size": 16,
      "intermediate_size": 256, "mlp_class_name": "LLaMAMLP", "norm_class_name": "RMSNorm", "bias": False,
      "parallel_residual": False, "rotary_percentage": 1.0, "block_size": 128}
"""The issue's model: the quickstart's llama-style blocks at 8 layers (1,049,664 parameters). Nearest in size to the
1.38M cell, where 2 -> 4 -> 8 showed no measurable difference (issue 54)."""
Q8S = {**Q8, "name": "q8s", "n_embd": 32, "n_head": 2, "n_query_groups": 2, "intermediate_size": 128}
"""Q8 at width 32 (393,760 parameters at 8 layers): nearer the 0.20M cells, where 2 -> 4 -> 8 paid, than the 1.38M
one."""


def suggested(capsys, argv: list[str]) -> tuple[str, dict | None, dict | None]:
    """What ``plan --suggest`` printed, its ``model_config`` keys and its ``growth`` block (``None``: no block)."""
    assert main(["plan", *argv, "--suggest"]) == 0
    out = capsys.readouterr().out
    match = re.search(r"^model_config:\n(?:  .*\n)+growth:\n(?:  .*\n)+", out, flags=re.M)
    if not match:
        return out, None, None
    block = yaml.safe_load(match.group(0))
    return out, block["model_config"], block["growth"]


def paste(config: dict, start: dict, growth: dict) -> dict:
    """The config with the suggestion pasted as the README says: ``model_config``'s keys merged, ``growth`` replaced."""
    return {**config, "model_config": {**(config.get("model_config") or {}), **start}, "growth": growth}


def final_model(run) -> tuple:
    plans = stage_plans(run)
    config = plans[-1].new_config if plans else run.model_config
    return config, count_params(config, tie_embeddings=run.train.tie_embeddings)[1]


def assert_lands_on_the_config(tmp_path: Path, config: dict, start: dict, growth: dict, out: str,
                               argv: tuple[str, ...] = ()) -> object:
    """The pasted suggestion ends at exactly the config's final model (every field), on its tokens and steps, and
    ``plan`` of it cites the cell ``--suggest`` cited."""
    _, before, _ = parse(["--config", str(write_config(tmp_path / "before.yaml", config)), *argv], "plan")
    _, after, _ = parse(["--config", str(write_config(tmp_path / "pasted.yaml", paste(config, start, growth))),
                         *argv], "plan")
    (target, params), (grown, grown_params) = final_model(before), final_model(after)
    assert grown == target and grown_params == params  # never a larger (or other) model
    assert (after.total_tokens, after.steps) == (before.total_tokens, before.steps)
    assert f"ends at {target.name} ({target.n_layer} layers), " in out and f"({params:,})" in out
    evidence = re.search(r"^evidence: (.*?): (growth paid there);", out, flags=re.M)
    report = plan(after, print_report=False, cells=tuple(load_map()))
    assert evidence and evidence.group(1) in report["regime_advice"], (out, report["regime_advice"])
    assert "nothing was measured" not in report["regime_advice"] and "nothing near" not in report["regime_advice"]
    far = "over 10x apart in size" in out  # then plan says the evidence is too far to count on, as --suggest did
    assert ("growth paid there" in report["regime_advice"]) is not far
    assert far or report["regime_warning"] is None
    return after


def _wsd(tmp_path: Path, model: dict, **train) -> dict:
    """The issue's run: WSD with a 10% decay, 10,250 steps x 2,048 tokens (20 tokens per parameter at 8 layers)."""
    return {"model_config": dict(model), "out_dir": str(tmp_path / "out"), "precision": "32-true",
            "data": {"source": "stdlib", "vocab_size": 4096, "seq_len": 128},
            "train": {"global_batch_size": 16, "micro_batch_size": 16, "max_steps": 10250, "lr_schedule": "wsd",
                      "lr_decay_fraction": 0.1, **train},
            "optimizer": {"class_path": "torch.optim.AdamW", "init_args": {"lr": 0.003}}, "growth": {"stages": []}}


def _wsd20(tmp_path: Path, model: dict, **train) -> dict:
    """:func:`_wsd` with ``max_steps`` set to 20 tokens per parameter of ``model`` (the 20+ cells' token ratio)."""
    config = _wsd(tmp_path, model, **train)
    _, run, _ = parse(["--config", str(write_config(tmp_path / "sizing.yaml", config))], "plan")
    _, params = final_model(run)
    config["train"]["max_steps"] = round(20 * params / (16 * 128))
    return config


def test_a_config_that_grows_nothing_is_the_model_to_end_at(tmp_path, capsys):
    """The issue's case: an 8-layer config at 20 tokens per parameter with ``growth.stages: []`` got ``n_layer: 32``.
    Now: start at 2 layers and grow 2 -> 4 -> 8 (the 20+ cell), ending at the config's 393,760 parameters (nearest
    the 0.20M cells, where it paid)."""
    config = _wsd20(tmp_path, Q8S)
    out, start, growth = suggested(capsys, ["--config", str(write_config(tmp_path / "q8s.yaml", config))])
    assert start == {"n_layer": 2}, out
    assert [(s["at_fraction"], s["n_layer"], s["depth_init"]) for s in growth["stages"]] == [(0.5, 4, "copy"),
                                                                                             (0.75, 8, "copy")]
    assert "ends at q8s (8 layers), 0.39M parameters (393,760)" in out and "starts at 0.30M parameters" in out
    assert "speed-up at equal loss 1.29x ± 0.03 (3 seeds)" in out
    assert "this schedule's ceiling" in out and "at this run's 0.39M" in out
    assert_lands_on_the_config(tmp_path, config, start, growth, out)


def test_a_saving_farther_in_size_than_a_tie_is_not_suggested(tmp_path, capsys):
    """Issue 54: the same config at width 64 (1.05M parameters) is nearest the 1.38M cell, where 2 -> 4 -> 8 showed no
    measurable difference. The 0.20M cells' savings do not outweigh it: no block, the 1.38M evidence first, what
    paid farther away after it, and ``sparkling measure`` to find out; ``plan`` of the 2 -> 4 -> 8 block at this size
    cites the same 1.38M cell with its verdict."""
    (tie,) = [c for c in load_map() if c.params == 1_377_888 and c.category == "depth"]
    assert not tie.pays and tie.tokens_per_param >= 20  # what this test rests on: the map's 1.38M cell
    config = _wsd(tmp_path, Q8)
    out, start, growth = suggested(capsys, ["--config", str(write_config(tmp_path / "q8.yaml", config))])
    assert growth is None and start is None, out
    assert out.startswith("no measured growth fits this run: growth of this kind paid only on models farther from "
                          "its size than one where it did not. Nearest this run's size: "), out
    nearest, farther = out.split(". Paid farther away: ")
    assert tie.where in nearest and "no measurable difference (no saving was measured)" in nearest
    assert "1.31x larger than this run's 1.05M; 3 seeds" in nearest
    assert "depth[copy]/paper/wsd@50%+75%/20.8 1.58x at 0.15M" in farther and " more. " in farther
    assert out.rstrip().endswith("sparkling measure --config RUN.yaml")
    pasted = {**_wsd(tmp_path, {**Q8, "n_layer": 2}),
              "growth": {"stages": [{"at_fraction": 0.5, "n_layer": 4, "depth_init": "copy"},
                                    {"at_fraction": 0.75, "n_layer": 8, "depth_init": "copy"}]}}
    _, run, _ = parse(["--config", str(write_config(tmp_path / "pasted.yaml", pasted))], "plan")
    advice = plan(run, print_report=False)["regime_advice"]
    assert advice.startswith("no measurable difference near this run") and tie.where in advice, advice
    assert "so no saving was measured" in advice and "1.33x at this run's 1.05M" in advice


@pytest.mark.parametrize("n_layer, start, rounded", [(4, 1, None), (12, 3, None), (10, 3, "n_layer 5 / 2 = 2.5 -> 3")])
def test_other_depths_start_at_a_quarter_and_a_rounding_is_said(tmp_path, capsys, n_layer, start, rounded):
    """4 layers got 4 -> 8 -> 16 before; now 1 -> 2 -> 4. A size the factors do not divide is rounded, said in the
    report, and the stages still end at the config's model."""
    config = _wsd20(tmp_path, {**Q8S, "n_layer": n_layer})
    out, keys, growth = suggested(capsys, ["--config", str(write_config(tmp_path / "c.yaml", config))])
    assert keys == {"n_layer": start} and growth["stages"][-1]["n_layer"] == n_layer, out
    assert ("rounded: " in out) is (rounded is not None) and (rounded is None or rounded in out)
    assert_lands_on_the_config(tmp_path, config, keys, growth, out)


def test_a_named_target_gets_its_sizes_divided_and_its_derived_fields_pinned(tmp_path, capsys):
    """``model_name: pythia-160m`` at 20 tokens per parameter, WSD, no growth: the start model is pythia-160m's own
    config with the factors divided out (3 layers, overrides on the named config), never a 296M model."""
    config = {"model_name": "pythia-160m", "out_dir": str(tmp_path / "out"), "precision": "bf16-mixed",
              "data": {"source": "stdlib", "vocab_size": 50304, "seq_len": 2048},
              "train": {"global_batch_size": 512, "micro_batch_size": 8, "max_tokens": 3_240_000_000,
                        "lr_schedule": "wsd", "lr_decay_fraction": 0.1},
              "optimizer": {"class_path": "torch.optim.AdamW", "init_args": {"lr": 0.0006}}, "growth": {"stages": []}}
    out, start, growth = suggested(capsys, ["--config", str(write_config(tmp_path / "p.yaml", config))])
    assert start == {"n_layer": 3} and growth["stages"][-1]["n_layer"] == 12, out
    assert "ends at pythia-160m (12 layers), 162M parameters (162,322,944)" in out
    # pythia's blocks are NeoX's: the map's NeoX cell is the nearer evidence, cited first, with no family note
    # (issue 54; a llama run's family note: test_ceiling.py)
    assert "evidence: depth (depth_init copy), neox blocks" in out and "this run has neox blocks" not in out
    assert_lands_on_the_config(tmp_path, config, start, growth, out)


def test_a_config_that_grows_is_suggested_toward_the_model_it_ends_at(tmp_path, capsys):
    """The README's ``progressive:`` form (2 -> 4 -> 8) and a one-stage 2 -> 8 both end at 8 layers: the suggestion
    ends there too, whatever the config's own schedule."""
    for growth in ({"progressive": {"n_layer": [2, 4, 8], "at_fraction": [0.5, 0.75], "depth_init": "copy"}},
                   {"stages": [{"at_fraction": 0.8, "n_layer": 8}]}):
        config = {**_wsd20(tmp_path, {**Q8S, "n_layer": 2}), "growth": growth}
        out, start, block = suggested(capsys, ["--config", str(write_config(tmp_path / "g.yaml", config))])
        assert start == {} or start is None or start == {"n_layer": 2}, out
        assert block["stages"][-1]["n_layer"] == 8
        assert_lands_on_the_config(tmp_path, config, start or {}, block, out)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_ends_at_its_own_model_or_gets_a_plain_no(example, tmp_path, capsys):
    out, start, growth = suggested(capsys, ["--config", str(example)])
    if growth is None:
        assert out.startswith("no measured growth fits this run: no cell of the map under train.lr_schedule "), out
        assert "sparkling measure --config RUN.yaml" in out
        return
    assert re.search(r"evidence: .*: growth paid there; measured at [\d.]+ tokens per parameter against this run's "
                     r"[\d.]+ \([\d.]+x apart\); on [\d.]+[kMB] parameters.*, [\d.e+]+x smaller than this run's "
                     r"[\d.]+[kMB]; 3 seeds", out), out
    config = yaml.safe_load(example.read_text())
    config["out_dir"] = str(tmp_path / "out")
    assert_lands_on_the_config(tmp_path, config, start, growth, out)


def test_the_quickstart_is_told_plainly_that_nothing_fits(capsys):
    out, _, growth = suggested(capsys, ["--config", str(ROOT / "examples" / "quickstart.yaml")])
    assert growth is None and "no measured growth fits this run" in out


def cell(**keys) -> dict:
    cell = {"axis": "depth", "recipe": "paper", "schedule": "wsd", "growth_at": 0.5, "tokens_per_param": 0.1,
            "delta": -0.2, "sd": 0.01, "seeds": 3, "seeds_above": 0, "speedup": 1.7, "speedup_sd": 0.05,
            "where": "a test cell", "params": 200_000, "factors": {"n_layer": 2}}
    return {**cell, **keys}


def _tiny(tmp_path: Path, **train) -> list[str]:
    """A tiny 4-layer run under WSD that grows nothing (``tiny_config``'s model, 40 steps)."""
    config = tiny_config(tmp_path / "cache", train={"max_steps": 40, "lr_schedule": "wsd", **train},
                         growth={"stages": []})
    config["model_config"]["n_layer"] = 4
    return ["--config", str(write_config(tmp_path / "tiny.yaml", config))]


def _map(tmp_path: Path, *cells: dict) -> str:
    path = tmp_path / "cells.json"
    path.write_text(json.dumps({"cells": list(cells)}))
    load_map.cache_clear()
    return str(path)


def test_a_map_file_s_cell_is_suggested_with_its_factors_and_only_under_its_schedule(tmp_path, capsys):
    argv = _tiny(tmp_path)
    assert suggested(capsys, argv)[2] is None  # the package's map has nothing near this tiny run
    cells = _map(tmp_path, cell(), cell(schedule="cosine", speedup=3.0, factors={"n_layer": 4}, growth_at=0.25))
    out, start, growth = suggested(capsys, [*argv, "--map", cells])
    assert start == {"n_layer": 2} and growth == {"recipe": "paper", "stages": [
        {"at_fraction": 0.5, "n_layer": 4, "rewarmup_steps": 9}]}, out
    assert "speed-up at equal loss 1.70x ± 0.05 (3 seeds)" in out and "a test cell" in out
    _, start, cosine = suggested(capsys, [*argv, "--train.lr_schedule", "cosine", "--map", cells])
    assert start == {"n_layer": 1} and cosine["stages"][0]["at_fraction"] == 0.25  # the cosine cell under cosine


@pytest.mark.parametrize("keys, says", [
    ({"tokens_per_param": 0.3}, "growth paid there"),  # 2x apart in token ratio: named as the nearest, no block
    ({"delta": 0.1, "speedup": 0.9, "seeds_above": 3}, "growth cost there"),
    ({"delta": -0.005, "sd": 0.026, "seeds_above": 1, "speedup": 1.01}, "no measurable difference"),  # a tie
    ({"factors": {"n_layer": 8}}, None),  # 8x of 4 layers leaves half a layer: the cell does not fit
])
def test_a_cell_far_away_that_did_not_pay_or_does_not_fit_is_never_suggested(tmp_path, capsys, keys, says):
    """Issue 52: a tie (Δ within its sd of zero, seeds on both sides) or a loss is never "paid" nor suggested; a cell
    whose factors leave less than one of a size does not fit."""
    out, _, growth = suggested(capsys, [*_tiny(tmp_path), "--map", _map(tmp_path, cell(**keys))])
    assert growth is None and out.startswith("no measured growth fits this run"), out
    if says is None:
        assert "a test cell" not in out
    else:
        assert "The nearest cell of this schedule: depth, paper, wsd" in out and f": {says}" in out
        assert says == "growth paid there" or "growth paid there" not in out


@pytest.mark.parametrize("recipe, vetoed", [("paper", True), ("recommended", False)])
def test_a_cell_nearer_the_run_s_size_that_did_not_pay_vetoes_a_saving_of_its_recipe(tmp_path, capsys, recipe,
                                                                                      vetoed):
    """Issue 54: a saving measured on a model 5x smaller than the run is not suggested when a cell of the same category
    and recipe measured at the run's size cost; a cost of another recipe says nothing of it."""
    argv = _tiny(tmp_path)
    _, params = final_model(parse(argv, "plan")[1])
    cells = _map(tmp_path, cell(params=params // 5, where="the smaller model"),
                 cell(params=params, recipe=recipe, delta=0.1, speedup=0.9, seeds_above=3, where="the run's size"))
    out, start, growth = suggested(capsys, [*argv, "--map", cells])
    if vetoed:
        assert growth is None and out.startswith("no measured growth fits this run: growth of this kind paid only on "
                                                 "models farther from its size than one where it did not"), out
        assert "Nearest this run's size: depth, paper, wsd" in out and "the run's size): growth cost there" in out
        assert "Paid farther away: depth/paper/wsd@50%/0.1 1.70x at " in out
    else:
        assert start == {"n_layer": 2} and growth["recipe"] == "paper" and "the smaller model" in out, out


def test_a_multi_stage_cell_is_suggested_as_its_whole_schedule(tmp_path, capsys):
    """Issue 46: the 20+ tokens-per-parameter leader grows 2 -> 4 -> 8 layers at 50% and 75% with G_stack's full copy.
    ``--suggest`` prints both stages (each factor on the sizes before it, its ``depth_init``), each re-warmup short
    enough to end before the next growth; pasted, it is the run's growth and ends at the config's 4 layers."""
    argv = _tiny(tmp_path)
    stages = [{"at_fraction": 0.5, "factors": {"n_layer": 2}, "depth_init": "copy"},
              {"at_fraction": 0.75, "factors": {"n_layer": 2}, "depth_init": "copy"}]
    out, start, growth = suggested(capsys, [*argv, "--map", _map(tmp_path, cell(stages=stages, init="copy",
                                                                                 speedup=1.3))])
    assert start == {"n_layer": 1} and growth == {"recipe": "paper", "stages": [
        {"at_fraction": 0.5, "n_layer": 2, "depth_init": "copy", "rewarmup_steps": 4},
        {"at_fraction": 0.75, "n_layer": 4, "depth_init": "copy", "rewarmup_steps": 4}]}, out
    pasted = paste(yaml.safe_load(Path(argv[1]).read_text()), start, growth)
    _, run, _ = parse(["--config", str(write_config(tmp_path / "pasted.yaml", pasted))], "plan")
    assert [(s.at_step, s.n_layer, s.depth_init) for s in run.stages] == [(20, 2, "copy"), (30, 4, "copy")]


def test_a_copy_depth_cell_is_matched_only_with_copy_runs(tmp_path):
    """The map keys depth cells by ``depth_init`` where it is not ``copy-zero`` (``run_init``), as it keys experts
    cells by ``expert_init``: a ``copy-zero`` run is not told what a ``copy`` schedule measured."""
    from lightning_sparkling.growth.stage import GrowthStage
    from lightning_sparkling.pretrain.advice.measured import MeasuredCell, advise

    cells = [MeasuredCell.from_json(cell(init="copy", tokens_per_param=20.0, delta=-0.08, speedup=1.25))]
    kwargs = dict(total_steps=100, tokens_per_param=20.0, recipe="paper", schedule="wsd", cells=cells)
    copied = advise([GrowthStage(50, n_layer=8, depth_init="copy", recipe="wsd")], **kwargs)
    zeroed = advise([GrowthStage(50, n_layer=8, recipe="wsd")], **kwargs)
    assert copied.cell is cells[0] and copied.init == "copy"
    assert zeroed.cell is None


def test_the_suggested_cell_is_the_one_plan_then_cites(tmp_path, capsys):
    """Two cells of one category: the faster one farther in token ratio, the slower one at the run's ratio. ``plan``
    of a pasted block cites the nearest cell, so ``--suggest`` suggests that one (one match), never a block whose
    evidence ``plan`` would not cite."""
    argv = _tiny(tmp_path)
    _, run, _ = parse(argv, "plan")
    report = plan(run, print_report=False)
    ratio = report["total_tokens"] / report["active_params"][-1]
    fast = cell(tokens_per_param=round(ratio * 1.4, 4), speedup=2.0, where="the fast cell")
    near = cell(tokens_per_param=round(ratio, 4), speedup=1.1, where="the near cell")
    out, _, growth = suggested(capsys, [*argv, "--map", _map(tmp_path, fast, near)])
    assert growth is not None and "the near cell" in out and "the fast cell" not in out, out
