"""`sparkling plot` draws every chart of the TensorBoard layout: the panel list comes from tb_layout, every tag a real
growth logs lands on its chart's panel, growth steps are found from the logs or summary.json, --panels chooses."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.loggers import TensorBoardLogger

from lightning_sparkling import ActivationRMSMonitor, WidthGrowthCallback
from lightning_sparkling.dashboards.plotting import (
    GAIN_GID,
    GROWTH_GID,
    HEATMAP_GID,
    PANEL_GROUPS,
    PANEL_LABEL_PREFIX,
    PANELS,
    TAG_GID_PREFIX,
    dashboard_figure,
    load_run,
    main_plot,
    panel_of,
    resolve_panels,
)
from lightning_sparkling.dashboards.tb_layout import layout_charts, rms_layout

from _tiny import TinyModule, make_trainer, paper_stage

GROW_AT, MAX_STEPS = 6, 14


@pytest.mark.parametrize("n_blocks, per_linear", [(None, False), (3, True), (None, True)])
def test_every_layout_chart_has_a_plot_panel(n_blocks, per_linear):
    """A chart added to the TensorBoard layout without a `sparkling plot` panel fails here."""
    charts = {(c.category, c.title): c for c in layout_charts(n_blocks, per_linear)}
    for category, titled in rms_layout(n_blocks, per_linear).items():
        for title, (kind, tags) in titled.items():
            chart = charts[(category, title)]  # every chart TensorBoard shows is one of the table's
            assert kind == "Multiline" and list(chart.tags) == tags
            assert panel_of(chart) in PANELS
    # and no plot panel outside the layout
    assert set(PANELS) == {c.panel for c in layout_charts(3, True)}
    assert set(PANEL_GROUPS["rms"]) == {"residual", "attn_ratio", "mlp_ratio", "final_hidden"}


def test_a_chart_without_a_panel_is_refused():
    from lightning_sparkling.dashboards.tb_layout import Chart

    with pytest.raises(KeyError, match="new chart"):
        panel_of(Chart("SPARKLING / x", "new chart", ("x/.*",), "nope"))


@pytest.fixture(scope="module")
def grown(tmp_path_factory):
    """A real width + heads growth with the symmetry loop, every monitor on, logged by TensorBoardLogger."""
    root = tmp_path_factory.mktemp("grown")
    stage = paper_stage(GROW_AT, n_embd=64, intermediate_size=128, n_head=8, rewarmup_steps=4, symmetry_target=0.5,
                        symmetry_interval=2)
    logger = TensorBoardLogger(str(root), name="run", version=0)
    make_trainer([WidthGrowthCallback(stage), ActivationRMSMonitor(every_n_steps=2, per_linear=True),
                  LearningRateMonitor("step")], max_steps=MAX_STEPS, logger=logger,
                 log_every_n_steps=1).fit(TinyModule(max_steps=MAX_STEPS))
    return logger.log_dir


def _panel_axes(fig, name):
    return [ax for ax in fig.axes if ax.get_label() == PANEL_LABEL_PREFIX + name]


def test_every_logged_tag_of_a_layout_chart_is_drawn_on_its_panel(grown):
    run = load_run(grown)
    assert any(t.startswith("symmetry/stage_0/attn_q") for t in run.scalars)  # heads' symmetry tags
    assert "growth/symmetry_boost/stage_0" in run.scalars and "rms/final_hidden" in run.scalars
    fig = dashboard_figure([grown])  # default: every panel (gain too: it was logged)
    labels = [ax.get_label() for ax in fig.axes if ax.get_label().startswith(PANEL_LABEL_PREFIX)]
    assert list(dict.fromkeys(labels)) == [PANEL_LABEL_PREFIX + p for p in PANELS]  # (the symmetry twin: twice)
    charts = layout_charts(4, per_linear=True)
    checked = set()
    for tag, (_, values) in run.scalars.items():
        for chart in charts:
            if not any(re.match(regex, tag) for regex in chart.tags):
                continue
            axes = _panel_axes(fig, chart.panel)
            assert axes, chart.panel
            if tag == "growth/event":  # drawn as the growth lines of the panel
                lines = [line for ax in axes for line in ax.lines if line.get_gid() == GROWTH_GID]
                assert [line.get_xdata()[0] for line in lines] == [GROW_AT]
            elif chart.panel in ("residual", "attn_ratio", "mlp_ratio", "gain"):  # a heatmap row per tag
                gid = GAIN_GID if chart.panel == "gain" else HEATMAP_GID
                ax = next(ax for ax in axes for c in ax.collections if c.get_gid() == gid)
                rows = sum(1 for t in run.scalars if any(re.match(r, t) for c in charts if c.panel == chart.panel
                                                         for r in c.tags))
                assert len(ax.get_yticks()) == rows, chart.panel
            else:
                lines = [line for ax in axes for line in ax.lines if line.get_gid() == TAG_GID_PREFIX + tag]
                assert lines, (tag, chart.panel)
                assert np.allclose(lines[-1].get_ydata()[-1], values[-1]), tag
            checked.add(chart.panel)
    assert checked == set(PANELS)
    for name in PANELS:  # the growth is marked on every panel
        lines = [line for ax in _panel_axes(fig, name) for line in ax.lines if line.get_gid() == GROWTH_GID]
        assert [line.get_xdata()[0] for line in lines] == [GROW_AT], name


def test_panels_option_chooses_and_refuses(grown, tmp_path, capsys):
    fig = dashboard_figure([grown], panels="symmetry,loss")
    assert [ax.get_label() for ax in fig.axes if ax.get_title()] == ["panel:symmetry", "panel:loss"]
    fig = dashboard_figure([grown], panels=["rms"])
    assert {ax.get_label() for ax in fig.axes if ax.get_label().startswith(PANEL_LABEL_PREFIX)} == \
        {PANEL_LABEL_PREFIX + p for p in PANEL_GROUPS["rms"]}
    assert resolve_panels("loss,loss,lr") == ["loss", "lr"]
    with pytest.raises(ValueError, match="unknown panel 'rsm'"):
        resolve_panels("loss,rsm")
    out = tmp_path / "x.png"
    with pytest.raises(SystemExit) as exit_info:
        main_plot([str(grown), "--out", str(out), "--panels", "loss,rsm"])
    assert exit_info.value.code == 2 and not out.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --panels loss,rsm: unknown panel 'rsm'")
    assert all(p in err[0] for p in PANELS) and "rms (" in err[0]
    assert main_plot([str(grown), "--out", str(out), "--panels", "symmetry", "--dpi", "50"]) == 0
    assert main_plot([str(grown), "--out", str(tmp_path / "all.png"), "--dpi", "50"]) == 0

    def png_size(path):  # (width, height) from the PNG header
        data = path.read_bytes()
        return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")

    one, every = png_size(out), png_size(tmp_path / "all.png")
    assert one[0] < every[0] / 2 and one[1] < every[1]  # --panels symmetry: one panel, not the whole dashboard


def test_growth_steps_from_lr_new_or_summary_json(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    out_dir = tmp_path / "quick"
    with SummaryWriter(str(out_dir / "logs")) as writer:  # a run's logs without growth/event
        for step in range(10):
            writer.add_scalar("train_loss", 5.0 - 0.1 * step, step)
        for step in range(4, 10):
            writer.add_scalar("growth/lr_new/stage_0", 0.01, step)
    run = load_run(out_dir / "logs")
    assert run.name == "quick" and run.growth_steps() == [(4, 0)]  # the first step of the new entries' LR
    (out_dir / "summary.json").write_text(json.dumps({"growth": [{"stage": 0, "at_step": 3}, {"stage": 1,
                                                                                            "at_step": 7}]}))
    run = load_run(out_dir / "logs")
    assert run.growth_steps() == [(4, 0)]  # a logged scalar wins
    del run.scalars["growth/lr_new/stage_0"]
    assert run.growth_steps() == [(3, 0), (7, 1)]  # else summary.json beside logs/
    with SummaryWriter(str(tmp_path / "bare" / "logs")) as writer:
        writer.add_scalar("train_loss", 1.0, 0)
    assert load_run(tmp_path / "bare" / "logs").growth_steps() == []


@pytest.mark.slow
def test_make_dashboard_image_script(tmp_path):
    """docs/make_dashboard_image.py trains the quickstart (shrunk here) and draws its dashboard; --reuse redraws."""
    import runpy
    from pathlib import Path

    script = runpy.run_path(str(Path(__file__).resolve().parents[2] / "docs" / "make_dashboard_image.py"))
    out_dir, image = tmp_path / "quick", tmp_path / "img" / "dash.png"
    shrink = ["--data.max_files", "10", "--data.max_bytes", "100000", "--data.vocab_size", "512", "--data.seq_len",
              "32", "--data.val_percent", "20", "--data.cache_dir", str(tmp_path / "cache"),
              "--model_config.block_size", "32", "--train.global_batch_size", "4", "--train.micro_batch_size", "4",
              "--train.max_steps", "6", "--train.lr_warmup_steps", "1", "--train.save_interval", "null",
              "--eval.interval", "null", "--eval.max_iters", "1", "--rms_monitor.every_n_steps", "1",
              "--growth.stages", "[{at_step: 3, n_embd: 128, intermediate_size: 512, rewarmup_steps: 1}]"]
    assert script["main"](["--out-dir", str(out_dir), "--image", str(image), "--", *shrink]) == 0
    assert image.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert load_run(out_dir / "logs").growth_steps() == [(3, 0)]
    mtime = (out_dir / "summary.json").stat().st_mtime_ns
    image.unlink()
    assert script["main"](["--out-dir", str(out_dir), "--image", str(image), "--reuse"]) == 0  # no retraining
    assert image.is_file() and (out_dir / "summary.json").stat().st_mtime_ns == mtime
    (tmp_path / "mine").mkdir()
    with pytest.raises(SystemExit):  # a folder that is not a run is never removed
        script["main"](["--out-dir", str(tmp_path / "mine"), "--image", str(image)])
    assert (tmp_path / "mine").is_dir()
