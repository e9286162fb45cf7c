"""Issue 53: a ``GrowthStage`` keeps the keys it was given on every constructor path (keywords, ``at_step`` by
position, ``from_keys``, ``from_recipe``, jsonargparse from a YAML mapping, ``dataclasses.replace``, ``copy``,
pickling, ``GrowthStage(**stage.to_dict())``), so an ``auto`` stage stays auto; and ``extra`` is read-only.
The LightningCLI run itself is ``tests/callbacks/test_lightning_cli.py``."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import pickle
import sys
from typing import Any
from collections.abc import Callable

import pytest
import yaml
from _rope_axis_source import ROPE_AXIS
from jsonargparse import ArgumentParser

from lightning_sparkling import GrowthStage
from lightning_sparkling.growth.axes import unregister_axis
from lightning_sparkling.growth.recipes import PAPER_KEYS, RECIPE_DEFAULT, RECIPE_KEYS, resolve_recipe
from lightning_sparkling.growth.stage import stage_key_fields
from lightning_sparkling.growth.stage_keys import FrozenKeys

COPIES: dict[str, Callable[[GrowthStage], GrowthStage]] = {
    "replace": lambda s: dataclasses.replace(s, at_step=20),
    "deepcopy": copy.deepcopy,
    "copy": copy.copy,
    "pickle": lambda s: pickle.loads(pickle.dumps(s)),
    "to_dict": lambda s: GrowthStage(**s.to_dict()),
    "from_keys(to_dict)": lambda s: GrowthStage.from_keys(**s.to_dict()),
    "to_dict through YAML": lambda s: GrowthStage(**yaml.safe_load(yaml.safe_dump(s.to_dict()))),
}


@pytest.mark.parametrize("how", list(COPIES))
def test_every_copy_keeps_an_auto_stage_auto(how):
    """The issue's example: ``replace`` made all 38 keys given, so the copy was no longer auto."""
    stage = GrowthStage(100, n_embd=128)
    assert stage.unresolved_keys == ("init", "rewarmup_ratio") and stage.given_keys == {"at_step", "n_embd"}
    copied = COPIES[how](stage)
    assert copied.unresolved_keys == ("init", "rewarmup_ratio"), how
    assert copied.given_keys == {"at_step", "n_embd"}, how
    assert (copied.init, copied.rewarmup_ratio) == ("copy-copy", 1.3)  # the paper's until resolved
    resolved = resolve_recipe(copied, "cosine")  # and it still resolves by the run's schedule
    assert (resolved.recipe, resolved.init, resolved.rewarmup_ratio) == ("random-zero-3x", "random-zero", 3.0)


@pytest.mark.parametrize("how", list(COPIES))
def test_every_copy_keeps_a_given_recipe_key_given(how):
    stage = GrowthStage(100, n_embd=128, init="copy-copy", symmetry_target=None)
    assert stage.unresolved_keys == ("rewarmup_ratio",)
    copied = COPIES[how](stage)
    assert copied.unresolved_keys == ("rewarmup_ratio",), how
    assert copied.given_keys == {"at_step", "n_embd", "init", "symmetry_target"}, how
    assert resolve_recipe(copied, "cosine").init == "copy-copy"  # a key it sets wins over the recipe


def test_keywords_position_from_keys_and_from_recipe_record_the_same_keys():
    by_name = GrowthStage(at_step=100, n_embd=128, rewarmup_steps=20)
    by_position = GrowthStage(100, n_embd=128, rewarmup_steps=20)
    flat = GrowthStage.from_keys(100, n_embd=128, rewarmup_steps=20)
    assert by_name == by_position == flat
    assert by_name.given_keys == by_position.given_keys == flat.given_keys == {"at_step", "n_embd", "rewarmup_steps"}
    named = GrowthStage.from_recipe("random-zero", 100, n_embd=128)
    assert (named.init, named.rewarmup_ratio) == ("random-zero", 10.0)
    assert named.given_keys == {"at_step", "n_embd", "recipe"}  # the recipe filled init and rewarmup_ratio
    assert named.to_dict()["_filled"] == {**PAPER_KEYS, "init": "random-zero", "rewarmup_ratio": 10.0}


def test_replace_refills_what_the_recipe_filled_and_keeps_what_it_is_given():
    named = GrowthStage.from_recipe("random-zero", 100, n_embd=128)
    paper = dataclasses.replace(named, recipe="paper")  # the recipe's keys follow the new recipe
    assert (paper.init, paper.rewarmup_ratio, paper.unresolved_keys) == ("copy-copy", 1.3, ())
    assert paper == GrowthStage(100, n_embd=128, recipe="paper")
    pinned = dataclasses.replace(named, init="random-random", recipe="paper")  # a new value is the caller's
    assert (pinned.init, pinned.rewarmup_ratio) == ("random-random", 1.3) and "init" in pinned.given_keys
    depth = dataclasses.replace(GrowthStage.from_recipe("recommended", 100, n_embd=128), n_embd=None, n_layer=4)
    assert depth.symmetry_target is None  # recommended gives a depth-only stage no loop: filled again, not kept
    # RECIPE_DEFAULT leaves a given key to the recipe again
    unpinned = dataclasses.replace(GrowthStage(100, n_embd=128, init="copy-copy"), init=RECIPE_DEFAULT)
    assert unpinned.unresolved_keys == ("init", "rewarmup_ratio")


def test_an_at_fraction_stage_resolved_to_its_step_stays_auto():
    stage = GrowthStage(at_fraction=0.5, n_embd=128).resolved(100)
    assert (stage.at_step, stage.at_fraction, stage.unresolved_keys) == (50, None, ("init", "rewarmup_ratio"))


def test_the_recipe_keys_default_to_one_recipe_default_object():
    assert {f.name for f in dataclasses.fields(GrowthStage) if f.default is RECIPE_DEFAULT} == RECIPE_KEYS
    assert set(PAPER_KEYS) == RECIPE_KEYS
    assert pickle.loads(pickle.dumps(RECIPE_DEFAULT)) is RECIPE_DEFAULT
    assert copy.deepcopy(RECIPE_DEFAULT) is RECIPE_DEFAULT and copy.copy(RECIPE_DEFAULT) is RECIPE_DEFAULT
    shown = inspect.signature(GrowthStage)
    assert str(shown.parameters["init"]) == "init: 'str' = <recipe>" and "_filled" not in shown.parameters
    assert all(GrowthStage(100, n_embd=128).get(key) is not RECIPE_DEFAULT for key in RECIPE_KEYS)


def test_a_recipe_key_no_recipe_fills_holds_the_papers_value():
    """The design card's defaults: what ``recipe='paper'`` grows by, and an ``auto`` stage until it is resolved."""
    paper = {"init": "copy-copy", "rewarmup_ratio": 1.3, "symmetry_target": None, "symmetry_max_boost": 8.0,
             "symmetry_release": "hold"}
    for stage in (GrowthStage(100, n_embd=128, recipe="paper"), GrowthStage(100, n_embd=128)):
        assert {key: getattr(stage, key) for key in RECIPE_KEYS} == paper
    assert {f.name: f.default for f in stage_key_fields() if f.name in RECIPE_KEYS} == paper  # the CLI's defaults


def test_equality_and_hash_are_by_value():
    a, b = GrowthStage(100, n_embd=128), GrowthStage(100, n_embd=128, init="copy-copy")
    assert a == b and hash(a) == hash(b)  # what a growth uses; given_keys tells them apart
    assert a.given_keys != b.given_keys
    assert {a: 1}[copy.deepcopy(a)] == 1


def test_filled_takes_only_recipe_keys():
    with pytest.raises(TypeError, match=r"_filled=\{'n_embd': 128\}\): internal"):
        GrowthStage(100, n_embd=128, _filled={"n_embd": 128})


# ---------------------------------------------------------------------------------------------------- extra
@pytest.fixture
def rope_axis(tmp_path, monkeypatch):
    """The toy ``rope_base`` axis (``tests/_rope_axis_source.py``), registered for the test."""
    (tmp_path / "toy_rope_axis.py").write_text(ROPE_AXIS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("toy_rope_axis", None)
    module = importlib.import_module("toy_rope_axis")
    try:
        yield module
    finally:
        unregister_axis(module.ROPE)
        sys.modules.pop("toy_rope_axis", None)


def test_extra_cannot_be_changed_in_place(rope_axis):
    """The issue: ``stage.extra["rope_base"] = -1`` on a frozen stage skipped every axis check."""
    stage = GrowthStage.from_keys(3, rope_base=20000, recipe="paper")
    assert isinstance(stage.extra, FrozenKeys) and stage.extra == {"rope_base": 20000}
    with pytest.raises(TypeError, match="does not support item assignment"):
        stage.extra["rope_base"] = -1
    with pytest.raises(TypeError, match="does not support item deletion"):
        del stage.extra["rope_base"]
    with pytest.raises(AttributeError):
        stage.extra.update(rope_base=-1)  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="read-only"):
        stage.extra._keys = {"rope_base": -1}  # type: ignore[misc]
    assert stage.get("rope_base") == 20000
    with pytest.raises(ValueError, match=r"rope_base=-1\): must be a positive integer"):
        dataclasses.replace(stage, extra={"rope_base": -1})  # a new stage is checked again


@pytest.mark.parametrize("how", list(COPIES))
def test_extra_copies_compares_and_hashes_as_before(rope_axis, how):
    stage = GrowthStage.from_keys(3, rope_base=20000)
    copied = COPIES[how](stage)
    assert isinstance(copied.extra, FrozenKeys) and copied.extra == {"rope_base": 20000}, how
    again = dataclasses.replace(copied, at_step=3)
    assert again == stage and hash(again) == hash(stage)
    assert dataclasses.asdict(stage)["extra"] == {"rope_base": 20000}
    assert type(stage.to_dict()["extra"]) is dict  # plain data for checkpoints and logs


# ---------------------------------------------------------------------------------------------------- jsonargparse
def _parser() -> ArgumentParser:
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--stages", type=list[GrowthStage])
    return parser


def _built(stages: list[dict[str, Any]]) -> list[GrowthStage]:
    parser = _parser()
    return parser.instantiate_classes(parser.parse_args(["--stages", yaml.safe_dump(stages)])).stages


def test_jsonargparse_builds_stages_from_mappings_with_auto_kept():
    width, depth, given = _built([{"at_step": 10, "n_embd": 64, "intermediate_size": 256, "rewarmup_steps": 5},
                                  {"at_step": 20, "n_layer": 4, "rewarmup_steps": 5},
                                  {"at_step": 30, "n_embd": 128, "init": "copy-copy", "symmetry_target": None}])
    assert width == GrowthStage(10, n_embd=64, intermediate_size=256, rewarmup_steps=5)
    assert (width.recipe, width.unresolved_keys) == ("auto", ("init", "rewarmup_ratio"))
    assert width.given_keys == {"at_step", "n_embd", "intermediate_size", "rewarmup_steps"}
    assert (depth.n_layer, depth.recipe, depth.given_keys) == (4, "auto", {"at_step", "n_layer", "rewarmup_steps"})
    assert given.given_keys == {"at_step", "n_embd", "init", "symmetry_target"}  # a recipe key a mapping sets
    assert given.unresolved_keys == ("rewarmup_ratio",)


def test_jsonargparse_dumps_only_the_recipe_keys_a_stage_sets():
    """A saved config (LightningCLI's config.yaml) run again keeps the stage auto."""
    parser = _parser()
    cfg = parser.parse_args(["--stages", "[{at_step: 10, n_embd: 64, rewarmup_ratio: 2.0}]"])
    (dumped,) = yaml.safe_load(parser.dump(cfg))["stages"]
    assert dumped["rewarmup_ratio"] == 2.0 and not (RECIPE_KEYS - {"rewarmup_ratio"}) & set(dumped)
    assert "_filled" not in dumped
    (again,) = _built([dumped])
    assert again.unresolved_keys == ("init",)


@pytest.mark.parametrize("stage, named", [
    ({"at_step": 10, "n_embdd": 64}, "Key 'n_embdd' is not expected"),  # an unknown key, named
    ({"at_step": 10, "n_embd": 64, "rewarmup_ratio": "high"}, 'Parser key "rewarmup_ratio"'),  # a bad type
    ({"at_step": 10, "n_embd": 64, "init": 3}, 'Parser key "init"'),
])
def test_jsonargparse_refuses_a_bad_key_naming_it(stage, named):
    parser = _parser()
    with pytest.raises(Exception) as caught:
        parser.parse_args(["--stages", yaml.safe_dump([stage])])
    assert named in str(caught.value), str(caught.value)
