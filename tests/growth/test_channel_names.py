"""Issue 41: a growing dimension of channels is a *channel dimension* (the glossary), never an "axis" (a growth
plug-in): ``ChannelChange``, ``GrowthPlan.channels`` / ``AxisPlan.channels`` / ``PlanContext.channels``,
``DimGrowth.channel``. The same for the other three things "axis" used to name besides a growth plug-in: the size-key
tuples (``WIDTH_SIZE_KEYS``, ...), the channel constants and ``CopySpec.channel`` (``*_CHANNEL``) and the measured
map's categories (``classify_category``, ``MeasuredCell.category`` / ``Advice.category``, whose files keep the key
``"axis"``). The old names are gone (0.1.0 was never released: no shims); the glossary test
(``tests/growth/test_glossary.py``) fails on a reintroduced one.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import warnings
from pathlib import Path

import pytest
from conftest import llama_config, make_gpt

import lightning_sparkling
from lightning_sparkling import GrowthStage, grow_model, plan_growth
from lightning_sparkling.growth.types import AxisPlan, DimGrowth

PACKAGE = Path(lightning_sparkling.__file__).parent


def _plan():
    return plan_growth(llama_config(), GrowthStage(0, n_embd=2 * llama_config().n_embd, intermediate_size=256,
                                                   split="uneven"), seed=3)


def test_the_package_grows_without_reading_an_old_name():
    """A growth of every built-in channel kind (widths, heads, depth) reads no deprecated name."""
    config = llama_config()
    stage = GrowthStage(0, n_embd=2 * config.n_embd, intermediate_size=256, n_head=2 * config.n_head,
                        n_query_groups=2 * config.n_query_groups, n_layer=2 * config.n_layer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = grow_model(make_gpt(config), stage)
        result.plan.carry_region("transformer.h.0.attn.qkv.weight", [(slice(0, 1), slice(0, 1))])
        result.plan.alphas(), result.sources, result.plan.moves_entries
    assert not [str(w.message) for w in caught if "is deprecated" in str(w.message)]


_OLD_ATTRIBUTES = {"axes": {"dashboards"},  # matplotlib's Figure.axes
                   "axis": set()}
_OLD_NAMES = {"WIDTH_AXES", "HEAD_AXES", "SIZE_AXES", "DEPTH_AXIS", "SHARED_EXPERT_AXIS", "EXPERT_AXIS",
              "classify_axis"}


def test_the_package_names_no_channel_dimension_axis():
    """No identifier ``AxisChange``, no ``axes=`` / ``axis=`` keyword to a type or
    function of the channel dimensions, and ``.axes`` / ``.axis`` only where they mean something else."""
    renamed = {"DimGrowth", "AxisPlan", "PlanContext", "GrowthPlan", "ChannelChange", "grow_tensor", "grow_state",
               "fan_in_shares", "CopySpec", "MeasuredCell", "Advice", "nearest", "size_trend", "better_recipe"}
    found = []
    for path in PACKAGE.rglob("*.py"):
        where = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Name) and node.id in {"AxisChange", *_OLD_NAMES}) or \
                    (isinstance(node, ast.alias) and node.name in {"AxisChange", *_OLD_NAMES}):
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


def test_the_old_names_are_gone():
    """No shim answers for an old name: neither a module attribute nor a field, property or keyword."""
    from lightning_sparkling.growth import axes, plan, stage, surgery, types
    from lightning_sparkling.growth.symmetry import CopySpec
    from lightning_sparkling.pretrain.advice import measured
    from lightning_sparkling.pretrain.advice.measured import MeasuredCell

    for module, name in ((types, "AxisChange"), (plan, "AxisChange"), (surgery, "AxisChange"),
                         (axes, "WIDTH_AXES"), (stage, "SIZE_AXES"), (measured, "classify_axis")):
        assert not hasattr(module, name), f"{module.__name__}.{name}"
    assert not hasattr(_plan(), "axes") and not hasattr(DimGrowth(1, "n_embd", "fan_in", "copy"), "axis")
    with pytest.raises(TypeError):
        DimGrowth(dim=1, axis="n_embd", role="fan_in", mode="copy")
    with pytest.raises(TypeError):
        AxisPlan(change="toy", axes={})
    assert "axis" not in {f.name for f in dataclasses.fields(CopySpec)}
    assert "axis" not in {f.name for f in dataclasses.fields(MeasuredCell)}


def test_map_categories_and_the_files_their_key():
    from lightning_sparkling.pretrain.advice import measured
    from lightning_sparkling.pretrain.advice.measured import MeasuredCell, classify_category, load_map

    stages = [GrowthStage(10, n_embd=64, intermediate_size=256)]
    assert classify_category(stages) == "joint"
    cells = load_map()
    cell = next(c for c in cells if c.category == "joint")
    assert dataclasses.fields(MeasuredCell)[0].name == "category"
    on_disk = json.loads(measured.MAP_PATH.read_text(encoding="utf-8"))["cells"]
    assert all("axis" in c and "category" not in c for c in on_disk)  # the file keeps its key
    assert [MeasuredCell.from_json(c) for c in on_disk] == list(cells)
    assert cell.to_json()["axis"] == "joint" and "category" not in cell.to_json()
    advice = measured.advise(stages, total_steps=1000, tokens_per_param=2.8, recipe="recommended")
    assert advice.category == "joint" and "axis" not in advice.message()


def test_the_plan_report_lists_widths_apart_from_the_channel_dimensions():
    """``plan()["stages"][k]["widths"]`` holds the widths only (the glossary's word), ``"channels"`` every channel
    dimension a stage grows (a heads growth's ``attn_q`` ...): read from the report ``sparkling plan`` prints."""
    from lightning_sparkling.pretrain.advice.planning import plan
    from lightning_sparkling.pretrain.cli import parse

    heads = "[{at_step: 120, n_embd: 128, n_head: 8, n_query_groups: 8, rewarmup_steps: 20}]"
    _, run, _ = parse(["--config", str(PACKAGE.parent / "examples" / "quickstart.yaml"), "--growth.stages", heads],
                      "plan")
    gp = plan_growth(run.model_config, run.stages[0], seed=0)
    report = plan(run, print_report=False)["stages"][0]
    assert report["widths"] == {"n_embd": [64, 128]}
    assert set(report["channels"]) == set(gp.channels) > {"n_embd", "attn_q"}
    assert report["channels"]["n_embd"] == report["widths"]["n_embd"]


def test_width_growth_callback_is_growth_callback_without_a_warning():
    """``WidthGrowthCallback`` is the design card's name of the callback (``../shared/DESIGN.md``): the same class,
    from the package, ``callbacks`` and ``callbacks.growth``, and no warning (it is API, not a shim)."""
    import lightning_sparkling
    from lightning_sparkling import callbacks
    from lightning_sparkling.callbacks import growth

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        olds = [module.WidthGrowthCallback for module in (lightning_sparkling, callbacks, growth)]
    assert all(old is growth.GrowthCallback for old in olds)
    assert "WidthGrowthCallback" in lightning_sparkling.__all__ and "GrowthCallback" in lightning_sparkling.__all__
    with pytest.raises(AttributeError):
        lightning_sparkling.NoSuchCallback  # noqa: B018
