"""Symmetry diagnostics: how alike copied channels still are to their sources (paper section 4.1).

Under copy-copy growth with a symmetric optimizer state and no re-warmup, each copied channel stays equal to its
source forever (the *symmetry lock*); SPARKLING's asymmetric state and re-warmup must break it. The measure here is,
per channel dimension (``n_embd``, ``attn_q``, ...), the mean cosine similarity between each new channel and the
channel it was copied from, over every tensor in which that channel dimension was initialized by copy: 1 at growth,
falling under SPARKLING, staying 1 when locked. For an axis that adds modules (depth: tag ``n_layer``; experts:
``experts``, the axis' ``symmetry_key``) it is the mean cosine of each copied new module's weight matrices to its
source's (:meth:`~lightning_sparkling.growth.axes.GrowthAxis.copy_pairs`; for depth,
the kept block at its position in the grown model).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from lightning_sparkling.growth.axes import plan_axes
from lightning_sparkling.growth.plan import GrowthPlan, build_meta_gpt


@dataclass(frozen=True)
class CopySpec:
    """What one stage copied, measured under one tag: ``channel`` is a channel dimension's name (``n_embd``,
    ``attn_q``, ...; ``old`` channels before growth, the copy map ``src`` and the ``(tensor name, dimension)`` pairs
    where that channel dimension was initialized by copy) or, for an axis that adds modules, that axis'
    ``symmetry_key`` (``n_layer``, ``experts``: no channels, the ``pairs`` of copied tensors). It names the logged
    tag ``symmetry/stage_k/{channel}``."""

    channel: str
    old: int
    src: torch.Tensor
    tensors: tuple[tuple[str, int], ...]
    pairs: tuple[tuple[str, str], ...] = ()  # depth: (source tensor, new block's copy), by grown-model name
    positions: tuple[torch.Tensor, torch.Tensor] | None = None  # heads: (copies, their sources) in the grown tensor

    def copy_positions(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Where the copies and their sources are along the copied dimension of the grown tensors."""
        if self.positions is not None:
            return self.positions
        return torch.arange(self.old, self.old + int(self.src.numel())), self.src

    def names(self) -> list[str]:
        """The tensors to read, in an order :func:`symmetry_metrics` can consume one at a time (a depth copy right
        after its source)."""
        return [n for n, _ in self.tensors] + [n for pair in self.pairs for n in pair]

    def carried(self, plan: GrowthPlan) -> CopySpec | None:
        """This spec after a later growth ``plan`` (a depth growth renames moved blocks); ``None`` if nothing of it
        is left to measure."""
        tensors = tuple((plan.carry(n), d) for n, d in self.tensors if plan.carry(n) is not None)
        pairs = tuple((plan.carry(a), plan.carry(b)) for a, b in self.pairs
                      if plan.carry(a) is not None and plan.carry(b) is not None)
        positions = self.positions
        moved = plan.channels.get(self.channel)
        if tensors and moved is not None and moved.layout is not None:  # a later heads growth moves these channels
            kept = moved.kept_positions()
            positions = tuple(kept[p] for p in self.copy_positions())
        return CopySpec(self.channel, self.old, self.src, tensors, pairs, positions) if tensors or pairs else None


def copy_specs(plan: GrowthPlan) -> dict[str, CopySpec]:
    """Per channel dimension of ``plan``, where its new channels were copied (channel dimensions with no
    copy-initialized tensor are left out); per axis that adds modules by copy (depth, experts), under its
    ``symmetry_key``, the pairs of copied tensors. Parameters only (what the backends read): a buffer grown
    by copy, a grouped router's ``e_score_correction_bias``, is left out."""
    specs = {}
    buffers = {name for name, _ in build_meta_gpt(plan.new_config).named_buffers()}  # e.g. a router's corrections
    for channel, change in plan.channels.items():
        tensors = tuple(
            (name, d.dim) for name, t in plan.tensors.items() for d in t.dims
            if d.channel == channel and d.mode == "copy" and not (plan.tied_embeddings and name == "lm_head.weight")
            and name not in buffers
        )
        if tensors:
            positions = change.copy_positions() if change.layout is not None else None
            specs[channel] = CopySpec(channel, change.old, change.src, tensors, positions=positions)
    for axis in plan_axes(plan):  # axes whose new modules copy old ones (new blocks, new experts)
        pairs = axis.copy_pairs(plan)
        if pairs:  # compared as whole tensors: no channel map
            specs[axis.symmetry_key] = CopySpec(axis.symmetry_key, 0, torch.empty(0, dtype=torch.long), (),
                                                tuple(pairs))
    return specs


@torch.no_grad()
def copy_cosine(weight: torch.Tensor, dim: int, old: int, src: torch.Tensor,
                new: torch.Tensor | None = None) -> torch.Tensor:
    """Cosine similarity of each copied slice ``weight[old + j]`` (along ``dim``) to its source ``weight[src[j]]``,
    shape ``(len(src),)``.

    Example::

        >>> w = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])   # row 2 copies row 0
        >>> copy_cosine(w, 0, 2, torch.tensor([0]))
        tensor([1.])
    """
    n_new = int(src.numel())
    copies = weight.narrow(dim, old, n_new) if new is None else weight.index_select(dim, new.to(weight.device))
    copies = copies.movedim(dim, 0).reshape(n_new, -1).float()
    source = weight.index_select(dim, src.to(weight.device)).movedim(dim, 0).reshape(n_new, -1).float()
    return F.cosine_similarity(copies, source, dim=1, eps=1e-12)


def symmetry_metrics(specs: Mapping[str, CopySpec], tensors: Iterable[tuple[str, torch.Tensor]],
                     prefix: str) -> dict[str, float]:
    """``{f"{prefix}/{channel}": mean cosine}`` over every copy-initialized tensor of each spec (a channel dimension,
    or an axis' ``symmetry_key``).

    Args:
        specs: the copied channels per channel dimension (:func:`copy_specs`).
        tensors: ``(name, full tensor)`` pairs, consumed one at a time (so a sharded model can be gathered one
            tensor or one unit at a time); names no spec uses are skipped.
        prefix: tag prefix, e.g. ``symmetry/stage_0``.
    """
    uses: dict[str, list[tuple[str, int]]] = {}
    sources: dict[str, set[str]] = {}  # depth: the tensors to hold until their copy arrives
    copy_of: dict[str, list[tuple[str, str]]] = {}
    for key, spec in specs.items():
        for name, dim in spec.tensors:
            uses.setdefault(name, []).append((key, dim))
        for source, copy in spec.pairs:
            sources.setdefault(source, set()).add(key)
            copy_of.setdefault(copy, []).append((key, source))
    cosines: dict[str, list[torch.Tensor]] = {key: [] for key in specs}
    held: dict[str, torch.Tensor] = {}
    for name, tensor in tensors:
        for key, dim in uses.get(name, ()):
            new, src = specs[key].copy_positions()
            cosines[key].append(copy_cosine(tensor, dim, specs[key].old, src, new).mean().cpu())
        for key, source in copy_of.get(name, ()):
            if source in held:
                cosines[key].append(F.cosine_similarity(tensor.detach().flatten().float(), held[source].flatten(),
                                                        dim=0, eps=1e-12).cpu())
        if name in sources:
            held = {name: tensor.detach().float().clone()}  # the next tensor is its copy (CopySpec.names order)
    return {f"{prefix}/{key}": float(torch.stack(values).mean()) for key, values in cosines.items() if values}
