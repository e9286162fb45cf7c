"""Attention-head growth: more query heads (and key/value groups) of the same ``head_size``, in litgpt's fused
``qkv`` layout. Pure functions of integers and index tensors; :func:`~lightning_sparkling.growth.plan.plan_growth`
turns them into per-tensor plans.

litgpt's ``CausalSelfAttention`` (MHA, GQA and MQA alike) computes ``qkv = x W^T`` with the rows of ``W`` laid out
as ``[q heads (n_head x hs) | k groups (n_query_groups x hs) | v groups (n_query_groups x hs)]``, and query head
``h`` attends with key/value group ``h // (n_head / n_query_groups)`` (``repeat_interleave``). So a new query head
must sit *inside the group whose keys and values it copies*: growing ``n_head`` at fixed ``n_query_groups`` moves
old heads (a group's heads are contiguous), and growing ``n_query_groups`` moves the key and value blocks behind the
larger query block. Every grown tensor on these axes is therefore laid out by an explicit *layout* (for each new
channel, the old channel it takes; :func:`~lightning_sparkling.growth.operators.relayout_dim`), not by appending.

The rule, with ``q = n_head / n_query_groups`` heads per group before and ``q'`` after (``q' >= q``): new query
head ``p`` is in group ``g = p // q'`` at slot ``r = p % q'``.

- ``g`` an old group: slot ``r < q`` is old head ``g q + r`` (kept); slot ``r >= q`` is new and copies old head
  ``g q + (r - q) % q`` of the same group, so it reads the same keys and values.
- ``g`` a new group: it copies old group ``src[g - G]`` (tiling the old groups at an integer ratio, seeded draws
  otherwise, as for width), and its slot ``r`` copies that group's head ``r % q``.

Under copy-copy a copied head computes exactly its source's output, and ``attn.proj``'s fan-in columns (the head's
channels) are scaled by ``alpha`` like any copied fan-in, so at integer ratios of the groups (``G' / G``) and of the
heads per group (``q' / q``) the model computes the same function. A whole ``n_head`` ratio alone is not enough: 2
heads in 1 group -> 6 heads in 2 groups (``q`` 2 -> 3) copies head 0 three times and head 1 once, so the function
changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from lightning_sparkling.growth.scaling import copy_source_index


@dataclass(frozen=True)
class HeadLayout:
    """Where every query head and key/value group of the grown attention comes from.

    Attributes:
        q_source / q_fresh: per new query head, the old head it takes, and whether it is new (a copy).
        kv_source / kv_fresh: per new key/value group, the old group it takes, and whether it is new.
    """

    q_source: tuple[int, ...]
    q_fresh: tuple[bool, ...]
    kv_source: tuple[int, ...]
    kv_fresh: tuple[bool, ...]


def head_layout(n_head: int, n_groups: int, new_head: int, new_groups: int,
                generator: torch.Generator | None = None) -> HeadLayout:
    """The :class:`HeadLayout` of growing ``n_head`` / ``n_groups`` to ``new_head`` / ``new_groups``.

    Raises:
        ValueError: naming the values, when a count shrinks, ``new_head`` is not a multiple of ``new_groups``, or
            the heads per group would shrink.

    Example::

        >>> head_layout(4, 2, 8, 2).q_source    # groups of 2 heads become groups of 4: copies stay in their group
        (0, 1, 0, 1, 2, 3, 2, 3)
        >>> head_layout(4, 2, 8, 4).kv_source   # MHA-like growth: two new groups copy groups 0 and 1
        (0, 1, 0, 1)
    """
    if new_head < n_head or new_groups < n_groups:
        raise ValueError(f"heads can only grow: n_head {n_head} -> {new_head}, n_query_groups {n_groups} -> "
                         f"{new_groups}")
    if new_head % new_groups:
        raise ValueError(f"n_head={new_head} is not a multiple of n_query_groups={new_groups}")
    q, q_new = n_head // n_groups, new_head // new_groups
    if q_new < q:
        raise ValueError(f"n_head={new_head}, n_query_groups={new_groups}: {q_new} query heads per group, fewer than "
                         f"the model's {q} (n_head={n_head}, n_query_groups={n_groups}); grow n_head so that "
                         f"n_head / n_query_groups stays >= {q}")
    group_src = copy_source_index(n_groups, new_groups, generator).tolist() if new_groups > n_groups else []
    kv_source = tuple(range(n_groups)) + tuple(group_src)
    kv_fresh = (False,) * n_groups + (True,) * len(group_src)
    q_source, q_fresh = [], []
    for p in range(new_head):
        g, r = divmod(p, q_new)
        if g < n_groups:
            q_source.append(g * q + (r if r < q else (r - q) % q))
            q_fresh.append(r >= q)
        else:
            q_source.append(kv_source[g] * q + r % q)
            q_fresh.append(True)
    return HeadLayout(tuple(q_source), tuple(q_fresh), kv_source, kv_fresh)


def channel_layout(source: tuple[int, ...], fresh: tuple[bool, ...], head_size: int, offset: int = 0
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Head-level ``(source, fresh)`` to channel level: ``(layout, fresh)`` of ``len(source) * head_size`` channels,
    ``layout[c]`` the old channel (plus ``offset``) that new channel ``c`` takes.

    Example::

        >>> channel_layout((1, 0), (False, True), 2)[0]
        tensor([2, 3, 0, 1])
    """
    base = torch.tensor(source, dtype=torch.long).repeat_interleave(head_size) * head_size
    within = torch.arange(head_size, dtype=torch.long).repeat(len(source))
    mask = torch.tensor(fresh, dtype=torch.bool).repeat_interleave(head_size)
    return base + within + offset, mask


def qkv_layout(layout: HeadLayout, n_head: int, n_groups: int, head_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The fused ``qkv`` rows of the grown attention: ``(layout, fresh)`` over ``(n_head' + 2 n_groups') hs`` rows,
    indexing the old fused rows (q block at 0, k block at ``n_head hs``, v block after it)."""
    q, q_fresh = channel_layout(layout.q_source, layout.q_fresh, head_size)
    k, kv_fresh = channel_layout(layout.kv_source, layout.kv_fresh, head_size, offset=n_head * head_size)
    v, _ = channel_layout(layout.kv_source, layout.kv_fresh, head_size, offset=(n_head + n_groups) * head_size)
    return torch.cat([q, k, v]), torch.cat([q_fresh, kv_fresh, kv_fresh])


def describe_heads(layout: HeadLayout, *, copied: bool = True) -> str:
    """New heads and groups and their sources, e.g. ``"new q 2<-0, 3<-1; moved q 2->4"``; with ``copied=False``
    (an ``init`` whose fan-out side is not ``copy``: new heads start random, sourceless) the new positions alone,
    e.g. ``"new q 2, 3 (random)"``.

    Example::

        >>> describe_heads(head_layout(2, 1, 4, 1))
        'new q 2<-0, 3<-1'
        >>> describe_heads(head_layout(2, 1, 4, 1), copied=False)
        'new q 2, 3 (random)'
    """
    def new(sources: Sequence[int], fresh: Sequence[bool]) -> str:
        listed = ", ".join(f"{p}<-{s}" if copied else str(p) for p, (s, f) in enumerate(zip(sources, fresh)) if f)
        return listed if copied or not listed else f"{listed} (random)"

    new_q, new_kv = new(layout.q_source, layout.q_fresh), new(layout.kv_source, layout.kv_fresh)
    moved = ", ".join(f"{s}->{p}" for p, (s, f) in enumerate(zip(layout.q_source, layout.q_fresh)) if not f and s != p)
    parts = [f"new q {new_q}"] + ([f"moved q {moved}"] if moved else []) + ([f"new kv {new_kv}"] if new_kv else [])
    return "; ".join(parts)
