"""``GrowthCallback``: grow a litgpt GPT (width, heads, depth) inside a running ``Trainer.fit``.

``WidthGrowthCallback`` is the same class under the name the design card gives it (an alias, no warning).

Orchestration only (the "when" and the bookkeeping): the tensor math is in :mod:`lightning_sparkling.growth.surgery`,
the optimizer side in :mod:`lightning_sparkling.growth.optim_state`, and the "how" under each strategy (grow in place
or gather-grow-reshard, re-wrap, new-entry slices of a shard, resume) in the strategy's
:class:`~lightning_sparkling.parallel.GrowthBackend`, chosen once in ``setup``.

Timeline of one stage with ``at_step=N`` (single device and DDP):

1. ``setup``: stages are checked against ``trainer.max_steps`` and dry-run on the model's config (shapes only); the
   dry run's plans, each stage's on the config the stages before it grow, are kept: the growth applies them.
2. ``on_fit_start``: optimizers are checked, ``min_lr`` is resolved, and (after a resume) the re-warmup
   schedulers of stages already applied are re-registered so Lightning restores their state by position.
3. ``on_train_batch_end`` after the optimizer step that made ``global_step == N`` (and after the step-interval
   schedulers stepped): grow the GPT, patch every optimizer, check the loss of the grown model on the current batch,
   re-wrap the strategy, register a :class:`~lightning_sparkling.growth.schedules.RewarmupLR` for the new entries, log a
   summary. Anything failing puts the pre-growth model and optimizer back and stops the run with an error. New
   blocks are activation-checkpointed when the others are; a compiled model's graphs are dropped (the first step
   after the growth compiles the grown shapes; its time is logged as ``growth/first_step_seconds``).
4. Every later optimizer step: old entries follow the user's schedule untouched; the update of new entries is
   rescaled to their re-warmup LR (:class:`~lightning_sparkling.growth.optim_state.RewarmupRescale`).
"""

from __future__ import annotations

import math
import resource
import time
from collections.abc import Callable, Sequence
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from lightning_sparkling.callbacks.clipping import check_gradient_clipping
from lightning_sparkling.callbacks.module_parts import find_gpt, token_batch
from lightning_sparkling.callbacks.rewarmup import (RewarmupSchedulers, check_baseline_schedulers,
                                                    check_fresh_bias_correction, flat_groups, has_rewarmup,
                                                    resolve_min_lrs)
from lightning_sparkling.callbacks.symmetry_loop import SymmetryLoop
from lightning_sparkling.growth.axes import growth_log_lines, size_pairs
from lightning_sparkling.growth.compute import count_params
from lightning_sparkling.growth.errors import GrowthError
from lightning_sparkling.growth.optim_state import check_optimizer_supported
from lightning_sparkling.growth.plan import GrowthPlan, plan_growth
from lightning_sparkling.growth.recipes import (AUTO, recipe_name, resolve_recipe, same_keys, schedule_of,
                                                schedule_recipe)
from lightning_sparkling.growth.record import GROWTH_STATE_KEY, StageRecord, growth_state
from lightning_sparkling.growth.stage import (WIDTH_SIZE_KEYS, GrowthStage, check_rewarmup_fits, check_stage_order,
                                              check_stage_sequence, resolve_timing)
from lightning_sparkling.growth.surgery import GrowthResult
from lightning_sparkling.growth.symmetry import copy_specs
from lightning_sparkling.parallel import GrowthBackend, select_backend
from lightning_sparkling.parallel.activation_checkpointing import checkpoint_new_blocks
from lightning_sparkling.parallel.compile import eager, recompile_after_growth


class GrowthFailedError(RuntimeError):
    """A growth failed mid-way; the run keeps (and stops with) its pre-growth model and optimizer."""


class GrowthCallback(Callback):
    """Grow the litgpt ``GPT`` inside a LightningModule at configured steps (SPARKLING): width, heads, depth.

    At ``stage.at_step = N`` the model grows after optimizer step N and before step N+1's first micro-batch
    (never mid-accumulation). Every optimizer the module configured is patched in place (parameters and
    per-element state by ``stage.optimizer_state``), and the new entries get their own learning rate
    (``rewarmup_lr``) through a ``LambdaLR`` registered in ``trainer.lr_scheduler_configs``, so Lightning steps,
    saves and restores it; the module's own schedule keeps driving the old entries exactly as before.

    Checkpoints hold a plain litgpt ``GPT`` state_dict of the config of that moment; this callback's state is
    small (stages applied, seed, LRs at growth). Resuming grows the freshly built model before the weights load.

    Args:
        stages: one or several :class:`GrowthStage` with increasing ``at_step`` (a stage given by ``at_fraction``
            takes its step from ``trainer.max_steps`` in ``setup``; the order is checked then).
        min_lr: the LR the new entries' re-warmup decays to at ``trainer.max_steps``. Without it, it is read from
            the module's schedule where that is exact (a ``LambdaLR`` of
            :class:`~lightning_sparkling.growth.schedules.WarmupCosineLambda`, or ``CosineAnnealingLR``'s ``eta_min``);
            otherwise setup fails with an error asking for it.
        seed: growth seed (copy maps and random init); identical on every rank.
        symmetry_every_n_steps: how often to log ``symmetry/stage_{k}/{channel}`` (mean cosine of copied channels
            to their sources, per channel dimension; a depth or experts copy under its axis' ``symmetry_key``);
            ``None`` follows ``Trainer(log_every_n_steps)``, ``0`` turns it off. Each log reads every
            copy-initialized tensor (under FSDP2 it gathers them), so raise it for very large models.
        plans: each stage's :class:`~lightning_sparkling.growth.plan.GrowthPlan` when the caller planned the stages
            (``sparkling pretrain``'s run plan): ``setup``'s dry run applies each that is the plan of its stage on the
            model (``GrowthPlan.fits``: same stage, position, seed, tying, config) and plans the others.

    Raises:
        ValueError: for stages that are not ``GrowthStage`` or not in increasing ``at_step`` order, or plans that
            are not ``GrowthPlan``.

    Example::

        from lightning_sparkling import GrowthCallback, GrowthStage

        growth = GrowthCallback(
            [GrowthStage(500, n_embd=512, intermediate_size=2048), GrowthStage(1000, intermediate_size=4096)],
            min_lr=3e-5,
        )
        trainer = L.Trainer(max_steps=2000, callbacks=[growth])
        trainer.fit(module, datamodule)
    """

    def __init__(self, stages: GrowthStage | Sequence[GrowthStage], *, min_lr: float | None = None,
                 seed: int = 0, symmetry_every_n_steps: int | None = None,
                 plans: Sequence[GrowthPlan] | None = None) -> None:
        stages = [stages] if isinstance(stages, GrowthStage) else list(stages)
        if not stages:
            raise ValueError("GrowthCallback(stages=[]): give at least one GrowthStage")
        for s in stages:
            if not isinstance(s, GrowthStage):
                raise ValueError(f"GrowthCallback(stages=...): expected GrowthStage objects, got {type(s).__name__}")
        try:
            check_stage_order(stages)  # stages given by at_fraction: once resolved, in setup
        except ValueError as err:
            raise ValueError(f"GrowthCallback: {err}") from err
        check_stage_sequence(stages)  # rewarmup_scope='all' / decay_speedup: last stage only
        if min_lr is not None and (not isinstance(min_lr, (int, float)) or min_lr < 0 or not math.isfinite(min_lr)):
            raise ValueError(f"GrowthCallback(min_lr={min_lr!r}): must be a finite number >= 0")
        self.stages: tuple[GrowthStage, ...] = tuple(stages)  # at_fraction resolved in setup, recipe in on_fit_start
        self._given_stages: tuple[GrowthStage, ...] = self.stages
        self._timed: tuple[GrowthStage, ...] = self.stages  # the given stages with their steps known (setup)
        self._schedule: str | None = None  # the schedule the module's scheduler runs (on_fit_start)
        self._applied: list[GrowthStage] = []  # the stages a resumed checkpoint applied, as it recorded them
        if symmetry_every_n_steps is not None and (not isinstance(symmetry_every_n_steps, int)
                                                   or symmetry_every_n_steps < 0):
            raise ValueError(f"GrowthCallback(symmetry_every_n_steps={symmetry_every_n_steps!r}): must be an "
                             "integer >= 0 (0: off) or None (follow Trainer(log_every_n_steps))")
        self.min_lr = min_lr
        self.seed = int(seed)
        self.symmetry_every_n_steps = symmetry_every_n_steps
        self._grown = 0
        self._records: list[StageRecord] = []  # one per applied stage (checkpointed)
        self._regions: list[dict[str, list[tuple[slice, ...]]]] = []  # new-entry slices per applied stage
        self._backend: GrowthBackend | None = None  # chosen in setup from the trainer's strategy
        self._first_step: tuple[int, int, float] | None = None  # (stage, global step, time) of the last growth
        self._step_clock: tuple[int, float, float | None] | None = None  # (global step, its end, the step's time)
        self._plans: dict[int, GrowthPlan] = {}  # each stage's plan, by index: setup's dry run (see _plan)
        if not all(isinstance(p, GrowthPlan) for p in plans or ()):
            raise ValueError("GrowthCallback(plans=...): expected GrowthPlan objects (plan_growth's), one per stage")
        self._given_plans: tuple[GrowthPlan, ...] = tuple(plans or ())  # the caller's: applied where they fit
        self._remove_resume_hook_fn: Callable[[], None] | None = None
        self.summaries: list[dict[str, Any]] = []
        # the records are looked up through self at each use, never captured: load_state_dict replaces them
        self.lr = RewarmupSchedulers(self.stages, lambda: self._records, self._rewarms)  # the new entries' LR
        self.symmetry = SymmetryLoop(self.stages, lambda: self._records)  # copies' cosines, symmetry_target loop

    # ------------------------------------------------------------------ state
    @property
    def state_key(self) -> str:
        """``checkpoint["callbacks"]`` key of this callback's state: ``"GrowthCallback"``
        (:data:`~lightning_sparkling.growth.record.GROWTH_STATE_KEY`); a checkpoint of before holds it under a former
        key, which :meth:`on_load_checkpoint` moves here."""
        return GROWTH_STATE_KEY

    def on_load_checkpoint(self, trainer: pl.Trainer, pl_module: pl.LightningModule,
                           checkpoint: dict[str, Any]) -> None:
        """Lightning loads a callback's state by its :attr:`state_key` right after this hook: a checkpoint written
        before issue 47 keeps the state under ``"WidthGrowthCallback"``
        (:data:`~lightning_sparkling.growth.record.FORMER_GROWTH_STATE_KEYS`), put under the current key here."""
        callbacks = checkpoint.get("callbacks")
        if callbacks is not None and self.state_key not in callbacks:
            state = growth_state(callbacks)
            if state is not None:
                callbacks[self.state_key] = state

    @property
    def grown_stages(self) -> int:
        """How many stages have been applied."""
        return self._grown

    @property
    def last_symmetry(self) -> dict[str, float]:
        """The last logged ``symmetry/stage_{k}/{channel}`` cosines."""
        return self.symmetry.last

    @property
    def _schedulers(self) -> dict:
        return self.lr.schedulers

    @property
    def _lr_hooks(self) -> list:
        return self.lr.hooks

    def state_dict(self) -> dict[str, Any]:
        # plain dicts (copies: records change after growth, the symmetry boost), the keys every release wrote
        return {"grown": self._grown, "seed": self.seed, "stages": [s.to_dict() for s in self.stages],
                "records": [r.to_dict() for r in self._records],
                "summaries": [dict(s) for s in self.summaries]}  # a resume past a growth still reports it

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._adopt_applied(state_dict)
        if self._schedule is not None:  # a strategy that restores after on_fit_start: the recipes are known
            self._check_applied()
        self._grown = int(state_dict["grown"])
        self._records = [StageRecord.from_dict(r) for r in state_dict["records"]]
        self.summaries = [dict(s) for s in state_dict.get("summaries", [])]  # older checkpoints: none kept

    def _adopt_applied(self, state: dict[str, Any]) -> None:
        """Take the stages a checkpoint applied as it recorded them (their recipe resolved when they grew); they
        are checked against this callback's own stages once the module's schedule is known
        (:meth:`_check_applied`)."""
        grown = int(state["grown"])
        self._applied = [GrowthStage(**s) for s in state["stages"][:grown]]
        if len(self.stages) < grown:
            raise GrowthError(f"the checkpoint applied {grown} growth stages, this GrowthCallback has "
                              f"{len(self.stages)}: give it the stages the run was started with")
        self._set_stages((*self._applied, *self.stages[grown:]))

    def _check_applied(self) -> None:
        """Refuse a checkpoint grown by other stages than this callback's, each resolved under the module's
        schedule (a checkpoint written before stages named their recipe is matched on its keys alone)."""
        mine = [resolve_recipe(s, self._schedule or "cosine") for s in self._timed[: len(self._applied)]]
        same = all(a == b if "recipe" in a.given_keys and a.recipe != AUTO else same_keys(a, b)
                   for a, b in zip(self._applied, mine))
        if same:
            return
        fraction = any(s.at_fraction is not None for s in self._given_stages[: len(self._applied)])
        old = any(a.recipe == AUTO for a in self._applied)
        raise GrowthError(
            "the checkpoint was grown by different stages than this GrowthCallback has: "
            f"checkpoint applied {self._applied}, callback has {mine}"
            + ("; an at_fraction stage takes its step from trainer.max_steps, so resume with the max_steps the "
               "run was started with" if fraction else "")
            + ("; GrowthStage's default recipe is now 'auto' (the CLI's): a checkpoint grown by the paper's "
               "defaults resumes with GrowthStage(..., recipe='paper')" if old else "")
        )

    def _rewarms(self, k: int) -> bool:
        """Whether stage ``k`` has a re-warmup of new entries (:func:`~.rewarmup.has_rewarmup`)."""
        return has_rewarmup(self.stages[k], self._regions[k] if k < len(self._regions) else None, self._plans.get(k))

    def _set_stages(self, stages: Sequence[GrowthStage]) -> None:
        self.stages = tuple(stages)
        self.lr.stages = self.symmetry.stages = self.stages  # the helpers read the stages in effect

    @property
    def backend(self) -> GrowthBackend:
        """The growth backend of the trainer's strategy (chosen in ``setup``)."""
        if self._backend is None:
            raise RuntimeError("GrowthCallback: no growth backend yet (it is chosen in setup, at fit start)")
        return self._backend

    # ------------------------------------------------------------------ setup / validation
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        self._backend = select_backend(trainer.strategy)  # refuses unsupported strategies, naming them
        gpt = find_gpt(pl_module)
        max_steps = trainer.max_steps
        try:
            self._timed = tuple(resolve_timing(self._given_stages, max_steps))
        except ValueError as err:
            raise GrowthError(f"GrowthCallback: {err}") from err
        self._set_stages((*self.stages[: self._grown], *self._timed[self._grown:]))
        needs_horizon = any(s.rewarmup_ratio is not None for s in self.stages)
        if (max_steps is None or max_steps < 0) and needs_horizon:
            raise GrowthError(
                "the re-warmup of new entries decays to min_lr at trainer.max_steps: set Trainer(max_steps=...) "
                "or use GrowthStage(rewarmup_ratio=None)"
            )
        for s in self.stages:
            if max_steps is not None and max_steps >= 0 and s.at_step >= max_steps:
                raise GrowthError(
                    f"GrowthStage(at_step={s.at_step}) is at or past trainer.max_steps={max_steps}: it would never "
                    "train the grown model; lower at_step or raise max_steps"
                )
        self._dry_run(gpt)
        if max_steps is not None and max_steps >= 0:
            try:  # the stages with a re-warmup (a stage that adds no entries has none: _rewarms)
                check_rewarmup_fits([s for k, s in enumerate(self.stages) if k >= self._grown and self._rewarms(k)],
                                    max_steps)
            except ValueError as err:
                # A warning, not a refusal: the documented schedule (rewarmup_lr clamps the warm-up to the steps
                # left) is well defined, and Python users may shorten a run on purpose. The CLI refuses it.
                rank_zero_warn(f"GrowthCallback: {err}", category=UserWarning)
        self._install_resume_hook(trainer, pl_module)

    def _dry_run(self, gpt: Any) -> None:
        """Plan every stage not applied yet once, each on the config the stages before it grow (shapes only): a
        refused stage fails here, before training; the growth applies these plans (:meth:`_plan`). A plan the
        caller gave (``plans=``) is kept where it fits (:meth:`_plan`), not planned again."""
        config = gpt.config
        tied = gpt.lm_head.weight is gpt.transformer.wte.weight
        self._plans = dict(enumerate(self._given_plans))
        for k in range(self._grown, len(self.stages)):
            config = self._plan(k, config, seed=self.seed, tied=tied).new_config

    def _resolve_recipes(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Resolve ``recipe='auto'`` of the stages not applied yet by the schedule the module's scheduler runs
        (:func:`~lightning_sparkling.growth.recipes.schedule_of`: the CLI's choice for that schedule), then dry-run
        the stages whose keys changed."""
        trained = [c.scheduler for c in trainer.lr_scheduler_configs
                   if any(c.scheduler.optimizer is o for o in trainer.optimizers)]
        try:
            self._schedule = schedule_of(trained)
        except ValueError as err:
            raise GrowthError(f"GrowthCallback: {err}") from err
        if self._applied:
            self._check_applied()
        try:
            pending = [resolve_recipe(s, self._schedule) for s in self.stages[self._grown:]]
        except ValueError as err:  # a key the stage set that the schedule's recipe cannot take
            recipe = schedule_recipe(self._schedule)
            raise GrowthError(f"GrowthCallback: {err} (the stage's recipe is auto, {recipe!r} under the module's "
                              f"{self._schedule} schedule: set the keys it needs, e.g. init, or give the stage a "
                              "recipe, e.g. recipe='paper')") from err
        if pending != list(self.stages[self._grown:]):
            self._set_stages((*self.stages[: self._grown], *pending))
            try:
                check_stage_sequence(self.stages)
            except ValueError as err:
                raise GrowthError(f"GrowthCallback: {err}") from err
            self._dry_run(find_gpt(pl_module))

    def _plan(self, k: int, config: Any, *, seed: int, tied: bool) -> GrowthPlan:
        """The plan of stage ``k`` on a model of ``config``: the setup dry run's, computed once, where it fits
        (:meth:`GrowthPlan.fits`: the same stage, seed and tying on a model of the config the dry run chained to).

        Re-planned only where the dry run's plan is not this growth's: a model whose config differs from the dry
        run's (changed between setup and the growth), a resume whose checkpoint was grown with another seed than
        this callback's, or a stage with no dry-run plan (a ``setup`` that did not run for ``"fit"``). A stale plan
        is never applied."""
        plan = self._plans.get(k)
        if plan is None or not plan.fits(config, self.stages[k], seed=seed, stage_index=k, tied_embeddings=tied):
            plan = self._plans[k] = plan_growth(config, self.stages[k], seed=seed, stage_index=k, tied_embeddings=tied)
        return plan

    def _install_resume_hook(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Checkpoints of grown models: grow the fresh model before the checkpoint's weights are loaded. A
        callback's own state arrives only after the weights, so the backend hooks the point where the strategy
        loads (the module's ``on_load_checkpoint``, or the sharded strategy's ``load_checkpoint``) until training
        starts."""
        if self._remove_resume_hook_fn is not None:
            return
        self._remove_resume_hook_fn = self.backend.hook_resume(
            trainer, pl_module, self.state_key, lambda state: self._resume(trainer, pl_module, state))

    def _remove_resume_hook(self) -> None:
        if self._remove_resume_hook_fn is not None:
            self._remove_resume_hook_fn()
            self._remove_resume_hook_fn = None

    def _resume(self, trainer: pl.Trainer, pl_module: pl.LightningModule, state: dict[str, Any]) -> None:
        """Give a freshly built model the shapes of a checkpoint that had ``state["grown"]`` stages applied. Under
        a strategy that loads into the live optimizers after ``on_fit_start``, also rebuild the grown optimizer
        layout, re-warmup schedulers and new-entry LR before Lightning loads into them."""
        grown = int(state["grown"])
        if grown <= len(self._regions):
            return
        self._adopt_applied(state)  # the stages as the checkpoint grew them (their recipe resolved then)
        gpt = find_gpt(pl_module)
        tied = gpt.lm_head.weight is gpt.transformer.wte.weight
        config = gpt.config
        plans: list[GrowthPlan] = []
        for k in range(len(self._regions), grown):
            plan = self._plan(k, config, seed=int(state["seed"]), tied=tied)  # the dry run's: the same config
            self._carry_forward(plan)
            self._regions.append({n: r for n, t in plan.tensors.items() if (r := t.new_region())})
            self.symmetry.copies.append(copy_specs(plan))
            plans.append(plan)
            config = plan.new_config
        self.backend.regrow(trainer, pl_module, gpt, plans)
        gpt = find_gpt(pl_module)
        checkpoint_new_blocks(gpt)
        recompile_after_growth(pl_module, gpt)
        if not self.backend.restores_after_fit_start:
            return  # load_state_dict and on_fit_start follow, as for any fit
        self._records = [StageRecord.from_dict(r) for r in state["records"]]
        self._grown = grown
        self.lr.schedulers = {}
        self.lr.register_applied(trainer)
        self._install_lr_hooks(trainer, pl_module)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._resolve_recipes(trainer, pl_module)
        self.backend.check_model(pl_module, find_gpt(pl_module))
        for optimizer in trainer.optimizers:
            check_optimizer_supported(optimizer)
        check_gradient_clipping(trainer, pl_module)
        check_fresh_bias_correction(trainer, self.stages)
        check_baseline_schedulers(trainer, self.stages)  # decay_speedup reads the module's schedule
        if any(self._rewarms(k) for k in range(len(self.stages))):
            self.lr.min_lrs = resolve_min_lrs(trainer, self.min_lr, [s for k, s in enumerate(self.stages)
                                                                     if k >= self._grown and self._rewarms(k)])
        self.lr.register_applied(trainer)  # resumed: same scheduler layout as when saved
        self._install_lr_hooks(trainer, pl_module)

    def _install_lr_hooks(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.lr.install(trainer, pl_module, find_gpt(pl_module), self.backend, self._regions)

    # ------------------------------------------------------------------ growth
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._remove_resume_hook()

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        # at_step=0 (or a stage already due when the run starts): grow before the first micro-batch of the window
        while self._due(trainer):
            self._grow(trainer, pl_module, batch)

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self._time_steps(trainer)
        grew = False
        while self._due(trainer):
            self._grow(trainer, pl_module, batch)
            grew = True
        self.symmetry.control(trainer, pl_module, lambda: find_gpt(pl_module), self.backend)
        self.lr.log(trainer)
        every = trainer.log_every_n_steps if self.symmetry_every_n_steps is None else self.symmetry_every_n_steps
        if self.symmetry.copies and every and (grew or trainer.global_step % every == 0):
            self.symmetry.log(trainer, pl_module, find_gpt(pl_module), self.backend)

    def _due(self, trainer: pl.Trainer) -> bool:
        return self._grown < len(self.stages) and trainer.global_step >= self.stages[self._grown].at_step

    def _grow(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any) -> None:
        k = self._grown
        stage = self.stages[k]
        gpt = find_gpt(pl_module)
        tied = gpt.lm_head.weight is gpt.transformer.wte.weight
        params_before = count_params(gpt.config, tie_embeddings=tied)
        device = next(gpt.parameters()).device
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        start = time.perf_counter()
        result = self.backend.grow(trainer, pl_module, gpt, stage, seed=self.seed, stage_index=k,
                                   plan=self._plan(k, gpt.config, seed=self.seed, tied=tied))
        gpt = find_gpt(pl_module)
        patches = []
        try:
            for optimizer in trainer.optimizers:
                patches.append(self.backend.plan_optimizer_patch(optimizer, result, stage.optimizer_state))
            for patch in patches:
                patch.apply()
            loss = self._check_loss(pl_module, gpt, batch)
            checkpointed = checkpoint_new_blocks(gpt)  # a depth growth's new blocks, when the others are
            self.backend.rewrap(trainer, pl_module)
        except BaseException as err:
            for patch in reversed(patches):
                patch.undo()
            result.rollback()
            raise GrowthFailedError(
                f"growth stage {k} (GrowthStage(at_step={stage.at_step}, {stage.sizes})) failed at global step "
                f"{trainer.global_step}: {err}. The model and optimizer are the pre-growth ones."
            ) from err
        recompiled = recompile_after_growth(pl_module, gpt)
        seconds = time.perf_counter() - start
        groups = flat_groups(trainer.optimizers)
        record = StageRecord(
            stage_index=k,
            global_step=trainer.global_step,
            lr_at_growth=[float(trainer.optimizers[o].param_groups[g]["lr"]) for o, g in groups],
            min_lr=list(self.lr.min_lrs) if self.lr.min_lrs is not None else None,
            total_steps=trainer.max_steps,
            betas=[list(map(float, trainer.optimizers[o].param_groups[g]["betas"])) for o, g in groups]
            if stage.bias_correction == "fresh" else None,
            symmetry_boost=1.0,  # the symmetry_target loop's LR multiplier (1: schedule only)
            symmetry_done=stage.symmetry_target is None,
        )
        self._records.append(record)
        self._carry_forward(result.plan)
        self._regions.append(result.new_entries)
        self.symmetry.copies.append(copy_specs(result.plan))
        self._grown += 1
        if self._rewarms(k):  # new entries to re-warm (a stage that only sets config fields has none)
            self.lr.register(trainer, k)
        self._install_lr_hooks(trainer, pl_module)
        params_after = count_params(gpt.config, tie_embeddings=tied)
        # a module that counts its own FLOPs (LitGPTPretrainModule: measure_flops) counts the grown model's at its
        # next step; another module's flops_per_batch is scaled by the ratio of active parameters
        if not hasattr(pl_module, "update_flops_per_batch") and \
                isinstance(getattr(pl_module, "flops_per_batch", None), (int, float)):
            pl_module.flops_per_batch = pl_module.flops_per_batch * params_after[0] / params_before[0]
        self._summarize(trainer, pl_module, gpt, result, k, params_before, params_after, seconds, loss, device)
        self.summaries[-1].update(compiled=recompiled, checkpointed_new_blocks=checkpointed)
        self._first_step = (k, trainer.global_step, time.perf_counter())

    def _time_steps(self, trainer: pl.Trainer) -> None:
        """Time optimizer steps at their batch end; report the first one after a growth (on a compiled model it
        includes compiling the grown shapes) next to the step before the growth."""
        step, now = trainer.global_step, time.perf_counter()
        clock = self._step_clock
        if clock is not None and step > clock[0]:
            self._step_clock = (step, now, now - clock[1])
        elif clock is None:
            self._step_clock = (step, now, None)
        pending = self._first_step
        if pending is None or step <= pending[1]:
            return
        k, _, grown_at = pending
        self._first_step = None
        seconds = now - grown_at
        before = clock[2] if clock is not None and clock[0] <= pending[1] else None
        summary = next((s for s in self.summaries if s["stage"] == k), None)
        if summary is not None:
            summary["first_step_seconds"] = seconds
        what = "recompile included" if summary is not None and summary.get("compiled") else "eager"
        rank_zero_info(f"GrowthCallback: stage {k}: the first optimizer step after the growth took {seconds:.2f}s "
                       f"({what}" + (f"; the step before the growth took {before:.2f}s)" if before else ")"))
        if trainer.logger is not None:
            trainer.logger.log_metrics({"growth/first_step_seconds": seconds}, step=step)

    def _recipe_line(self, k: int, plan: GrowthPlan) -> str:
        """The recipe stage ``k`` grew by, and why (``auto``: the module's schedule), named as ``sparkling plan`` and
        ``measure`` name it (:func:`~lightning_sparkling.growth.recipes.recipe_name`: where the measured map names
        its keys another recipe's, a note says so); none for a stage that added no entries (``plan``)."""
        stage = self.stages[k]
        if not plan.adds_entries:
            return "none applies: the stage adds no new entries (no init, new-entry optimizer state or re-warmup)"
        name = recipe_name([stage])
        why = (f" (recipe auto under the {self._schedule} schedule)" if self._given_stages[k].recipe == AUTO
               and self._schedule is not None else "")
        note = f"; {name.note}" if name.note else ""
        return f"{name.label}{why}: init {stage.init}, rewarmup_ratio {stage.rewarmup_ratio}{note}"

    def _carry_forward(self, plan: GrowthPlan) -> None:
        """Earlier stages' new entries and copies under the names and indices of ``plan``'s grown model: a depth
        growth moves kept blocks (``interleave``, ``middle``), a heads growth moves old heads in the fused ``qkv``
        rows and ``attn.proj`` columns, dense -> MoE moves every MLP to expert 0; a new block's entries belong to
        ``plan``'s stage alone."""
        if not plan.moves_entries:
            return
        carried = [[plan.carry_region(n, pieces) for n, pieces in regions.items()] for regions in self._regions]
        self._regions = [{n: pieces for n, pieces in regions if n is not None} for regions in carried]
        self.symmetry.carry_forward(plan)

    @torch.no_grad()
    def _check_loss(self, pl_module: pl.LightningModule, gpt: torch.nn.Module, batch: Any) -> float:
        """Loss of the grown model on the current batch (next-token cross-entropy of its first token tensor, or
        ``pl_module.growth_check_loss(batch)`` when the module defines it); raises if it is not finite."""
        custom = getattr(pl_module, "growth_check_loss", None)
        with eager():  # a compiled model runs this one forward eagerly: no graph compiled for it
            if callable(custom):
                loss = custom(batch)
            else:
                ids = token_batch(batch)
                if ids is None or ids.size(1) < 2:
                    g = torch.Generator().manual_seed(0)
                    ids = torch.randint(0, gpt.config.vocab_size, (1, min(gpt.max_seq_length, 16) + 1), generator=g)
                ids = ids[:, : gpt.max_seq_length + 1].to(next(gpt.parameters()).device)
                logits = self.backend.forward_module(pl_module, gpt)(ids[:, :-1])
                loss = F.cross_entropy(logits.flatten(0, 1).float(), ids[:, 1:].flatten().long())  # int32: litdata
        self.backend.reshard(pl_module, gpt)
        loss = float(loss)
        if not math.isfinite(loss):
            raise GrowthError(f"the grown model's loss on the current batch is not finite ({loss})")
        return loss

    # ------------------------------------------------------------------ reporting
    def _summarize(self, trainer: pl.Trainer, pl_module: pl.LightningModule, gpt: torch.nn.Module,
                   result: GrowthResult, k: int, params_before: tuple[int, int], params_after: tuple[int, int],
                   seconds: float, loss: float, device: torch.device) -> None:
        sizes = size_pairs(result.old_config, result.new_config)  # every axis' sizes, a user's too
        if device.type == "cuda":
            peak_mb = torch.cuda.max_memory_allocated(device) / 2**20
            peak_what = "peak CUDA memory during growth"
        else:
            peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            peak_what = "peak process RSS so far"
        summary = {
            "stage": k, "global_step": trainer.global_step, "sizes": sizes, "new_entries": result.plan.adds_entries,
            "widths": {size: pair for size, pair in sizes.items() if size in WIDTH_SIZE_KEYS},  # the widths alone
            "alpha": result.plan.alphas(),
            "params_before": params_before[1], "params_after": params_after[1],
            "active_params_before": params_before[0], "active_params_after": params_after[0],
            "flops_per_token_before": 6 * params_before[0], "flops_per_token_after": 6 * params_after[0],
            "seconds": seconds, "peak_memory_mb": peak_mb, "loss_after": loss, "recipe": self.stages[k].recipe,
        }
        self.summaries.append(summary)
        lines = [f"GrowthCallback: stage {k} grew the model at global step {trainer.global_step} in {seconds:.2f}s",
                 f"  {'recipe':<22} {self._recipe_line(k, result.plan)}"]
        lines += growth_log_lines(result.plan, sizes, gpt)  # every axis' old -> new and details, then its own lines
        lines.append(f"  {'parameters':<22} {params_before[1]:>8,} -> {params_after[1]:,} "
                     f"(active {params_before[0]:,} -> {params_after[0]:,})")
        lines.append(f"  {'FLOPs/token (6N)':<22} {6 * params_before[0]:>8,} -> {6 * params_after[0]:,}")
        lines.append(f"  {'loss after growth':<22} {loss:>8.4f}   {peak_what}: {peak_mb:,.0f} MiB")
        rank_zero_info("\n".join(lines))
        if trainer.logger is not None:
            trainer.logger.log_metrics({
                "growth/event": k + 1, "growth/seconds": seconds, "growth/params": params_after[1],
                "growth/active_params": params_after[0], "growth/flops_per_token": 6 * params_after[0],
                "growth/peak_memory_mb": peak_mb,
            }, step=trainer.global_step)


WidthGrowthCallback = GrowthCallback
"""The design card's name of :class:`GrowthCallback`: the same class, an alias (no warning)."""
