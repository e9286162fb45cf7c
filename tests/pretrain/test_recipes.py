"""Named recipes (``growth.recipe`` / ``GrowthStage.from_recipe``): the paper's recipe one key away from the
recommended one, stage keys winning over the recipe, and the CLI's default."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

import lightning_sparkling.growth.axes as axes_module
import lightning_sparkling.growth.axes.registry as registry_module
import lightning_sparkling.growth.bias_correction as bias_module
import lightning_sparkling.growth.errors as errors_module
import lightning_sparkling.growth.lr_formulas as formulas_module
import lightning_sparkling.growth.rewarmup_schedule as rewarmup_module
import lightning_sparkling.growth.recipes as recipes_module
import lightning_sparkling.growth.schedule_checks as schedule_checks_module
import lightning_sparkling.growth.schedules as schedules_module
import lightning_sparkling.growth.stage as stage_module
import lightning_sparkling.growth.timing as timing_module
import lightning_sparkling.growth.types as types_module
from lightning_sparkling import GrowthStage
from lightning_sparkling.growth.recipes import same_keys
from lightning_sparkling.growth.stage import RECIPES, apply_recipe
from lightning_sparkling.pretrain.cli import parse

from test_cli import tiny_config, write_config


@pytest.mark.parametrize("module", [stage_module, recipes_module, timing_module, errors_module, types_module,
                                    axes_module, registry_module, schedules_module, formulas_module,
                                    rewarmup_module, schedule_checks_module, bias_module])
def test_docstring_examples_hold(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, result


def test_paper_recipe_is_growth_stage_defaults_and_the_others_add_their_keys():
    assert GrowthStage.from_recipe("paper", 10, n_embd=64) == GrowthStage(10, n_embd=64, recipe="paper")
    auto = GrowthStage(10, n_embd=64)  # resolved by the run's schedule; until then the documented field defaults
    assert (auto.recipe, auto.init, auto.rewarmup_ratio) == ("auto", "copy-copy", 1.3)
    with pytest.raises(ValueError, match=r"GrowthStage\(recipe='sparkle'\): choose auto"):
        GrowthStage(10, n_embd=64, recipe="sparkle")
    rz = GrowthStage.from_recipe("random-zero", 10, n_embd=64)
    assert (rz.init, rz.rewarmup_ratio, rz.optimizer_state, rz.symmetry_target) == \
        ("random-zero", 10.0, "asymmetric", None)
    loop = GrowthStage.from_recipe("recommended", 10, n_embd=64)
    assert (loop.symmetry_target, loop.symmetry_max_boost, loop.symmetry_release) == (0.5, 8.0, "hold")
    assert (loop.init, loop.rewarmup_ratio, loop.optimizer_state) == ("copy-copy", 1.3, "asymmetric")
    # a key the stage sets wins over the recipe
    assert GrowthStage.from_recipe("recommended", 10, n_embd=64, symmetry_target=0.7).symmetry_target == 0.7
    assert GrowthStage.from_recipe("random-zero", 10, n_embd=64, init="copy-copy").init == "copy-copy"
    wsd = GrowthStage.from_recipe("wsd", 10, n_embd=64)
    assert (wsd.init, wsd.rewarmup_ratio, wsd.optimizer_state, wsd.symmetry_target) == \
        ("random-zero", 1.3, "asymmetric", None)
    rz3 = GrowthStage.from_recipe("random-zero-3x", 10, n_embd=64)
    assert (rz3.init, rz3.rewarmup_ratio, rz3.optimizer_state, rz3.symmetry_target) == \
        ("random-zero", 3.0, "asymmetric", None)
    assert set(RECIPES) == {"paper", "recommended", "random-zero", "wsd", "random-zero-3x"}
    # measured on width only: a depth-only stage keeps the paper's keys under it (its init and ratio both)
    assert same_keys(GrowthStage.from_recipe("random-zero-3x", 10, n_layer=8), GrowthStage(10, n_layer=8))
    assert GrowthStage.from_recipe("random-zero-3x", 10, n_layer=8, n_embd=64).rewarmup_ratio == 3.0


@pytest.mark.parametrize("recipe", ["random-zero", "wsd"])
def test_a_recipes_init_pair_goes_to_stages_with_new_channels_not_to_added_blocks_alone(recipe):
    """The init pair acts on new width channels and heads; new blocks follow depth_init, so a depth-only stage does
    not carry an init it never uses (plan and summary.json would print it)."""
    assert "init" not in apply_recipe(recipe, {"n_layer": 8})
    assert apply_recipe(recipe, {"n_layer": 8})["rewarmup_ratio"] == RECIPES[recipe]["rewarmup_ratio"]
    for keys in ({"n_layer": 8, "n_embd": 64}, {"n_head": 8}, {"model_name": "pythia-31m"}):
        assert apply_recipe(recipe, dict(keys))["init"] == "random-zero"
    assert GrowthStage.from_recipe(recipe, 10, n_layer=8).init == "copy-copy"  # GrowthStage's default, unused


@pytest.mark.parametrize("keys", [{"init": "random-random"}, {"init": "zero-random"}, {"rewarmup_ratio": None},
                                  {"rewarmup_scope": "all"}])
def test_recommended_leaves_the_loop_out_where_nothing_is_copied_or_no_new_entry_lr(keys):
    stage = GrowthStage.from_recipe("recommended", 10, n_embd=64, **keys)
    assert stage.symmetry_target is None
    assert apply_recipe("recommended", {"n_embd": 64, **keys}) == {"n_embd": 64, **keys}


@pytest.mark.parametrize("keys,looped", [
    ({"n_layer": 8}, False),                                   # copied blocks alone: measured, the loop costs them
    ({"n_layer": 8, "depth_init": "copy"}, False),
    ({"n_layer": 8, "n_embd": 64}, True),                      # width copies in the stage: the loop is on
    ({"n_head": 8}, True), ({"n_query_groups": 4}, True),     # new heads copy old heads
    ({"model_name": "pythia-31m"}, True), ({"model_config": {"n_embd": 256}}, True),
])
def test_recommended_gives_the_loop_to_width_and_head_copies_not_to_copied_blocks_alone(keys, looped):
    out = apply_recipe("recommended", dict(keys))
    assert (out.get("symmetry_target") == 0.5) is looped
    assert all(out[k] == v for k, v in keys.items())
    assert ({"symmetry_max_boost", "symmetry_release"} <= set(out)) is looped


def test_unknown_recipe_is_refused():
    with pytest.raises(ValueError,
                       match="recipe='sparkling': choose one of paper, recommended, random-zero, wsd, random-zero-3x"):
        apply_recipe("sparkling", {})


def _stages(tmp_path: Path, **growth) -> list[GrowthStage]:
    config = tiny_config(tmp_path / "cache")
    config["growth"] = {**config["growth"], **growth}
    _, run, _ = parse(["--config", str(write_config(tmp_path / "c.yaml", config)), "--out_dir", str(tmp_path / "o")])
    return run.stages


def test_cli_default_is_the_random_zero_3x_recipe_and_paper_is_one_key_away(tmp_path):
    stage = dict(at_step=6, n_embd=64, intermediate_size=128, rewarmup_steps=3)
    (default,) = _stages(tmp_path, stages=[stage])
    assert default == GrowthStage(**stage, init="random-zero", rewarmup_ratio=3.0, recipe="random-zero-3x")
    (paper,) = _stages(tmp_path, stages=[stage], recipe="paper")
    assert paper == GrowthStage(**stage, recipe="paper")
    assert (paper.init, paper.rewarmup_ratio) == ("copy-copy", 1.3)
    (rz,) = _stages(tmp_path, stages=[{**stage, "rewarmup_ratio": 5.0}], recipe="random-zero")
    assert (rz.init, rz.rewarmup_ratio, rz.symmetry_target) == ("random-zero", 5.0, None)
    (wsd,) = _stages(tmp_path, stages=[stage], recipe="wsd")
    assert wsd == GrowthStage(**stage, init="random-zero", recipe="wsd")
    (own,) = _stages(tmp_path, stages=[{**stage, "symmetry_release": "schedule"}], recipe="recommended")
    assert (own.symmetry_target, own.symmetry_release, own.symmetry_max_boost) == (0.5, "schedule", 8.0)


def test_auto_recipe_follows_the_lr_schedule(tmp_path):
    """growth.recipe: auto (the default) is `random-zero-3x` under cosine and `wsd` under WSD, the recipes measured
    best under each; an explicit recipe wins; the note says which one auto chose."""
    stage = dict(at_step=6, n_embd=64, intermediate_size=128, rewarmup_steps=3)
    config = tiny_config(tmp_path / "cache")
    config["growth"] = {**config["growth"], "stages": [stage]}
    config["growth"].pop("recipe", None)
    path = write_config(tmp_path / "c.yaml", config)

    def resolved(*args: str):
        _, run, _ = parse(["--config", str(path), "--out_dir", str(tmp_path / "o"), *args])
        return run

    cosine = resolved()
    assert cosine.stages == [GrowthStage.from_recipe("random-zero-3x", **stage)]
    assert cosine.growth.recipe == "random-zero-3x" and cosine.stages[0].rewarmup_ratio == 3.0
    wsd = resolved("--train.lr_schedule", "wsd")
    assert wsd.stages == [GrowthStage.from_recipe("wsd", **stage)] and wsd.growth.recipe == "wsd"
    assert any("growth.recipe: auto is 'wsd'" in note for note in wsd.notes)
    explicit = resolved("--train.lr_schedule", "wsd", "--growth.recipe", "recommended")
    assert explicit.stages == [GrowthStage.from_recipe("recommended", **stage)]
    assert not any("growth.recipe: auto" in note for note in explicit.notes)
    assert resolved("--growth.recipe", "auto", "--train.lr_schedule", "wsd").stages == wsd.stages


def test_an_unknown_schedule_is_refused_by_its_own_key_not_by_the_recipe(tmp_path, capsys):
    from lightning_sparkling.pretrain.cli import main

    config = tiny_config(tmp_path / "cache")
    path = write_config(tmp_path / "c.yaml", config)
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--config", str(path), "--train.lr_schedule", "linear"])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "error: train.lr_schedule" in err and "growth.recipe" not in err
    with pytest.raises(SystemExit):
        main(["plan", "--config", str(path), "--growth.recipe", "best"])
    assert "error: growth.recipe: unknown recipe 'best': choose auto or one of paper" in capsys.readouterr().err


def _fit_tiny(stages, schedule, accumulate: int = 1):
    """Fit the tests' TinyModule under ``schedule`` with ``GrowthCallback(stages)``; also returns, per growth, the
    largest magnitude of the new ``mlp.proj`` fan-in columns right after it (zero under a zero fan-in side)."""
    import sys

    import lightning as L

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from _tiny import TinyModule, make_trainer

    from lightning_sparkling import GrowthCallback

    class NewColumns(L.Callback):
        def __init__(self) -> None:
            self.after: list[float] = []
            self.width = 64

        def on_train_batch_end(self, trainer, pl_module, *args) -> None:
            proj = pl_module.model.transformer.h[0].mlp.proj.weight
            if proj.shape[1] != self.width:
                self.after.append(proj[:, self.width:].abs().max().item())
                self.width = proj.shape[1]

    module, seen = TinyModule(schedule=schedule, max_steps=12, accumulate=accumulate), NewColumns()
    callback = GrowthCallback(stages, min_lr=1e-4)
    make_trainer([callback, seen], max_steps=12, accumulate=accumulate).fit(module)
    assert module.steps_run == 12 * accumulate
    return callback, seen.after


@pytest.mark.parametrize(("module_schedule", "lr_schedule", "accumulate"), [
    ("warmup_cosine", "cosine", 1), ("cosine", "cosine", 1), ("lambda", "cosine", 1), (None, "cosine", 1),
    ("wsd", "wsd", 1), ("warmup_cosine", "cosine", 2), ("wsd", "wsd", 2)])
def test_the_python_path_and_the_cli_resolve_the_same_recipe(tmp_path, module_schedule, lr_schedule, accumulate):
    """``GrowthCallback(GrowthStage(...))`` grows by the stage ``sparkling pretrain`` builds from the same keys under
    the same schedule: a LambdaLR of WarmupCosineLambda, CosineAnnealingLR, a plain LambdaLR and no scheduler count
    as cosine, a LambdaLR of WSDLambda as wsd. The grown weights show it: both recipes grow random-zero, whose new
    fan-in columns start at zero (the paper's copy-copy would copy them)."""
    stage = dict(at_step=6, n_embd=64, intermediate_size=128, rewarmup_steps=3)
    config = tiny_config(tmp_path / "cache")
    config["growth"] = {**config["growth"], "stages": [stage]}
    path = write_config(tmp_path / "c.yaml", config)
    _, run, _ = parse(["--config", str(path), "--out_dir", str(tmp_path / "o"), "--train.lr_schedule", lr_schedule])
    (cli,) = run.stages
    callback, new_columns = _fit_tiny(GrowthStage(**stage), module_schedule, accumulate)
    assert callback.stages[0] == cli
    assert callback.summaries[0]["recipe"] == cli.recipe == {"cosine": "random-zero-3x", "wsd": "wsd"}[lr_schedule]
    assert new_columns == [0.0]


def test_a_stage_that_names_its_recipe_keeps_it_under_the_callback():
    """``recipe='paper'`` is the paper's under any schedule (copied fan-in columns, not zero); a key a stage sets
    wins over ``auto``'s."""
    stages = [GrowthStage(4, intermediate_size=128, rewarmup_steps=2, recipe="paper"),
              GrowthStage(7, n_embd=64, init="copy-copy", rewarmup_steps=2)]
    callback, new_columns = _fit_tiny(stages, "warmup_cosine")
    assert [s["recipe"] for s in callback.summaries] == ["paper", "random-zero-3x"]
    assert (callback.stages[0].init, callback.stages[0].rewarmup_ratio) == ("copy-copy", 1.3)
    assert (callback.stages[1].init, callback.stages[1].rewarmup_ratio) == ("copy-copy", 3.0)
    assert new_columns[0] > 0


def test_a_stages_own_recipe_key_overrides_growth_recipe(tmp_path):
    stage = dict(at_step=6, n_embd=64, intermediate_size=128, rewarmup_steps=3)
    (own,) = _stages(tmp_path, stages=[{**stage, "recipe": "paper"}])
    assert (own.recipe, own.init, own.rewarmup_ratio) == ("paper", "copy-copy", 1.3)
    (auto,) = _stages(tmp_path, stages=[{**stage, "recipe": "auto"}], recipe="wsd")
    assert (auto.recipe, auto.init, auto.rewarmup_ratio) == ("wsd", "random-zero", 1.3)


def test_a_key_the_auto_recipe_cannot_take_is_refused_before_the_first_step_naming_the_recipe():
    """``split='uneven'`` divides copied fan-in shares; ``auto`` under cosine grows random-zero, which copies nothing:
    refused at fit start (no step taken), the message naming the recipe auto became and the fixes."""
    from lightning_sparkling.growth.errors import GrowthError

    with pytest.raises(GrowthError, match=r"split='uneven'.*recipe is auto, 'random-zero-3x' under the module's "
                                          r"cosine schedule.*recipe='paper'") as info:
        _fit_tiny(GrowthStage(4, intermediate_size=128, rewarmup_steps=2, split="uneven"), "warmup_cosine")
    assert "GrowthCallback" in str(info.value)
    callback, _ = _fit_tiny(GrowthStage(4, intermediate_size=128, rewarmup_steps=2, split="uneven", recipe="paper"),
                            "warmup_cosine")
    assert callback.summaries[0]["recipe"] == "paper"
