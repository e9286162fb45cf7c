"""Old flat module paths (``lightning_sparkling.stage``, ``lightning_sparkling.cli``, ...), kept until
:data:`REMOVED_IN` (0.3.0: the 0.2.0 release still has them, 0.3.0 removes them and this module).

The modules moved into subpackages (``growth/``, ``parallel/``, ``pretrain/``, ``dashboards/``). Rather than one
shim file per old path (which would also hide the moves from ``git``'s rename detection), a single import hook,
installed by ``lightning_sparkling/__init__.py``, answers for the old names:

- ``import lightning_sparkling.stage`` gives the new module itself (``lightning_sparkling.growth.stage``: the same
  object, so its names, private ones included, and monkeypatches are shared) and emits a ``DeprecationWarning``
  naming the new path;
- an old path whose names now live in several modules (``lightning_sparkling.distributed``) gives a small module
  forwarding each attribute to the first new module that has it;
- ``python -m lightning_sparkling.cli`` runs the new module as ``__main__`` (the ``sparkling`` CLI).

Example::

    import warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from lightning_sparkling.stage import GrowthStage  # DeprecationWarning: use lightning_sparkling.growth.stage
"""

from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
import warnings
from collections.abc import Callable
from typing import Any

REMOVED_IN = "0.3.0"
"""The release that removes the old paths (and this module); ``tests/pretrain/test_deprecated_paths.py`` fails once the
package's version reaches it while they are still here."""

#: old module path -> new module path(s); where several, names are looked up in that order
MOVED: dict[str, tuple[str, ...]] = {
    "lightning_sparkling.scaling": ("lightning_sparkling.growth.scaling",),
    "lightning_sparkling.operators": ("lightning_sparkling.growth.operators",),
    "lightning_sparkling.stage": ("lightning_sparkling.growth.stage",),
    "lightning_sparkling.plan": ("lightning_sparkling.growth.plan",),
    "lightning_sparkling.surgery": ("lightning_sparkling.growth.surgery",),
    "lightning_sparkling.optim_state": ("lightning_sparkling.growth.optim_state",),
    "lightning_sparkling.schedules": ("lightning_sparkling.growth.schedules",),
    "lightning_sparkling.symmetry": ("lightning_sparkling.growth.symmetry",),
    "lightning_sparkling.compute": ("lightning_sparkling.growth.compute",),
    "lightning_sparkling.baselines": ("lightning_sparkling.growth.baselines",),
    "lightning_sparkling.distributed": ("lightning_sparkling.parallel.fsdp2", "lightning_sparkling.parallel.single",
                                        "lightning_sparkling.parallel"),
    "lightning_sparkling.fsdp1": ("lightning_sparkling.parallel.fsdp1",),
    "lightning_sparkling.testing": ("lightning_sparkling.parallel.testing",),
    "lightning_sparkling.cli": ("lightning_sparkling.pretrain.cli",),
    "lightning_sparkling.config": ("lightning_sparkling.pretrain.config",),
    "lightning_sparkling.data": ("lightning_sparkling.pretrain.data",),
    "lightning_sparkling.module": ("lightning_sparkling.pretrain.module",),
    "lightning_sparkling.litgpt_compat": ("lightning_sparkling.pretrain.litgpt_compat",),
    "lightning_sparkling.plotting": ("lightning_sparkling.dashboards.plotting",),
    "lightning_sparkling.tb_layout": ("lightning_sparkling.dashboards.tb_layout",),
    # renamed so that no two modules share a name (growth/axes/depth.py, growth/axes/heads.py are the plug-ins)
    "lightning_sparkling.growth.depth": ("lightning_sparkling.growth.depth_maps",),
    "lightning_sparkling.growth.heads": ("lightning_sparkling.growth.head_layout",),
    # issue 41: measured results are not growth math; the map and its advice are read by the pretrain layer
    "lightning_sparkling.growth.measured": ("lightning_sparkling.pretrain.measured",),
}


#: old dotted name -> new public dotted name (the same object), answered by the old module's ``__getattr__``
#: (:func:`moved_attribute`) with a ``DeprecationWarning``
MOVED_NAMES: dict[str, str] = {
    "lightning_sparkling.WidthGrowthCallback": "lightning_sparkling.GrowthCallback",
    "lightning_sparkling.callbacks.WidthGrowthCallback": "lightning_sparkling.GrowthCallback",
    "lightning_sparkling.callbacks.growth.WidthGrowthCallback": "lightning_sparkling.GrowthCallback",
    "lightning_sparkling.callbacks.growth.STATE_KEY": "lightning_sparkling.growth.record.GROWTH_STATE_KEY",
    "lightning_sparkling.pretrain.gpt.shard_gpt": "lightning_sparkling.parallel.shard_gpt",
    "lightning_sparkling.pretrain.gpt.wrap_gpt": "lightning_sparkling.parallel.wrap_gpt",
    "lightning_sparkling.pretrain.module.shard_gpt": "lightning_sparkling.parallel.shard_gpt",
    "lightning_sparkling.pretrain.module.wrap_gpt": "lightning_sparkling.parallel.wrap_gpt",
    # issue 41: the new-entry LR pieces are named after the paper's re-warmup (the glossary's "new-entry LR" row)
    "lightning_sparkling.growth.new_entry_schedule.NewEntryLRHolder":
        "lightning_sparkling.growth.new_entry_schedule.RewarmupHolder",
    "lightning_sparkling.growth.schedules.NewEntryLRHolder":
        "lightning_sparkling.growth.new_entry_schedule.RewarmupHolder",
    "lightning_sparkling.growth.optim_state.NewEntryLR": "lightning_sparkling.growth.optim_state.RewarmupRescale",
    "lightning_sparkling.callbacks.new_entry_lr.NewEntryLearningRate":
        "lightning_sparkling.callbacks.new_entry_lr.RewarmupSchedulers",
    # issue 41: a growing dimension of channels is a channel dimension (the glossary's row), "axis" is a plug-in
    "lightning_sparkling.growth.types.AxisChange": "lightning_sparkling.growth.types.ChannelChange",
    "lightning_sparkling.growth.plan.AxisChange": "lightning_sparkling.growth.types.ChannelChange",
    "lightning_sparkling.growth.surgery.AxisChange": "lightning_sparkling.growth.types.ChannelChange",
    "lightning_sparkling.growth.optim_state.AxisChange": "lightning_sparkling.growth.types.ChannelChange",
}

#: names renamed where they stand, ``{module: {old: new}}`` (each ``module.new``): issue 41, "axis" names a growth
#: plug-in only; a tuple of ``litgpt.Config`` sizes is of *size keys*, a channel's name is a *channel*, and what the
#: measured map calls a run is its *category* (the glossary's rows). Added to :data:`MOVED_NAMES`.
RENAMED_NAMES: dict[str, dict[str, str]] = {
    "lightning_sparkling.growth.axes": {"WIDTH_AXES": "WIDTH_SIZE_KEYS", "HEAD_AXES": "HEAD_SIZE_KEYS",
                                        "SIZE_AXES": "SIZE_KEYS", "DEPTH_AXIS": "DEPTH_SIZE_KEY"},
    "lightning_sparkling.growth.axes.width": {"WIDTH_AXES": "WIDTH_SIZE_KEYS"},
    "lightning_sparkling.growth.axes.heads": {"HEAD_AXES": "HEAD_SIZE_KEYS", "WIDTH_AXES": "WIDTH_SIZE_KEYS"},
    "lightning_sparkling.growth.axes.depth": {"DEPTH_AXIS": "DEPTH_SIZE_KEY"},
    "lightning_sparkling.growth.depth_maps": {"DEPTH_AXIS": "DEPTH_SIZE_KEY"},
    "lightning_sparkling.growth.stage": {"WIDTH_AXES": "WIDTH_SIZE_KEYS", "HEAD_AXES": "HEAD_SIZE_KEYS",
                                         "SIZE_AXES": "SIZE_KEYS"},
    "lightning_sparkling.growth.recipes": {"WIDTH_AXES": "WIDTH_SIZE_KEYS", "HEAD_AXES": "HEAD_SIZE_KEYS"},
    "lightning_sparkling.growth.plan": {"SIZE_AXES": "SIZE_KEYS", "SHARED_EXPERT_AXIS": "SHARED_EXPERT_CHANNEL"},
    "lightning_sparkling.growth.axes.channels": {"SHARED_EXPERT_AXIS": "SHARED_EXPERT_CHANNEL"},
    "lightning_sparkling.growth.axes.experts": {"EXPERT_AXIS": "EXPERT_CHANNEL"},
    "lightning_sparkling.callbacks.growth": {"WIDTH_AXES": "WIDTH_SIZE_KEYS", "SIZE_AXES": "SIZE_KEYS"},
    "lightning_sparkling.pretrain.measured_axes": {"WIDTH_AXES": "WIDTH_SIZE_KEYS"},
    "lightning_sparkling.pretrain.measured": {"classify_axis": "classify_category"},
}
MOVED_NAMES.update({f"{module}.{old}": f"{module}.{new}" for module, names in RENAMED_NAMES.items()
                    for old, new in names.items()})


def moved_attribute(module: str, name: str) -> Any:
    """For a module's ``__getattr__``: the object an old name ``module.name`` of :data:`MOVED_NAMES` now is, with a
    ``DeprecationWarning`` naming the new name and :data:`REMOVED_IN`.

    Raises:
        AttributeError: for any other name (the module has no such attribute).
    """
    old = f"{module}.{name}"
    if old not in MOVED_NAMES:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    new = MOVED_NAMES[old]
    warnings.warn(f"{old} is deprecated and will be removed in lightning-sparkling {REMOVED_IN}: use {new} (the same "
                  "object)", DeprecationWarning, stacklevel=3)
    where, _, attr = new.rpartition(".")
    return getattr(importlib.import_module(where), attr)


def _renamed(owner: str, old: str, new: str, stacklevel: int) -> None:
    warnings.warn(f"{owner}.{old} is deprecated and will be removed in lightning-sparkling {REMOVED_IN}: use "
                  f"{owner}.{new} (the same value)", DeprecationWarning, stacklevel=stacklevel)


def renamed_keywords(owner: str, **renames: str) -> Callable[[Callable], Callable]:
    """Decorate a function (or a dataclass' ``__init__``) so that each old keyword ``old=`` of ``renames`` (``old:
    new``) still works, as ``new=``, with a ``DeprecationWarning``; giving both is a ``TypeError``. ``owner`` names
    the function or class in the warning."""

    def decorate(func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for old, new in renames.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{owner}() got both {old}= (its deprecated name) and {new}=")
                    _renamed(owner, old, new, stacklevel=3)
                    kwargs[new] = kwargs.pop(old)
            return func(*args, **kwargs)

        return wrapper

    return decorate


def renamed_fields(**renames: str) -> Callable[[type], type]:
    """Class decorator (above ``@dataclass``) for a dataclass whose fields were renamed (``old: new``): the old name
    stays a read-only property giving the new field's value, and a keyword of the constructor, each with a
    ``DeprecationWarning``, until :data:`REMOVED_IN`. The fields, ``repr``, equality and ``dataclasses.replace``
    use the new names only."""

    def decorate(cls: type) -> type:
        owner = f"{cls.__module__}.{cls.__qualname__}"
        cls.__init__ = renamed_keywords(owner, **renames)(cls.__init__)  # type: ignore[misc]
        for old, new in renames.items():
            def read(self: Any, old: str = old, new: str = new) -> Any:
                _renamed(owner, old, new, stacklevel=3)
                return getattr(self, new)

            setattr(cls, old, property(read, doc=f"Deprecated: :attr:`{new}` (removed in {REMOVED_IN})."))
        return cls

    return decorate


def _message(old: str) -> str:
    new = " / ".join(MOVED[old])
    return f"{old} is deprecated and will be removed in lightning-sparkling {REMOVED_IN}: import from {new}"


class _Forwarding(types.ModuleType):
    """An old module whose names now live in several new modules."""

    def __init__(self, name: str, targets: tuple[str, ...]) -> None:
        super().__init__(name, f"Deprecated: moved to {', '.join(targets)}.")
        self._targets = targets

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        for target in self._targets:
            module = importlib.import_module(target)
            if hasattr(module, attr):
                return getattr(module, attr)
        raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r}")

    def __dir__(self) -> list[str]:
        return sorted({n for t in self._targets for n in dir(importlib.import_module(t))})


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.InspectLoader):
    """Import hook answering for the old module paths in :data:`MOVED` (first on ``sys.meta_path``)."""

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=False)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        targets = MOVED[spec.name]
        warnings.warn(_message(spec.name), DeprecationWarning, stacklevel=2)
        if len(targets) == 1:
            module = importlib.import_module(targets[0])  # the new module itself, under its old name too
            self._specs[module.__name__] = module.__spec__
            return module
        return _Forwarding(spec.name, targets)

    def exec_module(self, module: types.ModuleType) -> None:
        # the import system set the old name's spec on the (shared) new module: give it its own back
        if module.__name__ in self._specs:
            module.__spec__ = self._specs.pop(module.__name__)

    def is_package(self, fullname: str) -> bool:
        return False

    def get_source(self, fullname: str) -> str:
        """Code run by ``python -m <old path>``: warn, then run the new module as ``__main__``."""
        return (f"import runpy, warnings\nwarnings.warn({_message(fullname)!r}, DeprecationWarning)\n"
                f"runpy.run_module({MOVED[fullname][0]!r}, run_name='__main__', alter_sys=True)\n")


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())
