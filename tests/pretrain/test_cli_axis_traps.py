"""Issue 53, "no silent extension", from the command line: each trap a user met adding a growth axis through
``plugins:`` is one ``error:`` line naming the key and the fix, before anything trains (``sparkling plan`` reads
the configuration exactly as ``pretrain`` does), and no traceback; the documented forms work (a bare ``--plugins
NAME``, ``plugins: NAME``). The axes are the guide's example (docs/ARCHITECTURE.md, "Write your own axis") with one
thing broken each."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
import yaml
from _rope_axis_source import ROPE_AXIS

from lightning_sparkling.growth.axes import registered_axes, unregister_axis
from lightning_sparkling.pretrain.cli import parse

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"

_CONFIG_VALUES = '''    def config_values(self, config, stage):  # the growth itself: the grown litgpt.Config's fields
        return {"rope_base": stage.get("rope_base")}
'''
_CHECK_MODEL = ('''            raise GrowthError(f"rope_base={config.rope_base} is the model's already", '''
                '''key="rope_base")''')


def _broken(old: str, new: str) -> str:
    assert ROPE_AXIS.count(old) == 1, old
    return ROPE_AXIS.replace(old, new)


WITHOUT_REPORT = '''
import dataclasses

from lightning_sparkling.growth import register_axis


@dataclasses.dataclass(frozen=True)
class RopeKeys:
    rope_base: int | None = None


class RopeAxis:  # the protocol written by hand, report() forgotten
    name, sizes, structural, symmetry_key, stage_keys = "rope", ("rope_base",), False, "rope", RopeKeys

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


ROPE = register_axis(RopeAxis())
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """Writes an axis module on ``PYTHONPATH`` under a name of its own; whatever registers is unregistered after."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    before = registered_axes()
    names: list[str] = []

    def write(source: str) -> str:
        name = f"trap_axis_{len(names)}"
        (tmp_path / f"{name}.py").write_text(source, encoding="utf-8")
        names.append(name)
        importlib.invalidate_caches()
        return name

    yield write
    for axis in registered_axes():
        if axis not in before:
            unregister_axis(axis)
    for name in names:
        sys.modules.pop(name, None)
    assert registered_axes() == before


def _config(tmp_path: Path, stage: dict, file: str = "run.yaml", **top) -> str:
    raw = yaml.safe_load(QUICKSTART.read_text())
    raw["growth"]["stages"] = [stage]  # no rewarmup_steps: a config-field stage has no re-warmup to fit
    raw.update(top)
    path = tmp_path / file
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def _error_line(capsys, argv: list[str]) -> str:
    """The one ``error:`` line ``sparkling plan`` prints for ``argv`` (exit code 2, nothing else on stderr)."""
    with pytest.raises(SystemExit) as info:
        parse(argv, "plan")
    assert info.value.code == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


ROPE_STAGE = {"at_step": 100, "rope_base": 40000}


@pytest.mark.parametrize("source, stage, expected", [
    (WITHOUT_REPORT, ROPE_STAGE,
     [r"error: plugins: 'trap_axis_0' was found but failed while being imported \(.*trap_axis_0.py, "
      r"line 31\): TypeError: register_axis\(RopeAxis\(\)\): axis 'rope' lacks report of the "
      r"GrowthAxis protocol; subclass lightning_sparkling.growth.BaseAxis"]),
    (_broken("@dataclasses.dataclass(frozen=True)\n", ""), ROPE_STAGE,
     [r"error: plugins: 'trap_axis_0' was found but failed while being imported \(.*trap_axis_0.py, "
      r"line \d+\): TypeError: register_axis\(RopeAxis\(\)\): axis 'rope': stage_keys=RopeKeys is "
      r"not a dataclass"]),
    (_broken(_CONFIG_VALUES, ""), ROPE_STAGE,
     [r"error: growth.stages\[0\].rope_base: GrowthStage\(at_step=100\): the 'rope' axis is active "
      r"\(rope_base=40000\), but its growth changes nothing: its config_values returns no "
      r"litgpt.Config field"]),
    (ROPE_AXIS, {"at_step": 100, "rope_base": -1},
     [r"error: growth.stages\[0\].rope_base: GrowthStage\(rope_base=-1\): must be a positive "
      r"integer \(ValueError from the 'rope' axis' check_stage\)"]),
    (_broken(_CHECK_MODEL, '''            raise TypeError("this model keeps its rope_base")'''),
     {"at_step": 100, "rope_base": 10000},
     [r"error: growth.stages\[0\].rope_base: this model keeps its rope_base \(TypeError from the "
      r"'rope' axis' check_model\)"]),
    ("import missing_dependency_xyz\n" + ROPE_AXIS, ROPE_STAGE,
     [r"error: plugins: 'trap_axis_0' was found but failed while being imported \(.*trap_axis_0.py, "
      r"line 1\): ModuleNotFoundError: No module named 'missing_dependency_xyz'; install "
      r"'missing_dependency_xyz', which it imports, or fix the plug-in$"]),
    (ROPE_AXIS + 'raise RuntimeError("the plug-in breaks")\n', ROPE_STAGE,
     [rf"error: plugins: 'trap_axis_0' was found but failed while being imported \(.*trap_axis_0.py, line "
      rf"{len(ROPE_AXIS.splitlines()) + 1}\): "
      r"RuntimeError: the plug-in breaks; fix the plug-in module \(the error is its own\)$"]),
], ids=["missing-report", "stage-keys-not-a-dataclass", "config-values-forgotten", "check-stage-value-error",
        "check-model-type-error", "missing-dependency", "raises-inside"])
def test_each_trap_is_one_error_line(plugin, tmp_path, capsys, source, stage, expected):
    import re

    name = plugin(source)
    line = _error_line(capsys, ["--config", _config(tmp_path, stage), "--plugins", name])
    for pattern in expected:
        assert re.search(pattern, line), line
    assert "PYTHONPATH" not in line  # the module was found: its own error, not "put it on PYTHONPATH"


def test_a_plugin_that_is_not_found_says_pythonpath(plugin, tmp_path, capsys):
    line = _error_line(capsys, ["--config", _config(tmp_path, ROPE_STAGE), "--plugins", "no_such_axis_module"])
    assert line == ("error: plugins: cannot import 'no_such_axis_module': no module of that name "
                    "(ModuleNotFoundError: No module named 'no_such_axis_module'); put the module on PYTHONPATH "
                    "(or install its package), or fix its name")


def test_an_unknown_stage_key_says_to_load_the_axis_module(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    line = _error_line(capsys, ["--config", _config(tmp_path, ROPE_STAGE)])
    assert line.startswith("error: growth.stages[0].rope_base: unknown key: not a GrowthStage key, nor a key of a "
                           "registered growth axis; a key of your own axis is known once its module is loaded: add "
                           "plugins: [MODULE] to the configuration (or --plugins MODULE"), line
    assert "at_tokens, n_embd" not in line  # the stage keys are not listed (--help lists them)
    line = _error_line(capsys, ["--config", str(QUICKSTART), "--growth.stages.0.rope_base", "40000"])
    assert "growth.stages[0].rope_base: unknown key" in line and "plugins: [MODULE]" in line
    close = _error_line(capsys, ["--config", _config(tmp_path, {"at_step": 100, "n_embdd": 128})])
    assert "unknown key (did you mean 'n_embd'?)" in close


def test_a_bare_plugins_name_and_a_plugins_string_work(plugin, tmp_path, capsys):
    from lightning_sparkling.pretrain.advice.planning import plan

    name = plugin(ROPE_AXIS)
    for argv in (["--config", _config(tmp_path, ROPE_STAGE), "--plugins", name],
                 ["--config", _config(tmp_path, ROPE_STAGE), f"--plugins={name}"],
                 ["--config", _config(tmp_path, ROPE_STAGE, "with_plugins.yaml", plugins=name)],
                 ["--config", _config(tmp_path, ROPE_STAGE), "--plugins", f"[{name}]"]):
        _, run, dumped = parse(argv, "plan")
        (stage,) = run.stages
        assert stage.get("rope_base") == 40000 and run.plans[0].new_config.rope_base == 40000, argv
        assert not run.plans[0].adds_entries and not run.plans[0].rewarms  # no re-warmup: none needed
        assert name in yaml.safe_load(dumped)["plugins"], argv
    report = plan(run)  # sparkling plan: the size, and no recipe, re-warmup or new-entry LR lines it does not have
    printed = capsys.readouterr().out
    assert report["stages"][0]["sizes"] == {"rope_base": [10000, 40000]} and "rope_base 10000 -> 40000" in printed
    assert report["stages"][0]["new_entries"] is False and report["stages"][0]["rewarmup_window"] is None
    assert "no new entries (the growth sets litgpt.Config fields only)" in printed
    assert "new-entry LR" not in printed and "rewarmup ratio" not in printed and "tensors change" not in printed
    assert not any("growth.recipe: auto is" in note for note in run.notes)  # the recipe acts on entries it lacks
