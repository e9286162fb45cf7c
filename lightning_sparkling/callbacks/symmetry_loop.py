"""The symmetry diagnostics and loop of a growth callback: how close copied channels still are to their sources
(``symmetry/stage_k/{channel}``, mean cosine per channel dimension, or per depth / experts copy under the axis'
``symmetry_key``; 1 = still locked), and ``GrowthStage(symmetry_target=...)``'s closed loop
that boosts the new entries' LR while they stay locked.

The cosines are read through the strategy's growth backend (it gathers sharded tensors, so every rank calls in).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import lightning.pytorch as pl
import torch
from lightning.pytorch.utilities import rank_zero_info

from lightning_sparkling.growth.plan import GrowthPlan
from lightning_sparkling.growth.record import StageRecord
from lightning_sparkling.growth.stage import GrowthStage
from lightning_sparkling.growth.symmetry import CopySpec, symmetry_metrics


class SymmetryLoop:
    """Copied channels of every applied stage, their cosines, and the loop on ``symmetry_target``.

    Args:
        stages: the callback's stages.
        records: returns the callback's current stage records (the loop's boost lives there, so checkpoints carry it).
    """

    def __init__(self, stages: Sequence[GrowthStage], records: Callable[[], list[StageRecord]]) -> None:
        self.stages = stages
        self.records = records
        self.copies: list[dict[str, CopySpec]] = []  # copied channels per applied stage
        self.last: dict[str, float] = {}
        self._controlled_step = -1

    def carry_forward(self, plan: GrowthPlan) -> None:
        """Earlier stages' copies under the names and indices of ``plan``'s grown model (depth and heads growths
        move them)."""
        self.copies = [{key: carried for key, spec in specs.items() if (carried := spec.carried(plan)) is not None}
                       for specs in self.copies]

    def metrics(self, pl_module: pl.LightningModule, gpt: torch.nn.Module, backend,
                stages: Sequence[int] | None = None) -> dict[str, float]:
        """``{"symmetry/stage_{k}/{channel}": mean cosine}`` for the applied stages ``stages`` (default all).
        Runs on every rank (the backend gathers sharded tensors)."""
        metrics = {}
        for k, specs in enumerate(self.copies):
            if stages is not None and k not in stages:
                continue
            names = sorted({name for spec in specs.values() for name, _ in spec.tensors})
            names += [name for spec in specs.values() for pair in spec.pairs for name in pair]  # depth: in pairs
            tensors = backend.full_tensors(pl_module, gpt, names)  # a collective when sharded
            metrics.update(symmetry_metrics(specs, tensors, f"symmetry/stage_{k}"))
        return metrics

    def log(self, trainer: pl.Trainer, pl_module: pl.LightningModule, gpt: torch.nn.Module, backend) -> None:
        """``symmetry/stage_{k}/{channel}``: mean cosine of copied channels to their sources (1 = still locked).
        Runs on every rank (gathers under FSDP2); rank zero's logger writes it."""
        metrics = self.metrics(pl_module, gpt, backend)
        self.last = metrics
        if trainer.logger is not None and metrics:
            trainer.logger.log_metrics(metrics, step=trainer.global_step)

    def control(self, trainer: pl.Trainer, pl_module: pl.LightningModule, gpt: Callable[[], torch.nn.Module],
                backend) -> None:
        """``GrowthStage(symmetry_target=...)``: every ``symmetry_interval`` optimizer steps after a growth, double
        the stage's new-entry LR boost (up to ``symmetry_max_boost``) while its copies' mean cosine to their sources
        (the largest over its channel dimensions and copied modules) is above the target; below it, stop checking, and
        keep the boost (``symmetry_release='hold'``) or drop it to 1 (``'schedule'``).

        Once per optimizer step (not per micro-batch), after it. The decision is stored in the stage's record, which
        checkpoints carry, and depends only on the weights, so a resumed run decides the same on every rank."""
        step = trainer.global_step
        if step == self._controlled_step:
            return
        self._controlled_step = step
        records = self.records()
        due = [k for k, record in enumerate(records)
               if not record.symmetry_done and step > record.global_step
               and (step - record.global_step) % self.stages[k].symmetry_interval == 0]
        if not due:
            return
        metrics = self.metrics(pl_module, gpt(), backend, due)
        for k in due:
            stage, record = self.stages[k], records[k]
            cosines = [v for key, v in metrics.items() if key.startswith(f"symmetry/stage_{k}/")]
            worst = max(cosines) if cosines else 0.0
            assert stage.symmetry_target is not None  # a stage without one is symmetry_done at its growth
            if worst < stage.symmetry_target:
                record.symmetry_done = True
                if stage.symmetry_release == "schedule":
                    record.symmetry_boost = 1.0
                then = ("follow the re-warmup schedule again" if stage.symmetry_release == "schedule" else
                        f"keep their {record.symmetry_boost:g}x boost (symmetry_release='hold')")
                rank_zero_info(f"GrowthCallback: stage {k}'s copies reached mean cosine {worst:.3f} < "
                               f"symmetry_target={stage.symmetry_target} at step {step}; the new entries {then}")
            else:
                record.symmetry_boost = min(2.0 * record.symmetry_boost, float(stage.symmetry_max_boost))
