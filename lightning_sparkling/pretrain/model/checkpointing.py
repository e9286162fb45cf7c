"""Atomic Lightning checkpoints: a checkpoint is written under a hidden temporary name in its own folder and renamed
into place once complete, so a process killed mid-write (preemption, SIGKILL, out of memory) never leaves a truncated
``step-XXXXXXXX.ckpt`` that ``resume: auto`` would pick up; the previous checkpoints stay intact.

- :class:`AtomicCheckpointIO`: Lightning's ``TorchCheckpointIO`` for whole-file checkpoints (single device, DDP):
  ``torch.save`` into ``.<name>.<random>.tmp`` beside the target, ``fsync``, ``os.replace``.
- :class:`AtomicModelParallelStrategy` / :class:`AtomicFSDPStrategy`: Lightning's FSDP2 / FSDP1 strategies whose
  sharded checkpoint *directories* are written by every rank into ``.<name>.tmp/``, then renamed by rank 0;
  :func:`atomic_strategy` does the same to whatever strategy a growth backend makes for the CLI (:func:`atomic_class`:
  the strategy's class with the :class:`_AtomicShardedSave` mixin).
- :func:`remove_stale_temporaries`: the temporaries a killed write left behind (removed before each new write).

Temporary names start with ``.`` and do not end in ``.ckpt``, so :func:`~lightning_sparkling.pretrain.config.resolve.
find_resume_checkpoint` never takes one for a checkpoint.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import secrets
import shutil
from pathlib import Path
from typing import IO, Any
from collections.abc import Callable

from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy, Strategy

__all__ = ["AtomicCheckpointIO", "AtomicFSDPStrategy", "AtomicModelParallelStrategy", "atomic_class", "atomic_save",
           "atomic_strategy", "publish_dir", "remove_stale_temporaries"]

_TEMPORARY = re.compile(r"\.(?P<name>.+\.ckpt)\.(?:[0-9a-f]+\.tmp|tmp|old-[0-9a-f]+)")
"""Names of the temporaries: ``.<name>.<hex>.tmp`` (file being written), ``.<name>.tmp`` (sharded directory being
written), ``.<name>.old-<hex>`` (the checkpoint a new one of the same name replaces, while it is swapped)."""


def _write_torch(obj: Any, file: IO[bytes]) -> None:
    """``torch.save`` of ``obj`` into the open ``file`` (the step a killed process interrupts)."""
    import torch

    torch.save(obj, file)


def _fsync_dir(folder: Path) -> None:
    """Flush ``folder``'s entries (a rename) to disk where the platform allows it."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _open_temporary(path: Path) -> tuple[Path, int]:
    """A new, empty ``.<name>.<hex>.tmp`` beside ``path`` (created exclusively, mode from the umask) and its fd."""
    while True:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:  # pragma: no cover - a 32-bit random collision
            continue


def atomic_save(obj: Any, path: Path, write: Callable[[Any, IO[bytes]], object] | None = None) -> None:
    """Write ``obj`` to ``path`` atomically: into a temporary file in the same folder, flushed to disk, then
    ``os.replace``-d onto ``path``. Killed at any point, ``path`` is either its old content (or absent) or the
    complete new one; on an exception the temporary file is removed.

    Args:
        obj: what to save.
        path: the checkpoint file (its folder is created).
        write: writes ``obj`` into an open binary file (``None``: ``torch.save``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp, fd = _open_temporary(path)
    try:
        with os.fdopen(fd, "wb") as file:
            (write or _write_torch)(obj, file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


def orphaned_original(path: Path) -> Path | None:
    """For a swapped-aside checkpoint ``.<name>.old-<hex>`` whose ``<name>`` no longer exists (a kill between the two
    renames of :func:`publish_dir`), the path it belongs at; else ``None``. It is then the only copy of that
    checkpoint, complete."""
    match = _TEMPORARY.fullmatch(path.name)
    if match is None or ".old-" not in path.name:
        return None
    original = path.parent / match.group("name")
    return None if original.exists() or original.is_symlink() else original


def remove_stale_temporaries(folder: Path) -> list[Path]:
    """Remove the checkpoint temporaries (:data:`_TEMPORARY` names) a killed write left in ``folder``; a
    swapped-aside checkpoint whose name is free again (:func:`orphaned_original`) is renamed back instead.

    Returns:
        the paths removed.
    """
    removed = []
    for path in Path(folder).iterdir() if Path(folder).is_dir() else []:
        if (original := orphaned_original(path)) is not None:
            os.replace(path, original)
            continue
        if _TEMPORARY.fullmatch(path.name):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                with contextlib.suppress(OSError):
                    path.unlink()
            removed.append(path)
    return removed


def publish_dir(tmp: Path, final: Path) -> None:
    """Move the complete directory ``tmp`` to ``final``; an existing ``final`` is first renamed aside (a directory
    cannot be replaced in one rename), then removed."""
    old = None
    if final.exists() or final.is_symlink():
        old = final.parent / f".{final.name}.old-{secrets.token_hex(4)}"
        os.replace(final, old)
    os.replace(tmp, final)
    _fsync_dir(final.parent)
    if old is not None:
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink()


def _is_local(path: Any) -> bool:
    """Whether ``path`` is a local file path (not an ``s3://``-style URL that fsspec writes)."""
    text = str(path)
    return "://" not in text or text.startswith("file://")


class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's ``TorchCheckpointIO`` with atomic local writes (:func:`atomic_save`): a killed process leaves the
    previous checkpoints intact and at most a hidden ``.<name>.<hex>.tmp`` (removed by the next write). Remote
    (fsspec URL) paths are written by ``TorchCheckpointIO``."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        """Save ``checkpoint`` to ``path`` atomically (see the class)."""
        if storage_options is not None or not _is_local(path):
            return super().save_checkpoint(checkpoint, path, storage_options=storage_options)
        path = Path(str(path).removeprefix("file://"))
        remove_stale_temporaries(path.parent)
        atomic_save(checkpoint, path)
        return None


def _writes_sharded(strategy: Any) -> bool:
    """Whether a Lightning FSDP strategy saves sharded directories (FSDP2's ``_save_distributed_checkpoint``, FSDP1's
    ``state_dict_type="sharded"``) rather than one full file (which goes through its ``checkpoint_io``)."""
    if hasattr(strategy, "_save_distributed_checkpoint"):
        return bool(strategy._save_distributed_checkpoint)
    return getattr(strategy, "_state_dict_type", None) == "sharded"


class _AtomicShardedSave:
    """Mixin of :class:`AtomicModelParallelStrategy` and :class:`AtomicFSDPStrategy`: sharded checkpoint directories
    are written atomically. Rank 0 clears stale temporaries, every rank writes its shards into ``.<name>.tmp/`` beside
    the target, and once all are done rank 0 renames it into place (:func:`publish_dir`). Full-file checkpoints go
    through the strategy's ``checkpoint_io`` (:class:`AtomicCheckpointIO` in the CLI)."""

    def save_checkpoint(self, checkpoint: dict[str, Any], filepath: Any, storage_options: Any | None = None) -> None:
        """Save ``checkpoint`` to the directory ``filepath`` atomically (see the class)."""
        if storage_options is not None or not _writes_sharded(self) or not _is_local(filepath):
            return super().save_checkpoint(checkpoint, filepath, storage_options)  # type: ignore[misc]
        path = Path(self.broadcast(str(filepath)))  # type: ignore[attr-defined]
        tmp = path.parent / f".{path.name}.tmp"
        if self.is_global_zero:  # type: ignore[attr-defined]
            path.parent.mkdir(parents=True, exist_ok=True)
            remove_stale_temporaries(path.parent)
        self.barrier("sparkling_checkpoint_start")  # type: ignore[attr-defined]
        super().save_checkpoint(checkpoint, tmp)  # type: ignore[misc]
        self.barrier("sparkling_checkpoint_written")  # type: ignore[attr-defined]
        if self.is_global_zero:  # type: ignore[attr-defined]
            publish_dir(tmp, path)
        self.barrier("sparkling_checkpoint_published")  # type: ignore[attr-defined]
        return None


class AtomicModelParallelStrategy(_AtomicShardedSave, ModelParallelStrategy):
    """Lightning's ``ModelParallelStrategy`` (FSDP2) writing its sharded checkpoint directories atomically."""


class AtomicFSDPStrategy(_AtomicShardedSave, FSDPStrategy):
    """Lightning's ``FSDPStrategy`` (FSDP1) writing its sharded checkpoint directories atomically."""


@functools.cache
def atomic_class(cls: type[Strategy]) -> type[Strategy]:
    """``cls`` (a Lightning ``Strategy`` class) writing its sharded checkpoint directories atomically: the
    :class:`_AtomicShardedSave` mixin before it, one class per ``cls`` (``ModelParallelStrategy`` gives
    :class:`AtomicModelParallelStrategy`, ``FSDPStrategy`` :class:`AtomicFSDPStrategy`; an ``Atomic`` class itself).

    Example::

        >>> atomic_class(FSDPStrategy) is AtomicFSDPStrategy, atomic_class(AtomicFSDPStrategy) is AtomicFSDPStrategy
        (True, True)
    """
    if issubclass(cls, _AtomicShardedSave):
        return cls
    if cls in _KNOWN:
        return _KNOWN[cls]
    name = f"Atomic{cls.__name__}"
    made = type(name, (_AtomicShardedSave, cls), {"__module__": __name__, "__doc__": f"``{cls.__name__}`` writing "
                                                                                      "its sharded checkpoint "
                                                                                      "directories atomically."})
    globals().setdefault(name, made)  # found by name, so pickling an instance (spawn launchers) works
    return made


_KNOWN: dict[type[Strategy], type[Strategy]] = {ModelParallelStrategy: AtomicModelParallelStrategy,
                                                FSDPStrategy: AtomicFSDPStrategy}


def atomic_strategy(strategy: Any) -> Any:
    """``strategy`` as the CLI trains under it: a ``Strategy`` that writes sharded checkpoint directories
    (:func:`_writes_sharded`) gives an instance of its :func:`atomic_class` holding the same attribute objects (its
    settings: it is freshly made, not set up yet; the two share them, so use the returned one only, as
    :func:`~lightning_sparkling.pretrain.training.trainer._strategy` does); anything else (a strategy name, a strategy
    writing whole files through its ``checkpoint_io``) is returned as it is.

    Args:
        strategy: what a backend's ``make_strategy`` returned.

    Example::

        >>> type(atomic_strategy(ModelParallelStrategy(data_parallel_size=1, tensor_parallel_size=1))).__name__
        'AtomicModelParallelStrategy'
        >>> atomic_strategy("ddp")
        'ddp'
    """
    if not isinstance(strategy, Strategy) or not _writes_sharded(strategy):
        return strategy
    cls = atomic_class(type(strategy))
    atomic = cls.__new__(cls)
    vars(atomic).update(vars(strategy))
    return atomic
