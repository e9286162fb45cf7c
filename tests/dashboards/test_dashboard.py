"""The dashboard of a real growth: WidthGrowthCallback + ActivationRMSMonitor + TensorBoardLogger, read back with
tensorboard's own event reader."""

from __future__ import annotations

import math
import re

import pytest
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.util import tensor_util

from lightning_sparkling import ActivationRMSMonitor, GrowthStage, WidthGrowthCallback
from lightning_sparkling.dashboards.tb_layout import LAYOUT_TAG

from _tiny import TinyModule, make_trainer, paper_stage

GROW_AT, MAX_STEPS = 10, 30


def _run(tmp_path, stage: GrowthStage,
         monitor: bool = True) -> tuple[dict[str, list[tuple[int, float]]], EventAccumulator]:
    module = TinyModule(max_steps=MAX_STEPS)
    callbacks = [WidthGrowthCallback(stage), LearningRateMonitor("step")]
    if monitor:
        callbacks.append(ActivationRMSMonitor(every_n_steps=2))
    logger = TensorBoardLogger(tmp_path, name="run", version=0)
    make_trainer(callbacks, max_steps=MAX_STEPS, logger=logger, log_every_n_steps=2).fit(module)
    events = EventAccumulator(str(tmp_path / "run" / "version_0"), size_guidance={"scalars": 0})
    events.Reload()
    scalars = {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    return scalars, events


def test_every_tag_on_both_sides_of_growth(tmp_path):
    scalars, events = _run(tmp_path, paper_stage(GROW_AT, n_embd=64, intermediate_size=128, rewarmup_steps=5))
    for i in range(2):
        for quantity in ("residual", "attn_ratio", "mlp_ratio"):
            steps = [s for s, v in scalars[f"rms/{quantity}/block_{i:02d}"] if math.isfinite(v)]
            assert any(s < GROW_AT for s in steps) and any(s > GROW_AT for s in steps), (quantity, i, steps)
    assert [s for s, _ in scalars["growth/event"]] == [GROW_AT]
    lr_new = dict(scalars["growth/lr_new/stage_0"])
    assert set(range(GROW_AT, MAX_STEPS)) <= set(lr_new)  # every step after growth
    assert lr_new[GROW_AT + 5] == pytest.approx(1.3 * lr_new[GROW_AT], rel=1e-6)  # re-warmup peak
    assert "lr_new/stage_0/pg1" in scalars or "lr_new/stage_0" in scalars  # LearningRateMonitor sees it too
    for key in ("growth/flops_per_token", "growth/params", "growth/seconds"):
        assert key in scalars
    for axis in ("n_embd", "intermediate_size"):
        series = scalars[f"symmetry/stage_0/{axis}"]
        assert series[0] == (GROW_AT, pytest.approx(1.0, abs=1e-6))  # copies are exact at growth
    # the custom-scalars layout overlays all blocks and marks growth; its regexes match the tags of this run
    raw = tensor_util.make_ndarray(events.Tensors(LAYOUT_TAG)[0].tensor_proto).item()
    charts = [t for cat in layout_pb2.Layout.FromString(raw).category for c in cat.chart for t in c.multiline.tag]
    for tag in ("rms/residual/block_01", "growth/event", "growth/lr_new/stage_0", "symmetry/stage_0/n_embd"):
        assert any(re.match(regex, tag) for regex in charts), tag


def _symmetry(tmp_path, stage):
    scalars, _ = _run(tmp_path, stage, monitor=False)
    return [v for _, v in scalars["symmetry/stage_0/intermediate_size"]]


def test_symmetry_series_stays_at_one_when_locked_and_falls_under_sparkling(tmp_path):
    locked = _symmetry(tmp_path / "locked", paper_stage(GROW_AT, intermediate_size=128, optimizer_state="copy",
                                                        rewarmup_ratio=None))
    sparkling = _symmetry(tmp_path / "sparkling", paper_stage(GROW_AT, intermediate_size=128, rewarmup_steps=5))
    assert len(locked) >= 5 and len(sparkling) >= 5
    assert min(locked) > 1 - 1e-5
    assert sparkling[0] == pytest.approx(1.0, abs=1e-6)
    assert sparkling[-1] < 0.999 and sparkling[-1] < min(locked) - 1e-3


def test_symmetry_logging_interval_and_off(tmp_path):
    for every, expected in ((0, set()), (4, {GROW_AT, 12, 16, 20, 24, 28})):
        module = TinyModule(max_steps=MAX_STEPS)
        logger = TensorBoardLogger(tmp_path, name=f"every{every}", version=0)
        growth = WidthGrowthCallback(paper_stage(GROW_AT, intermediate_size=128, rewarmup_steps=5),
                                     symmetry_every_n_steps=every)
        make_trainer([growth], max_steps=MAX_STEPS, logger=logger, log_every_n_steps=1).fit(module)
        events = EventAccumulator(str(tmp_path / f"every{every}" / "version_0"), size_guidance={"scalars": 0})
        events.Reload()
        tags = events.Tags()["scalars"]
        steps = {e.step for e in events.Scalars("symmetry/stage_0/intermediate_size")} if expected else set()
        assert ("symmetry/stage_0/intermediate_size" in tags) == bool(expected)
        assert steps == expected
