"""plot_runs / dashboard_figure / main_plot on real tiny runs."""

from __future__ import annotations

import lightning.pytorch as L
import pytest
import torch
import torch.nn as nn
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.loggers import TensorBoardLogger
from litgpt import Config
from litgpt.model import GPT

from lightning_sparkling import ActivationRMSMonitor
from lightning_sparkling.dashboards.plotting import (
    GROWTH_GID,
    dashboard_figure,
    find_event_dirs,
    load_run,
    main_plot,
    plot_runs,
)

VOCAB, SEQ, BATCH = 64, 16, 2
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"




class TinyLM(L.LightningModule):
    def __init__(self, n_embd: int = 32, growth_at: int | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.model = GPT(Config(n_layer=3, n_embd=n_embd, n_head=4, vocab_size=VOCAB, padded_vocab_size=VOCAB,
                                block_size=SEQ, mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm", bias=False,
                                intermediate_size=2 * n_embd))
        self.growth_at = growth_at
        self.tokens = 0

    def training_step(self, batch, batch_idx):
        logits = self.model(batch[:, :-1])
        loss = nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1))
        self.tokens += batch[:, :-1].numel()
        self.log("train_loss", loss)
        self.log("tokens", float(self.tokens))
        if self.growth_at is not None and self.global_step == self.growth_at:
            self.logger.log_metrics({"growth/event": 1.0}, step=self.global_step)  # fake growth marker (stage 0)
        return loss

    def validation_step(self, batch, batch_idx):
        logits = self.model(batch[:, :-1])
        self.log("val_loss", nn.functional.cross_entropy(logits.reshape(-1, VOCAB), batch[:, 1:].reshape(-1)))

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=3e-3)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def _loader(self, n):
        data = torch.randint(0, VOCAB, (n, SEQ + 1), generator=torch.Generator().manual_seed(1))
        return torch.utils.data.DataLoader(data, batch_size=BATCH)

    def train_dataloader(self):
        return self._loader(64)

    def val_dataloader(self):
        return self._loader(4)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    dirs = []
    for name, module in (("grown", TinyLM(growth_at=6)), ("baseline", TinyLM())):
        logger = TensorBoardLogger(str(root), name=name)
        L.Trainer(max_steps=12, logger=logger, accelerator="cpu", devices=1, log_every_n_steps=1,
                  val_check_interval=6, num_sanity_val_steps=0, enable_checkpointing=False,
                  enable_progress_bar=False, enable_model_summary=False,
                  callbacks=[ActivationRMSMonitor(every_n_steps=2), LearningRateMonitor("step")]).fit(module)
        dirs.append(logger.log_dir)
    return root, dirs


def test_load_run_reads_scalars(two_runs):
    _, (grown, _) = two_runs
    run = load_run(grown)
    assert run.name == "grown/version_0"  # load_run keeps the version; plots shorten it
    steps, values = run.scalars["rms/residual/block_02"]
    assert list(steps) == [0, 2, 4, 6, 8, 10] and (values > 0).all()
    assert run.growth_steps() == [(6, 0)]
    assert run.with_prefix("lr-") == ["lr-AdamW"]
    assert "val_loss" in run.scalars


def test_plot_runs_writes_png(two_runs, tmp_path):
    root, dirs = two_runs
    out = plot_runs(dirs, tmp_path / "sub" / "dash.png", x_axis="step")
    data = out.read_bytes()
    assert out.exists() and data[:8] == PNG_MAGIC and len(data) > 30_000
    assert find_event_dirs(root) == sorted(map(type(out), dirs))  # a parent folder expands to its runs


def test_figure_panels_and_growth_lines(two_runs):
    _, dirs = two_runs
    fig = dashboard_figure(dirs, x_axis="step")
    titles = [ax.get_title() for ax in fig.axes]
    assert "Loss" in titles and "Learning rate: old vs new entries" in titles
    assert sum("residual stream RMS" in t for t in titles) == 1
    assert sum("attention ratio" in t for t in titles) == 1 and sum("MLP ratio" in t for t in titles) == 1
    loss_ax = fig.axes[titles.index("Loss")]
    labels = loss_ax.get_legend_handles_labels()[1]
    assert "grown: train" in labels and "baseline: val" in labels
    growth = [line for ax in fig.axes for line in ax.lines if line.get_gid() == GROWTH_GID]
    # only the grown run has growth/event: one line on each of the 7 panels (loss, lr, symmetry, the 3 heatmaps of the
    # first run = grown, final hidden RMS)
    assert len(growth) == 7
    assert all(line.get_xdata()[0] == 6 for line in growth)
    assert all(line.get_linestyle() == "--" for line in growth)
    # the heatmaps default to the run that grew, whatever the order; heatmap_run picks another
    fig_rev = dashboard_figure(dirs[::-1], x_axis="step")
    assert any("[grown]" in ax.get_title() for ax in fig_rev.axes)
    fig_base = dashboard_figure(dirs, x_axis="step", heatmap_run="baseline")
    assert any("[baseline]" in ax.get_title() for ax in fig_base.axes)
    with pytest.raises(ValueError, match="heatmap_run"):
        dashboard_figure(dirs, heatmap_run="nope")
    # without the marker: no growth lines at all
    fig2 = dashboard_figure(dirs[1:], x_axis="step")
    assert not [line for ax in fig2.axes for line in ax.lines if line.get_gid() == GROWTH_GID]


def test_x_axis_tokens_and_flops_fallback(two_runs):
    _, dirs = two_runs
    fig = dashboard_figure(dirs, x_axis="tokens")
    loss_ax = next(ax for ax in fig.axes if ax.get_title() == "Loss")
    assert loss_ax.get_xlabel() == "tokens seen"
    growth = [line for line in loss_ax.lines if line.get_gid() == GROWTH_GID]
    assert growth[0].get_xdata()[0] == pytest.approx(7 * BATCH * SEQ)  # tokens logged at step 6 (7 batches)
    fig = dashboard_figure(dirs, x_axis="flops")
    loss_ax = next(ax for ax in fig.axes if ax.get_title() == "Loss")
    assert loss_ax.get_xlabel().startswith("optimizer step (flops not logged")
    with pytest.raises(ValueError, match="x_axis"):
        dashboard_figure(dirs, x_axis="epochs")


def test_main_plot_cli(two_runs, tmp_path, capsys):
    root, _ = two_runs
    out = tmp_path / "cli.png"
    assert main_plot([str(root), "--out", str(out), "--x", "tokens", "--title", "tiny"]) == 0
    assert out.read_bytes()[:8] == PNG_MAGIC
    assert "wrote" in capsys.readouterr().out
    with pytest.raises(FileNotFoundError):
        plot_runs([tmp_path / "nope"], tmp_path / "x.png")
