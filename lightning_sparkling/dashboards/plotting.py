"""Report figures from TensorBoard event files: loss, learning rates of old and new entries, activation RMS.

``plot_runs([logdir, ...], "dashboard.png")`` reads the scalars of every run with TensorBoard's own
``EventAccumulator`` and draws one figure (matplotlib, Agg backend):

* **loss** of every run (``train_loss``, lightly smoothed over a faint raw curve, and ``val_loss`` when logged);
* **learning rate** of old entries (``lr-*`` tags of Lightning's ``LearningRateMonitor``) and of each stage's new
  entries (``growth/lr_new/stage_*``);
* **heatmaps** (block x step) of ``rms/residual/block_*`` and, when logged, ``rms/attn_ratio/block_*`` and
  ``rms/mlp_ratio/block_*`` for one run: the first that has them and grew, else the first that has them, or the
  one named by ``heatmap_run`` (see
  :class:`~lightning_sparkling.callbacks.rms_monitor.ActivationRMSMonitor`).

Growth steps (the steps of a ``growth/event`` scalar, value = stage index + 1) are drawn as vertical dashed lines
on every panel.

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
``sparkling plot LOGDIR... --out FILE.png [--x step|tokens|flops] [--heatmap-run NAME]`` (:func:`main_plot`).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["DEPTH_GID", "GROWTH_GID", "HEATMAP_GID", "RunScalars", "dashboard_figure", "find_event_dirs", "load_run",
           "main_plot", "plot_runs"]

XAxis = Literal["step", "tokens", "flops"]

TRAIN_LOSS_TAGS = ("train_loss", "train_loss_step", "train/loss", "loss")
VAL_LOSS_TAGS = ("val_loss", "val_loss_epoch", "val/loss")
TOKEN_TAGS = ("tokens", "throughput/tokens", "train/tokens", "train|lengths")
FLOPS_TAGS = ("flops", "throughput/flops", "train/flops")
GROWTH_TAG = "growth/event"
GROWTH_GID = "growth-event"  # gid of every growth line (tests and post-processing can find them)
HEATMAP_GID = "rms-heatmap"  # gid of every heatmap's QuadMesh
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

    def first(self, tags: Sequence[str]) -> str | None:
        """The first of ``tags`` this run logged."""
        return next((t for t in tags if t in self.scalars), None)

    def with_prefix(self, prefix: str) -> list[str]:
        return sorted(t for t in self.scalars if t.startswith(prefix))

    def growth_steps(self) -> list[tuple[int, int]]:
        """``[(step, stage index)]`` from the ``growth/event`` scalar (value = stage index + 1).

        The first step of each distinct positive value counts (a marker re-logged on later steps, as Lightning's
        ``self.log`` does with a value logged once, does not add growths).
        """
        if GROWTH_TAG not in self.scalars:
            return []
        steps, values = self.scalars[GROWTH_TAG]
        first: dict[int, int] = {}
        for s, v in zip(steps, values):
            if v > 0 and math.isfinite(v):
                first.setdefault(int(round(v)), int(s))
        return sorted((s, v - 1) for v, s in first.items())

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
    return run


def _run_name(path: Path) -> str:
    path = path.parent if path.is_file() else path
    if path.name.startswith("version_") and path.parent.name:
        return f"{path.parent.name}/{path.name}"
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


def _blocks_text(old: int, new: int) -> str:
    return f"{old}\u2192{new} blocks"


def _growth_lines(ax: Axes, run: RunScalars, xmap, color, label: bool, annotate: bool = False) -> None:
    depth = {step: (a, b) for step, a, b in run.depth_changes()} if annotate else {}
    for k, (step, stage) in enumerate(run.growth_steps()):
        x = float(xmap([step])[0])
        line = ax.axvline(x, color=color, linestyle="--", linewidth=1.3, alpha=0.9,
                          label=(f"growth ({run.name})" if label and k == 0 else None))
        line.set_gid(GROWTH_GID)
        if annotate:
            text = f"stage {stage}" + (f", {_blocks_text(*depth[step])}" if step in depth else "")
            ax.annotate(text, xy=(x, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -12),
                        textcoords="offset points", fontsize=8, color=color)


def _loss_panel(ax: Axes, runs: list[RunScalars], mappers, colors) -> None:
    drew = False
    for run, xmap, color in zip(runs, mappers, colors):
        tag = run.first(TRAIN_LOSS_TAGS)
        if tag is not None:
            steps, values = run.scalars[tag]
            x = xmap(steps)
            if len(values) > 30:
                ax.plot(x, values, color=color, alpha=0.25, linewidth=0.8)
                ax.plot(x, _ema(values, 0.8 if len(values) < 300 else 0.95), color=color, linewidth=1.8,
                        label=f"{run.name}: train (smoothed)")
            else:
                ax.plot(x, values, color=color, linewidth=1.8, label=f"{run.name}: train")
            drew = True
        vtag = run.first(VAL_LOSS_TAGS)
        if vtag is not None:
            steps, values = run.scalars[vtag]
            ax.plot(xmap(steps), values, color=color, linestyle=":", marker="o", markersize=4, linewidth=1.4,
                    label=f"{run.name}: val")
            drew = True
        _growth_lines(ax, run, xmap, color, label=True, annotate=True)
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
    drew = False
    styles = ["--", "-.", ":"]
    for run, xmap, color in zip(runs, mappers, colors):
        for tag in run.with_prefix("lr-"):
            steps, values = run.scalars[tag]
            ax.plot(xmap(steps), values, color=color, linewidth=1.6, label=f"{run.name}: {tag} (old entries)")
            drew = True
        for k, tag in enumerate(run.with_prefix("growth/lr_new/")):
            steps, values = run.scalars[tag]
            ax.plot(xmap(steps), values, color=color, linewidth=1.6, linestyle=styles[k % len(styles)],
                    label=f"{run.name}: new entries, {tag.rsplit('/', 1)[-1].replace('_', ' ')}")
            drew = True
        _growth_lines(ax, run, xmap, color, label=False)
    if not drew:
        _empty(ax, "no lr-* / growth/lr_new/* scalars")
    ax.set_title("Learning rate: old vs new entries")
    ax.set_ylabel("learning rate")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))


def _heatmap_panel(ax: Axes, fig: Figure, run: RunScalars, prefix: str, title: str, cbar_label: str, xmap) -> bool:
    tags = [t for t in run.with_prefix(prefix) if t[len(prefix):].isdigit()]
    if not tags:
        return False
    blocks = sorted(int(t[len(prefix):]) for t in tags)
    steps = np.array(sorted({int(s) for t in tags for s in run.scalars[t][0]}), dtype=np.int64)
    grid = np.full((len(blocks), len(steps)), np.nan)
    col = {int(s): k for k, s in enumerate(steps)}
    for r, b in enumerate(blocks):
        st, val = run.scalars[f"{prefix}{b:02d}"] if f"{prefix}{b:02d}" in run.scalars else run.scalars[f"{prefix}{b}"]
        for s, v in zip(st, val):
            grid[r, col[int(s)]] = v
    from matplotlib.colors import LogNorm, Normalize

    finite = grid[np.isfinite(grid)]
    positive = finite[finite > 0]
    if len(positive) == len(finite) and len(positive) and positive.max() / positive.min() > 8:
        norm = LogNorm(vmin=positive.min(), vmax=positive.max())
    else:
        norm = Normalize(vmin=finite.min() if len(finite) else 0, vmax=finite.max() if len(finite) else 1)
    x = xmap(steps)
    from matplotlib import colormaps

    cmap = colormaps["viridis"].with_extremes(bad=MISSING_COLOR)  # a block not in the model yet: grey, not a colour
    mesh = ax.pcolormesh(x, np.arange(len(blocks)), np.ma.masked_invalid(grid), shading="nearest",
                         cmap=cmap, norm=norm)
    mesh.set_gid(HEATMAP_GID)
    cb = fig.colorbar(mesh, ax=ax, pad=0.02, fraction=0.05)
    cb.set_label(cbar_label + (" (log scale)" if isinstance(norm, LogNorm) else ""))
    if isinstance(norm, LogNorm):
        from matplotlib.ticker import FuncFormatter

        plain = FuncFormatter(lambda v, _: f"{v:.3g}")
        cb.ax.yaxis.set_major_formatter(plain)
        cb.ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:.2g}" if _minor_label(v, norm) else ""))
    ax.set_yticks(np.arange(len(blocks)))
    ax.set_yticklabels([str(b) for b in blocks] if len(blocks) <= 16 else
                       [str(b) if k % max(1, len(blocks) // 8) == 0 else "" for k, b in enumerate(blocks)])
    ax.set_ylabel("block position" + (" (grey: not in the model yet)" if np.isnan(grid).any() else ""))
    ax.set_title(f"{title}\n[{run.name}]", fontsize=10)
    _growth_lines(ax, run, xmap, "white", label=False)
    for step, old, new in run.depth_changes(prefix):
        text = ax.annotate(_blocks_text(old, new), xy=(float(xmap([step])[0]), len(blocks) - 0.5), xycoords="data",
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
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")


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


def dashboard_figure(logdirs: Sequence[str | Path], x_axis: XAxis = "step", title: str | None = None,
                     heatmap_run: str | int | None = None) -> Figure:
    """Build the dashboard :class:`~matplotlib.figure.Figure` (not saved; see :func:`plot_runs`).

    ``heatmap_run`` (a run's name or index) picks the run of the RMS heatmaps; by default the first run with
    ``rms/residual/*`` tags that grew (has ``growth/event``), else the first with those tags.
    Growth lines carry ``gid == "growth-event"``.
    """
    from matplotlib.figure import Figure  # a bare Figure renders with Agg; pyplot and its global state unused
    from matplotlib.ticker import EngFormatter

    runs = _load_all(logdirs)
    mappers, xlabel, eng = _x_mappers(runs, x_axis)
    palette = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
    colors = [palette[k % len(palette)] for k in range(len(runs))]

    heat_run_idx = _pick_heatmap_run(runs, heatmap_run)
    heat_run = runs[heat_run_idx]
    panels = [p for p in RMS_PANELS if heat_run.with_prefix(p[0])] or [RMS_PANELS[0]]

    fig = Figure(figsize=(16, 9.5), layout="constrained")
    gs = fig.add_gridspec(2, 6, height_ratios=[1.15, 1.0])
    ax_loss = fig.add_subplot(gs[0, :4])
    ax_lr = fig.add_subplot(gs[0, 4:])
    _loss_panel(ax_loss, runs, mappers, colors)
    _lr_panel(ax_lr, runs, mappers, colors)
    width = 6 // len(panels)
    heat_axes = []
    for k, (prefix, ptitle, clabel) in enumerate(panels):
        ax = fig.add_subplot(gs[1, k * width:(k + 1) * width])
        if not _heatmap_panel(ax, fig, heat_run, prefix, ptitle, clabel, mappers[heat_run_idx]):
            _empty(ax, f"no {prefix}* scalars (add ActivationRMSMonitor)")
            ax.set_title(ptitle)
        heat_axes.append(ax)

    for ax in [ax_loss, ax_lr, *heat_axes]:
        ax.set_xlabel(xlabel)
        if eng:
            ax.xaxis.set_major_formatter(EngFormatter())
    for ax in (ax_loss, ax_lr):
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="best", framealpha=0.85)
    default_title = "SPARKLING training dashboard: " + ", ".join(r.name for r in runs)
    fig.suptitle(title or default_title, fontsize=13)
    return fig


def plot_runs(
    logdirs: Sequence[str | Path],
    out: str | Path,
    x_axis: XAxis = "step",
    *,
    title: str | None = None,
    heatmap_run: str | int | None = None,
    dpi: int = 130,
) -> Path:
    """Draw the dashboard of ``logdirs`` (see the module docstring) and save it to ``out`` (format from the suffix).

    Returns:
        The path written.
    """
    out = Path(out)
    fig = dashboard_figure(logdirs, x_axis=x_axis, title=title, heatmap_run=heatmap_run)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi)
    return out


def main_plot(argv: Sequence[str] | None = None) -> int:
    """``sparkling plot LOGDIR... --out FILE.png [--x step|tokens|flops] [--title T] [--heatmap-run NAME] [--dpi N]``.

    Returns 0 after writing the figure (argparse exits with status 2 on bad arguments).
    """
    parser = argparse.ArgumentParser(prog="sparkling plot", description=__doc__.split("\n\n")[0])
    parser.add_argument("logdirs", nargs="+", help="run event directories (or folders above them)")
    parser.add_argument("--out", "-o", default="dashboard.png", help="output image (png, pdf, svg)")
    parser.add_argument("--x", dest="x_axis", choices=("step", "tokens", "flops"), default="step")
    parser.add_argument("--title", default=None)
    parser.add_argument("--heatmap-run", default=None, help="run (name) whose RMS heatmaps are drawn")
    parser.add_argument("--dpi", type=int, default=130)
    args = parser.parse_args(None if argv is None else list(argv))
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
                         dpi=args.dpi)
    except ValueError as err:  # an unknown --heatmap-run, an image format matplotlib cannot write
        option = "--heatmap-run" if "heatmap_run" in str(err) else f"--out {args.out}"
        parser.error(f"{option}: {err}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main_plot())

