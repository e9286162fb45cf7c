"""The package layout: the layers import only downwards, no old module path imports, ARCHITECTURE lists the tree."""

from __future__ import annotations

import importlib
import re
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import lightning_sparkling

ROOT = Path(lightning_sparkling.__file__).parent


PRETRAIN_FLAT_BEFORE = ("bpe", "checkpointing", "corpus", "gpt", "litgpt_compat", "litgpt_data", "measure_runs",
                        "measure_stats", "measured", "measured_axes", "measured_size", "model_config", "module",
                        "optim", "planning", "plugins", "resume", "run", "run_callbacks", "schema", "stages",
                        "suggest", "summary", "target", "token_cache", "trainer", "verdict", "windows")
"""The flat modules of ``pretrain/`` before its sub-packages (issue 53) whose names no sub-package took (``data``,
``config`` and ``measure`` are sub-packages now)."""


@pytest.mark.parametrize("old", ["lightning_sparkling.stage",
                                 "lightning_sparkling.cli", "lightning_sparkling.distributed",
                                 "lightning_sparkling.growth.depth", "lightning_sparkling.growth.measured",
                                 *(f"lightning_sparkling.pretrain.{name}" for name in PRETRAIN_FLAT_BEFORE)])
def test_no_old_module_path_imports(old):
    """0.1.0 was never released: the flat paths of before the subpackages are gone, with no import hook."""
    sys.modules.pop(old, None)
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)
    assert not (ROOT / "_deprecated.py").exists()


def test_pretrain_sub_packages_took_the_flat_names_with_nothing_of_before():
    """``pretrain.data``, ``pretrain.config`` and ``pretrain.measure`` are sub-packages; the names their flat modules
    held are in the modules that define them, not re-exported by the package (``pretrain.config.resolve.resolve``)."""
    import lightning_sparkling.pretrain.config as config
    import lightning_sparkling.pretrain.data as data
    import lightning_sparkling.pretrain.measure as measure

    for package, gone in ((config, "ResolvedRun"), (data, "TextCorpusDataModule"), (measure, "main_measure")):
        assert hasattr(package, "__path__") and not hasattr(package, gone), package
        assert not (ROOT / "pretrain" / f"{package.__name__.rsplit('.', 1)[1]}.py").exists()


def _walk(package: str) -> list[str]:
    pkg = importlib.import_module(package)
    return [package] + [m.name for m in pkgutil.walk_packages(pkg.__path__, package + ".")]


def test_growth_layer_imports_no_lightning():
    modules = _walk("lightning_sparkling.growth")
    assert "lightning_sparkling.growth.plan" in modules and "lightning_sparkling.growth.surgery" in modules
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m == 'lightning' or m.startswith(('lightning.', 'pytorch_lightning'))\n"
        "             or m.startswith(('lightning_sparkling.callbacks', 'lightning_sparkling.pretrain',\n"
        "                              'lightning_sparkling.parallel', 'lightning_sparkling.dashboards')))\n"
        "assert not bad, bad\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT.parent,
                         check=False)
    assert out.returncode == 0, out.stderr


def test_package_import_is_light():
    code = "import sys, lightning_sparkling\nassert 'lightning' not in sys.modules\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT.parent,
                         check=False)
    assert out.returncode == 0, out.stderr



def test_callbacks_import_no_strategy_specific_module():
    for path in (ROOT / "callbacks").glob("*.py"):
        text = path.read_text()
        for forbidden in ("parallel.fsdp1", "parallel.fsdp2", "parallel.single", "lightning_sparkling.distributed",
                          "lightning_sparkling.fsdp1", "FSDPStrategy", "ModelParallelStrategy", "DDPStrategy"):
            assert forbidden not in text, f"{path.name} mentions {forbidden}"


MAX_LINES = 600


def test_no_module_of_the_package_or_of_benchmarks_is_over_600_lines():
    """Big modules are split by job (issue 41); the old import paths re-export what moved (benchmarks/reproduce.py
    is the package benchmarks/repro/)."""
    folders = (ROOT, ROOT.parent / "benchmarks")
    long = {str(p): n for folder in folders for p in folder.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_growth_package_docstring_names_every_growth_module():
    """``lightning_sparkling/growth/__init__``'s list of modules is complete (issue 41: it left out six)."""
    import lightning_sparkling.growth as growth

    modules = {p.stem for p in (ROOT / "growth").glob("*.py") if p.stem != "__init__"} | {"axes"}
    missing = sorted(m for m in modules if f"lightning_sparkling.growth.{m}`" not in growth.__doc__)
    assert not missing, f"growth/__init__'s docstring does not name {missing}"


def test_architecture_layout_names_every_module():
    """docs/ARCHITECTURE.md's layout lists every module of the package under its folder."""
    text = (ROOT.parent / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    layout = text.split("## Layout", 1)[1].split("```", 2)[1]
    missing = sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
                     if p.name != "__init__.py" and not re.search(rf"^\s+{re.escape(p.name)}\s", layout, flags=re.M))
    assert not missing, f"docs/ARCHITECTURE.md's layout does not list {missing}"


def test_the_package_description_names_every_growth_axis():
    """pyproject's description said "grow a model's width" after depth, heads and experts came (issue 40)."""
    import tomllib

    root = Path(__file__).resolve().parents[2]
    description = tomllib.loads((root / "pyproject.toml").read_text())["project"]["description"]
    assert all(axis in description for axis in ("width", "heads", "depth", "experts")), description


def _layout_files() -> list[str]:
    """The modules docs/ARCHITECTURE.md's layout lists, as paths under the package (folders by indentation)."""
    text = (ROOT.parent / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")
    layout = text.split("## Layout", 1)[1].split("```", 2)[1]
    stack: list[tuple[int, str]] = []  # (indent, folder)
    files = []
    for line in layout.splitlines():
        match = re.match(r"^( *)([\w]+(?:\.py|/))(?:\s|$)", line)
        if not match or line.startswith("lightning_sparkling/"):
            continue
        indent, name = len(match.group(1)), match.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        if name.endswith("/"):
            stack.append((indent, name))
        else:
            files.append("".join(folder for _, folder in stack) + name)
    return files


def test_architecture_layout_lists_only_modules_that_exist():
    """The other way round: every module the layout lists is in the tree, under the folder it is listed in."""
    files = _layout_files()
    assert "growth/stage.py" in files and "growth/axes/width.py" in files and "pretrain/config/plugins.py" in files
    missing = sorted(f for f in files if not (ROOT / f).is_file())
    assert not missing, f"docs/ARCHITECTURE.md's layout lists modules that are not in the tree: {missing}"
