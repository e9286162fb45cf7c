"""The promise about the old flat module paths (``lightning_sparkling.cli``, ``.config``, ``.stage``, ...): they warn
that they go away in :data:`~lightning_sparkling._deprecated.REMOVED_IN` (0.3.0), the CHANGELOG says so, and this
test fails once the package's version reaches that release while they are still here."""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

import pytest

import lightning_sparkling
from lightning_sparkling._deprecated import MOVED, REMOVED_IN

ROOT = Path(__file__).resolve().parents[2]


def _release(version: str) -> tuple[int, int, int]:
    """``"0.3.0"``, ``"0.3"``, ``"0.3.0rc1"`` -> ``(0, 3, 0)`` (a pre-release of 0.3.0 counts as 0.3.0)."""
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    assert match is not None, version
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


def _versions() -> dict[str, str]:
    """The package's version where the repository states it: ``pyproject.toml`` and ``lightning_sparkling.__version__``."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    project = text.split("[project]", 1)[1].split("\n[", 1)[0]
    version = re.search(r'^version\s*=\s*"([^"]+)"', project, flags=re.M)
    assert version is not None, "no version in pyproject.toml's [project]"
    return {"pyproject.toml": version.group(1), "lightning_sparkling.__version__": lightning_sparkling.__version__}


def test_version_parsing():
    assert _release("0.3.0") == _release("0.3") == _release("0.3.0rc1") == (0, 3, 0)
    assert _release("0.2.9") < _release(REMOVED_IN) <= _release("0.3.1") < _release("1.0.0")


def test_old_flat_paths_are_removed_by_the_release_that_promised_it():
    reached = {where: v for where, v in _versions().items() if _release(v) >= _release(REMOVED_IN)}
    assert not reached, (
        f"the package is at {reached}, and the old flat module paths were promised to be removed in {REMOVED_IN} "
        f"(CHANGELOG, Deprecated): delete lightning_sparkling/_deprecated.py and its install() in "
        f"lightning_sparkling/__init__.py ({len(MOVED)} paths: {', '.join(sorted(MOVED))}), "
        "tests/pretrain/test_layout.py's tests of the old paths and this file")


def test_the_warning_and_the_changelog_name_the_removal_release():
    sys.modules.pop("lightning_sparkling.cli", None)
    with pytest.warns(DeprecationWarning, match=rf"removed in lightning-sparkling {re.escape(REMOVED_IN)}: import "
                                                r"from lightning_sparkling\.pretrain\.cli"):
        importlib.import_module("lightning_sparkling.cli")
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"removed in {REMOVED_IN}" in changelog


def test_width_growth_callback_is_the_deprecated_name_of_growth_callback(tmp_path):
    """``WidthGrowthCallback`` (package, ``callbacks``, ``callbacks.growth``) is ``GrowthCallback`` itself, with a
    warning naming the new name and the removal release; both names' instances pass both ``isinstance`` checks and
    write their state under the key checkpoints have always used."""
    from lightning_sparkling import GrowthCallback, GrowthStage
    from lightning_sparkling import callbacks
    from lightning_sparkling.callbacks import growth

    olds = []
    for module in (lightning_sparkling, callbacks, growth):
        with pytest.warns(DeprecationWarning, match=rf"WidthGrowthCallback is deprecated and will be removed in "
                                                    rf"lightning-sparkling {re.escape(REMOVED_IN)}: use lightning_sparkling\.GrowthCallback"):
            olds.append(module.WidthGrowthCallback)
    assert all(old is GrowthCallback for old in olds)
    assert callbacks.GrowthCallback is GrowthCallback and "GrowthCallback" in lightning_sparkling.__all__
    WidthGrowthCallback = olds[0]
    new, old = GrowthCallback(GrowthStage(2, n_embd=48)), WidthGrowthCallback(GrowthStage(2, n_embd=48))
    assert isinstance(new, WidthGrowthCallback) and isinstance(old, GrowthCallback)
    assert new.state_key == old.state_key == "WidthGrowthCallback"
    with pytest.raises(AttributeError):
        growth.NoSuchCallback  # noqa: B018


@pytest.mark.parametrize("module, old, new", [
    ("lightning_sparkling.growth.new_entry_schedule", "NewEntryLRHolder",
     "lightning_sparkling.growth.new_entry_schedule.RewarmupHolder"),
    ("lightning_sparkling.growth.schedules", "NewEntryLRHolder",
     "lightning_sparkling.growth.new_entry_schedule.RewarmupHolder"),
    ("lightning_sparkling.growth.optim_state", "NewEntryLR", "lightning_sparkling.growth.optim_state.RewarmupRescale"),
    ("lightning_sparkling.callbacks.new_entry_lr", "NewEntryLearningRate",
     "lightning_sparkling.callbacks.new_entry_lr.RewarmupSchedulers"),
])
def test_new_entry_lr_pieces_keep_their_old_names(module, old, new):
    """Issue 41's re-warmup names: each old name of a new-entry LR piece still imports from its old module (the same
    class), with a warning naming the new name and the removal release."""
    where, _, name = new.rpartition(".")
    renamed = getattr(importlib.import_module(where), name)
    with pytest.warns(DeprecationWarning, match=rf"{module}\.{old} is deprecated and will be removed in "
                                                rf"lightning-sparkling {re.escape(REMOVED_IN)}: use {re.escape(new)}"):
        got = getattr(importlib.import_module(module), old)
    assert got is renamed
    with pytest.warns(DeprecationWarning):
        exec(f"from {module} import {old}", {})  # the ``from ... import`` form too
    assert not hasattr(importlib.import_module(module), old + "Missing")
