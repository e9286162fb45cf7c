"""Learning-rate side of the paper's comparison baselines that change the LR of *old* entries too.

- ``rewarmup_scope='all'`` ("Re-warmup All", paper appendix "Comparison to Prior Function-Preserving
  Symmetry-Breaking Heuristics"): from the growth on, every parameter follows the stage's re-warmup
  ``rewarmup_lr`` (Eq. 16) instead of the baseline schedule.
- ``decay_speedup=s`` ("Uneven + 25%/50% Faster Decay LR", after LEMON; appendix "Comparison to Prior
  Dynamics-Based Strategies"): same peak LR, but the baseline schedule's remaining decay after the growth runs
  in ``(1 - s)`` of the remaining steps and then holds its final LR. With ``T`` the run's last step, ``t_e`` the
  growth step and ``E = decay_end(...) = t_e + round((1 - s)(T - t_e))``, the LR of the step taken at ``t`` is
  ``u(t_e + (t - t_e)(T - t_e)/(E - t_e))`` for ``t_e <= t < E`` and ``u(T)`` from ``E`` on, where ``u`` is the
  user's own schedule. The new entries' re-warmup decays to ``min_lr`` at the same ``E``.

Mechanism: :class:`BaselineLR` sets each param group's ``lr`` to the baseline value right before
``optimizer.step()`` (a step pre-hook) and puts the user's value back right after it (a step post-hook). The
optimizer therefore takes exactly the step it would take with that LR (any optimizer, no update rescale, no copy),
while the user's scheduler keeps stepping and owning the group's ``lr`` between steps, and checkpoints hold the
user's LR. The new-entry hooks (:class:`~lightning_sparkling.growth.optim_state.RewarmupRescale`) are registered after
this one, so they rescale new entries against the baseline LR of the step. ``decay_speedup`` needs ``u`` at other
steps than the current one, so it reads the user's scheduler: a ``LambdaLR`` (``base_lr * lr_lambda(tau)``, any
lambda of a real-valued step) or a ``CosineAnnealingLR`` (its closed form), stepped every optimizer step; other
schedulers are refused at fit start.

Under a WSD baseline (:class:`~lightning_sparkling.growth.schedules.WSDLambda`) the re-warmups here hold their peak
and decay with the baseline's decay phase; its start is mapped by :func:`mapped_decay_start` under ``decay_speedup``
(:func:`record_rewarmup_lambda`, shared with the callback's new-entry schedulers).

What reads Lightning's trainer (which scheduler drives an optimizer, installing the hooks of a fit) is in
:mod:`lightning_sparkling.callbacks.rewarmup`; this module is pure torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from lightning_sparkling.growth.errors import GrowthError
from lightning_sparkling.growth.record import StageRecord
from lightning_sparkling.growth.schedules import RewarmupLambda
from lightning_sparkling.growth.stage import GrowthStage, decay_end


class BaselineLR:
    """Give an optimizer's param groups a learning rate of our own for each step, leaving the user's between steps.

    Args:
        optimizer: the optimizer.
        targets: ``{group index: function returning the LR of the step about to be taken}``.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, targets: Mapping[int, Callable[[], float]]) -> None:
        self.optimizer = optimizer
        self.targets = dict(targets)
        self._saved: list[tuple[int, Any]] = []
        self._handles = [optimizer.register_step_pre_hook(self._pre), optimizer.register_step_post_hook(self._post)]

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._restore(self.optimizer)

    def _pre(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        self._restore(optimizer)  # a step that raised left our LR in place
        for g, target in self.targets.items():
            group = optimizer.param_groups[g]
            lr = group["lr"]
            if isinstance(lr, torch.Tensor):
                self._saved.append((g, lr.clone()))
                lr.fill_(float(target()))
            else:
                self._saved.append((g, lr))
                group["lr"] = float(target())

    def _post(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        self._restore(optimizer)

    def _restore(self, optimizer: torch.optim.Optimizer) -> None:
        for g, lr in self._saved:
            current = optimizer.param_groups[g]["lr"]
            if isinstance(current, torch.Tensor):
                current.copy_(lr)
            else:
                optimizer.param_groups[g]["lr"] = lr
        self._saved = []


def fast_decay_position(t: float, *, growth_step: int, total_steps: int, end: int) -> float:
    """Where on the baseline schedule the step taken at ``t`` is under ``decay_speedup``: ``t`` up to the growth,
    then ``t_e + (t - t_e)(T - t_e)/(E - t_e)``, and ``T`` (the final LR, held) from ``E = end`` on.

    Example::

        >>> fast_decay_position(150, growth_step=100, total_steps=300, end=200)
        200.0
        >>> fast_decay_position(250, growth_step=100, total_steps=300, end=200)
        300
    """
    if t <= growth_step or end >= total_steps:
        return t
    if t >= end:
        return total_steps
    return growth_step + (t - growth_step) * (total_steps - growth_step) / (end - growth_step)


def mapped_decay_start(decay_start: float, *, growth_step: int, total_steps: int, end: int) -> float:
    """The step at which a WSD baseline's decay phase (starting at ``decay_start`` on the user's schedule) starts
    under ``decay_speedup``: the inverse of :func:`fast_decay_position`, extended linearly before the growth, so that
    the baseline's decay progress at ``fast_decay_position(t)`` equals ``(t - D') / (end - D')``. ``decay_start``
    itself without a faster decay (``end >= total_steps``).

    Example::

        >>> mapped_decay_start(240, growth_step=100, total_steps=300, end=200)
        170.0
    """
    if end >= total_steps:
        return decay_start
    return growth_step + (decay_start - growth_step) * (end - growth_step) / (total_steps - growth_step)


def record_rewarmup_lambda(stage: GrowthStage, record: StageRecord, flat: int, *, min_lr: float | None = None,
                           betas: Sequence[float] | None = None) -> RewarmupLambda:
    """The re-warmup of flat param group ``flat`` of an applied stage, from its :class:`StageRecord`: decays by
    cosine to ``min_lr`` at :func:`~lightning_sparkling.growth.stage.decay_end`, or, when the group's baseline had a
    stable phase (``record.decay_of(flat)``, e.g. a :class:`~lightning_sparkling.growth.schedules.WSDLambda`), holds
    its peak and decays with the baseline's decay phase (its start mapped by :func:`mapped_decay_start` under
    ``decay_speedup``). ``min_lr``: the group's ``min_lr`` when the record has none yet (default
    ``record.min_lr[flat]``)."""
    t_e, total = int(record.global_step), int(record.total_steps)
    end = decay_end(stage, total, t_e)
    decay = record.decay_of(flat)  # None: grown under a schedule without a stable phase
    wsd = {}
    if decay:
        wsd = dict(decay_start=mapped_decay_start(decay["decay_start"], growth_step=t_e, total_steps=total, end=end),
                   decay_shape=decay["decay_shape"])
    assert stage.rewarmup_ratio is not None  # a stage with a re-warmup
    if min_lr is None:
        assert record.min_lr is not None  # recorded with the re-warmup
        min_lr = record.min_lr[flat]
    return RewarmupLambda(growth_step=t_e, lr_at_growth=record.lr_at_growth[flat], ratio=stage.rewarmup_ratio,
                          warmup_steps=stage.rewarmup_steps, total_steps=end,
                          min_lr=min_lr, betas=betas, **wsd)


def schedule_function(scheduler: object, group: int) -> Callable[[float], float]:
    """The user's LR of param group ``group`` as a function of the scheduler's (real-valued) step.

    Raises:
        GrowthError: for schedulers whose LR at another step cannot be computed exactly.
    """
    if type(scheduler) is torch.optim.lr_scheduler.LambdaLR:
        base, lam = float(scheduler.base_lrs[group]), scheduler.lr_lambdas[group]
        # torch's stubs type a lambda's step as int; LambdaLR's lambdas here take real-valued steps
        return lambda tau: base * float(lam(tau))  # type: ignore[arg-type]
    if type(scheduler) is torch.optim.lr_scheduler.CosineAnnealingLR:
        base, eta_min, t_max = float(scheduler.base_lrs[group]), float(scheduler.eta_min), scheduler.T_max
        return lambda tau: eta_min + (base - eta_min) * (1 + math.cos(math.pi * tau / t_max)) / 2
    raise GrowthError(f"cannot evaluate a {type(scheduler).__name__} at other steps")


def baseline_stage(stages: Sequence[GrowthStage], records: Sequence[StageRecord]) -> int | None:
    """Index of the applied stage that changes the baseline LR (``rewarmup_scope='all'`` or ``decay_speedup``),
    or ``None``. Only the last stage may (:func:`~lightning_sparkling.growth.stage.check_stage_sequence`)."""
    applied = len(records)
    if applied and stages[applied - 1].changes_baseline:
        return applied - 1
    return None


def rewarmup_all_applied(stages: Sequence[GrowthStage], records: Sequence[StageRecord]) -> bool:
    """Whether an applied stage has ``rewarmup_scope='all'``: every entry then follows its re-warmup, so no
    new-entry region is rescaled any more."""
    k = baseline_stage(stages, records)
    return k is not None and stages[k].rewarmup_scope == "all"
