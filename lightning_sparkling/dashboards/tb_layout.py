"""TensorBoard custom-scalars layout for a SPARKLING run (the "CUSTOM SCALARS" tab).

One chart per quantity overlays every transformer block (tag regexes, matched from the start of the tag name
as TensorBoard's custom-scalars plugin does), next to the loss, the learning rates of old and new entries, the
symmetry metrics and the growth events:

==================  ===============================  ========================================================
category            chart                            tags (regex)
==================  ===============================  ========================================================
SPARKLING / loss    loss (growth/event marks ...)    ``train_loss``, ``val_loss``, ``growth/event``
SPARKLING / growth  learning rate: old vs new        ``lr-.*`` (LearningRateMonitor), ``growth/lr_new/.*``
                    symmetry of copied channels      ``symmetry/.*``
                    growth events                    ``growth/event`` (stage index + 1 at the growth step)
SPARKLING / RMS     residual stream RMS (inputs)     ``rms/residual/block_.*``
                    attention ratio                  ``rms/attn_ratio/block_.*``
                    MLP ratio                        ``rms/mlp_ratio/block_.*``
                    final hidden state RMS           ``rms/final_hidden``
SPARKLING / gains   linear RMS gain, block NN        ``rms/gain/block_NN/.*`` (one chart per block; only with
                                                     ``per_linear=True`` and ``n_blocks`` known, else one chart)
==================  ===============================  ========================================================

The layout is written once per event directory (tag ``custom_scalars__config__``); TensorBoard shows it for any run
under the same logdir.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["rms_layout", "write_layout", "LAYOUT_TAG"]

LAYOUT_TAG = "custom_scalars__config__"

Layout = dict[str, dict[str, list[Any]]]


def rms_layout(n_blocks: int | None = None, per_linear: bool = False) -> Layout:
    """The layout as the ``{category: {chart title: ["Multiline", [tag regex, ...]]}}`` dict that
    ``SummaryWriter.add_custom_scalars`` takes.

    Args:
        n_blocks: number of transformer blocks; with ``per_linear`` it gives one gain chart per block.
        per_linear: include the per-linear RMS gain charts (``rms/gain/...``).
    """
    layout: Layout = {
        "SPARKLING / loss": {
            "loss (growth/event = stage+1 at each growth step)": [
                "Multiline",
                ["train_loss", "val_loss", "growth/event$"],
            ],
        },
        "SPARKLING / growth": {
            "learning rate: old entries (lr-*) vs new entries (growth/lr_new/*)": [
                "Multiline",
                ["lr-.*", "growth/lr_new/.*"],
            ],
            "symmetry of copied channels": ["Multiline", ["symmetry/.*"]],
            "growth events (stage index + 1)": ["Multiline", ["growth/event$"]],
        },
        "SPARKLING / activation RMS": {
            "residual stream RMS (block inputs), all blocks": ["Multiline", [r"rms/residual/block_\d+$"]],
            "attention ratio RMS(attn)/RMS(x), all blocks": ["Multiline", [r"rms/attn_ratio/block_\d+$"]],
            "MLP ratio RMS(mlp)/RMS(residual in), all blocks": ["Multiline", [r"rms/mlp_ratio/block_\d+$"]],
            "final hidden state RMS (ln_f input)": ["Multiline", ["rms/final_hidden$"]],
        },
    }
    if per_linear:
        if n_blocks:
            layout["SPARKLING / linear RMS gain"] = {
                f"RMS(y)/RMS(x), block {i:02d}": ["Multiline", [f"rms/gain/block_{i:02d}/.*"]] for i in range(n_blocks)
            }
        else:
            layout["SPARKLING / linear RMS gain"] = {"RMS(y)/RMS(x), all linears": ["Multiline", ["rms/gain/.*"]]}
    return layout


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


def write_layout(logger_or_writer: Any, n_blocks: int | None = None, per_linear: bool = False) -> Layout:
    """Write :func:`rms_layout` to a TensorBoard event file and return it.

    Args:
        logger_or_writer: a lightning ``TensorBoardLogger`` (its ``experiment``), a ``SummaryWriter``, or a log
            directory path (a writer is opened, written and closed).
        n_blocks, per_linear: see :func:`rms_layout`.

    On ranks other than zero a ``TensorBoardLogger``'s experiment is a dummy and nothing is written.
    """
    layout = rms_layout(n_blocks=n_blocks, per_linear=per_linear)
    writer, owned = _writer(logger_or_writer)
    try:
        writer.add_custom_scalars(layout)
        flush = getattr(writer, "flush", None)
        if callable(flush):
            flush()
    finally:
        if owned:
            writer.close()
    return layout
