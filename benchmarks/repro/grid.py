"""A grid of runs: each run's config, checked and identified by the package (resolved_hash), its FLOPs; training the
runs through the measure engine's loop (``lightning_sparkling.pretrain.measure.measure_runs.train_runs``: jobs at a
time, finished runs reused); reading their curves."""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import yaml

from lightning_sparkling.pretrain.measure import measure_runs
from lightning_sparkling.pretrain.measure.measure_runs import TrainingRun

from .sizes import _MODEL, set_dotted, slug
from .rows import REFERENCE, ROWS, axis_rows, axis_small, axis_stages, large_model, reference


def build_config(size: dict, axis: str, row: dict, seed: int, steps: int | None = None) -> dict:
    """The full ``sparkling pretrain`` configuration of one row of one axis for one seed (no ``out_dir``)."""
    config = copy.deepcopy(size["config"])
    model = {"name": "repro", **_MODEL, **size["small"], **axis_small(axis, size)}
    if row.get("model") == "large":
        model.update(large_model(axis, size))
    model.update(row.get("model_config", {}))
    config["model_config"] = model
    config["seed"] = seed
    total = config["train"]["max_steps"]
    if "stage" in row:
        # recipe paper: a row is exactly its keys on top of GrowthStage's defaults (the CLI's default recipe would
        # add the symmetry loop to every copy-copy row); the "recommended" row sets growth.recipe itself
        config["growth"] = {"seed": seed, "recipe": "paper",
                            "stages": [{**s, **row["stage"]} for s in axis_stages(axis, size, total)]}
    if steps is not None:
        config["train"]["max_steps"] = steps
    for key, value in row.get("set", {}).items():
        set_dotted(config, key, value)
    return config


def check_config(config: dict) -> tuple[dict | None, str | None]:
    """Let the installed package parse and resolve ``config``: ``(compute, None)`` or ``(None, its message)``.

    ``compute`` holds the parameters per phase and the FLOPs (``estimate_compute``) of the run as configured.
    """
    from lightning_sparkling.growth.compute import estimate_compute
    from lightning_sparkling.pretrain.cli import parse

    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"repro_check_{os.getpid()}.yaml"
    path.write_text(yaml.safe_dump({**config, "out_dir": "/tmp/repro_unused"}, sort_keys=False))
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            _, run, dumped = parse(["--config", str(path)])
    except SystemExit:
        lines = [ln for ln in err.getvalue().splitlines() if "error" in ln.lower()] or err.getvalue().splitlines()
        why = (lines[-1] if lines else "refused").strip()
        return None, re.sub(r" \(in /\S+\)$", "", why)
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"
    finally:
        path.unlink(missing_ok=True)
    est = estimate_compute(run.model_config, run.stages, total_steps=run.steps, tokens_per_step=run.tokens_per_step,
                           tie_embeddings=run.train.tie_embeddings)
    return {"steps": run.steps, "tokens_per_step": run.tokens_per_step, "eval_interval": run.eval.interval,
            "active_params": list(est.active_params),
            "total_params": list(est.total_params), "phase_steps": list(est.phase_steps), "flops": est.flops,
            "growth_steps": [s.at_step for s in run.stages],
            "resolved_hash": resolved_hash(dumped, run.stages)}, None


def resolved_hash(dumped: str, stages: list) -> str:
    """A hash of what the package makes of a config: identical runs hash alike, however their stages were written.

    ``dumped`` is the parsed config as the CLI saves it (stages as written, ``growth.recipe``); they are replaced by
    the resolved stages (recipe applied, every ``GrowthStage`` default filled in), so e.g. "ablation: RMS only" and
    "naive growth" (copy-copy is the default ``init``) or "recommended recipe" and "symmetry target 0.5" train once.
    """
    config = yaml.safe_load(dumped)
    config.pop("out_dir", None)
    if isinstance(config.get("growth"), dict):
        config["growth"].pop("recipe", None)
        config["growth"]["stages"] = [stage_identity(s.to_dict(), (config.get("model_config") or {}).get("n_layer"))
                                      for s in stages]
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


_DEPTH_KEYS = ("n_layer", "depth_init", "depth_order")
_UNSET_LATER_KEYS = ("n_head", "n_query_groups", "model_name", "model_config")  # heads / named-target growth


def stage_identity(stage: dict, n_layer: int | None) -> dict:
    """A resolved stage's dict as it enters a run's identity.

    A stage that does not grow depth drops the depth keys, and unset (``None``) heads / named-target keys are
    dropped too, so the width runs hash as they did before those ``GrowthStage`` fields existed; a depth stage whose
    ``depth_order`` places the copies like another (``middle`` and ``interleave`` when the layer count is a multiple of
    the old one) names the first of them.
    """
    stage = {k: v for k, v in stage.items() if not (k in _UNSET_LATER_KEYS and v is None)}
    stage.pop("recipe", None)  # a label: the keys it filled in are the run (and runs before the label hash alike)
    stage.pop("_filled", None)  # which keys the recipe filled (GrowthStage.to_dict): their values are the run
    if stage.get("n_layer") is None:
        for key in _DEPTH_KEYS:
            stage.pop(key, None)
        return stage
    if n_layer and stage.get("depth_order") == "middle":
        from lightning_sparkling.growth.depth_maps import depth_source_map

        if n_layer < stage["n_layer"] and depth_source_map(n_layer, stage["n_layer"], "middle") == \
                depth_source_map(n_layer, stage["n_layer"], "interleave"):
            stage["depth_order"] = "interleave"
    return stage


def cumulative_flops(compute: dict, step: int) -> float:
    """Training FLOPs after ``step`` optimizer steps (``6 N D`` per phase)."""
    done, total = 0, 0.0
    for n, k in zip(compute["active_params"], compute["phase_steps"]):
        take = max(0, min(k, step - done))
        total += 6.0 * n * compute["tokens_per_step"] * take
        done += k
    return total


# ------------------------------------------------------------------------------------------------------------ plan
def plan_grid(size_name: str, size: dict, axes: list[str], rows: list[str], seeds: list[int],
              out: Path) -> tuple[list, list]:
    """Every (axis, row, seed) cell with its config, run dir and compute; and the refused rows."""
    cells, refused, by_hash = [], [], {}
    for axis in axes:
        names = axis_rows(axis, rows)
        # rows others depend on (iso_compute) first
        names.sort(key=lambda r: 1 if ROWS[r].get("iso_compute") else 0)
        computes: dict[str, dict] = {}
        for name in names:
            row = ROWS[name]
            steps = None
            if row.get("iso_compute"):
                # on the depth axes the growth rows' FLOPs are the reference's (the axis' reference row); every
                # growth row of an axis has the same parameters per phase, so any of them stands in when the
                # reference row is not in the grid (e.g. only the best row of a first grid, or a scan's row)
                target = reference(axis) if row["iso_compute"] == REFERENCE else row["iso_compute"]
                ref = computes.get(target)
                if ref is None and target == reference(axis):
                    ref = next((computes[r] for r in names if r in computes and "stage" in ROWS[r]), None)
                if ref is None:
                    refused.append({"axis": axis, "row": name, "why": f"needs row {target!r}"})
                    continue
                probe, why = check_config(build_config(size, axis, row, seeds[0]))
                if probe is None:
                    refused.append({"axis": axis, "row": name, "why": why})
                    continue
                per_step = 6.0 * probe["active_params"][-1] * probe["tokens_per_step"]
                steps = max(1, round(ref["flops"] / per_step))
            for seed in seeds:
                config = build_config(size, axis, row, seed, steps)
                compute, why = check_config(config)
                if compute is None:
                    refused.append({"axis": axis, "row": name, "why": why})
                    break
                computes.setdefault(name, compute)
                key = compute["resolved_hash"]
                run_dir = by_hash.setdefault(key, out / size_name / axis / slug(name) / f"seed{seed}")
                cells.append({"axis": axis, "row": name, "seed": seed, "config": config, "hash": key,
                              "run_dir": str(run_dir), "compute": compute, "note": row.get("note", "")})
    return cells, refused


# ------------------------------------------------------------------------------------------------------------ run
@dataclass(frozen=True)
class GridRun(TrainingRun):
    """One distinct run of a grid for the measure engine's loop (:func:`train_runs`): its config saved as
    ``config.yaml`` (with ``out_dir``); a run saved before ``growth.recipe`` existed (it grew by the paper's recipe)
    or whose summary has no ``status`` is still the same finished run."""

    name: str
    config: dict[str, Any]
    run_dir: Path
    flops: float
    config_file: ClassVar[str] = "config.yaml"

    @classmethod
    def of(cls, cell: dict) -> GridRun:
        """The run of a planned cell (``plan_grid`` or ``plan_scan``), named ``axis | row seed k``."""
        run_dir = Path(cell["run_dir"])
        return cls(f"{cell['axis']} | {cell['row']} seed {cell['seed']}", {**cell["config"], "out_dir": str(run_dir)},
                   run_dir, float(cell.get("compute", {}).get("flops") or 0.0))

    def finished(self, summary: dict[str, Any], saved: Any) -> bool:
        if isinstance(saved.get("growth"), dict):  # runs from before growth.recipe existed grew by the paper's
            saved["growth"].setdefault("recipe", "paper")
        return summary.get("status", "completed") == "completed" and saved == self.config


def is_done(run_dir: Path, config: dict) -> bool:
    """Whether the run of ``config`` (no ``out_dir``) in ``run_dir`` finished (see :class:`GridRun`)."""
    return measure_runs.is_done(GridRun("", {**config, "out_dir": str(run_dir)}, Path(run_dir), 0.0))


#: what every grid subprocess gets: one torch thread each (``--jobs`` runs share the CPUs), no warnings in run.log
GRID_ENV = {"OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}


def run_grid(cells: list[dict], jobs: int, log=print) -> None:
    """Train every distinct run of ``cells`` (by ``run_dir``), every row of seed 1 first (a stopped grid is still
    paired), through the measure engine's loop (:func:`~lightning_sparkling.pretrain.measure.measure_runs.train_runs`:
    ``jobs`` subprocesses at a time, finished runs skipped). Ctrl-C or ``SIGTERM`` stops the running subprocesses
    (trained again next time) and exits with status 130."""
    distinct = {}
    for cell in cells:
        distinct.setdefault(cell["run_dir"], cell)
    runs = [GridRun.of(c) for c in sorted(distinct.values(), key=lambda c: c["seed"])]
    try:
        measure_runs.train_runs(runs, jobs, log, GRID_ENV)
    except KeyboardInterrupt:
        raise SystemExit(130) from None


def read_symmetry(run_dir: Path) -> dict[str, float]:
    """The last logged ``symmetry/stage_k/<channel>`` values (mean cosine of copies to their sources) of a run."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "logs"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag.removeprefix("symmetry/"): acc.Scalars(tag)[-1].value
            for tag in acc.Tags().get("scalars", []) if tag.startswith("symmetry/")}


def read_curve(run_dir: Path, compute: dict) -> list[dict]:
    """``[{step, tokens, flops, val_loss}]`` from the run's TensorBoard events."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "logs"), size_guidance={"scalars": 0})
    acc.Reload()
    if "val_loss" not in acc.Tags().get("scalars", []):
        return []
    # Lightning logs a validation run inside the training loop at the step before the one that triggered it
    # (after 250 optimizer steps: TensorBoard step 249); a final validation after the fit at max_steps itself
    interval, steps = compute.get("eval_interval") or compute["steps"], compute["steps"]
    points = {}
    for ev in acc.Scalars("val_loss"):
        s = ev.step
        if s != steps and ((s + 1) % interval == 0 or s + 1 == steps):
            s += 1
        points[s] = ev.value  # a repeated step (final validation) keeps the last value
    tps = compute["tokens_per_step"]
    return [{"step": s, "tokens": s * tps, "flops": cumulative_flops(compute, s), "val_loss": v}
            for s, v in sorted(points.items())]
