"""docs/ARCHITECTURE.md's glossary names one word per concept, and its last column the names a concept had before
0.1.0 (never released: no alias kept). This test reads that column and fails on any of those names in the package:
an identifier, an attribute, an import, a parameter or keyword (``func(param=)``), a module's file name, or a loop
naming a size key ``axis`` (``for axis in sizes``). A name that comes back fails here (issue 47)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import lightning_sparkling

PACKAGE = Path(lightning_sparkling.__file__).parent
ARCHITECTURE = PACKAGE.parent / "docs" / "ARCHITECTURE.md"


def glossary_old_names() -> dict[str, str]:
    """``{old name: the glossary word whose row lists it}``, from the table's last column."""
    text = ARCHITECTURE.read_text(encoding="utf-8")
    table = text.split("## Glossary", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| **")]
    old: dict[str, str] = {}
    for row in rows:
        cells = [c.strip() for c in row.strip().strip("|").split(" | ")]
        word = cells[0].strip("* ")
        for name in re.findall(r"`([^`]+)`", cells[-1]) if len(cells) == 4 else ():
            old[name] = word
    return old


def _loop_names_size_axis(node: ast.AST) -> bool:
    """``for axis in <something of sizes or widths>`` (a loop or a comprehension)."""
    target = getattr(node, "target", None)
    names = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)} if target is not None else set()
    return "axis" in names and bool(re.search(r"size|width|SIZE|WIDTH", ast.unparse(node.iter)))


def find_old_names(source: str, path: str, old: dict[str, str]) -> list[str]:
    """Where ``source`` (the file ``path``) uses a name of ``old`` (see the module docstring)."""
    calls = {}  # func -> {param}: the `func(param=)` entries
    plain = set()
    for name in old:
        match = re.fullmatch(r"(\w+)\((\w+)=\)", name)
        if match:
            calls.setdefault(match.group(1), set()).add(match.group(2))
        elif re.fullmatch(r"[\w.]+", name):
            plain.add(name)
    found = [f"{path}: module {stem}" for stem in Path(path).with_suffix("").parts if stem in plain]
    for node in ast.walk(ast.parse(source)):
        where = f"{path}:{getattr(node, 'lineno', 0)}"
        names: list[str] = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.alias):
            names = [*node.name.split("."), *([node.asname] if node.asname else [])]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = node.module.split(".")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
            params = {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)} \
                if not isinstance(node, ast.ClassDef) else set()
            found += [f"{where}: def {node.name}({p}=)" for p in calls.get(node.name, set()) & params]
        elif isinstance(node, ast.Call):
            callee = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            found += [f"{where}: {callee}({k.arg}=)" for k in node.keywords if k.arg in calls.get(callee, set())]
        elif isinstance(node, (ast.For, ast.comprehension)) and "for axis in sizes" in old \
                and _loop_names_size_axis(node):
            found.append(f"{where}: for axis in {ast.unparse(node.iter)}")
        found += [f"{where}: {name}" for name in names if name in plain]
    return found


def test_the_glossary_lists_the_old_names():
    old = glossary_old_names()
    assert {"AxisChange", "WIDTH_AXES", "classify_axis", "NewEntryLR", "STATE_KEY", "new_entry_lr",
            "grown_config(widths=)", "for axis in sizes"} <= set(old), sorted(old)
    assert old["NewEntryLR"] == "re-warmup" and old["STATE_KEY"] == "growth state key"


def test_the_package_uses_no_old_name():
    old = glossary_old_names()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        found += find_old_names(path.read_text(encoding="utf-8"), rel, old)
    assert not found, found


def _reintroduced(name: str) -> tuple[str, str]:
    """A source file that brings ``name`` back: ``(path, source)``."""
    if name == "for axis in sizes":
        return "growth/x.py", "def f(stage):\n    for axis, size in stage.sizes.items():\n        pass\n"
    match = re.fullmatch(r"(\w+)\((\w+)=\)", name)
    if match:
        return "growth/x.py", f"def {match.group(1)}(config, {match.group(2)}):\n    return config\n"
    return "growth/x.py", f"from lightning_sparkling.growth.types import {name}\n"


@pytest.mark.parametrize("name", sorted(glossary_old_names()))
def test_a_reintroduced_old_name_is_found(name):
    """Each old name the glossary lists, brought back in a file, is found (so the test above would fail)."""
    path, source = _reintroduced(name)
    assert find_old_names(source, path, glossary_old_names()), name
    if re.fullmatch(r"\w+", name):  # as an attribute, a keyword of a call and a module's file name too
        assert find_old_names(f"x = stage.{name}\n", path, glossary_old_names())
        assert find_old_names("x = 1\n", f"growth/{name}.py", glossary_old_names())


def test_the_scan_leaves_the_new_names_alone():
    old = glossary_old_names()
    source = ("from lightning_sparkling.growth.record import GROWTH_STATE_KEY\n"
              "def f(stage, axes):\n    for size in stage.sizes:\n        pass\n"
              "    for axis in axes:\n        pass\n    return grown_config(stage, {'n_embd': 1}, target=None)\n")
    assert find_old_names(source, "growth/rewarmup.py", old) == []
