"""The new entries' LR is logged once (issue 40): ``growth/lr_new/stage_k`` by the growth callback, the tag the
dashboards read; the CLI's LR monitor logs the old entries' ``lr-*`` and leaves the callback's schedulers out."""

from __future__ import annotations

import sys
from pathlib import Path

from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lightning_sparkling import GrowthCallback, GrowthStage
from lightning_sparkling.pretrain.training.lightning_private import OldEntryLRMonitor

sys.path.insert(0, str(Path(__file__).parents[1]))
from _tiny import TinyModule, make_trainer


def test_the_new_entries_lr_is_one_tag(tmp_path):
    logger = TensorBoardLogger(tmp_path, name="run", version=0)
    growth = GrowthCallback(GrowthStage(4, intermediate_size=128, rewarmup_steps=2), min_lr=1e-4)
    make_trainer([growth, OldEntryLRMonitor(logging_interval="step")], max_steps=8, logger=logger,
                 log_every_n_steps=1).fit(TinyModule(max_steps=8))
    events = EventAccumulator(str(tmp_path / "run" / "version_0"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    assert "growth/lr_new/stage_0" in tags and "lr-AdamW" in tags
    assert not [t for t in tags if t.startswith("lr_new/")], tags
    new = [e.value for e in events.Scalars("growth/lr_new/stage_0")]
    assert len(new) == len({e.step for e in events.Scalars("growth/lr_new/stage_0")}) >= 3  # once per step
