"""The modules of ``lightning_sparkling/pretrain/`` import each other without a cycle (issue 24: ``config.py`` and
``litgpt_compat.py`` used to import each other), no module of the whole package is on an import cycle, counting
imports inside functions (issue 41: nine modules of ``growth/`` were), the layers import downwards only, every
subfolder included, and the CLI stays light to import (``sparkling plan`` never imports Lightning)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import lightning_sparkling

PACKAGE = "lightning_sparkling.pretrain"
FOLDER = Path(lightning_sparkling.__file__).parent / "pretrain"


def _modules() -> list[str]:
    return sorted(p.stem for p in FOLDER.glob("*.py") if p.stem != "__init__")


def _imported(name: str, modules: set[str]) -> set[str]:
    """The pretrain modules ``name`` imports anywhere in its source (at the top, inside functions, for type checking
    only)."""
    tree = ast.parse((FOLDER / f"{name}.py").read_text(encoding="utf-8"))
    found: set[str] = set()

    def add(dotted: str) -> None:
        if dotted.startswith(PACKAGE + "."):
            found.add(dotted[len(PACKAGE) + 1:].split(".")[0])

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x / from .x import y
                base = ".".join([PACKAGE, base] if base else [PACKAGE])
            add(base)
            if base == PACKAGE:  # from lightning_sparkling.pretrain import config, litgpt_compat
                found.update(alias.name for alias in node.names if alias.name in modules)
    found.discard(name)
    return found


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` (``[a, b, ..., a]``), or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)) is not None:
            return found
    return None


def test_the_walk_sees_the_imports():
    modules = set(_modules())
    assert {"cli", "config", "litgpt_compat", "errors", "schema"} <= modules
    assert {"config", "planning", "run"} <= _imported("cli", modules)
    assert "errors" in _imported("litgpt_compat", modules)
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_pretrain_modules_import_no_cycle():
    modules = set(_modules())
    graph = {name: _imported(name, modules) for name in modules}
    assert "config" not in graph["litgpt_compat"] and "config" not in graph["litgpt_data"]
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph))}"


def test_cli_and_config_import_no_lightning():
    code = ("import sys\nimport lightning_sparkling.pretrain.cli, lightning_sparkling.pretrain.config\n"
            "bad = sorted(m for m in sys.modules if m == 'lightning' or m.startswith('lightning.'))\n"
            "assert not bad, bad[:5]\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         cwd=FOLDER.parents[1], check=False)
    assert out.returncode == 0, out.stderr


# ------------------------------------------------------------------------------------------- the whole package
def _package_modules() -> dict[str, Path]:
    """``{dotted module name: file}`` of every module of the package, every subfolder included."""
    out = {}
    for path in sorted(FOLDER.parent.rglob("*.py")):
        parts = list(path.relative_to(FOLDER.parents[1]).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def _package_graph() -> dict[str, set[str]]:
    """``{module: the package modules it imports}``, counting every import in its source (at the top, inside
    functions, for type checking only), relative ones resolved. ``from a.b import c`` counts ``a.b.c`` when that is
    a module, else ``a.b``; the implicit import of a module's parent package does not count (it is Python's
    package mechanism, not the module's choice)."""
    modules = _package_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                found.add(base)
                found.update(f"{base}.{alias.name}" for alias in node.names)
        graph[name] = {m for m in found if m in modules and m != name}
    return graph


def test_the_package_walk_sees_subfolders_and_function_imports():
    graph = _package_graph()
    assert "lightning_sparkling.growth.axes.width" in graph and "lightning_sparkling.growth.axes.base" in graph
    assert "lightning_sparkling.growth.types" in graph["lightning_sparkling.growth.axes.experts"]
    # an import inside a function counts: pretrain.run imports pretrain.module lazily (Lightning on demand)
    assert "lightning_sparkling.pretrain.module" in graph["lightning_sparkling.pretrain.run"]


def test_no_import_cycle_in_the_package():
    graph = _package_graph()
    cycle = _cycle(graph)
    assert cycle is None, f"import cycle: {' -> '.join(cycle)}"


# ---------------------------------------------------------------------------------------------------- the layers
ROOT = FOLDER.parent
LAYERS = ("growth", "parallel", "callbacks", "pretrain", "dashboards")
"""Bottom to top: each layer imports only its own and those before it (``pretrain`` and ``dashboards`` are the two
applications: they may import each other lazily)."""
APPS = {"pretrain", "dashboards"}
KNOWN = {"callbacks/rms_monitor.py imports lightning_sparkling.dashboards.tb_layout",
         "callbacks/rms_monitor.py imports lightning_sparkling.dashboards.tb_layout.write_layout"}
"""Upward imports that predate this check (the RMS monitor writes its TensorBoard layout lazily): listed, not new."""


def _layer_imports(path: Path) -> set[str]:
    """The dotted ``lightning_sparkling...`` and third-party modules ``path`` imports anywhere in its source."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _layer_of(dotted: str) -> str | None:
    parts = dotted.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "lightning_sparkling" and parts[1] in LAYERS else None


def test_no_layer_imports_a_layer_above_it():
    bad = []
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            for dotted in _layer_imports(path):
                other = _layer_of(dotted)
                if other is None or other == layer or (layer in APPS and other in APPS):
                    continue
                if LAYERS.index(other) > LAYERS.index(layer):
                    bad.append(f"{path.relative_to(ROOT)} imports {dotted}")
    assert sorted(set(bad) - KNOWN) == [], sorted(set(bad) - KNOWN)


def test_growth_layer_is_pure_torch():
    """``growth/`` imports no Lightning and reads nothing of Lightning's trainer (that code is in ``callbacks/``)."""
    bad = []
    paths = sorted((ROOT / "growth").rglob("*.py"))
    assert any(p.parent.name == "axes" for p in paths)
    for path in paths:
        imports = _layer_imports(path)
        bad += [f"{path.name} imports {m}" for m in imports if m.split(".")[0] in ("lightning", "pytorch_lightning")]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr in ("lr_scheduler_configs", "automatic_optimization",
                                                                 "lightning_module"):
                bad.append(f"{path.name}:{node.lineno} reads .{node.attr}")
            if isinstance(node, ast.arg) and node.arg == "trainer":
                bad.append(f"{path.name}:{node.lineno} takes a trainer")
    assert not bad, bad


def _definitions(name: str) -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
                  if any(isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name
                         for n in ast.walk(ast.parse(p.read_text(encoding="utf-8")))))


def test_one_home_for_errors_counts_and_sharding():
    """One growth error module, one active-parameter count, the sharding helpers in ``parallel/`` (and not in
    ``pretrain/``)."""
    assert _definitions("GrowthError") == ["growth/errors.py"]
    assert _definitions("active_parameter_count") == ["growth/compute.py"]
    assert _definitions("shard_gpt") == ["parallel/sharding.py"] and _definitions("wrap_gpt") == ["parallel/sharding.py"]
    import lightning_sparkling
    from lightning_sparkling.growth import errors, plan
    from lightning_sparkling.parallel import shard_gpt, wrap_gpt
    from lightning_sparkling.pretrain import gpt, module

    assert plan.GrowthError is errors.GrowthError is lightning_sparkling.GrowthError
    for old in (gpt, module):
        assert not hasattr(old, "shard_gpt") and not hasattr(old, "wrap_gpt")
    assert callable(shard_gpt) and callable(wrap_gpt)
