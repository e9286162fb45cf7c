"""Fixed-length token windows over a split's flat token file, for the embedded corpus's data module: seeded random
windows for training (:class:`RandomWindowDataset`, a pure function of the seed and the sample position, served by
:class:`ResumableWindowSampler`, so a resumed run continues exactly) and contiguous windows for validation
(:class:`ContiguousWindowDataset`): the whole split, or a fixed, seeded sample spread over all of it
(:func:`spread_sample`), the same at every evaluation and on resume.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sized
from typing import cast
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, DistributedSampler

__all__ = ["ContiguousWindowDataset", "RandomWindowDataset", "ResumableWindowSampler", "spread_sample"]


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
        n_windows = len(cast(Sized, dataset))  # a map-style dataset of windows
        self.num_samples = (n_windows // self.num_replicas // self.batch_size) * self.batch_size
        if self.num_samples < 1:
            raise ValueError(f"batch_size={batch_size} x {num_replicas} ranks is larger than the "
                             f"{n_windows} train windows: lower batch_size or seq_len, or use more data")
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
