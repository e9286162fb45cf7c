"""Report figures from TensorBoard event files: every chart of the TensorBoard layout, as one image.

``plot_runs([logdir, ...], "dashboard.png")`` reads the scalars of every run with TensorBoard's own
``EventAccumulator`` and draws one figure (matplotlib, Agg backend) with one panel per chart of the custom-scalars
layout (:data:`lightning_sparkling.dashboards.tb_layout.CHARTS`, so the two cannot drift; :data:`PANELS`):

* ``loss``: ``train_loss`` of every run (lightly smoothed over a faint raw curve) and ``val_loss`` when logged;
* ``lr``: the learning rate of old entries (``lr-*`` tags of Lightning's ``LearningRateMonitor``) and of each stage's
  new entries (``growth/lr_new/stage_*``);
* ``symmetry``: ``symmetry/stage_k/<channel>`` (mean cosine of the copied channels to their sources, per channel
  dimension: widths, heads' ``attn_q*``, depth's ``n_layer``) and, on the right axis, the symmetry loop's LR boost
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
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lightning_sparkling.dashboards.panels import (  # noqa: F401 (the names of before stay importable from here)
    DRAWERS,
    DEPTH_GID,
    GAIN_GID,
    GROWTH_GID,
    HEATMAP_GID,
    MISSING_COLOR,
    PANEL_LABEL_PREFIX,
    TAG_GID_PREFIX,
    TAG_PALETTE,
    empty_panel,
    ema,
    growth_lines,
    draw_heatmap,
    heatmap_panel,
    interp_extrapolate,
    line_label,
    pick_heatmap_run,
    robust_ylim,
    tag_lines,
    x_mappers,
)
from lightning_sparkling.dashboards.scalars import (  # noqa: F401 (the names of before stay importable from here)
    BOOST_PREFIX,
    FINAL_HIDDEN_TAG,
    FLOPS_TAGS,
    GAIN_PREFIX,
    GROWTH_TAG,
    LR_NEW_PREFIX,
    RMS_PANELS,
    SYMMETRY_PREFIX,
    TOKEN_TAGS,
    TRAIN_LOSS_TAGS,
    VAL_LOSS_TAGS,
    RunScalars,
    XAxis,
    _load_all,
    _run_name,
    _summary_growths,
    find_event_dirs,
    load_run,
)
from lightning_sparkling.dashboards.tb_layout import CHARTS, RMS as RMS_CATEGORY, Chart, gain_charts

if TYPE_CHECKING:  # matplotlib is imported when a figure is drawn
    from matplotlib.figure import Figure

__all__ = ["DEPTH_GID", "GAIN_GID", "GROWTH_GID", "HEATMAP_GID", "PANELS", "PANEL_GROUPS", "RunScalars",
           "dashboard_figure", "find_event_dirs", "load_run", "main_plot", "panel_of", "plot_runs", "resolve_panels"]


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
    if chart.panel not in DRAWERS:
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
    mappers, xlabel, eng = x_mappers(runs, x_axis)
    colors = [TAG_PALETTE[k % len(TAG_PALETTE)] for k in range(len(runs))]
    heat_run_idx = pick_heatmap_run(runs, heatmap_run)
    heat = (runs[heat_run_idx], mappers[heat_run_idx])

    ncols, cells = _grid(chosen)
    nrows = cells[-1][0] + 1
    fig = Figure(figsize=(4.6 * ncols, 1.0 + 4.1 * nrows), layout="constrained")
    gs = fig.add_gridspec(nrows, ncols)
    line_axes = []
    for name, (row, col, width) in zip(chosen, cells):
        ax = fig.add_subplot(gs[row, col:col + width], label=PANEL_LABEL_PREFIX + name)
        if DRAWERS[name](ax, fig, runs, mappers, colors, heat):
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

    def error(self, message: str):
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
