"""The files of the embedded pretraining corpus, as pure functions: :func:`collect_corpus_files` lists the source
files (this machine's Python standard library by default, optionally every installed package, or a user directory)
as :class:`CorpusFile` entries with a stable relative ``key``; :func:`split_files` assigns each file to ``train`` or
``val`` from a hash of its key (deterministic, by file, so no text leaks between splits); :func:`cap_files` bounds the
size (``max_files`` / ``max_bytes``); :func:`corpus_splits` does all three for a run.

Nothing here reads a file's text except :func:`_read_text`, or imports torch or Lightning (the configuration checks
``data.data_dir`` with it before anything starts).
"""

from __future__ import annotations

import hashlib
import os
import sysconfig
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

__all__ = ["CorpusFile", "cap_files", "collect_corpus_files", "corpus_splits", "split_files"]

_SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})
_TEST_DIRS = frozenset({"test", "tests", "idle_test"})
_DATA_DIR_SUFFIXES = (".txt", ".py", ".md")


@dataclass(frozen=True)
class CorpusFile:
    """One source file of the corpus.

    Attributes:
        key: stable relative name (``"stdlib/json/decoder.py"``, ``"site-packages/yaml/nodes.py"``,
            ``"data/notes/a.md"``): the split hash and the cache key are computed from it.
        path: absolute path on this machine.
        size: size in bytes when listed.
    """

    key: str
    path: Path
    size: int


def _walk(root: Path, prefix: str, suffixes: Sequence[str], include_tests: bool) -> list[CorpusFile]:
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = Path(dirpath).relative_to(root)
        # prune in place so os.walk never descends into skipped folders
        dirnames[:] = sorted(d for d in dirnames
                             if d not in _SKIP_DIRS and not d.startswith(".")
                             and (include_tests or d not in _TEST_DIRS))
        for name in sorted(filenames):
            if not name.endswith(tuple(suffixes)):
                continue
            path = Path(dirpath) / name
            try:
                size = path.stat().st_size
            except OSError:  # broken link
                continue
            if size == 0:
                continue
            files.append(CorpusFile(key=f"{prefix}/{(rel_dir / name).as_posix()}", path=path, size=size))
    return files


def collect_corpus_files(source: Literal["stdlib", "stdlib+site-packages"] = "stdlib", *,
                         data_dir: str | Path | None = None, include_tests: bool = False,
                         suffixes: Sequence[str] | None = None) -> list[CorpusFile]:
    """List the corpus files, sorted by key.

    Args:
        source: ``"stdlib"``: every ``*.py`` under ``sysconfig.get_paths()["stdlib"]`` (its ``site-packages`` left
            out); ``"stdlib+site-packages"``: also every ``*.py`` under ``sysconfig.get_paths()["purelib"]`` (every
            installed pure-Python package). Ignored when ``data_dir`` is given.
        data_dir: a directory of the user's own text: every ``*.txt``, ``*.py`` and ``*.md`` below it.
        include_tests: keep files under ``test``/``tests``/``idle_test`` folders (left out by default: in
            the standard library they are 60% of the bytes and mostly repetitive fixtures).
        suffixes: file name endings to take (default: ``.py`` for the Python sources, ``.txt .py .md`` for
            ``data_dir``).

    Example::

        >>> files = collect_corpus_files("stdlib")
        >>> files[0].key.startswith("stdlib/") and all(f.key.endswith(".py") for f in files)
        True
    """
    if data_dir is not None:
        root = Path(data_dir).expanduser().resolve()
        if not root.is_dir():
            raise FileNotFoundError(f"data_dir={str(data_dir)!r} is not a directory")
        files = _walk(root, "data", suffixes or _DATA_DIR_SUFFIXES, include_tests=True)
        if not files:
            raise ValueError(f"data_dir={str(data_dir)!r} holds no non-empty file ending in "
                             f"{' '.join(suffixes or _DATA_DIR_SUFFIXES)}: put your text there (every such file "
                             "below it is read), or leave data_dir unset for the embedded corpus")
        return files
    if source not in ("stdlib", "stdlib+site-packages"):
        raise ValueError(f"source={source!r}: expected 'stdlib' or 'stdlib+site-packages' (or give data_dir=...)")
    suffixes = tuple(suffixes or (".py",))
    paths = sysconfig.get_paths()
    files = _walk(Path(paths["stdlib"]), "stdlib", suffixes, include_tests)
    if source == "stdlib+site-packages":
        files += _walk(Path(paths["purelib"]), "site-packages", suffixes, include_tests)
    if not files:
        raise RuntimeError(f"no Python sources found under {paths['stdlib']!r}: is this a stripped Python install?")
    return sorted(files, key=lambda f: f.key)


def _key_hash(key: str) -> int:
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big")


def split_files(files: Iterable[CorpusFile], val_percent: float) -> tuple[list[CorpusFile], list[CorpusFile]]:
    """Split files into ``(train, val)`` by a hash of their key: a file is validation when
    ``(int(sha256(key)[:8]) mod 10000) / 100 < val_percent``. Deterministic on every machine and process, independent of
    the file order and of the other files, and a file never lands in both splits.

    Args:
        files: the corpus files.
        val_percent: share of files (in percent, ``0 < val_percent < 100``) that go to validation.

    Example::

        >>> fs = [CorpusFile(f"data/{i}.txt", Path(f"/{i}.txt"), 1) for i in range(1000)]
        >>> train, val = split_files(fs, 10)
        >>> len(train) + len(val), 50 < len(val) < 150, not {f.key for f in train} & {f.key for f in val}
        (1000, True, True)
    """
    if not 0 < val_percent < 100:
        raise ValueError(f"val_percent={val_percent} must be in (0, 100)")
    train: list[CorpusFile] = []
    val: list[CorpusFile] = []
    for f in files:
        (val if (_key_hash(f.key) % 10000) < val_percent * 100 else train).append(f)
    return train, val


def cap_files(files: Sequence[CorpusFile], *, max_files: int | None = None, max_bytes: int | None = None,
              min_files: int = 1) -> list[CorpusFile]:
    """A deterministic subset of ``files``: walk them in hash order (a fixed pseudo-random order) and keep each file
    while at most ``max_files`` files and ``max_bytes`` bytes are taken (files that would overflow ``max_bytes`` are
    skipped); at least ``min_files`` (the smallest ones if needed). Returned sorted by key.

    Args:
        files: the files of one split.
        max_files: keep at most this many files (``None``: no limit).
        max_bytes: keep at most this many bytes (``None``: no limit).
        min_files: keep at least this many files even past ``max_bytes``.

    Example::

        >>> fs = [CorpusFile(f"data/{i}.txt", Path(f"/{i}.txt"), 100) for i in range(50)]
        >>> len(cap_files(fs, max_files=7)), len(cap_files(fs, max_bytes=1000)), len(cap_files(fs))
        (7, 10, 50)
    """
    if max_files is None and max_bytes is None:
        return sorted(files, key=lambda f: f.key)
    kept: list[CorpusFile] = []
    total = 0
    for f in sorted(files, key=lambda f: (_key_hash(f.key), f.key)):
        if max_files is not None and len(kept) >= max_files:
            break
        if max_bytes is not None and total + f.size > max_bytes:
            continue
        kept.append(f)
        total += f.size
    if len(kept) < min(min_files, len(files)):
        rest = sorted((f for f in files if f not in kept), key=lambda f: (f.size, f.key))
        kept += rest[: min_files - len(kept)]
    return sorted(kept, key=lambda f: f.key)


def corpus_splits(source: str, data_dir: Path | None, include_tests: bool, val_percent: float,
                   max_files: int | None, max_bytes: int | None) -> tuple[list[CorpusFile], list[CorpusFile]]:
    """``(train, val)`` files of a corpus: collected (:func:`collect_corpus_files`), split by hash
    (:func:`split_files`) and capped (:func:`cap_files`), ``max_files`` and ``max_bytes`` shared between the splits
    in proportion to ``val_percent`` (at least one file and one byte each).

    Raises:
        ValueError: a split is empty.
    """
    source_name = cast(Literal["stdlib", "stdlib+site-packages"], source)  # checked by the data module and resolve
    files = collect_corpus_files(source_name, data_dir=data_dir, include_tests=include_tests)
    train, val = split_files(files, val_percent)
    share = val_percent / 100
    val_max_files = None if max_files is None else max(1, round(max_files * share))
    train_max_files = None if max_files is None or val_max_files is None else max(1, max_files - val_max_files)
    val_max_bytes = None if max_bytes is None else max(1, int(max_bytes * share))
    train_max_bytes = None if max_bytes is None or val_max_bytes is None else max(1, max_bytes - val_max_bytes)
    train_files = cap_files(train, max_files=train_max_files, max_bytes=train_max_bytes)
    val_files = cap_files(val, max_files=val_max_files, max_bytes=val_max_bytes)
    if not train_files or not val_files:
        empty = "train" if not train_files else "validation"
        raise ValueError(f"the {empty} split is empty ({len(files)} files, val_percent={val_percent}): "
                         "adjust val_percent or add data")
    return train_files, val_files


def _read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _iter_texts(files: Iterable[CorpusFile]) -> Iterator[str]:
    for f in files:
        yield _read_text(f.path)
