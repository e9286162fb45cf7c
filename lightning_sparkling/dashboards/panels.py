"""The panels of ``sparkling plot``, each drawn on one matplotlib ``Axes`` from :class:`RunScalars`: the line panels
(loss, learning rates, symmetry, final hidden RMS), the block heatmaps, the growth lines and their annotations, and
the x axis (steps, tokens or FLOPs). :mod:`~lightning_sparkling.dashboards.plotting` lays them out in one figure.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING

import numpy as np

from lightning_sparkling.dashboards.scalars import (
    BOOST_PREFIX,
    FINAL_HIDDEN_TAG,
    FLOPS_TAGS,
    GAIN_PREFIX,
    LR_NEW_PREFIX,
    RMS_PANELS,
    SYMMETRY_PREFIX,
    TOKEN_TAGS,
    TRAIN_LOSS_TAGS,
    VAL_LOSS_TAGS,
    RunScalars,
    XAxis,
)

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

GROWTH_GID = "growth-event"  # gid of every growth line (tests and post-processing can find them)
HEATMAP_GID = "rms-heatmap"  # gid of every block heatmap's QuadMesh (residual, attention and MLP ratios)
GAIN_GID = "rms-gain-heatmap"  # gid of the per-linear gain heatmap's QuadMesh
PANEL_LABEL_PREFIX = "panel:"  # label of each panel's axes: "panel:" + its name (fig.axes in panel order)
TAG_GID_PREFIX = "tag:"  # gid of a curve drawn from a scalar: "tag:" + the tag
DEPTH_GID = "depth-change"  # gid of every "2→4 blocks" annotation
MISSING_COLOR = "0.82"  # heatmap cells of a block not (yet) in the model

TAG_PALETTE = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


# x axis
# --------------------------------------------------------------------------------------------------------------------


def x_mappers(runs: list[RunScalars], x_axis: XAxis) -> tuple[list, str, bool]:
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
        mappers.append(functools.partial(interp_extrapolate, steps=steps.astype(np.float64), values=values))
    return mappers, ("tokens seen" if x_axis == "tokens" else "training FLOPs"), True


def interp_extrapolate(s, steps: np.ndarray, values: np.ndarray) -> np.ndarray:
    s = np.asarray(s, dtype=np.float64)
    out = np.interp(s, steps, values)
    rate = (values[-1] - values[0]) / max(steps[-1] - steps[0], 1.0)
    out = np.where(s > steps[-1], values[-1] + (s - steps[-1]) * rate, out)
    return np.where(s < steps[0], values[0] - (steps[0] - s) * rate, out)


# --------------------------------------------------------------------------------------------------------------------
# drawing
# --------------------------------------------------------------------------------------------------------------------


def ema(values: np.ndarray, weight: float) -> np.ndarray:
    out = np.empty_like(values)
    acc, norm = 0.0, 0.0
    for k, v in enumerate(values):  # debiased EMA, as TensorBoard's smoothing slider
        acc = weight * acc + (1 - weight) * v
        norm = weight * norm + (1 - weight)
        out[k] = acc / norm
    return out


def tag_lines(lines: list, tag: str) -> None:
    """Mark the lines drawn from ``tag`` (``gid == "tag:<tag>"``: tests and post-processing find a tag's curve)."""
    for line in lines:
        line.set_gid(TAG_GID_PREFIX + tag)


def _blocks_text(old: int, new: int) -> str:
    return f"{old}\u2192{new} blocks"


def growth_lines(ax: Axes, run: RunScalars, xmap, color, label: bool, annotate: bool = False,
                  single: bool = False) -> None:
    depth = {step: (a, b) for step, a, b in run.depth_changes()} if annotate else {}
    for k, (step, stage) in enumerate(run.growth_steps()):
        x = float(xmap([step])[0])
        line = ax.axvline(x, color=color, linestyle="--", linewidth=1.3, alpha=0.9,
                          label=(line_label(run, "growth", single) if label and k == 0 else None))
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
                tag_lines(ax.plot(x, values, color=color, alpha=0.25, linewidth=0.8), tag)
                tag_lines(ax.plot(x, ema(values, 0.8 if len(values) < 300 else 0.95), color=color, linewidth=1.8,
                             label=line_label(run, "train (smoothed)", single)), tag)
            else:
                tag_lines(ax.plot(x, values, color=color, linewidth=1.8, label=line_label(run, "train", single)), tag)
            drew = True
        vtag = run.first(VAL_LOSS_TAGS)
        if vtag is not None:
            steps, values = run.scalars[vtag]
            tag_lines(ax.plot(xmap(steps), values, color=color, linestyle=":", marker="o", markersize=4, linewidth=1.4,
                         label=line_label(run, "val", single)), vtag)
            drew = True
        growth_lines(ax, run, xmap, color, label=True, annotate=True, single=single)
    if not drew:
        empty_panel(ax, "no train_loss / val_loss scalars")
    ax.set_title("Loss")
    ax.set_ylabel("cross-entropy loss")
    robust_ylim(ax, runs)


def robust_ylim(ax: Axes, runs: list[RunScalars]) -> None:
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
            label = line_label(run, f"{tag} (old entries)", single)
            tag_lines(ax.plot(xmap(steps), values, color=color, linewidth=1.6, label=label), tag)
            drew = True
        for k, tag in enumerate(run.with_prefix(LR_NEW_PREFIX)):
            steps, values = run.scalars[tag]
            label = line_label(run, f"new entries, {tag.rsplit('/', 1)[-1].replace('_', ' ')}", single)
            tag_lines(ax.plot(xmap(steps), values, color=color, linewidth=1.6, linestyle=styles[k % len(styles)],
                              label=label), tag)
            drew = True
        growth_lines(ax, run, xmap, color, label=False)
    if not drew:
        empty_panel(ax, "no lr-* / growth/lr_new/* scalars")
    ax.set_title("Learning rate: old vs new entries")
    ax.set_ylabel("learning rate")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))


def draw_heatmap(ax: Axes, fig: Figure, run: RunScalars, rows: list[tuple[str, str]], title: str, cbar_label: str, xmap,
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
    norm: Normalize
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
    growth_lines(ax, run, xmap, "white", label=False)


def heatmap_panel(ax: Axes, fig: Figure, run: RunScalars, prefix: str, title: str, cbar_label: str, xmap) -> bool:
    """The block x step heatmap of the ``{prefix}NN`` tags (one row per block position); False if none."""
    tags = {int(t[len(prefix):]): t for t in run.with_prefix(prefix) if t[len(prefix):].isdigit()}
    if not tags:
        return False
    rows = [(str(b), tags[b]) for b in sorted(tags)]
    draw_heatmap(ax, fig, run, rows, title, cbar_label, xmap, HEATMAP_GID, "block position")
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


def empty_panel(ax: Axes, text: str) -> None:
    """Say in the middle of an empty panel why it is empty, wrapped to stay inside the axes (off its axis labels)."""
    import textwrap

    ax.text(0.5, 0.5, textwrap.fill(text, 32), ha="center", va="center", transform=ax.transAxes, color="0.4",
            fontsize=9)


def pick_heatmap_run(runs: list[RunScalars], heatmap_run: str | int | None) -> int:
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


def line_label(run: RunScalars, text: str, single: bool) -> str:
    return text if single else f"{run.name}: {text}"


def _symmetry_panel(ax: Axes, runs: list[RunScalars], mappers, colors) -> None:
    """``symmetry/stage_k/<channel>`` (mean cosine of each copy to its source) of every run; the symmetry loop's
    ``growth/symmetry_boost/stage_k`` (the new entries' LR multiplier) on the right axis."""
    single, drew, twin = len(runs) == 1, False, None
    styles = ["-", "--", "-.", ":"]
    for run, xmap, color in zip(runs, mappers, colors):
        for k, tag in enumerate(run.with_prefix(SYMMETRY_PREFIX)):
            steps, values = run.scalars[tag]
            stage, _, axis = tag[len(SYMMETRY_PREFIX):].partition("/")
            tag_lines(ax.plot(xmap(steps), values, linewidth=1.6,
                         color=TAG_PALETTE[k % len(TAG_PALETTE)] if single else color,
                         linestyle="-" if single else styles[k % len(styles)],
                         label=line_label(run, f"{stage.replace('_', ' ')}: {axis}", single)), tag)
            drew = True
        for tag in run.with_prefix(BOOST_PREFIX):
            if twin is None:
                twin = ax.twinx()
                twin.set_label(ax.get_label())  # the same panel
            steps, values = run.scalars[tag]
            tag_lines(twin.step(xmap(steps), values, where="post", color="0.35" if single else color, linestyle=":",
                           linewidth=1.4,
                           label=line_label(run, f"LR boost, {tag.rsplit('/', 1)[-1].replace('_', ' ')}", single)),
                 tag)
            drew = True
        growth_lines(ax, run, xmap, color, label=False)
    if not drew:
        empty_panel(ax, "no symmetry/* scalars (a growth with copied channels logs them)")
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
            tag_lines(ax.plot(xmap(steps), values, color=color, linewidth=1.6, marker=".", markersize=4,
                         label=line_label(run, FINAL_HIDDEN_TAG, len(runs) == 1)), FINAL_HIDDEN_TAG)
            drew = True
        growth_lines(ax, run, xmap, color, label=False)
    if not drew:
        empty_panel(ax, f"no {FINAL_HIDDEN_TAG} scalar (add ActivationRMSMonitor)")
    ax.set_title("Final hidden state RMS (ln_f input)")
    ax.set_ylabel("RMS")


def _gain_panel(ax: Axes, fig: Figure, run: RunScalars, xmap) -> bool:
    tags = run.with_prefix(GAIN_PREFIX)
    if not tags:
        return False
    rows = [(t[len(GAIN_PREFIX):].replace("block_", ""), t) for t in tags]
    draw_heatmap(ax, fig, run, rows, "linear RMS gain RMS(y) / RMS(x)", "gain", xmap, GAIN_GID, "block/linear")
    ax.tick_params(axis="y", labelsize=6)
    return True


def _line_panel(panel):
    """A drawer of one line panel (``panel(ax, runs, mappers, colors)``), which always draws (an empty panel says
    why)."""
    def draw(ax, fig, runs, mappers, colors, heat) -> bool:
        panel(ax, runs, mappers, colors)
        return True

    return draw


def _block_heatmap(prefix: str, ptitle: str, clabel: str):
    def draw(ax, fig, runs, mappers, colors, heat) -> bool:
        if not heatmap_panel(ax, fig, heat[0], prefix, ptitle, clabel, heat[1]):
            empty_panel(ax, f"no {prefix}* scalars (add ActivationRMSMonitor)")
            ax.set_title(ptitle)
        _name_heatmap_run(ax, runs, heat[0])
        return False

    return draw


def _draw_gain(ax, fig, runs, mappers, colors, heat) -> bool:
    if not _gain_panel(ax, fig, heat[0], heat[1]):
        empty_panel(ax, f"no {GAIN_PREFIX}* scalars (ActivationRMSMonitor(per_linear=True))")
        ax.set_title("linear RMS gain RMS(y) / RMS(x)")
    _name_heatmap_run(ax, runs, heat[0])
    return False


def _name_heatmap_run(ax: Axes, runs: list[RunScalars], run: RunScalars) -> None:
    """With several runs a heatmap shows one of them: its title says so and how to draw another."""
    if len(runs) > 1:
        base = ax.get_title().split("\n")[0]
        ax.set_title(f"{base}\n[{run.name}] (1 of {len(runs)} runs; --heatmap-run NAME for another)", fontsize=10)


DRAWERS = {
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
