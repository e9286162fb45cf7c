"""What a growth callback reads from what Lightning hands it: the litgpt ``GPT`` to grow inside the LightningModule
(:func:`find_gpt`, among several), the token tensor of a batch and the model's loss on it (:func:`token_batch`,
:func:`batch_loss`: the loss before and after a growth), and the grown tensors no optimizer trains
(:func:`zero_started_untrained`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.nn.functional as F

from lightning_sparkling.growth.errors import GrowthError
from lightning_sparkling.growth.surgery import clean_name
from lightning_sparkling.parallel.compile import eager

if TYPE_CHECKING:
    from litgpt import GPT

__all__ = ["batch_loss", "check_new_entries_train", "find_gpt", "path_among_several", "token_batch",
           "zero_started_untrained"]


def find_gpt(pl_module: torch.nn.Module, attr: str | None = None,
             optimizers: Sequence[torch.optim.Optimizer] = ()):
    """The litgpt ``GPT`` to grow inside ``pl_module`` (looking through ``torch.compile`` wrappers).

    With several GPTs (a student and its frozen teacher, a model and its EMA copy) it is the one ``attr`` names,
    else the only one whose parameters ``optimizers`` hold, else (before the optimizers exist) the only one with a
    parameter that requires a gradient.

    Args:
        pl_module: the LightningModule (any module holding the GPT).
        attr: the dotted attribute path of the GPT to grow (``"student"``, ``"model.backbone"``); ``None``: find it.
        optimizers: the trainer's optimizers (empty before Lightning configured them).

    Returns:
        The ``GPT`` module itself (not its compile wrapper).

    Raises:
        GrowthError: for no GPT, an ``attr`` that is not one, or several GPTs with no way to tell which one trains.

    Example::

        gpt = find_gpt(module, attr="student")
    """
    from litgpt.model import GPT

    found = {id(m): (name, m) for name, m in pl_module.named_modules() if isinstance(m, GPT)}
    names = ", ".join(repr(n or "<root>") for n, _ in found.values()) or "none"
    if attr is not None:
        return _gpt_at(pl_module, attr, names)
    if len(found) == 1:
        return next(iter(found.values()))[1]
    if not found:
        raise GrowthError(
            "GrowthCallback needs a litgpt GPT inside the LightningModule, found none; hold the model to grow as a "
            "`litgpt.GPT` attribute (e.g. `self.model = GPT(config)`, in __init__ or configure_model)"
        )
    candidates = list(found.values())
    held = {id(p) for opt in optimizers for group in opt.param_groups for p in group["params"]}
    trained = [(n, m) for n, m in candidates if any(id(p) in held for p in m.parameters())]
    if not optimizers:  # before configure_optimizers: the GPTs that can train at all
        trained = [(n, m) for n, m in candidates if any(p.requires_grad for p in m.parameters())]
    if len(trained) == 1:
        return trained[0][1]
    why = "whose parameters the optimizers train" if optimizers else "with parameters that require a gradient"
    raise GrowthError(
        f"GrowthCallback found {len(found)} litgpt GPTs in the LightningModule ({names}) and {len(trained)} {why}: "
        "name the one to grow, e.g. GrowthCallback(..., model_attr=" + repr(candidates[0][0]) + ")"
    )


def _gpt_at(pl_module: torch.nn.Module, attr: str, names: str):
    """The GPT at the dotted path ``attr`` (through ``torch.compile``'s ``_orig_mod``)."""
    from litgpt.model import GPT

    try:
        module = pl_module.get_submodule(attr)
    except AttributeError:
        module = None
    while module is not None and not isinstance(module, GPT) and hasattr(module, "_orig_mod"):
        module = cast(torch.nn.Module, module._orig_mod)  # torch.compile's OptimizedModule
    if not isinstance(module, GPT):
        what = "nothing" if module is None else type(module).__name__
        raise GrowthError(f"GrowthCallback(model_attr={attr!r}): the LightningModule holds {what} there, not a "
                          f"litgpt GPT; the GPTs it holds are at {names}")
    return module


def zero_started_untrained(gpt: torch.nn.Module, plans: Sequence[Any],
                           optimizers: Sequence[torch.optim.Optimizer]) -> list[tuple[int, str, str]]:
    """The grown tensors whose new entries start at zero and that nothing will train: ``(stage, name, why)``.

    A tensor grown with a ``zero`` side (``random-zero``'s fan-in columns) or a new block's ``zero`` tensor
    (``depth_init='copy-zero'``) has new entries at 0.0; only its gradient moves them. When the parameter it grows
    is in no optimizer, or frozen (``requires_grad=False``), they stay 0.0 for the rest of the run (a grown
    ``lm_head`` then never reads the new channels). A frozen tensor whose new entries start non-zero is fine.

    Args:
        gpt: the GPT before the stages of ``plans`` (names are looked up in it).
        plans: the :class:`~lightning_sparkling.growth.plan.GrowthPlan` of each stage still to apply, in order.
        optimizers: the trainer's optimizers.

    Returns:
        ``(stage index, tensor name, "in no optimizer" | "frozen")`` for each such tensor, in plan order.
    """
    # tied lm_head / wte under both names; FSDP1, checkpoint and compile wrappers' prefixes left out
    params = {clean_name(n): p for n, p in gpt.named_parameters(remove_duplicate=False)}
    held = {id(p) for opt in optimizers for group in opt.param_groups for p in group["params"]}
    found = []
    for j, plan in enumerate(plans):
        for name, tensor in plan.tensors.items():
            if not (tensor.block_init == "zero" or any(d.mode == "zero" for d in tensor.dims)):
                continue
            source = tensor.source_name
            for earlier in reversed(plans[:j]):  # back to the name in the model as it is now
                before = earlier.tensors.get(source)
                source = before.source_name if before is not None else source
            param = params.get(source)
            if param is None:  # a buffer, not a parameter
                continue
            if id(param) not in held:
                found.append((plan.stage_index, name, "in no optimizer"))
            elif not param.requires_grad:
                found.append((plan.stage_index, name, "frozen (requires_grad=False)"))
    return found


def check_new_entries_train(gpt: torch.nn.Module, plans: Sequence[Any],
                            optimizers: Sequence[torch.optim.Optimizer]) -> None:
    """Refuse stages whose zero-started new entries nothing trains (:func:`zero_started_untrained`).

    Raises:
        GrowthError: naming the first such stage, its parameters and the fix.
    """
    untrained = zero_started_untrained(gpt, plans, optimizers)
    if not untrained:
        return
    k = untrained[0][0]
    stage = next(plan.stage for plan in plans if plan.stage_index == k)
    mine = [f"{name} ({why})" for j, name, why in untrained if j == k]
    names = ", ".join(mine[:4]) + (f" and {len(mine) - 4} more" if len(mine) > 4 else "")
    inits = f"init={stage.init!r}" + (f", depth_init={stage.depth_init!r}" if stage.n_layer is not None else "")
    raise GrowthError(
        f"GrowthCallback: stage {k} (GrowthStage(at_step={stage.at_step}, {inits})) starts new entries at 0.0 in "
        f"parameters no optimizer trains: {names}; only their gradient could move them, so they would stay 0.0 "
        "for the rest of the run. Add these parameters to an optimizer (e.g. AdamW(self.parameters())), or "
        "choose a recipe whose new entries are not zero (e.g. GrowthStage(..., recipe='paper'): init='copy-copy'; "
        "for depth, depth_init='copy')"
    )


def path_among_several(pl_module: torch.nn.Module, gpt: torch.nn.Module) -> str | None:
    """The dotted name of ``gpt`` inside ``pl_module`` when it holds several GPTs (``None`` when only one: it is
    found again by looking, also after a strategy re-wrapped it)."""
    from litgpt.model import GPT

    if sum(isinstance(m, GPT) for m in pl_module.modules()) < 2:
        return None
    return next((name for name, module in pl_module.named_modules() if module is gpt and name), None)


@torch.no_grad()
def batch_loss(pl_module: torch.nn.Module, gpt: GPT, batch: Any, backend: Any) -> float:
    """Loss of ``gpt`` on a training batch: next-token cross-entropy of its first token tensor (:func:`token_batch`),
    or ``pl_module.growth_check_loss(batch)`` when the module defines it; the growth backend's
    ``forward_module`` runs it (a collective under a sharded strategy), eagerly on a compiled model."""
    custom = getattr(pl_module, "growth_check_loss", None)
    with eager():  # a compiled model runs this one forward eagerly: no graph compiled for it
        if callable(custom):
            loss = custom(batch)
        else:
            ids = token_batch(batch)
            if ids is None or ids.size(1) < 2:
                g = torch.Generator().manual_seed(0)
                ids = torch.randint(0, gpt.config.vocab_size, (1, min(gpt.max_seq_length, 16) + 1), generator=g)
            ids = ids[:, : gpt.max_seq_length + 1].to(next(gpt.parameters()).device)  # (B, T + 1)
            logits = backend.forward_module(pl_module, gpt)(ids[:, :-1])  # (B, T, padded_vocab_size)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten().long())  # int32: litdata
    backend.reshard(pl_module, gpt)
    return float(loss)


def token_batch(batch: Any) -> torch.Tensor | None:
    """The first 2-D integer tensor of a batch (tensor, tuple/list or dict): litgpt pretraining batches."""
    if isinstance(batch, torch.Tensor):
        return batch if batch.ndim == 2 and not batch.is_floating_point() else None
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else []
    for item in items:
        found = token_batch(item)
        if found is not None:
            return found
    return None
