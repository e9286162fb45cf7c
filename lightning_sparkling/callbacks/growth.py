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
   blocks are activation-checkpointed when the others are; a compiled model's graphs are dropped, and only the
   model's (the first step after the growth compiles the grown shapes; its time is logged as
   ``growth/first_step_seconds``; a model compiled whole recompiles all of it, and the log says so).
4. Every later optimizer step: old entries follow the user's schedule untouched; the update of new entries is
   rescaled to their re-warmup LR (:class:`~lightning_sparkling.growth.optim_state.RewarmupRescale`).
"""

from __future__ import annotations

import math
import resource
import time
from collections.abc import Callable, Sequence
from typing import Any, cast

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info
from typing_extensions import override

from lightning_sparkling.callbacks.clipping import check_gradient_clipping
from lightning_sparkling.callbacks.module_parts import (batch_loss, check_new_entries_train, find_gpt,
                                                        path_among_several)
from lightning_sparkling.callbacks.rewarmup import (RewarmupSchedulers, check_baseline_schedulers, check_run_horizon,
                                                    check_fresh_bias_correction, flat_groups, has_rewarmup,
                                                    resolve_min_lrs)
from lightning_sparkling.callbacks.symmetry_loop import SymmetryLoop
from lightning_sparkling.growth.axes import growth_log_lines, size_pairs
from lightning_sparkling.growth.compute import count_params
from lightning_sparkling.growth.errors import GrowthError
from lightning_sparkling.growth.optim_state import check_optimizer_supported
from lightning_sparkling.growth.plan import GrowthPlan, plan_growth
from lightning_sparkling.growth.recipes import (AUTO, check_same_stages, recipe_line, resolve_recipe, schedule_of,
                                                schedule_recipe)
from lightning_sparkling.growth.record import GROWTH_STATE_KEY, StageRecord
from lightning_sparkling.growth.stage import (WIDTH_SIZE_KEYS, GrowthStage, check_rewarmup_fits, check_stage_order,
                                              check_stage_sequence, resolve_timing)
from lightning_sparkling.growth.surgery import GrowthResult
from lightning_sparkling.growth.symmetry import copy_specs
from lightning_sparkling.parallel import GrowthBackend, select_backend
from lightning_sparkling.parallel.activation_checkpointing import checkpoint_new_blocks
from lightning_sparkling.parallel.compile import compiled_scope, recompile_after_growth


class GrowthFailedError(RuntimeError):
    """A growth failed mid-way; the run keeps (and stops with) its pre-growth model and optimizer."""


class GrowthCallback(Callback):
    """Grow the litgpt ``GPT`` inside a LightningModule at configured steps (SPARKLING): width, heads, depth.

    At ``stage.at_step = N`` the model grows after optimizer step N, before step N+1's first micro-batch. Every
    optimizer is patched in place (state by ``stage.optimizer_state``); the new entries' LR (``rewarmup_lr``) is a
    ``LambdaLR`` in ``trainer.lr_scheduler_configs``, and the module's own schedule keeps driving the old entries.

    Checkpoints hold a plain litgpt ``GPT`` state_dict; resuming grows the fresh model before the weights load.

    Args:
        stages: one or several :class:`GrowthStage` with increasing ``at_step`` (a stage given by ``at_fraction``
            takes its step from ``trainer.max_steps`` in ``setup``; the order is checked then).
        min_lr: the LR the new entries' re-warmup decays to at ``trainer.max_steps``; by default read from the
            module's schedule where exact (:class:`~lightning_sparkling.growth.schedules.WarmupCosineLambda`,
            ``CosineAnnealingLR``'s ``eta_min``), else setup asks for it.
        seed: growth seed (copy maps and random init); identical on every rank.
        symmetry_every_n_steps: how often to log ``symmetry/stage_{k}/{channel}`` (mean cosine of copied channels
            to their sources, per channel dimension; a depth or experts copy under its axis' ``symmetry_key``);
            ``None`` follows ``Trainer(log_every_n_steps)``, ``0`` turns it off. Each log reads every
            copy-initialized tensor (under FSDP2 it gathers them), so raise it for very large models.
        plans: each stage's :class:`~lightning_sparkling.growth.plan.GrowthPlan` when the caller planned the stages
            (``sparkling pretrain``'s run plan): ``setup``'s dry run applies each that is the plan of its stage on the
            model (``GrowthPlan.fits``: same stage, position, seed, tying, config) and plans the others.
        model_attr: the dotted attribute path of the GPT to grow (``"student"``) when the module holds several (a
            frozen teacher, an EMA copy); ``None``: the only GPT, else the one whose parameters the optimizers train.
            The others are left as they are.

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
                 plans: Sequence[GrowthPlan] | None = None, model_attr: str | None = None) -> None:
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
        if model_attr is not None and (not isinstance(model_attr, str) or not model_attr):
            raise ValueError(f"GrowthCallback(model_attr={model_attr!r}): give the dotted attribute path of the GPT "
                             "to grow inside the LightningModule, e.g. 'student'")
        self.model_attr = model_attr
        self._trainer: pl.Trainer | None = None  # the fit's trainer (its optimizers pick the GPT among several)
        self._prepared: int | None = None  # id of the GPT setup's checks ran on (None: deferred, not built yet)
        self._gpt_path: str | None = None  # where the grown GPT sits in the module (checkpointed, for a resume)
        self.summaries: list[dict[str, Any]] = []
        # the records are looked up through self at each use, never captured: load_state_dict replaces them
        self.lr = RewarmupSchedulers(self.stages, lambda: self._records, self._rewarms)  # the new entries' LR
        self.symmetry = SymmetryLoop(self.stages, lambda: self._records)  # copies' cosines, symmetry_target loop

    # ------------------------------------------------------------------ state
    @property
    @override
    def state_key(self) -> str:
        """The ``checkpoint["callbacks"]`` key of this callback's state: ``"GrowthCallback"``."""
        return GROWTH_STATE_KEY

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

    @override
    def state_dict(self) -> dict[str, Any]:
        # plain dicts (copies: records change after growth, the symmetry boost), the keys every release wrote
        return {"grown": self._grown, "seed": self.seed, "stages": [s.to_dict() for s in self.stages],
                "records": [r.to_dict() for r in self._records],
                "summaries": [dict(s) for s in self.summaries],  # a resume past a growth still reports it
                "model_attr": self._gpt_path}  # the GPT grown, among several (a resume regrows that one)

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._adopt_applied(state_dict)
        if self._schedule is not None:  # a strategy that restores after on_fit_start: the recipes are known
            self._check_applied()
        self._grown = int(state_dict["grown"])
        self._records = [StageRecord.from_dict(r) for r in state_dict["records"]]
        self.summaries = [dict(s) for s in state_dict.get("summaries", [])]  # older checkpoints: none kept

    def _adopt_applied(self, state: dict[str, Any]) -> None:
        """Take the stages a checkpoint applied as it recorded them (recipes resolved); :meth:`_check_applied` checks
        them against this callback's own stages once the module's schedule is known."""
        grown = int(state["grown"])
        self._applied = [GrowthStage(**s) for s in state["stages"][:grown]]
        if len(self.stages) < grown:
            raise GrowthError(f"the checkpoint applied {grown} growth stages, this GrowthCallback has "
                              f"{len(self.stages)}: give it the stages the run was started with")
        self._set_stages((*self._applied, *self.stages[grown:]))

    def _check_applied(self) -> None:
        """Refuse a checkpoint grown by other stages than this callback's, each resolved under the module's
        schedule (:func:`~lightning_sparkling.growth.recipes.check_same_stages`)."""
        mine = [resolve_recipe(s, self._schedule or "cosine") for s in self._timed[: len(self._applied)]]
        fraction = any(s.at_fraction is not None for s in self._given_stages[: len(self._applied)])
        try:
            check_same_stages(self._applied, mine, fraction=fraction)
        except ValueError as err:
            raise GrowthError(f"GrowthCallback: {err}") from err

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
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        self._backend = select_backend(trainer.strategy)  # refuses unsupported strategies, naming them
        self._trainer = trainer
        self._prepared = self._gpt_path = None
        max_steps = trainer.max_steps
        try:
            self._timed = tuple(resolve_timing(self._given_stages, max_steps))
        except ValueError as err:
            raise GrowthError(f"GrowthCallback: {err}") from err
        self._set_stages((*self.stages[: self._grown], *self._timed[self._grown:]))
        check_run_horizon(self.stages, max_steps)
        try:
            gpt = self._gpt(pl_module)
        except GrowthError:  # built in configure_model, or one of several GPTs: on_fit_start knows (or refuses)
            gpt = None
        if gpt is not None:
            self._prepare(trainer, gpt)
        self._install_resume_hook(trainer, pl_module)

    def _gpt(self, pl_module: pl.LightningModule, path: str | None = None) -> Any:
        """The GPT this callback grows (:func:`~.module_parts.find_gpt`): at ``model_attr`` (or ``path``, where a
        checkpoint recorded it), else the only one, else the one the trainer's optimizers train."""
        optimizers = getattr(self._trainer, "optimizers", None) or ()  # none before configure_optimizers
        return find_gpt(pl_module, self.model_attr or path or self._gpt_path, optimizers)

    def _prepare(self, trainer: pl.Trainer, gpt: Any) -> None:
        """Setup's checks that read the GPT: the dry run of the stages not applied yet, then their re-warmup
        against ``max_steps`` (run again at fit start when the GPT was not built at setup, or another one trains)."""
        self._dry_run(gpt)
        self._prepared, max_steps = id(gpt), trainer.max_steps
        if max_steps is None or max_steps < 0:
            return
        try:  # refused as the CLI refuses it: rewarmup_lr does not shorten a warm-up to the steps left
            check_rewarmup_fits([s for k, s in enumerate(self.stages) if k >= self._grown and self._rewarms(k)],
                                max_steps)  # the stages with a re-warmup (a stage that adds no entries has none)
        except ValueError as err:
            raise GrowthError(f"GrowthCallback: {err}") from err

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
        """Resolve ``recipe='auto'`` of the stages not applied yet by the module's schedule
        (:func:`~lightning_sparkling.growth.recipes.schedule_of`), then dry-run the stages whose keys changed."""
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
            self._dry_run(self._gpt(pl_module))

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
        callback's state arrives after the weights, so the backend hooks where the strategy loads (the module's
        ``on_load_checkpoint``, or the sharded strategy's ``load_checkpoint``) until training starts."""
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
        gpt = self._gpt(pl_module, state.get("model_attr"))
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
        sizes = ", ".join(f"{key} {a} -> {b}" for key, (a, b) in size_pairs(plans[0].old_config, config).items())
        rank_zero_info(f"GrowthCallback: the checkpoint was grown by {grown} stage(s); regrew the model before "
                       f"loading its weights: {sizes}")
        self._gpt_path = state.get("model_attr")
        gpt = self._gpt(pl_module, state.get("model_attr"))
        checkpoint_new_blocks(gpt)
        recompile_after_growth(pl_module, gpt)
        if not self.backend.restores_after_fit_start:
            return  # load_state_dict and on_fit_start follow, as for any fit
        self._records = [StageRecord.from_dict(r) for r in state["records"]]
        self._grown = grown
        self.lr.schedulers = {}
        self.lr.register_applied(trainer)
        self._install_lr_hooks(trainer, pl_module)

    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._trainer = trainer
        gpt = self._gpt(pl_module)  # the optimizers exist now: the GPT they train, among several
        self._gpt_path = path_among_several(pl_module, gpt)  # grown, it is in no optimizer until patched
        if self._prepared != id(gpt):
            self._prepare(trainer, gpt)
        self._resolve_recipes(trainer, pl_module)
        check_new_entries_train(gpt, [self._plans[k] for k in range(self._grown, len(self.stages)) if k in self._plans],
                                trainer.optimizers)
        self.backend.check_model(pl_module, self._gpt(pl_module))
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
        self.lr.install(trainer, pl_module, self._gpt(pl_module), self.backend, self._regions)

    # ------------------------------------------------------------------ growth
    @override
    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._remove_resume_hook()

    @override
    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any,
                             batch_idx: int) -> None:
        # at_step=0 (or a stage already due when the run starts): grow before the first micro-batch of the window
        while self._due(trainer):
            self._grow(trainer, pl_module, batch)

    @override
    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self._time_steps(trainer)
        grew = False
        while self._due(trainer):
            self._grow(trainer, pl_module, batch)
            grew = True
        self.symmetry.control(trainer, pl_module, lambda: self._gpt(pl_module), self.backend)
        self.lr.log(trainer)
        every = self.symmetry_every_n_steps
        if every is None:  # Lightning's logger connector sets log_every_n_steps; the Trainer class does not declare it
            every = trainer.log_every_n_steps  # type: ignore[attr-defined]
        if self.symmetry.copies and every and (grew or trainer.global_step % every == 0):
            self.symmetry.log(trainer, pl_module, self._gpt(pl_module), self.backend)

    def _due(self, trainer: pl.Trainer) -> bool:
        return self._grown < len(self.stages) and trainer.global_step >= cast(int, self.stages[self._grown].at_step)

    def _grow(self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any) -> None:
        k = self._grown
        stage = self.stages[k]
        gpt = self._gpt(pl_module)
        tied = gpt.lm_head.weight is gpt.transformer.wte.weight
        params_before = count_params(gpt.config, tie_embeddings=tied)
        device = next(gpt.parameters()).device
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
        loss_before = batch_loss(pl_module, gpt, batch, self.backend)  # the same batch as the check after it
        start = time.perf_counter()
        result = self.backend.grow(trainer, pl_module, gpt, stage, seed=self.seed, stage_index=k,
                                   plan=self._plan(k, gpt.config, seed=self.seed, tied=tied))
        gpt = self._gpt(pl_module)
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
            # a user module's own number (checked above), which LightningModule does not declare
            pl_module.flops_per_batch *= params_after[0] / params_before[0]  # type: ignore[operator, assignment]
        self._summarize(trainer, pl_module, gpt, result, k, params_before, params_after, seconds,
                        (loss_before, loss), device)
        scope = compiled_scope(pl_module) if recompiled else None
        self.summaries[-1].update(compiled=recompiled, compile_scope=scope, checkpointed_new_blocks=checkpointed)
        if scope == "whole":
            rank_zero_info(f"GrowthCallback: stage {k}: the model is compiled whole, so the next step recompiles all "
                           "of it (its time follows); compiled per block (lightning_sparkling.parallel.compile_gpt("
                           "model, per_block=True)) a width growth recompiles one block's graph and a depth growth "
                           "none")
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
        scope = str(summary.get("compile_scope")) if summary is not None else ""
        what = {"whole": "recompiling the whole GPT included", "blocks": "recompiling per block included"}.get(
            scope, "eager")
        rank_zero_info(f"GrowthCallback: stage {k}: the first optimizer step after the growth took {seconds:.2f}s "
                       f"({what}" + (f"; the step before the growth took {before:.2f}s)" if before else ")"))
        if trainer.logger is not None:
            trainer.logger.log_metrics({"growth/first_step_seconds": seconds}, step=step)

    def _recipe_line(self, k: int, plan: GrowthPlan) -> str:
        """The growth log's recipe line of stage ``k`` (:func:`~lightning_sparkling.growth.recipes.recipe_line`)."""
        auto = self._schedule if self._given_stages[k].recipe == AUTO else None
        return recipe_line(self.stages[k], plan, auto_schedule=auto)

    def _carry_forward(self, plan: GrowthPlan) -> None:
        """Earlier stages' new entries and copies under the names and indices of ``plan``'s grown model: a depth
        growth moves kept blocks, a heads growth old heads in the fused ``qkv`` rows and ``attn.proj`` columns,
        dense -> MoE every MLP to expert 0; a new block's entries belong to ``plan``'s stage alone."""
        if not plan.moves_entries:
            return
        carried = [[plan.carry_region(n, pieces) for n, pieces in regions.items()] for regions in self._regions]
        self._regions = [{n: pieces for n, pieces in regions if n is not None} for regions in carried]
        self.symmetry.carry_forward(plan)

    def _check_loss(self, pl_module: pl.LightningModule, gpt: torch.nn.Module, batch: Any) -> float:
        """Loss of the grown model on the current batch (:meth:`_batch_loss`); raises if it is not finite."""
        loss = batch_loss(pl_module, gpt, batch, self.backend)
        if not math.isfinite(loss):
            raise GrowthError(f"the grown model's loss on the current batch is not finite ({loss})")
        return loss

    # ------------------------------------------------------------------ reporting
    def _summarize(self, trainer: pl.Trainer, pl_module: pl.LightningModule, gpt: torch.nn.Module,
                   result: GrowthResult, k: int,
                   params_before: tuple[int, int], params_after: tuple[int, int], seconds: float,
                   losses: tuple[float, float], device: torch.device) -> None:
        """The growth's log lines and ``summaries`` entry; ``losses``: the model's loss on the growth's batch
        before and after it."""
        before, loss = losses
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
            "seconds": seconds, "peak_memory_mb": peak_mb, "loss_before": before, "loss_after": loss,
            "recipe": self.stages[k].recipe,
        }
        self.summaries.append(summary)
        lines = [f"GrowthCallback: stage {k} grew the model at global step {trainer.global_step} in {seconds:.2f}s",
                 f"  {'recipe':<22} {self._recipe_line(k, result.plan)}"]
        lines += growth_log_lines(result.plan, sizes, gpt)  # every axis' old -> new and details, then its own lines
        lines.append(f"  {'parameters':<22} {params_before[1]:>8,} -> {params_after[1]:,} "
                     f"(active {params_before[0]:,} -> {params_after[0]:,})")
        lines.append(f"  {'FLOPs/token (6N)':<22} {6 * params_before[0]:>8,} -> {6 * params_after[0]:,}")
        lines.append(f"  {'loss (same batch)':<22} {before:>8.4f} -> {loss:.4f} ({loss - before:+.4f} at the growth)")
        lines.append(f"  {'memory':<22} {peak_what}: {peak_mb:,.0f} MiB")
        rank_zero_info("\n".join(lines))
        if trainer.logger is not None:
            trainer.logger.log_metrics({
                "growth/event": k + 1, "growth/seconds": seconds, "growth/params": params_after[1],
                "growth/active_params": params_after[0], "growth/flops_per_token": 6 * params_after[0],
                "growth/peak_memory_mb": peak_mb,
            }, step=trainer.global_step)


WidthGrowthCallback = GrowthCallback
"""The design card's name of :class:`GrowthCallback`: the same class, an alias (no warning)."""
