"""Growth axes as plug-ins (issue 30): the registry and its protocol, an axis added by its module and one
registration, no axis named outside its own module, and what a structural axis moves carried forward (a width
stage's copies and new entries after a dense -> MoE stage)."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from conftest import llama_config, make_gpt

import lightning_sparkling
from lightning_sparkling import GrowthStage, StageError, WidthGrowthCallback, grow_model, plan_growth
from lightning_sparkling.growth.axes import (
    AxisPlan,
    BaseAxis,
    GrowthAxis,
    active_axes,
    describe_changes,
    register_axis,
    registered_axes,
    unregister_axis,
)
from lightning_sparkling.pretrain.advice.measured import classify_category
from lightning_sparkling.pretrain.advice.measured_axes import register_cell_label, unregister_cell_label
from lightning_sparkling.growth.symmetry import copy_specs, symmetry_metrics

PACKAGE = Path(lightning_sparkling.__file__).parent


def test_registry_holds_the_four_axes_with_disjoint_sizes():
    axes = registered_axes()
    assert [a.name for a in axes] == ["width", "heads", "depth", "experts"]
    assert all(isinstance(a, GrowthAxis) for a in axes)
    sizes = [s for a in axes for s in a.sizes]
    assert len(sizes) == len(set(sizes))
    assert {a.name for a in axes if a.structural} == {"depth", "experts"}
    assert [a.name for a in active_axes(GrowthStage(1, n_embd=64, n_head=8, n_layer=8))] == ["width", "heads", "depth"]
    assert [a.name for a in active_axes(GrowthStage(1, n_expert=8))] == ["experts"]


def test_plan_records_each_axis_change_and_keeps_the_old_attributes():
    config = llama_config()
    plan = plan_growth(config, GrowthStage(0, n_embd=2 * config.n_embd, n_head=2 * config.n_head,
                                           n_query_groups=2 * config.n_query_groups, n_layer=2 * config.n_layer))
    assert list(plan.changes) == ["width", "heads", "depth"]
    assert plan.depth is plan.changes["depth"] and plan.heads is plan.changes["heads"]
    assert set(plan.changes["width"]) == {"n_embd"} and plan.depth.new == 2 * config.n_layer
    assert plan.moves_entries  # heads laid out anew, blocks added
    assert not plan_growth(config, GrowthStage(0, n_embd=2 * config.n_embd)).moves_entries


class _Recorder(BaseAxis):
    """A toy axis: grows nothing itself, records every call, names the grown config, describes itself."""

    name = "toy"

    def __init__(self) -> None:
        self.calls: list[str] = []

    def active(self, stage) -> bool:
        return stage.n_embd is not None

    def check_model(self, config, stage) -> None:
        self.calls.append("check_model")

    def config_values(self, config, stage):
        self.calls.append("config_values")
        return {"name": "toyed"}

    def plan(self, ctx):
        self.calls.append("plan")
        assert "transformer.wte.weight" in ctx.tensors  # the channel tensors come first
        return AxisPlan(change=("toy", ctx.config.n_embd, ctx.new_config.n_embd))

    def restructure(self, swap, model, plan, fresh) -> None:
        self.calls.append("restructure")

    def copy_pairs(self, plan):
        return (("transformer.h.0.attn.qkv.weight", "transformer.h.1.attn.qkv.weight"),)

    def describe(self, plan) -> str:
        return f"toy {plan.changes[self.name]}"



def test_an_axis_is_its_module_and_one_registration():
    """Every layer reads a registered axis without naming it: the plan, the grown config, the surgery, the
    symmetry diagnostics and the description; the measured map names its cells by a labeller of its own
    (``pretrain/advice/measured_axes.py``, not the axis)."""
    toy = register_axis(_Recorder())
    register_cell_label("toy", lambda keys, stage, grown: "toy" if "toy" in grown or keys else None, rank=-1)
    try:
        with pytest.raises(ValueError, match="clashes with the registered axis 'toy'"):
            register_axis(_Recorder())
        model = make_gpt(llama_config())
        n = model.config.n_embd
        result = grow_model(model, GrowthStage(0, n_embd=2 * n))
        plan = result.plan
        assert toy.calls[:3] == ["check_model", "config_values", "plan"] and "restructure" in toy.calls
        assert plan.changes["toy"] == ("toy", n, 2 * n) and model.config.name == "toyed"
        assert describe_changes(plan) == {"toy": f"toy ('toy', {n}, {2 * n})"}
        assert "toy" in copy_specs(plan)
        assert classify_category([GrowthStage(0, n_embd=2 * n)]) == "toy"
    finally:
        unregister_axis(toy)
        unregister_cell_label("toy")
    assert classify_category([GrowthStage(0, n_embd=64)]) == "hidden"
    assert "toy" not in plan_growth(llama_config(), GrowthStage(0, n_embd=64)).changes


@dataclasses.dataclass(frozen=True)
class _TwistKeys:
    """The toy axis' stage key: ``twist``, a positive integer recorded by its plan."""

    twist: int | None = None


class _Twist(BaseAxis):
    """A toy axis with a stage key of its own (``twist``): active when the stage sets it, checks it, records it."""

    name = "twist"
    stage_keys = _TwistKeys

    def active(self, stage) -> bool:
        return stage.get("twist") is not None

    def check_stage(self, stage) -> None:
        twist = stage.get("twist")
        if twist is not None and not (isinstance(twist, int) and twist > 0):
            raise StageError(f"GrowthStage(twist={twist!r}): must be a positive integer", key="twist")

    def config_values(self, config, stage):  # a growth that changes nothing is refused: it names the config
        return {"name": f"{config.name}-twist{stage.get('twist')}"}

    def plan(self, ctx):
        return AxisPlan(change=("twist", ctx.stage.get("twist")))


def test_an_axis_with_its_own_stage_key_is_its_module_and_one_registration():
    """Registering an axis adds its ``stage_keys`` to the stage keys: a ``GrowthStage`` holds them in ``extra``
    (``stage.get``, ``GrowthStage.from_keys``), the CLI reads them flat; its check runs at construction;
    unregistering takes the key away. ``GrowthStage`` itself never changes (its fields are the file's)."""
    from lightning_sparkling.growth import register_axis as public_register
    from lightning_sparkling.pretrain.config import schema

    assert public_register is register_axis
    kept = GrowthStage(0, n_embd=64)
    fields_before = dataclasses.fields(GrowthStage)
    with pytest.raises(TypeError, match="twist"):
        GrowthStage(0, n_embd=64, extra={"twist": 3})
    with pytest.raises(TypeError, match="twist"):
        GrowthStage.from_keys(0, n_embd=64, twist=3)
    toy = public_register(_Twist())
    try:
        assert dataclasses.fields(GrowthStage) == fields_before  # the class is the file's, registered or not
        stage = GrowthStage.from_keys(0, n_embd=2 * llama_config().n_embd, twist=3)
        assert stage == GrowthStage(0, n_embd=2 * llama_config().n_embd, extra={"twist": 3})
        assert stage.get("twist") == 3 and stage.to_dict()["extra"] == {"twist": 3}
        assert GrowthStage(**stage.to_dict()) == stage and "extra={'twist': 3}" in repr(stage)
        assert GrowthStage.from_keys(0, twist=2).get("twist") == 2  # the toy key alone grows something
        assert kept.get("twist") is None and kept == GrowthStage(0, n_embd=64)  # built before: the default
        assert GrowthStage.from_keys(0, n_embd=64, twist=None) == kept  # a default is not held
        with pytest.raises(StageError, match=r"twist=-1") as caught:
            GrowthStage.from_keys(0, n_embd=64, twist=-1)
        assert caught.value.key == "twist"
        assert "twist" in {f.name for f in dataclasses.fields(schema.StageArgs)}  # the CLI's keys now, too
        assert plan_growth(llama_config(), stage).changes["twist"] == ("twist", 3)
        with pytest.raises(ValueError, match="'twist' is already a GrowthStage key"):
            clash = type("Clash", (_Twist,), {"name": "clash"})()
            register_axis(clash)
    finally:
        unregister_axis(toy)
    assert [a.name for a in registered_axes()] == ["width", "heads", "depth", "experts"]
    with pytest.raises(TypeError, match="twist"):
        GrowthStage.from_keys(0, n_embd=64, twist=3)
    assert "twist" not in {f.name for f in dataclasses.fields(GrowthStage)}
    assert "twist" not in {f.name for f in dataclasses.fields(schema.StageArgs)}
    assert GrowthStage(0, n_embd=64) == kept


def test_the_protocol_declares_what_the_code_calls():
    """Every attribute the package reads on an axis (``axis.<name>``, ...) is a member of :class:`GrowthAxis`; an
    ``ChannelChange`` (a channel dimension) is never called ``axis`` (``change``)."""
    declared = {n for n in vars(GrowthAxis) if not n.startswith("_")} | set(GrowthAxis.__annotations__)
    called = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Attribute) or path.parent.name == "dashboards":  # dashboards: plot axes
                continue
            value = node.value  # `axis.x`, `known.x` (the registry's clash check), `axis_of_size()[size].x`
            if (isinstance(value, ast.Name) and value.id in ("axis", "known")) or (isinstance(value, ast.Subscript) \
                    and isinstance(value.value, ast.Call) and getattr(value.value.func, "id", "") == "axis_of_size"):
                called.add(node.attr)
    assert {"name", "sizes", "target_key", "check_stage", "copies"} <= called
    assert called <= declared, sorted(called - declared)
    assert {"target_key", "stage_keys", "copies"} <= declared
    # the measured map's vocabulary is not an axis' (pretrain/advice/measured_axes.py)
    assert not {"label_rank", "cell_label"} & declared


# modules that orchestrate (plan, surgery, optimizer patch, backends, callbacks, app, dashboards): they read the
# registry, never one axis
_ORCHESTRATION = ["growth/plan.py", "growth/surgery.py", "growth/symmetry.py",
                  "growth/optim_state.py", "growth/compute.py", "callbacks", "parallel", "pretrain", "dashboards"]
_AXIS_MODULES = {"lightning_sparkling.growth.axes.width", "lightning_sparkling.growth.axes.heads",
                 "lightning_sparkling.growth.axes.depth", "lightning_sparkling.growth.axes.experts",
                 "lightning_sparkling.growth.head_layout"}


def _sources() -> list[Path]:
    out = []
    for entry in _ORCHESTRATION:
        path = PACKAGE / entry
        out += sorted(path.rglob("*.py")) if path.is_dir() else [path]  # pretrain/ has sub-packages
    return out


def test_no_orchestration_module_names_an_axis():
    """No import of an axis' module, no ``plan.depth`` / ``plan.heads`` and no ``changes["<axis>"]`` outside the
    axes: the plan keeps ``depth`` / ``heads`` only as properties for callers of the public API."""
    offenders = []
    for path in _sources():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            where = f"{path.relative_to(PACKAGE)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.ImportFrom) and node.module in _AXIS_MODULES:
                offenders.append(f"{where} imports {node.module}")
            elif isinstance(node, ast.Attribute) and node.attr in ("depth", "heads") and (
                    path.name != "plan.py"):
                offenders.append(f"{where} reads .{node.attr}")
            elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
                    and node.value.attr == "changes":
                offenders.append(f"{where} indexes .changes")
    assert not offenders, offenders


def _width_then_upcycle(n_embd: int) -> list[GrowthStage]:
    return [GrowthStage(2, n_embd=2 * n_embd, intermediate_size=128, init="copy-copy", rewarmup_steps=2),
            GrowthStage(4, mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2, rewarmup_steps=2)]


def test_width_copies_and_new_entries_follow_the_mlp_into_expert_zero():
    """Dense -> MoE moves every MLP to ``mlp.experts.0``: an earlier width stage's copies (symmetry) and new-entry
    regions (re-warmup) are carried there (they were left under the MLP's old names, and the symmetry metric of
    the next step failed with a KeyError)."""
    model = make_gpt(llama_config())
    first = grow_model(model, GrowthStage(0, n_embd=2 * model.config.n_embd, intermediate_size=128, init="copy-copy"))
    specs = copy_specs(first.plan)
    second = grow_model(model, GrowthStage(1, mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2))
    assert second.plan.moves_entries
    carried = {axis: spec.carried(second.plan) for axis, spec in specs.items()}
    params = dict(model.named_parameters())
    names = [n for spec in carried.values() for n in spec.names()]
    assert "transformer.h.0.mlp.experts.0.fc_1.weight" in names and set(names) <= set(params)
    metrics = symmetry_metrics(carried, ((n, params[n]) for n in names), "symmetry/s0")
    assert metrics["symmetry/s0/intermediate_size"] == pytest.approx(1.0)  # copies untouched by the upcycle
    region = first.new_entries["transformer.h.0.mlp.fc_1.weight"]
    name, pieces = second.plan.carry_region("transformer.h.0.mlp.fc_1.weight", region)
    assert name == "transformer.h.0.mlp.experts.0.fc_1.weight" and pieces == region


def test_a_fit_grows_width_then_upcycles_and_logs_both_stages_symmetry():
    from _tiny import TinyModule, make_trainer, tiny_config

    module = TinyModule(config=tiny_config(), max_steps=8)
    growth = WidthGrowthCallback(_width_then_upcycle(32), symmetry_every_n_steps=1)
    make_trainer([growth], max_steps=8).fit(module)
    assert module.model.config.n_expert == 4 and module.model.config.n_embd == 64
    last = growth.symmetry.last  # the metrics of the last step, both stages' copies read from the parameters
    assert {"symmetry/stage_0/n_embd", "symmetry/stage_0/intermediate_size", "symmetry/stage_1/experts"} <= set(last)
    assert all(0.0 < value <= 1.0 + 1e-6 for value in last.values())


# ------------------------------------------------------------------------ named targets' per-block fields
_WINDOWED = dict(n_embd=32, n_head=2, head_size=16, n_layer=2, vocab_size=64, block_size=16, intermediate_size=64,
                 mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm", sliding_window_size=4,
                 sliding_window_indices=[1, 0], rope_local_base_freq=100.0, rope_indices=[0, 1])


@pytest.mark.parametrize("target, key, grown", [
    (dict(n_embd=64, sliding_window_indices=[0, 1]), "sliding_window_indices", [1, 0]),
    (dict(n_embd=64, rope_indices=[1, 1]), "rope_indices", [0, 1]),
    (dict(n_layer=4, sliding_window_indices=[1, 1, 0, 0], rope_indices=[0, 1, 0, 1]), "sliding_window_indices",
     [1, 0, 1, 0]),  # stack: block 2 copies 0, block 3 copies 1
])
def test_a_named_target_with_other_per_block_fields_is_refused_not_ignored(target, key, grown):
    """Without a depth growth the grown model keeps the model's lists, with one each new block takes its source's:
    a target that says otherwise is refused (it used to be grown silently, its checkpoint not the target's config)."""
    from litgpt import Config

    from lightning_sparkling import GrowthError
    from lightning_sparkling.growth.plan import stage_config

    config = Config(**_WINDOWED)
    stage = GrowthStage(0, model_config={**_WINDOWED, **target})
    for call in (lambda: plan_growth(config, stage), lambda: stage_config(config, stage)):
        with pytest.raises(GrowthError,
                           match=f"the target's {key}=.*grown model \\({key}={grown!r}".replace("[", "\\[")):
            call()
    agreed = {**_WINDOWED, **target, key: grown}
    assert getattr(plan_growth(config, GrowthStage(0, model_config=agreed)).new_config, key) == grown


def test_experts_with_widths_is_a_cell_of_its_own():
    """No measured cell holds experts grown with widths: the map names it apart instead of advising from the
    width or upcycle cells."""
    upcycle = dict(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2)
    assert classify_category([GrowthStage(0, **upcycle)]) == "upcycle"
    assert classify_category([GrowthStage(0, **upcycle, n_embd=64, intermediate_size=256)]) == "upcycle+width"
    assert classify_category([GrowthStage(0, n_expert=8, n_head=8)]) == "experts+heads"
    assert classify_category([GrowthStage(0, **upcycle, n_layer=8, n_embd=64)]) == "upcycle+depth+width"


def test_architecture_protocol_table_is_the_protocol():
    """docs/ARCHITECTURE.md's table of the axis protocol names every member of :class:`GrowthAxis`, and nothing
    else (issue 41: it listed a removed ``derives``)."""
    import re

    text = (PACKAGE.parent / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    table = text.split("| method / attribute |", 1)[1].split("\n\n", 1)[0]
    documented = {m for row in table.splitlines()[2:] for m in re.findall(r"`(\w+)", row.split("|")[1])}
    declared = {n for n in vars(GrowthAxis) if not n.startswith("_")} | set(GrowthAxis.__annotations__)
    assert documented == declared, (sorted(documented - declared), sorted(declared - documented))
