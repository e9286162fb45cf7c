"""Issue 53, "no silent extension": the traps a user met adding a growth axis are refused with one clear error, or
gone. ``register_axis`` checks the object against the protocol; an active axis whose growth changes nothing is
refused at plan time; a plain ``ValueError`` / ``TypeError`` of ``check_stage`` / ``check_model`` names the axis'
key; every hook of an active axis runs, record or not; ``grown_config`` takes a registered axis' key;
``plugin_sizes`` leaves out the built-in axes; the error classes take one argument order; the protocol is typed; a
stage that adds no entries has no re-warmup and the callback's summaries name every axis' size. The CLI's side (one
``error:`` line each) is ``tests/pretrain/test_cli_axis_traps.py``; the guide's example trained end to end,
``tests/pretrain/test_axis_guide.py``."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
import sys
import warnings
from pathlib import Path

import pytest
import torch
from _rope_axis_source import ROPE_AXIS
from _tiny import TinyModule, assert_states_equal, make_trainer, tiny_config
from conftest import llama_config, make_gpt

import lightning_sparkling
from lightning_sparkling import GrowthCallback, GrowthError, GrowthStage, StageError, grow_model, plan_growth
from lightning_sparkling.growth.axes import (
    BaseAxis,
    GrowthAxis,
    axis_of_size,
    describe_changes,
    plugin_sizes,
    register_axis,
    registered_axes,
    size_details,
    unregister_axis,
)
from lightning_sparkling.growth.plan import grown_config, size_changes
from lightning_sparkling.growth.symmetry import copy_specs

PACKAGE = Path(lightning_sparkling.__file__).parent


@dataclasses.dataclass(frozen=True)
class _RopeKeys:
    rope_base: int | None = None


def _axis(base: type = BaseAxis, **members) -> object:
    """An instance of a toy rope axis class built on ``base`` with ``members`` (the default: a working one)."""
    body = {"name": "rope", "sizes": ("rope_base",), "stage_keys": _RopeKeys,
            "config_values": lambda self, config, stage: {"rope_base": stage.get("rope_base")}}
    body.update(members)
    return type("RopeAxis", (base,), body)()


@pytest.fixture
def registered():
    """Registers axes for a test and unregisters them after; the registry is checked to be as it was."""
    before = registered_axes()
    added: list = []

    def register(axis):
        added.append(register_axis(axis))
        return added[-1]

    yield register
    for axis in added:
        unregister_axis(axis)
    assert registered_axes() == before


@pytest.fixture
def rope_module(tmp_path, monkeypatch):
    """The guide's example axis (docs/ARCHITECTURE.md), written on ``PYTHONPATH`` and imported."""
    (tmp_path / "guide_rope_axis.py").write_text(ROPE_AXIS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("guide_rope_axis", None)
    module = importlib.import_module("guide_rope_axis")
    try:
        yield module
    finally:
        unregister_axis(module.ROPE)
        sys.modules.pop("guide_rope_axis", None)


# ------------------------------------------------------------------------------------------ 1. register_axis checks
class _WithoutReport:
    """Every member of the protocol but ``report``, and not a ``BaseAxis``: what a user writing the protocol by hand
    forgets."""

    name, sizes, structural, symmetry_key, stage_keys = "rope", ("rope_base",), False, "rope", _RopeKeys

    def active(self, stage): return stage.get("rope_base") is not None
    def copies(self, stage): return False
    def check_stage(self, stage): return None
    def check_model(self, config, stage): return None
    def config_values(self, config, stage): return {"rope_base": stage.get("rope_base")}
    def dimensions(self, config, stage, *, seed, stage_index): return None, {}
    def plan(self, ctx): return None
    def finish_tensors(self, plan, grown): return grown
    def restructure(self, swap, model, plan, fresh): return None
    def carry(self, plan, name): return NotImplemented
    def copy_pairs(self, plan): return ()
    def details(self, plan): return {}
    def describe(self, plan): return None
    def target_key(self, size, stage): return None


def test_register_axis_refuses_a_class_missing_a_protocol_member():
    before = registered_axes()
    with pytest.raises(TypeError, match=r"register_axis\(_WithoutReport\(\)\): axis 'rope' lacks report of the "
                                        r"GrowthAxis protocol; subclass lightning_sparkling.growth.BaseAxis"):
        register_axis(_WithoutReport())
    assert registered_axes() == before
    complete = type("Complete", (_WithoutReport,), {"report": lambda self, plan, stage: {}})()
    axis = register_axis(complete)  # the same class with report: accepted, and it grows
    try:
        assert plan_growth(llama_config(), GrowthStage.from_keys(0, rope_base=40000)).new_config.rope_base == 40000
    finally:
        unregister_axis(axis)


@pytest.mark.parametrize("members, message", [
    ({"stage_keys": dict}, r"axis 'rope': stage_keys=dict is not a dataclass; give the class of the axis' own stage "
                           r"keys decorated with @dataclasses.dataclass\(frozen=True\)"),
    ({"stage_keys": _RopeKeys()}, r"stage_keys=_RopeKeys\(rope_base=None\) is not a dataclass"),  # an instance
    ({"stage_keys": type("Plain", (), {"rope_base": None})}, r"stage_keys=Plain is not a dataclass"),
    ({"name": ""}, r"name='': give the axis a name of its own"),
    ({"sizes": "rope_base"}, r"sizes='rope_base' must be a tuple of litgpt.Config field names, e.g. "
                             r"sizes = \(\"rope_base\",\) \(with the comma"),
    ({"sizes": ("rope_bass",)}, r"sizes \['rope_bass'\] are not fields of litgpt.Config"),
    ({"report": None}, r"axis 'rope': report must be method\(s\) of the GrowthAxis protocol, got NoneType"),
    ({"stage_keys": None}, r"axis 'rope' keeps BaseAxis.active \(active when the stage sets one of its sizes\), but "
                           r"none of its sizes \('rope_base',\) is a stage key, so it would never grow: add a field "
                           r"'rope_base' to its stage_keys dataclass, or override active\(stage\)"),
], ids=["dict", "instance", "plain-class", "no-name", "sizes-a-string", "not-a-config-field", "report-none",
        "never-active"])
def test_register_axis_refuses_an_axis_it_cannot_use_naming_the_member_and_fix(members, message):
    before = registered_axes()
    with pytest.raises(TypeError, match=message):
        register_axis(_axis(**members))
    assert registered_axes() == before


def test_an_axis_that_overrides_active_needs_no_stage_key_of_its_size(registered):
    """``BaseAxis.active`` needs a size that is a stage key; an axis with its own ``active`` does not."""
    axis = registered(_axis(stage_keys=None, active=lambda self, stage: stage.n_embd is not None,
                            config_values=lambda self, config, stage: {"rope_base": 2 * config.rope_base}))
    config = llama_config()
    assert plan_growth(config, GrowthStage(0, n_embd=2 * config.n_embd)).new_config.rope_base == 2 * config.rope_base
    assert axis in registered_axes()


# ------------------------------------------------------------------------------------------ 2. a growth of nothing
def test_an_active_axis_whose_growth_changes_nothing_is_refused_at_plan_time(registered):
    registered(_axis(config_values=BaseAxis.config_values))  # config_values forgotten
    stage = GrowthStage.from_keys(0, rope_base=40000)
    assert stage.sizes == {"rope_base": 40000}  # what the stage says it grows
    with pytest.raises(GrowthError, match=r"GrowthStage\(at_step=0\): the 'rope' axis is active \(rope_base=40000\), "
                                          r"but its growth changes nothing: its config_values returns no "
                                          r"litgpt.Config field, and neither its dimensions nor its plan grows a "
                                          r"tensor; return the fields the growth sets from config_values \(e.g. "
                                          r"\{'rope_base': stage.get\('rope_base'\)\}\)") as caught:
        plan_growth(llama_config(), stage)
    assert caught.value.key == "rope_base"
    model = make_gpt(llama_config())
    with pytest.raises(GrowthError, match="changes nothing"):
        grow_model(model, stage)
    assert model.config.rope_base == llama_config().rope_base


def test_an_axis_that_sets_the_models_own_value_is_refused(registered):
    registered(_axis())
    config = llama_config()
    with pytest.raises(GrowthError, match=rf"its config_values sets rope_base={int(config.rope_base)}, the model's "
                                          r"own value, .*; give rope_base a value other than the model's") as caught:
        plan_growth(config, GrowthStage.from_keys(0, rope_base=int(config.rope_base)))
    assert caught.value.key == "rope_base"


def test_config_values_must_be_litgpt_config_fields(registered):
    registered(_axis(config_values=lambda self, config, stage: {"rope_bass": 1}))
    with pytest.raises(GrowthError, match=r"the 'rope' axis' config_values gave \['rope_bass'\]: it must return a dict "
                                          r"of litgpt.Config fields") as caught:
        plan_growth(llama_config(), GrowthStage.from_keys(0, rope_base=40000))
    assert caught.value.key == "rope_base"


# ------------------------------------------------------------------------------------ 3. plain errors of the checks
def _raises(error: type[Exception], text: str):
    def check(self, *args):
        if args[-1].get("rope_base") == 7:
            raise error(text)
    return check


@pytest.mark.parametrize("error", [ValueError, TypeError])
def test_a_plain_error_of_check_stage_is_a_stage_error_of_the_axis_key(registered, error):
    registered(_axis(check_stage=_raises(error, "rope_base must not be 7")))
    with pytest.raises(StageError, match=rf"rope_base must not be 7 \({error.__name__} from the 'rope' axis' "
                                         r"check_stage\)") as caught:
        GrowthStage.from_keys(0, rope_base=7)
    assert caught.value.key == "rope_base" and isinstance(caught.value.__cause__, error)


@pytest.mark.parametrize("error", [ValueError, TypeError, StageError])
def test_a_plain_error_of_check_model_is_a_growth_error_of_the_axis_key(registered, error):
    registered(_axis(check_model=_raises(error, "this model keeps rope_base")))
    with pytest.raises(GrowthError, match=rf"this model keeps rope_base \({error.__name__} from the 'rope' axis' "
                                          r"check_model\)") as caught:
        plan_growth(llama_config(), GrowthStage.from_keys(0, rope_base=7))
    assert caught.value.key == "rope_base"


def test_the_guides_plain_value_error_names_its_key(rope_module):
    with pytest.raises(StageError, match=r"GrowthStage\(rope_base=-1\): must be a positive integer \(ValueError from "
                                         r"the 'rope' axis' check_stage\)") as caught:
        GrowthStage.from_keys(0, rope_base=-1)
    assert caught.value.key == "rope_base"


# ------------------------------------------------------------------------------------ 7. every hook, record or not
class _Hooks(BaseAxis):
    """A config-field axis that records no change (``dimensions`` / ``plan`` return none) and logs its hooks."""

    name, sizes, stage_keys = "rope", ("rope_base",), _RopeKeys

    def __init__(self) -> None:
        self.calls: set[str] = set()

    def config_values(self, config, stage):
        return {"rope_base": stage.get("rope_base")}

    def finish_tensors(self, plan, grown):
        self.calls.add("finish_tensors")
        return grown

    def restructure(self, swap, model, plan, fresh):
        self.calls.add("restructure")

    def carry(self, plan, name):
        self.calls.add("carry")
        return NotImplemented

    def copy_pairs(self, plan):
        self.calls.add("copy_pairs")
        return ()

    def details(self, plan):
        self.calls.add("details")
        return {"rope_base": "RoPE cache rebuilt"}

    def describe(self, plan):
        self.calls.add("describe")
        return None


def test_every_hook_of_an_active_axis_runs_whether_or_not_it_recorded_a_change(registered):
    hooks = registered(_Hooks())
    config = llama_config()
    model = make_gpt(config)
    result = grow_model(model, GrowthStage.from_keys(0, rope_base=40000, n_embd=2 * config.n_embd, recipe="paper"))
    plan = result.plan
    assert "rope" in plan.active_axes and "rope" not in plan.changes  # active, no record
    assert size_details(plan)["rope_base"] == "RoPE cache rebuilt"
    assert describe_changes(plan) == {}
    copy_specs(plan)
    assert hooks.calls == {"finish_tensors", "restructure", "carry", "copy_pairs", "details", "describe"}
    assert model.config.rope_base == 40000
    hooks.calls.clear()
    grow_model(make_gpt(config), GrowthStage(0, n_embd=2 * config.n_embd, recipe="paper"))
    assert hooks.calls == set()  # inactive: none of its hooks


# ------------------------------------------------------------------------ 4, 10. grown_config, plugin_sizes, errors
def test_grown_config_takes_a_registered_axis_key(rope_module):
    config = llama_config()
    grown = grown_config(config, {"rope_base": 40000})
    assert grown.rope_base == 40000 and grown.n_embd == config.n_embd
    assert grown_config(config, {"rope_base": 40000, "n_embd": 2 * config.n_embd}).n_embd == 2 * config.n_embd


def test_plugin_sizes_are_the_users_axes_and_size_changes_every_axis(rope_module):
    assert plugin_sizes() == {"rope_base": "rope"}  # not the built-in experts' n_expert
    assert {"n_embd", "n_layer", "n_expert", "n_expert_per_token", "rope_base"} <= set(axis_of_size())
    old = llama_config()
    new = grown_config(old, {"rope_base": 40000, "n_layer": 2 * old.n_layer})
    assert size_changes(old, new) == {"n_layer": (old.n_layer, 2 * old.n_layer), "rope_base": (old.rope_base, 40000)}


def test_plugin_sizes_leave_out_the_built_in_axes():
    assert plugin_sizes() == {}
    assert axis_of_size()["n_expert"].name == "experts"


def test_both_error_classes_take_the_message_then_the_key():
    for cls in (GrowthError, StageError):
        params = list(inspect.signature(cls).parameters.values())
        assert params[0].name == "message" and params[0].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD, cls
        assert params[1].name == "key" and params[1].kind is inspect.Parameter.KEYWORD_ONLY, cls
    assert (str(StageError("bad", key="init")), StageError("bad", key="init").key) == ("bad", "init")
    old_order = ("init", "bad")
    with pytest.raises(TypeError):
        StageError(*old_order)  # the old order is a TypeError, not a swapped message


def test_no_call_site_passes_an_error_key_by_position():
    """Every ``GrowthError(...)`` / ``StageError(...)`` / ``ExpertsKeyError(...)`` in the package and the tests passes
    one positional argument, the message (the key by keyword)."""
    offenders = []
    for path in [*PACKAGE.rglob("*.py"), *(PACKAGE.parent / "tests").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and len(node.args) > 1 and getattr(
                    node.func, "id", getattr(node.func, "attr", None)) in ("GrowthError", "StageError",
                                                                           "ExpertsKeyError"):
                offenders.append(f"{path.name}:{node.lineno}")
    assert offenders == []


def test_the_protocol_types_its_parameters():
    """``stage``, ``plan``, ``config``, ``swap`` and ``ctx`` are typed in every method of the protocol and of
    ``BaseAxis``: ``config`` by litgpt's ``Config``, ``swap`` by the ``UndoLog`` the surgery uses, ``ctx`` by
    ``PlanContext``; ``stage`` and ``plan`` by the aliases ``types.py`` documents (``GrowthStage`` and ``GrowthPlan``
    import the axes, and the package has no import cycle, not even for type checking)."""
    from lightning_sparkling.growth import surgery, types

    assert surgery.UndoLog is types.UndoLog
    expected = {"stage": "StageLike", "plan": "PlanLike", "config": "Config", "swap": "UndoLog", "ctx": "PlanContext"}
    seen = set()
    for cls in (GrowthAxis, BaseAxis):
        for name, member in vars(cls).items():
            if name.startswith("_") or not inspect.isfunction(member):
                continue
            for param in inspect.signature(member).parameters.values():
                if param.name in expected:
                    seen.add(param.name)
                    assert param.annotation == expected[param.name], (cls.__name__, name, param.name)
    assert seen == set(expected)
    source = inspect.getsource(types)
    for alias, cls in (("StageLike", "GrowthStage"), ("PlanLike", "GrowthPlan")):
        assert re.search(rf'{alias} = Any\n"""A :class:`~lightning_sparkling\.growth\.\w+\.{cls}`', source), alias


# --------------------------------------------------------------------- 8, 9. the callback: sizes, no re-warmup
def test_the_callback_names_every_axis_size_and_gives_a_stage_without_entries_no_rewarmup(rope_module, tmp_path):
    """A rope_base stage at step 3 of 6 with the default ``rewarmup_steps=250``: no warning that its re-warmup does
    not fit, no ``lr_new/stage_0`` scheduler or tag; ``summaries[0]["sizes"]`` holds ``rope_base``. A width stage
    after it re-warms as before (``lr_new/stage_1``)."""
    config = tiny_config()
    stages = [GrowthStage.from_keys(3, rope_base=40000, recipe="paper"),
              GrowthStage(4, n_embd=2 * config.n_embd, recipe="paper", rewarmup_steps=1)]
    growth = GrowthCallback(stages, min_lr=1e-4)
    trainer = make_trainer([growth], max_steps=6, default_root_dir=tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(TinyModule(config, max_steps=6))
    assert not [w for w in caught if "rewarmup_steps" in str(w.message)]
    assert growth.summaries[0]["sizes"] == {"rope_base": (10000, 40000)}
    assert growth.summaries[0]["new_entries"] is False and growth.summaries[1]["new_entries"] is True
    assert growth.summaries[1]["sizes"]["n_embd"] == (config.n_embd, 2 * config.n_embd)
    assert sorted(growth.lr.schedulers) == [1]
    names = [c.name for c in trainer.lr_scheduler_configs]
    assert "lr_new/stage_1" in names and "lr_new/stage_0" not in names
    assert growth._recipe_line(0, plan_growth(config, growth.stages[0])).startswith(
        "none applies: the stage adds no new entries")


def test_a_run_with_a_stage_without_entries_resumes_bit_for_bit(rope_module, tmp_path):
    """The rope_base stage registers no re-warmup scheduler and the width stage after it does: a resume before, between
    or after them rebuilds the same scheduler layout, and ends where the uninterrupted run ends."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    config = tiny_config()

    def stages():
        return [GrowthStage.from_keys(2, rope_base=40000, recipe="paper"),
                GrowthStage(4, n_embd=2 * config.n_embd, recipe="paper", rewarmup_steps=2)]

    saver = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1)
    whole = TinyModule(config, max_steps=8)
    make_trainer([GrowthCallback(stages(), min_lr=1e-4), saver], max_steps=8, enable_checkpointing=True).fit(whole)
    expected = whole.model.state_dict()
    assert whole.model.config.rope_base == 40000
    for step in (3, 6):  # after the rope_base stage; after both
        resumed = TinyModule(config, max_steps=8)
        growth = GrowthCallback(stages(), min_lr=1e-4)
        trainer = make_trainer([growth], max_steps=8)
        trainer.fit(resumed, ckpt_path=str(next(tmp_path.glob(f"*step={step}.ckpt"))))
        assert [c.name for c in trainer.lr_scheduler_configs if c.name and c.name.startswith("lr_new/")] \
            == ["lr_new/stage_1"]
        assert_states_equal(resumed.model.state_dict(), expected, f"resumed from step {step}")


def test_the_growth_log_names_a_size_without_a_detail_and_leaves_the_experts_to_their_line(registered):
    """``growth_log_lines``: an axis without ``details`` still gets its ``old -> new`` line; a dense -> MoE growth's
    ``moe_intermediate_size`` (the model had none) and the experts' sizes stay on the experts' own line."""
    from lightning_sparkling.growth.axes import growth_log_lines, size_pairs

    registered(_axis())  # no details
    config = llama_config()
    plan = plan_growth(config, GrowthStage.from_keys(0, rope_base=40000))
    assert growth_log_lines(plan, size_pairs(config, plan.new_config)) == [f"  {'rope_base':<22} {10000:>8} -> 40000"]
    upcycle = plan_growth(config, GrowthStage(0, mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2))
    lines = growth_log_lines(upcycle, size_pairs(config, upcycle.new_config))
    assert [line.split()[0] for line in lines] == ["experts", "logits"], lines  # then whether it keeps the function
    assert {"moe_intermediate_size", "n_expert", "n_expert_per_token"} <= set(size_pairs(config, upcycle.new_config))


def test_an_axis_that_plans_tensors_without_a_config_field_is_not_a_no_op(registered):
    """Changing a tensor is a growth too: an axis whose ``plan`` rescales ``lm_head`` (no config field) is not
    refused as one that changes nothing, and grows the model."""
    from lightning_sparkling.growth.types import AxisPlan, TensorPlan

    def halve_head(self, ctx):
        shape = ctx.old_shapes["lm_head.weight"]
        return AxisPlan(change=None, tensors={"lm_head.weight": TensorPlan("lm_head.weight", shape, shape, (),
                                                                           scale=0.5)})

    registered(_axis(config_values=BaseAxis.config_values, plan=halve_head))
    model = make_gpt(llama_config())
    before = model.lm_head.weight.detach().clone()
    grow_model(model, GrowthStage.from_keys(0, rope_base=40000))
    assert model.lm_head.weight.detach().equal(before * 0.5)


def test_an_axis_that_grows_a_channel_dimension_is_not_called_a_no_op(registered):
    """``dimensions`` that grow a channel count as a growth: an axis that widens ``n_embd``'s channels but forgets
    the config field is refused for the shapes it gives, not as one that changes nothing."""
    from lightning_sparkling.growth.types import ChannelChange

    def widen(self, config, stage, *, seed, stage_index):
        n = config.n_embd
        return None, {"n_embd": ChannelChange("n_embd", n, 2 * n, 1.0, src=torch.arange(n))}

    registered(_axis(config_values=BaseAxis.config_values, dimensions=widen))
    with pytest.raises(GrowthError) as caught:
        plan_growth(llama_config(), GrowthStage.from_keys(0, rope_base=40000))
    assert "changes nothing" not in str(caught.value) and "cannot grow tensor" in str(caught.value)
