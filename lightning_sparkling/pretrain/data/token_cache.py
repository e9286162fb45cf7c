"""The on-disk token cache of a corpus: one folder per file list and vocabulary (``cache_dir/corpus-<key>/``, or
``corpus-tok-<key>/`` for a given tokenizer: :func:`corpus_cache_key`, :func:`_corpus_cache_path`) holding each split
as a flat ``uint16`` (``int32`` above 65535 tokens) file with one EOS after every source file
(:func:`_tokenize_to_file`) and a ``meta.json`` (:func:`_read_cache_meta`), built in a temporary folder and renamed
into place (:func:`_publish_cache`). The builders are
:func:`~lightning_sparkling.pretrain.data.datamodule.build_corpus_cache` and
:func:`~lightning_sparkling.pretrain.data.datamodule.build_tokenized_cache`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from lightning_sparkling.pretrain.data.corpus import CorpusFile, _read_text

__all__ = ["CACHE_FORMAT_VERSION", "DEFAULT_CACHE_DIR", "corpus_cache_key"]

DEFAULT_CACHE_DIR = Path("~/.cache/lightning_sparkling")
"""Where tokenizers and tokenized corpora are cached unless ``cache_dir`` is given."""

CACHE_FORMAT_VERSION = 1
"""Bumped whenever the cache layout or tokenization changes, so stale caches are never reused."""

_TOKENIZE_CHUNK_FILES = 256


def corpus_cache_key(train_files: Sequence[CorpusFile], val_files: Sequence[CorpusFile], vocab_size: int) -> str:
    """Hex digest naming a corpus cache: the format version, the vocabulary size, and every file's key, absolute path
    and size in each split.

    Example::

        >>> a = [CorpusFile("data/a.txt", Path("/a.txt"), 3)]
        >>> corpus_cache_key(a, [], 512) == corpus_cache_key(a, [], 512) != corpus_cache_key(a, [], 1024)
        True
    """
    payload = {"version": CACHE_FORMAT_VERSION, "vocab_size": int(vocab_size),
               "train": [[f.key, str(f.path), f.size] for f in train_files],
               "val": [[f.key, str(f.path), f.size] for f in val_files]}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def _tokenizer_corpus_key(train_files: Sequence[CorpusFile], val_files: Sequence[CorpusFile],
                          tokenizer_dir: Path) -> str:
    """Hex digest naming the cache of a corpus tokenized by an existing tokenizer: the file list (as
    :func:`corpus_cache_key` with vocabulary size 0) and the bytes of ``tokenizer_dir/tokenizer.json``."""
    tok_hash = hashlib.sha256((tokenizer_dir / "tokenizer.json").read_bytes()).hexdigest()
    return hashlib.sha256((corpus_cache_key(train_files, val_files, 0) + tok_hash).encode()).hexdigest()


def _corpus_cache_path(cache_dir: Path, train_files: Sequence[CorpusFile], val_files: Sequence[CorpusFile],
                       vocab_size: int, tokenizer_dir: Path | None) -> Path:
    """The cache folder :func:`build_corpus_cache` (``corpus-<key>``) or, with ``tokenizer_dir``,
    :func:`build_tokenized_cache` (``corpus-tok-<key>``) writes for these splits."""
    if tokenizer_dir is not None:
        return cache_dir / f"corpus-tok-{_tokenizer_corpus_key(train_files, val_files, tokenizer_dir)[:20]}"
    return cache_dir / f"corpus-{corpus_cache_key(train_files, val_files, vocab_size)[:20]}"


def _token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16) if vocab_size <= np.iinfo(np.uint16).max + 1 else np.dtype(np.int32)


def _tokenize_to_file(tokenizer, files: Sequence[CorpusFile], path: Path, dtype: np.dtype, eos_id: int) -> int:
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)
    n_tokens = 0
    with open(path, "wb") as fh:
        for start in range(0, len(files), _TOKENIZE_CHUNK_FILES):
            chunk = files[start:start + _TOKENIZE_CHUNK_FILES]
            for enc in encode([_read_text(f.path) for f in chunk], add_special_tokens=False):
                ids = np.asarray(enc.ids + [eos_id], dtype=dtype)
                ids.tofile(fh)
                n_tokens += ids.size
    return n_tokens


def _publish_cache(tmp: Path, final: Path, meta: dict[str, Any]) -> bool:
    """Write ``meta.json`` into the finished temporary cache ``tmp`` and rename it to ``final``; ``False`` when
    another process published the same cache first (its copy is kept)."""
    (tmp / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    os.chmod(tmp, 0o755)  # mkdtemp makes it private; the cache is plain readable data
    try:
        os.rename(tmp, final)
    except OSError:
        if not (final / "meta.json").is_file():
            raise
        return False
    return True


def _read_cache_meta(cache_path: Path) -> dict[str, Any]:
    """The ``meta.json`` of a corpus cache (``RuntimeError`` when the cache has not been built)."""
    meta_path = cache_path / "meta.json"
    if not meta_path.is_file():
        raise RuntimeError(f"no corpus cache at {cache_path}: prepare_data() has not run (under several "
                           "nodes without a shared cache_dir keep prepare_data_per_node=True)")
    return json.loads(meta_path.read_text())
