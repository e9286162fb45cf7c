"""Tensor operators of a width growth: append new slices along one dimension, by copy, random draw or zeros.

Pure functions on tensors (no modules, no optimizer). A linear weight ``W`` is ``d_out x d_in``: a *fan-out*
expansion appends rows (new output channels), a *fan-in* expansion appends columns (new input coordinates) and
then scales the whole weight by ``alpha`` (:func:`~lightning_sparkling.growth.scaling.fan_in_scale`). Norm weights and
biases are vectors on the fan-out side; an embedding table ``(vocab, n_embd)`` grows its columns on the fan-out
side.

Random draws use a CPU generator and are then moved to the tensor's device and dtype, so a growth gives the same
numbers on CPU and GPU and on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from lightning_sparkling.growth.scaling import INIT_MODES


@dataclass(frozen=True)
class TensorStats:
    """Mean and standard deviation of a tensor's existing entries (what ``random`` init samples from)."""

    mean: float
    std: float

    @classmethod
    def of(cls, t: torch.Tensor) -> TensorStats:
        t32 = t.detach().float()
        std = t32.std().item() if t32.numel() > 1 else 0.0
        return cls(mean=t32.mean().item(), std=std)


def expand_dim(
    t: torch.Tensor,
    dim: int,
    src: torch.Tensor,
    mode: str,
    *,
    generator: torch.Generator | None = None,
    stats: TensorStats | None = None,
) -> torch.Tensor:
    """Append ``len(src)`` new slices to ``t`` along ``dim``.

    Args:
        t: the tensor to grow, any shape.
        dim: the dimension that grows.
        src: copy index map (int64, shape ``(n_new,)``): new slice ``j`` copies old slice ``src[j]``. Its length
            also gives the number of new slices for ``random`` and ``zero``.
        mode: ``copy`` (``t.index_select(dim, src)``), ``random`` (normal with ``stats``' mean/std) or ``zero``.
        generator: CPU generator for ``random``.
        stats: distribution for ``random``; defaults to ``t``'s own.

    Returns:
        A new tensor (same dtype and device), ``t`` untouched; shape of ``t`` with ``dim`` grown by ``len(src)``.

    Example::

        >>> w = torch.arange(6.0).reshape(2, 3)
        >>> expand_dim(w, 0, torch.tensor([1]), "copy")
        tensor([[0., 1., 2.],
                [3., 4., 5.],
                [3., 4., 5.]])
    """
    if mode not in INIT_MODES:
        raise ValueError(f"mode={mode!r}: choose one of {', '.join(INIT_MODES)}")
    dim = dim % t.ndim
    shape = list(t.shape)
    shape[dim] = int(src.numel())
    if mode == "copy":
        new = t.index_select(dim, src.to(t.device))  # (..., n_new, ...)
    elif mode == "zero":
        new = torch.zeros(shape, dtype=t.dtype, device=t.device)
    else:
        if generator is None:
            raise ValueError("random expansion needs a generator")
        stats = stats or TensorStats.of(t)
        sample = torch.randn(shape, generator=generator, dtype=torch.float32)  # drawn on CPU: device independent
        new = (sample * stats.std + stats.mean).to(device=t.device, dtype=t.dtype)
    return torch.cat([t, new], dim=dim)


def expand_fan_out(
    weight: torch.Tensor,
    src: torch.Tensor,
    mode: str,
    *,
    generator: torch.Generator | None = None,
    stats: TensorStats | None = None,
) -> torch.Tensor:
    """New output channels: ``W (d_out, d_in) -> [W; W~] (d_out', d_in)``. Fan-out needs no scale.

    Example::

        >>> expand_fan_out(torch.eye(2), torch.tensor([0, 1]), "copy").shape
        torch.Size([4, 2])
    """
    return expand_dim(weight, 0, src, mode, generator=generator, stats=stats)


def expand_fan_in(
    weight: torch.Tensor,
    src: torch.Tensor,
    mode: str,
    alpha: float,
    *,
    generator: torch.Generator | None = None,
    stats: TensorStats | None = None,
) -> torch.Tensor:
    """New input coordinates: ``W (d_out, d_in) -> alpha * [W, W~] (d_out, d_in')`` (paper Eq. 8).

    Example::

        >>> w = torch.ones(1, 2)
        >>> expand_fan_in(w, torch.tensor([0, 1]), "copy", alpha=0.5)   # [x, x] @ W' == x @ W
        tensor([[0.5000, 0.5000, 0.5000, 0.5000]])
    """
    grown = expand_dim(weight, 1, src, mode, generator=generator, stats=stats)
    return grown * alpha if alpha != 1.0 else grown


def expand_norm(
    weight: torch.Tensor,
    src: torch.Tensor,
    mode: str,
    *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """New coordinates of a norm weight or bias ``(d,) -> (d',)`` (paper 3.2.4: copy or same-distribution random
    keep ``RMS(z)``)."""
    return expand_dim(weight, 0, src, mode, generator=generator)


def expand_embedding(
    weight: torch.Tensor,
    src: torch.Tensor,
    mode: str,
    *,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """New hidden coordinates of an embedding table ``(vocab, d) -> (vocab, d')`` (a fan-out: it writes the
    residual stream)."""
    return expand_dim(weight, 1, src, mode, generator=generator)


def relayout_dim(
    t: torch.Tensor,
    dim: int,
    layout: torch.Tensor,
    fresh: torch.Tensor,
    mode: str,
    *,
    generator: torch.Generator | None = None,
    stats: TensorStats | None = None,
) -> torch.Tensor:
    """Lay ``t`` out anew along ``dim``: new slice ``c`` is old slice ``layout[c]``; the ``fresh`` slices (new
    entries) are then copies (``copy``: what the layout took), zeros or random draws. For axes whose old entries move
    (litgpt's fused ``qkv`` rows when heads grow); :func:`expand_dim` is the appending special case.

    Args:
        t: the tensor, any shape.
        dim: the dimension laid out anew.
        layout: int64 ``(n_new,)``: the old slice each new slice takes.
        fresh: bool ``(n_new,)``: which new slices are new entries.
        mode: ``copy``, ``random`` or ``zero`` for the fresh slices.
        generator / stats: for ``random`` (as :func:`expand_dim`).

    Example::

        >>> relayout_dim(torch.tensor([1.0, 2.0]), 0, torch.tensor([0, 0, 1]), torch.tensor([False, True, False]),
        ...              "zero")
        tensor([1., 0., 2.])
    """
    if mode not in INIT_MODES:
        raise ValueError(f"mode={mode!r}: choose one of {', '.join(INIT_MODES)}")
    dim = dim % t.ndim
    out = t.index_select(dim, layout.to(t.device))  # (..., n_new, ...)
    if mode == "copy" or not bool(fresh.any()):
        return out
    index = fresh.nonzero().flatten().to(t.device)
    shape = list(out.shape)
    shape[dim] = int(index.numel())
    if mode == "zero":
        new = torch.zeros(shape, dtype=t.dtype, device=t.device)
    else:
        if generator is None:
            raise ValueError("random expansion needs a generator")
        stats = stats or TensorStats.of(t)
        sample = torch.randn(shape, generator=generator, dtype=torch.float32)  # drawn on CPU: device independent
        new = (sample * stats.std + stats.mean).to(device=t.device, dtype=t.dtype)
    return out.index_copy(dim, index, new)


def runs(mask: torch.Tensor) -> tuple[tuple[int, int], ...]:
    """The ``(start, stop)`` runs of ``True`` in a 1-D bool mask.

    Example::

        >>> runs(torch.tensor([False, True, True, False, True]))
        ((1, 3), (4, 5))
    """
    out: list[tuple[int, int]] = []
    for i in mask.nonzero().flatten().tolist():
        if out and out[-1][1] == i:
            out[-1] = (out[-1][0], i + 1)
        else:
            out.append((i, i + 1))
    return tuple(out)
