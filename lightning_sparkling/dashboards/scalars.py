"""The scalars of a run, read from its TensorBoard event files with TensorBoard's own ``EventAccumulator``
(:class:`RunScalars`, :func:`load_run`, :func:`find_event_dirs`), and the tags ``sparkling plot`` reads.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

__all__ = ["RunScalars", "find_event_dirs", "load_run"]

XAxis = Literal["step", "tokens", "flops"]

RMS_PANELS = (
    ("rms/residual/block_", "residual stream RMS (block input)", "RMS"),
    ("rms/attn_ratio/block_", "attention ratio  RMS(attn) / RMS(x)", "ratio"),
    ("rms/mlp_ratio/block_", "MLP ratio  RMS(mlp) / RMS(residual in)", "ratio"),
)

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
                    first.setdefault(round(float(v)), int(s))
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
