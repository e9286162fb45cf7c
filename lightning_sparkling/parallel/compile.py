"""``torch.compile`` of a litgpt ``GPT`` that a growth can follow.

- :func:`compile_gpt` compiles the whole GPT in place (``nn.Module.compile``: the module's call is compiled, as
  ``litgpt pretrain``'s ``torch.compile(model)`` does, but without an ``OptimizedModule`` wrapper, so parameter names
  and ``state_dict`` keys stay plain). ``per_block=True`` compiles each block's forward instead, as torchtitan does
  under FSDP2 (``fully_shard``'s hooks stay outside the compiled code).
- :func:`recompile_after_growth`: a growth gives the model new parameter shapes (and, for depth, new blocks). The
  compiled graphs of the old shapes would only fail their guards and pile up next to the new ones (automatic dynamic
  shapes may even recompile the new ones with symbolic sizes), so every graph is dropped
  (``torch.compiler.reset()``) and the first call after the growth compiles the grown shapes afresh. New blocks of a
  per-block compiled model are compiled like the old ones.
- :func:`eager`: a context under which compiled code runs eagerly (``torch.compiler.set_stance("force_eager")``):
  the growth's loss check, the RMS monitor's logging steps and the sample generation use it, so that none of them
  compiles a graph of its own.

A Trainer user who compiles the GPT (``model.compile()``, ``torch.compile(model)``, or the LightningModule) needs
nothing more: :class:`~lightning_sparkling.callbacks.growth.GrowthCallback` calls :func:`recompile_after_growth` when it
finds compiled code in the module.

Example::

    from lightning_sparkling.parallel import compile_gpt

    def configure_model(self):
        compile_gpt(self.model)  # after activation checkpointing, before sharding
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

if TYPE_CHECKING:
    from litgpt import GPT

__all__ = ["compile_gpt", "eager", "is_compiled", "recompile_after_growth"]

#: attribute of a per-block compiled forward holding its ``torch.compile`` options (to compile new blocks alike)
_OPTIONS = "_sparkling_compile_options"


def _block_compiled(block: nn.Module) -> bool:
    return hasattr(block.__dict__.get("forward"), _OPTIONS)


def is_compiled(module: nn.Module) -> bool:
    """Whether ``module`` or one of its submodules runs compiled code: ``nn.Module.compile()``, an
    ``OptimizedModule`` (``torch.compile(module)``), a block compiled by :func:`compile_gpt` (``per_block=True``), or a
    LightningModule given to ``trainer.fit`` compiled (Lightning's ``_compiler_ctx``)."""
    if getattr(module, "_compiler_ctx", None):
        return True
    return any(getattr(m, "_compiled_call_impl", None) is not None or isinstance(m, torch._dynamo.OptimizedModule)
               or _block_compiled(m) for m in module.modules())


def compile_gpt(model: nn.Module, *, per_block: bool = False, **options: Any) -> nn.Module:
    """Compile a litgpt ``GPT`` in place with ``torch.compile(**options)`` (litgpt's defaults: inductor).

    Already compiled modules are left alone, so calling it again is safe (``configure_model`` may run again).

    Args:
        model: a litgpt ``GPT``; apply activation checkpointing before (:func:`~lightning_sparkling.parallel.
            checkpoint_blocks`), sharding after.
        per_block: compile each block's forward (FSDP2, FSDP1) instead of the whole GPT (one device, DDP).
        options: ``torch.compile`` keyword arguments (``backend``, ``mode``, ``dynamic``, ``fullgraph``, ...).

    Returns:
        ``model``.

    Example::

        >>> from litgpt import GPT, Config
        >>> model = compile_gpt(GPT(Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32)), backend="eager")
        >>> is_compiled(model), list(model.state_dict())[0]
        (True, 'lm_head.weight')
    """
    if not per_block:
        if getattr(model, "_compiled_call_impl", None) is None:
            model.compile(**options)
        return model
    _compile_blocks(model, options)
    return model


def _compile_blocks(model: GPT, options: dict[str, Any]) -> list[int]:
    compiled = []
    for i, block in enumerate(model.transformer.h):
        if not _block_compiled(block):
            forward = torch.compile(block.forward, **options)  # the instance's forward: checkpointed if it is
            setattr(forward, _OPTIONS, dict(options))
            block.forward = forward
            compiled.append(i)
    return compiled


def recompile_after_growth(module: nn.Module, gpt: GPT | None = None) -> bool:
    """Drop every compiled graph after a growth, so that the next call compiles the grown shapes; compile the new
    blocks of a per-block compiled ``gpt`` like its old ones. A no-op (``False``) when nothing in ``module`` is
    compiled.

    ``torch.compiler.reset()`` drops the compiled code of the whole process, not only the model's: anything else a
    user compiled recompiles at its next call too.

    Args:
        module: the LightningModule (or any module holding the GPT).
        gpt: the grown GPT (its blocks are compiled per block when some already are).

    Returns:
        whether the model was compiled (and its graphs dropped).
    """
    if not is_compiled(module):
        return False
    torch.compiler.reset()
    if gpt is not None:
        options = next((getattr(b.__dict__["forward"], _OPTIONS) for b in gpt.transformer.h if _block_compiled(b)),
                       None)
        if options is not None:
            _compile_blocks(gpt, options)
    return True


@contextlib.contextmanager
def eager() -> Iterator[None]:
    """Run compiled code eagerly inside the block (``torch.compiler.set_stance("force_eager")``); the previous
    stance is restored on exit."""
    with torch.compiler.set_stance("force_eager"):
        yield
