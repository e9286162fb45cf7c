"""The paper's growth math: the RMS-preserving fan-in scale and the copy index maps.

Nothing here touches ``torch.nn``: these are the closed forms of SPARKLING (section 3.2, appendix A.2) and the
seeded choice of which old channel each new channel copies.
"""

from __future__ import annotations

import hashlib
import math
from typing import Literal

import torch

InitMode = Literal["copy", "random", "zero"]
INIT_MODES: tuple[str, ...] = ("copy", "random", "zero")
#: how a copied channel's fan-in share is divided (appendix "Comparison to Prior Function-Preserving
#: Symmetry-Breaking Heuristics": Uneven Splitting 1:2 or randomized r:(1-r), r in [0.1, 0.5])
SPLITS: tuple[str, ...] = ("even", "uneven", "random")
RANDOM_SPLIT_RANGE: tuple[float, float] = (0.1, 0.5)


def parse_init(init: str) -> tuple[str, str]:
    """Split an init pair ``"<fan_out>-<fan_in>"`` into its two sides.

    Args:
        init: e.g. ``"copy-copy"``, ``"random-zero"``. Each side is one of ``copy | random | zero``.

    Returns:
        ``(fan_out_mode, fan_in_mode)``.

    Raises:
        ValueError: the string is not two known modes joined by ``-``.

    Example::

        >>> parse_init("zero-copy")
        ('zero', 'copy')
    """
    parts = init.split("-") if isinstance(init, str) else []
    if len(parts) != 2 or any(p not in INIT_MODES for p in parts):
        pairs = ", ".join(f"{a}-{b}" for a in INIT_MODES for b in INIT_MODES if not (a == b == "zero"))
        raise ValueError(f"init={init!r} is not an init pair '<fan_out>-<fan_in>'; choose one of: {pairs}")
    return parts[0], parts[1]


def fan_in_scale(d_in: int, d_in_new: int, *, init: str = "copy-copy", rms_preserving: bool = True) -> float:
    """The RMS-preserving factor ``alpha`` applied to a whole fan-in weight ``[W, W~]`` (paper Eq. 9-12).

    With ``d = d_in`` and ``d' = d_in_new``:

    - ``copy-copy`` (both the new columns and the new input coordinates are copies):
      ``alpha = sqrt(d / (3d' - 2d))`` for ``d < d' <= 2d``, and ``alpha = d / d'`` for ``d' > 2d``;
    - every other pair (random, one side copied, a zero side, which counts as random): ``alpha = sqrt(d / d')``;
    - ``rms_preserving=False`` (naive growth): ``alpha = 1``.

    At integer ratios ``d' = k d`` the copy-copy factor makes the layer exactly function preserving
    (``k * alpha == 1``).

    Args:
        d_in: fan-in before growth.
        d_in_new: fan-in after growth; must be larger than ``d_in``.
        init: the init pair ``"<fan_out>-<fan_in>"``.
        rms_preserving: ``False`` gives the naive factor 1.

    Raises:
        ValueError: unless ``0 < d_in < d_in_new``, or for an unknown init pair.

    Example::

        >>> fan_in_scale(512, 1024)            # copy-copy at 2x: sqrt(512 / 2048)
        0.5
        >>> round(fan_in_scale(512, 1024, init="random-copy"), 6)
        0.707107
    """
    fan_out, fan_in = parse_init(init)
    if not (isinstance(d_in, int) and isinstance(d_in_new, int)) or not 0 < d_in < d_in_new:
        raise ValueError(f"fan_in_scale needs integers 0 < d_in < d_in_new, got d_in={d_in}, d_in_new={d_in_new}")
    if not rms_preserving:
        return 1.0
    if fan_out == "copy" and fan_in == "copy":
        if d_in_new <= 2 * d_in:
            return math.sqrt(d_in / (3 * d_in_new - 2 * d_in))
        return d_in / d_in_new
    return math.sqrt(d_in / d_in_new)


def derive_seed(seed: int, *keys: object) -> int:
    """A 63-bit seed derived from ``seed`` and ``keys`` by hashing.

    Every random draw of a growth gets its own generator seeded this way (by stage, width axis or tensor name),
    so the result does not depend on the order in which tensors are grown (layer-by-layer under FSDP, or all at
    once) and is identical on every rank.

    Example::

        >>> derive_seed(0, "stage", 1) == derive_seed(0, "stage", 1)
        True
    """
    text = ":".join(str(k) for k in (seed, *keys))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") & ((1 << 63) - 1)


def make_generator(seed: int, *keys: object) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded with :func:`derive_seed` (the only source of growth randomness)."""
    generator = torch.Generator(device="cpu")
    generator.manual_seed(derive_seed(seed, *keys))
    return generator


def copy_source_index(d: int, d_new: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Which old channel each new channel copies: ``src[j]`` for new channel ``d + j``.

    At an integer ratio ``d_new = k d`` the map tiles ``0..d-1`` (``k - 1`` times), which makes copy-copy growth
    exactly function preserving. Otherwise every old channel is used once per full tile and the remaining
    ``(d_new - d) mod d`` sources are drawn at random *without replacement* (from ``generator``) and sorted, so
    no channel is copied twice more than any other.

    Args:
        d: width before growth.
        d_new: width after growth (``> d``).
        generator: source of the random remainder; required unless ``d_new - d`` is a multiple of ``d``.

    Returns:
        int64 tensor of shape ``(d_new - d,)`` with values in ``[0, d)``.

    Example::

        >>> copy_source_index(4, 8).tolist()
        [0, 1, 2, 3]
        >>> src = copy_source_index(4, 6, make_generator(0, "demo"))
        >>> len(set(src.tolist())) == 2
        True
    """
    if not 0 < d < d_new:
        raise ValueError(f"copy_source_index needs 0 < d < d_new, got d={d}, d_new={d_new}")
    n_new = d_new - d
    full, remainder = divmod(n_new, d)
    parts = [torch.arange(d, dtype=torch.long)] * full
    if remainder:
        if generator is None:
            raise ValueError(f"a non-integer ratio ({d} -> {d_new}) needs a generator to pick the extra sources")
        picked = torch.randperm(d, generator=generator)[:remainder]
        parts.append(torch.sort(picked).values)
    return torch.cat(parts)


def split_shares(d: int, d_new: int, src: torch.Tensor, split: str, *, ratio: float = 1 / 3,
                 generator: torch.Generator | None = None) -> torch.Tensor | None:
    """Per-channel multipliers of the even fan-in share for an uneven split ("Uneven Splitting", paper appendix
    "Comparison to Prior Function-Preserving Symmetry-Breaking Heuristics").

    Under copy growth, an old channel ``s`` copied ``c_s`` times forms a group of ``n_s = 1 + c_s`` channels whose
    inputs are equal; the even split gives every member ``alpha`` times the old fan-in column, the group ``n_s
    alpha w_s``. An uneven split keeps that group total but gives the source and each copy shares in proportion
    ``r_s : 1 - r_s``: the source gets ``n_s r_s / (r_s + c_s (1 - r_s))`` times the even share, each copy
    ``n_s (1 - r_s) / (r_s + c_s (1 - r_s))``. For one copy and ``r = 1/3`` that is ``2/3`` and ``4/3``: the
    paper's 1:2. Channels that were not copied keep the factor 1.

    Args:
        d: width before growth. d_new: width after.
        src: the copy map (:func:`copy_source_index`).
        split: ``even`` (returns ``None``: no multipliers), ``uneven`` (``r = ratio`` for every channel) or
            ``random`` (``r`` drawn per old channel, uniform in :data:`RANDOM_SPLIT_RANGE`, from ``generator``).
        ratio: ``r`` of ``split='uneven'``.
        generator: source of the random ratios.

    Returns:
        float64 tensor of shape ``(d_new,)`` (old channels first, then new channel ``d + j``), or ``None``.

    Example::

        >>> [round(m, 4) for m in split_shares(2, 4, torch.tensor([0, 1]), "uneven").tolist()]
        [0.6667, 0.6667, 1.3333, 1.3333]
    """
    if split == "even":
        return None
    if split not in SPLITS:
        raise ValueError(f"split={split!r}: choose one of {', '.join(SPLITS)}")
    copies = torch.bincount(src.long(), minlength=d).to(torch.float64)  # c_s
    if split == "uneven":
        r = torch.full((d,), float(ratio), dtype=torch.float64)
    else:
        if generator is None:
            raise ValueError("split='random' needs a generator")
        low, high = RANDOM_SPLIT_RANGE
        r = low + (high - low) * torch.rand(d, generator=generator, dtype=torch.float64)
    group = 1.0 + copies
    denominator = r + copies * (1.0 - r)
    source_share = torch.where(copies > 0, group * r / denominator, torch.ones_like(r))
    copy_share = (group * (1.0 - r) / denominator)[src.long()]
    return torch.cat([source_share, copy_share])
