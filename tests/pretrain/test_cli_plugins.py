"""Issue 47: the CLI loads a user's growth axis (or backend) named in the configuration's ``plugins:`` key, before
the configuration's stage keys are read: a toy axis module on ``PYTHONPATH`` (``tests/_rope_axis_source.py``, it
grows ``rope_base``) is used by ``sparkling plan``; a module that cannot be imported is one ``error:`` line naming
the key and the fix."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from _rope_axis_source import ROPE_AXIS

from lightning_sparkling.growth.axes import registered_axes, unregister_axis
from lightning_sparkling.pretrain.config.plugins import load_plugins, plugin_names

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"


def _config(tmp_path: Path, **top) -> Path:
    raw = yaml.safe_load(QUICKSTART.read_text())
    raw["growth"]["stages"][0]["rope_base"] = 40000
    raw.update(out_dir=str(tmp_path / "out"), **top)
    path = tmp_path / "rope.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def _sparkling(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**__import__("os").environ, "PYTHONPATH": f"{tmp_path}:{ROOT}"}
    return subprocess.run([sys.executable, "-m", "lightning_sparkling.pretrain.cli", *args], capture_output=True,
                          text=True, timeout=600, cwd=tmp_path, env=env, check=False)


def test_sparkling_plan_uses_an_axis_named_in_plugins(tmp_path):
    (tmp_path / "toy_rope_axis.py").write_text(ROPE_AXIS, encoding="utf-8")
    out = _sparkling(tmp_path, "plan", "--config", str(_config(tmp_path, plugins=["toy_rope_axis"])))
    assert out.returncode == 0, out.stderr
    assert "rope_base" in out.stdout and "40000" in out.stdout, out.stdout[-2000:]
    without = _sparkling(tmp_path, "plan", "--config", str(_config(tmp_path)))  # no plugins: an unknown key
    assert without.returncode == 2 and "growth.stages[0].rope_base: unknown key" in without.stderr, without.stderr


def test_a_plugin_that_cannot_be_imported_is_one_error_line(tmp_path):
    out = _sparkling(tmp_path, "plan", "--config", str(_config(tmp_path, plugins=["no_such_axis_module"])))
    assert out.returncode == 2
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), out.stderr
    assert "plugins: cannot import 'no_such_axis_module': no module of that name (ModuleNotFoundError" in lines[0]
    assert "put the module on PYTHONPATH" in lines[0]


def test_plugin_names_and_load_plugins(tmp_path, monkeypatch):
    config = _config(tmp_path, plugins=["toy_rope_axis"])
    names = plugin_names(["--config", str(config), "--plugins", "[other, toy_rope_axis]"],
                         lambda p: yaml.safe_load(Path(p).read_text()))
    assert names == ["toy_rope_axis", "other"]
    (tmp_path / "toy_rope_axis.py").write_text(ROPE_AXIS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("toy_rope_axis", None)
    try:
        assert load_plugins(["toy_rope_axis"], entry_point_group=None) == ["toy_rope_axis"]
        assert registered_axes()[-1].name == "rope"
    finally:
        unregister_axis(sys.modules.pop("toy_rope_axis").ROPE)
    with pytest.raises(ValueError, match=r"plugins: 3 is not a module name"):
        plugin_names(["--plugins", "[3]"], lambda p: None)
