"""The re-warmup (the new entries' learning rate) inside a Lightning fit: everything between a stage's
``rewarmup_*`` keys and the LR the optimizer applies.

- :func:`resolve_min_lrs`: what the re-warmup decays to (the callback's ``min_lr``, else read exactly from the
  module's schedule through the schedule registry);
- :meth:`RewarmupSchedulers.register`: one :class:`~lightning_sparkling.growth.schedules.RewarmupLR` per applied
  stage in ``trainer.lr_scheduler_configs`` (Lightning steps, saves and restores it), its lambdas rebuilt from the
  stage's :class:`~lightning_sparkling.growth.record.StageRecord`;
- :meth:`RewarmupSchedulers.install`: the baseline hooks of ``rewarmup_scope='all'`` / ``decay_speedup``
  (:class:`~lightning_sparkling.growth.baselines.BaselineLR`), then the update rescale of the new-entry slices
  (:class:`~lightning_sparkling.growth.optim_state.RewarmupRescale`);
- :meth:`RewarmupSchedulers.log`: ``growth/lr_new/stage_k`` from the very function the rescale calls.

This module reads Lightning's trainer (its scheduler configs, ``automatic_optimization``); the LR math it drives is in
:mod:`~lightning_sparkling.growth.schedules` and :mod:`~lightning_sparkling.growth.baselines` (pure torch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_warn
from lightning.pytorch.utilities.types import LRSchedulerConfig

from lightning_sparkling.growth.baselines import (
    BaselineLR,
    baseline_stage,
    fast_decay_position,
    record_rewarmup_lambda,
    rewarmup_all_applied,
    schedule_function,
)
from lightning_sparkling.growth.errors import GrowthError
from lightning_sparkling.growth.optim_state import NewEntryRegion, RewarmupRescale
from lightning_sparkling.growth.record import StageRecord
from lightning_sparkling.growth.schedules import (
    RewarmupLR,
    baseline_decay,
    baseline_of,
    check_growth_before_decay,
    scheduler_min_lr,
)
from lightning_sparkling.growth.stage import GrowthStage, decay_end
from lightning_sparkling.growth.surgery import clean_name

SCHEDULER_PREFIX = "lr_new/"
"""Name prefix of the new entries' :class:`RewarmupLR` configs in ``trainer.lr_scheduler_configs`` (``lr_new/stage_k``);
their LR is logged once, by the callback, as ``growth/lr_new/stage_k``: an LR monitor can leave these out."""


def flat_groups(optimizers: Sequence[torch.optim.Optimizer]) -> list[tuple[int, int]]:
    """``(optimizer, group)`` of every param group, optimizer by optimizer: the order of a record's per-group lists."""
    return [(o, g) for o, opt in enumerate(optimizers) for g in range(len(opt.param_groups))]


def scheduler_configs(trainer: Any, optimizer: torch.optim.Optimizer) -> list:
    """The trainer's scheduler configs that drive ``optimizer``."""
    return [c for c in trainer.lr_scheduler_configs if c.scheduler.optimizer is optimizer]


def every_step(trainer: Any, config: Any) -> bool:
    """Whether the scheduler moves once per optimizer step: Lightning steps it (``interval="step"``, ``frequency=1``),
    or the module does under manual optimization (Lightning then steps no scheduler; the module's own loop is
    trusted to step it with the optimizers, as the package's ``LitGPTPretrainModule`` does)."""
    module = getattr(trainer, "lightning_module", None)
    if module is not None and not module.automatic_optimization:
        return True
    return config.interval == "step" and config.frequency == 1


def check_run_horizon(stages: Sequence[GrowthStage], max_steps: int | None) -> None:
    """At setup: a re-warmup decays to ``min_lr`` at ``max_steps``, so it needs one; and every stage must grow before
    the last step (a stage at or past it would never train the grown model).

    Raises:
        GrowthError: naming the stage or the missing ``max_steps``, and the fix.
    """
    bounded = max_steps is not None and max_steps >= 0
    if not bounded and any(s.rewarmup_ratio is not None for s in stages):
        raise GrowthError("the re-warmup of new entries decays to min_lr at trainer.max_steps: set "
                          "Trainer(max_steps=...) or use GrowthStage(rewarmup_ratio=None)")
    for s in stages:
        if max_steps is not None and max_steps >= 0 and cast(int, s.at_step) >= max_steps:  # timed: at_step set
            raise GrowthError(f"GrowthStage(at_step={s.at_step}) is at or past trainer.max_steps={max_steps}: it would "
                              "never train the grown model; lower at_step or raise max_steps")


def check_baseline_schedulers(trainer: Any, stages: Sequence[GrowthStage]) -> None:
    """At fit start: ``decay_speedup`` needs, for every optimizer, one ``LambdaLR`` or ``CosineAnnealingLR`` stepped
    every optimizer step (``interval="step"``, ``frequency=1``; under manual optimization the module steps it),
    whose LR at later steps it computes.

    Raises:
        GrowthError: naming the optimizer, what it has and what is needed.
    """
    speedup = [s for s in stages if s.decay_speedup > 0 and s.rewarmup_scope == "new"]  # 'all': its own schedule
    if not speedup:
        return
    stage = speedup[0]
    for o, optimizer in enumerate(trainer.optimizers):
        configs = scheduler_configs(trainer, optimizer)
        kinds = ", ".join(f"{type(c.scheduler).__name__} (interval={c.interval!r}, frequency={c.frequency})"
                          for c in configs) or "no scheduler"
        ok = (len(configs) == 1 and every_step(trainer, configs[0])
              and type(configs[0].scheduler) in (torch.optim.lr_scheduler.LambdaLR,
                                                 torch.optim.lr_scheduler.CosineAnnealingLR))
        if not ok:
            raise GrowthError(
                f"GrowthStage(at_step={stage.at_step}, decay_speedup={stage.decay_speedup}) speeds up the decay of the "
                f"module's LR schedule, so it must compute that schedule at later steps: optimizer {o} "
                f"({type(optimizer).__name__}) has {kinds}; use one LambdaLR or CosineAnnealingLR with "
                "interval='step' and frequency=1 (e.g. lightning_sparkling.growth.schedules.WarmupCosineLambda)"
            )


def install_baseline_lr(trainer: Any, stages: Sequence[GrowthStage],
                        records: Sequence[StageRecord]) -> list[BaselineLR]:
    """The :class:`BaselineLR` hooks of the applied stage that changes the baseline (none if no stage does).

    Register them *before* the new-entry hooks: those rescale new entries against the group LR this one sets.
    The time of a step is its scheduler's ``last_epoch`` when the optimizer has a step-interval scheduler (the step
    whose LR the scheduler has set, also under manual optimization), else ``trainer.global_step``.
    """
    k = baseline_stage(stages, records)
    if k is None:
        return []
    stage, record = stages[k], records[k]
    t_e, total = int(record.global_step), int(record.total_steps)
    end = decay_end(stage, total, t_e)
    hooks = []
    flat = 0
    for optimizer in trainer.optimizers:
        configs = [c for c in scheduler_configs(trainer, optimizer) if every_step(trainer, c)]
        scheduler = configs[0].scheduler if len(configs) == 1 else None

        def now(scheduler=scheduler) -> float:  # no scheduler, an epoch-interval one, or several: the next step
            return trainer.global_step if scheduler is None else scheduler.last_epoch
        targets: dict[int, Callable[[], float]] = {}
        for g in range(len(optimizer.param_groups)):
            if stage.rewarmup_scope == "all":
                lam = record_rewarmup_lambda(stage, record, flat)  # WSD baselines: hold, then their decay

                def target(fn=lam, now=now) -> float:
                    return fn(max(now() - t_e, 0))
            else:
                u = schedule_function(scheduler, g)

                def target(fn=u, now=now) -> float:
                    return fn(fast_decay_position(now(), growth_step=t_e, total_steps=total, end=end))
            targets[g] = target
            flat += 1
        hooks.append(BaselineLR(optimizer, targets))
    return hooks


def module_lambdas(trainer: pl.Trainer) -> dict[tuple[int, int], tuple[Any, Any]]:
    """``{(optimizer, group): (lambda, its LRSchedulerConfig)}`` for the groups the module drives with a ``LambdaLR``
    (the callback's own new-entry schedulers drive no trained optimizer and are left out)."""
    found: dict[tuple[int, int], tuple[Any, Any]] = {}
    for config in trainer.lr_scheduler_configs:
        sched = config.scheduler
        o = next((i for i, opt in enumerate(trainer.optimizers) if sched.optimizer is opt), None)
        if o is None or not isinstance(sched, torch.optim.lr_scheduler.LambdaLR):
            continue
        for g, f in enumerate(sched.lr_lambdas):
            found[(o, g)] = (f, config)
    return found


def baseline_decays(trainer: pl.Trainer) -> list[dict[str, Any] | None] | None:
    """Per flat param group, the decay phase of its baseline when that is a ``LambdaLR`` of a registered schedule
    with a stable phase (:func:`~lightning_sparkling.growth.schedules.baseline_decay`) stepped every optimizer step:
    ``{"decay_start": D, "decay_shape": shape}``; ``None`` for other groups; ``None`` overall when no group has one.

    Raises:
        GrowthError: for such a schedule stepped less often than every optimizer step (its steps are not the run's).
    """
    lambdas = module_lambdas(trainer)
    decays: list[dict[str, Any] | None] = []
    for og in flat_groups(trainer.optimizers):
        f, config = lambdas.get(og, (None, None))
        decay = baseline_decay(f)
        if decay is None:
            decays.append(None)
            continue
        if not every_step(trainer, config):
            raise GrowthError(
                f"GrowthCallback: optimizer/param group {og}'s {type(f).__name__} is stepped with interval="
                f"{config.interval!r}, frequency={config.frequency}: the new entries' re-warmup follows its decay "
                "phase in optimizer steps, so step it every optimizer step (interval='step', frequency=1)"
            )
        decays.append(decay)
    return decays if any(d is not None for d in decays) else None


def warn_growth_in_decay(trainer: pl.Trainer, stages: Sequence[GrowthStage]) -> None:
    """Warn (the CLI refuses) about a stage that grows inside the decay phase of a baseline with a stable phase."""
    decays = baseline_decays(trainer) or []
    starts = sorted({d["decay_start"] for d in decays if d is not None})
    if not starts or not stages:
        return
    try:
        at_steps = [cast(int, s.at_step) for s in stages]  # resolved in setup
        check_growth_before_decay(at_steps, decay_start=starts[0], total_steps=trainer.max_steps)
    except ValueError as err:
        rank_zero_warn(f"GrowthCallback: {err}", category=UserWarning)


def warn_untracked_stable_phase(trainer: pl.Trainer, stages: Sequence[GrowthStage]) -> None:
    """A user's own ``LambdaLR`` (not a registered schedule) that holds its LR over a stage's re-warmup (a WSD
    stable phase, a constant LR): the callback cannot see where that schedule decays, so the new entries get the
    paper's cosine tail from their peak to ``min_lr`` at ``max_steps`` and fall below the old entries' LR while it
    holds. Warn, pointing at ``WSDLambda``."""
    for og, (f, _) in module_lambdas(trainer).items():
        if baseline_of(f) is not None:  # a registered schedule: its decay is known
            continue
        for stage in stages:
            if stage.rewarmup_ratio is None:
                continue
            at = cast(int, stage.at_step)  # resolved in setup
            probe = [at, at + stage.rewarmup_steps, at + 2 * stage.rewarmup_steps]
            probe = [t for t in probe if t < trainer.max_steps]
            try:
                values = {float(f(t)) for t in probe}
            except Exception:
                return
            if len(probe) > 1 and len(values) == 1:
                rank_zero_warn(
                    f"GrowthCallback: the module's LambdaLR ({type(f).__name__}) for optimizer/param group {og} "
                    f"holds its LR over steps {probe[0]}..{probe[-1]} after GrowthStage(at_step={stage.at_step}); the "
                    "callback cannot see where it decays, so the new entries' re-warmup decays by cosine to min_lr at "
                    "max_steps from the end of its warm-up. For a warmup-stable-decay schedule use "
                    "lightning_sparkling.growth.schedules.WSDLambda: the new entries then hold their peak and decay "
                    "with its decay phase", category=UserWarning)
                return


def check_fresh_bias_correction(trainer: pl.Trainer, stages: Sequence[GrowthStage]) -> None:
    """``bias_correction='fresh'`` needs Adam's ``betas`` in every param group (read again at growth)."""
    fresh = [k for k, s in enumerate(stages) if s.bias_correction == "fresh"]
    if not fresh:
        return
    for o, g in flat_groups(trainer.optimizers):
        betas = trainer.optimizers[o].param_groups[g].get("betas")
        if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
            raise GrowthError(
                f"GrowthStage(bias_correction='fresh') (stage {fresh[0]}): optimizer {o} "
                f"({type(trainer.optimizers[o]).__name__}) param group {g} has no Adam 'betas', so there is no "
                "bias correction to redo; use an Adam-type optimizer or bias_correction='shared'"
            )


def resolve_min_lrs(trainer: pl.Trainer, min_lr: float | None, pending: Sequence[GrowthStage]) -> list[float]:
    """``min_lr`` per flat param group: ``min_lr``, else read exactly from the module's schedule
    (:func:`~lightning_sparkling.growth.schedules.scheduler_min_lr`). Also warns about a growth of ``pending`` inside
    a decay phase, and about a user's own ``LambdaLR`` that holds its LR after a growth (the new entries then get the
    cosine tail)."""
    groups = flat_groups(trainer.optimizers)
    warn_growth_in_decay(trainer, pending)
    warn_untracked_stable_phase(trainer, pending)
    if min_lr is not None:
        return [float(min_lr)] * len(groups)
    found: dict[tuple[int, int], float] = {}
    for config in trainer.lr_scheduler_configs:
        sched = config.scheduler
        if not any(sched.optimizer is opt for opt in trainer.optimizers):
            continue
        o = next(i for i, opt in enumerate(trainer.optimizers) if sched.optimizer is opt)
        for g in range(len(sched.optimizer.param_groups)):
            value = scheduler_min_lr(sched, g)
            if value is not None:
                found[(o, g)] = value
    missing = [og for og in groups if og not in found]
    if missing:
        kinds = sorted({type(c.scheduler).__name__ for c in trainer.lr_scheduler_configs}) or ["no scheduler"]
        raise GrowthError(
            "GrowthCallback(min_lr=None): cannot read the minimum learning rate exactly from the module's "
            f"schedule ({', '.join(kinds)}) for optimizer/param group(s) {missing}; pass "
            "GrowthCallback(..., min_lr=<LR the new entries decay to at max_steps>)"
        )
    return [found[og] for og in groups]


def has_rewarmup(stage: GrowthStage, regions: dict | None, plan: Any | None) -> bool:
    """Whether a stage has a re-warmup of its new entries (a ``lr_new/stage_k`` scheduler, the
    ``growth/lr_new/stage_k`` tag): ``rewarmup_ratio`` set, and entries to re-warm: ``rewarmup_scope='all'``, or new
    entries (an applied stage's recorded new-entry ``regions``, else a pending stage's dry-run ``plan``:
    :attr:`GrowthPlan.rewarms <lightning_sparkling.growth.plan.GrowthPlan.rewarms>`). A stage that adds no entries (a
    ``rope_base`` axis: ``litgpt.Config`` fields only) has none; with neither known, it has one."""
    if stage.rewarmup_ratio is None:
        return False
    if stage.rewarmup_scope == "all":
        return True
    if regions is not None:
        return bool(regions)
    return plan is None or plan.rewarms


class RewarmupSchedulers:
    """The new entries' LR of a growth callback's applied stages: their re-warmup schedulers, the hooks that apply
    them, and their log.

    Args:
        stages: the callback's stages.
        records: returns the callback's current stage records (looked up at each step, never captured: a sharded
            resume installs the hooks before Lightning restores the callback state, which replaces the records and
            the symmetry loop's boost).
        rewarms: whether applied stage ``k`` has a re-warmup (a scheduler ``lr_new/stage_k``, the
            ``growth/lr_new/stage_k`` tag): :attr:`GrowthPlan.rewarms <lightning_sparkling.growth.plan.GrowthPlan>`,
            ``rewarmup_ratio`` set and new entries to re-warm; ``None``: ``rewarmup_ratio`` set.
    """

    def __init__(self, stages: Sequence[GrowthStage], records: Callable[[], list[StageRecord]],
                 rewarms: Callable[[int], bool] | None = None) -> None:
        self.stages = stages
        self.records = records
        self.rewarms = rewarms or (lambda k: self.stages[k].rewarmup_ratio is not None)
        self.min_lrs: list[float] | None = None
        self.schedulers: dict[int, RewarmupLR] = {}  # stage index -> its new-entry LR scheduler
        self.hooks: list[BaselineLR | RewarmupRescale] = []
        self._logged_step = -1

    def register(self, trainer: pl.Trainer, k: int) -> None:
        """Stage ``k``'s :class:`RewarmupLR` (its lambdas from the stage record), appended to
        ``trainer.lr_scheduler_configs`` as ``lr_new/stage_k``."""
        stage, record = self.stages[k], self.records()[k]
        min_lrs = record.min_lr or self.min_lrs
        assert min_lrs is not None  # resolved in on_fit_start
        betas: Sequence[Sequence[float] | None] = record.betas or [None] * len(record.lr_at_growth)
        # at growth: which groups' baseline has a stable phase (their re-warmup then holds and decays with it);
        # stored in the record, so a resume rebuilds the same lambdas whatever the module's schedule is then
        if not record.has_lr_decay:
            record.lr_decay = baseline_decays(trainer)
        lambdas = [record_rewarmup_lambda(stage, record, flat, min_lr=min_lr, betas=b)
                   for flat, (min_lr, b) in enumerate(zip(min_lrs, betas))]
        scheduler = RewarmupLR(lambdas)
        self.schedulers[k] = scheduler
        trainer.strategy.lr_scheduler_configs.append(
            LRSchedulerConfig(scheduler, name=f"{SCHEDULER_PREFIX}stage_{k}", interval="step", frequency=1)
        )

    def register_applied(self, trainer: pl.Trainer) -> None:
        """After a resume: the schedulers of the applied stages not registered yet, in stage order (Lightning
        restores scheduler states by position)."""
        for k in range(len(self.records())):
            if self.rewarms(k) and k not in self.schedulers:
                self.register(trainer, k)

    def lr_fn(self, trainer: pl.Trainer, k: int, flat_group: int) -> Callable[[], float]:
        """The new entries' LR of stage ``k`` in flat group ``flat_group`` for the optimizer step about to be taken:
        what the rescale applies, and what :meth:`log` logs."""
        scheduler = self.schedulers[k]
        growth_step = self.records()[k].global_step

        def lr() -> float:
            # Lightning steps step-interval schedulers after each optimizer step (automatic optimization); under
            # manual optimization nobody does, so catch up with the global step here.
            while scheduler.last_epoch < trainer.global_step - growth_step:
                scheduler.step()
            return scheduler.lr_for(flat_group) * self.records()[k].symmetry_boost

        return lr

    def install(self, trainer: pl.Trainer, pl_module: pl.LightningModule, gpt: torch.nn.Module, backend: Any,
                regions: Sequence[dict[str, list[tuple[slice, ...]]]]) -> None:
        """(Re)install the hooks: the baseline's of a stage that changes it, then the rescale of every applied stage's
        new-entry ``regions`` (none once a ``rewarmup_scope='all'`` stage is applied: every entry follows it)."""
        self.remove()
        records = self.records()
        # rewarmup_scope='all' / decay_speedup: the group LR of each step, registered before the new-entry hooks
        # (they rescale against it); under 'all' every entry follows it, so no region is rescaled
        self.hooks += install_baseline_lr(trainer, self.stages, records)
        if not self.schedulers or rewarmup_all_applied(self.stages, records):
            return
        backend.reshard(pl_module, gpt)
        pieces_of = backend.new_entry_pieces(pl_module, gpt)
        name_of = {id(p): clean_name(n) for n, p in gpt.named_parameters()}
        flat = {og: j for j, og in enumerate(flat_groups(trainer.optimizers))}
        fns: dict[tuple[int, int], Callable[[], float]] = {}  # one per stage and group: the hook calls each once a step
        for o, optimizer in enumerate(trainer.optimizers):
            found: dict[int, list[NewEntryRegion]] = {}
            for g, group in enumerate(optimizer.param_groups):
                for p in group["params"]:
                    name = name_of.get(id(p))
                    for k in self.schedulers:
                        pieces = regions[k].get(name) if name is not None else None
                        local = pieces_of(p, pieces) if pieces else []
                        if local:
                            key = (k, flat[(o, g)])
                            if key not in fns:
                                fns[key] = self.lr_fn(trainer, k, key[1])
                            found.setdefault(g, []).append(NewEntryRegion(p, local, fns[key]))
            if found:
                self.hooks.append(RewarmupRescale(optimizer, found))

    def remove(self) -> None:
        for hook in self.hooks:
            hook.remove()
        self.hooks = []

    def log(self, trainer: pl.Trainer) -> None:
        """``growth/lr_new/stage_k`` (flat group 0) and, with a ``symmetry_target``, ``growth/symmetry_boost/stage_k``:
        the LR the next optimizer step applies to the stage's new entries, from :meth:`lr_fn` (the function the
        rescale calls). Once per optimizer step, not per micro-batch."""
        if not self.schedulers or trainer.logger is None or self._logged_step == trainer.global_step:
            return
        self._logged_step = trainer.global_step
        metrics = {}
        for k in self.schedulers:
            metrics[f"growth/lr_new/stage_{k}"] = self.lr_fn(trainer, k, 0)()
            if self.stages[k].symmetry_target is not None:
                metrics[f"growth/symmetry_boost/stage_{k}"] = self.records()[k].symmetry_boost
        trainer.logger.log_metrics(metrics, step=trainer.global_step)
