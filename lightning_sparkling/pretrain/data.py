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
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sysconfig
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities.rank_zero import rank_zero_info
from torch.utils.data import DataLoader, Dataset, DistributedSampler

if TYPE_CHECKING:
    import tokenizers
    from litgpt.tokenizer import Tokenizer as LitTokenizer

__all__ = [
    "CACHE_FORMAT_VERSION",
    "DEFAULT_CACHE_DIR",
    "EOS_TOKEN",
    "ContiguousWindowDataset",
    "CorpusFile",
    "RandomWindowDataset",
    "ResumableWindowSampler",
    "TextCorpusDataModule",
    "build_corpus_cache",
    "build_tokenized_cache",
    "cap_files",
    "collect_corpus_files",
    "corpus_cache_key",
    "corpus_splits",
    "save_tokenizer_dir",
    "split_files",
    "spread_sample",
    "train_tokenizer",
]

EOS_TOKEN = "<|endoftext|>"
"""The only special token: separates source files, and is litgpt's ``bos``/``eos``."""

DEFAULT_CACHE_DIR = Path("~/.cache/lightning_sparkling")
"""Where tokenizers and tokenized corpora are cached unless ``cache_dir`` is given."""

CACHE_FORMAT_VERSION = 1
"""Bumped whenever the cache layout or tokenization changes, so stale caches are never reused."""

_SKIP_DIRS = frozenset({"site-packages", "dist-packages", "__pycache__"})
_TEST_DIRS = frozenset({"test", "tests", "idle_test"})
_DATA_DIR_SUFFIXES = (".txt", ".py", ".md")
_TOKENIZE_CHUNK_FILES = 256


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
    ``(int(sha256(key)[:8]) mod 10000) / 100 < val_percent``. Deterministic on every machine and process, independent of the
    file order and of the other files, and a file never lands in both splits.

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
    train, val = [], []
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


def _read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def _iter_texts(files: Iterable[CorpusFile]) -> Iterator[str]:
    for f in files:
        yield _read_text(f.path)


def train_tokenizer(texts: Iterable[str], vocab_size: int, *, min_frequency: int = 2,
                    length: int | None = None) -> tokenizers.Tokenizer:
    """Fit a byte-level BPE tokenizer (``tokenizers`` library; ByteLevel pre-tokenizer and decoder, no prefix space,
    so encode/decode is lossless on any text) with ``<|endoftext|>`` as its only special token (id 0).

    Args:
        texts: training documents.
        vocab_size: target vocabulary size including the 256 byte symbols and ``<|endoftext|>`` (a small corpus may
            stop short of it: read the final size with ``tokenizer.get_vocab_size()``).
        min_frequency: merges seen fewer times are not learned.
        length: number of documents, for progress reporting only.

    Returns:
        a ``tokenizers.Tokenizer``.

    Example::

        >>> tok = train_tokenizer(["def f(x):\\n    return x\\n"] * 20, vocab_size=300)
        >>> tok.decode(tok.encode("def g(y): return y").ids)
        'def g(y): return y'
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    if vocab_size < 258:
        raise ValueError(f"vocab_size={vocab_size} must be at least 258 (256 bytes, {EOS_TOKEN}, one merge)")
    if vocab_size > 2**31 - 1:
        raise ValueError(f"vocab_size={vocab_size} is too large")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=[EOS_TOKEN],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer, length=length)
    return tokenizer


def save_tokenizer_dir(tokenizer: tokenizers.Tokenizer, out_dir: str | Path) -> Path:
    """Write ``tokenizer`` in litgpt's checkpoint layout, loadable by ``litgpt.tokenizer.Tokenizer(out_dir)``:
    ``tokenizer.json``, ``tokenizer_config.json`` (``PreTrainedTokenizerFast``, ``<|endoftext|>`` as bos and eos,
    ``add_bos_token: false``) and ``generation_config.json`` (``bos_token_id``/``eos_token_id``).

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` holding ``<|endoftext|>``.
        out_dir: destination folder (created).

    Example::

        >>> import tempfile
        >>> from litgpt.tokenizer import Tokenizer
        >>> d = save_tokenizer_dir(train_tokenizer(["abc abd"] * 10, vocab_size=260), tempfile.mkdtemp())
        >>> t = Tokenizer(d)
        >>> t.decode(t.encode("abd abc")), t.eos_id
        ('abd abc', 0)
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    eos_id = tokenizer.token_to_id(EOS_TOKEN)
    if eos_id is None:
        raise ValueError(f"the tokenizer has no {EOS_TOKEN!r} token")
    tokenizer.save(str(out_dir / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": EOS_TOKEN, "eos_token": EOS_TOKEN,
              "add_bos_token": False, "model_max_length": 1_000_000_000}
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    generation = {"bos_token_id": eos_id, "eos_token_id": eos_id}
    (out_dir / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
    return out_dir


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
        t0 = time.perf_counter()
        tokenizer = train_tokenizer(_iter_texts(train_files), vocab_size, length=len(train_files))
        t_train = time.perf_counter() - t0
        save_tokenizer_dir(tokenizer, tmp / "tokenizer")
        actual_vocab = tokenizer.get_vocab_size()
        dtype = _token_dtype(actual_vocab)
        eos_id = tokenizer.token_to_id(EOS_TOKEN)
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
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final


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


class _TokenFile:
    """A flat token file opened lazily as a read-only memmap (never pickled: safe to ship to DataLoader workers)."""

    def __init__(self, path: str | Path, dtype: str | np.dtype, n_tokens: int) -> None:
        self.path = str(path)
        self.dtype = np.dtype(dtype)
        self.n_tokens = int(n_tokens)
        self._mm: np.memmap | None = None

    @property
    def tokens(self) -> np.memmap:
        if self._mm is None:
            self._mm = np.memmap(self.path, dtype=self.dtype, mode="r", shape=(self.n_tokens,))
        return self._mm

    def window(self, offset: int, length: int) -> torch.Tensor:
        return torch.from_numpy(self.tokens[offset:offset + length].astype(np.int64))

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_mm"] = None
        return state


class RandomWindowDataset(Dataset):
    """Training windows of ``seq_len + 1`` tokens at seeded random positions, indexed by a *global sample position*.

    The ``n = n_tokens // seq_len - 1`` windows of one data epoch start at ``shift_e + w * seq_len``; data epoch
    ``e = position // n`` has its own permutation of ``w`` and its own ``shift_e`` in ``[0, seq_len)``, both drawn from
    ``numpy.random.default_rng([seed, e])``. ``dataset[p]`` is therefore a pure function of ``(seed, p)``: positions
    past ``len(dataset)`` simply continue into the next data epoch, which is what makes resuming exact.

    Args:
        token_file: path of the flat token file.
        dtype: its numpy dtype.
        n_tokens: its length.
        seq_len: tokens per window minus one (inputs ``[:-1]``, targets ``[1:]``).
        seed: the data seed.

    Example::

        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "t.bin"); np.arange(100, dtype=np.uint16).tofile(path)
        >>> ds = RandomWindowDataset(path, "uint16", 100, seq_len=9, seed=0)
        >>> len(ds), ds[0].shape, ds[0].dtype, bool((ds[3].diff() == 1).all())
        (10, torch.Size([10]), torch.int64, True)
    """

    def __init__(self, token_file: str | Path, dtype: str | np.dtype, n_tokens: int, seq_len: int, seed: int) -> None:
        self.tokens = _TokenFile(token_file, dtype, n_tokens)
        self.seq_len = int(seq_len)
        self.seed = int(seed)
        self.n_windows = n_tokens // seq_len - 1
        if self.n_windows < 1:
            raise ValueError(f"seq_len={seq_len} is too large for the train split of {n_tokens} tokens "
                             f"(it needs at least 2 * seq_len = {2 * seq_len} tokens)")
        self._epochs: dict[int, tuple[np.ndarray, int]] = {}

    def __len__(self) -> int:
        return self.n_windows

    def _epoch(self, epoch: int) -> tuple[np.ndarray, int]:
        if epoch not in self._epochs:
            rng = np.random.default_rng([self.seed, epoch])
            perm = rng.permutation(self.n_windows)
            shift = int(rng.integers(0, self.seq_len))
            if len(self._epochs) >= 2:
                self._epochs.pop(min(self._epochs))
            self._epochs[epoch] = (perm, shift)
        return self._epochs[epoch]

    def offset(self, position: int) -> int:
        """Token offset of the window at global sample ``position``."""
        if position < 0:
            raise IndexError(f"position {position} < 0")
        epoch, j = divmod(int(position), self.n_windows)
        perm, shift = self._epoch(epoch)
        return shift + int(perm[j]) * self.seq_len

    def __getitem__(self, position: int) -> torch.Tensor:
        return self.tokens.window(self.offset(position), self.seq_len + 1)


def spread_sample(n_windows: int, n: int | None, seed: int = 0) -> np.ndarray:
    """``n`` window indices spread over the whole range ``[0, n_windows)``, sorted: the range is cut into ``n``
    equal strata and one window is drawn in each from ``numpy.random.default_rng(seed)`` (a pure function of its
    arguments: the same windows at every evaluation, in every process and on resume). ``n`` of ``None`` or at least
    ``n_windows``: every window.

    Example::

        >>> spread_sample(100, 4, seed=0).tolist()
        [21, 40, 62, 81]
        >>> spread_sample(5, None).tolist()
        [0, 1, 2, 3, 4]
    """
    if n is None or n >= n_windows:
        return np.arange(n_windows, dtype=np.int64)
    if n < 1:
        raise ValueError(f"n={n} must be >= 1 (or None: every window)")
    edges = (np.arange(n + 1, dtype=np.int64) * n_windows) // n  # each stratum >= 1 window: n < n_windows
    return np.random.default_rng(seed).integers(edges[:-1], edges[1:]).astype(np.int64)


class ContiguousWindowDataset(Dataset):
    """Validation windows: the split cut into consecutive ``seq_len + 1``-token windows starting at ``k * seq_len``
    (each target token is scored exactly once; a tail shorter than a window is dropped), all of them or a fixed
    sample of ``sample`` of them spread over the whole split (:func:`spread_sample`).

    Taking the first batches of the split instead (``Trainer(limit_val_batches=...)``) scores only its first files
    (sorted by name), a biased estimate: give ``sample`` to evaluate part of the split.

    Args:
        token_file: path of the flat token file.
        dtype: its numpy dtype.
        n_tokens: its length.
        seq_len: tokens per window minus one.
        split: name used in error messages.
        sample: use this many windows, one in each of ``sample`` equal strata of the split (``None``: every window).
        seed: seed of the sample.

    Example::

        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "v.bin"); np.arange(25, dtype=np.uint16).tofile(path)
        >>> ds = ContiguousWindowDataset(path, "uint16", 25, seq_len=8)
        >>> len(ds), ds[1].tolist()[:3]
        (3, [8, 9, 10])
        >>> ContiguousWindowDataset(path, "uint16", 25, seq_len=2, sample=3).windows.tolist()
        [3, 6, 10]
    """

    def __init__(self, token_file: str | Path, dtype: str | np.dtype, n_tokens: int, seq_len: int,
                 split: str = "validation", *, sample: int | None = None, seed: int = 0) -> None:
        self.tokens = _TokenFile(token_file, dtype, n_tokens)
        self.seq_len = int(seq_len)
        self.n_windows = (n_tokens - 1) // seq_len
        if self.n_windows < 1:
            raise ValueError(f"seq_len={seq_len} is too large for the {split} split of {n_tokens} tokens "
                             f"(a window needs seq_len + 1 = {seq_len + 1}): lower seq_len or raise val_percent")
        self.windows = spread_sample(self.n_windows, sample, seed)
        """Index ``k`` of each window served (its tokens start at ``k * seq_len``), in order."""

    def __len__(self) -> int:
        return len(self.windows)

    def __getitem__(self, index: int) -> torch.Tensor:
        if not 0 <= index < len(self.windows):
            raise IndexError(f"window {index} out of range [0, {len(self.windows)})")
        return self.tokens.window(int(self.windows[index]) * self.seq_len, self.seq_len + 1)


class ResumableWindowSampler(DistributedSampler):
    """Yields global sample positions for :class:`RandomWindowDataset`, one rank's share of a continuous stream.

    Each pass (one Lightning epoch) yields ``len(self)`` positions per rank, a multiple of ``batch_size``; rank ``r``
    takes positions ``start + r, start + r + R, ...`` (``R = num_replicas``), the same striding as torch's
    ``DistributedSampler``. A pass starts at ``position_fn()`` when that returns a number (the data module's count of
    samples the training loop really consumed: exact even when Lightning ends a resumed epoch early), else where the
    previous pass ended. So a resumed run sees exactly the batches an uninterrupted run would. It subclasses
    ``DistributedSampler`` so Lightning keeps it under DDP/FSDP instead of wrapping it.

    Args:
        dataset: the :class:`RandomWindowDataset`.
        batch_size: per-rank batch size (a pass yields whole batches only).
        num_replicas: data-parallel world size.
        rank: data-parallel rank.
        start: first global position.
        position_fn: returns the global position where a new pass starts, or ``None`` to continue from the
            previous pass.

    Example::

        >>> class _D:
        ...     def __len__(self): return 10
        >>> s = ResumableWindowSampler(_D(), batch_size=2, num_replicas=2, rank=1, start=4)
        >>> list(s), list(s)
        ([5, 7, 9, 11], [13, 15, 17, 19])
    """

    def __init__(self, dataset: Dataset, *, batch_size: int, num_replicas: int = 1, rank: int = 0,
                 start: int = 0, position_fn: Callable[[], int | None] | None = None) -> None:
        # no super().__init__: it needs a process group; these are the attributes DistributedSampler users read
        self.dataset = dataset
        self.num_replicas = int(num_replicas)
        self.rank = int(rank)
        self.batch_size = int(batch_size)
        self.shuffle = True
        self.drop_last = True
        self.seed = getattr(dataset, "seed", 0)
        self.epoch = 0
        if not 0 <= self.rank < self.num_replicas:
            raise ValueError(f"rank={rank} must be in [0, num_replicas={num_replicas})")
        self.num_samples = (len(dataset) // self.num_replicas // self.batch_size) * self.batch_size
        if self.num_samples < 1:
            raise ValueError(f"batch_size={batch_size} x {num_replicas} ranks is larger than the "
                             f"{len(dataset)} train windows: lower batch_size or seq_len, or use more data")
        self.total_size = self.num_samples * self.num_replicas
        self.start = int(start)
        self.position_fn = position_fn

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Recorded only: the stream position, not the epoch, decides the order."""
        self.epoch = epoch

    def __iter__(self) -> Iterator[int]:
        position = self.position_fn() if self.position_fn is not None else None
        start = self.start if position is None else int(position)
        self.start = start + self.total_size
        return iter(range(start + self.rank, start + self.total_size, self.num_replicas))


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


def corpus_splits(source: str, data_dir: Path | None, include_tests: bool, val_percent: float,
                   max_files: int | None, max_bytes: int | None) -> tuple[list[CorpusFile], list[CorpusFile]]:
    """``(train, val)`` files of a corpus: collected (:func:`collect_corpus_files`), split by hash
    (:func:`split_files`) and capped (:func:`cap_files`), ``max_files`` and ``max_bytes`` shared between the splits
    in proportion to ``val_percent`` (at least one file and one byte each).

    Raises:
        ValueError: a split is empty.
    """
    files = collect_corpus_files(source, data_dir=data_dir, include_tests=include_tests)
    train, val = split_files(files, val_percent)
    share = val_percent / 100
    val_max_files = None if max_files is None else max(1, round(max_files * share))
    train_max_files = None if max_files is None else max(1, max_files - val_max_files)
    val_max_bytes = None if max_bytes is None else max(1, int(max_bytes * share))
    train_max_bytes = None if max_bytes is None else max(1, max_bytes - val_max_bytes)
    train_files = cap_files(train, max_files=train_max_files, max_bytes=train_max_bytes)
    val_files = cap_files(val, max_files=val_max_files, max_bytes=val_max_bytes)
    if not train_files or not val_files:
        empty = "train" if not train_files else "validation"
        raise ValueError(f"the {empty} split is empty ({len(files)} files, val_percent={val_percent}): "
                         "adjust val_percent or add data")
    return train_files, val_files


def _corpus_cache_path(cache_dir: Path, train_files: Sequence[CorpusFile], val_files: Sequence[CorpusFile],
                       vocab_size: int, tokenizer_dir: Path | None) -> Path:
    """The cache folder :func:`build_corpus_cache` (``corpus-<key>``) or, with ``tokenizer_dir``,
    :func:`build_tokenized_cache` (``corpus-tok-<key>``) writes for these splits."""
    if tokenizer_dir is not None:
        return cache_dir / f"corpus-tok-{_tokenizer_corpus_key(train_files, val_files, tokenizer_dir)[:20]}"
    return cache_dir / f"corpus-{corpus_cache_key(train_files, val_files, vocab_size)[:20]}"


def _read_cache_meta(cache_path: Path) -> dict[str, Any]:
    """The ``meta.json`` of a corpus cache (``RuntimeError`` when the cache has not been built)."""
    meta_path = cache_path / "meta.json"
    if not meta_path.is_file():
        raise RuntimeError(f"no corpus cache at {cache_path}: prepare_data() has not run (under several "
                           "nodes without a shared cache_dir keep prepare_data_per_node=True)")
    return json.loads(meta_path.read_text())


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

    def prepare_data(self) -> None:
        """List and split the files, train the tokenizer and tokenize both splits into the cache, unless that cache
        exists. Lightning calls it on one process per node."""
        train, val = self._resolve_files()
        if self.given_tokenizer_dir is not None:
            build_tokenized_cache(train, val, self.given_tokenizer_dir, self.cache_dir)
        else:
            build_corpus_cache(train, val, self.requested_vocab_size, self.cache_dir)

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
    def train_dataloader(self) -> DataLoader:
        """Seeded random windows, ``(batch_size, seq_len + 1)`` int64, continuing from the samples consumed so far."""
        if self._datasets_stale():
            self._build_datasets()
        num_replicas, rank = _sampler_world(self.trainer)
        self._num_replicas = num_replicas
        sampler = ResumableWindowSampler(self.train_dataset, batch_size=self.batch_size, num_replicas=num_replicas,
                                         rank=rank, start=self._samples_consumed, position_fn=self._stream_position)
        return DataLoader(self.train_dataset, batch_size=self.batch_size, sampler=sampler, drop_last=True,
                          num_workers=self.num_workers, pin_memory=False,
                          persistent_workers=self.num_workers > 0)

    def val_dataloader(self) -> DataLoader:
        """Validation windows in split order (all, or the ``val_windows`` sample), ``(batch_size, seq_len + 1)`` int64
        (the last batch may be smaller)."""
        if self._datasets_stale():
            self._build_datasets()
        return DataLoader(self.val_dataset, batch_size=self.batch_size, shuffle=False, num_workers=self.num_workers)

    # ------------------------------------------------------------------ exact resume
    def _stream_position(self) -> int | None:
        # inside a Trainer the consumed-sample count is exact; standalone loaders continue pass after pass
        return self._samples_consumed if self.trainer is not None else None

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Counts the training samples consumed (all ranks), the resume point saved by :meth:`state_dict`."""
        trainer = self.trainer
        if trainer is not None and trainer.training:
            self._samples_consumed += int(batch.shape[0]) * self._num_replicas
        return batch

    def state_dict(self) -> dict[str, Any]:
        """Saved in checkpoints: the global number of training samples consumed and the data seed."""
        return {"samples_consumed": self._samples_consumed, "seed": self.seed, "seq_len": self.seq_len}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the resume point (the next training batch is the one an uninterrupted run would see next)."""
        self._samples_consumed = int(state_dict.get("samples_consumed", 0))
        # Lightning warns that a mid-epoch resume of a DataLoader without state_dict() is inexact; this module
        # restores the stream position itself, so that warning does not apply to this run.
        warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before the epoch ended")
