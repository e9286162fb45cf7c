"""Report figures from TensorBoard event files: every chart of the TensorBoard layout, as one image.

``plot_runs([logdir, ...], "dashboard.png")`` reads the scalars of every run with TensorBoard's own
``EventAccumulator`` and draws one figure (matplotlib, Agg backend) with one panel per chart of the custom-scalars
layout (:data:`lightning_sparkling.dashboards.tb_layout.CHARTS`, so the two cannot drift; :data:`PANELS`):

* ``loss``: ``train_loss`` of every run (lightly smoothed over a faint raw curve) and ``val_loss`` when logged;
* ``lr``: the learning rate of old entries (``lr-*`` tags of Lightning's ``LearningRateMonitor``) and of each stage's
  new entries (``growth/lr_new/stage_*``);
* ``symmetry``: ``symmetry/stage_k/<axis>`` (mean cosine of the copied channels to their sources, per axis: widths,
  heads' ``attn_q*``, depth's ``n_layer``) and, on the right axis, the symmetry loop's LR boost
  (``growth/symmetry_boost/stage_k``);
* ``residual``, ``attn_ratio``, ``mlp_ratio``: heatmaps (block x step) of ``rms/residual/block_*``,
  ``rms/attn_ratio/block_*`` and ``rms/mlp_ratio/block_*`` for one run: the first that has them and grew, else the
  first that has them, or the one named by ``heatmap_run`` (see
  :class:`~lightning_sparkling.callbacks.rms_monitor.ActivationRMSMonitor`);
* ``final_hidden``: ``rms/final_hidden`` of every run;
* ``gain``: a heatmap of ``rms/gain/block_NN/<linear>`` (drawn by default only when logged: ``per_linear=True``).

``panels`` (``--panels loss,symmetry``; ``rms`` stands for the four RMS panels, ``all`` for every one) chooses them.

Growth steps are drawn as vertical dashed lines on every panel: the steps of the ``growth/event`` scalar (value =
stage index + 1), else the first steps of ``growth/lr_new/stage_k``, else the stages of the ``summary.json`` that
``sparkling pretrain`` writes beside ``logs/`` (:meth:`RunScalars.growth_steps`).

Depth growth: the heatmaps have one row per block position the run ever logged (the final block count), and a
block that a growth added has values only from its first logged step on; before it the cells are drawn grey
("not in the model yet"). Where the number of logged blocks changes, the heatmaps and the loss panel's growth
annotation say so (``2→4 blocks``; :meth:`RunScalars.depth_changes`). Rows are *positions*, as the monitor's
tags are: a kept block that ``depth_order="interleave"`` or ``"middle"`` moved continues on its new position's
row, and its old row continues with the block now there (the y axis says "block position").

The x axis is the optimizer step, or tokens / FLOPs seen when the runs log a cumulative scalar for
them (``tokens``, ``throughput/tokens``, ``train/tokens`` or ``train|lengths``; ``flops``, ``throughput/flops`` or
``train/flops``); when a run lacks it the figure falls back to steps and says so in the axis label.

A *logdir* is a run's event directory (e.g. ``lightning_logs/version_0``), an event file, or any folder above them:
every folder below it holding event files becomes one run. The command line form is
``sparkling plot LOGDIR... --out FILE.png [--x step|tokens|flops] [--panels P,...] [--heatmap-run NAME]``
(:func:`main_plot`).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from lightning_sparkling.dashboards.tb_layout import CHARTS, RMS as RMS_CATEGORY, Chart, gain_charts

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["DEPTH_GID", "GAIN_GID", "GROWTH_GID", "HEATMAP_GID", "PANELS", "PANEL_GROUPS", "RunScalars",
           "dashboard_figure", "find_event_dirs", "load_run", "main_plot", "panel_of", "plot_runs", "resolve_panels"]

XAxis = Literal["step", "tokens", "flops"]

TRAIN_LOSS_TAGS = ("train_loss", "train_loss_step", "train/loss", "loss")
VAL_LOSS_TAGS = ("val_loss", "val_loss_epoch", "val/loss")
TOKEN_TAGS = ("tokens", "throughput/tokens", "train/tokens", "train|lengths")
FLOPS_TAGS = ("flops", "throughput/flops", "train/flops")
GROWTH_TAG = "growth/event"
LR_NEW_PREFIX = "growth/lr_new/"
SYMMETRY_PREFIX = "symmetry/"
BOOST_PREFIX = "growth/symmetry_boost/"
FINAL_HIDDEN_TAG = "rms/final_hidden"
GAIN_PREFIX = "rms/gain/"
GROWTH_GID = "growth-event"  # gid of every growth line (tests and post-processing can find them)
HEATMAP_GID = "rms-heatmap"  # gid of every block heatmap's QuadMesh (residual, attention and MLP ratios)
GAIN_GID = "rms-gain-heatmap"  # gid of the per-linear gain heatmap's QuadMesh
PANEL_LABEL_PREFIX = "panel:"  # label of each panel's axes: "panel:" + its name (fig.axes in panel order)
TAG_GID_PREFIX = "tag:"  # gid of a curve drawn from a scalar: "tag:" + the tag
DEPTH_GID = "depth-change"  # gid of every "2→4 blocks" annotation
MISSING_COLOR = "0.82"  # heatmap cells of a block not (yet) in the model

RMS_PANELS = (
    ("rms/residual/block_", "residual stream RMS (block input)", "RMS"),
    ("rms/attn_ratio/block_", "attention ratio  RMS(attn) / RMS(x)", "ratio"),
    ("rms/mlp_ratio/block_", "MLP ratio  RMS(mlp) / RMS(residual in)", "ratio"),
)


# --------------------------------------------------------------------------------------------------------------------
# reading
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class RunScalars:
    """All scalar series of one run: ``scalars[tag] = (steps, values)``, sorted by step, one value per step."""

    name: str
    logdir: Path
    scalars: dict[str, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)
    summary_growths: list[tuple[int, int]] = field(default_factory=list)
    """``[(at_step, stage)]`` from the run's ``summary.json`` (see :meth:`growth_steps`)."""

    def first(self, tags: Sequence[str]) -> str | None:
        """The first of ``tags`` this run logged."""
        return next((t for t in tags if t in self.scalars), None)

    def with_prefix(self, prefix: str) -> list[str]:
        return sorted(t for t in self.scalars if t.startswith(prefix))

    def growth_steps(self) -> list[tuple[int, int]]:
        """``[(step, stage index)]`` of the run's growths, from its logs.

        From the ``growth/event`` scalar (value = stage index + 1; the first step of each distinct positive value
        counts, so a marker re-logged on later steps, as Lightning's ``self.log`` does with a value logged once, does
        not add growths); without it, from the first step of each ``growth/lr_new/stage_k`` scalar; without those,
        from the ``summary.json`` a ``sparkling pretrain`` run wrote beside its ``logs/`` (``growth[k].at_step``).
        """
        if GROWTH_TAG in self.scalars:
            steps, values = self.scalars[GROWTH_TAG]
            first: dict[int, int] = {}
            for s, v in zip(steps, values):
                if v > 0 and math.isfinite(v):
                    first.setdefault(int(round(v)), int(s))
            return sorted((s, v - 1) for v, s in first.items())
        lr_new = [(int(self.scalars[t][0][0]), int(t.rsplit("_", 1)[1])) for t in self.with_prefix(LR_NEW_PREFIX)
                  if t.rsplit("_", 1)[-1].isdigit() and len(self.scalars[t][0])]
        return sorted(lr_new) if lr_new else sorted(self.summary_growths)

    def block_counts(self, prefix: str = RMS_PANELS[0][0]) -> list[tuple[int, int]]:
        """``[(step, number of blocks with a finite value at that step)]`` over the steps where any
        ``{prefix}NN`` tag was logged (``rms/residual/block_`` by default), sorted by step."""
        tags = [t for t in self.with_prefix(prefix) if t[len(prefix):].isdigit()]
        counts: dict[int, int] = {}
        for tag in tags:
            for s, v in zip(*self.scalars[tag]):
                counts[int(s)] = counts.get(int(s), 0) + int(math.isfinite(v))
        return sorted(counts.items())

    def depth_changes(self, prefix: str = RMS_PANELS[0][0]) -> list[tuple[int, int, int]]:
        """``[(step, blocks before, blocks after)]`` wherever the logged block count changes between two logging
        steps. ``step`` is the growth step (``growth/event``) in between when there is one (the monitor may log
        the new blocks only at a later step), else the first step with the new count."""
        counts = [(s, n) for s, n in self.block_counts(prefix) if n > 0]
        growths = [s for s, _ in self.growth_steps()]
        out = []
        for (s0, n0), (s1, n1) in zip(counts, counts[1:]):
            if n0 != n1:
                between = [g for g in growths if s0 < g <= s1]
                out.append((between[0] if between else s1, n0, n1))
        return out


def find_event_dirs(logdir: str | Path) -> list[Path]:
    """Folders at or below ``logdir`` that hold TensorBoard event files (``logdir`` itself if it is an event file)."""
    path = Path(logdir)
    if path.is_file():
        return [path]
    if not path.exists():
        raise FileNotFoundError(f"no such log directory: {path}")
    dirs = sorted({f.parent for f in path.rglob("*tfevents*") if f.is_file()})
    if not dirs:
        raise FileNotFoundError(f"no TensorBoard event files under {path}")
    return dirs


def load_run(event_dir: str | Path, name: str | None = None) -> RunScalars:
    """Every scalar of one event directory (or event file), read with TensorBoard's ``EventAccumulator``.

    A step logged more than once (a resumed run) keeps its last value.
    """
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    path = Path(event_dir)
    ea = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 1, "histograms": 1, "images": 1,
                                                     "audio": 1, "compressedHistograms": 1})
    ea.Reload()
    run = RunScalars(name=name or _run_name(path), logdir=path)
    for tag in ea.Tags().get("scalars", []):
        by_step: dict[int, float] = {}
        for event in sorted(ea.Scalars(tag), key=lambda e: e.wall_time):
            by_step[int(event.step)] = float(event.value)
        steps = np.array(sorted(by_step), dtype=np.int64)
        run.scalars[tag] = (steps, np.array([by_step[s] for s in steps], dtype=np.float64))
    run.summary_growths = _summary_growths(path)
    return run


def _summary_growths(path: Path) -> list[tuple[int, int]]:
    """``[(at_step, stage)]`` of the ``summary.json`` nearest above an event directory (``out_dir/logs/...``)."""
    import json

    folder = path.parent if path.is_file() else path
    for candidate in [folder, *folder.parents][:4]:
        summary = candidate / "summary.json"
        if summary.is_file():
            try:
                growth = json.loads(summary.read_text()).get("growth") or []
                return sorted((int(g["at_step"]), int(g.get("stage", k))) for k, g in enumerate(growth))
            except (ValueError, KeyError, TypeError, AttributeError):  # not a sparkling summary: no growths from it
                return []
    return []


def _run_name(path: Path) -> str:
    path = path.parent if path.is_file() else path
    if path.name.startswith("version_") and path.parent.name:
        return f"{path.parent.name}/{path.name}"
    if path.name == "logs" and path.parent.name:  # `sparkling pretrain` logs to out_dir/logs: the run is out_dir
        return path.parent.name
    return path.name or str(path)


def _load_all(logdirs: Sequence[str | Path]) -> list[RunScalars]:
    if isinstance(logdirs, (str, Path)):
        logdirs = [logdirs]
    runs = [load_run(d) for logdir in logdirs for d in find_event_dirs(logdir)]
    if not runs:
        raise ValueError("plot_runs needs at least one log directory")
    # short names: "name" for "name/version_0" unless two runs would share it
    short = [r.name.rsplit("/version_", 1)[0] for r in runs]
    for r, s in zip(runs, short):
        if short.count(s) == 1:
            r.name = s
    names = [r.name for r in runs]
    for r in runs:  # still equal: the full path
        if names.count(r.name) > 1:
            r.name = str(r.logdir)
    return runs


# --------------------------------------------------------------------------------------------------------------------
# x axis
# --------------------------------------------------------------------------------------------------------------------


def _x_mappers(runs: list[RunScalars], x_axis: XAxis) -> tuple[list, str, bool]:
    """Per run a ``steps -> x`` function, the axis label, whether the axis is engineering-formatted."""
    if x_axis not in ("step", "tokens", "flops"):
        raise ValueError(f"x_axis must be 'step', 'tokens' or 'flops', got {x_axis!r}")
    identity = [lambda s: np.asarray(s, dtype=np.float64)] * len(runs)
    if x_axis == "step":
        return identity, "optimizer step", False
    candidates = TOKEN_TAGS if x_axis == "tokens" else FLOPS_TAGS
    mappers = []
    for run in runs:
        tag = run.first(candidates)
        if tag is None or len(run.scalars[tag][0]) < 2:
            return identity, f"optimizer step ({x_axis} not logged by {run.name}: fell back to step)", False
        steps, values = run.scalars[tag]
        values = np.maximum.accumulate(values)  # cumulative counter: monotone
        mappers.append(lambda s, st=steps.astype(np.float64), v=values: _interp_extrapolate(s, st, v))
    return mappers, ("tokens seen" if x_axis == "tokens" else "training FLOPs"), True


def _interp_extrapolate(s, steps: np.ndarray, values: np.ndarray) -> np.ndarray:
    s = np.asarray(s, dtype=np.float64)
    out = np.interp(s, steps, values)
    rate = (values[-1] - values[0]) / max(steps[-1] - steps[0], 1.0)
    out = np.where(s > steps[-1], values[-1] + (s - steps[-1]) * rate, out)
    return np.where(s < steps[0], values[0] - (steps[0] - s) * rate, out)


# --------------------------------------------------------------------------------------------------------------------
# drawing
# --------------------------------------------------------------------------------------------------------------------


def _ema(values: np.ndarray, weight: float) -> np.ndarray:
    out = np.empty_like(values)
    acc, norm = 0.0, 0.0
    for k, v in enumerate(values):  # debiased EMA, as TensorBoard's smoothing slider
        acc = weight * acc + (1 - weight) * v
        norm = weight * norm + (1 - weight)
        out[k] = acc / norm
    return out


def _tag(lines: list, tag: str) -> None:
    """Mark the lines drawn from ``tag`` (``gid == "tag:<tag>"``: tests and post-processing find a tag's curve)."""
    for line in lines:
        line.set_gid(TAG_GID_PREFIX + tag)


def _blocks_text(old: int, new: int) -> str:
    return f"{old}\u2192{new} blocks"


def _growth_lines(ax: Axes, run: RunScalars, xmap, color, label: bool, annotate: bool = False,
                  single: bool = False) -> None:
    depth = {step: (a, b) for step, a, b in run.depth_changes()} if annotate else {}
    for k, (step, stage) in enumerate(run.growth_steps()):
        x = float(xmap([step])[0])
        line = ax.axvline(x, color=color, linestyle="--", linewidth=1.3, alpha=0.9,
                          label=(_line_label(run, "growth", single) if label and k == 0 else None))
        line.set_gid(GROWTH_GID)
        if annotate:
            text = f"stage {stage}" + (f", {_blocks_text(*depth[step])}" if step in depth else "")
            ax.annotate(text, xy=(x, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -12),
                        textcoords="offset points", fontsize=8, color=color)


def _loss_panel(ax: Axes, runs: list[RunScalars], mappers, colors) -> None:
    drew, single = False, len(runs) == 1
    for run, xmap, color in zip(runs, mappers, colors):
        tag = run.first(TRAIN_LOSS_TAGS)
        if tag is not None:
            steps, values = run.scalars[tag]
            x = xmap(steps)
            if len(values) > 30:
                _tag(ax.plot(x, values, color=color, alpha=0.25, linewidth=0.8), tag)
                _tag(ax.plot(x, _ema(values, 0.8 if len(values) < 300 else 0.95), color=color, linewidth=1.8,
                             label=_line_label(run, "train (smoothed)", single)), tag)
            else:
                _tag(ax.plot(x, values, color=color, linewidth=1.8, label=_line_label(run, "train", single)), tag)
            drew = True
        vtag = run.first(VAL_LOSS_TAGS)
        if vtag is not None:
            steps, values = run.scalars[vtag]
            _tag(ax.plot(xmap(steps), values, color=color, linestyle=":", marker="o", markersize=4, linewidth=1.4,
                         label=_line_label(run, "val", single)), vtag)
            drew = True
        _growth_lines(ax, run, xmap, color, label=True, annotate=True, single=single)
    if not drew:
        _empty(ax, "no train_loss / val_loss scalars")
    ax.set_title("Loss")
    ax.set_ylabel("cross-entropy loss")
    _robust_ylim(ax, runs)


def _robust_ylim(ax: Axes, runs: list[RunScalars]) -> None:
    vals = []
    for run in runs:
        for tags in (TRAIN_LOSS_TAGS, VAL_LOSS_TAGS):
            tag = run.first(tags)
            if tag is not None:
                v = run.scalars[tag][1]
                vals.append(v[len(v) // 20:])  # skip the first 5%: the initial drop dwarfs the rest
    vals = [v for v in vals if len(v)]
    if vals:
        v = np.concatenate(vals)
        v = v[np.isfinite(v)]
        if len(v):
            lo, hi = float(np.min(v)), float(np.percentile(v, 99.5))
            pad = 0.05 * max(hi - lo, 1e-6)
            ax.set_ylim(lo - pad, hi + pad)


def _lr_panel(ax: Axes, runs: list[RunScalars], mappers, colors) -> None:
    drew, single = False, len(runs) == 1
    styles = ["--", "-.", ":"]
    for run, xmap, color in zip(runs, mappers, colors):
        for tag in run.with_prefix("lr-"):
            steps, values = run.scalars[tag]
            _tag(ax.plot(xmap(steps), values, color=color, linewidth=1.6, label=_line_label(run, f"{tag} (old entries)", single)),
                 tag)
            drew = True
        for k, tag in enumerate(run.with_prefix(LR_NEW_PREFIX)):
            steps, values = run.scalars[tag]
            _tag(ax.plot(xmap(steps), values, color=color, linewidth=1.6, linestyle=styles[k % len(styles)],
                         label=_line_label(run, f"new entries, {tag.rsplit('/', 1)[-1].replace('_', ' ')}", single)), tag)
            drew = True
        _growth_lines(ax, run, xmap, color, label=False)
    if not drew:
        _empty(ax, "no lr-* / growth/lr_new/* scalars")
    ax.set_title("Learning rate: old vs new entries")
    ax.set_ylabel("learning rate")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))


def _heatmap(ax: Axes, fig: Figure, run: RunScalars, rows: list[tuple[str, str]], title: str, cbar_label: str, xmap,
             gid: str, ylabel: str) -> None:
    """A (row x step) heatmap of ``rows`` = ``[(row label, tag)]`` of ``run``; missing cells grey."""
    from matplotlib import colormaps
    from matplotlib.colors import LogNorm, Normalize

    steps = np.array(sorted({int(s) for _, t in rows for s in run.scalars[t][0]}), dtype=np.int64)
    grid = np.full((len(rows), len(steps)), np.nan)  # (rows, steps)
    col = {int(s): k for k, s in enumerate(steps)}
    for r, (_, tag) in enumerate(rows):
        for s, v in zip(*run.scalars[tag]):
            grid[r, col[int(s)]] = v
    finite = grid[np.isfinite(grid)]
    positive = finite[finite > 0]
    if len(positive) == len(finite) and len(positive) and positive.max() / positive.min() > 8:
        norm = LogNorm(vmin=positive.min(), vmax=positive.max())
    else:
        norm = Normalize(vmin=finite.min() if len(finite) else 0, vmax=finite.max() if len(finite) else 1)
    cmap = colormaps["viridis"].with_extremes(bad=MISSING_COLOR)  # a block not in the model yet: grey, not a colour
    mesh = ax.pcolormesh(xmap(steps), np.arange(len(rows)), np.ma.masked_invalid(grid), shading="nearest",
                         cmap=cmap, norm=norm)
    mesh.set_gid(gid)
    cb = fig.colorbar(mesh, ax=ax, pad=0.02, fraction=0.05)
    cb.set_label(cbar_label + (" (log scale)" if isinstance(norm, LogNorm) else ""))
    if isinstance(norm, LogNorm):
        from matplotlib.ticker import FuncFormatter

        plain = FuncFormatter(lambda v, _: f"{v:.3g}")
        cb.ax.yaxis.set_major_formatter(plain)
        cb.ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:.2g}" if _minor_label(v, norm) else ""))
    labels = [label for label, _ in rows]
    ax.set_yticks(np.arange(len(rows)))
    ax.set_yticklabels(labels if len(rows) <= 16 else
                       [lab if k % max(1, len(rows) // 8) == 0 else "" for k, lab in enumerate(labels)])
    ax.set_ylabel(ylabel + (" (grey: not in the model yet)" if np.isnan(grid).any() else ""))
    ax.set_title(f"{title}\n[{run.name}]", fontsize=10)
    _growth_lines(ax, run, xmap, "white", label=False)


def _heatmap_panel(ax: Axes, fig: Figure, run: RunScalars, prefix: str, title: str, cbar_label: str, xmap) -> bool:
    """The block x step heatmap of the ``{prefix}NN`` tags (one row per block position); False if none."""
    tags = {int(t[len(prefix):]): t for t in run.with_prefix(prefix) if t[len(prefix):].isdigit()}
    if not tags:
        return False
    rows = [(str(b), tags[b]) for b in sorted(tags)]
    _heatmap(ax, fig, run, rows, title, cbar_label, xmap, HEATMAP_GID, "block position")
    for step, old, new in run.depth_changes(prefix):
        text = ax.annotate(_blocks_text(old, new), xy=(float(xmap([step])[0]), len(rows) - 0.5), xycoords="data",
                           xytext=(3, -2), textcoords="offset points", fontsize=8, color="white", va="top",
                           fontweight="bold")
        text.set_gid(DEPTH_GID)
    return True


def _minor_label(v: float, norm) -> bool:
    """Label a few minor ticks of a log colorbar (2 and 5 times a power of ten) when it spans under two decades."""
    if norm.vmax / norm.vmin > 100:
        return False
    mant = v / 10 ** math.floor(math.log10(v))
    return any(abs(mant - m) < 1e-6 for m in (2, 5))


def _empty(ax: Axes, text: str) -> None:
    """Say in the middle of an empty panel why it is empty, wrapped to stay inside the axes (off its axis labels)."""
    import textwrap

    ax.text(0.5, 0.5, textwrap.fill(text, 32), ha="center", va="center", transform=ax.transAxes, color="0.4",
            fontsize=9)


def _pick_heatmap_run(runs: list[RunScalars], heatmap_run: str | int | None) -> int:
    if isinstance(heatmap_run, int):
        if not 0 <= heatmap_run < len(runs):
            raise ValueError(f"heatmap_run={heatmap_run} but there are {len(runs)} runs")
        return heatmap_run
    if isinstance(heatmap_run, str):
        for k, r in enumerate(runs):
            if r.name == heatmap_run or str(r.logdir) == heatmap_run:
                return k
        raise ValueError(f"heatmap_run={heatmap_run!r} is none of the runs {[r.name for r in runs]}")
    with_rms = [k for k, r in enumerate(runs) if r.with_prefix(RMS_PANELS[0][0])]
    grown = [k for k in with_rms if runs[k].growth_steps()]
    return (grown or with_rms or [0])[0]


def _line_label(run: RunScalars, text: str, single: bool) -> str:
    return text if single else f"{run.name}: {text}"


def _symmetry_panel(ax: Axes, runs: list[RunScalars], mappers, colors) -> None:
    """``symmetry/stage_k/<axis>`` (mean cosine of each copy to its source) of every run; the symmetry loop's
    ``growth/symmetry_boost/stage_k`` (the new entries' LR multiplier) on the right axis."""
    single, drew, twin = len(runs) == 1, False, None
    styles = ["-", "--", "-.", ":"]
    for run, xmap, color in zip(runs, mappers, colors):
        for k, tag in enumerate(run.with_prefix(SYMMETRY_PREFIX)):
            steps, values = run.scalars[tag]
            stage, _, axis = tag[len(SYMMETRY_PREFIX):].partition("/")
            _tag(ax.plot(xmap(steps), values, linewidth=1.6,
                         color=TAG_PALETTE[k % len(TAG_PALETTE)] if single else color,
                         linestyle="-" if single else styles[k % len(styles)],
                         label=_line_label(run, f"{stage.replace('_', ' ')}: {axis}", single)), tag)
            drew = True
        for tag in run.with_prefix(BOOST_PREFIX):
            if twin is None:
                twin = ax.twinx()
                twin.set_label(ax.get_label())  # the same panel
            steps, values = run.scalars[tag]
            _tag(twin.step(xmap(steps), values, where="post", color="0.35" if single else color, linestyle=":",
                           linewidth=1.4,
                           label=_line_label(run, f"LR boost, {tag.rsplit('/', 1)[-1].replace('_', ' ')}", single)),
                 tag)
            drew = True
        _growth_lines(ax, run, xmap, color, label=False)
    if not drew:
        _empty(ax, "no symmetry/* scalars (a growth with copied channels logs them)")
    ax.set_title("Symmetry of copied channels")
    ax.set_ylabel("mean cosine, copy vs source")
    if twin is not None:
        twin.set_ylabel("new entries' LR boost (x), dotted")
        lo, hi = twin.get_ylim()
        twin.set_ylim(min(lo, 0.0), max(hi, 2.0))
        handles, labels = ax.get_legend_handles_labels()
        more = twin.get_legend_handles_labels()
        ax.legend(handles + more[0], labels + more[1], fontsize=8, loc="best", framealpha=0.85)


def _final_hidden_panel(ax: Axes, runs: list[RunScalars], mappers, colors) -> None:
    drew = False
    for run, xmap, color in zip(runs, mappers, colors):
        if FINAL_HIDDEN_TAG in run.scalars:
            steps, values = run.scalars[FINAL_HIDDEN_TAG]
            _tag(ax.plot(xmap(steps), values, color=color, linewidth=1.6, marker=".", markersize=4,
                         label=_line_label(run, FINAL_HIDDEN_TAG, len(runs) == 1)), FINAL_HIDDEN_TAG)
            drew = True
        _growth_lines(ax, run, xmap, color, label=False)
    if not drew:
        _empty(ax, f"no {FINAL_HIDDEN_TAG} scalar (add ActivationRMSMonitor)")
    ax.set_title("Final hidden state RMS (ln_f input)")
    ax.set_ylabel("RMS")


def _gain_panel(ax: Axes, fig: Figure, run: RunScalars, xmap) -> bool:
    tags = run.with_prefix(GAIN_PREFIX)
    if not tags:
        return False
    rows = [(t[len(GAIN_PREFIX):].replace("block_", ""), t) for t in tags]
    _heatmap(ax, fig, run, rows, "linear RMS gain RMS(y) / RMS(x)", "gain", xmap, GAIN_GID, "block/linear")
    ax.tick_params(axis="y", labelsize=6)
    return True


TAG_PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]

PANELS: tuple[str, ...] = tuple(dict.fromkeys(c.panel for c in CHARTS + gain_charts()))
"""The panels of ``sparkling plot``, one per chart of the TensorBoard layout (:data:`tb_layout.CHARTS`; several
charts may share one: the growth events mark every panel, the symmetry loop's boost is on the symmetry panel)."""
PANEL_GROUPS: dict[str, tuple[str, ...]] = {
    "rms": tuple(dict.fromkeys(c.panel for c in CHARTS if c.category == RMS_CATEGORY)),
    "all": PANELS,
}
"""Names that stand for several panels in ``--panels``."""
OPTIONAL_PANELS = ("gain",)  # drawn by default only when a run logged their tags (ActivationRMSMonitor per_linear)


def panel_of(chart: Chart) -> str:
    """The panel that draws ``chart`` (a chart of :func:`~lightning_sparkling.dashboards.tb_layout.rms_layout`).

    Raises:
        KeyError: when no panel draws it.
    """
    if chart.panel not in _DRAWERS:
        raise KeyError(f"no sparkling plot panel draws the TensorBoard chart {chart.title!r} (panel {chart.panel!r})")
    return chart.panel


def resolve_panels(panels: str | Sequence[str] | None, runs: Sequence[RunScalars] = ()) -> list[str]:
    """The panels to draw, in order.

    Args:
        panels: names of :data:`PANELS` or :data:`PANEL_GROUPS`, as a sequence or a comma-separated string;
            ``None``: every panel (the optional per-linear ``gain`` panel only when a run logged ``rms/gain/*``).
        runs: the runs (for the default).

    Raises:
        ValueError: for an unknown name, naming the choices.
    """
    if panels is None:
        has_gain = any(r.with_prefix(GAIN_PREFIX) for r in runs)
        return [p for p in PANELS if p not in OPTIONAL_PANELS or (p == "gain" and has_gain)]
    names = [n.strip() for n in (panels.split(",") if isinstance(panels, str) else panels) if n.strip()]
    if not names:
        raise ValueError(f"no panel given: choose from {', '.join(PANELS)} (or {', '.join(PANEL_GROUPS)})")
    out: list[str] = []
    for name in names:
        if name in PANEL_GROUPS:
            out.extend(PANEL_GROUPS[name])
        elif name in PANELS:
            out.append(name)
        else:
            groups = ", ".join(f"{g} ({' '.join(v)})" if g != "all" else g for g, v in PANEL_GROUPS.items())
            raise ValueError(f"unknown panel {name!r}: choose from {', '.join(PANELS)}, or {groups}")
    return list(dict.fromkeys(out))


def _grid(panels: list[str]) -> tuple[int, list[tuple[int, int, int]]]:
    """``ncols`` and per panel ``(row, first column, width)``: the loss panel two columns wide, then row-major."""
    ncols = 4 if len(panels) >= 5 else max(1, min(3, len(panels) + (panels[0] == "loss" and len(panels) > 1)))
    cells, row, colno = [], 0, 0
    for p in panels:
        width = 2 if p == "loss" and ncols >= 3 else 1
        if colno + width > ncols:
            row, colno = row + 1, 0
        cells.append((row, colno, width))
        colno += width
    return ncols, cells


def dashboard_figure(logdirs: Sequence[str | Path], x_axis: XAxis = "step", title: str | None = None,
                     heatmap_run: str | int | None = None, panels: str | Sequence[str] | None = None) -> Figure:
    """Build the dashboard :class:`~matplotlib.figure.Figure` (not saved; see :func:`plot_runs`).

    Args:
        logdirs: run event directories (or folders above them, or event files).
        x_axis: ``step``, ``tokens`` or ``flops``.
        title: the figure's title (default: the run names).
        heatmap_run: a run's name or index: the run of the heatmaps (block RMS, gains); by default the first run with
            ``rms/residual/*`` tags that grew, else the first with those tags.
        panels: the panels (see :func:`resolve_panels`; default all). Growth lines carry ``gid == "growth-event"``.

    Example::

        fig = dashboard_figure(["out/quickstart/logs"], panels="loss,symmetry")
    """
    from matplotlib.figure import Figure  # a bare Figure renders with Agg; pyplot and its global state unused
    from matplotlib.ticker import EngFormatter

    runs = _load_all(logdirs)
    chosen = resolve_panels(panels, runs)
    mappers, xlabel, eng = _x_mappers(runs, x_axis)
    colors = [TAG_PALETTE[k % len(TAG_PALETTE)] for k in range(len(runs))]
    heat_run_idx = _pick_heatmap_run(runs, heatmap_run)
    heat = (runs[heat_run_idx], mappers[heat_run_idx])

    ncols, cells = _grid(chosen)
    nrows = cells[-1][0] + 1
    fig = Figure(figsize=(4.6 * ncols, 1.0 + 4.1 * nrows), layout="constrained")
    gs = fig.add_gridspec(nrows, ncols)
    line_axes = []
    for name, (row, col, width) in zip(chosen, cells):
        ax = fig.add_subplot(gs[row, col:col + width], label=PANEL_LABEL_PREFIX + name)
        if _DRAWERS[name](ax, fig, runs, mappers, colors, heat):
            line_axes.append(ax)
        ax.set_xlabel(xlabel)
        if eng:
            ax.xaxis.set_major_formatter(EngFormatter())
    if line_axes:  # the line panels share the x range (a symmetry curve starts at its growth, the loss at 0)
        lo = min(ax.get_xlim()[0] for ax in line_axes)
        hi = max(ax.get_xlim()[1] for ax in line_axes)
        for ax in line_axes:
            ax.set_xlim(lo, hi)
    for ax in line_axes:
        ax.grid(True, alpha=0.3)
        if ax.get_legend() is None and ax.get_legend_handles_labels()[0]:  # the symmetry panel makes its own
            ax.legend(fontsize=8, loc="best", framealpha=0.85)
    default_title = "SPARKLING training dashboard: " + ", ".join(r.name for r in runs)
    fig.suptitle(title or default_title, fontsize=13)
    return fig


def _line_panel(panel):
    """A drawer of one line panel (``panel(ax, runs, mappers, colors)``), which always draws (an empty panel says
    why)."""
    def draw(ax, fig, runs, mappers, colors, heat) -> bool:
        panel(ax, runs, mappers, colors)
        return True

    return draw


def _block_heatmap(prefix: str, ptitle: str, clabel: str):
    def draw(ax, fig, runs, mappers, colors, heat) -> bool:
        if not _heatmap_panel(ax, fig, heat[0], prefix, ptitle, clabel, heat[1]):
            _empty(ax, f"no {prefix}* scalars (add ActivationRMSMonitor)")
            ax.set_title(ptitle)
        _name_heatmap_run(ax, runs, heat[0])
        return False

    return draw


def _draw_gain(ax, fig, runs, mappers, colors, heat) -> bool:
    if not _gain_panel(ax, fig, heat[0], heat[1]):
        _empty(ax, f"no {GAIN_PREFIX}* scalars (ActivationRMSMonitor(per_linear=True))")
        ax.set_title("linear RMS gain RMS(y) / RMS(x)")
    _name_heatmap_run(ax, runs, heat[0])
    return False


def _name_heatmap_run(ax: Axes, runs: list[RunScalars], run: RunScalars) -> None:
    """With several runs a heatmap shows one of them: its title says so and how to draw another."""
    if len(runs) > 1:
        base = ax.get_title().split("\n")[0]
        ax.set_title(f"{base}\n[{run.name}] (1 of {len(runs)} runs; --heatmap-run NAME for another)", fontsize=10)


_DRAWERS = {
    "loss": _line_panel(_loss_panel),
    "lr": _line_panel(_lr_panel),
    "symmetry": _line_panel(_symmetry_panel),
    "residual": _block_heatmap(*RMS_PANELS[0]),
    "attn_ratio": _block_heatmap(*RMS_PANELS[1]),
    "mlp_ratio": _block_heatmap(*RMS_PANELS[2]),
    "final_hidden": _line_panel(_final_hidden_panel),
    "gain": _draw_gain,
}
"""Per panel: ``draw(ax, fig, runs, mappers, colors, (heatmap run, its mapper)) -> whether it is a line plot``."""


def plot_runs(
    logdirs: Sequence[str | Path],
    out: str | Path,
    x_axis: XAxis = "step",
    *,
    title: str | None = None,
    heatmap_run: str | int | None = None,
    panels: str | Sequence[str] | None = None,
    dpi: int = 130,
) -> Path:
    """Draw the dashboard of ``logdirs`` (see :func:`dashboard_figure`) and save it to ``out`` (format from the
    suffix).

    Returns:
        The path written.
    """
    out = Path(out)
    fig = dashboard_figure(logdirs, x_axis=x_axis, title=title, heatmap_run=heatmap_run, panels=panels)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    return out


class _Parser(argparse.ArgumentParser):
    """argparse, with a refusal printed as one ``error:`` line (exit status 2), without the usage line."""

    def error(self, message: str):  # type: ignore[override]
        import sys

        sys.stderr.write(f"error: {message}\n")
        raise SystemExit(2)


def main_plot(argv: Sequence[str] | None = None) -> int:
    """``sparkling plot LOGDIR... --out FILE.png [--x step|tokens|flops] [--panels P,...] [--title T]
    [--heatmap-run NAME] [--dpi N]``.

    Returns 0 after writing the figure; a bad argument exits with status 2 and one ``error:`` line.
    """
    groups = ", ".join(PANEL_GROUPS)
    parser = _Parser(prog="sparkling plot", description=__doc__.split("\n\n")[0])
    parser.add_argument("logdirs", nargs="+", help="run event directories (or folders above them)")
    parser.add_argument("--out", "-o", default="dashboard.png", help="output image (png, pdf, svg)")
    parser.add_argument("--x", dest="x_axis", choices=("step", "tokens", "flops"), default="step")
    parser.add_argument("--panels", default=None,
                        help=f"comma-separated panels, of {', '.join(PANELS)} (or {groups}); default: all (gain only "
                             "when logged)")
    parser.add_argument("--title", default=None)
    parser.add_argument("--heatmap-run", default=None, help="run (name) whose RMS heatmaps are drawn")
    parser.add_argument("--dpi", type=int, default=130)
    args = parser.parse_args(None if argv is None else list(argv))
    if args.panels is not None:
        try:
            resolve_panels(args.panels)
        except ValueError as err:
            parser.error(f"--panels {args.panels}: {err}")
    for logdir in args.logdirs:  # user errors: one `error:` line (exit status 2), no traceback
        try:
            find_event_dirs(logdir)
        except FileNotFoundError as err:
            parser.error(f"{err}: give the logs/ folder of a run (e.g. out/quickstart/logs), where `sparkling "
                         "pretrain` writes its TensorBoard events")
    out = Path(args.out)
    if not out.parent.is_dir():
        parser.error(f"--out {args.out}: the folder {out.parent} does not exist; create it first")
    try:
        path = plot_runs(args.logdirs, args.out, x_axis=args.x_axis, title=args.title, heatmap_run=args.heatmap_run,
                         panels=args.panels, dpi=args.dpi)
    except ValueError as err:  # an unknown --heatmap-run, an image format matplotlib cannot write
        option = "--heatmap-run" if "heatmap_run" in str(err) else f"--out {args.out}"
        parser.error(f"{option}: {err}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main_plot())
