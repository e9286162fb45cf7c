"""Symmetry diagnostics: how alike copied channels still are to their sources (paper section 4.1).

Under copy-copy growth with a symmetric optimizer state and no re-warmup, each copied channel stays equal to its
source forever (the *symmetry lock*); SPARKLING's asymmetric state and re-warmup must break it. The measure here is,
per width axis, the mean cosine similarity between each new channel and the channel it was copied from, over every
tensor in which that axis was initialized by copy: 1 at growth, falling under SPARKLING, staying 1 when locked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lightning_sparkling.growth.plan import GrowthPlan


@dataclass(frozen=True)
class CopySpec:
    """The copied channels of one width axis in one stage: ``old`` channels before growth, the copy map ``src`` and
    the ``(tensor name, dimension)`` pairs where that axis was initialized by copy."""

    axis: str
    old: int
    src: torch.Tensor
    tensors: tuple[tuple[str, int], ...]


def copy_specs(plan: GrowthPlan) -> dict[str, CopySpec]:
    """Per axis of ``plan``, where its new channels were copied (axes with no copy-initialized tensor are left out)."""
    specs = {}
    for axis, change in plan.axes.items():
        tensors = tuple(
            (name, d.dim) for name, t in plan.tensors.items() for d in t.dims
            if d.axis == axis and d.mode == "copy" and not (plan.tied_embeddings and name == "lm_head.weight")
        )
        if tensors:
            specs[axis] = CopySpec(axis, change.old, change.src, tensors)
    return specs


@torch.no_grad()
def copy_cosine(weight: torch.Tensor, dim: int, old: int, src: torch.Tensor) -> torch.Tensor:
    """Cosine similarity of each copied slice ``weight[old + j]`` (along ``dim``) to its source ``weight[src[j]]``,
    shape ``(len(src),)``.

    Example::

        >>> w = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])   # row 2 copies row 0
        >>> copy_cosine(w, 0, 2, torch.tensor([0]))
        tensor([1.])
    """
    n_new = int(src.numel())
    new = weight.narrow(dim, old, n_new).movedim(dim, 0).reshape(n_new, -1).float()
    source = weight.index_select(dim, src.to(weight.device)).movedim(dim, 0).reshape(n_new, -1).float()
    return F.cosine_similarity(new, source, dim=1, eps=1e-12)


def symmetry_metrics(specs: Mapping[str, CopySpec], tensors: Iterable[tuple[str, torch.Tensor]],
                     prefix: str) -> dict[str, float]:
    """``{f"{prefix}/{axis}": mean cosine}`` over every copy-initialized tensor of each axis.

    Args:
        specs: the copied channels per axis (:func:`copy_specs`).
        tensors: ``(name, full tensor)`` pairs, consumed one at a time (so a sharded model can be gathered one
            tensor or one unit at a time); names no spec uses are skipped.
        prefix: tag prefix, e.g. ``symmetry/stage_0``.
    """
    uses: dict[str, list[tuple[str, int]]] = {}
    for axis, spec in specs.items():
        for name, dim in spec.tensors:
            uses.setdefault(name, []).append((axis, dim))
    cosines: dict[str, list[torch.Tensor]] = {axis: [] for axis in specs}
    for name, tensor in tensors:
        for axis, dim in uses.get(name, ()):
            cosines[axis].append(copy_cosine(tensor, dim, specs[axis].old, specs[axis].src).mean().cpu())
    return {f"{prefix}/{axis}": float(torch.stack(values).mean()) for axis, values in cosines.items() if values}
