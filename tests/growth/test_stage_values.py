"""Issue 47, item 3: a stage prints the values a growth will use, or says which are unresolved. ``recipe='auto'`` is
resolved by the run's schedule (``GrowthCallback.on_fit_start``); until then the keys it would set print as
``<auto>`` and ``plan_growth`` resolves explicitly (a ``schedule``, or a standalone growth by the paper's)."""

from __future__ import annotations

import pytest
from conftest import llama_config

from lightning_sparkling import GrowthStage, plan_growth
from lightning_sparkling.growth.recipes import resolve_recipe


def test_an_auto_stage_prints_its_unresolved_keys():
    stage = GrowthStage(100, n_embd=128, rewarmup_steps=20)
    assert stage.unresolved_keys == ("init", "rewarmup_ratio")
    text = repr(stage)
    assert "init=<auto>" in text and "rewarmup_ratio=<auto>" in text and "init='copy-copy'" not in text
    assert "recipe='auto' (unresolved: init, rewarmup_ratio follow the run's schedule, random-zero-3x under " \
           "cosine, wsd under wsd;" in text
    assert "rewarmup_steps=20" in text and "n_embd=128" in text  # what it set prints as it is


@pytest.mark.parametrize("stage", [GrowthStage(100, n_embd=128, recipe="paper"),
                                   GrowthStage(100, n_embd=128, init="copy-copy", rewarmup_ratio=2.0),
                                   GrowthStage(100, n_layer=8)], ids=["named", "all-set", "depth-only"])
def test_a_resolved_stage_prints_every_value(stage):
    """A named recipe, an ``auto`` stage that set every key a recipe would, and one that no recipe changes (depth
    only) print the values as they are."""
    assert stage.unresolved_keys == ()
    assert "<auto>" not in repr(stage) and "unresolved" not in repr(stage)
    assert f"init={stage.init!r}" in repr(stage)


def test_resolving_prints_the_values_the_schedule_gives():
    stage = resolve_recipe(GrowthStage(100, n_embd=128), "cosine")
    assert "init='random-zero'" in repr(stage) and "rewarmup_ratio=3.0" in repr(stage)
    assert "recipe='random-zero-3x'" in repr(stage)


def test_plan_growth_resolves_an_auto_stage_explicitly():
    config = llama_config()
    stage = GrowthStage(0, n_embd=2 * config.n_embd)
    standalone = plan_growth(config, stage)
    assert standalone.recipe == "paper" and standalone.stage.init == "copy-copy"
    cosine = plan_growth(config, stage, schedule="cosine")
    assert cosine.recipe == "random-zero-3x" and cosine.stage.init == "random-zero"
    assert plan_growth(config, stage, schedule="wsd").recipe == "wsd"
    assert plan_growth(config, GrowthStage(0, n_embd=96, recipe="recommended"), schedule="wsd").recipe == "recommended"


def test_each_axis_checks_its_own_keys(monkeypatch):
    """The depth keys are the depth axis' to check (``DepthAxis.check_stage``), not the stage's; ``sizes`` covers
    every axis, the experts' too."""
    from lightning_sparkling import StageError
    from lightning_sparkling.growth.axes import DEPTH

    with pytest.raises(StageError, match="depth_order") as caught:
        GrowthStage(0, n_layer=4, depth_order="sideways")
    assert caught.value.key == "depth_order"
    monkeypatch.setattr(type(DEPTH), "check_stage", lambda self, stage: None)
    assert GrowthStage(0, n_layer=4, depth_order="sideways").depth_order == "sideways"  # no second check
    assert GrowthStage(0, n_expert=8, n_expert_per_token=2, n_embd=64).sizes == {
        "n_embd": 64, "n_expert": 8, "n_expert_per_token": 2}


@pytest.mark.parametrize("keys, key", [(dict(n_head=0), "n_head"), (dict(n_query_groups=-2), "n_query_groups"),
                                       (dict(n_head=8, n_query_groups=True), "n_query_groups"),
                                       (dict(depth_map=[0, 0, 2]), "depth_map"),
                                       (dict(depth_map=[0, 1, 3, 2]), "depth_map")],
                         ids=["n_head-0", "groups-negative", "groups-bool", "map-skips-1", "map-3-before-2"])
def test_each_axis_refuses_its_bad_keys_at_construction(keys, key):
    """Mutation audit (issue 47): the heads axis' positive-count check and the depth axis' first-occurrence order
    (an old block may appear only once every block before it has) refuse at construction, before any model."""
    from lightning_sparkling import StageError

    with pytest.raises(StageError) as caught:
        GrowthStage(0, **keys)
    assert caught.value.key == key


def test_random_experts_copy_nothing():
    """Mutation audit (issue 47): ``expert_init='random'`` experts start as no copy (``stage.copies`` false, so a
    ``symmetry_target`` has nothing to act on and is refused); copied ones do."""
    from lightning_sparkling import StageError

    assert GrowthStage(0, n_expert=8, recipe="paper").copies
    assert not GrowthStage(0, n_expert=8, expert_init="random", recipe="paper").copies
    with pytest.raises(StageError):
        GrowthStage(0, n_expert=8, expert_init="random", symmetry_target=0.5, recipe="paper")
