"""Depth growth (G_stack, MIDAS): which old block each block of the grown model comes from, and how a new block
starts. Pure functions of integers and names; :func:`~lightning_sparkling.growth.plan.plan_growth` turns them into
per-tensor plans.

A grown model of ``N`` blocks from ``L`` has, at every position ``j``, a block whose tensors derive from old block
``source[j]``: the old block itself (*kept*, possibly at a new position) or a *new* block (``fresh[j]``) that starts
from that source by ``depth_init``:

=============  =================================================================================================
depth_order    positions
=============  =================================================================================================
``stack``      old blocks stay at ``0..L-1``; new block ``L + i`` copies block ``i % L`` (G_stack)
``interleave`` every old block followed by its copies: ``N // L - 1`` each, the ``N % L`` extra copies on blocks
               spread evenly over the depth
``middle``     as ``interleave``, but the ``N % L`` extra copies go to a centred window of blocks (MIDAS: for
               ``N < 2L`` only the middle blocks are duplicated, in place)
=============  =================================================================================================

Each named order is a *depth map* (:func:`named_depth_map`), the form ``GrowthStage(depth_map=...)`` takes
directly (prts's layer map): ``source`` itself, the first occurrence of each old block being that block and later
ones new blocks copying it (:func:`fresh_positions`). Any factor works (``2 -> 8`` stacks the model four times).

============  =================================================================================================
depth_init    a new block starts as
============  =================================================================================================
``copy``      its source's tensors (not function preserving: the block's output is added a second time)
``copy-zero`` its source's tensors with the *output projections* zeroed (attention ``proj``, MLP / every expert's
              / shared experts' ``proj``, their biases, and a LayerNorm post-norm's bias): the block adds nothing
              to the residual stream, so the grown model computes the same function
``random-zero`` litgpt's pretraining init (linears ~ N(0, sqrt(2 / (5 n_embd))), norms one, biases zero) with the
              output projections zeroed
============  =================================================================================================
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from lightning_sparkling.growth.errors import StageError

DEPTH_SIZE_KEY = "n_layer"
"""The depth axis' size key."""
DEPTH_INITS: tuple[str, ...] = ("copy-zero", "copy", "random-zero")
DEPTH_ORDERS: tuple[str, ...] = ("stack", "interleave", "middle")
_BLOCK = re.compile(r"^transformer\.h\.(\d+)\.(.+)$")
# tensors (relative to a block) that write the block's output into the residual stream
_OUTPUT_PROJECTION = re.compile(
    r"^(attn\.proj|mlp\.proj|mlp\.experts\.\d+\.proj|mlp\.shared_experts\.proj)\.(weight|bias)$"
    r"|^(post_attention_norm|post_mlp_norm)\.bias$"
)
_NORM_WEIGHT = re.compile(r"(^|\.)(norm_1|norm_2|post_attention_norm|post_mlp_norm|norm_q|norm_k)\.weight$")


@dataclass(frozen=True)
class DepthChange:
    """The depth of one stage: ``old`` -> ``new`` blocks, and what sits at every new position.

    Attributes:
        old / new: block counts before and after.
        order / init: the stage's ``depth_order`` and ``depth_init``.
        source: for each position ``j`` of the grown model, the old block its tensors derive from.
        fresh: for each position, whether it holds a new block (``False``: the old block ``source[j]`` itself).
    """

    old: int
    new: int
    order: str
    init: str
    source: tuple[int, ...]
    fresh: tuple[bool, ...]

    @property
    def new_blocks(self) -> tuple[int, ...]:
        """Positions of the new blocks in the grown model."""
        return tuple(j for j, f in enumerate(self.fresh) if f)

    @property
    def kept_position(self) -> dict[int, int]:
        """``{old block: its position in the grown model}``."""
        return {self.source[j]: j for j, f in enumerate(self.fresh) if not f}

    def copies(self) -> dict[int, int]:
        """``{new block position: the position of its source in the grown model}``.

        Example::

            >>> change = depth_change(2, 4, "interleave", "copy")
            >>> change.copies()
            {1: 0, 3: 2}
        """
        kept = self.kept_position
        return {j: kept[self.source[j]] for j in self.new_blocks}


def describe_depth(change: DepthChange) -> str:
    """Which old block each new block copies, e.g. ``"new 3<-0, 4<-1"`` (positions in the grown model <- old
    block), and where kept blocks moved (``"moved 1->2"``).

    Example::

        >>> describe_depth(depth_change(2, 3, "interleave", "copy"))
        'new 2<-1'
        >>> describe_depth(depth_change(2, 4, "interleave", "copy"))
        'new 1<-0, 3<-1; moved 1->2'
    """
    new = ", ".join(f"{j}<-{change.source[j]}" for j in change.new_blocks)
    moved = ", ".join(f"{i}->{j}" for i, j in change.kept_position.items() if i != j)
    return f"new {new}" + (f"; moved {moved}" if moved else "")


def depth_source_map(old: int, new: int, order: str) -> tuple[tuple[int, ...], tuple[bool, ...]]:
    """``(source, fresh)`` of a depth growth from ``old`` to ``new`` blocks (see the module docstring): the named
    order's depth map (:func:`named_depth_map`) and :func:`fresh_positions` of it.

    Example::

        >>> depth_source_map(3, 5, "stack")
        ((0, 1, 2, 0, 1), (False, False, False, True, True))
        >>> depth_source_map(3, 5, "interleave")[0]
        (0, 0, 1, 2, 2)
        >>> depth_source_map(3, 4, "middle")
        ((0, 1, 1, 2), (False, False, True, False))
    """
    source = named_depth_map(old, new, order)
    return source, fresh_positions(source)


def named_depth_map(old: int, new: int, order: str) -> tuple[int, ...]:
    """The depth map (one old-block index per grown block, as ``GrowthStage(depth_map=...)``) of a named
    ``depth_order`` growing ``old`` blocks to ``new``.

    Example::

        >>> named_depth_map(4, 8, "stack"), named_depth_map(4, 8, "interleave")
        ((0, 1, 2, 3, 0, 1, 2, 3), (0, 0, 1, 1, 2, 2, 3, 3))
        >>> named_depth_map(2, 8, "stack")
        (0, 1, 0, 1, 0, 1, 0, 1)
    """
    if order not in DEPTH_ORDERS:
        raise StageError(f"depth_order={order!r}: choose one of {', '.join(DEPTH_ORDERS)}", key="depth_order")
    if not 0 < old < new:
        raise StageError(f"depth growth needs 0 < old ({old}) < new ({new}) blocks", key="n_layer")
    added = new - old
    if order == "stack":
        return tuple(range(old)) + tuple(i % old for i in range(added))
    base, extra = divmod(added, old)
    if order == "interleave":  # the centres of `extra` equal segments of the depth
        chosen = {(2 * j + 1) * old // (2 * extra) for j in range(extra)}
    else:  # middle: a centred window
        start = (old - extra) // 2
        chosen = set(range(start, start + extra))
    source: list[int] = []
    for i in range(old):
        source += [i] * (1 + base + (i in chosen))
    return tuple(source)


def fresh_positions(depth_map: tuple[int, ...]) -> tuple[bool, ...]:
    """Which positions of a depth map hold new blocks: every occurrence of an old block after its first.

    Example::

        >>> fresh_positions((0, 0, 1, 0, 1))
        (False, True, False, True, True)
    """
    seen: set[int] = set()
    fresh = []
    for i in depth_map:
        fresh.append(i in seen)
        seen.add(i)
    return tuple(fresh)


def check_depth_map(depth_map: tuple[int, ...], old: int, new: int | None = None) -> None:
    """Refuse a ``depth_map`` that does not fit a model of ``old`` blocks grown to ``new``: an index past the old
    blocks, an old block left out (it would be dropped), first occurrences out of order (an old block would move
    past another, which changes the function), a map no longer than the model, or (``new``) a length other than the
    grown ``n_layer``.

    Raises:
        StageError: a ``ValueError`` whose ``key`` is ``"depth_map"``, naming the map, the offending entry and the
            fix.

    Example::

        >>> check_depth_map((0, 1, 0, 1), 2)
        >>> check_depth_map((0, 1, 2, 0), 2)
        Traceback (most recent call last):
        ...
        lightning_sparkling.growth.errors.StageError: GrowthStage(depth_map=[0, 1, 2, 0]): names old block 2, but ...
    """
    shown = f"GrowthStage(depth_map={list(depth_map)})"
    if max(depth_map) >= old:
        raise StageError(f"{shown}: names old block {max(depth_map)}, but the model has {old} blocks (indices 0.."
                         f"{old - 1}); use indices below {old}", key="depth_map")
    if any(i > len(set(depth_map[:j])) for j, i in enumerate(depth_map)):
        raise StageError(f"{shown}: the first occurrence of each old block must come in order 0, 1, 2, ... (old "
                         "blocks keep their order; later occurrences are copies)",
                         key="depth_map")
    if len(set(depth_map)) < old:
        missing = sorted(set(range(old)) - set(depth_map))
        raise StageError(f"{shown}: leaves out old block(s) {missing} of the model's {old}; every old block must "
                         "appear (first as itself), a growth drops nothing", key="depth_map")
    if len(depth_map) <= old:
        raise StageError(f"{shown}: has {len(depth_map)} entries for a model of {old} blocks; a depth growth adds "
                         "blocks, so give more entries than the model has blocks (copies of old blocks)",
                         key="depth_map")
    if new is not None and len(depth_map) != new:
        raise StageError(f"{shown}: has {len(depth_map)} entries, but the grown model has n_layer={new}; give one "
                         "old-block index per grown block", key="depth_map")


def depth_change(old: int, new: int, order: str, init: str, depth_map: tuple[int, ...] | None = None
                 ) -> DepthChange:
    """The :class:`DepthChange` of growing ``old`` blocks to ``new`` by ``order`` (or the explicit ``depth_map``,
    checked by :func:`check_depth_map`; its order is then ``"map"``) and ``init``.

    Example::

        >>> depth_change(2, 4, "stack", "copy", depth_map=(0, 0, 1, 1)) == depth_change(2, 4, "interleave", "copy")
        False
        >>> depth_change(2, 4, "stack", "copy", depth_map=(0, 0, 1, 1)).source
        (0, 0, 1, 1)
    """
    if depth_map is None:
        source = named_depth_map(old, new, order)
    else:
        check_depth_map(tuple(depth_map), old, new)
        source, order = tuple(depth_map), "map"
    return DepthChange(old=old, new=new, order=order, init=init, source=source, fresh=fresh_positions(source))


def split_block_name(name: str) -> tuple[int, str] | None:
    """``(block index, name within the block)`` of a GPT tensor name, or ``None`` outside the blocks.

    Example::

        >>> split_block_name("transformer.h.3.attn.qkv.weight")
        (3, 'attn.qkv.weight')
    """
    match = _BLOCK.match(name)
    return (int(match.group(1)), match.group(2)) if match else None


def block_name(index: int, rest: str) -> str:
    return f"transformer.h.{index}.{rest}"


def is_output_projection(rest: str) -> bool:
    """Whether a block tensor (name within the block) writes the block's output into the residual stream: what the
    ``-zero`` inits zero (a LayerNorm post-norm's bias included: ``LayerNorm(0) = bias``).

    Example::

        >>> is_output_projection("mlp.experts.3.proj.weight"), is_output_projection("mlp.experts.3.fc_1.weight")
        (True, False)
    """
    return bool(_OUTPUT_PROJECTION.match(rest))


def fresh_block_init(rest: str, ndim: int, depth_init: str) -> str:
    """How one tensor of a new block starts: ``copy`` (its source's, width-grown like it), ``zero``, ``one`` (norm
    weights under ``random-zero``) or ``normal`` (litgpt's pretraining init)."""
    if depth_init != "copy" and is_output_projection(rest):
        return "zero"
    if depth_init.startswith("copy"):
        return "copy"
    if ndim >= 2:
        return "normal"
    return "one" if _NORM_WEIGHT.search(rest) else "zero"


def litgpt_init_std(n_embd: int) -> float:
    """litgpt's pretraining init of linear weights: ``sqrt(2 / (5 n_embd))`` (GPT-NeoX)."""
    return math.sqrt(2.0 / 5 / n_embd)


def depth_config_values(config, change: DepthChange) -> dict:
    """The ``litgpt.Config`` fields a depth growth changes: ``n_layer``, and the per-block lists (sliding-window and
    RoPE indicators) and ``first_k_dense_replace``, each block taking its source's, so that a kept block computes
    what it did and a copied block what its source does.

    Raises:
        ValueError: when the blocks with a dense MLP (``first_k_dense_replace``) would not come first in the grown
            model (``stack`` puts copies of them on top), naming the orders that keep them first.
    """
    values: dict = {"n_layer": change.new}
    for key in ("sliding_window_indices", "rope_indices"):
        indicator = getattr(config, key, None)
        if indicator is not None:
            values[key] = [indicator[i] for i in change.source]
    k = getattr(config, "first_k_dense_replace", None)
    if k:
        dense = [src < k for src in change.source]
        new_k = sum(dense)
        if any(dense[new_k:]) or not all(dense[:new_k]):
            given = (f"depth_map={tuple(change.source)}" if change.order == "map"
                     else f"depth_order={change.order!r}")
            fix = (f"list the copies of blocks 0..{k - 1} before the first of block {k} in depth_map, or use "
                   "depth_order='interleave' or 'middle'" if change.order == "map"
                   else "use depth_order='interleave' or 'middle', which keep the dense blocks first")
            raise ValueError(
                f"first_k_dense_replace={k}: litgpt builds dense MLPs in the first blocks only, but {given} puts a "
                f"copy of a dense block at position {dense.index(True, new_k)} of {change.new}; {fix}")
        values["first_k_dense_replace"] = new_k
    return values
