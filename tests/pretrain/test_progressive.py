"""``growth.progressive``: a multi-stage progressive schedule as one config entry, expanded into the ordinary stages
a hand-written ``growth.stages`` gives (so every backend, resume, ``plan`` and the dashboards see plain stages);
refusals name the progressive key (and entry) they are about, before anything starts; a run grows at every entry
and resumes mid-schedule bit for bit; two CPU ranks under FSDP2 grow the same way."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lightning_sparkling.growth.progressive import ProgressiveError, expand_progressive, progressive_stages
from lightning_sparkling.pretrain.cli import main, parse, plan
from test_cli import tiny_config, write_config

DEPTH = {"n_layer": [2, 3, 4], "at_step": [4, 8], "depth_init": "copy-zero", "rewarmup_steps": 2}
"""The tiny config's 2 blocks grown to 3 at step 4 and to 4 at step 8."""


def _argv(tmp_path: Path, **growth) -> list[str]:
    config = tiny_config(tmp_path / "cache", num_threads=1, growth={"stages": [], **growth})
    return ["--config", str(write_config(tmp_path / "tiny.yaml", config))]


# ------------------------------------------------------------------------------------------------------------ expand
def test_a_depth_schedule_expands_into_one_stage_per_growth():
    stages = expand_progressive({"n_layer": [1, 2, 4, 8], "at_fraction": [0.4, 0.6, 0.8], "depth_init": "copy"})
    assert stages == [{"at_fraction": 0.4, "n_layer": 2, "depth_init": "copy"},
                      {"at_fraction": 0.6, "n_layer": 4, "depth_init": "copy"},
                      {"at_fraction": 0.8, "n_layer": 8, "depth_init": "copy"}]


def test_width_x_depth_sets_only_the_sizes_that_change_and_per_growth_lists_go_to_each():
    stages = expand_progressive({"at_step": [10, 20, 30], "n_layer": [2, 4, 8, 8], "n_embd": [64, 64, 64, 128],
                                 "intermediate_size": [128, 128, 256, 512], "rewarmup_steps": [1, 2, 3],
                                 "recipe": "wsd"})
    assert stages == [{"at_step": 10, "n_layer": 4, "rewarmup_steps": 1, "recipe": "wsd"},
                      {"at_step": 20, "n_layer": 8, "intermediate_size": 256, "rewarmup_steps": 2, "recipe": "wsd"},
                      {"at_step": 30, "n_embd": 128, "intermediate_size": 512, "rewarmup_steps": 3,
                       "recipe": "wsd"}]


def test_the_python_api_gives_growth_stages():
    stages = progressive_stages(n_layer=[1, 2, 4], at_fraction=[0.5, 0.75], depth_init="random-zero")
    assert [(s.at_fraction, s.n_layer, s.depth_init) for s in stages] == [(0.5, 2, "random-zero"),
                                                                          (0.75, 4, "random-zero")]
    with pytest.raises(ProgressiveError, match="at_tokens"):
        progressive_stages(n_layer=[1, 2], at_tokens=[100])


def test_the_schedule_resolves_to_the_stages_written_by_hand(tmp_path):
    """The same GrowthStage objects and plan as the equivalent growth.stages: everything downstream is unchanged."""
    _, run, _ = parse(_argv(tmp_path, progressive=DEPTH), "plan")
    by_hand = [{"at_step": 4, "n_layer": 3, "depth_init": "copy-zero", "rewarmup_steps": 2},
               {"at_step": 8, "n_layer": 4, "depth_init": "copy-zero", "rewarmup_steps": 2}]
    _, hand, _ = parse(_argv(tmp_path, stages=by_hand), "plan")
    assert run.stages == hand.stages and len(run.stages) == 2
    assert run.growth.stages == hand.growth.stages
    report, expected = plan(run, print_report=False), plan(hand, print_report=False)
    assert report["flops"] == expected["flops"] and report["flops_saved"] == expected["flops_saved"] > 0
    assert [s["sizes"] for s in report["stages"]] == [{"n_layer": [2, 3]}, {"n_layer": [3, 4]}]


def test_plan_prints_the_schedule_the_stages_and_the_flops_saved(tmp_path, capsys):
    assert main(["plan", *_argv(tmp_path, progressive=DEPTH)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("growth.progressive: n_layer 2 -> 3 -> 4 at steps 4, 8 (33.3%, 66.7% of the run): 2 growths, "
            "expanded into growth.stages[0..1] below") in out
    assert "stage 0 at step 4" in out and "n_layer 2 -> 3" in out
    assert "stage 1 at step 8" in out and "n_layer 3 -> 4" in out
    assert "FLOPs: progressive" in out and "saved" in out


def test_plan_prints_the_depth_scaling_factor_of_each_growth(tmp_path, capsys):
    assert main(["plan", *_argv(tmp_path, progressive={**DEPTH, "n_layer": [2, 4, 8], "depth_scaling": "sqrt"})]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.count("depth_scaling sqrt: every block's output projections x0.7071 (depth-muP's 1/sqrt(n_layer)") == 2


def test_a_command_line_override_sets_one_key_of_the_schedule(tmp_path):
    argv = [*_argv(tmp_path, progressive=DEPTH), "--growth.progressive.n_layer", "[2, 4, 6]",
            "--growth.progressive.n_embd", "[32, 32, 64]"]
    _, run, _ = parse(argv, "plan")
    assert [(s.at_step, s.n_layer, s.n_embd) for s in run.stages] == [(4, 4, None), (8, 6, 64)]
    assert run.stages[1].depth_init == "copy-zero" and run.stages[1].rewarmup_steps == 2  # the file's keys kept


# ------------------------------------------------------------------------------------------------------------ refusals
@pytest.mark.parametrize("edit, line", [
    ({"n_layer": [2, 3]}, "growth.progressive.n_layer: has 2 entries but at_step has 2: a size list holds the "
                          "model's n_layer first, then the n_layer after each growth, so 3 entries"),
    ({"n_layer": [2, 4, 3]}, "growth.progressive.n_layer[2]: 3 is smaller than 4 (n_layer[1]): sizes must not "
                             "shrink"),
    ({"at_step": [8, 4]}, "growth.progressive.at_step[1]: 4 is not after 8 (at_step[0]): the growths must come in "
                          "increasing order"),
    ({"at_step": None, "at_fraction": [0.5, 1.0]}, "growth.progressive.at_fraction[1]: must be a share of the run in "
                                                   "(0, 1), got 1.0"),
    ({"at_step": None, "at_fraction": [0.6, 0.3]}, "growth.progressive.at_fraction[1]: 0.3 is not after 0.6"),
    ({"at_step": None}, "growth.progressive.at_fraction: give exactly one timing list"),
    ({"at_fraction": [0.2, 0.5]}, "growth.progressive.at_step: give exactly one timing list, at_fraction, at_step or "
                                  "at_tokens (one entry per growth, e.g. at_fraction: [0.4, 0.6, 0.8]); got "
                                  "at_fraction, at_step"),
    ({"at_step": 4}, "growth.progressive.at_step: must be a non-empty list"),
    ({"n_layer": [3, 4, 5]}, "growth.progressive.n_layer[0]: is 3, but the model's n_layer is 2: a size list starts "
                             "with the model's size"),
    ({"n_layer": [2, 2, 4]}, "growth.progressive.at_step[0]: growth 0 changes no size"),
    ({"n_layer": 4}, "growth.progressive.n_layer: must be a list"),
    ({"n_layer": None}, "growth.progressive: no size list: give one or more of n_embd"),
    ({"rewarmup_steps": [1, 2, 3]}, "growth.progressive.rewarmup_steps: has 3 entries but at_step has 2"),
    ({"depth_map": [0, 1, 0]}, "growth.progressive.depth_map: names one growth's target"),
    ({"depth_inti": "copy"}, "growth.progressive.depth_inti: unknown key (did you mean 'depth_init'?)"),
    # refused by the expanded stage, named by the schedule's key
    ({"depth_init": "zero"}, "growth.progressive.depth_init: GrowthStage(depth_init='zero'): choose one of"),
    ({"rewarmup_steps": 20}, "growth.progressive.rewarmup_steps: rewarmup_steps=20 does not fit"),
    ({"n_layer": [2, 3, 4], "at_step": [4, 12]}, "growth.progressive.at_step[1]: growth at step 12 is at or past the "
                                                  "end of the run"),
])
def test_bad_schedules_are_refused_on_one_line_naming_the_key(tmp_path, capsys, edit, line):
    block = {key: value for key, value in {**DEPTH, **edit}.items() if value is not None}
    with pytest.raises(SystemExit) as info:
        parse(_argv(tmp_path, progressive=block), "pretrain")
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {line}"), err
    assert "\n" not in err and not (tmp_path / "out").exists()


def test_stages_and_progressive_together_are_refused(tmp_path, capsys):
    with pytest.raises(SystemExit):
        parse(_argv(tmp_path, progressive=DEPTH, stages=[{"at_step": 4, "n_layer": 3}]), "plan")
    assert capsys.readouterr().err.startswith("error: growth.progressive: give growth.stages or growth.progressive, "
                                              "not both")


# ------------------------------------------------------------------------------------------------------------ runs
def _final(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(out / "final" / "lit_model.pth", weights_only=True)


@pytest.mark.filterwarnings("ignore:The dirpath has changed")
def test_a_run_grows_at_every_entry_and_resumes_mid_schedule_bit_for_bit(tmp_path):
    """2 -> 3 -> 4 blocks at steps 4 and 8 of 12; resumed from the checkpoint of step 5 (after the first growth,
    before the second) the run ends where the uninterrupted run ends."""
    argv = [*_argv(tmp_path, progressive=DEPTH), "--train.save_interval", "5", "--rms_monitor", "null"]
    full = tmp_path / "full"
    assert main(["pretrain", *argv, "--out_dir", str(full)]) == 0
    summary = json.loads((full / "summary.json").read_text())
    assert [e["global_step"] for e in summary["growth_events"]] == [4, 8]
    assert summary["final_model_config"]["n_layer"] == 4

    ckpt = full / "checkpoints" / "step-00000005.ckpt"
    assert torch.load(ckpt, weights_only=False)["callbacks"]["GrowthCallback"]["grown"] == 1
    out = tmp_path / "resumed"
    assert main(["pretrain", *argv, "--out_dir", str(out), "--resume", str(ckpt)]) == 0
    resumed = json.loads((out / "summary.json").read_text())
    assert resumed["resumed_from"].endswith("step-00000005.ckpt")
    expected, got = _final(full), _final(out)
    assert expected.keys() == got.keys() and "transformer.h.3.attn.proj.weight" in got
    assert all(torch.equal(expected[k], got[k]) for k in expected), "the resumed run ends elsewhere"


@pytest.mark.slow
def test_fsdp2_two_cpu_ranks_grow_by_the_schedule(tmp_path):
    """``sparkling pretrain --devices 2 --strategy fsdp2`` (gloo) with a depth x width schedule (``depth_scaling:
    sqrt`` on both: the depth growth scales every block's output projections through the sharded round trip, the
    width growth ignores it): both growths at their steps, the final model of the last entry's sizes, a plain
    litgpt state dict."""
    script = Path(sys.executable).parent / "sparkling"
    if not script.exists():
        pytest.skip("the sparkling console script is not installed next to this Python")
    block = {"at_step": [2, 4], "n_layer": [2, 3, 3], "n_embd": [32, 32, 64], "intermediate_size": [64, 64, 128],
             "rewarmup_steps": 1, "depth_scaling": "sqrt"}  # the depth growth scales the kept blocks' projections
    out = tmp_path / "out"
    result = subprocess.run([str(script), "pretrain", *_argv(tmp_path, progressive=block), "--out_dir", str(out),
                             "--devices", "2", "--strategy", "fsdp2", "--train.max_steps", "6",
                             "--train.save_interval", "null", "--rms_monitor", "null", "--eval.interval", "null"],
                            capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert [e["global_step"] for e in summary["growth_events"]] == [2, 4]
    final = summary["final_model_config"]
    assert (final["n_layer"], final["n_embd"], final["intermediate_size"]) == (3, 64, 128)
    import litgpt

    model = litgpt.GPT(litgpt.Config.from_file(out / "final" / "model_config.yaml"))
    model.load_state_dict(torch.load(out / "final" / "lit_model.pth", weights_only=True), strict=True)


def test_sparkling_measure_trains_scratch_without_the_schedule(tmp_path):
    from lightning_sparkling.pretrain.measure.measure_runs import plan_runs

    config = {"train": {"max_steps": 12}, "growth": {"stages": [], "progressive": DEPTH}, "seed": 1}
    runs = plan_runs(config, {"n_layer": 4}, growth_flops=1e9, flops_per_step=1e8, seeds=[1], budgets=[1.0],
                     out=tmp_path)
    kinds = {run.kind: run.config["growth"] for run in runs}
    assert kinds["growth"]["progressive"] == DEPTH
    assert kinds["scratch"]["progressive"] is None and kinds["scratch"]["stages"] == []
