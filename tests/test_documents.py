"""The documents stay references: each within its line limit, with no issue numbers, every local link of theirs
pointing at a file that exists (BENCHMARKS' run logs under benchmarks/results/ included)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LIMITS = {"README.md": 250, "CHANGELOG.md": 80, "docs/ARCHITECTURE.md": 450, "docs/BENCHMARKS.md": 700}


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


@pytest.mark.parametrize("name", sorted(LIMITS))
def test_a_document_names_no_issue_numbers(name):
    found = re.findall(r"\b[Ii]ssues? #?\d+|#\d+\b", (ROOT / name).read_text(encoding="utf-8"))
    assert not found, found


def test_the_changelog_holds_the_release():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## [0.1.0] - Unreleased" in text and "### Added" in text
