"""Gradient clipping that works with a fused optimizer under every precision (:func:`clip_gradients`), and the
fit-start check that tells a user's module when Lightning would refuse it (:func:`check_gradient_clipping`).

Lightning's mixed-precision plugins refuse to clip the gradients of an optimizer that unscales them itself
(``_step_supports_amp_scaling``: fused Adam / AdamW): ``RuntimeError: The current optimizer, AdamW, does not allow
for gradient clipping ...``, at the first optimizer step. They refuse it under ``bf16-mixed`` too, where no gradient
scaler exists and nothing needs unscaling. litgpt's own pretrain (Fabric) clips fused AdamW without complaint. Here:

- no scaler (``bf16-mixed``, ``32-true``, ``bf16-true``): the gradients are clipped directly, as Fabric does;
- a scaler (``16-mixed``): the gradients are unscaled first (``scaler.unscale_``, which also records inf/NaN), then
  clipped; ``GradScaler.step`` then sees the optimizer as already unscaled, so the fused kernel applies no second
  unscale and skips the step where the unscale found an overflow (torch's documented order: unscale, clip, step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.plugins.precision import FSDPPrecision, MixedPrecision
from lightning.pytorch.utilities.enums import GradClipAlgorithmType

from lightning_sparkling.growth.errors import GrowthError

if TYPE_CHECKING:
    from torch.distributed.fsdp import FullyShardedDataParallel

__all__ = ["check_gradient_clipping", "clip_gradients", "unscales_itself"]


def unscales_itself(optimizer: Any) -> bool:
    """Whether ``optimizer`` unscales its gradients inside ``step`` (fused Adam / AdamW), the optimizers
    Lightning's mixed-precision plugins refuse to clip.

    Example::

        >>> p = torch.nn.Parameter(torch.zeros(2))
        >>> unscales_itself(torch.optim.AdamW([p], fused=True)), unscales_itself(torch.optim.AdamW([p], foreach=True))
        (True, False)
    """
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


def _fsdp1_root(pl_module: pl.LightningModule) -> FullyShardedDataParallel | None:
    """The outermost FSDP1 unit inside ``pl_module`` (it computes the global norm over every shard), or ``None``;
    the modules are searched only when the precision plugin is ``FSDPPrecision``, the one Lightning gives the FSDP1
    strategy (this runs every optimizer step)."""
    from torch.distributed.fsdp import FullyShardedDataParallel

    if not isinstance(pl_module.trainer.precision_plugin, FSDPPrecision):
        return None
    return next((m for m in pl_module.modules() if isinstance(m, FullyShardedDataParallel)), None)


def clip_gradients(pl_module: pl.LightningModule, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None,
                   gradient_clip_algorithm: str | None = None) -> None:
    """Clip the gradients of ``optimizer``'s parameters, fused optimizers under mixed precision included: call it
    from ``configure_gradient_clipping`` (as :class:`~lightning_sparkling.pretrain.training.module.LitGPTPretrainModule`
    does) where Lightning's ``self.clip_gradients`` would refuse a fused AdamW.

    - A scaler (``16-mixed``) and an optimizer that unscales itself: ``scaler.unscale_(optimizer)`` first (Lightning
      skipped it for such an optimizer), so the norm is the true one and ``GradScaler.step`` skips an overflow step.
    - Under FSDP1, norm clipping goes through the root unit's ``clip_grad_norm_`` (the global norm of the shards).
    - Under ``MixedPrecision`` with such an optimizer, the plugin's own ``clip_grad_by_norm`` /
      ``clip_grad_by_value`` (the same ``torch.nn.utils`` calls its ``clip_gradients`` makes when it does not refuse).
    - Anything else: Lightning's ``pl_module.clip_gradients``, unchanged.

    Args:
        pl_module: the LightningModule being trained (its Trainer's precision plugin holds the scaler).
        optimizer: the raw torch optimizer Lightning passes to ``configure_gradient_clipping``.
        gradient_clip_val: the norm (or value) to clip to; ``None`` or 0: no clipping.
        gradient_clip_algorithm: ``"norm"`` (default) or ``"value"``.

    Example::

        >>> import lightning as L
        >>> class Module(L.LightningModule):
        ...     def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        ...         clip_gradients(self, optimizer, gradient_clip_val, gradient_clip_algorithm)
    """
    if not gradient_clip_val or gradient_clip_val <= 0:
        return
    algorithm = GradClipAlgorithmType(gradient_clip_algorithm or GradClipAlgorithmType.NORM)
    plugin = pl_module.trainer.precision_plugin
    unscales = unscales_itself(optimizer)
    scaler = getattr(plugin, "scaler", None)
    if scaler is not None and unscales:
        scaler.unscale_(optimizer)  # records inf/NaN per device: GradScaler.step skips the step on an overflow
    root = _fsdp1_root(pl_module)
    if root is not None and algorithm == GradClipAlgorithmType.NORM:
        root.clip_grad_norm_(gradient_clip_val)
    elif unscales and isinstance(plugin, (MixedPrecision, FSDPPrecision)):
        if algorithm == GradClipAlgorithmType.NORM:
            plugin.clip_grad_by_norm(optimizer, gradient_clip_val)
        else:
            plugin.clip_grad_by_value(optimizer, gradient_clip_val)
    else:
        pl_module.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val,
                                 gradient_clip_algorithm=algorithm.value)


def check_gradient_clipping(trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
    """Refuse, at fit start, the setup Lightning would refuse at the first optimizer step: the Trainer clips
    (``gradient_clip_val``) under mixed precision, an optimizer unscales itself (fused AdamW), and the module keeps
    Lightning's ``configure_gradient_clipping``. The error names the two fixes.

    Raises:
        GrowthError: for that setup, before any step.
    """
    clip = trainer.gradient_clip_val
    if not clip or not isinstance(trainer.precision_plugin, MixedPrecision):
        return
    if type(pl_module).configure_gradient_clipping is not pl.LightningModule.configure_gradient_clipping:
        return  # the module clips itself
    fused = [type(opt).__name__ for opt in trainer.optimizers if unscales_itself(opt)]
    if not fused:
        return
    raise GrowthError(
        f"Trainer(gradient_clip_val={clip}) with precision={trainer.precision!r} and a fused {fused[0]}: Lightning's "
        "mixed-precision plugin refuses to clip the gradients of an optimizer that unscales them itself, so the first "
        f"optimizer step would fail. Fix: build {fused[0]} with foreach=True (or fused=False), or clip in your "
        "module: def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, "
        "gradient_clip_algorithm=None): lightning_sparkling.callbacks.clip_gradients(self, optimizer, "
        "gradient_clip_val, gradient_clip_algorithm)"
    )
