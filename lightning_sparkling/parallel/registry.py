"""The backend registry: :func:`register_backend` names a growth backend (its class by import path, so that
registering imports no Lightning), the CLI's ``strategy`` value for it and how a user selects it;
:func:`~lightning_sparkling.parallel.select_backend`, its error message and the CLI's strategy choices
(:func:`cli_strategies`) read it, never naming a backend.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

__all__ = ["BackendEntry", "backend_class", "cli_strategies", "register_backend", "registered_backends",
           "unregister_backend"]


@dataclass(frozen=True)
class BackendEntry:
    """One registered backend.

    Attributes:
        name: the backend's name (its ``name`` attribute).
        target: ``"package.module:Class"``, the :class:`~lightning_sparkling.parallel.base.BaseBackend` subclass,
            imported when a fit selects a backend.
        usage: how a user selects its strategy, for the message refusing an unsupported one (e.g.
            ``"strategy='ddp'"``).
        cli_strategy: the ``sparkling pretrain`` ``strategy`` value that trains under it (``None``: not offered by
            the CLI; ``auto`` picks one device or DDP).
    """

    name: str
    target: str
    usage: str
    cli_strategy: str | None = None


_BACKENDS: list[BackendEntry] = []


def register_backend(name: str, target: str, *, usage: str, cli_strategy: str | None = None) -> BackendEntry:
    """Add a backend (after those registered before it: the first whose class accepts a strategy is chosen).

    Raises:
        ValueError: for a name or CLI strategy a registered backend already has.

    Example::

        >>> entry = register_backend("toy", "my_package.toy:ToyBackend", usage="ToyStrategy()")
        >>> [e.name for e in registered_backends()][-1]
        'toy'
        >>> unregister_backend(entry)
    """
    for other in _BACKENDS:
        if other.name == name or (cli_strategy is not None and other.cli_strategy == cli_strategy):
            raise ValueError(f"backend {name!r} (cli_strategy={cli_strategy!r}) clashes with the registered backend "
                             f"{other.name!r} (cli_strategy={other.cli_strategy!r}); give it its own name")
    entry = BackendEntry(name, target, usage, cli_strategy)
    _BACKENDS.append(entry)
    return entry


def unregister_backend(entry: BackendEntry) -> None:
    """Remove a backend :func:`register_backend` added."""
    _BACKENDS.remove(entry)


def registered_backends() -> tuple[BackendEntry, ...]:
    """Every registered backend, in registration order."""
    return tuple(_BACKENDS)


def backend_class(entry: BackendEntry) -> type:
    """The backend class of ``entry`` (imported on first use)."""
    module, _, attr = entry.target.partition(":")
    return getattr(importlib.import_module(module), attr)


def cli_strategies() -> tuple[str, ...]:
    """The CLI's ``strategy`` choices: ``auto`` (one device, or DDP for several), then each registered backend's."""
    return ("auto", *(e.cli_strategy for e in _BACKENDS if e.cli_strategy is not None))
