"""Every Lightning hook the package implements carries ``@override`` (typing_extensions), as Lightning's own do."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import lightning.pytorch as pl
import pytest
from typing_extensions import override

import lightning_sparkling

LIGHTNING_BASES = (pl.Callback, pl.LightningModule, pl.LightningDataModule)


def _function(attr: object) -> object:
    """The function behind a method, a property or a static/class method."""
    if isinstance(attr, property):
        return attr.fget
    if isinstance(attr, (staticmethod, classmethod)):
        return attr.__func__
    return attr


def missing_overrides(cls: type) -> list[str]:
    """The methods ``cls`` defines that override a Lightning (or torch) base's, without ``@override``.

    Dunder methods (``__init__``) are left out, as Lightning leaves them.
    """
    missing = []
    for name, attr in vars(cls).items():
        if (name.startswith("__") and name.endswith("__")) or not callable(_function(attr)):
            continue
        base_defines = any(name in vars(base) for base in cls.__mro__[1:]
                           if not base.__module__.startswith("lightning_sparkling"))
        if base_defines and not getattr(_function(attr), "__override__", False):
            missing.append(f"{cls.__module__}.{cls.__qualname__}.{name}")
    return missing


def _package_lightning_classes() -> list[type]:
    classes = []
    for info in pkgutil.walk_packages(lightning_sparkling.__path__, "lightning_sparkling."):
        module = importlib.import_module(info.name)
        classes += [cls for cls in vars(module).values()
                    if inspect.isclass(cls) and issubclass(cls, LIGHTNING_BASES) and cls.__module__ == info.name]
    return classes


def test_every_lightning_hook_in_the_package_carries_override():
    classes = _package_lightning_classes()
    names = {cls.__name__ for cls in classes}
    # the walk finds the package's callbacks, module and data module (a walk that found nothing would pass)
    assert {"GrowthCallback", "ActivationRMSMonitor", "LitGPTPretrainModule", "TextCorpusDataModule"} <= names
    missing = [name for cls in classes for name in missing_overrides(cls)]
    assert not missing, f"add @override (from typing_extensions) to: {', '.join(missing)}"


def test_a_hook_without_override_is_found():
    class _Hooks(pl.Callback):
        def on_train_start(self, trainer, pl_module):  # no @override
            pass

        @property
        def state_key(self) -> str:  # no @override
            return "x"

        @override
        def on_fit_start(self, trainer, pl_module):
            pass

        def own_helper(self):  # not a hook
            pass

    assert sorted(name.rsplit(".", 1)[-1] for name in missing_overrides(_Hooks)) == ["on_train_start", "state_key"]


@pytest.mark.parametrize("base", LIGHTNING_BASES)
def test_a_subclass_of_each_base_with_override_passes(base):
    class _Sub(base):  # type: ignore[misc, valid-type]
        @override
        def setup(self, *args, **kwargs):
            pass

    assert missing_overrides(_Sub) == []
