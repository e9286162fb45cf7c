"""``sparkling measure``: does growth pay on *this* config? The config's growth run against its grown shape trained
from scratch at several budgets, over seeds; the speed-up at equal loss and Δ at equal FLOPs, as one cell of the
measured map.

    sparkling measure --config RUN.yaml [--budgets 0.7,1,1.4,2] [--seeds 3] [--jobs 2] [--section.key VALUE ...]

Every key and dotted override of ``sparkling pretrain`` is taken (``--growth.stages ...``, ``--train.max_steps ...``,
``--devices 2 --strategy fsdp1``). ``--jobs J`` on GPUs gives each of the J runs at a time its own ``devices`` of
the visible GPUs and its own master port (:mod:`~lightning_sparkling.pretrain.measure.placement`). The runs go to
``<out_dir>/measure/`` (``growth/seed<k>``, ``scratch-x<b>/seed<k>``); an interrupted measurement resumes, skipping
finished runs. The result, ``<out_dir>/measure.json``, holds the cell in the map's format (``cells``: ``speedup``,
``speedup_sd``, ``delta``, ``sd``, ``seeds``, ``params``, ``device``, ...) and every run (``runs``); ``sparkling plan
--map <out_dir>/measure.json`` reads it beside the package's map.

Example::

    sparkling measure --config examples/quickstart.yaml --seeds 2 --budgets 0.7,1,1.4 --jobs 2
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from lightning_sparkling.pretrain.advice.run_plan import RunPlan, plan_run
from lightning_sparkling.pretrain.advice.verdict import phrase, verdict
from lightning_sparkling.pretrain.measure.measure_runs import (MeasureRun, is_done, plan_runs, prepare_data,
                                                               read_result, train_runs)
from lightning_sparkling.pretrain.measure.measure_stats import compare
from lightning_sparkling.pretrain.measure.placement import Placement, PlacementError, place_jobs

DEFAULT_BUDGETS = (0.7, 1.0, 1.4, 2.0)
"""The scratch budgets, as multiples of the growth run's FLOPs (1.0, equal FLOPs, is always trained)."""
OPTIONS = {"--budgets": str, "--seeds": int, "--jobs": int}
HELP_OPTIONS = """
  --budgets B,...  scratch budgets as multiples of the growth run's FLOPs (default 0.7,1,1.4,2; 1 is always trained)
  --seeds N        seeds (the config's seed, seed + 1, ...; default 1)
  --jobs J         runs at a time (default 1); on GPUs each gets its own `devices` of the visible GPUs
                   (CUDA_VISIBLE_DEVICES) and master port: jobs x devices must fit them
  --map FILE       a measured map (a measure.json) whose cell for this config the summary cites, as `plan --map`

Every other option is `sparkling pretrain`'s (`sparkling pretrain --help`)."""
USAGE = ("sparkling measure --config RUN.yaml [--budgets 0.7,1,1.4,2] [--seeds N] [--jobs J] [--map FILE] "
         "[--section.key VALUE ...]"
         "   (every key of `sparkling pretrain --help`)")
HELP = f"usage: {USAGE}\n\n{__doc__.split(chr(10) * 2)[0]}\n{HELP_OPTIONS}"


def take_options(argv: Sequence[str]) -> tuple[dict[str, Any], list[str]]:
    """Take measure's own options (:data:`OPTIONS`) out of ``argv``; the rest is pretrain's.

    Raises:
        ValueError: a value that cannot be used, naming the option, the value and the fix.
    """
    argv, opts, rest = list(argv), {"budgets": DEFAULT_BUDGETS, "seeds": 1, "jobs": 1}, []
    while argv:
        arg = argv.pop(0)
        key, eq, value = arg.partition("=")
        if key not in OPTIONS:
            rest.append(arg)
            continue
        if not eq:
            if not argv:
                raise ValueError(f"{key} needs a value ({USAGE})")
            value = argv.pop(0)
        name = key.lstrip("-")
        if name == "budgets":
            opts[name] = parse_budgets(value)
            continue
        try:
            number = int(value)
        except ValueError:
            number = 0
        if number < 1:
            raise ValueError(f"{key} {value!r}: give a whole number >= 1")
        opts[name] = number
    return opts, rest


def parse_budgets(text: str) -> tuple[float, ...]:
    """``'0.7,1.4,2'`` -> ``(0.7, 1.0, 1.4, 2.0)``: sorted, 1.0 added (equal FLOPs, where Δ is read)."""
    try:
        values = {float(v) for v in text.split(",") if v.strip()}
    except ValueError:
        values = set()
    if not values or any(not 0 < v <= 100 for v in values):
        raise ValueError(f"--budgets {text!r}: give multiples of the growth run's FLOPs between 0 and 100, e.g. "
                         "0.7,1,1.4,2")
    return tuple(sorted(values | {1.0}))


def main_measure(argv: Sequence[str], parse: Callable[[Sequence[str], str], tuple[Any, Any, str]],
                 cells: Sequence[Any] | None = None) -> int:
    """Entry point of ``sparkling measure``: plan, train what is not finished, compare, write ``measure.json``.

    Args:
        argv: the arguments after ``sparkling measure``.
        parse: the CLI's parser of a pretrain configuration (:func:`lightning_sparkling.pretrain.cli.parse`; passed
            in, so this module does not import the CLI that dispatches to it).
        cells: the measured map its summary cites the config's cell from (``--map FILE``, as ``sparkling plan``'s;
            ``None``: the package's).
    """
    if any(a in ("-h", "--help") for a in argv):
        print(HELP)
        return 0
    try:
        opts, rest = take_options(argv)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not rest:
        print(f"error: no configuration: give --config RUN.yaml ({USAGE})", file=sys.stderr)
        return 2
    _, run, dumped = parse(rest, "plan")  # checks every key; writes nothing
    if not run.stages:
        print("error: growth.stages is empty: sparkling measure compares a growth run with the grown shape from "
              "scratch; give the config's growth.stages", file=sys.stderr)
        return 2
    if not run.eval.final_validation:
        print("error: eval.final_validation: false: sparkling measure compares the runs' final val loss; set "
              "eval.final_validation: true", file=sys.stderr)
        return 2
    try:  # before any run starts: jobs x devices must fit the visible GPUs
        placement = place_jobs(opts["jobs"], run.devices, run.accelerator)
    except PlacementError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    run_plan = plan_run(run, cells=cells)  # the stages' plans, the compute and the advice, once
    est, grown = run_plan.compute, run_plan.final_config
    out = Path(run.out_dir) / "measure"
    seeds = [run.seed + k for k in range(opts["seeds"])]
    runs = plan_runs(yaml.safe_load(dumped), dataclasses.asdict(grown), growth_flops=est.flops,
                     flops_per_step=6.0 * est.active_params[-1] * run.tokens_per_step, seeds=seeds,
                     budgets=opts["budgets"], out=out)
    budgets = ", ".join(f"{b:g}x" for b in opts["budgets"])
    print(f"sparkling measure: {len(seeds)} seed(s) x (growth + scratch at {budgets} of its {est.flops:.3g} FLOPs) "
          f"= {len(runs)} runs in {out}")
    try:
        if opts["jobs"] > 1 and not all(is_done(r) for r in runs):
            prepare_data(run)
        failed = train_runs(runs, opts["jobs"], placement=placement)
    except KeyboardInterrupt:
        print("sparkling measure: interrupted; run it again to resume (finished runs are kept)", file=sys.stderr)
        return 130
    if failed:
        print(f"error: {len(failed)} run(s) failed: {', '.join(r.name for r in failed)} (see their run.log)",
              file=sys.stderr)
        return 1
    result = measurement(runs, run_plan, rest, jobs=opts["jobs"], placement=placement)
    path = Path(run.out_dir) / "measure.json"
    path.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(describe(result))
    print(f"wrote {path} (sparkling plan --config ... --map {path} reads it)")
    return 0


def shared_device_note(jobs: int, devices: int = 1, *, alone: bool = False) -> str | None:
    """Why a wall-clock ratio of these runs means nothing, or ``None`` when each run trained alone: one at a time, or
    ``alone`` (each on its own slice of the GPUs: :attr:`~.placement.Placement.alone`).

    Example::

        >>> shared_device_note(1) is None
        True
        >>> shared_device_note(4, 2, alone=True) is None
        True
        >>> shared_device_note(3)[:40]
        'not compared: the runs trained 3 at a ti'
    """
    if jobs <= 1 or alone:
        return None
    return (f"not compared: the runs trained {jobs} at a time on the same {'devices' if devices > 1 else 'device'}, "
            "so their seconds count what ran beside them, not their FLOPs; measure with --jobs 1 on an otherwise "
            "idle machine, or on GPUs with --jobs x devices within the visible GPUs (each run on its own), for a "
            "time ratio")


def measurement(runs: Sequence[MeasureRun], run_plan: RunPlan, argv: Sequence[str], jobs: int = 1,
                placement: Placement | None = None) -> dict:
    """``measure.json``: ``cells`` (one cell in the measured map's format), ``growth_recipe`` and ``recipe_note``,
    ``per_seed``, ``wall_speedup`` and ``runs`` (each run's name, folder, final val loss, FLOPs and seconds).

    ``wall_speedup`` is scratch's time to the growth run's final loss over the growth run's, from each run's steady
    steps (its phases' median step times times their steps), and only when each run trained alone: one at a time
    (``jobs`` 1) or each on its own GPUs (``placement.alone``: :func:`~.placement.place_jobs`); otherwise ``None``,
    and ``wall_clock_note`` says why (:func:`shared_device_note`). ``gpus``: each job slot's ``CUDA_VISIBLE_DEVICES``
    (``None``: not sliced, the CPU).

    The cell's ``recipe`` is the map's name of the run's recipe, the one ``sparkling plan`` matches for this config
    (``advice.recipe``: the ``key`` of :func:`~lightning_sparkling.growth.recipes.recipe_facts`); ``growth_recipe`` is
    the recipe the run grew by (its ``label``) and ``recipe_note`` why the two differ, in words (``None``: they
    do not), e.g. ``wsd`` and the note that it grows a stage that only adds layers as ``paper`` does. ``run_plan``:
    the measured run's plan (its advice, schedule, compute and the model it grows into)."""
    from lightning_sparkling.pretrain.advice.measured_size import cell_size

    run, advice, grown = run_plan.run, run_plan.advice, run_plan.final_config
    assert advice is not None  # a measured run is a planned growth: it has advice

    growth = {r.seed: read_result(r) for r in runs if r.kind == "growth"}
    scratch: dict[float, dict[int, dict[str, float]]] = {}
    for r in runs:
        if r.kind == "scratch":
            scratch.setdefault(r.budget, {})[r.seed] = read_result(r)
    stats = compare(growth, scratch)
    cell = {"axis": advice.category, "recipe": advice.recipe,  # the map category, under the files' key "axis"
            "schedule": advice.schedule,
            "growth_at": round(advice.growth_at, 3), "tokens_per_param": float(f"{advice.tokens_per_param:.3g}"),
            "delta": round(stats["delta"], 3), "sd": round(stats["sd"], 3), "seeds": stats["seeds"],
            "seeds_above": stats["seeds_above"]}
    has_speedup = stats["speedup"] is not None  # None: a seed's loss outside the budgets (per_seed says which way)
    cell.update(speedup=round(stats["speedup"], 2) if has_speedup else None,
                speedup_sd=round(stats["speedup_sd"], 2) if has_speedup else None)
    if advice.init is not None:
        cell["init"] = advice.init
    cell.update(schedule_record(run_plan))  # factors, a multi-stage schedule's stages, arch, ceiling
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    cell["where"] = f"sparkling measure {' '.join(argv)} ({when})"
    cell.update(cell_size(grown, device=_device(run), precision=str(run.precision), corpus=_corpus(run),
                          tie_embeddings=bool(run.train.tie_embeddings)))
    note = shared_device_note(jobs, int(getattr(run, "num_devices", 1) or 1),
                              alone=placement is not None and placement.alone)
    if note is not None:
        for entry in stats["per_seed"].values():
            entry.pop("wall_speedup", None)
    cited = advice.cell.describe() if advice.cell is not None else None
    return {"cells": [cell], "growth_recipe": advice.label or advice.recipe, "recipe_note": advice.recipe_note,
            "map_cell": cited,
            "per_seed": stats["per_seed"], "wall_speedup": None if note else stats["wall_speedup"],
            "wall_speedup_sd": None if note else stats["wall_speedup_sd"], "wall_clock_note": note, "jobs": jobs,
            "gpus": placement.describe() if placement is not None else None,
            "runs": [{"name": r.name, "kind": r.kind, "budget": r.budget, "seed": r.seed, "run_dir": str(r.run_dir),
                      **read_result(r)} for r in runs]}


def describe(result: dict) -> str:
    """The lines ``sparkling measure`` ends with: speed-up at equal loss (± sd from 2 seeds), Δ at equal FLOPs,
    wall-clock time to the same loss, per seed."""
    cell = result["cells"][0]
    sd = lambda v: f" ± {v:.2f}" if cell["seeds"] >= 2 else ""
    outside = ", ".join(str(s["speedup"]) for s in result["per_seed"].values() if isinstance(s["speedup"], str))
    speed = (f"speed-up at equal loss {cell['speedup']:.2f}x{sd(cell['speedup_sd'])}" if cell["speedup"] is not None
             else f"speed-up at equal loss outside the budgets ({outside})")
    delta_sd = f" ± {cell['sd']:.3f}" if cell["seeds"] >= 2 else ""
    recipe = result.get("growth_recipe") or cell["recipe"]
    word = verdict(cell["delta"], cell["sd"], cell["seeds"], cell["seeds_above"])
    lines = [f"{cell['axis']}, growth.recipe {recipe}, {cell['schedule']}, growth at {cell['growth_at']:.0%},"
             f" {cell['tokens_per_param']:g} tokens per parameter, {cell['params']:,} parameters on {cell['device']}:",
             f"  {speed}; Δ at equal FLOPs {cell['delta']:+.3f}{delta_sd} val loss (growth above scratch in "
             f"{cell['seeds_above']}/{cell['seeds']} seeds): {phrase(word)}"]
    if cell.get("ceiling") is not None:
        fraction = (f"; measured {cell['speedup']:.2f}x = {cell['speedup'] / cell['ceiling']:.0%} of it"
                    if cell.get("speedup") is not None else "")
        lines.append(f"  this schedule's ceiling (its saving if the grown run matched scratch token for token): "
                     f"{cell['ceiling']:.2f}x{fraction}")
    if result.get("map_cell"):
        lines.append(f"  the map's cell for this config (what sparkling plan cited): {result['map_cell']}")
    if result.get("recipe_note"):
        lines.append(f"  recipe: {result['recipe_note']}")
    if result.get("wall_clock_note"):
        lines.append(f"  wall-clock time to the same loss: {result['wall_clock_note']}")
    elif result.get("wall_speedup") is not None:
        lines.append(f"  wall-clock time to the same loss: {result['wall_speedup']:.2f}x"
                     f"{sd(result['wall_speedup_sd'])} (scratch seconds / growth seconds over steady steps: each "
                     "phase's median step time x its steps, one run at a time; as clean as the machine was idle)")
    for seed, s in result["per_seed"].items():
        speed = s["speedup"] if isinstance(s["speedup"], str) else f"{s['speedup']:.2f}x"
        lines.append(f"  seed {seed}: speed-up {speed}, Δ {s['delta']:+.3f}")
    return "\n".join(lines)


def schedule_record(run_plan: RunPlan) -> dict[str, Any]:
    """What a cell records of the run's schedule and model (``run_plan``: the run's plan): ``factors`` and, for several
    growths, ``stages`` (:func:`~lightning_sparkling.pretrain.advice.target.run_schedule`), ``arch`` (the block family)
    and ``ceiling`` (the schedule's speed-up if the grown run matched scratch token for token)."""
    from lightning_sparkling.pretrain.advice.measured_axes import block_family
    from lightning_sparkling.pretrain.advice.target import run_schedule

    configs, run = run_plan.configs, run_plan.run
    return {**run_schedule(configs, run.stages, run.steps), "arch": block_family(configs[-1]),
            "ceiling": round(run_plan.compute.ceiling, 3)}


def _device(run: Any) -> str:
    import torch

    if str(run.accelerator) in ("gpu", "cuda", "auto") and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return "cpu"


def _corpus(run: Any) -> str:
    data = getattr(run, "data", None)
    return str(getattr(data, "source", None) or type(data).__name__)
