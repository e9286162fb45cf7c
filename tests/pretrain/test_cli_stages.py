"""The stage schema of ``sparkling pretrain`` / ``plan``: stage keys read from ``GrowthStage``'s fields, refusals that
carry their key (:class:`~lightning_sparkling.growth.stage.StageError`), each stage planned once, and one stage key
set from the command line (``--growth.stages.K.KEY VALUE``) with the stage's other keys kept."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import pytest

from lightning_sparkling.growth.recipes import PAPER_KEYS
from lightning_sparkling.growth.stage import GrowthStage, StageError
from lightning_sparkling.pretrain.config import schema
from lightning_sparkling.pretrain.cli import main, parse

QUICKSTART = str(Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml")


# ------------------------------------------------------------------------------------------------------------ schema
def test_a_field_added_to_growth_stage_is_a_stage_key_with_no_second_edit(monkeypatch):
    @dataclasses.dataclass(frozen=True)
    class Extended(GrowthStage):
        new_timing: float | None = None
        new_map: tuple[int, ...] = ()

    from lightning_sparkling.growth import stage as stage_module

    monkeypatch.setattr(stage_module, "GrowthStage", Extended)  # what stage_key_fields() reads
    keys = {f.name: f.default for f in dataclasses.fields(schema._stage_args())}
    assert list(keys)[:2] == ["at_step", "at_tokens"] and keys["at_step"] is None
    assert keys["new_timing"] is None and keys["new_map"] == ()
    assert "extra" not in keys  # a registered axis' keys are flat there (tests/pretrain/test_cli_late_axis.py)
    for f in dataclasses.fields(GrowthStage):  # every field, its default (a recipe key: the paper's value)
        if f.name not in ("at_step", "extra", "_filled"):
            assert keys[f.name] == PAPER_KEYS.get(f.name, f.default), f.name
    assert "_filled" not in keys


def test_stage_error_carries_the_key_and_is_a_value_error():
    with pytest.raises(StageError) as info:
        GrowthStage(10, n_embd=128, split_ratio=0.25)
    assert info.value.key == "split" and isinstance(info.value, ValueError)  # the key the CLI always named
    with pytest.raises(StageError) as info:
        GrowthStage(10, n_embd=128, init="copy-foo")  # raised by the init parser, still named
    assert info.value.key == "init"
    with pytest.raises(StageError) as info:
        GrowthStage(10)  # about the stage as a whole
    assert info.value.key is None
    copy = pickle.loads(pickle.dumps(StageError("bad", key="perturb", stage=2)))
    assert (copy.key, str(copy), copy.stage) == ("perturb", "bad", 2)


@pytest.mark.parametrize("argv, line", [
    (["--growth.stages.0.init", "zero-zero"], "error: growth.stages[0].init: GrowthStage(init='zero-zero'): "),
    (["--growth.stages.0.symmetry_target", "0.5", "--growth.stages.0.init", "random-zero",
      "--growth.stages.0.n_layer", "6", "--growth.stages.0.depth_init", "random-zero"],
     "error: growth.stages[0].depth_init: GrowthStage(symmetry_target=0.5): the init pair 'random-zero' and "),
    (["--growth.stages.0.rewarmup_steps", "200"], "error: growth.stages[0].rewarmup_steps: rewarmup_steps=200 does "),
    (["--growth.stages+", "{at_step: 200, n_layer: 6, rewarmup_steps: 10}", "--growth.stages.0.decay_speedup", "0.25"],
     "error: growth.stages[0].decay_speedup: GrowthStage(at_step=120) decay_speedup=0.25: changes the"),
])
def test_a_refused_stage_names_its_key_on_one_line(capsys, argv, line):
    with pytest.raises(SystemExit) as info:
        main(["plan", "--config", QUICKSTART, *argv])
    err = capsys.readouterr().err
    assert info.value.code == 2 and line in err, err
    assert sum(e.startswith("error: ") for e in err.splitlines()) == 1 and "Traceback" not in err


def test_each_stage_is_planned_once_for_plan(monkeypatch, capsys):
    from lightning_sparkling.growth import plan as growth_plan

    calls = []
    original = growth_plan.plan_growth

    def counting(*args, **kwargs):
        calls.append(kwargs.get("stage_index"))
        return original(*args, **kwargs)

    monkeypatch.setattr(growth_plan, "plan_growth", counting)
    second = "{at_step: 200, n_layer: 6, rewarmup_steps: 10}"
    assert main(["plan", "--config", QUICKSTART, "--growth.stages+", second]) == 0
    assert calls == [0, 1]  # resolve() plans each stage; plan's report and advice read those plans
    assert "stage 1 at step 200" in capsys.readouterr().out



@pytest.mark.parametrize("key, named", [("n_head", "growth.stages[0].n_head: "), (None, "growth.stages[0]: ")])
def test_a_plan_time_refusal_names_the_key_the_error_carries_not_one_its_text_mentions(monkeypatch, capsys, key,
                                                                                        named):
    """The key comes from ``GrowthError.key``: a message that mentions the stage's ``n_embd`` (and none of
    ``n_head``) names ``n_head`` when the error says so, and the stage alone when it carries no key."""
    from lightning_sparkling.growth import plan as growth_plan
    from lightning_sparkling.growth.errors import GrowthError

    def refuse(*args, **kwargs):
        raise GrowthError("GrowthStage(n_embd=128): refused for this test", key=key)

    monkeypatch.setattr(growth_plan, "plan_growth", refuse)
    with pytest.raises(SystemExit) as info:
        main(["plan", "--config", QUICKSTART])  # its stage sets n_embd: 128
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.startswith(f"error: {named}GrowthStage(n_embd=128): refused"), err


# ------------------------------------------------------------------------------------------------------------ one key
def test_one_stage_key_from_the_command_line_keeps_the_stages_other_keys(capsys):
    assert main(["plan", "--config", QUICKSTART, "--growth.stages.0.at_step", "50"]) == 0
    out = capsys.readouterr().out
    assert ("stage 0 at step 50 (102,400 tokens, 16.7% of the run): n_embd 64 -> 128, intermediate_size 256 -> 512"
            in out)
    assert "over 20 steps" in out  # the YAML's rewarmup_steps: 20 kept (the default 250 would not fit)
    _, run, dumped = parse(["--config", QUICKSTART, "--growth.stages[0].n_layer=6", "--growth.stages.0.at_step", "60",
                            "--growth.stages.0.rewarmup_ratio", "null"])
    (stage,) = run.stages
    assert (stage.at_step, stage.n_embd, stage.n_layer, stage.rewarmup_steps, stage.rewarmup_ratio) == (
        60, 128, 6, 20, None)
    assert "at_step: 60" in dumped and "n_layer: 6" in dumped  # the run's saved configuration has them


def test_print_config_shows_one_stage_key_set_from_the_command_line(capsys):
    with pytest.raises(SystemExit) as info:
        main(["pretrain", "--config", QUICKSTART, "--growth.stages.0.at_step", "50", "--print_config"])
    assert info.value.code == 0
    printed = capsys.readouterr().out
    assert "- at_step: 50\n    n_embd: 128\n    intermediate_size: 512\n    rewarmup_steps: 20\n" in printed, printed


def test_one_stage_key_applies_over_a_stage_list_given_on_the_command_line():
    _, run, _ = parse(["--config", QUICKSTART, "--growth.stages.0.at_step", "40",
                       "--growth.stages", "[{at_step: 100, n_layer: 6, rewarmup_steps: 10}]"])
    (stage,) = run.stages
    assert (stage.at_step, stage.n_layer, stage.n_embd, stage.rewarmup_steps) == (40, 6, None, 10)


@pytest.mark.parametrize("argv, line", [
    (["--growth.stages.1.at_step", "50"], "error: growth.stages[1].at_step: growth.stages has one stage (index 0): "
                                          "add a stage with --growth.stages+"),
    (["--growth.stages.0.n_embdd", "256"], "error: growth.stages[0].n_embdd: unknown key (did you mean 'n_embd'?)"),
    (["--growth.stages.0.at_step"], "error: growth.stages[0].at_step: expected a value after it"),
])
def test_a_bad_stage_key_from_the_command_line_is_one_error_line(capsys, argv, line):
    with pytest.raises(SystemExit) as info:
        main(["plan", "--config", QUICKSTART, *argv])
    err = capsys.readouterr().err
    assert info.value.code == 2 and line in err, err


def test_resolve_takes_stage_args_instances_with_every_key_given():
    """Python callers of ``resolve`` may give ``GrowthArgs(stages=[StageArgs(...)])``: every key of a ``StageArgs`` is
    set, so the recipe fills none (a dict stage gets the recipe's keys)."""
    from lightning_sparkling.pretrain.config.resolve import resolve

    ns, _, _ = parse(["--config", QUICKSTART])
    ns.growth = schema.GrowthArgs(stages=[schema.StageArgs(at_step=100, n_embd=128, rewarmup_steps=20),
                                          {"at_step": 200, "n_embd": 256, "rewarmup_steps": 20}],
                                  recipe="recommended")
    run = resolve(ns)
    assert [(s.at_step, s.n_embd, s.symmetry_target) for s in run.stages] == [(100, 128, None), (200, 256, 0.5)]


# ------------------------------------------------------------------------------- an experts key (first_k_dense_replace)
UPCYCLE = "[{at_step: 120, mlp_class_name: LLaMAMoE, n_expert: 4, n_expert_per_token: 2, rewarmup_steps: 20, %s}]"


@pytest.mark.parametrize("k, line", [
    ("4", "error: growth.stages[0].first_k_dense_replace: GrowthStage(first_k_dense_replace=4): the model has "
          "n_layer=4 blocks"),  # refused by the model (the plan), still named by its key
    ("-1", "error: growth.stages[0].first_k_dense_replace: GrowthStage(first_k_dense_replace=-1): must be an integer"),
])
def test_plan_shows_first_k_dense_replace_and_refuses_a_bad_one_on_one_line(capsys, k, line):
    assert main(["plan", "--config", QUICKSTART, "--growth.stages", UPCYCLE % "first_k_dense_replace: 1"]) == 0
    out = capsys.readouterr().out
    assert "experts: dense MLP -> 4 experts, top-1 -> top-2, copy, router random, block 0 kept dense" in out, out
    with pytest.raises(SystemExit) as info:
        main(["plan", "--config", QUICKSTART, "--growth.stages", UPCYCLE % f"first_k_dense_replace: {k}"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and line in err, err
    assert sum(e.startswith("error: ") for e in err.splitlines()) == 1 and "Traceback" not in err
