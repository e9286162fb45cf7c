"""The modules of ``lightning_sparkling/pretrain/`` import each other without a cycle (issue 24: ``config.py`` and
``litgpt_compat.py`` used to import each other), and the CLI stays light to import (``sparkling plan`` never imports
Lightning)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import lightning_sparkling
from lightning_sparkling._deprecated import MOVED

PACKAGE = "lightning_sparkling.pretrain"
FOLDER = Path(lightning_sparkling.__file__).parent / "pretrain"


def _modules() -> list[str]:
    return sorted(p.stem for p in FOLDER.glob("*.py") if p.stem != "__init__")


def _imported(name: str, modules: set[str]) -> set[str]:
    """The pretrain modules ``name`` imports anywhere in its source (at the top, inside functions, for type checking
    only, through an old flat path of :data:`MOVED`)."""
    tree = ast.parse((FOLDER / f"{name}.py").read_text(encoding="utf-8"))
    found: set[str] = set()

    def add(dotted: str) -> None:
        dotted = next((new[0] for old, new in MOVED.items() if dotted == old or dotted.startswith(old + ".")), dotted)
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
