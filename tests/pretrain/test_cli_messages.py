"""What ``sparkling plan`` / ``pretrain`` say: a refusal is one ``error:`` line (no usage line) naming what is wrong
(a growth target's unknown name, not the first field it leaves at litgpt's default), more CPU processes than cores is
one warning line, and ``plan`` lists only the settings that apply to a stage and names the recipe the run uses."""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_sparkling.pretrain.config import resolve as config_module
from lightning_sparkling.pretrain.cli import main, parse

QUICKSTART = str(Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml")
DEPTH_ONLY = "[{at_step: 100, n_layer: 8, rewarmup_steps: 20}]"


def _error_line(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as info:
        main(["plan", "--config", QUICKSTART, *argv])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert info.value.code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err  # no usage line
    return lines[0]


def test_a_refusal_is_one_error_line_without_usage(capsys):
    assert main(["plan"]) == 2  # no keys at all: what to give
    assert capsys.readouterr().err == ("error: no configuration: give --config FILE.yaml and/or --section.key VALUE "
                                       "keys (`sparkling plan --help` lists every key)\n")
    assert _error_line(capsys, "--train.max_stepz", "3").startswith("error: ")
    assert _error_line(capsys, "--train.max_steps", "0") == "error: train.max_steps: must be an integer >= 1, got 0"


@pytest.mark.parametrize("target, expected", [
    ("{name: not-a-model}", "name='not-a-model' is not a litgpt config name"),
    ("{name: pythia-16m}", "is not a litgpt config name (did you mean 'pythia-160m'?)"),
    ("{name: pythia-160m}", "gives only name='pythia-160m', and a model_config holds the target's fields (its name is "
                            "only a label): use model_name: pythia-160m"),
])
def test_a_growth_target_given_only_a_name_is_refused_about_the_name(capsys, target, expected):
    line = _error_line(capsys, "--growth.stages", f"[{{at_step: 100, model_config: {target}, rewarmup_steps: 20}}]")
    assert line.startswith("error: growth.stages[0].model_config: ") and expected in line, line
    assert "norm_class_name" not in line


def test_more_cpu_processes_than_cores_is_one_warning_line(monkeypatch, capsys):
    monkeypatch.setattr(config_module, "_cpu_cores", lambda: 2)
    argv = ["--config", QUICKSTART, "--accelerator", "cpu", "--train.micro_batch_size", "1"]
    _, run, _ = parse([*argv, "--devices", "3", "--train.global_batch_size", "48"], "plan")
    (note,) = [n for n in run.notes if "CPU processes" in n]
    assert note == ("warning: devices=3 starts 3 CPU processes (gloo), each with 1 thread on 2 CPU cores: they share "
                    "the cores, so each step is slower than with devices=2 or fewer")
    _, run, _ = parse([*argv, "--devices", "2", "--train.global_batch_size", "32"], "plan")
    assert not [n for n in run.notes if "CPU processes" in n]
    assert main(["plan", *argv, "--devices", "3", "--train.global_batch_size", "48"]) == 0
    out = capsys.readouterr().out
    assert "warning: devices=3 starts 3 CPU processes (gloo)" in out and "note: warning" not in out


def test_plan_lists_width_settings_only_for_a_stage_that_grows_width(capsys):
    assert main(["plan", "--config", QUICKSTART, "--growth.stages", DEPTH_ONLY]) == 0
    depth = capsys.readouterr().out
    assert "  optimizer_state asymmetric, rewarmup ratio 1.3 over 20 steps" in depth  # new blocks' state: it applies
    assert "init copy-copy" not in depth and "rms_preserving" not in depth
    assert main(["plan", "--config", QUICKSTART]) == 0
    assert "  init random-zero, rms_preserving True, optimizer_state asymmetric" in capsys.readouterr().out


def test_plan_names_the_recipe_auto_chose(capsys):
    longer = ["--train.max_steps", "3000"]  # 3.1 tokens per parameter: not a demo, so the map's advice is printed
    assert main(["plan", "--config", QUICKSTART, "--growth.stages", DEPTH_ONLY, *longer]) == 0
    out = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    assert "note: growth.recipe: auto is 'random-zero-3x'" in out  # as `sparkling pretrain` prints it
    # random-zero-3x grows a stage that adds only layers as the paper does: one plan, one name (issue 52)
    assert ("(depth, growth.recipe paper, cosine schedule, first growth at 3%, 5.85 training tokens per "
            "final active parameter)") in out
    assert "growth.recipe random-zero-3x" not in out and "here the keys of" not in out
    assert "measured nearest to this run" in out and "depth, paper, cosine" in out  # the map's paper cell found
    # a stage that sets a recipe key itself: the recipe it names, and that its own key makes it the map's paper
    stages = "[{at_step: 100, n_layer: 8, rewarmup_steps: 20, rewarmup_ratio: 5.0, recipe: wsd}]"
    assert main(["plan", "--config", QUICKSTART, "--growth.stages", stages, *longer]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("(depth, growth.recipe wsd, cosine schedule, first growth at 3%, 5.85 training tokens per final active "
            "parameter; the stage sets rewarmup_ratio itself, so the measured map names it paper (its keys are no "
            "named recipe's))") in out
