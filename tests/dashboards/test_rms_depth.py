"""ActivationRMSMonitor, the custom-scalars layout and `sparkling plot` through a depth growth (2 -> 4 blocks,
interleave): new blocks' tags start at the growth, tags follow positions, the layout is rewritten, the plot shows
the new rows from the growth on."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from lightning.pytorch.loggers import TensorBoardLogger
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.util import tensor_util

from lightning_sparkling import ActivationRMSMonitor, GrowthStage, WidthGrowthCallback
from lightning_sparkling.dashboards.plotting import (
    DEPTH_GID,
    GROWTH_GID,
    HEATMAP_GID,
    dashboard_figure,
    load_run,
    plot_runs,
)
from lightning_sparkling.dashboards.tb_layout import LAYOUT_TAG

from _tiny import TinyModule, make_trainer, paper_stage

GROW_AT, MAX_STEPS, RESUME_STEPS = 5, 9, 11
QUANTITIES = ("residual", "attn_ratio", "mlp_ratio")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _stage() -> GrowthStage:
    return paper_stage(GROW_AT, n_layer=4, depth_order="interleave", depth_init="copy-zero", rewarmup_steps=1)


def _events(log_dir) -> EventAccumulator:
    ea = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    return ea


def _layouts(ea: EventAccumulator) -> list[tuple[int, layout_pb2.Layout]]:
    return [(e.step, layout_pb2.Layout.FromString(tensor_util.make_ndarray(e.tensor_proto).item()))
            for e in ea.Tensors(LAYOUT_TAG)]


def _gain_blocks(layout: layout_pb2.Layout) -> list[str]:
    """The blocks of the per-block linear RMS gain charts (``rms/gain/block_NN/.*``)."""
    regexes = [t for cat in layout.category for c in cat.chart for t in c.multiline.tag]
    return sorted(m.group(1) for r in regexes if (m := re.fullmatch(r"rms/gain/block_(\d+)/\.\*", r)))


@pytest.fixture(scope="module", params=["monitor_first", "growth_first"])
def grown_run(request, tmp_path_factory):
    root = tmp_path_factory.mktemp(request.param)
    growth, monitor = WidthGrowthCallback(_stage()), ActivationRMSMonitor(every_n_steps=1, per_linear=True)
    callbacks = [monitor, growth] if request.param == "monitor_first" else [growth, monitor]
    logger = TensorBoardLogger(str(root), name="run", version=0)
    module = TinyModule(max_steps=MAX_STEPS)
    trainer = make_trainer(callbacks, max_steps=MAX_STEPS, logger=logger, log_every_n_steps=1)
    trainer.fit(module)
    ckpt = root / "grown.ckpt"
    trainer.save_checkpoint(ckpt)
    return root, logger.log_dir, growth, module, ckpt


def test_new_blocks_tags_start_at_the_growth(grown_run):
    _, log_dir, growth, module, _ = grown_run
    assert len(module.model.transformer.h) == 4
    assert growth.summaries[0]["sizes"]["n_layer"] == (2, 4) and growth.summaries[0]["widths"] == {}
    assert growth.summaries[0]["global_step"] == GROW_AT
    ea = _events(log_dir)
    scalars = {t: {e.step: e.value for e in ea.Scalars(t)} for t in ea.Tags()["scalars"]}
    for i in range(4):
        for q in QUANTITIES:
            steps = sorted(scalars[f"rms/{q}/block_{i:02d}"])
            want = list(range(MAX_STEPS)) if i < 2 else list(range(GROW_AT, MAX_STEPS))
            assert steps == want, (q, i, steps)
        gains = [t for t in scalars if t.startswith(f"rms/gain/block_{i:02d}/")]
        assert gains and all(min(scalars[t]) == (0 if i < 2 else GROW_AT) for t in gains), (i, gains)
    assert not any(re.search(r"block_0[4-9]|block_[1-9]\d", t) for t in scalars)
    assert sorted(scalars["rms/final_hidden"]) == list(range(MAX_STEPS))
    # tags follow positions: interleave 2 -> 4 puts old block 0's copy at position 1 and old block 1 at position 2;
    # copy-zero new blocks write nothing at the growth step (zeroed output projections), the kept ones do
    attn = {i: scalars[f"rms/attn_ratio/block_{i:02d}"] for i in range(4)}
    assert attn[1][GROW_AT - 1] > 1e-3  # before: old block 1
    assert attn[1][GROW_AT] == 0.0 and attn[3][GROW_AT] == 0.0  # after: new copies
    assert attn[0][GROW_AT] > 1e-3 and attn[2][GROW_AT] > 1e-3  # kept blocks 0 and 1 (moved to position 2)
    assert all(math.isfinite(v) and v > 0 for v in scalars["rms/residual/block_03"].values())


def test_layout_is_rewritten_at_the_growth(grown_run):
    _, log_dir, *_ = grown_run
    layouts = _layouts(_events(log_dir))
    assert [step for step, _ in layouts] == [0, GROW_AT]  # fit start, then the growth step
    assert _gain_blocks(layouts[0][1]) == ["00", "01"]
    assert _gain_blocks(layouts[-1][1]) == ["00", "01", "02", "03"]  # TensorBoard shows the last layout
    regexes = [t for cat in layouts[-1][1].category for c in cat.chart for t in c.multiline.tag]
    for q in QUANTITIES:  # the overlays match the new blocks' tags, not the gain tags
        assert any(re.match(r, f"rms/{q}/block_03") for r in regexes), q
        assert not any(re.match(r, f"rms/{q}/block_03") for r in regexes if r.startswith("rms/gain"))


def test_resume_of_a_grown_checkpoint_writes_the_grown_layout(grown_run):
    root, _, _, _, ckpt = grown_run
    monitor = ActivationRMSMonitor(every_n_steps=1, per_linear=True)
    logger = TensorBoardLogger(str(root), name="resumed", version=0)
    module = TinyModule(max_steps=RESUME_STEPS)
    assert len(module.model.transformer.h) == 2  # built small; the growth callback regrows it from the checkpoint
    make_trainer([WidthGrowthCallback(_stage()), monitor], max_steps=RESUME_STEPS, logger=logger,
                 log_every_n_steps=1).fit(module, ckpt_path=str(ckpt))
    ea = _events(logger.log_dir)
    layouts = _layouts(ea)
    assert len(layouts) == 1 and _gain_blocks(layouts[0][1]) == ["00", "01", "02", "03"]
    for i in range(4):
        assert sorted(e.step for e in ea.Scalars(f"rms/residual/block_{i:02d}")) == [MAX_STEPS, MAX_STEPS + 1]


def test_plot_shows_the_new_blocks_from_the_growth_on(grown_run, tmp_path):
    _, log_dir, *_ = grown_run
    run = load_run(log_dir)
    assert run.growth_steps() == [(GROW_AT, 0)]
    assert run.depth_changes() == [(GROW_AT, 2, 4)]
    assert run.block_counts() == [(s, 2 if s < GROW_AT else 4) for s in range(MAX_STEPS)]

    fig = dashboard_figure([log_dir], x_axis="step")
    heat_axes = [ax for ax in fig.axes if any(c.get_gid() == HEATMAP_GID for c in ax.collections)]
    assert len(heat_axes) == 3  # residual, attention ratio, MLP ratio
    for ax in heat_axes:
        mesh = next(c for c in ax.collections if c.get_gid() == HEATMAP_GID)
        grid = np.ma.asarray(mesh.get_array()).reshape(4, MAX_STEPS)  # rows: the final block count
        mask = np.ma.getmaskarray(grid)
        assert not mask[:2].any()  # blocks 00/01 throughout
        assert mask[2:, :GROW_AT].all() and not mask[2:, GROW_AT:].any()  # 02/03 from the growth step on
        assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "1", "2", "3"]
        assert ax.get_ylabel().startswith("block position")
        assert [line.get_xdata()[0] for line in ax.lines if line.get_gid() == GROWTH_GID] == [GROW_AT]
        notes = [t for t in ax.texts if t.get_gid() == DEPTH_GID]
        assert [(n.get_text(), n.xy[0]) for n in notes] == [("2\u21924 blocks", GROW_AT)]
    loss_ax = next(ax for ax in fig.axes if ax.get_title() == "Loss")
    assert "stage 0, 2\u21924 blocks" in [t.get_text() for t in loss_ax.texts]

    out = plot_runs([log_dir], tmp_path / "depth.png")
    assert out.read_bytes()[:8] == PNG_MAGIC


def test_layout_follows_a_gpt_swapped_in_by_the_growth_between_logging_steps(tmp_path):
    """FSDP backends put a new GPT in the module; the layout must follow it at the growth step, not at the next
    logging step (the monitor logs every 4 steps here, the growth lands at step 5)."""
    import copy

    import lightning.pytorch as pl

    from lightning_sparkling.growth.surgery import grow_model

    class SwapGrowth(pl.Callback):  # stands in for a backend that builds a new, grown GPT object
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == GROW_AT:
                grown = copy.deepcopy(pl_module.model)
                grow_model(grown, _stage())
                pl_module.model = grown

    monitor = ActivationRMSMonitor(every_n_steps=4, per_linear=True)
    logger = TensorBoardLogger(str(tmp_path), name="run", version=0)
    trainer = make_trainer([SwapGrowth(), monitor], max_steps=MAX_STEPS, logger=logger, log_every_n_steps=1)
    trainer.fit(TinyModule(max_steps=MAX_STEPS))
    steps = [(step, len(_gain_blocks(layout))) for step, layout in _layouts(_events(logger.log_dir))]
    assert steps == [(0, 2), (GROW_AT, 4)], steps
