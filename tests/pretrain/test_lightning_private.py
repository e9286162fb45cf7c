"""The private Lightning names the package relies on are listed in one module, exist in the installed Lightning, and
no other callback of the package overrides one; ``RunCheckpoint`` quiets the non-empty-folder warning through the
public ``setup`` only when the fit resumes."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings

import lightning
import lightning.pytorch as pl
import pytest
from packaging.version import Version

import lightning_sparkling
from lightning_sparkling.pretrain.training import lightning_private
from lightning_sparkling.pretrain.training.lightning_private import (
    LIGHTNING_RANGE,
    PRIVATE_NAMES,
    TESTED_LIGHTNING,
)
from lightning_sparkling.pretrain.training.run_callbacks import RunCheckpoint


@pytest.mark.parametrize("cls, name", [(cls, name) for cls, names in PRIVATE_NAMES.items() for name in names],
                         ids=lambda x: getattr(x, "__name__", x))
def test_each_listed_private_name_is_still_in_lightning(cls, name):
    assert callable(getattr(cls, name, None)), f"{cls.__name__}.{name} left Lightning {lightning.__version__}"


def test_the_installed_lightning_is_in_the_listed_range():
    assert LIGHTNING_RANGE.startswith(">=") and Version(lightning.__version__) >= Version(LIGHTNING_RANGE[2:])
    assert Version(TESTED_LIGHTNING) >= Version(LIGHTNING_RANGE[2:])


def _package_classes() -> list[type]:
    """Every class defined in a module of the package (modules whose optional dependencies are missing skipped)."""
    found = []
    for info in pkgutil.walk_packages(lightning_sparkling.__path__, "lightning_sparkling."):
        try:
            module = importlib.import_module(info.name)
        except ImportError:
            continue
        found += [c for _, c in inspect.getmembers(module, inspect.isclass) if c.__module__ == info.name]
    return found


def _private_overrides(cls: type) -> set[str]:
    """The names ``cls`` defines itself that a Lightning base class defines privately (``_x``, not ``__x__``)."""
    bases = [b for b in cls.__mro__[1:] if b.__module__.startswith(("lightning.", "pytorch_lightning."))]
    own = {n for n in vars(cls) if n.startswith("_") and not n.endswith("__") and n != "_abc_impl"}
    return {n for n in own if any(n in vars(b) for b in bases)}


KNOWN_ELSEWHERE = {"lightning_sparkling.callbacks.throughput.TokenThroughputMonitor": ["_compute"]}
"""Overrides of private Lightning names outside :mod:`lightning_private` still to move (the ``callbacks`` layer cannot
import ``pretrain``): a new one fails the test, and so does one of these once it is gone."""


def test_only_lightning_private_overrides_private_lightning_names():
    listed = {name for names in PRIVATE_NAMES.values() for name in names}
    offenders, seen = {}, 0
    for cls in _package_classes():
        names = _private_overrides(cls)
        seen += bool(names)
        if cls.__module__ != lightning_private.__name__ and names:
            offenders[f"{cls.__module__}.{cls.__qualname__}"] = sorted(names)
        elif names - listed:
            offenders[f"{cls.__qualname__} (not in PRIVATE_NAMES)"] = sorted(names - listed)
    assert offenders == KNOWN_ELSEWHERE and seen >= 2  # seen: lightning_private's two classes are found by the walk


def _setup_warnings(tmp_path, *, resuming: bool) -> list[str]:
    (tmp_path / "step-00000004.ckpt").write_bytes(b"x")
    trainer = pl.Trainer(default_root_dir=tmp_path, logger=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu", devices=1)
    checkpoint = RunCheckpoint(dirpath=tmp_path, resuming=resuming)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        checkpoint.setup(trainer, pl.LightningModule(), "fit")
    assert checkpoint.dirpath == str(tmp_path)  # ModelCheckpoint's own setup ran
    return [str(w.message) for w in caught]


def test_a_resumed_run_gets_no_warning_about_its_own_checkpoint_folder(tmp_path):
    assert not [m for m in _setup_warnings(tmp_path, resuming=True) if "exists and is not empty" in m]


def test_a_fresh_run_over_a_full_folder_keeps_lightning_s_warning(tmp_path):
    assert [m for m in _setup_warnings(tmp_path, resuming=False) if "exists and is not empty" in m]
