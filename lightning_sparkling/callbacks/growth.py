"""``WidthGrowthCallback``: grow a litgpt GPT's width inside a running ``Trainer.fit``.

Orchestration only (the "when" and the bookkeeping): the tensor math is in :mod:`lightning_sparkling.growth.surgery`,
the optimizer side in :mod:`lightning_sparkling.growth.optim_state`, and the "how" under each strategy (grow in place
or gather-grow-reshard, re-wrap, new-entry slices of a shard, resume) in the strategy's
:class:`~lightning_sparkling.parallel.GrowthBackend`, chosen once in ``setup``.

Timeline of one stage with ``at_step=N`` (single device and DDP):

1. ``setup``: stages are checked against ``trainer.max_steps`` and dry-run on the model's config (shapes only).
2. ``on_fit_start``: optimizers are checked, ``min_lr`` is resolved, and (after a resume) the re-warmup
   schedulers of stages already applied are re-registered so Lightning restores their state by position.
3. ``on_train_batch_end`` after the optimizer step that made ``global_step == N`` (and after the step-interval
   schedulers stepped): grow the GPT, patch every optimizer, check the loss of the grown model on the current batch,
   re-wrap the strategy, register a :class:`~lightning_sparkling.growth.schedules.RewarmupLR` for the new entries, log a
   summary. Anything failing puts the pre-growth model and optimizer back and stops the run with an error.
4. Every later optimizer step: old entries follow the user's schedule untouched; the update of new entries is
   rescaled to their re-warmup LR (:class:`~lightning_sparkling.growth.optim_state.NewEntryLR`).
"""

from __future__ import annotations

import copy
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
from lightning.pytorch.utilities.types import LRSchedulerConfig

from lightning_sparkling.growth.axes import describe_changes
from lightning_sparkling.growth.baselines import (
    _every_step,
    check_baseline_schedulers,
    install_baseline_lr,
    record_rewarmup_lambda,
    rewarmup_all_applied,
)
from lightning_sparkling.growth.compute import count_params
from lightning_sparkling.growth.optim_state import NewEntryLR, NewEntryRegion, check_optimizer_supported
from lightning_sparkling.growth.plan import GrowthError, GrowthPlan, plan_growth
from lightning_sparkling.growth.schedules import RewarmupLR, WarmupCosineLambda, WSDLambda, check_growth_before_decay
from lightning_sparkling.growth.depth import describe_depth
from lightning_sparkling.growth.heads import describe_heads
from lightning_sparkling.growth.stage import (
    SIZE_AXES,
    GrowthStage,
    check_rewarmup_fits,
    check_stage_sequence,
)
from lightning_sparkling.growth.surgery import GrowthResult, clean_name
from lightning_sparkling.growth.symmetry import CopySpec, copy_specs, symmetry_metrics
from lightning_sparkling.parallel import GrowthBackend, select_backend


class GrowthFailedError(RuntimeError):
    """A growth failed mid-way; the run keeps (and stops with) its pre-growth model and optimizer."""


def find_gpt(pl_module: torch.nn.Module):
    """The single litgpt ``GPT`` inside ``pl_module`` (looking through ``torch.compile`` wrappers).

    Raises:
        GrowthError: when there is no ``GPT`` or more than one.
    """
    from litgpt.model import GPT

    found = {id(m): (name, m) for name, m in pl_module.named_modules() if isinstance(m, GPT)}
    if len(found) != 1:
        names = ", ".join(repr(n or "<root>") for n, _ in found.values()) or "none"
        raise GrowthError(
            f"WidthGrowthCallback needs exactly one litgpt GPT inside the LightningModule, found {len(found)} "
            f"({names}); hold the model to grow as one `litgpt.GPT` attribute (e.g. `self.model = GPT(config)`)"
        )
    return next(iter(found.values()))[1]


def _flat_groups(optimizers: Sequence[torch.optim.Optimizer]) -> list[tuple[int, int]]:
    return [(o, g) for o, opt in enumerate(optimizers) for g in range(len(opt.param_groups))]


def _token_batch(batch: Any) -> torch.Tensor | None:
    """The first 2-D integer tensor of a batch (tensor, tuple/list or dict): litgpt pretraining batches."""
    if isinstance(batch, torch.Tensor):
        return batch if batch.ndim == 2 and not batch.is_floating_point() else None
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else []
    for item in items:
        found = _token_batch(item)
        if found is not None:
            return found
    return None


def _module_lambdas(trainer: pl.Trainer) -> dict[tuple[int, int], tuple[Any, Any]]:
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


def _wsd_decays(trainer: pl.Trainer) -> list[dict[str, Any] | None] | None:
    """Per flat param group, the decay phase of its baseline when that is a ``LambdaLR`` of
    :class:`~lightning_sparkling.growth.schedules.WSDLambda` stepped every optimizer step:
    ``{"decay_start": D, "decay_shape": shape}``; ``None`` for other groups; ``None`` overall when no group has one.

    Raises:
        GrowthError: for a ``WSDLambda`` stepped less often than every optimizer step (its steps are not the run's).
    """
    lambdas = _module_lambdas(trainer)
    decays: list[dict[str, Any] | None] = []
    for og in _flat_groups(trainer.optimizers):
        f, config = lambdas.get(og, (None, None))
        if not isinstance(f, WSDLambda):
            decays.append(None)
            continue
        if not _every_step(trainer, config):
            raise GrowthError(
                f"WidthGrowthCallback: optimizer/param group {og}'s WSDLambda is stepped with interval="
                f"{config.interval!r}, frequency={config.frequency}: the new entries' re-warmup follows its decay phase "
                "in optimizer steps, so step it every optimizer step (interval='step', frequency=1)"
            )
        decays.append({"decay_start": int(f.decay_start), "decay_shape": f.decay_shape})
    return decays if any(d is not None for d in decays) else None


def _warn_growth_in_wsd_decay(trainer: pl.Trainer, stages: Sequence[GrowthStage]) -> None:
    """Warn (the CLI refuses) about a stage that grows inside the decay phase of a ``WSDLambda`` baseline."""
    decays = _wsd_decays(trainer) or []
    starts = sorted({d["decay_start"] for d in decays if d is not None})
    if not starts or not stages:
        return
    try:
        check_growth_before_decay([s.at_step for s in stages], decay_start=starts[0], total_steps=trainer.max_steps)
    except ValueError as err:
        rank_zero_warn(f"WidthGrowthCallback: {err}", category=UserWarning)


def _warn_untracked_stable_phase(trainer: pl.Trainer, stages: Sequence[GrowthStage]) -> None:
    """A user's own ``LambdaLR`` (not ``WarmupCosineLambda`` / ``WSDLambda``) that holds its LR over a stage's
    re-warmup (a WSD stable phase, a constant LR): the callback cannot see where that schedule decays, so the new
    entries get the paper's cosine tail from their peak to ``min_lr`` at ``max_steps`` and fall below the old entries'
    LR while it holds. Warn, pointing at ``WSDLambda``."""
    for og, (f, _) in _module_lambdas(trainer).items():
        if isinstance(f, (WSDLambda, WarmupCosineLambda)):
            continue
        for stage in stages:
            if stage.rewarmup_ratio is None:
                continue
            probe = [stage.at_step, stage.at_step + stage.rewarmup_steps, stage.at_step + 2 * stage.rewarmup_steps]
            probe = [t for t in probe if t < trainer.max_steps]
            try:
                values = {float(f(t)) for t in probe}
            except Exception:  # noqa: BLE001 - a lambda we cannot probe: nothing to say
                return
            if len(probe) > 1 and len(values) == 1:
                rank_zero_warn(
                    f"WidthGrowthCallback: the module's LambdaLR ({type(f).__name__}) for optimizer/param group {og} "
                    f"holds its LR over steps {probe[0]}..{probe[-1]} after GrowthStage(at_step={stage.at_step}); the "
                    "callback cannot see where it decays, so the new entries' re-warmup decays by cosine to min_lr at "
                    "max_steps from the end of its warm-up. For a warmup-stable-decay schedule use "
                    "lightning_sparkling.growth.schedules.WSDLambda: the new entries then hold their peak and decay "
                    "with its decay phase", category=UserWarning)
                return


class WidthGrowthCallback(Callback):
    """Grow the width of the litgpt ``GPT`` inside a LightningModule at configured steps (SPARKLING).

    At ``stage.at_step = N`` the model grows after optimizer step N and before step N+1's first micro-batch
    (never mid-accumulation). Every optimizer the module configured is patched in place (parameters and
    per-element state by ``stage.optimizer_state``), and the new entries get their own learning rate
    (``rewarmup_lr``) through a ``LambdaLR`` registered in ``trainer.lr_scheduler_configs``, so Lightning steps,
    saves and restores it; the module's own schedule keeps driving the old entries exactly as before.

    Checkpoints hold a plain litgpt ``GPT`` state_dict of the config of that moment; this callback's state is
    small (stages applied, seed, LRs at growth). Resuming grows the freshly built model before the weights load.

    Args:
        stages: one or several :class:`GrowthStage` with increasing ``at_step``.
        min_lr: the LR the new entries' re-warmup decays to at ``trainer.max_steps``. Without it, it is read from
            the module's schedule where that is exact (a ``LambdaLR`` of
            :class:`~lightning_sparkling.growth.schedules.WarmupCosineLambda`, or ``CosineAnnealingLR``'s ``eta_min``);
            otherwise setup fails with an error asking for it.
        seed: growth seed (copy maps and random init); identical on every rank.
        symmetry_every_n_steps: how often to log ``symmetry/stage_{k}/{axis}`` (mean cosine of copied channels to
            their sources); ``None`` follows ``Trainer(log_every_n_steps)``, ``0`` turns it off. Each log reads every
            copy-initialized tensor (under FSDP2 it gathers them), so raise it for very large models.

    Raises:
        ValueError: for stages that are not ``GrowthStage`` or not in increasing ``at_step`` order.

    Example::

        from lightning_sparkling import GrowthStage, WidthGrowthCallback

        growth = WidthGrowthCallback(
            [GrowthStage(500, n_embd=512, intermediate_size=2048), GrowthStage(1000, intermediate_size=4096)],
            min_lr=3e-5,
        )
        trainer = L.Trainer(max_steps=2000, callbacks=[growth])
        trainer.fit(module, datamodule)
    """

    def __init__(self, stages: GrowthStage | Sequence[GrowthStage], *, min_lr: float | None = None,
                 seed: int = 0, symmetry_every_n_steps: int | None = None) -> None:
        stages = [stages] if isinstance(stages, GrowthStage) else list(stages)
        if not stages:
            raise ValueError("WidthGrowthCallback(stages=[]): give at least one GrowthStage")
        for s in stages:
            if not isinstance(s, GrowthStage):
                raise ValueError(f"WidthGrowthCallback(stages=...): expected GrowthStage objects, got {type(s).__name__}")
        steps = [s.at_step for s in stages]
        if any(b <= a for a, b in zip(steps, steps[1:])):
            raise ValueError(
                f"WidthGrowthCallback: stages must be in strictly increasing at_step order, got at_step={steps}"
            )
        check_stage_sequence(stages)  # rewarmup_scope='all' / decay_speedup: last stage only
        if min_lr is not None and (not isinstance(min_lr, (int, float)) or min_lr < 0 or not math.isfinite(min_lr)):
            raise ValueError(f"WidthGrowthCallback(min_lr={min_lr!r}): must be a finite number >= 0")
        self.stages: tuple[GrowthStage, ...] = tuple(stages)
        if symmetry_every_n_steps is not None and (not isinstance(symmetry_every_n_steps, int)
                                                   or symmetry_every_n_steps < 0):
            raise ValueError(f"WidthGrowthCallback(symmetry_every_n_steps={symmetry_every_n_steps!r}): must be an "
                             "integer >= 0 (0: off) or None (follow Trainer(log_every_n_steps))")
        self.min_lr = min_lr
        self.seed = int(seed)
        self.symmetry_every_n_steps = symmetry_every_n_steps
        self._grown = 0
        self._records: list[dict[str, Any]] = []  # one per applied stage (checkpointed)
        self._regions: list[dict[str, list[tuple[slice, ...]]]] = []  # new-entry slices per applied stage
        self._copies: list[dict[str, CopySpec]] = []  # copied channels per applied stage (symmetry diagnostics)
        self._schedulers: dict[int, RewarmupLR] = {}  # stage index -> its new-entry LR scheduler
        self._lr_hooks: list[NewEntryLR] = []
        self._backend: GrowthBackend | None = None  # chosen in setup from the trainer's strategy
        self._remove_resume_hook_fn: Callable[[], None] | None = None
        self._min_lrs: list[float] | None = None
        self.summaries: list[dict[str, Any]] = []
        self.last_symmetry: dict[str, float] = {}
        self._lr_logged_step = -1
        self._controlled_step = -1

    # ------------------------------------------------------------------ state
    @property
    def grown_stages(self) -> int:
        """How many stages have been applied."""
        return self._grown

    def state_dict(self) -> dict[str, Any]:
        return {"grown": self._grown, "seed": self.seed, "stages": [s.to_dict() for s in self.stages],
                "records": copy.deepcopy(self._records)}  # records change after growth (symmetry boost)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        applied = [GrowthStage(**s) for s in state_dict["stages"][: state_dict["grown"]]]
        if list(self.stages[: len(applied)]) != applied:
            raise GrowthError(
                "the checkpoint was grown by different stages than this WidthGrowthCallback has: "
                f"checkpoint applied {applied}, callback has {list(self.stages[: len(applied)])}"
            )
        self._grown = int(state_dict["grown"])
        self._records = list(state_dict["records"])

    @property
    def backend(self) -> GrowthBackend:
        """The growth backend of the trainer's strategy (chosen in ``setup``)."""
        if self._backend is None:
            raise RuntimeError("WidthGrowthCallback: no growth backend yet (it is chosen in setup, at fit start)")
        return self._backend

    # ------------------------------------------------------------------ setup / validation
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        self._backend = select_backend(trainer.strategy)  # refuses unsupported strategies, naming them
        gpt = find_gpt(pl_module)
        max_steps = trainer.max_steps
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
        if max_steps is not None and max_steps >= 0:
            try:
                check_rewarmup_fits(self.stages[self._grown:], max_steps)
            except ValueError as err:
                # A warning, not a refusal: the documented schedule (rewarmup_lr clamps the warm-up to the steps
                # left) is well defined, and Python users may shorten a run on purpose. The CLI refuses it.
                rank_zero_warn(f"WidthGrowthCallback: {err}", category=UserWarning)
        config = gpt.config
        tied = gpt.lm_head.weight is gpt.transformer.wte.weight
        for k in range(self._grown, len(self.stages)):
            config = plan_growth(config, self.stages[k], seed=self.seed, stage_index=k, tied_embeddings=tied).new_config
        self._install_resume_hook(trainer, pl_module)

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
        gpt = find_gpt(pl_module)
        tied = gpt.lm_head.weight is gpt.transformer.wte.weight
        config = gpt.config
        plans: list[GrowthPlan] = []
        for k in range(len(self._regions), grown):
            plan = plan_growth(config, self.stages[k], seed=int(state["seed"]), stage_index=k, tied_embeddings=tied)
            self._carry_forward(plan)
            self._regions.append({n: r for n, t in plan.tensors.items() if (r := t.new_region())})
            self._copies.append(copy_specs(plan))
            plans.append(plan)
            config = plan.new_config
        self.backend.regrow(trainer, pl_module, gpt, plans)
        if not self.backend.restores_after_fit_start:
            return  # load_state_dict and on_fit_start follow, as for any fit
        self._records = list(state["records"])
        self._grown = grown
        self._schedulers = {}
        for k, record in enumerate(self._records):
            if self.stages[k].rewarmup_ratio is not None:
                self._register_scheduler(trainer, k, record)
        self._install_lr_hooks(trainer, pl_module)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.backend.check_model(pl_module, find_gpt(pl_module))
        for optimizer in trainer.optimizers:
            check_optimizer_supported(optimizer)
        self._check_fresh_bias_correction(trainer)
        check_baseline_schedulers(trainer, self.stages)  # decay_speedup reads the module's schedule
        if any(s.rewarmup_ratio is not None for s in self.stages):
            self._min_lrs = self._resolve_min_lrs(trainer)
        for k, record in enumerate(self._records):  # resumed: same scheduler layout as when saved
            if self.stages[k].rewarmup_ratio is not None and k not in self._schedulers:
                self._register_scheduler(trainer, k, record)
        self._install_lr_hooks(trainer, pl_module)

    def _check_fresh_bias_correction(self, trainer: pl.Trainer) -> None:
        """``bias_correction='fresh'`` needs Adam's ``betas`` in every param group (read again at growth)."""
        fresh = [k for k, s in enumerate(self.stages) if s.bias_correction == "fresh"]
        if not fresh:
            return
        for o, g in _flat_groups(trainer.optimizers):
            betas = trainer.optimizers[o].param_groups[g].get("betas")
            if not (isinstance(betas, (tuple, list)) and len(betas) == 2):
                raise GrowthError(
                    f"GrowthStage(bias_correction='fresh') (stage {fresh[0]}): optimizer {o} "
                    f"({type(trainer.optimizers[o]).__name__}) param group {g} has no Adam 'betas', so there is no "
                    "bias correction to redo; use an Adam-type optimizer or bias_correction='shared'"
                )

    def _resolve_min_lrs(self, trainer: pl.Trainer) -> list[float]:
        """``min_lr`` per flat param group: the callback's, else read exactly from the module's schedule
        (``LambdaLR`` of :class:`WarmupCosineLambda` or :class:`WSDLambda`: ``min_lr_ratio * base_lr``;
        ``CosineAnnealingLR``: ``eta_min``). Also warns about a growth inside a WSD decay phase, and about a user's own
        ``LambdaLR`` that holds its LR after a growth (the new entries then get the cosine tail)."""
        groups = _flat_groups(trainer.optimizers)
        _warn_growth_in_wsd_decay(trainer, self.stages[self._grown:])
        _warn_untracked_stable_phase(trainer, self.stages[self._grown:])
        if self.min_lr is not None:
            return [float(self.min_lr)] * len(groups)
        found: dict[tuple[int, int], float] = {}
        for config in trainer.lr_scheduler_configs:
            sched = config.scheduler
            if not any(sched.optimizer is opt for opt in trainer.optimizers):
                continue
            o = next(i for i, opt in enumerate(trainer.optimizers) if sched.optimizer is opt)
            if isinstance(sched, torch.optim.lr_scheduler.LambdaLR) and all(
                isinstance(f, (WarmupCosineLambda, WSDLambda)) for f in sched.lr_lambdas
            ):
                for g, (f, base) in enumerate(zip(sched.lr_lambdas, sched.base_lrs)):
                    found[(o, g)] = base * f.min_lr_ratio
            elif isinstance(sched, torch.optim.lr_scheduler.CosineAnnealingLR):
                for g in range(len(sched.optimizer.param_groups)):
                    found[(o, g)] = float(sched.eta_min)
        missing = [og for og in groups if og not in found]
        if missing:
            kinds = sorted({type(c.scheduler).__name__ for c in trainer.lr_scheduler_configs}) or ["no scheduler"]
            raise GrowthError(
                "WidthGrowthCallback(min_lr=None): cannot read the minimum learning rate exactly from the module's "
                f"schedule ({', '.join(kinds)}) for optimizer/param group(s) {missing}; pass "
                "WidthGrowthCallback(..., min_lr=<LR the new entries decay to at max_steps>)"
            )
        return [found[og] for og in groups]

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
        grew = False
        while self._due(trainer):
            self._grow(trainer, pl_module, batch)
            grew = True
        self._control_symmetry(trainer, pl_module)
        self._log_lr_new(trainer, pl_module)
        every = trainer.log_every_n_steps if self.symmetry_every_n_steps is None else self.symmetry_every_n_steps
        if self._copies and every and (grew or trainer.global_step % every == 0):
            self._log_symmetry(trainer, pl_module)

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
        result = self.backend.grow(trainer, pl_module, gpt, stage, seed=self.seed, stage_index=k)
        gpt = find_gpt(pl_module)
        patches = []
        try:
            for optimizer in trainer.optimizers:
                patches.append(self.backend.plan_optimizer_patch(optimizer, result, stage.optimizer_state))
            for patch in patches:
                patch.apply()
            loss = self._check_loss(pl_module, gpt, batch)
            self.backend.rewrap(trainer, pl_module)
        except BaseException as err:
            for patch in reversed(patches):
                patch.undo()
            result.rollback()
            raise GrowthFailedError(
                f"growth stage {k} (GrowthStage(at_step={stage.at_step}, {stage.sizes})) failed at global step "
                f"{trainer.global_step}: {err}. The model and optimizer are the pre-growth ones."
            ) from err
        seconds = time.perf_counter() - start
        record = {
            "stage_index": k,
            "global_step": trainer.global_step,
            "lr_at_growth": [float(trainer.optimizers[o].param_groups[g]["lr"]) for o, g in _flat_groups(trainer.optimizers)],
            "min_lr": list(self._min_lrs) if self._min_lrs is not None else None,
            "total_steps": trainer.max_steps,
            "betas": [list(map(float, trainer.optimizers[o].param_groups[g]["betas"]))
                      for o, g in _flat_groups(trainer.optimizers)] if stage.bias_correction == "fresh" else None,
            "symmetry_boost": 1.0,  # the symmetry_target controller's LR multiplier (1: schedule only)
            "symmetry_done": stage.symmetry_target is None,
        }
        self._records.append(record)
        self._carry_forward(result.plan)
        self._regions.append(result.new_entries)
        self._copies.append(copy_specs(result.plan))
        self._grown += 1
        if stage.rewarmup_ratio is not None:
            self._register_scheduler(trainer, k, record)
        self._install_lr_hooks(trainer, pl_module)
        params_after = count_params(gpt.config, tie_embeddings=tied)
        if isinstance(getattr(pl_module, "flops_per_batch", None), (int, float)):
            pl_module.flops_per_batch = pl_module.flops_per_batch * params_after[0] / params_before[0]
        self._summarize(trainer, pl_module, result, k, params_before, params_after, seconds, loss, device)

    def _carry_forward(self, plan: GrowthPlan) -> None:
        """Earlier stages' new entries and copies under the names and indices of ``plan``'s grown model: a depth
        growth moves kept blocks (``interleave``, ``middle``), a heads growth moves old heads in the fused ``qkv``
        rows and ``attn.proj`` columns; a new block's entries belong to ``plan``'s stage alone."""
        if plan.depth is None and plan.heads is None:
            return
        carried = [[plan.carry_region(n, pieces) for n, pieces in regions.items()] for regions in self._regions]
        self._regions = [{n: pieces for n, pieces in regions if n is not None} for regions in carried]
        self._copies = [{axis: carried for axis, spec in specs.items() if (carried := spec.carried(plan)) is not None}
                        for specs in self._copies]

    @torch.no_grad()
    def _check_loss(self, pl_module: pl.LightningModule, gpt: torch.nn.Module, batch: Any) -> float:
        """Loss of the grown model on the current batch (next-token cross-entropy of its first token tensor, or
        ``pl_module.growth_check_loss(batch)`` when the module defines it); raises if it is not finite."""
        custom = getattr(pl_module, "growth_check_loss", None)
        if callable(custom):
            loss = custom(batch)
        else:
            ids = _token_batch(batch)
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

    # ------------------------------------------------------------------ new-entry learning rate
    def _register_scheduler(self, trainer: pl.Trainer, k: int, record: dict[str, Any]) -> None:
        stage = self.stages[k]
        min_lrs = record.get("min_lr") or self._min_lrs
        betas = record.get("betas") or [None] * len(record["lr_at_growth"])
        # at growth: which groups' baseline is a WSDLambda (their re-warmup then holds and decays with it); stored in
        # the record, so a resume rebuilds the same lambdas whatever the module's schedule is then
        record.setdefault("lr_decay", _wsd_decays(trainer))
        lambdas = [record_rewarmup_lambda(stage, record, flat, min_lr=min_lr, betas=b)
                   for flat, (min_lr, b) in enumerate(zip(min_lrs, betas))]
        scheduler = RewarmupLR(lambdas)
        self._schedulers[k] = scheduler
        trainer.strategy.lr_scheduler_configs.append(
            LRSchedulerConfig(scheduler, name=f"lr_new/stage_{k}", interval="step", frequency=1)
        )

    def _lr_fn(self, trainer: pl.Trainer, k: int, flat_group: int):
        scheduler = self._schedulers[k]
        growth_step = self._records[k]["global_step"]

        def lr() -> float:
            # Lightning steps step-interval schedulers after each optimizer step (automatic optimization); under
            # manual optimization nobody does, so catch up with the global step here.
            while scheduler.last_epoch < trainer.global_step - growth_step:
                scheduler.step()
            # the record is looked up at each step, not captured: a sharded resume installs these hooks before
            # Lightning restores the callback state, which replaces the records (and the symmetry loop's boost)
            return scheduler.lr_for(flat_group) * self._records[k].get("symmetry_boost", 1.0)

        return lr

    def _install_lr_hooks(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        for hook in self._lr_hooks:
            hook.remove()
        self._lr_hooks = []
        # rewarmup_scope='all' / decay_speedup: the group LR of each step, registered before the new-entry hooks
        # (they rescale against it); under 'all' every entry follows it, so no region is rescaled
        self._lr_hooks += install_baseline_lr(trainer, self.stages, self._records)
        if not self._schedulers or rewarmup_all_applied(self.stages, self._records):
            return
        gpt = find_gpt(pl_module)
        self.backend.reshard(pl_module, gpt)
        pieces_of = self.backend.new_entry_pieces(pl_module, gpt)
        name_of = {id(p): clean_name(n) for n, p in gpt.named_parameters()}
        flat = {og: j for j, og in enumerate(_flat_groups(trainer.optimizers))}

        for o, optimizer in enumerate(trainer.optimizers):
            regions: dict[int, list[NewEntryRegion]] = {}
            for g, group in enumerate(optimizer.param_groups):
                for p in group["params"]:
                    name = name_of.get(id(p))
                    for k in self._schedulers:
                        pieces = self._regions[k].get(name) if name is not None else None
                        local = pieces_of(p, pieces) if pieces else []
                        if local:
                            regions.setdefault(g, []).append(
                                NewEntryRegion(p, local, self._lr_fn(trainer, k, flat[(o, g)])))
            if regions:
                self._lr_hooks.append(NewEntryLR(optimizer, regions))

    def _log_lr_new(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self._schedulers or trainer.logger is None or self._lr_logged_step == trainer.global_step:
            return  # once per optimizer step, not per micro-batch
        self._lr_logged_step = trainer.global_step
        metrics = {}
        for k, scheduler in self._schedulers.items():
            growth_step = self._records[k]["global_step"]
            step = trainer.global_step  # the LR of the next optimizer step
            lam = scheduler.lr_lambdas[0]
            boost = self._records[k].get("symmetry_boost", 1.0)
            metrics[f"growth/lr_new/stage_{k}"] = lam(step - growth_step) * boost
            if self.stages[k].symmetry_target is not None:
                metrics[f"growth/symmetry_boost/stage_{k}"] = boost
        trainer.logger.log_metrics(metrics, step=trainer.global_step)

    def _control_symmetry(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """``GrowthStage(symmetry_target=...)``: every ``symmetry_interval`` optimizer steps after a growth, double
        the stage's new-entry LR boost (up to ``symmetry_max_boost``) while its copies' mean cosine to their sources
        (the largest over its axes) is above the target; below it, stop checking, and keep the boost
        (``symmetry_release='hold'``) or drop it to 1 (``'schedule'``).

        Once per optimizer step (not per micro-batch), after it. The decision is stored in the stage's record, which
        checkpoints carry, and depends only on the weights, so a resumed run decides the same on every rank."""
        step = trainer.global_step
        if step == self._controlled_step:
            return
        self._controlled_step = step
        due = [k for k, record in enumerate(self._records)
               if not record.get("symmetry_done", True) and step > record["global_step"]
               and (step - record["global_step"]) % self.stages[k].symmetry_interval == 0]
        if not due:
            return
        metrics = self._symmetry_metrics(pl_module, due)
        for k in due:
            stage, record = self.stages[k], self._records[k]
            cosines = [v for key, v in metrics.items() if key.startswith(f"symmetry/stage_{k}/")]
            worst = max(cosines) if cosines else 0.0
            if worst < stage.symmetry_target:
                record["symmetry_done"] = True
                if stage.symmetry_release == "schedule":
                    record["symmetry_boost"] = 1.0
                then = ("follow the re-warmup schedule again" if stage.symmetry_release == "schedule" else
                        f"keep their {record['symmetry_boost']:g}x boost (symmetry_release='hold')")
                rank_zero_info(f"WidthGrowthCallback: stage {k}'s copies reached mean cosine {worst:.3f} < "
                               f"symmetry_target={stage.symmetry_target} at step {step}; the new entries {then}")
            else:
                record["symmetry_boost"] = min(2.0 * record["symmetry_boost"], float(stage.symmetry_max_boost))

    def _symmetry_metrics(self, pl_module: pl.LightningModule, stages: Sequence[int] | None = None
                          ) -> dict[str, float]:
        """``{"symmetry/stage_{k}/{axis}": mean cosine}`` for the applied stages ``stages`` (default all).
        Runs on every rank (the backend gathers sharded tensors)."""
        gpt = find_gpt(pl_module)
        metrics = {}
        for k, specs in enumerate(self._copies):
            if stages is not None and k not in stages:
                continue
            names = sorted({name for spec in specs.values() for name, _ in spec.tensors})
            names += [name for spec in specs.values() for pair in spec.pairs for name in pair]  # depth: in pairs
            tensors = self.backend.full_tensors(pl_module, gpt, names)  # a collective when sharded
            metrics.update(symmetry_metrics(specs, tensors, f"symmetry/stage_{k}"))
        return metrics

    def _log_symmetry(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """``symmetry/stage_{k}/{axis}``: mean cosine of copied channels to their sources (1 = still locked).
        Runs on every rank (gathers under FSDP2); rank zero's logger writes it."""
        metrics = self._symmetry_metrics(pl_module)
        self.last_symmetry = metrics
        if trainer.logger is not None and metrics:
            trainer.logger.log_metrics(metrics, step=trainer.global_step)

    # ------------------------------------------------------------------ reporting
    def _summarize(self, trainer: pl.Trainer, pl_module: pl.LightningModule, result: GrowthResult, k: int,
                   params_before: tuple[int, int], params_after: tuple[int, int], seconds: float, loss: float,
                   device: torch.device) -> None:
        old, new = result.old_config, result.new_config
        widths = {axis: (getattr(old, axis), getattr(new, axis)) for axis in SIZE_AXES
                  if getattr(old, axis, None) != getattr(new, axis, None)}
        if device.type == "cuda":
            peak_mb = torch.cuda.max_memory_allocated(device) / 2**20
            peak_what = "peak CUDA memory during growth"
        else:
            peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            peak_what = "peak process RSS so far"
        summary = {
            "stage": k, "global_step": trainer.global_step, "widths": widths, "alpha": result.plan.alphas(),
            "params_before": params_before[1], "params_after": params_after[1],
            "active_params_before": params_before[0], "active_params_after": params_after[0],
            "flops_per_token_before": 6 * params_before[0], "flops_per_token_after": 6 * params_after[0],
            "seconds": seconds, "peak_memory_mb": peak_mb, "loss_after": loss,
        }
        self.summaries.append(summary)
        lines = [f"WidthGrowthCallback: stage {k} grew the model at global step {trainer.global_step} in {seconds:.2f}s"]
        for axis, (a, b) in widths.items():
            if axis == "n_layer":
                detail = f"{result.plan.depth.order}, {result.plan.depth.init}: {describe_depth(result.plan.depth)}"
            elif axis in ("n_head", "n_query_groups"):
                detail = f"alpha={result.plan.axes['attn_q'].alpha:.4f}: {describe_heads(result.plan.heads)}"
            elif axis in result.plan.axes:
                detail = f"alpha={result.plan.axes[axis].alpha:.4f}"
            else:
                continue  # a size a plug-in axis sets: described on its own line below
            lines.append(f"  {axis:<22} {a:>8} -> {b:<8} {detail}")
        lines += [f"  {name:<22} {line}" for name, line in describe_changes(result.plan).items()]
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
