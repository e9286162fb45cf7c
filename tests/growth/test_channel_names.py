"""Issue 41: a growing dimension of channels is a *channel dimension* (the glossary), never an "axis" (a growth
plug-in). ``AxisChange`` is ``ChannelChange``, ``GrowthPlan.axes`` / ``AxisPlan.axes`` / ``PlanContext.axes`` are
``channels``, ``DimGrowth.axis`` is ``channel``; the old names give the same objects and values, with a
``DeprecationWarning``, until 0.3.0, and the package itself uses the new names only.

The same for the other three things "axis" used to name besides a growth plug-in: the size-key tuples
(``WIDTH_AXES`` -> ``WIDTH_SIZE_KEYS``, ...), the channel constants and ``CopySpec.axis`` (-> ``*_CHANNEL``,
``CopySpec.channel``) and the measured map's categories (``classify_axis`` -> ``classify_category``,
``MeasuredCell.axis`` / ``Advice.axis`` -> ``.category``, whose files keep the key ``"axis"``)."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import json
import re
import warnings
from pathlib import Path

import pytest
import torch
from conftest import llama_config, make_gpt

import lightning_sparkling
from lightning_sparkling import GrowthStage, grow_model, plan_growth
from lightning_sparkling._deprecated import RENAMED_NAMES, REMOVED_IN
from lightning_sparkling.growth.optim_state import grow_state
from lightning_sparkling.growth.surgery import fan_in_shares, grow_tensor
from lightning_sparkling.growth.types import AxisPlan, ChannelChange, DimGrowth, PlanContext

PACKAGE = Path(lightning_sparkling.__file__).parent
DEPRECATED = rf"is deprecated and will be removed in lightning-sparkling {re.escape(REMOVED_IN)}"


def _plan():
    return plan_growth(llama_config(), GrowthStage(0, n_embd=2 * llama_config().n_embd, intermediate_size=256,
                                                   split="uneven"), seed=3)


@pytest.mark.parametrize("module", ["lightning_sparkling.growth.types", "lightning_sparkling.growth.plan",
                                    "lightning_sparkling.growth.surgery", "lightning_sparkling.growth.optim_state"])
def test_axis_change_is_the_old_name_of_channel_change(module):
    with pytest.warns(DeprecationWarning, match=rf"{re.escape(module)}\.AxisChange {DEPRECATED}: use "
                                                r"lightning_sparkling\.growth\.types\.ChannelChange"):
        old = importlib.import_module(module).AxisChange
    assert old is ChannelChange
    with pytest.warns(DeprecationWarning):
        exec(f"from {module} import AxisChange", {})


def test_growth_plan_axes_is_channels_with_a_warning():
    plan = _plan()
    assert set(plan.channels) == {"n_embd", "intermediate_size"}
    assert all(isinstance(c, ChannelChange) for c in plan.channels.values())
    with pytest.warns(DeprecationWarning, match=rf"GrowthPlan\.axes {DEPRECATED}: use .*GrowthPlan\.channels"):
        old = plan.axes
    assert old is plan.channels
    with pytest.raises(AttributeError):
        plan.axes = {}  # read-only
    with pytest.warns(DeprecationWarning, match=r"GrowthPlan\.axes"):  # keyword construction, as before
        rebuilt = type(plan)(stage=plan.stage, stage_index=plan.stage_index, old_config=plan.old_config,
                             new_config=plan.new_config, axes=plan.channels, tensors=plan.tensors,
                             tied_embeddings=plan.tied_embeddings, seed=plan.seed, changes=plan.changes)
    assert rebuilt == plan and rebuilt.channels is plan.channels
    with pytest.raises(TypeError, match="both axes="):
        type(plan)(stage=plan.stage, stage_index=0, old_config=None, new_config=None, axes={}, channels={},
                   tensors={}, tied_embeddings=False, seed=0)


def test_dim_growth_axis_is_channel_with_a_warning():
    new = DimGrowth(1, "n_embd", "fan_in", "copy")
    assert new.channel == "n_embd" and [f.name for f in dataclasses.fields(DimGrowth)][:2] == ["dim", "channel"]
    with pytest.warns(DeprecationWarning, match=rf"DimGrowth\.axis {DEPRECATED}: use .*DimGrowth\.channel"):
        assert new.axis == "n_embd"
    with pytest.warns(DeprecationWarning, match=r"DimGrowth\.axis"):
        old = DimGrowth(dim=1, axis="n_embd", role="fan_in", mode="copy")
    assert old == new and hash(old) == hash(new)
    assert dataclasses.replace(new, mode="zero").channel == "n_embd"  # replace uses the new name
    for spec in _plan().tensors.values():
        for d in spec.dims:
            with pytest.warns(DeprecationWarning):
                assert d.axis == d.channel


def test_axis_plan_and_plan_context_axes_are_channels_with_a_warning():
    change = _plan().channels["n_embd"]
    with pytest.warns(DeprecationWarning, match=r"AxisPlan\.axes"):
        old = AxisPlan(change="toy", axes={"n_embd": change})  # what a plug-in written before may return
    assert old == AxisPlan(change="toy", channels={"n_embd": change})
    with pytest.warns(DeprecationWarning, match=rf"AxisPlan\.axes {DEPRECATED}"):
        assert old.axes is old.channels
    ctx = PlanContext(config=None, new_config=None, stage=None, old_model=None, old_shapes={},
                      channels={"n_embd": change}, tensors={}, seed=0, stage_index=0, tied_embeddings=False)
    with pytest.warns(DeprecationWarning, match=rf"PlanContext\.axes {DEPRECATED}: use .*PlanContext\.channels"):
        assert ctx.axes is ctx.channels


def test_the_functions_taking_the_channels_keep_their_old_keyword():
    plan = _plan()
    name = "transformer.h.0.mlp.proj.weight"
    spec, t = plan.tensors[name], torch.randn(plan.tensors[name].old_shape)
    new = grow_tensor(t, spec, plan.channels, generator=plan.tensor_generator(name))
    with pytest.warns(DeprecationWarning, match=r"grow_tensor\.axes"):
        old = grow_tensor(t, spec, axes=plan.channels, generator=plan.tensor_generator(name))
    assert torch.equal(old, new)
    with pytest.warns(DeprecationWarning, match=r"fan_in_shares\.axes"):
        assert torch.equal(fan_in_shares(spec, axes=plan.channels), fan_in_shares(spec, plan.channels))
    with pytest.warns(DeprecationWarning, match=r"grow_state\.axes"):
        old = grow_state("exp_avg_sq", t.abs(), spec, axes=plan.channels, recipe="paper", optimizer_name="AdamW")
    assert torch.equal(old, grow_state("exp_avg_sq", t.abs(), spec, plan.channels, "paper", "AdamW"))


def test_the_package_grows_without_reading_an_old_name():
    """A growth of every built-in channel kind (widths, heads, depth) reads no deprecated name."""
    config = llama_config()
    stage = GrowthStage(0, n_embd=2 * config.n_embd, intermediate_size=256, n_head=2 * config.n_head,
                        n_query_groups=2 * config.n_query_groups, n_layer=2 * config.n_layer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = grow_model(make_gpt(config), stage)
        result.plan.carry_region("transformer.h.0.attn.qkv.weight", [(slice(0, 1), slice(0, 1))])
        result.plan.alphas(), result.sources, result.plan.moves_entries  # noqa: B018
    assert not [str(w.message) for w in caught if "is deprecated" in str(w.message)]


_OLD_ATTRIBUTES = {"axes": {"dashboards"},  # matplotlib's Figure.axes
                   "axis": set()}
_OLD_NAMES = {old for names in RENAMED_NAMES.values() for old in names}  # WIDTH_AXES, classify_axis, ...


def test_the_package_names_no_channel_dimension_axis():
    """Outside the deprecation shims, no identifier ``AxisChange``, no ``axes=`` / ``axis=`` keyword to a type or
    function of the channel dimensions, and ``.axes`` / ``.axis`` only where they mean something else."""
    renamed = {"DimGrowth", "AxisPlan", "PlanContext", "GrowthPlan", "ChannelChange", "grow_tensor", "grow_state",
               "fan_in_shares", "CopySpec", "MeasuredCell", "Advice", "nearest", "size_trend", "better_recipe"}
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "_deprecated.py":
            continue
        where = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Name) and node.id in {"AxisChange", *_OLD_NAMES} or \
                    isinstance(node, ast.alias) and node.name in {"AxisChange", *_OLD_NAMES}:
                found.append(f"{where}:{node.lineno}: {getattr(node, 'id', None) or node.name}")
            elif isinstance(node, ast.Attribute) and node.attr in _OLD_NAMES:
                found.append(f"{where}:{node.lineno}: .{node.attr}")
            elif isinstance(node, ast.Attribute) and node.attr in _OLD_ATTRIBUTES:
                if not any(part in where.split("/") or where.endswith(part) for part in _OLD_ATTRIBUTES[node.attr]):
                    found.append(f"{where}:{node.lineno}: .{node.attr}")
            elif isinstance(node, ast.Call):
                callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if callee in renamed and {k.arg for k in node.keywords} & {"axes", "axis"}:
                    found.append(f"{where}:{node.lineno}: {callee}(axes=/axis=)")
    assert not found, found
    assert "AxisChange" not in (PACKAGE / "growth" / "types.py").read_text().split("def __getattr__")[0].split(
        '"""', 2)[2]  # only the module docstring and the shim name it


def _old_and_new_names():
    for module, names in RENAMED_NAMES.items():
        for old, new in names.items():
            yield pytest.param(module, old, new, id=f"{module.removeprefix('lightning_sparkling.')}.{old}")


@pytest.mark.parametrize("module, old, new", list(_old_and_new_names()))
def test_each_old_name_warns_and_is_the_new_object(module, old, new):
    """``WIDTH_AXES`` and the others: the new name's object, read as an attribute or imported, with a warning that
    names the new name."""
    mod = importlib.import_module(module)
    assert not hasattr(mod, "__dict__") or old not in vars(mod), f"{module}.{old} is still defined, not deprecated"
    with pytest.warns(DeprecationWarning, match=rf"{re.escape(module)}\.{old} {DEPRECATED}: use "
                                                rf"{re.escape(module)}\.{new} \(the same object\)"):
        value = getattr(mod, old)
    assert value is getattr(mod, new)
    with pytest.warns(DeprecationWarning):
        exec(f"from {module} import {old}", {})


def test_the_renamed_constants_keep_their_values():
    from lightning_sparkling.growth import axes, stage
    from lightning_sparkling.growth.axes import channels, experts
    from lightning_sparkling.growth.depth_maps import DEPTH_SIZE_KEY

    assert stage.WIDTH_SIZE_KEYS == ("n_embd", "intermediate_size", "moe_intermediate_size")
    assert stage.HEAD_SIZE_KEYS == ("n_head", "n_query_groups") and DEPTH_SIZE_KEY == "n_layer"
    assert stage.SIZE_KEYS == axes.SIZE_KEYS == (*stage.WIDTH_SIZE_KEYS, *stage.HEAD_SIZE_KEYS, "n_layer")
    assert (channels.SHARED_EXPERT_CHANNEL, experts.EXPERT_CHANNEL) == ("shared_expert_size", "n_expert")
    assert "SHARED_EXPERT_CHANNEL" in lightning_sparkling.growth.plan.__all__
    assert "SHARED_EXPERT_AXIS" not in lightning_sparkling.growth.plan.__all__


def test_copy_spec_axis_is_channel_with_a_warning():
    from lightning_sparkling.growth.symmetry import CopySpec, copy_specs

    specs = copy_specs(_plan())
    assert set(specs) == {"n_embd", "intermediate_size"}
    for name, spec in specs.items():
        assert spec.channel == name and [f.name for f in dataclasses.fields(CopySpec)][0] == "channel"
        with pytest.warns(DeprecationWarning, match=rf"CopySpec\.axis {DEPRECATED}: use .*CopySpec\.channel"):
            assert spec.axis == name
        with pytest.warns(DeprecationWarning, match=r"CopySpec\.axis"):
            old = CopySpec(axis=name, old=spec.old, src=spec.src, tensors=spec.tensors)
        assert old.channel == name and old.tensors == spec.tensors


def test_map_categories_keep_their_old_names_and_the_files_their_key(tmp_path):
    from lightning_sparkling.pretrain import measured
    from lightning_sparkling.pretrain.measured import (
        Advice,
        MeasuredCell,
        better_recipe,
        classify_category,
        load_map,
        nearest,
        size_trend,
    )

    stages = [GrowthStage(10, n_embd=64, intermediate_size=256)]
    with pytest.warns(DeprecationWarning, match=rf"measured\.classify_axis {DEPRECATED}: use .*classify_category"):
        assert measured.classify_axis(stages) == classify_category(stages) == "joint"
    cells = load_map()
    cell = next(c for c in cells if c.category == "joint")
    assert [f.name for f in dataclasses.fields(MeasuredCell)][0] == "category"
    with pytest.warns(DeprecationWarning, match=rf"MeasuredCell\.axis {DEPRECATED}: use .*MeasuredCell\.category"):
        assert cell.axis == "joint"
    fields = {f.name: getattr(cell, f.name) for f in dataclasses.fields(cell) if f.name != "category"}
    with pytest.warns(DeprecationWarning, match=r"MeasuredCell\.axis"):
        assert MeasuredCell(axis="joint", **fields) == cell
    on_disk = json.loads(measured.MAP_PATH.read_text(encoding="utf-8"))["cells"]
    assert all("axis" in c and "category" not in c for c in on_disk)  # the file keeps its key
    assert [MeasuredCell.from_json(c) for c in on_disk] == list(cells)
    assert cell.to_json()["axis"] == "joint" and "category" not in cell.to_json()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_map.cache_clear()
        assert load_map() == cells  # reading the file uses no deprecated name
    assert not [str(w.message) for w in caught if "is deprecated" in str(w.message)]
    where = dict(recipe=cell.recipe, schedule=cell.schedule, growth_at=cell.growth_at,
                 tokens_per_param=cell.tokens_per_param)
    for func, kw in ((nearest, where), (better_recipe, {**where, "than": None}),
                     (size_trend, {"schedule": cell.schedule})):
        with pytest.warns(DeprecationWarning, match=rf"{func.__name__}\.axis {DEPRECATED}: use .*\.category"):
            old = func(cells, axis="joint", **kw)
        assert old == func(cells, category="joint", **kw)
    advice = measured.advise(stages, total_steps=1000, tokens_per_param=2.8, recipe="recommended")
    assert advice.category == "joint" and "axis" not in advice.message()
    with pytest.warns(DeprecationWarning, match=rf"Advice\.axis {DEPRECATED}: use .*Advice\.category"):
        assert advice.axis == "joint"
    assert not [f.name for f in dataclasses.fields(Advice) if f.name == "axis"]


def test_the_plan_report_lists_widths_apart_from_the_channel_dimensions(tmp_path):
    """``plan()["stages"][k]["widths"]`` holds the widths only (the glossary's word), ``"channels"`` every channel
    dimension a stage grows (a heads growth's ``attn_q`` ...)."""
    from lightning_sparkling.pretrain.planning import _stage_report

    config = llama_config()
    stage = GrowthStage(0, n_embd=2 * config.n_embd, n_head=2 * config.n_head,
                        n_query_groups=2 * config.n_query_groups)
    gp = plan_growth(config, stage, seed=0)

    class Run:
        tokens_per_step, steps = 8, 100

        class train:  # noqa: N801
            tie_embeddings = False

    report = _stage_report(Run, 0, stage, config, gp)
    assert report["widths"] == {"n_embd": [config.n_embd, 2 * config.n_embd]}
    assert set(report["channels"]) == set(gp.channels) > {"n_embd", "attn_q"}
    assert report["channels"]["n_embd"] == report["widths"]["n_embd"]
