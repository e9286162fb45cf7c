"""The plan of a run, computed once per command: :func:`plan_run` turns a resolved run into a
:class:`RunPlan`: each stage's ``GrowthPlan`` (the dry runs :func:`~lightning_sparkling.pretrain.config.resolve.resolve`
made, :func:`stage_plans`), the sizes each stage changes, the compute of the run's phases (their configs, active and
total parameters and steps; ``6 N_active D`` FLOPs against the final shape from scratch) and what the measured map
says about the run (:class:`~lightning_sparkling.pretrain.advice.measured.Advice`).

Every command reads that one object, and nothing downstream plans a stage, counts a phase's parameters or estimates
the run's compute again: ``sparkling plan``'s report (:func:`~lightning_sparkling.pretrain.advice.planning.plan`);
``sparkling pretrain``'s announcement, its ``GrowthCallback`` (the plans, kept by its dry run where they fit the model)
and its summary (the compute of the stages applied: :meth:`RunPlan.compute_until`)
(:func:`~lightning_sparkling.pretrain.training.run.pretrain`); ``sparkling measure``'s budgets and cell
(:mod:`~lightning_sparkling.pretrain.measure.command`); and ``--suggest``'s target and pasted runs
(:mod:`~lightning_sparkling.pretrain.advice.suggest`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from lightning_sparkling.pretrain.config.resolve import ResolvedRun

if TYPE_CHECKING:
    from lightning_sparkling.growth.compute import ComputeEstimate
    from lightning_sparkling.growth.plan import GrowthPlan
    from lightning_sparkling.pretrain.advice.measured import Advice

__all__ = ["RunPlan", "plan_run", "stage_plans"]


@dataclass(frozen=True)
class RunPlan:
    """What a run's growth and compute come to, derived once from a ``ResolvedRun`` (:func:`plan_run`).

    Attributes:
        run: the resolved run.
        plans: each stage's ``GrowthPlan`` (shapes only), in stage order.
        sizes: each stage's size changes, ``{size key: (old, new)}``: every size it sets, a named target's too
            (:func:`~lightning_sparkling.growth.plan.size_changes`).
        compute: the run's :class:`~lightning_sparkling.growth.compute.ComputeEstimate`: each phase's config, active
            and total parameters and steps (before growth, after each stage), and the FLOPs against the final shape
            trained from scratch.
        advice: what the measured map says about the run
            (:class:`~lightning_sparkling.pretrain.advice.measured.Advice`); ``None`` without growth stages, or when
            not asked for (``plan_run(run, advise=False)``).

    Example::

        run_plan = plan_run(run)              # once per command
        run_plan.compute.flops_saved          # the FLOPs the growth saves
        run_plan.final_config.n_embd          # the model the run ends at
        run_plan.warning                      # the advice, when growth was not measured to pay here
    """

    run: ResolvedRun
    plans: tuple[GrowthPlan, ...]
    sizes: tuple[dict[str, tuple[int, int]], ...]
    compute: ComputeEstimate
    advice: Advice | None = None

    @property
    def configs(self) -> tuple[Any, ...]:
        """The litgpt ``Config`` of each phase: the starting model, then the model after each stage."""
        return self.compute.configs

    @property
    def final_config(self) -> Any:
        """The litgpt ``Config`` the run ends at (its starting model when it grows nothing)."""
        return self.compute.configs[-1]

    @property
    def tokens_per_param(self) -> float:
        """The run's training tokens per active parameter of the model it ends at."""
        return self.run.total_tokens / self.compute.active_params[-1]

    @property
    def warning(self) -> str | None:
        """The advice as a warning when the run is not where growth was measured to pay (nothing measured near it, or
        the nearest comparison did not pay), else ``None``."""
        return self.advice.message() if self.advice is not None and not self.advice.pays else None

    def compute_until(self, steps: int, applied: int) -> ComputeEstimate:
        """The compute of the run as far as it went: its first ``applied`` stages over ``steps`` optimizer steps (at
        least the last applied stage's step, and 1), from this plan's phases (their parameters are not counted again).
        A run that completed (``steps`` the run's, every stage applied) gets the numbers of :attr:`compute`.

        Args:
            steps: the optimizer steps trained.
            applied: the stages applied (more than the run has: all of them).
        """
        from lightning_sparkling.growth.compute import phase_compute

        applied = min(applied, len(self.plans))
        at_steps = [cast(int, stage.at_step) for stage in self.run.stages[:applied]]  # resolved
        counts = list(zip(self.compute.active_params, self.compute.total_params))[: applied + 1]
        return phase_compute(self.configs[: applied + 1], at_steps, total_steps=max(steps, *at_steps, 1),
                             tokens_per_step=self.run.tokens_per_step, counts=counts)


def plan_run(run: ResolvedRun, *, cells: Sequence[Any] | None = None, advise: bool = True) -> RunPlan:
    """The :class:`RunPlan` of ``run``: its stages' plans (:func:`stage_plans`: those ``resolve`` made), each stage's
    size changes, the compute of its phases (:func:`~lightning_sparkling.growth.compute.phase_compute`: each phase's
    config counted once) and, with ``advise``, the measured map's advice.

    Args:
        run: the resolved run.
        cells: the measured map the advice reads (default: the package's,
            :func:`~lightning_sparkling.pretrain.advice.measured.load_map`; ``--map FILE`` adds a ``measure.json``'s).
        advise: look the run up in the map (``False``: :attr:`RunPlan.advice` is ``None``, no map is read).

    Example::

        from lightning_sparkling.pretrain.cli import parse

        _, run, _ = parse(["--config", "examples/depth_2x.yaml"], "plan")
        run_plan = plan_run(run)
        run_plan.compute.phase_steps, run_plan.sizes[0], run_plan.advice.message()
    """
    from lightning_sparkling.growth.compute import phase_compute
    from lightning_sparkling.growth.plan import size_changes

    plans = tuple(stage_plans(run))
    configs = [run.model_config, *(gp.new_config for gp in plans)]
    sizes = tuple(size_changes(a, b) for a, b in zip(configs[:-1], configs[1:]))
    compute = phase_compute(configs, [cast(int, stage.at_step) for stage in run.stages], total_steps=run.steps,
                            tokens_per_step=run.tokens_per_step, tie_embeddings=bool(run.train.tie_embeddings))
    advice = _advice(run, sizes, compute, cells) if advise else None
    return RunPlan(run=run, plans=plans, sizes=sizes, compute=compute, advice=advice)


def stage_plans(run: ResolvedRun) -> list[GrowthPlan]:
    """The ``GrowthPlan`` of each stage of ``run``: those :func:`~lightning_sparkling.pretrain.config.resolve.resolve`
    made when it checked the stages (planned once), or planned here for a run built otherwise."""
    if len(run.plans) == len(run.stages):
        return list(run.plans)
    from lightning_sparkling.growth.plan import plan_growth

    plans, config = [], run.model_config
    for k, stage in enumerate(run.stages):
        plans.append(plan_growth(config, stage, seed=run.growth.seed, stage_index=k,
                                 tied_embeddings=bool(run.train.tie_embeddings)))
        config = plans[-1].new_config
    return plans


def _advice(run: ResolvedRun, sizes: Sequence[dict[str, tuple[int, int]]], compute: ComputeEstimate,
            cells: Sequence[Any] | None) -> Advice | None:
    """What the project's measured map (:mod:`~lightning_sparkling.pretrain.advice.measured`) says about ``run``: the
    comparison nearest to its map category, recipe, schedule, timing, token ratio and model size, or that none is near;
    ``None`` without growth stages. The run's recipe is named once, by
    :func:`~lightning_sparkling.pretrain.advice.recipe_words.recipe_name`: cells are matched on its ``key`` (what
    ``sparkling measure`` writes for this run), the advice prints its ``label`` and ``note``."""
    if not run.stages:
        return None
    from lightning_sparkling.pretrain.advice.measured import advise
    from lightning_sparkling.pretrain.advice.measured_axes import block_family
    from lightning_sparkling.pretrain.advice.recipe_words import recipe_name

    return advise(run.stages, total_steps=run.steps, tokens_per_param=run.total_tokens / compute.active_params[-1],
                  recipe=recipe_name(run.stages), schedule=run.train.lr_schedule,
                  sizes=[list(stage_sizes) for stage_sizes in sizes], cells=cells, params=compute.total_params[-1],
                  arch=block_family(compute.configs[-1]), ceiling=compute.ceiling)
