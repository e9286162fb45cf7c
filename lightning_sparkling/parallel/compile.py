"""``torch.compile`` of a litgpt ``GPT`` that a growth can follow.

- :func:`compile_gpt` compiles the whole GPT in place (``nn.Module.compile``: the module's call is compiled, as
  ``litgpt pretrain``'s ``torch.compile(model)`` does, but without an ``OptimizedModule`` wrapper, so parameter names
  and ``state_dict`` keys stay plain). ``per_block=True`` compiles each block's forward instead, as torchtitan does
  under FSDP2 (``fully_shard``'s hooks stay outside the compiled code); the blocks share one graph.
- :func:`recompile_after_growth`: a growth gives the model new parameter shapes (and, for depth, new blocks). The
  compiled graphs of the old shapes would only fail their guards and pile up next to the new ones (up to dynamo's
  ``recompile_limit`` per code object, after which the frame runs eagerly), so the graphs of the frames the model's
  compiled code runs are dropped (dynamo keeps them on the code object: ``GPT.forward`` compiled whole, the block's
  forward compiled per block; ``remove_from_cache``) and the first call after the growth compiles the grown shapes.
  Nothing else is dropped: a function the user compiled elsewhere keeps its graphs (``torch.compiler.reset()`` would
  drop them all). New blocks of a per-block compiled model are compiled like the old ones; per block, the blocks share
  one compiled graph, so a depth growth compiles nothing new and a width growth one block's graph.
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
import functools
import types
from collections.abc import Collection, Iterator
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

if TYPE_CHECKING:
    from litgpt import GPT

__all__ = ["compile_gpt", "compiled_codes", "compiled_scope", "eager", "is_compiled", "recompile_after_growth"]

#: attribute of a per-block compiled forward holding its ``torch.compile`` options (to compile new blocks alike)
_OPTIONS = "_sparkling_compile_options"
#: the blocks' parameter shapes that the graphs of each per-block compiled code object were compiled for
_GRAPH_SHAPES: dict[types.CodeType, frozenset] = {}


def _shapes(block: nn.Module) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return tuple((name, tuple(p.shape)) for name, p in block.named_parameters())


def _block_compiled(block: nn.Module) -> bool:
    return hasattr(block.__dict__.get("forward"), _OPTIONS)


def is_compiled(module: nn.Module) -> bool:
    """Whether ``module`` or one of its submodules runs compiled code: ``nn.Module.compile()``, an
    ``OptimizedModule`` (``torch.compile(module)``), a block compiled by :func:`compile_gpt` (``per_block=True``), or a
    LightningModule given to ``trainer.fit`` compiled (Lightning's ``_compiler_ctx``)."""
    return any(_compiled_here(m) for m in module.modules())


def compiled_scope(module: nn.Module) -> str | None:
    """How ``module`` is compiled: ``"whole"`` (a module compiled as one graph: ``model.compile()``,
    ``torch.compile(model)``, a compiled LightningModule), ``"blocks"`` (only blocks compiled by :func:`compile_gpt`
    with ``per_block=True``), ``None`` (nothing compiled)."""
    if not is_compiled(module):
        return None
    return "blocks" if all(_block_compiled(m) for m in module.modules() if _compiled_here(m)) else "whole"


def _compiled_here(module: nn.Module) -> bool:
    return bool(getattr(module, "_compiler_ctx", None) or getattr(module, "_compiled_call_impl", None) is not None
                or isinstance(module, torch._dynamo.OptimizedModule) or _block_compiled(module))


def compile_gpt(model: nn.Module, *, per_block: bool = False, **options: Any) -> nn.Module:
    """Compile a litgpt ``GPT`` in place with ``torch.compile(**options)`` (litgpt's defaults: inductor).

    Already compiled modules are left alone, so calling it again is safe (``configure_model`` may run again).

    Args:
        model: a litgpt ``GPT``; apply activation checkpointing before (:func:`~lightning_sparkling.parallel.
            checkpoint_blocks`), sharding after.
        per_block: compile each block's forward instead of the whole GPT (``compile: blocks``; always under FSDP2):
            the blocks share one graph, so a width growth recompiles one block's graph and a depth growth none.
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
            code = _compiled_function(forward).__code__
            # graphs cached already (a growth that rebuilt the model, FSDP2, compiles its blocks anew): the record
            # stays the shapes they were compiled for; none (a first compile, or after torch.compiler.reset()): these
            if not torch._dynamo.eval_frame._debug_get_cache_entry_list(code) or code not in _GRAPH_SHAPES:
                _GRAPH_SHAPES[code] = frozenset([_shapes(block)])
            block.forward = forward
            compiled.append(i)
    return compiled


def compiled_codes(module: nn.Module, changed: Collection[types.CodeType] | None = None) -> set[types.CodeType]:
    """The code objects whose frames the compiled parts of ``module`` run, where dynamo keeps their graphs: the
    ``forward`` of a module compiled whole (``nn.Module.compile()``, ``torch.compile(module)``, a LightningModule
    compiled for ``trainer.fit``: also its ``*_step`` methods), the function compiled per block.

    Frames that a graph break inside the compiled code starts are not among them (their graphs stay until their
    guards fail; ``torch.compiler.reset()`` drops them). Another module of the same class compiled in the same
    process (a second litgpt ``GPT``) shares these code objects.

    Args:
        module: the module (a LightningModule or the GPT).
        changed: count the code of a per-block compiled block only when in ``changed`` (``None``: every one).

    Returns:
        the code objects.

    Example::

        >>> from litgpt import GPT, Config
        >>> model = compile_gpt(GPT(Config(n_layer=1, n_embd=16, n_head=2, vocab_size=32)), backend="eager")
        >>> [code.co_qualname for code in compiled_codes(model)]
        ['GPT.forward']
    """
    codes: set[types.CodeType] = set()
    for m in module.modules():
        ctx = getattr(m, "_compiler_ctx", None)
        if ctx:  # Lightning's: the original forward and step methods, each compiled
            codes.update(f.__code__ for key, f in ctx.items() if key.startswith("original_") and callable(f))
        if getattr(m, "_compiled_call_impl", None) is not None:
            codes.add(type(m).forward.__code__)  # dynamo skips nn.Module's call machinery: the forward is compiled
        if isinstance(m, torch._dynamo.OptimizedModule):
            codes.add(type(m._orig_mod).forward.__code__)
        if _block_compiled(m) and (code := _compiled_function(m.__dict__["forward"]).__code__) and \
                (changed is None or code in changed):
            codes.add(code)
    return codes


def _reshaped_codes(module: nn.Module) -> dict[types.CodeType, frozenset]:
    """The per-block compiled code objects whose blocks' parameter shapes differ from those their graphs were compiled
    for (a width growth's; a depth growth's new blocks have the old shapes, so the old blocks' graph serves them),
    with the shapes now."""
    now: dict[types.CodeType, set] = {}
    for m in module.modules():
        if _block_compiled(m):
            now.setdefault(_compiled_function(m.__dict__["forward"]).__code__, set()).add(_shapes(m))
    return {code: frozenset(shapes) for code, shapes in now.items() if _GRAPH_SHAPES.get(code) != frozenset(shapes)}


def _compiled_function(compiled: Any) -> Any:
    """The function whose frame ``torch.compile`` compiles: a bound method's function, a partial's (activation
    checkpointing's)."""
    original = getattr(compiled, "_torchdynamo_orig_callable", compiled)
    while isinstance(original, functools.partial):
        original = original.func
    return getattr(original, "__func__", original)


def recompile_after_growth(module: nn.Module, gpt: GPT | None = None) -> bool:
    """Drop the compiled graphs of ``module`` after a growth (:func:`compiled_codes`), so that the next call compiles
    the grown shapes; compile the new blocks of a per-block compiled ``gpt`` like its old ones. A no-op (``False``)
    when nothing in ``module`` is compiled.

    Per block, the graphs are dropped only where a block's parameter shapes changed (a depth growth's new blocks run
    the old blocks' graph). Graphs compiled for other code stay: a function the user compiled elsewhere does not
    recompile.

    Args:
        module: the LightningModule (or any module holding the GPT).
        gpt: the grown GPT (its blocks are compiled per block when some already are).

    Returns:
        whether the model was compiled (and its graphs dropped).
    """
    if not is_compiled(module):
        return False
    reshaped = _reshaped_codes(module)
    for code in compiled_codes(module, changed=reshaped):
        torch._dynamo.eval_frame.remove_from_cache(code)
    _GRAPH_SHAPES.update(reshaped)
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
