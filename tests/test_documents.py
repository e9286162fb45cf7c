"""The documents stay references: each within its line limit, with no issue numbers, every local link of theirs
pointing at a file that exists (BENCHMARKS' run logs under benchmarks/results/ included), and docs/MUTATIONS.md
naming only files and tests that exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lightning_sparkling"
LIMITS = {"README.md": 250, "CHANGELOG.md": 80, "docs/ARCHITECTURE.md": 450, "docs/BENCHMARKS.md": 700}
UNLIMITED = ["docs/MUTATIONS.md"]  # no line limit, but no issue numbers either


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_a_document_keeps_its_line_limit(name):
    assert len((ROOT / name).read_text(encoding="utf-8").splitlines()) <= LIMITS[name]


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_a_document_links_only_to_files_that_exist(name):
    page = ROOT / name
    targets = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8"))
    missing = [t for t in targets if not (page.parent / t).exists()]
    assert not missing, missing
    if name == "docs/BENCHMARKS.md":  # the run logs it moved out are linked
        assert sum(t.endswith("_log.md") for t in targets) >= 10


@pytest.mark.parametrize("name", sorted(LIMITS) + UNLIMITED)
def test_a_document_names_no_issue_numbers(name):
    found = re.findall(r"\b[Ii]ssues? #?\d+|#\d+\b", (ROOT / name).read_text(encoding="utf-8"))
    assert not found, found


def test_the_changelog_holds_the_release():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## [0.1.0] - Unreleased" in text and "### Added" in text


def test_the_mutation_audit_names_files_and_tests_that_exist():
    """Each mutated file (under the package, or ``benchmarks/``) and each ``file.py::test`` that kills a mutant."""
    text = (ROOT / "docs" / "MUTATIONS.md").read_text(encoding="utf-8")
    files = set(re.findall(r"`((?:growth|callbacks|pretrain|parallel|dashboards|benchmarks)/[\w/]+\.py)`", text))
    assert len(files) >= 20
    missing = [f for f in files if not (ROOT / f if f.startswith("benchmarks/") else PACKAGE / f).is_file()]
    assert not missing, missing
    tests = set(re.findall(r"(?<![\w/])((?:tests/[\w/]+/)?test_\w+\.py)::(\w+)", text))
    assert len(tests) >= 50
    gone = []
    for path, name in tests:
        candidates = [ROOT / path] if path.startswith("tests/") else list((ROOT / "tests").rglob(path))
        if not any(c.is_file() and re.search(rf"def {name}\b", c.read_text(encoding="utf-8")) for c in candidates):
            gone.append(f"{path}::{name}")
    assert not gone, gone
