"""The backend registry: :func:`register_backend` names a growth backend (its class by import path, so that
registering imports no Lightning), the CLI's ``strategy`` value for it (and its deprecated aliases), how a user
selects it, and what the CLI's configuration checks need to know of it before Lightning is imported (CUDA only,
``compile`` / ``activation_checkpointing`` support, whether the optimizer sees whole 2-D matrices);
:func:`~lightning_sparkling.parallel.select_backend`, its error message, the CLI's strategy choices
(:func:`cli_strategies`, :func:`cli_backend`) and the CLI's Trainer and module (:func:`backend_class_for`) read it,
never naming a backend.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightning_sparkling.parallel.base import BaseBackend

__all__ = ["BackendEntry", "backend_class", "backend_class_for", "backend_entry_for", "cli_backend", "cli_strategies",
           "register_backend", "registered_backends", "unregister_backend"]


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
        cli_aliases: other ``strategy`` values that select it, deprecated: the CLI accepts them with a ``note:``
            naming :attr:`cli_strategy` (e.g. ``fsdp`` for ``fsdp1``, until ``alias_until``).
        alias_until: the release that drops :attr:`cli_aliases`, for that note.
        cli_help: a few words on it for the CLI's messages (e.g. ``"FSDP2 sharding"``).
        cuda_only: the CLI refuses it on another accelerator.
        supports_compile: ``compile`` works under it (``compile: auto`` is off otherwise, ``true`` refused).
        supports_activation_checkpointing: ``activation_checkpointing: true`` works under it.
        whole_matrices: its optimizer sees whole 2-D matrices (Muon needs them; FSDP1 hands flat 1-D shards).
    """

    name: str
    target: str
    usage: str
    cli_strategy: str | None = None
    cli_aliases: tuple[str, ...] = ()
    alias_until: str | None = None
    cli_help: str = ""
    cuda_only: bool = False
    supports_compile: bool = True
    supports_activation_checkpointing: bool = True
    whole_matrices: bool = True

    def cli_label(self) -> str:
        """Its CLI value with :attr:`cli_help` (and ``CUDA only``) for messages: ``"fsdp2 (FSDP2 sharding)"``,
        ``"fsdp1 (FSDP1, CUDA only)"``."""
        words = ", ".join(w for w in (self.cli_help, "CUDA only" if self.cuda_only else "") if w)
        return f"{self.cli_strategy} ({words})" if words else str(self.cli_strategy)

    def supports(self, key: str) -> bool:
        """Whether ``key`` (``"compile"`` or ``"activation_checkpointing"``) works under this backend's strategy.

        Example::

            >>> BackendEntry("x", "m:X", "X()", supports_compile=False).supports("compile")
            False
        """
        return {"compile": self.supports_compile,
                "activation_checkpointing": self.supports_activation_checkpointing}[key]


_BACKENDS: list[BackendEntry] = []


def register_backend(name: str, target: str, *, usage: str, cli_strategy: str | None = None,
                     cli_aliases: tuple[str, ...] = (), **facts: Any) -> BackendEntry:
    """Add a backend (after those registered before it: the first whose class accepts a strategy is chosen).

    Args:
        name: the backend's name.
        target: ``"package.module:Class"`` of its class (imported on first use).
        usage: how a user selects its strategy (for the message refusing an unsupported one).
        cli_strategy: the CLI's ``strategy`` value for it (``None``: not offered by the CLI).
        cli_aliases: deprecated CLI values that select it too (with a ``note:``).
        facts: the other :class:`BackendEntry` fields (``alias_until``, ``cli_help``, ``cuda_only``,
            ``supports_compile``, ``supports_activation_checkpointing``, ``whole_matrices``).

    Raises:
        ValueError: for a name or CLI value (strategy or alias) a registered backend already has.

    Example::

        >>> entry = register_backend("toy", "my_package.toy:ToyBackend", usage="ToyStrategy()", cli_strategy="toy2",
        ...                          cli_aliases=("toy",), cli_help="a toy", cuda_only=True)
        >>> [e.name for e in registered_backends()][-1], cli_strategies()[-1], cli_backend("toy") is entry
        ('toy', 'toy2', True)
        >>> unregister_backend(entry)
    """
    values = {cli_strategy, *cli_aliases} - {None}
    if "auto" in values:
        raise ValueError(f"backend {name!r}: the CLI strategy 'auto' is not a backend's")
    for other in _BACKENDS:
        if other.name == name or values & {other.cli_strategy, *other.cli_aliases}:
            raise ValueError(f"backend {name!r} (cli_strategy={cli_strategy!r}, cli_aliases={cli_aliases!r}) clashes "
                             f"with the registered backend {other.name!r} (cli_strategy={other.cli_strategy!r}, "
                             f"cli_aliases={other.cli_aliases!r}); give it its own name")
    entry = BackendEntry(name, target, usage, cli_strategy, tuple(cli_aliases), **facts)
    _BACKENDS.append(entry)
    return entry


def unregister_backend(entry: BackendEntry) -> None:
    """Remove a backend :func:`register_backend` added."""
    _BACKENDS.remove(entry)


def registered_backends() -> tuple[BackendEntry, ...]:
    """Every registered backend, in registration order."""
    return tuple(_BACKENDS)


def backend_class(entry: BackendEntry) -> type[BaseBackend]:
    """The backend class of ``entry`` (imported on first use)."""
    module, _, attr = entry.target.partition(":")
    return getattr(importlib.import_module(module), attr)


def cli_strategies() -> tuple[str, ...]:
    """The CLI's ``strategy`` choices: ``auto`` (one device, or DDP for several), then each registered backend's
    (deprecated aliases are accepted by :func:`cli_backend` but not listed)."""
    return ("auto", *(e.cli_strategy for e in _BACKENDS if e.cli_strategy is not None))


def cli_backend(value: str) -> BackendEntry | None:
    """The backend the CLI's ``strategy: value`` selects, by its :attr:`~BackendEntry.cli_strategy` or one of its
    :attr:`~BackendEntry.cli_aliases`; ``None`` for ``auto`` and for a value no backend has.

    Example::

        >>> cli_backend("fsdp1").name, cli_backend("fsdp2").cli_strategy, cli_backend("auto")
        ('fsdp1', 'fsdp2', None)
    """
    for entry in _BACKENDS:
        if value is not None and (value == entry.cli_strategy or value in entry.cli_aliases):
            return entry
    return None


def backend_entry_for(strategy: Any) -> BackendEntry | None:
    """The first registered backend whose class accepts the Lightning ``strategy`` (its settings unchecked: a
    user's own strategy without growth is welcome), ``None`` when none does."""
    for entry in _BACKENDS:
        if backend_class(entry).accepts(strategy):
            return entry
    return None


def backend_class_for(strategy: Any) -> type[BaseBackend] | None:
    """The class of :func:`backend_entry_for` (``None`` when no backend accepts ``strategy``).

    Example::

        cls = backend_class_for(self.trainer.strategy)   # in LightningModule.configure_model
        if cls is not None:
            self.model = cls.prepare_model(self, self.model)
    """
    entry = backend_entry_for(strategy)
    return None if entry is None else backend_class(entry)
