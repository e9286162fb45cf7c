"""Activation checkpointing of a litgpt ``GPT``, block by block, that a growth can follow.

:func:`checkpoint_blocks` makes every block of ``model.transformer.h`` run its forward under
``torch.utils.checkpoint.checkpoint(..., use_reentrant=False)``: the block's activations are recomputed in the
backward instead of being kept. Unlike ``checkpoint_wrapper`` (litgpt's ``parallelize_fn``, torchtitan), the block is
not put inside a wrapper module: only its ``forward`` is replaced, on the instance. Parameter names, ``state_dict``
keys and the module structure stay those of a plain ``GPT``, so :func:`~lightning_sparkling.growth.surgery.grow_model`
grows it in place and checkpoints stay plain litgpt state_dicts. It composes like ``checkpoint_wrapper``: apply it
before ``torch.compile`` (the checkpoint is traced into the graph) and before ``fully_shard`` (FSDP2's hooks run around
the checkpointed forward, and its backward all-gather comes before the recomputation).

A depth growth adds new ``Block`` modules: :func:`checkpoint_new_blocks` (called by
:class:`~lightning_sparkling.callbacks.growth.GrowthCallback` after every growth) checkpoints them when the model's
other blocks are.

Example::

    from lightning_sparkling.parallel import checkpoint_blocks

    def configure_model(self):
        checkpoint_blocks(self.model)  # before compiling or sharding
"""

from __future__ import annotations

import functools
from typing import Any, cast

import torch.nn as nn
from torch.utils.checkpoint import checkpoint

__all__ = ["checkpoint_blocks", "checkpoint_new_blocks", "is_checkpointed"]

_MARK = "_sparkling_checkpointed"


def _checkpointed_forward(block: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """``type(block).forward(block, ...)`` under non-reentrant activation checkpointing (RNG state preserved, so a
    block with dropout recomputes the same mask)."""
    return checkpoint(type(block).forward, block, *args, use_reentrant=False, **kwargs)


def is_checkpointed(block: nn.Module) -> bool:
    """Whether :func:`checkpoint_blocks` replaced ``block``'s forward (compiled since, per block, or not)."""
    return block.__dict__.get(_MARK, False)


def _blocks(model: nn.Module) -> nn.ModuleList:
    try:
        return cast(nn.ModuleList, model.get_submodule("transformer.h"))
    except AttributeError as err:
        raise TypeError(f"activation checkpointing needs a litgpt GPT (model.transformer.h), got "
                        f"{type(model).__name__}") from err


def checkpoint_blocks(model: nn.Module) -> nn.Module:
    """Checkpoint the activations of every block of a litgpt ``GPT`` (in place; blocks already checkpointed are
    left alone, so calling it again is safe).

    Args:
        model: a litgpt ``GPT`` (plain; not compiled per block yet).

    Returns:
        ``model``.

    Raises:
        TypeError: ``model`` has no ``transformer.h``.
        ValueError: a block whose forward was already replaced by something else (e.g. compiled per block): apply
            activation checkpointing first.

    Example::

        >>> from litgpt import GPT, Config
        >>> model = checkpoint_blocks(GPT(Config(n_layer=2, n_embd=16, n_head=2, vocab_size=32, block_size=8)))
        >>> all(is_checkpointed(b) for b in model.transformer.h)
        True
    """
    for i, block in enumerate(_blocks(model)):
        if is_checkpointed(block):
            continue
        if "forward" in block.__dict__:
            raise ValueError(f"block {i}'s forward is already replaced ({block.__dict__['forward']!r}): apply "
                             "activation checkpointing before compiling the blocks")
        block.forward = functools.partial(_checkpointed_forward, block)
        block.__dict__[_MARK] = True  # a per-block compile wraps the forward: the mark stays readable
    return model


def checkpoint_new_blocks(model: nn.Module) -> list[int]:
    """After a growth: checkpoint the blocks that are not, when some block of ``model`` is (a depth growth's new
    blocks). Returns the indices of the blocks it checkpointed (none when no block was checkpointed)."""
    blocks = _blocks(model)
    if not any(is_checkpointed(b) for b in blocks):
        return []
    new = [i for i, b in enumerate(blocks) if not is_checkpointed(b)]
    if new:
        checkpoint_blocks(model)
    return new

