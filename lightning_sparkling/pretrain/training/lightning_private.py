"""The one module that relies on private names of Lightning: the callbacks of a ``sparkling pretrain`` run that
override or call a name Lightning does not document (:data:`PRIVATE_NAMES`).

Tested with Lightning ``>=2.5`` (the package's requirement), last with 2.6.6 (:data:`TESTED_LIGHTNING`);
``tests/pretrain/test_lightning_private.py`` fails when a name listed here leaves Lightning. The rest of
the package uses Lightning's public hooks only.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import LearningRateMonitor, RichProgressBar
from typing_extensions import override

from lightning_sparkling.pretrain.formatting import _fmt_int

__all__ = ["LIGHTNING_RANGE", "PRIVATE_NAMES", "TESTED_LIGHTNING", "OldEntryLRMonitor", "StepProgressBar"]

LIGHTNING_RANGE = ">=2.5"
"""The Lightning versions the private names of :data:`PRIVATE_NAMES` are relied on for (``pyproject.toml``)."""
TESTED_LIGHTNING = "2.6.6"
"""The newest Lightning the private names were checked against."""

PRIVATE_NAMES: dict[type, tuple[str, ...]] = {
    # no public hook sees the stats before they are logged: dropping the growth's schedulers' tags needs this one
    LearningRateMonitor: ("_extract_stats",),
    # the bar's description, its task and its metrics line have no public setters: counting optimizer steps needs them
    RichProgressBar: ("_get_train_description", "_initialize_train_progress_bar_id", "_update", "_update_metrics"),
}
"""Each Lightning class this module subclasses, with the private names it overrides or calls on it."""


class OldEntryLRMonitor(LearningRateMonitor):
    """Lightning's ``LearningRateMonitor`` (``lr-*`` tags) without the growth callback's new-entry schedulers: their
    LR is logged once, by the callback, as ``growth/lr_new/stage_k`` (the tag the dashboards read), not a second
    time as ``lr_new/stage_k``."""

    @override
    def _extract_stats(self, trainer: pl.Trainer, interval: str) -> dict[str, float]:
        from lightning_sparkling.callbacks.rewarmup import SCHEDULER_PREFIX

        stats = super()._extract_stats(trainer, interval)
        return {name: value for name, value in stats.items() if not name.startswith(SCHEDULER_PREFIX)}


class StepProgressBar(RichProgressBar):
    """Lightning's rich bar, counting optimizer steps against ``max_steps`` (with the tokens seen and the loss)
    instead of the micro-batches of one data epoch (``Epoch 0/-2``, and ``300/149`` after a resume): one bar
    for the whole run, at ``trainer.global_step`` from the first batch on, resumed runs included."""

    def __init__(self, tokens_per_step: int) -> None:
        super().__init__()
        self.tokens_per_step = int(tokens_per_step)

    @property
    @override
    def total_train_batches(self) -> int | float:
        steps = self.trainer.max_steps
        return steps if steps is not None and steps > 0 else float("inf")

    @override
    def _get_train_description(self, current_epoch: int) -> str:
        return f"{'step':{len(self.validation_description)}}"

    @override
    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if self.train_progress_bar_id is None:  # later data epochs continue the same bar
            super().on_train_epoch_start(trainer, pl_module)
            self._update(self.train_progress_bar_id, trainer.global_step)

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if not self.is_disabled and self.train_progress_bar_id is None:
            self._initialize_train_progress_bar_id()
        self._update(self.train_progress_bar_id, trainer.global_step)
        self._update_metrics(trainer, pl_module)
        self.refresh()

    @override
    def get_metrics(self, trainer, pl_module) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        if self._stale_val:  # see on_train_end
            for key in [k for k in items if k.startswith("val_")]:
                items.pop(key)
        items["tokens"] = _fmt_int(trainer.global_step * self.tokens_per_step)
        return items

    _validated_step: int | None = None  # the optimizer step of the fit's last validation
    _stale_val: bool = False

    @override
    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.state.fn == "fit":
            self._validated_step = trainer.global_step
        super().on_validation_end(trainer, pl_module)

    @override
    def on_train_end(self, trainer, pl_module) -> None:
        """The bar's last line (it stays on screen): the metrics of the last step, and a val loss only when it is of
        that step. An older one goes: the run validates once more after the fit (the summary's val loss), and the
        bar, printed by then, would keep showing the older value as the run's last."""
        self._stale_val = self._validated_step is not None and self._validated_step != trainer.global_step
        self._update_metrics(trainer, pl_module)
        self.refresh()
