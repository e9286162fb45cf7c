"""The scan (issue 23, where growth pays): its cells (token ratio x schedule x axis), their runs and scratch
budgets, and the speed-up at equal loss per cell."""

from __future__ import annotations

import contextlib
import copy
import io
import json
import re
from pathlib import Path
from typing import Any

import yaml

from lightning_sparkling.pretrain.measure.measure_stats import scratch_flops_at


from .sizes import slug
from .rows import (AXES, AXIS_TIMING, DEPTH_REFERENCE, EXPERT_AXES, EXPERTS_2X_ROWS, ISO_FLOPS, ROWS, UPCYCLE_AXES,
                   UPCYCLE_ROWS, axis_rows, axis_stages, comparisons, reference)
from .grid import build_config, check_config, plan_grid, read_symmetry
from .tables import collect, mean_sd, paired_diff


# ------------------------------------------------------------------------------------------------------------ scan
# issue 23, "where growth pays": a map of cells, each one growth row against the grown shape from scratch on the same
# FLOPs with the same LR schedule, over token ratio (train.max_steps multipliers), schedule, growth timing and axis.
SCAN_SCHEDULES = ["cosine", "wsd"]
SCAN_RATIOS = [1, 4, 8]
SCAN_AXES = {"joint-25": "recommended recipe", "joint": "recommended recipe", "joint-75": "recommended recipe",
             "depth-5": DEPTH_REFERENCE, "depth": DEPTH_REFERENCE, "depth-50": DEPTH_REFERENCE,
             "depth-4x-5": DEPTH_REFERENCE, "late-shallow": DEPTH_REFERENCE,
             **{axis: reference(axis) for axis in EXPERT_AXES}}
"""The scan's timings of each axis and the row each is measured with (``--scan-rows`` replaces it)."""
SCAN_DEFAULT_AXES = ["joint-25", "joint", "joint-75", "depth-5", "depth", "depth-50"]
SCAN_RECIPES = {"SPARKLING": "paper", "recommended recipe": "recommended", "random-zero + ratio 10": "random-zero",
                "random-zero": "wsd", DEPTH_REFERENCE: "paper",
                **dict.fromkeys(UPCYCLE_ROWS + EXPERTS_2X_ROWS, "paper")}
"""The map's ``recipe`` (a ``growth.recipe``) of a row. The row "random-zero" (random-zero init, the paper's 1.3x
re-warmup) is the recipe ``wsd``, not the recipe ``random-zero`` (10x re-warmup: the row "random-zero + ratio 10").
A stage that grows only n_layer gets no symmetry loop under ``recommended``, so the depth row is ``paper``."""


def map_axis(axis: str, row: str | None = None) -> str:
    """The map's axis of a reproduce.py axis: the timing suffix dropped (``joint-25`` -> ``joint``); the 4x depth
    axes are ``depth`` (as the package classifies their stage); the experts axes ``upcycle``, ``experts`` or, for a
    ``row`` that grows ``n_expert_per_token`` too, ``experts+topk``."""
    if axis in EXPERT_AXES:  # as growth.measured.classify_category names an experts stage
        if axis in UPCYCLE_AXES:
            return "upcycle"
        return "experts+topk" if row and ROWS[row].get("stage", {}).get("n_expert_per_token") else "experts"
    return "depth" if axis in AXIS_TIMING else re.sub(r"-\d+$", "", axis)


def map_init(axis: str, row: str) -> str | None:
    """The ``init`` of a map cell: the row's ``expert_init`` on the experts axes (``copy`` unless it sets one),
    ``None`` on the others (their cells have no ``init``)."""
    if axis not in EXPERT_AXES:
        return None
    return ROWS[row].get("stage", {}).get("expert_init", "copy")


def map_recipe(row: str) -> str | None:
    """The map's ``recipe`` of a row: :data:`SCAN_RECIPES`, else the ``growth.recipe`` the row is exactly (its
    ``growth.recipe`` with no stage keys of its own, or stage keys equal to a named recipe's under the paper's);
    ``None`` for a row that is no named recipe (its cells are reported, not exported to the map)."""
    if row in SCAN_RECIPES:
        return SCAN_RECIPES[row]
    stage, recipe = ROWS[row].get("stage"), ROWS[row].get("set", {}).get("growth.recipe", "paper")
    if stage == {}:
        return recipe
    try:
        from lightning_sparkling.growth.stage import RECIPES
    except ImportError:
        return None
    return next((name for name, keys in RECIPES.items() if recipe == "paper" and keys and keys == stage), None)


def default_decay_fraction() -> float:
    """``train.lr_decay_fraction``'s default in the installed package (0.2 where it cannot be read)."""
    try:
        from lightning_sparkling.pretrain.config.schema import TrainArgs

        return float(TrainArgs.lr_decay_fraction)
    except (ImportError, AttributeError, TypeError, ValueError):
        return 0.2


def scan_size(size: dict, ratio: int, schedule: str) -> dict:
    """``size`` with ``train.max_steps`` times ``ratio`` and, for ``wsd``, ``train.lr_schedule: wsd`` on every run of
    the cell (scratch included). ``cosine`` leaves the key out, so those runs are the grid's own configurations."""
    out = copy.deepcopy(size)
    train = out["config"]["train"]
    train["max_steps"] = int(train["max_steps"]) * ratio
    if schedule == "wsd":
        train["lr_schedule"] = "wsd"
    elif schedule != "cosine":
        raise ValueError(f"unknown schedule {schedule!r}; choose from {SCAN_SCHEDULES}")
    return out


def scan_cells(size: dict, ratios: list[int], schedules: list[str], axes: list[str],
               rows: list[str] | None = None) -> tuple[list[dict], list[dict]]:
    """The scan's cells, ``(cells, skipped)``: one cell per ratio, schedule, axis and row (the axis' row of
    :data:`SCAN_AXES`, or the ``rows`` that apply to the axis; ``"<axis>:<row>"`` applies to that axis only). Under
    ``wsd`` a timing whose growth is not inside the stable phase (``at_step / steps >= 1 - lr_decay_fraction``) is
    skipped, with the reason."""
    cells, skipped = [], []
    for ratio in ratios:
        for schedule in schedules:
            sized = scan_size(size, ratio, schedule)
            train = sized["config"]["train"]
            steps = train["max_steps"]
            decay = float(train.get("lr_decay_fraction") or default_decay_fraction())
            for axis in axes:
                names = ([r for r in (row_of(r, axis) for r in rows) if r and r in axis_rows(axis, [r])] if rows
                         else [SCAN_AXES.get(axis) or "recommended recipe"])
                names = [r for r in names if "stage" in ROWS[r]]
                if not names:
                    skipped.append({"ratio": ratio, "schedule": schedule, "axis": axis,
                                    "why": f"none of the rows {rows} grows on this axis"})
                    continue
                at = axis_stages(axis, sized, steps)[0]["at_step"]
                growth_at = at / steps
                if schedule == "wsd" and growth_at >= 1 - decay - 1e-9:
                    skipped.append({"ratio": ratio, "schedule": schedule, "axis": axis,
                                    "why": f"growth at {growth_at:.0%} (step {at}) is not before the WSD decay "
                                           f"(the last {decay:g} of the run)"})
                    continue
                for row in names:
                    cells.append({"ratio": ratio, "schedule": schedule, "axis": axis, "row": row, "steps": steps,
                                  "growth_step": at, "growth_at": growth_at, "sub": f"x{ratio}-{schedule}"})
    return cells, skipped


def row_of(spec: str, axis: str) -> str | None:
    """The row of a ``--scan-rows`` entry on ``axis``: ``"<row>"`` on every axis, ``"<axis>:<row>"`` on that one."""
    scope, sep, row = spec.partition(":")
    if sep and scope in AXES:
        return row if scope == axis else None
    return spec


def plan_scan(size_name: str, size: dict, cells: list[dict], seeds: list[int], out: Path,
              budgets: tuple[float, ...] = ()) -> tuple[list, list]:
    """Plan every run of the scan: per ratio and schedule one :func:`plan_grid` of its axes, the cells' rows and their
    comparisons (:func:`comparisons`: the iso-FLOPs scratch; on the experts axes the others too), in
    ``out/x<ratio>-<schedule>/`` (one subfolder per cell below it: ``<size>/<axis>/``), and the grown shape from
    scratch at each of ``budgets`` times the iso-FLOPs scratch's steps (its own schedule; the curve the speed-up at
    equal loss is read from). Returns the runs (each with its cell's ``sub``) and the refused rows."""
    runs, refused = [], []
    groups: dict[tuple[int, str], list[dict]] = {}
    for cell in cells:
        groups.setdefault((cell["ratio"], cell["schedule"]), []).append(cell)
    for (ratio, schedule), group in groups.items():
        axes = list(dict.fromkeys(c["axis"] for c in group))
        versus = {(c["axis"], v) for c in group for v in comparisons(c["axis"], c["row"])}  # ISO_FLOPS, mostly
        rows = list(dict.fromkeys([*(c["row"] for c in group), *(v for _, v in sorted(versus))]))
        planned, why = plan_grid(size_name, scan_size(size, ratio, schedule), axes, rows, seeds,
                                 out / group[0]["sub"])
        wanted = {(c["axis"], c["row"]) for c in group} | versus
        runs += [{**r, "sub": group[0]["sub"]} for r in planned if (r["axis"], r["row"]) in wanted]
        refused += [{**r, "sub": group[0]["sub"]} for r in why]
        sized = scan_size(size, ratio, schedule)
        for iso in [r for r in planned if r["row"] == ISO_FLOPS]:
            for b in budgets:
                steps = max(1, round(b * iso["compute"]["steps"]))
                config = build_config(sized, iso["axis"], ROWS[ISO_FLOPS], iso["seed"], steps)
                compute, why_b = check_config(config)
                if compute is None:
                    refused.append({"axis": iso["axis"], "row": budget_row(b), "why": why_b, "sub": group[0]["sub"]})
                    continue
                run_dir = out / group[0]["sub"] / size_name / iso["axis"] / slug(budget_row(b)) / f"seed{iso['seed']}"
                runs.append({"axis": iso["axis"], "row": budget_row(b), "seed": iso["seed"], "config": config,
                             "hash": compute["resolved_hash"], "run_dir": str(run_dir), "compute": compute,
                             "note": f"the grown shape from scratch on {b:g}x the iso-FLOPs budget",
                             "sub": group[0]["sub"], "budget": b})
    return runs, refused


def budget_row(b: float) -> str:
    """The name of the scratch row trained on ``b`` times the iso-FLOPs scratch's steps (``--budgets``)."""
    return f"scratch large (x{b:g} FLOPs)"


def first_reach_fraction(curve: list[dict], loss: float, total_flops: float) -> float | None:
    """G_stack's form: the share of its own run's FLOPs at which a curve first reaches ``loss`` (linear between
    evaluations); ``None`` if it never does."""
    prev = None
    for point in curve:
        if point["val_loss"] <= loss:
            if prev is None or prev["val_loss"] == point["val_loss"]:
                return point["flops"] / total_flops
            t = (prev["val_loss"] - loss) / (prev["val_loss"] - point["val_loss"])
            return (prev["flops"] + t * (point["flops"] - prev["flops"])) / total_flops
        prev = point
    return None


def read_scalars(run_dir: Path, prefix: str) -> dict[str, dict[int, float]]:
    """``{tag: {step: value}}`` of a run's TensorBoard scalars whose tag starts with ``prefix``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(Path(run_dir) / "logs"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {ev.step: ev.value for ev in acc.Scalars(tag)}
            for tag in acc.Tags().get("scalars", []) if tag.startswith(prefix)}


def rms_health(growth_dir: Path, scratch_dir: Path, growth_step: int) -> dict[str, float | None]:
    """Signal health after a growth: the peak over the steps after ``growth_step`` of the growth run's
    ``rms/final_hidden`` and of its largest ``rms/residual/block_*`` over the same-shape scratch run's at the same
    step (runs logged with ``rms_monitor``); the peak of ``rms/final_hidden`` over its value at the growth; and the
    new entries' peak LR over the old entries' at the same step (``growth/lr_new/stage_0`` over the group's ``lr-*``).
    ``None`` where a run did not log the tag."""
    g, s = read_scalars(growth_dir, "rms/"), read_scalars(scratch_dir, "rms/")
    out: dict[str, float | None] = {"final_hidden_vs_scratch": None, "residual_vs_scratch": None,
                                    "final_hidden_vs_growth": None, "lr_new_vs_old": None}
    fh_g, fh_s = g.get("rms/final_hidden", {}), s.get("rms/final_hidden", {})
    common = [t for t in fh_g if t > growth_step and t in fh_s and fh_s[t] > 0]
    if common:
        out["final_hidden_vs_scratch"] = max(fh_g[t] / fh_s[t] for t in common)
    at = [t for t in fh_g if t <= growth_step]
    if at and fh_g[max(at)] > 0:
        out["final_hidden_vs_growth"] = max((v for t, v in fh_g.items() if t > growth_step), default=0.0) \
            / fh_g[max(at)]
    ratios = []
    for tag, series in g.items():
        if tag.startswith("rms/residual/") and tag in s:
            ratios += [series[t] / s[tag][t] for t in series if t > growth_step and t in s[tag] and s[tag][t] > 0]
    if ratios:
        out["residual_vs_scratch"] = max(ratios)
    lrs = read_scalars(growth_dir, "growth/lr_new/stage_0").get("growth/lr_new/stage_0", {})
    base = next(iter(v for k, v in read_scalars(growth_dir, "lr-").items()), {})
    paired = [lrs[t] / base[t] for t in lrs if t > growth_step and t in base and base[t] > 0]
    if paired:
        out["lr_new_vs_old"] = max(paired)
    return out


def scan_lines(cells: list[dict], runs: list[dict]) -> list[dict]:
    """One line per cell: the paired Δ of the final validation loss against the same-schedule iso-FLOPs scratch
    (mean, sd, seeds, seeds above scratch), tokens per grown (final active) parameter, growth_at, both rows' means."""
    lines = []
    by_sub: dict[str, list[dict]] = {}
    for run in runs:
        by_sub.setdefault(run["sub"], []).append(run)
    tables = {sub: collect(group) for sub, group in by_sub.items()}
    dirs = {(r["sub"], r["axis"], r["row"], r["seed"]): r["run_dir"] for r in runs}
    for cell in cells:
        rows = tables.get(cell["sub"], {}).get(cell["axis"], {})
        versus = comparisons(cell["axis"], cell["row"])
        grown, scratch = rows.get(cell["row"]), rows.get(versus[0])
        line = {k: cell[k] for k in ("ratio", "schedule", "axis", "row", "steps", "growth_step", "growth_at", "sub")}
        line.update(map_axis=map_axis(cell["axis"], cell["row"]), recipe=map_recipe(cell["row"]), versus=versus[0],
                    init=map_init(cell["axis"], cell["row"]))
        if grown is None:
            lines.append({**line, "status": "refused or not planned"})
            continue
        c = grown["compute"]
        tokens = c["steps"] * c["tokens_per_step"]
        d = paired_diff(grown["seeds"], scratch["seeds"]) if scratch else None
        line["comparisons"] = {
            name: {**(paired_diff(grown["seeds"], rows[name]["seeds"]) or {}), "steps": rows[name]["compute"]["steps"],
                   "mean_loss": rows[name].get("mean"), "seeds_loss": rows[name]["seeds"]}
            for name in versus if name in rows}
        if cell["axis"] in EXPERT_AXES:
            line["experts"] = {seed: expert_diagnostics(Path(dirs[(cell["sub"], cell["axis"], cell["row"], seed)]))
                               for seed in grown["seeds"]}
            line["scratch_load"] = {seed: expert_load(Path(dirs[(cell["sub"], cell["axis"], versus[0], seed)]))
                                    for seed in (scratch["seeds"] if scratch else {})}
        line.update(tokens=tokens, grown_active_params=c["active_params"][-1],
                    tokens_per_param=tokens / c["active_params"][-1], scratch_steps=scratch["compute"]["steps"]
                    if scratch else None, growth_mean=grown.get("mean"), growth_seeds=grown["seeds"],
                    scratch_mean=scratch.get("mean") if scratch else None,
                    scratch_seeds=scratch["seeds"] if scratch else {},
                    delta=d["mean"] if d else None, sd=d["sd"] if d else None, ci95=d["ci95"] if d else None,
                    seeds=d["n"] if d else 0, seeds_above=d["wins"] if d else 0,
                    per_seed=d["per_seed"] if d else [],
                    wall_s=sum(w for e in (grown, scratch or {}) for w in e.get("wall_s", []) if w),
                    status="measured" if d and d["n"] >= 2 else ("1 seed" if d else "not run"))
        line.update(equal_loss(cell, rows, grown, scratch, dirs))
        lines.append(line)
    return lines


def expert_load(run_dir: Path, batches: int = 4) -> dict[str, list[float]]:
    """The routing of a finished MoE run: per MoE block (``"block_<i>"``), the fraction of tokens each expert got
    among its top-K (sums to K; uniform is ``K / n_expert``, at most 1) on the first ``batches`` validation batches of
    the run's own data, from its ``final/`` checkpoint. ``{}`` for a run without ``final/`` or MoE blocks."""
    import torch
    from litgpt import GPT, Config

    from lightning_sparkling.pretrain.cli import parse
    from lightning_sparkling.pretrain.training.run import build_datamodule

    final = Path(run_dir) / "final"
    if not (final / "lit_model.pth").is_file():
        return {}
    config = Config(**yaml.safe_load((final / "model_config.yaml").read_text()))
    model = GPT(config)
    model.load_state_dict(torch.load(final / "lit_model.pth", map_location="cpu", weights_only=True))
    model.eval()
    counts: dict[str, torch.Tensor] = {}
    tokens: dict[str, int] = {}
    hooks = []
    for i, block in enumerate(model.transformer.h):
        gate = getattr(block.mlp, "gate", None)
        if gate is None or not isinstance(gate, torch.nn.Linear):  # dense blocks; the grouped router is not read
            continue

        def count(module, inputs, logits, name=f"block_{i}"):  # logits: (B*T, n_expert)
            picked = torch.topk(logits, config.n_expert_per_token).indices.flatten()  # (B*T*K,)
            counts[name] = counts.get(name, 0) + torch.bincount(picked, minlength=config.n_expert)
            tokens[name] = tokens.get(name, 0) + logits.shape[0]

        hooks.append(gate.register_forward_hook(count))
    if not hooks:
        return {}
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        _, run, _ = parse(["--config", str(Path(run_dir) / "config.yaml")])
        data = build_datamodule(run)
        data.setup("validate")
    with torch.no_grad():
        for k, batch in enumerate(data.val_dataloader()):
            if k == batches:
                break
            model(batch[:, :-1])
    for h in hooks:
        h.remove()
    return {name: [float(x) for x in (c / tokens[name])] for name, c in counts.items()}


def expert_diagnostics(run_dir: Path) -> dict[str, Any]:
    """What an experts growth run recorded: the copies' last ``symmetry/stage_k/experts`` cosine, the growth's
    seconds, peak memory and loss right after it (``summary.json``'s ``growth_events``), and the experts' load after
    training (:func:`expert_load`: per block the fraction of tokens per expert, its min and max over blocks)."""
    summary = json.loads((Path(run_dir) / "summary.json").read_text())
    event = (summary.get("growth_events") or [{}])[0]
    load = expert_load(run_dir)
    shares = [v for per_block in load.values() for v in per_block]
    return {"symmetry": {k: v for k, v in read_symmetry(run_dir).items() if k.endswith("/experts")},
            "growth_seconds": event.get("seconds"), "peak_memory_mb": event.get("peak_memory_mb"),
            "loss_after": event.get("loss_after"), "load": load,
            "load_min": min(shares) if shares else None, "load_max": max(shares) if shares else None}


def equal_loss(cell: dict, rows: dict, grown: dict, scratch: dict | None, dirs: dict) -> dict:
    """The cell's savings counted as compute to reach the same loss, per seed and as mean ± sd.

    - ``speedup``: the compute the grown shape trained from scratch needs to reach the growth run's final val loss
      (interpolated in log-FLOPs between the scratch budgets of the same seed, never extrapolated) over the growth
      run's compute. Past the largest budget the seed says ``> <max>x``, below the smallest ``< <min>x``; the mean is
      given only when every seed's value was interpolated.
    - ``reach_fraction`` (G_stack's form): the share of its own run at which the growth run first reaches the
      iso-FLOPs scratch's final loss (``None``: never).
    - ``health``: :func:`rms_health` per seed (runs logged with ``rms_monitor``), and the worst over seeds.
    """
    budget_rows = {n: e for n, e in rows.items() if n == ISO_FLOPS or n.startswith("scratch large (x")}
    if len(budget_rows) < 2 or comparisons(cell["axis"], cell["row"])[0] != ISO_FLOPS:  # budgets: ISO_FLOPS' shape
        return {}
    g_flops = grown["compute"]["flops"]
    per_seed, labels, fractions, health = {}, {}, {}, {}
    lo = min(e["compute"]["flops"] for e in budget_rows.values()) / g_flops
    hi = max(e["compute"]["flops"] for e in budget_rows.values()) / g_flops
    for seed, loss in grown["seeds"].items():
        points = [(e["compute"]["flops"], e["seeds"][seed]) for e in budget_rows.values() if seed in e["seeds"]]
        flops, why = scratch_flops_at(points, loss)
        if flops is not None:
            per_seed[seed] = flops / g_flops
            labels[seed] = f"{flops / g_flops:.2f}x"
        else:
            labels[seed] = {"above": f"> {hi:.2f}x", "below": f"< {lo:.2f}x"}.get(why, "-")
        if scratch and seed in scratch["seeds"] and grown["curves"].get(seed):
            fractions[seed] = first_reach_fraction(grown["curves"][seed], scratch["seeds"][seed], g_flops)
        g_dir, s_dir = dirs.get((cell["sub"], cell["axis"], cell["row"], seed)), \
            dirs.get((cell["sub"], cell["axis"], ISO_FLOPS, seed))
        if g_dir and s_dir:
            health[seed] = rms_health(Path(g_dir), Path(s_dir), cell["growth_step"])
    out: dict[str, Any] = {"speedup_per_seed": labels, "reach_fraction_per_seed": fractions,
                           "budgets": sorted(e["compute"]["flops"] / g_flops for e in budget_rows.values()),
                           "health_per_seed": health}
    if per_seed and len(per_seed) == len(grown["seeds"]):
        out["speedup"], out["speedup_sd"] = mean_sd(list(per_seed.values()))
    reached = [f for f in fractions.values() if f is not None]
    if fractions and len(reached) == len(fractions):
        out["reach_fraction"], out["reach_fraction_sd"] = mean_sd(reached)
    for key in ("final_hidden_vs_scratch", "residual_vs_scratch", "final_hidden_vs_growth", "lr_new_vs_old"):
        vals = [h[key] for h in health.values() if h.get(key) is not None]
        if vals:
            out.setdefault("health", {})[key] = max(vals)
    return out
