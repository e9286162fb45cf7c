"""Embedded pretraining corpus: Python sources on this machine, a byte-level BPE tokenizer, and a resumable
``LightningDataModule`` of fixed-length token windows.

Data flows top to bottom, each step a pure function where it can be:

1. :func:`collect_corpus_files` lists the source files (the standard library by default, optionally every installed
   package, or a user directory) as :class:`CorpusFile` entries with a stable relative ``key``.
2. :func:`split_files` assigns each file to ``train`` or ``val`` from a hash of its key (deterministic, by file,
   so no text leaks between splits); :func:`cap_files` optionally bounds the size (``max_files`` / ``max_bytes``).
3. :func:`train_tokenizer` fits a byte-level BPE (``tokenizers``) on the train split; :func:`save_tokenizer_dir`
   writes it in litgpt's checkpoint format (``tokenizer.json``, ``tokenizer_config.json``,
   ``generation_config.json``) so ``litgpt.tokenizer.Tokenizer(dir)`` loads it.
4. :func:`build_corpus_cache` tokenizes each split into a flat ``uint16`` (``int32`` for vocabularies above 65535)
   file, one ``<|endoftext|>`` after every source file, in a cache directory keyed by a hash of the file list and the
   vocabulary size. A complete cache is reused, never rebuilt.
5. :class:`TextCorpusDataModule` serves ``(seq_len + 1)``-token windows: seeded random windows for training
   (:class:`RandomWindowDataset` + :class:`ResumableWindowSampler`, exact on resume) and contiguous windows for
   validation (:class:`ContiguousWindowDataset`): the whole split, or a fixed, seeded sample of windows spread over
   all of it (:func:`spread_sample`, ``val_windows=``), the same at every evaluation and on resume.

Steps 1-2 live in :mod:`~lightning_sparkling.pretrain.data.corpus`, step 3 in
:mod:`~lightning_sparkling.pretrain.data.bpe`, the cache's layout in
:mod:`~lightning_sparkling.pretrain.data.token_cache` and the windows in
:mod:`~lightning_sparkling.pretrain.data.windows`. This module builds the cache (step 4) and serves it (step 5).
"""

from __future__ import annotations

import shutil
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import lightning as L
import torch
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from torch.utils.data import DataLoader
from typing_extensions import override

from lightning_sparkling.pretrain.data.bpe import EOS_TOKEN, save_tokenizer_dir, train_tokenizer
from lightning_sparkling.pretrain.data.corpus import CorpusFile, _iter_texts, corpus_splits
from lightning_sparkling.pretrain.data.token_cache import (CACHE_FORMAT_VERSION, DEFAULT_CACHE_DIR, _corpus_cache_path,
                                                           _publish_cache, _read_cache_meta, _token_dtype,
                                                           _tokenize_to_file, _tokenizer_corpus_key, corpus_cache_key)
from lightning_sparkling.pretrain.data.windows import (ContiguousWindowDataset, RandomWindowDataset,
                                                       ResumableWindowSampler)

if TYPE_CHECKING:
    from litgpt.tokenizer import Tokenizer as LitTokenizer

# build_corpus_cache looks train_tokenizer up here (tests patch it here)
__all__ = ["TextCorpusDataModule", "build_corpus_cache", "build_tokenized_cache"]


# ------------------------------------------------------------------------------------------------------------ cache
def build_corpus_cache(train_files: Sequence[CorpusFile], val_files: Sequence[CorpusFile], vocab_size: int,
                       cache_dir: str | Path) -> Path:
    """Train the tokenizer on ``train_files`` and tokenize both splits into
    ``cache_dir/corpus-<key>/`` (``tokenizer/``, ``train.bin``, ``val.bin``, ``meta.json``), unless that complete
    cache already exists (then nothing is read, trained or written). Written to a temporary folder first and renamed
    into place, so concurrent or interrupted builds never leave a partial cache behind.

    Args:
        train_files / val_files: the two splits.
        vocab_size: BPE vocabulary size.
        cache_dir: the cache root.

    Returns:
        the cache folder.

    Example::

        >>> import tempfile
        >>> from lightning_sparkling.pretrain.data.corpus import cap_files, collect_corpus_files, split_files
        >>> fs = collect_corpus_files("stdlib")
        >>> train, val = split_files(fs, 20)
        >>> d = build_corpus_cache(cap_files(train, max_files=4), cap_files(val, max_files=2), 300, tempfile.mkdtemp())
        >>> sorted(p.name for p in d.iterdir())
        ['meta.json', 'tokenizer', 'train.bin', 'val.bin']
    """
    if not train_files:
        raise ValueError("the train split is empty: lower val_percent or raise max_files/max_bytes")
    if not val_files:
        raise ValueError("the validation split is empty: raise val_percent or max_files/max_bytes")
    cache_root = Path(cache_dir).expanduser()
    key = corpus_cache_key(train_files, val_files, vocab_size)
    final = cache_root / f"corpus-{key[:20]}"
    if (final / "meta.json").is_file():
        return final
    cache_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{key[:12]}-", dir=cache_root))
    try:
        _train_and_tokenize(tmp, final, train_files, val_files, vocab_size, key)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def _train_and_tokenize(tmp: Path, final: Path, train_files: Sequence[CorpusFile], val_files: Sequence[CorpusFile],
                        vocab_size: int, key: str) -> None:
    """The body of :func:`build_corpus_cache`: train the tokenizer (:func:`train_tokenizer`, looked up in this
    module) into ``tmp/tokenizer``, tokenize both splits into ``tmp``, publish ``tmp`` as ``final`` and say so."""
    t0 = time.perf_counter()
    tokenizer = train_tokenizer(_iter_texts(train_files), vocab_size, length=len(train_files))
    t_train = time.perf_counter() - t0
    save_tokenizer_dir(tokenizer, tmp / "tokenizer")
    actual_vocab = tokenizer.get_vocab_size()
    dtype = _token_dtype(actual_vocab)
    eos_id = tokenizer.token_to_id(EOS_TOKEN)
    assert eos_id is not None  # train_tokenizer adds EOS_TOKEN
    t0 = time.perf_counter()
    n_train = _tokenize_to_file(tokenizer, train_files, tmp / "train.bin", dtype, eos_id)
    n_val = _tokenize_to_file(tokenizer, val_files, tmp / "val.bin", dtype, eos_id)
    t_tok = time.perf_counter() - t0
    meta = {
        "version": CACHE_FORMAT_VERSION, "key": key, "vocab_size": actual_vocab,
        "requested_vocab_size": int(vocab_size), "eos_id": eos_id, "dtype": dtype.name,
        "train_tokens": n_train, "val_tokens": n_val,
        "train_bytes": sum(f.size for f in train_files), "val_bytes": sum(f.size for f in val_files),
        "train_files": [f.key for f in train_files], "val_files": [f.key for f in val_files],
        "tokenizer_train_seconds": round(t_train, 3), "tokenize_seconds": round(t_tok, 3),
    }
    if _publish_cache(tmp, final, meta):
        rank_zero_info(f"[lightning_sparkling] corpus cache built at {final}: tokenizer trained in {t_train:.1f}s "
                       f"on {meta['train_bytes'] / 1e6:.1f} MB ({len(train_files)} files), vocab {actual_vocab}; "
                       f"{n_train:,} train / {n_val:,} val tokens in {t_tok:.1f}s")


def build_tokenized_cache(train_files: Sequence[CorpusFile], val_files: Sequence[CorpusFile],
                          tokenizer_dir: str | Path, cache_dir: str | Path) -> Path:
    """Tokenize both splits with an existing tokenizer (``tokenizer_dir/tokenizer.json``, e.g. a litgpt checkpoint
    dir) into ``cache_dir/corpus-tok-<key>/`` (``train.bin``, ``val.bin``, ``meta.json``), unless that cache exists.
    The key covers the file list and the tokenizer's bytes. Documents are separated by the tokenizer's eos token.
    Written to a temporary folder and renamed into place, like :func:`build_corpus_cache`.

    Args:
        train_files / val_files: the two splits.
        tokenizer_dir: folder with ``tokenizer.json`` (and optionally litgpt's ``tokenizer_config.json``).
        cache_dir: the cache root.

    Returns:
        the cache folder.

    Raises:
        FileNotFoundError: no ``tokenizer.json`` in ``tokenizer_dir``.
        ValueError: the tokenizer has no eos token.
    """
    from litgpt.tokenizer import Tokenizer as LitTokenizer

    tokenizer_dir = Path(tokenizer_dir).expanduser().resolve()
    if not (tokenizer_dir / "tokenizer.json").is_file():
        raise FileNotFoundError(f"tokenizer_dir={str(tokenizer_dir)!r} has no tokenizer.json")
    key = _tokenizer_corpus_key(train_files, val_files, tokenizer_dir)
    cache_root = Path(cache_dir).expanduser()
    final = cache_root / f"corpus-tok-{key[:20]}"
    if (final / "meta.json").is_file():
        return final
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    eos_id = LitTokenizer(tokenizer_dir).eos_id
    if eos_id is None:
        eos_id = tokenizer.token_to_id(EOS_TOKEN)
    if eos_id is None:
        raise ValueError(f"tokenizer_dir={str(tokenizer_dir)!r}: the tokenizer has no eos token to separate documents")
    vocab = tokenizer.get_vocab_size()
    dtype = _token_dtype(vocab)
    cache_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-tok-", dir=cache_root))
    try:
        n_train = _tokenize_to_file(tokenizer, train_files, tmp / "train.bin", dtype, eos_id)
        n_val = _tokenize_to_file(tokenizer, val_files, tmp / "val.bin", dtype, eos_id)
        meta = {"version": CACHE_FORMAT_VERSION, "key": key, "vocab_size": vocab, "requested_vocab_size": vocab,
                "eos_id": eos_id, "dtype": dtype.name, "train_tokens": n_train, "val_tokens": n_val,
                "tokenizer_dir": str(tokenizer_dir),
                "train_files": [f.key for f in train_files], "val_files": [f.key for f in val_files]}
        _publish_cache(tmp, final, meta)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


# ------------------------------------------------------------------------------------------------------------ module
def _check_datamodule_args(seq_len: int, batch_size: int, val_percent: float, max_files: int | None,
                           max_bytes: int | None, source: str, val_windows: int | None) -> None:
    """Raise ``ValueError`` for :class:`TextCorpusDataModule` arguments out of range."""
    if seq_len < 1:
        raise ValueError(f"seq_len={seq_len} must be >= 1")
    if batch_size < 1:
        raise ValueError(f"batch_size={batch_size} must be >= 1")
    if not 0 < val_percent < 100:
        raise ValueError(f"val_percent={val_percent} must be in (0, 100)")
    if max_files is not None and max_files < 2:
        raise ValueError(f"max_files={max_files} must be >= 2 (one file per split at least)")
    if max_bytes is not None and max_bytes < 1:
        raise ValueError(f"max_bytes={max_bytes} must be positive")
    if source not in ("stdlib", "stdlib+site-packages"):
        raise ValueError(f"source={source!r}: expected 'stdlib' or 'stdlib+site-packages' (or data_dir=...)")
    if val_windows is not None and val_windows < 1:
        raise ValueError(f"val_windows={val_windows} must be >= 1 (or None: the whole validation split)")


def _given_tokenizer_dir(tokenizer_dir: str | Path | None) -> Path | None:
    """``tokenizer_dir`` resolved, checked to hold a ``tokenizer.json`` (``None`` stays ``None``)."""
    if tokenizer_dir is None:
        return None
    path = Path(tokenizer_dir).expanduser().resolve()
    if not (path / "tokenizer.json").is_file():
        raise FileNotFoundError(f"tokenizer_dir={str(tokenizer_dir)!r} has no tokenizer.json: give a folder "
                                "holding one (e.g. a litgpt checkpoint dir), or leave tokenizer_dir unset to "
                                "train a BPE on the corpus")
    return path


def _sampler_world(trainer: Any) -> tuple[int, int]:
    """``(num_replicas, rank)`` of the Trainer's distributed sampler settings (``(1, 0)`` without any)."""
    kwargs = trainer.distributed_sampler_kwargs if trainer is not None else None
    if not kwargs:
        return 1, 0
    return int(kwargs.get("num_replicas", 1)), int(kwargs.get("rank", 0))


class TextCorpusDataModule(L.LightningDataModule):
    """Token windows from a text corpus: by default Python's own standard library on this machine (~12 MB of
    ``*.py`` without its tests, ~3.5M tokens at ``vocab_size=4096``), with a byte-level BPE tokenizer trained on the
    train split and cached on disk.

    ``prepare_data`` (rank 0 of each node) lists the files, splits them by file, trains the tokenizer and tokenizes
    both splits into ``cache_dir`` (reused when present: nothing is retrained). ``setup`` (every rank) only opens the
    cache. Training batches are ``(batch_size, seq_len + 1)`` int64 windows at seeded random positions (a pure function
    of ``seed`` and the sample position; exact on resume: the position is saved in the checkpoint through
    :meth:`state_dict`); validation batches are contiguous windows. Under DDP/FSDP every rank takes its own stride of
    the stream (``DistributedSampler``-style).

    Args:
        seq_len: tokens per training sequence (windows hold ``seq_len + 1`` tokens: inputs ``[:, :-1]``, targets
            ``[:, 1:]``). Must not exceed the model's ``block_size``.
        batch_size: micro-batch size per device.
        source: ``"stdlib"`` or ``"stdlib+site-packages"`` (also every installed package's ``*.py``, ~10x bigger).
        data_dir: use the ``*.txt``/``*.py``/``*.md`` files below this directory instead of ``source``.
        include_site_packages: same as ``source="stdlib+site-packages"``.
        include_tests: keep test folders of the Python sources (left out by default).
        vocab_size: BPE vocabulary size (the model's ``padded_vocab_size`` must be at least :attr:`vocab_size`).
        val_percent: share of files (percent) held out for validation, chosen by a hash of the file name.
        seed: seed of the training window order.
        cache_dir: cache root (default ``~/.cache/lightning_sparkling``).
        max_files: use at most this many files (split in proportion to ``val_percent``, at least one per split).
        max_bytes: use at most this many bytes of source (split the same way). For tests and quick runs.
        num_workers: DataLoader worker processes.
        tokenizer_dir: tokenize with the ``tokenizer.json`` in this folder (e.g. a litgpt checkpoint dir) instead of
            training a BPE; ``vocab_size`` is then the tokenizer's own.
        val_windows: validate on this many windows (over all ranks) spread over the whole validation split, a fixed
            seeded sample (:func:`spread_sample`; the same at every evaluation and on resume) instead of every window.
            Prefer it to ``Trainer(limit_val_batches=...)``, which scores only the split's first files.
        val_seed: seed of that sample.

    Example::

        >>> import tempfile
        >>> dm = TextCorpusDataModule(seq_len=64, batch_size=4, vocab_size=512, max_files=20, val_percent=20,
        ...                           cache_dir=tempfile.mkdtemp())
        >>> dm.prepare_data(); dm.setup("fit")
        >>> next(iter(dm.train_dataloader())).shape
        torch.Size([4, 65])
        >>> from litgpt.tokenizer import Tokenizer
        >>> Tokenizer(dm.tokenizer_dir).decode(Tokenizer(dm.tokenizer_dir).encode("import os"))
        'import os'
    """

    def __init__(self, seq_len: int = 512, batch_size: int = 8, *,
                 source: Literal["stdlib", "stdlib+site-packages"] = "stdlib", data_dir: str | Path | None = None,
                 include_site_packages: bool = False, include_tests: bool = False, vocab_size: int = 4096,
                 val_percent: float = 5.0, seed: int = 42, cache_dir: str | Path | None = None,
                 max_files: int | None = None, max_bytes: int | None = None, num_workers: int = 0,
                 tokenizer_dir: str | Path | None = None, val_windows: int | None = None, val_seed: int = 0) -> None:
        super().__init__()
        _check_datamodule_args(seq_len, batch_size, val_percent, max_files, max_bytes, source, val_windows)
        if include_site_packages:
            source = "stdlib+site-packages"
        self.seq_len = int(seq_len)
        self.batch_size = int(batch_size)
        self.source = source
        self.data_dir = Path(data_dir).expanduser() if data_dir is not None else None
        self.include_tests = include_tests
        self.requested_vocab_size = int(vocab_size)
        self.val_percent = float(val_percent)
        self.seed = int(seed)
        self.cache_dir = Path(cache_dir if cache_dir is not None else DEFAULT_CACHE_DIR).expanduser()
        self.max_files = max_files
        self.max_bytes = max_bytes
        self.num_workers = int(num_workers)
        self.val_windows = None if val_windows is None else int(val_windows)
        self.val_seed = int(val_seed)
        self.given_tokenizer_dir = _given_tokenizer_dir(tokenizer_dir)
        self.train_files: list[CorpusFile] | None = None
        self.val_files: list[CorpusFile] | None = None
        self._cache_path: Path | None = None
        self.meta: dict[str, Any] | None = None
        self.train_dataset: RandomWindowDataset | None = None
        self.val_dataset: ContiguousWindowDataset | None = None
        self._samples_consumed = 0  # global training positions consumed (all ranks): the resume point
        self._num_replicas = 1

    # ------------------------------------------------------------------ litgpt DataModule compatibility
    def connect(self, tokenizer: Any = None, batch_size: int = 1, max_seq_length: int | None = None) -> None:
        """litgpt's ``DataModule.connect``: set the micro-batch size and sequence length (``tokenizer`` is ignored:
        this module trains its own, found in :attr:`tokenizer_dir`).

        Args:
            tokenizer: ignored.
            batch_size: micro-batch size per device.
            max_seq_length: sequence length (``None`` or ``-1``: keep ``seq_len``).
        """
        self.batch_size = int(batch_size)
        if max_seq_length is not None and max_seq_length > 0:
            self.seq_len = int(max_seq_length)

    # ------------------------------------------------------------------ files and cache
    def _resolve_files(self) -> tuple[list[CorpusFile], list[CorpusFile]]:
        if self.train_files is None or self.val_files is None:
            self.train_files, self.val_files = corpus_splits(self.source, self.data_dir, self.include_tests,
                                                              self.val_percent, self.max_files, self.max_bytes)
        return self.train_files, self.val_files

    @property
    def cache_path(self) -> Path:
        """This corpus's cache folder (``cache_dir/corpus-<hash of file list and vocab size>``, or
        ``corpus-tok-<hash of file list and tokenizer>`` with ``tokenizer_dir``)."""
        if self._cache_path is None:
            train, val = self._resolve_files()
            self._cache_path = _corpus_cache_path(self.cache_dir, train, val, self.requested_vocab_size,
                                                  self.given_tokenizer_dir)
        return self._cache_path

    @property
    def tokenizer_dir(self) -> Path:
        """Folder holding ``tokenizer.json``, ``tokenizer_config.json`` and ``generation_config.json`` in litgpt's
        format (copy them next to a checkpoint to make it a litgpt checkpoint dir). Exists after
        :meth:`prepare_data`; ``tokenizer_dir`` itself when one was given."""
        if self.given_tokenizer_dir is not None:
            return self.given_tokenizer_dir
        return self.cache_path / "tokenizer"

    @property
    def tokenizer(self) -> LitTokenizer:
        """The trained tokenizer as a ``litgpt.tokenizer.Tokenizer`` (after :meth:`prepare_data`)."""
        from litgpt.tokenizer import Tokenizer

        if not (self.tokenizer_dir / "tokenizer.json").is_file():
            raise RuntimeError(f"no tokenizer at {self.tokenizer_dir}: call prepare_data() first")
        return Tokenizer(self.tokenizer_dir)

    @property
    def vocab_size(self) -> int:
        """The trained tokenizer's vocabulary size (at most the requested ``vocab_size``), after :meth:`setup`."""
        if self.meta is None:
            self.meta = self._read_meta()
        return int(self.meta["vocab_size"])

    def _read_meta(self) -> dict[str, Any]:
        return _read_cache_meta(self.cache_path)

    @override
    def prepare_data(self) -> None:
        """List and split the files, train the tokenizer and tokenize both splits into the cache, unless that cache
        exists. Lightning calls it on one process per node."""
        train, val = self._resolve_files()
        if self.given_tokenizer_dir is not None:
            build_tokenized_cache(train, val, self.given_tokenizer_dir, self.cache_dir)
        else:
            build_corpus_cache(train, val, self.requested_vocab_size, self.cache_dir)

    @override
    def setup(self, stage: str | None = None) -> None:
        """Open the cached token files (every rank). Standalone (no distributed run) it first builds the cache when
        missing.

        Args:
            stage: ``"fit"``, ``"validate"``, ... (all load both splits).
        """
        self._build_datasets()
        if stage == "fit":  # a new fit starts the stream at 0; a checkpoint's position is restored after setup
            self._samples_consumed = 0

    def _build_datasets(self) -> None:
        if not (self.cache_path / "meta.json").is_file() and not (
                torch.distributed.is_available() and torch.distributed.is_initialized()):
            self.prepare_data()
        self.meta = self._read_meta()
        dtype = self.meta["dtype"]
        self.train_dataset = RandomWindowDataset(self.cache_path / "train.bin", dtype, self.meta["train_tokens"],
                                                 self.seq_len, self.seed)
        self.val_dataset = ContiguousWindowDataset(self.cache_path / "val.bin", dtype, self.meta["val_tokens"],
                                                   self.seq_len, split="validation", sample=self.val_windows,
                                                   seed=self.val_seed)

    def _datasets_stale(self) -> bool:  # never built, or seq_len changed since (connect())
        return self.train_dataset is None or self.train_dataset.seq_len != self.seq_len

    # ------------------------------------------------------------------ loaders
    @override
    def train_dataloader(self) -> DataLoader:
        """Seeded random windows, ``(batch_size, seq_len + 1)`` int64, continuing from the samples consumed so far."""
        if self._datasets_stale():
            self._build_datasets()
        num_replicas, rank = _sampler_world(self.trainer)
        self._num_replicas = num_replicas
        assert self.train_dataset is not None  # built above
        sampler = ResumableWindowSampler(self.train_dataset, batch_size=self.batch_size, num_replicas=num_replicas,
                                         rank=rank, start=self._samples_consumed, position_fn=self._stream_position)
        return DataLoader(self.train_dataset, batch_size=self.batch_size, sampler=sampler, drop_last=True,
                          num_workers=self.num_workers, pin_memory=False,
                          persistent_workers=self.num_workers > 0)

    @override
    def val_dataloader(self) -> DataLoader:
        """Validation windows in split order (all, or the ``val_windows`` sample), ``(batch_size, seq_len + 1)`` int64
        (the last batch may be smaller)."""
        if self._datasets_stale():
            self._build_datasets()
        assert self.val_dataset is not None  # built above
        return DataLoader(self.val_dataset, batch_size=self.batch_size, shuffle=False, num_workers=self.num_workers)

    # ------------------------------------------------------------------ exact resume
    def _stream_position(self) -> int | None:
        # inside a Trainer the consumed-sample count is exact; standalone loaders continue pass after pass
        return self._samples_consumed if self.trainer is not None else None

    @override
    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Counts the training samples consumed (all ranks), the resume point saved by :meth:`state_dict`."""
        trainer = self.trainer
        if trainer is not None and trainer.training:
            self._samples_consumed += int(batch.shape[0]) * self._num_replicas
        return batch

    @override
    def state_dict(self) -> dict[str, Any]:
        """Saved in checkpoints: the global number of training samples consumed and the data seed."""
        return {"samples_consumed": self._samples_consumed, "seed": self.seed, "seq_len": self.seq_len}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the resume point (the next training batch is the one an uninterrupted run would see next)."""
        self._samples_consumed = int(state_dict.get("samples_consumed", 0))
        # Lightning warns that a mid-epoch resume of a DataLoader without state_dict() is inexact; this module
        # restores the stream position itself, so that warning does not apply to this run.
        warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before the epoch ended")
