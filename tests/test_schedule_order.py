"""The suite's scheduling (tests/conftest.py): every file it schedules first exists, so a renamed file is not silently
left to xdist's order, and the collection puts those files first, each whole."""

from __future__ import annotations

from pathlib import Path

from conftest import HEAVY_FIRST

ROOT = Path(__file__).resolve().parents[1]


def test_every_heavy_file_exists_once():
    assert len(set(HEAVY_FIRST)) == len(HEAVY_FIRST)
    assert [p for p in HEAVY_FIRST if not (ROOT / p).is_file()] == []


def test_the_collection_starts_with_the_heavy_files_each_whole(request):
    files = [item.nodeid.split("::")[0] for item in request.session.items]
    order = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]  # each file once, if contiguous
    assert len(order) == len(set(order)), "a file's tests were split apart"
    if len(order) > len(HEAVY_FIRST):  # the whole suite collected (not a single file run)
        assert tuple(order[:len(HEAVY_FIRST)]) == HEAVY_FIRST
