"""The modules of ``lightning_sparkling/pretrain/`` import each other without a cycle (issue 24: ``config.py`` and
``litgpt_compat.py`` used to import each other) and follow its layers, its sub-packages in order (issue 53: data <
model < config < advice < training < measure < cli, a module of a lower one never imports a higher one); no module of
the whole package is on an import cycle, counting imports inside functions (issue 41: nine modules of ``growth/``
were), the layers import downwards only, every subfolder included, and the CLI stays light to import (``sparkling
plan`` never imports Lightning)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import lightning_sparkling

PACKAGE = "lightning_sparkling.pretrain"
FOLDER = Path(lightning_sparkling.__file__).parent / "pretrain"
PRETRAIN_LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "formatting"),  # flat: the errors and the console every layer shares
    ("data",),
    ("model",),
    ("config",),
    ("advice",),
    ("training",),
    ("measure",),
    ("cli",),  # flat: the command line dispatches to every layer
)
"""``pretrain/``'s layers, bottom to top: each a sub-package (or a flat module); a module imports only modules of its
own layer and of the layers before it."""


def _modules() -> list[str]:
    """Every module of ``pretrain/`` by its dotted name under it (``cli``, ``config.resolve``; sub-packages'
    ``__init__`` as ``config``), the package's own ``__init__`` left out."""
    out = []
    for path in sorted(FOLDER.rglob("*.py")):
        parts = list(path.relative_to(FOLDER).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            out.append(".".join(parts))
    return out


def _imported(name: str, modules: set[str]) -> set[str]:
    """The pretrain modules ``name`` imports anywhere in its source (at the top, inside functions, for type checking
    only), by their dotted names under ``pretrain``; ``from lightning_sparkling.pretrain.config import schema`` counts
    ``config.schema``."""
    path = FOLDER / (name.replace(".", "/") + ".py")
    if not path.is_file():
        path = FOLDER / name.replace(".", "/") / "__init__.py"
    found: set[str] = set()

    def add(dotted: str) -> None:
        if dotted.startswith(PACKAGE + ".") and dotted[len(PACKAGE) + 1:] in modules:
            found.add(dotted[len(PACKAGE) + 1:])

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{name}: a relative import (the package imports absolutely)"
            base = node.module or ""
            add(base)
            for alias in node.names:
                add(f"{base}.{alias.name}")
    found.discard(name)
    return found


def _layer(name: str) -> int:
    """The index in :data:`PRETRAIN_LAYERS` of the layer module ``name`` belongs to (its first component)."""
    top = name.split(".")[0]
    return next(k for k, layer in enumerate(PRETRAIN_LAYERS) if top in layer)


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
    assert {"cli", "config.resolve", "config.litgpt_compat", "errors", "config.schema", "data"} <= modules
    assert {"config.resolve", "advice.planning", "training.run"} <= _imported("cli", modules)
    assert "errors" in _imported("config.litgpt_compat", modules)
    assert "config.schema" in _imported("config.resolve", modules)  # from ...pretrain.config.schema import ...
    assert "data.litgpt_data" in _imported("config.resolve", modules)  # from ...pretrain.data import litgpt_data
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_pretrain_modules_import_no_cycle():
    modules = set(_modules())
    graph = {name: _imported(name, modules) for name in modules}
    assert "config.resolve" not in graph["config.litgpt_compat"] and "config.resolve" not in graph["data.litgpt_data"]
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph))}"


def test_every_pretrain_module_is_in_a_layer_and_at_most_ten_are_flat():
    modules = _modules()
    assert [m for m in modules if m.split(".")[0] not in {n for layer in PRETRAIN_LAYERS for n in layer}] == []
    flat = [p.stem for p in FOLDER.glob("*.py") if p.stem != "__init__"]
    assert len(flat) <= 10, flat
    packages = sorted(p.parent.name for p in FOLDER.glob("*/__init__.py"))
    assert packages == sorted(n for layer in PRETRAIN_LAYERS for n in layer if (FOLDER / n).is_dir()), packages


def test_pretrain_sub_packages_import_only_the_layers_below_them():
    """A module of a lower layer never imports a higher one (``config`` does not read ``advice``, ``training`` does
    not read ``measure``, nothing but ``cli`` reads ``cli``), counting imports inside functions."""
    modules = set(_modules())
    upward = sorted(f"{name} imports {other}" for name in modules for other in _imported(name, modules)
                    if _layer(other) > _layer(name))
    assert upward == [], upward
    assert _layer("config.resolve") < _layer("advice.planning") < _layer("training.run") < _layer("measure.command")


def test_pretrain_sub_packages_init_import_nothing():
    """Importing ``pretrain.config.resolve`` runs ``pretrain/config/__init__.py`` first: each sub-package's
    ``__init__`` is a docstring, so importing one module of it imports no other (nor Lightning)."""
    for init in FOLDER.glob("*/__init__.py"):
        tree = ast.parse(init.read_text(encoding="utf-8"))
        assert ast.get_docstring(tree), init
        assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))], init


def test_cli_and_config_import_no_lightning():
    code = ("import sys\nimport lightning_sparkling.pretrain.cli, lightning_sparkling.pretrain.config.resolve\n"
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
    # an import inside a function counts: training.run imports training.module lazily (Lightning on demand)
    assert "lightning_sparkling.pretrain.training.module" in graph["lightning_sparkling.pretrain.training.run"]


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
    assert (_definitions("shard_gpt") == ["parallel/sharding.py"]
            and _definitions("wrap_gpt") == ["parallel/sharding.py"])
    import lightning_sparkling
    from lightning_sparkling.growth import errors, plan
    from lightning_sparkling.parallel import shard_gpt, wrap_gpt
    from lightning_sparkling.pretrain.model import gpt
    from lightning_sparkling.pretrain.training import module

    assert plan.GrowthError is errors.GrowthError is lightning_sparkling.GrowthError
    for old in (gpt, module):
        assert not hasattr(old, "shard_gpt") and not hasattr(old, "wrap_gpt")
    assert callable(shard_gpt) and callable(wrap_gpt)
