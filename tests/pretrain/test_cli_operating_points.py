"""The depth operating points from the CLI (issue 32): ``growth.stages[*].at_fraction`` and ``depth_map`` through
``parse`` / ``sparkling plan`` (refusals are one ``error:`` line naming the key), and the line ``plan`` prints on
G_stack's fitted growth-timing rule, checked at a hand-computed example."""

from __future__ import annotations

import json
import math

import pytest

from lightning_sparkling.growth.compute import gstack_growth_tokens
from lightning_sparkling.pretrain.cli import main, parse, plan
from test_cli import TOKENS_PER_STEP, tiny_config, write_config


@pytest.fixture(scope="module")
def config_file(tmp_path_factory):
    return write_config(tmp_path_factory.mktemp("cfg") / "tiny.yaml", tiny_config(tmp_path_factory.mktemp("cache")))


def _stages(*stages: dict) -> list[str]:
    return ["--growth.stages", json.dumps(list(stages))]


def test_at_fraction_becomes_the_step_of_that_fraction_of_the_run(config_file):
    _, run, _ = parse(["--config", str(config_file), *_stages(
        {"at_fraction": 0.25, "n_layer": 8, "rewarmup_steps": 2},
        {"at_fraction": 0.5, "n_embd": 64, "rewarmup_steps": 2})])
    assert [s.at_step for s in run.stages] == [3, 6]  # ceil(0.25 * 12), ceil(0.5 * 12)
    assert all(s.at_fraction is None for s in run.stages)  # resolved: the checkpoint and the resume check see steps
    report = plan(run, print_report=False)
    assert [s["at_step"] for s in report["stages"]] == [3, 6] and report["phase_steps"] == [3, 3, 6]
    assert report["stages"][0]["at_fraction"] == 0.25


@pytest.mark.parametrize("stage, key, says", [
    ({"at_fraction": 1.5, "n_layer": 8, "rewarmup_steps": 2}, "growth.stages[0].at_fraction", "(0, 1)"),
    ({"at_fraction": 0.0, "n_layer": 8, "rewarmup_steps": 2}, "growth.stages[0].at_fraction", "(0, 1)"),
    ({"at_fraction": 0.99, "n_layer": 8, "rewarmup_steps": 2}, "growth.stages[0].at_fraction",
     "growth at step 12 is at or past the end of the run"),
    ({"at_step": 3, "at_fraction": 0.5, "n_layer": 8}, "growth.stages[0].at_step",
     "give exactly one of at_step, at_tokens or at_fraction (got at_step, at_fraction)"),
    ({"depth_map": [0, 1, 2, 0], "rewarmup_steps": 2, "at_step": 3}, "growth.stages[0].depth_map",
     "names old block 2, but the model has 2 blocks"),
    ({"depth_map": [1, 0, 1, 0], "rewarmup_steps": 2, "at_step": 3}, "growth.stages[0].depth_map",
     "position 0 holds old block 1 before old block 0 first appears"),
    ({"depth_map": [0, 1, 0, 1], "n_layer": 6, "rewarmup_steps": 2, "at_step": 3}, "growth.stages[0].n_layer",
     "GrowthStage(depth_map=[0, 1, 0, 1], n_layer=6): the map has 4 entries, one per block of the "
     "grown model; give "
     "n_layer=4 or leave n_layer out"),
])
def test_bad_operating_points_are_one_error_line_naming_the_key(tmp_path, capsys, stage, key, says):
    path = write_config(tmp_path / "bad.yaml", tiny_config(tmp_path / "cache", growth={"stages": [stage]}))
    with pytest.raises(SystemExit) as info:
        main(["pretrain", "--config", str(path), "--out_dir", str(tmp_path / "out")])
    lines = capsys.readouterr().err.strip().splitlines()
    assert info.value.code == 2 and len(lines) == 1 and lines[0].startswith(f"error: {key}"), lines
    assert says in lines[0], lines[0]
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_plan_prints_a_depth_map_4x_growth(config_file, capsys):
    args = ["--config", str(config_file), *_stages({"at_fraction": 0.25, "depth_map": [0, 0, 0, 0, 1, 1, 1, 1],
                                                    "rewarmup_steps": 2})]
    assert main(["plan", *args]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "stage 0 at step 3 (768 tokens, 25.0% of the run): n_layer 2 -> 8" in printed
    assert ("depth: depth_map [0, 0, 0, 0, 1, 1, 1, 1], depth_init copy-zero: new 1<-0, 2<-0, 3<-0, 5<-1, 6<-1, "
            "7<-1; moved 1->4") in printed
    (stage,) = plan(parse(args)[1], print_report=False)["stages"]
    assert stage["depth"]["order"] == "map" and stage["depth"]["source"] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_gstack_rule_matches_the_papers_llama_table():
    """The prts README's table: Llama2-7B (2T tokens) 11.11B, Llama2-13B (2T) 15.84B, Llama2-70B (2T) 42.48B,
    Llama3-8B (15T) 6.58B, with N the target model and C = 6 N D."""
    for n, d, expected in ((7e9, 2e12, 11.11e9), (13e9, 2e12, 15.84e9), (70e9, 2e12, 42.48e9), (8e9, 15e12, 6.58e9)):
        assert gstack_growth_tokens(n, 6 * n * d) == pytest.approx(expected, rel=5e-3), (n, d)
    with pytest.raises(ValueError, match="N > 0 parameters and C > 1 FLOPs"):
        gstack_growth_tokens(0, 1e20)


def test_plan_prints_the_gstack_timing_of_the_run_at_a_hand_computed_example(config_file, capsys):
    """The tiny model grown 2 -> 8 blocks: N = 107,040 parameters after growth; 20,000,000 steps of 256 tokens:
    D = 5.12e9, C = 6 N D = 3.2883e15. log10 d = 0.88 * 5.02955 + 163.27 / 15.51696 - 5.74 = 4.42600 + 10.52204
    - 5.74 = 9.20804, d = 1.6145e9 tokens, step ceil(d / 256) = 6,306,537 (31.5% of the run)."""
    args = ["--config", str(config_file), "--train.max_steps", "20000000",
            *_stages({"at_step": 6, "n_layer": 8, "rewarmup_steps": 2})]
    assert main(["plan", *args]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert ("G_stack's growth timing (the fit of Du et al. 2024, arXiv 2405.15319: log10 d = 0.88 log10 N + 163.27 / "
            "log10 C - 5.74, N = 107,040 parameters of the grown model, C = 6 N D = 3.29e+15 FLOPs): grow "
            "after 31.5% "
            "of this run (step 6,306,537).") in printed
    gstack = plan(parse(args)[1], print_report=False)["gstack"]
    assert gstack["n_params"] == 107_040 and gstack["flops"] == 6 * 107_040 * 20_000_000 * TOKENS_PER_STEP
    assert gstack["tokens"] == pytest.approx(10 ** 9.20804, rel=1e-4) and gstack["step"] == 6_306_537
    assert gstack["step"] == math.ceil(gstack["tokens"] / TOKENS_PER_STEP)


def test_plan_says_when_the_gstack_timing_is_past_the_run(config_file, capsys):
    assert main(["plan", "--config", str(config_file),  # 12 steps: the fit asks for ~1e16 tokens
                 *_stages({"at_step": 6, "n_layer": 4, "rewarmup_steps": 2})]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "x this run's tokens, past its end (12 steps). Fitted on that paper's runs" in printed
    assert "not measured here" in printed and "tokens, step" not in printed


def test_plan_gives_the_gstack_timing_for_depth_stages_only(config_file, capsys):
    """G_stack's rule is about stacking blocks: a width-only run gets no line on it (issue 40)."""
    assert main(["plan", "--config", str(config_file), *_stages({"at_step": 6, "n_embd": 64,
                                                                 "rewarmup_steps": 2})]) == 0
    assert "G_stack" not in capsys.readouterr().out
    args = ["--config", str(config_file), *_stages({"at_step": 6, "n_embd": 64, "rewarmup_steps": 2})]
    assert plan(parse(args)[1], print_report=False)["gstack"] is None
