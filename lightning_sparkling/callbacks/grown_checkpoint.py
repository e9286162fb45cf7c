"""Load a checkpoint of a grown model into a user's LightningModule, outside a ``Trainer.fit``
(:func:`load_grown_checkpoint`): evaluation, inference, or a new run from the grown weights.

A checkpoint saved after a growth holds the grown model's weights; the module's ``__init__`` (or
``configure_model``) builds the small one. Lightning's ``load_from_checkpoint`` then fails on the first grown
tensor ("size mismatch for model.lm_head.weight"). The checkpoint also holds the growth callback's state (the
stages it applied and their seed): regrowing the fresh GPT by them gives it the checkpoint's shapes, and the weights
load as for any checkpoint.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_info

from lightning_sparkling.callbacks.module_parts import find_gpt
from lightning_sparkling.growth.errors import GrowthError
from lightning_sparkling.growth.plan import plan_growth
from lightning_sparkling.growth.record import growth_state
from lightning_sparkling.growth.stage import GrowthStage
from lightning_sparkling.growth.surgery import grow_model

__all__ = ["load_grown_checkpoint", "regrow_from_state"]

ModuleT = TypeVar("ModuleT", bound=pl.LightningModule)


def regrow_from_state(pl_module: torch.nn.Module, state: dict[str, Any], model_attr: str | None = None) -> None:
    """Grow the GPT inside ``pl_module`` by the stages a growth callback's checkpointed ``state`` applied (its values
    are placeholders: the checkpoint's weights overwrite them).

    Args:
        pl_module: a freshly built module holding the pre-growth GPT.
        state: ``checkpoint["callbacks"]["GrowthCallback"]``.
        model_attr: the GPT to grow among several (default: the one the checkpoint recorded, else the only one).

    Raises:
        GrowthError: when the module's GPT is not the pre-growth model of the checkpoint's stages.
    """
    grown = int(state.get("grown", 0))
    if not grown:
        return
    gpt = find_gpt(pl_module, model_attr or state.get("model_attr"))
    seed = int(state["seed"])
    tied = gpt.lm_head.weight is gpt.transformer.wte.weight
    for k, recorded in enumerate(state["stages"][:grown]):
        stage = GrowthStage(**recorded)
        plan = plan_growth(gpt.config, stage, seed=seed, stage_index=k, tied_embeddings=tied)
        grow_model(gpt, stage, seed=seed, stage_index=k, plan=plan)


def load_grown_checkpoint(module_cls: type[ModuleT], checkpoint_path: str | Path, *, model_attr: str | None = None,
                          **kwargs: Any) -> ModuleT:
    """``module_cls.load_from_checkpoint(checkpoint_path, **kwargs)`` for a checkpoint saved after a growth.

    Lightning builds the module (``__init__``, then ``configure_model``) and calls its ``on_load_checkpoint``
    before it loads the weights; for this one load, that hook first regrows the GPT by the stages the checkpoint's
    :class:`~lightning_sparkling.callbacks.GrowthCallback` state applied (:func:`regrow_from_state`). A checkpoint
    without growth loads as ``load_from_checkpoint`` loads it.

    Args:
        module_cls: the LightningModule class the checkpoint was trained with.
        checkpoint_path: the ``.ckpt`` file (``ModelCheckpoint``'s).
        model_attr: the GPT to regrow among several (default: the one the checkpoint grew).
        **kwargs: passed to ``load_from_checkpoint`` (``map_location``, ``strict``, hyperparameter overrides).

    Returns:
        The module, holding the grown model with the checkpoint's weights.

    Example::

        from lightning_sparkling import load_grown_checkpoint

        module = load_grown_checkpoint(MyModule, "checkpoints/step=30.ckpt")
    """
    checkpoint = torch.load(checkpoint_path, map_location="cpu", weights_only=False, mmap=True)
    state = growth_state(checkpoint.get("callbacks"))
    del checkpoint
    if not state or not int(state.get("grown", 0)):
        return module_cls.load_from_checkpoint(checkpoint_path, **kwargs)
    own = module_cls.__dict__.get("on_load_checkpoint")
    inherited = module_cls.on_load_checkpoint

    def on_load_checkpoint(self: pl.LightningModule, checkpoint: dict[str, Any]) -> None:
        regrow_from_state(self, state, model_attr)
        inherited(self, checkpoint)

    module_cls.on_load_checkpoint = on_load_checkpoint  # type: ignore[method-assign, assignment]  # this one load only
    try:
        module = module_cls.load_from_checkpoint(checkpoint_path, **kwargs)
    except RuntimeError as err:
        if "size mismatch" not in str(err):
            raise
        raise GrowthError(f"load_grown_checkpoint({module_cls.__name__}, {str(checkpoint_path)!r}): the module's GPT, "
                          f"regrown by the checkpoint's {int(state['grown'])} stage(s), still differs from the "
                          f"checkpoint's; build the module with the config the run started from ({err})") from err
    finally:
        if own is None:
            del module_cls.on_load_checkpoint
        else:
            module_cls.on_load_checkpoint = own  # type: ignore[method-assign]
    rank_zero_info(f"load_grown_checkpoint: regrew {module_cls.__name__}'s GPT by the checkpoint's "
                   f"{int(state['grown'])} growth stage(s) before loading its weights")
    return module
