"""The CLI's plug-ins: modules of a user's growth axis or backend, imported before a configuration is read, so that
the axis' stage keys are accepted (``growth.stages[k].<key>``) and the backend's ``strategy`` value is offered. A
plug-in module registers itself when imported (``register_axis`` / ``register_backend``), as the built-in ones do.

Two ways to name them:

- the top-level ``plugins:`` key of a configuration (a name or a list: ``plugins: my_axis``, ``plugins: [a, b]``), or
  on the command line ``--plugins NAME`` / ``--plugins '[A, B]'``: module names on ``PYTHONPATH``, imported in
  order;
- the entry-point group :data:`PLUGIN_GROUP` of an installed package
  (``[project.entry-points."lightning_sparkling.plugins"] my_axis = "my_package.my_axis"``), loaded by every
  ``sparkling`` command.

Example::

    # run.yaml
    plugins: [my_rope_axis]          # my_rope_axis.py registers a GrowthAxis with a stage key `rope_base`
    growth:
      stages:
        - {at_step: 100, rope_base: 20000}
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Iterable, Sequence
from importlib.metadata import entry_points
from typing import Any

from lightning_sparkling.pretrain.errors import ConfigError

PLUGIN_GROUP = "lightning_sparkling.plugins"
"""The entry-point group whose entries the CLI loads before reading a configuration."""

__all__ = ["PLUGIN_GROUP", "load_plugins", "plugin_names"]


def plugin_names(argv: Sequence[str], read_yaml: Callable[[str], Any]) -> list[str]:
    """The module names ``argv`` asks for: each ``--config`` file's ``plugins:``, then ``--plugins`` values (a name or
    a YAML list), in order and once each.

    Raises:
        ConfigError: keyed ``plugins`` for a value that is not a module name or a list of them.

    Example::

        >>> plugin_names(["--plugins", "[a, b]", "--plugins=c"], lambda path: None)
        ['a', 'b', 'c']
    """
    import yaml

    values: list[Any] = []
    for i, arg in enumerate(argv):
        if (arg == "--config" and i + 1 < len(argv)) or arg.startswith("--config="):
            raw = read_yaml(argv[i + 1] if arg == "--config" else arg.split("=", 1)[1])
            if isinstance(raw, dict) and raw.get("plugins") is not None:
                values.append(raw["plugins"])
        elif (arg == "--plugins" and i + 1 < len(argv)) or arg.startswith("--plugins="):
            values.append(yaml.safe_load(argv[i + 1] if arg == "--plugins" else arg.split("=", 1)[1]))
    names: list[str] = []
    for value in values:
        for name in [value] if isinstance(value, str) else value if isinstance(value, list) else [value]:
            if not isinstance(name, str) or not name.strip():
                raise ConfigError("plugins", f"{name!r} is not a module name; give a list of module names, e.g. "
                                             "plugins: [my_axis]")
            if name not in names:
                names.append(name)
    return names


def load_plugins(names: Iterable[str], *, entry_point_group: str | None = PLUGIN_GROUP) -> list[str]:
    """Import the plug-in modules ``names`` and load the entry points of ``entry_point_group``; returns what was
    loaded (module names, then ``group:entry`` names).

    Raises:
        ConfigError: keyed ``plugins``, for a module that cannot be imported: one not found (the fix: put it on
            ``PYTHONPATH``), or one found that raised while being imported (its own exception, type and message,
            with its file and line: e.g. ``register_axis`` refusing its axis, or a dependency it imports missing).
    """
    loaded = []
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as err:
            if _not_found(name, err):
                raise ConfigError("plugins", f"cannot import {name!r}: no module of that name ({type(err).__name__}: "
                                             f"{err}); put the module on PYTHONPATH (or install its package), or fix "
                                             "its name") from err
            fix = (f"install {err.name!r}, which it imports, or fix the plug-in" if isinstance(err, ImportError)
                   and getattr(err, "name", None) else "fix the plug-in module (the error is its own)")
            raise ConfigError("plugins", f"{name!r} was found but failed while being imported{_where(err, name)}: "
                                         f"{type(err).__name__}: {err}; {fix}") from err
        loaded.append(name)
    if entry_point_group is not None:
        for entry in entry_points(group=entry_point_group):
            try:
                entry.load()
            except Exception as err:
                raise ConfigError("plugins", f"cannot load the entry point {entry.name!r} ({entry.value}) of "
                                             f"{entry_point_group}{_where(err, entry.module)} ({type(err).__name__}: "
                                             f"{err}); fix or uninstall its package") from err
            loaded.append(f"{entry_point_group}:{entry.name}")
    return loaded


def _not_found(name: str, err: BaseException) -> bool:
    """Whether ``err`` (raised importing module ``name``) says that ``name`` itself (or a package on its dotted path)
    is not on ``sys.path``, rather than that the module was found and something inside it failed (an import of a
    missing dependency included).

    Example::

        >>> _not_found("my_axis", ModuleNotFoundError("No module named 'my_axis'", name="my_axis"))
        True
        >>> _not_found("my_axis", ModuleNotFoundError("No module named 'scipy'", name="scipy"))
        False
    """
    missing = getattr(err, "name", None)
    return (isinstance(err, ModuleNotFoundError) and missing is not None
            and (name == missing or name.startswith(f"{missing}.")))


def _where(err: BaseException, module: str) -> str:
    """`` (FILE, line N)``: the innermost line of the failing module's own file in ``err``'s traceback (where the
    plug-in called what failed, e.g. its ``register_axis(...)``), else the innermost line of the traceback; ``""``
    when there is none."""
    import traceback

    frames = traceback.extract_tb(err.__traceback__)
    if not frames:
        return ""
    origin = None
    try:
        spec = importlib.util.find_spec(module)
        origin = spec.origin if spec is not None else None
    except (ImportError, ValueError):  # a parent package that fails itself, or a module without a spec
        pass
    own = [f for f in frames if origin is not None and f.filename == origin]
    frame = (own or frames)[-1]
    return f" ({frame.filename}, line {frame.lineno})"
