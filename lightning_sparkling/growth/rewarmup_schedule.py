"""The re-warmup (the new entries' learning rate) of one stage: as a picklable ``LambdaLR`` multiplier
(:class:`RewarmupLambda`, the formulas of :mod:`~lightning_sparkling.growth.lr_formulas`), its scheduler
(:class:`RewarmupLR`) and the parameter-less optimizer whose param groups hold that LR (:class:`RewarmupHolder`), so
Lightning steps, checkpoints and restores it like any other scheduler.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from lightning_sparkling.growth.bias_correction import fresh_bias_factor
from lightning_sparkling.growth.lr_formulas import rewarmup_lr, rewarmup_wsd_lr

__all__ = ["RewarmupHolder", "RewarmupLR", "RewarmupLambda"]


class RewarmupLambda:
    """``rewarmup_lr`` as an absolute-LR lambda of the steps since growth (picklable: ``LambdaLR`` saves its
    ``__dict__`` in checkpoints).

    With ``decay_start`` (the baseline is WSD: :class:`WSDLambda`) it is :func:`rewarmup_wsd_lr` instead: the peak is
    held until ``decay_start``, then decays with ``decay_shape`` to ``min_lr`` at ``total_steps``.

    With ``betas`` (``bias_correction='fresh'``) the LR is multiplied by :func:`fresh_bias_factor` of the update
    about to be taken: ``k = steps_since_growth + 1`` updates of the new entries, ``t = growth_step + k`` of their
    tensor (one optimizer step per global step since the start of training).
    """

    def __init__(self, *, growth_step: int, lr_at_growth: float, ratio: float, warmup_steps: int, total_steps: int,
                 min_lr: float, betas: Sequence[float] | None = None, decay_start: float | None = None,
                 decay_shape: str = "linear") -> None:
        self.growth_step = int(growth_step)
        self.lr_at_growth = float(lr_at_growth)
        self.ratio = float(ratio)
        self.warmup_steps = int(warmup_steps)
        self.total_steps = int(total_steps)
        self.min_lr = float(min_lr)
        self.betas = None if betas is None else (float(betas[0]), float(betas[1]))
        self.decay_start = None if decay_start is None else float(decay_start)
        self.decay_shape = str(decay_shape)

    def __call__(self, steps_since_growth: int) -> float:
        kw: dict[str, Any] = dict(growth_step=self.growth_step, lr_at_growth=self.lr_at_growth, ratio=self.ratio,
                                  warmup_steps=self.warmup_steps, total_steps=self.total_steps, min_lr=self.min_lr)
        decay_start = getattr(self, "decay_start", None)  # getattr: lambdas pickled before WSD existed
        if decay_start is None:
            lr = rewarmup_lr(self.growth_step + steps_since_growth, **kw)
        else:
            lr = rewarmup_wsd_lr(self.growth_step + steps_since_growth, **kw, decay_start=decay_start,
                                 decay_shape=self.decay_shape)
        betas = getattr(self, "betas", None)  # getattr: lambdas pickled before the key existed
        if betas is None:
            return lr
        k = steps_since_growth + 1
        return lr * fresh_bias_factor(k, self.growth_step + k, betas)


class RewarmupHolder(torch.optim.Optimizer):
    """A parameter-less optimizer whose param groups only *hold* the learning rate of one growth stage's new
    entries: group ``j`` mirrors param group ``j`` of the trained optimizers (flattened in order). Its ``step`` does
    nothing. It exists so that a ``LambdaLR`` (:class:`RewarmupLR`) in ``trainer.lr_scheduler_configs`` is
    stepped, checkpointed and restored by Lightning like any other scheduler, and is visible to
    ``LearningRateMonitor``."""

    def __init__(self, n_groups: int) -> None:
        groups = [{"params": [torch.zeros(0, requires_grad=True)], "lr": 0.0} for _ in range(n_groups)]
        super().__init__(groups, defaults={"lr": 0.0})

    def step(self, closure=None):
        return None


class RewarmupLR(torch.optim.lr_scheduler.LambdaLR):
    """The new-entry learning-rate scheduler of one stage: ``LambdaLR`` over a :class:`RewarmupHolder` with
    base LR 1 and one :class:`RewarmupLambda` per mirrored param group, so ``holder.param_groups[j]["lr"]`` is
    ``rewarmup_lr(growth_step + last_epoch, ...)`` for that group.

    Example::

        >>> lam = RewarmupLambda(growth_step=10, lr_at_growth=1e-3, ratio=1.3, warmup_steps=5, total_steps=100,
        ...                      min_lr=0.0)
        >>> sched = RewarmupLR([lam])
        >>> sched.optimizer.param_groups[0]["lr"]
        0.001
        >>> for _ in range(5):
        ...     sched.step()
        >>> round(sched.optimizer.param_groups[0]["lr"], 6)
        0.0013
    """

    def __init__(self, lambdas: list[RewarmupLambda]) -> None:
        holder = RewarmupHolder(len(lambdas))
        for group in holder.param_groups:
            group["lr"] = 1.0
        super().__init__(holder, lr_lambda=list(lambdas))
        holder._opt_called = True  # type: ignore[attr-defined]  # torch's private flag, not in its stubs; the holder never steps: silence torch's "scheduler before optimizer" check

    def lr_for(self, group: int) -> float:
        """The new entries' LR for the next optimizer step, from the lambda (never a stale group value)."""
        return float(self.lr_lambdas[group](self.last_epoch))

    def state_dict(self) -> dict:
        """``LambdaLR``'s state without the lambdas: they are rebuilt from the growth callback's stage record (the
        config) and ``last_epoch`` (the step), never restored from a checkpoint."""
        state = super().state_dict()
        state["lr_lambdas"] = [None] * len(self.lr_lambdas)
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)  # its lr_lambdas are None (state_dict): the lambdas given here stay
        # LambdaLR restores last_epoch but not the groups' lr: refresh them (LearningRateMonitor reads them)
        for group, lam in zip(self.optimizer.param_groups, self.lr_lambdas):
            group["lr"] = float(lam(self.last_epoch))
