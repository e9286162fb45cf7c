"""TensorBoard custom-scalars layout for a SPARKLING run (the "CUSTOM SCALARS" tab).

One chart per quantity overlays every transformer block (tag regexes, matched from the start of the tag name
as TensorBoard's custom-scalars plugin does), next to the loss, the learning rates of old and new entries, the
symmetry metrics and the growth events:

==================  ===============================  ========================================================
category            chart                            tags (regex)
==================  ===============================  ========================================================
SPARKLING / loss    loss (growth/event marks ...)    ``train_loss``, ``val_loss``, ``growth/event``
SPARKLING / growth  learning rate: old vs new        ``lr-.*`` (LearningRateMonitor), ``growth/lr_new/.*``
                    symmetry of copied channels      ``symmetry/.*`` (``symmetry/stage_k/<channel>``)
                    symmetry loop: LR boost          ``growth/symmetry_boost/.*``
                    growth events                    ``growth/event`` (stage index + 1 at the growth step)
SPARKLING / RMS     residual stream RMS (inputs)     ``rms/residual/block_.*``
                    attention ratio                  ``rms/attn_ratio/block_.*``
                    MLP ratio                        ``rms/mlp_ratio/block_.*``
                    final hidden state RMS           ``rms/final_hidden``
SPARKLING / gains   linear RMS gain, block NN        ``rms/gain/block_NN/.*`` (one chart per block; only with
                                                     ``per_linear=True`` and ``n_blocks`` known, else one chart)
==================  ===============================  ========================================================

The layout is written to the event directory (tag ``custom_scalars__config__``) at fit start, and again (at the
growth's step) by :class:`~lightning_sparkling.callbacks.rms_monitor.ActivationRMSMonitor` when a depth growth
changes the block count; TensorBoard's custom-scalars plugin reads the *last* layout of each run and merges the
runs' layouts under the same logdir. Block tags are position based (``block_NN`` is the block at position ``NN``
at that step, see the monitor's docstring); the overlay regexes match every block whatever the count, and the
per-block gain charts are listed for the count at the time of writing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CHARTS", "Chart", "LAYOUT_TAG", "gain_charts", "layout_charts", "rms_layout", "write_layout"]

LAYOUT_TAG = "custom_scalars__config__"

Layout = dict[str, dict[str, list[Any]]]


@dataclass(frozen=True)
class Chart:
    """One chart of the layout.

    Args:
        category: the custom-scalars category (a collapsible group in TensorBoard).
        title: the chart's title.
        tags: tag regexes, matched from the start of the tag name.
        panel: the ``sparkling plot`` panel that draws these tags
            (:data:`lightning_sparkling.dashboards.plotting.PANELS`; a test keeps every chart drawn).
    """

    category: str
    title: str
    tags: tuple[str, ...]
    panel: str


LOSS, GROWTH, RMS, GAIN = ("SPARKLING / loss", "SPARKLING / growth", "SPARKLING / activation RMS",
                           "SPARKLING / linear RMS gain")

CHARTS: tuple[Chart, ...] = (
    Chart(LOSS, "loss (growth/event = stage+1 at each growth step)", ("train_loss", "val_loss", "growth/event$"),
          "loss"),
    Chart(GROWTH, "learning rate: old entries (lr-*) vs new entries (growth/lr_new/*)", ("lr-.*", "growth/lr_new/.*"),
          "lr"),
    Chart(GROWTH, "symmetry of copied channels", ("symmetry/.*",), "symmetry"),
    Chart(GROWTH, "symmetry loop: new entries' LR boost", ("growth/symmetry_boost/.*",), "symmetry"),
    Chart(GROWTH, "growth events (stage index + 1)", ("growth/event$",), "loss"),
    Chart(RMS, "residual stream RMS (block inputs), all blocks", (r"rms/residual/block_\d+$",), "residual"),
    Chart(RMS, "attention ratio RMS(attn)/RMS(x), all blocks", (r"rms/attn_ratio/block_\d+$",), "attn_ratio"),
    Chart(RMS, "MLP ratio RMS(mlp)/RMS(residual in), all blocks", (r"rms/mlp_ratio/block_\d+$",), "mlp_ratio"),
    Chart(RMS, "final hidden state RMS (ln_f input)", ("rms/final_hidden$",), "final_hidden"),
)
"""The charts of every layout; :func:`rms_layout` adds the per-linear gain charts (panel ``gain``)."""


def gain_charts(n_blocks: int | None = None) -> tuple[Chart, ...]:
    """The per-linear RMS gain charts (``ActivationRMSMonitor(per_linear=True)``): one per block, or one for all.

    Args:
        n_blocks: number of transformer blocks; ``None`` or 0: one chart for every linear.
    """
    if n_blocks:
        return tuple(Chart(GAIN, f"RMS(y)/RMS(x), block {i:02d}", (f"rms/gain/block_{i:02d}/.*",), "gain")
                     for i in range(n_blocks))
    return (Chart(GAIN, "RMS(y)/RMS(x), all linears", ("rms/gain/.*",), "gain"),)


def layout_charts(n_blocks: int | None = None, per_linear: bool = False) -> tuple[Chart, ...]:
    """The charts of :func:`rms_layout` (same arguments), in order."""
    return CHARTS + (gain_charts(n_blocks) if per_linear else ())


def rms_layout(n_blocks: int | None = None, per_linear: bool = False) -> Layout:
    """The layout as the ``{category: {chart title: ["Multiline", [tag regex, ...]]}}`` dict that
    ``SummaryWriter.add_custom_scalars`` takes.

    Args:
        n_blocks: number of transformer blocks; with ``per_linear`` it gives one gain chart per block.
        per_linear: include the per-linear RMS gain charts (``rms/gain/...``).

    Example::

        >>> rms_layout()["SPARKLING / growth"]["symmetry of copied channels"]
        ['Multiline', ['symmetry/.*']]
    """
    layout: Layout = {}
    for chart in layout_charts(n_blocks, per_linear):
        layout.setdefault(chart.category, {})[chart.title] = ["Multiline", list(chart.tags)]
    return layout


def _custom_scalars_summary(writer: Any, layout: Layout) -> Any:
    """The summary ``writer.add_custom_scalars(layout)`` writes, in the proto classes of the writer's library."""
    if type(writer).__module__.startswith("tensorboardX"):
        from tensorboardX.summary import custom_scalars
    else:
        from torch.utils.tensorboard.summary import custom_scalars
    return custom_scalars(layout)


def _writer(logger_or_writer: Any) -> tuple[Any, bool]:
    """(a ``SummaryWriter``-like object with ``add_custom_scalars``, whether we own and must close it)."""
    if isinstance(logger_or_writer, (str, Path)):
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(str(logger_or_writer)), True
    if hasattr(logger_or_writer, "add_custom_scalars"):
        return logger_or_writer, False
    experiment = getattr(logger_or_writer, "experiment", None)  # lightning TensorBoardLogger (rank zero)
    if experiment is not None and hasattr(experiment, "add_custom_scalars"):
        return experiment, False
    raise TypeError(
        "write_layout needs a lightning TensorBoardLogger, a SummaryWriter (torch or tensorboardX) or a log "
        f"directory, got {type(logger_or_writer).__name__}"
    )


def write_layout(logger_or_writer: Any, n_blocks: int | None = None, per_linear: bool = False,
                 step: int | None = None) -> Layout:
    """Write :func:`rms_layout` to a TensorBoard event file and return it.

    Args:
        logger_or_writer: a lightning ``TensorBoardLogger`` (its ``experiment``), a ``SummaryWriter``, or a log
            directory path (a writer is opened, written and closed).
        n_blocks, per_linear: see :func:`rms_layout`.
        step: the event's step (e.g. the step of a depth growth that rewrites the layout); ``None``: no step (0),
            as ``SummaryWriter.add_custom_scalars`` writes it. A writer without a file writer to pass the step to
            (not torch's or tensorboardX's ``SummaryWriter``) ignores it.

    On ranks other than zero a ``TensorBoardLogger``'s experiment is a dummy and nothing is written.
    """
    layout = rms_layout(n_blocks=n_blocks, per_linear=per_linear)
    writer, owned = _writer(logger_or_writer)
    try:
        file_writer = getattr(writer, "_get_file_writer", None) if step is not None else None
        if callable(file_writer) and step is not None:  # add_custom_scalars takes no step: the summary, at `step`
            file_writer().add_summary(_custom_scalars_summary(writer, layout), global_step=int(step))
        else:
            writer.add_custom_scalars(layout)
        flush = getattr(writer, "flush", None)
        if callable(flush):
            flush()
    finally:
        if owned:
            writer.close()
    return layout
