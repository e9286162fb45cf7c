"""A GPU campaign that advances one step each time a GPU is lent (issue 38): an ordered queue of cells (size x axis x
recipe x seed x budgets), each the growth run and the grown shape from scratch at several budgets, trained with the
engine of ``sparkling measure``; every finished run is appended to a committed results file, so a later session
never trains it again.

    python benchmarks/campaign.py --dry-run                      # the queue, what is done, estimated GPU-minutes
    python benchmarks/campaign.py --deadline 14:35               # train the next unfinished runs until 14:35 (UTC)
    python benchmarks/campaign.py --deadline +9m --jobs 6        # ... for 9 minutes, 6 runs at once
    python benchmarks/campaign.py --tiny --deadline +5m          # the CPU mode CI tests (a tiny model, seconds)

``--deadline``: ``HH:MM[:SS]`` (today, UTC), an ISO date-time, ``+N`` / ``+Nm`` / ``+Ns`` (minutes / seconds from
now) or epoch seconds. No run starts after it; a run still training at it is stopped and trained again next time,
and the campaign ends as when its queue is done (the complete cells written, exit 0). Ctrl-C or ``SIGTERM`` stops the
runs too, and the campaign with exit 130.
``--jobs``: runs at once (default: ``auto``, as many as the device's free memory holds by :func:`auto_jobs`'s
estimate, on each slice of the visible GPUs, at most 8; 1 on CPU). On GPUs each run gets its own slice of the visible
GPUs (``CUDA_VISIBLE_DEVICES``, its ``devices`` wide) and master port
(:func:`~lightning_sparkling.pretrain.measure.placement.place_jobs`); more runs than slices take the slices in turn
(several small runs on one GPU).

Results: ``--results`` (default ``benchmarks/results/campaign.jsonl``), one JSON line per finished run (the cell's
key, the run, its final val loss, FLOPs, seconds, device); ``<results>`` with ``.cells.json`` instead of ``.jsonl``:
every complete cell in the measured map's format plus its wall-clock time to the same loss (``wall_speedup``:
T_scratch / T_growth over steady steps, the paper's "speed-up" column) beside the FLOPs ratio (``speedup``), only
where every run of the cell trained alone (``--jobs 1``, or each on its own GPUs: ``alone``; each run's ``jobs`` and
``alone`` are in the results file); otherwise
``wall_speedup`` is ``None`` and ``wall_clock_note`` says why: runs that share a device time what ran beside them.
A run that fails is logged with its first error line and the campaign goes on to the next one.

GPU-minutes are estimated, not measured: each run's FLOPs (``6 N D`` per phase) at the throughput of one H100 in
bf16-mixed measured in docs/BENCHMARKS.md ("Growth cost on the GPU": 91.2M parameters, 8 x 1024 tokens per step in
0.028 s, 160 TFLOP/s), never faster than :data:`STEP_FLOOR_S` per step (small models are launch-bound), plus
:data:`RUN_OVERHEAD_S` per run (start-up, data, evaluations).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

RESULTS = HERE / "results" / "campaign.jsonl"
H100_FLOPS_PER_S = 6 * 91.2e6 * 8 * 1024 / 0.028
"""Training FLOPs per second of one H100 (bf16-mixed) at 91.2M parameters (docs/BENCHMARKS.md, growth_cost)."""
STEP_FLOOR_S = 0.012
"""The least time an optimizer step takes on the GPU, however small the model (an estimate: kernel launches)."""
RUN_OVERHEAD_S = 40.0
"""Per run: process start, data loading, evaluations (an estimate)."""
BUDGETS = (0.7, 1.0, 1.4, 2.0)
AXES = (("joint", "random-zero + ratio 3"), ("depth", "depth stack copy-zero"))
"""The width default (joint 2x at 50%, ``random-zero-3x``) and depth 2x at 25% (``stack``, ``copy-zero``)."""
GPU_SIZES = ("gpu-s", "gpu-m")
SEEDS = (1, 2, 3)

# the CPU mode: a model of a few thousand parameters on a sliver of the standard library, seconds per run
TINY_SIZE = {
    "small": {"n_layer": 2, "n_head": 2, "n_query_groups": 2, "head_size": 8, "n_embd": 16, "intermediate_size": 32,
              "block_size": 32},
    "large": {"n_embd": 32, "intermediate_size": 64},
    "config": {"precision": "32-true", "accelerator": "cpu", "devices": 1, "num_threads": 1,
               "data": {"source": "stdlib", "vocab_size": 300, "seq_len": 32, "max_files": 20, "max_bytes": 100_000,
                        "val_percent": 20},
               "train": {"global_batch_size": 4, "micro_batch_size": 4, "max_steps": 12, "max_norm": 1.0,
                         "log_interval": 4, "save_interval": None},
               "eval": {"interval": 6, "max_iters": 2},
               "optimizer": {"class_path": "torch.optim.AdamW",
                             "init_args": {"lr": 0.003, "weight_decay": 0.1, "betas": [0.9, 0.95]}},
               "rms_monitor": None},
    "rewarmup_steps": 2,
}


@dataclasses.dataclass(frozen=True)
class Cell:
    """One cell of the queue: a size, an axis and its growth row (recipe), a seed, the scratch budgets."""

    size: str
    axis: str
    row: str
    seed: int
    budgets: tuple[float, ...] = BUDGETS

    @property
    def key(self) -> str:
        """``'gpu-s/joint/random-zero-ratio-3/seed1'``: what the results file names the cell by."""
        return f"{self.size}/{self.axis}/{re.sub(r'[^a-z0-9]+', '-', self.row.lower()).strip('-')}/seed{self.seed}"


def queue(sizes: Sequence[str] = GPU_SIZES, seeds: Sequence[int] = SEEDS) -> list[Cell]:
    """The campaign's order: size by size (smallest first), seed by seed, the axes of :data:`AXES` within a seed,
    so whatever a session reaches is a whole cell of the smallest unfinished size."""
    return [Cell(size, axis, row, seed) for size in sizes for seed in seeds for axis, row in AXES]


def size_preset(name: str) -> dict[str, Any]:
    import reproduce as repro

    return dict(TINY_SIZE, rows=None, axes=["joint", "depth"]) if name == "tiny" else repro.resolve_size(name)


def cell_runs(cell: Cell, out: Path, overrides: Sequence[str] = ()) -> tuple[list, dict[str, Any]]:
    """The runs of ``cell`` (the measure engine's :class:`MeasureRun`) and its facts (parameters, tokens, FLOPs, the
    resolved run and its plan)."""
    import yaml

    import reproduce as repro
    from lightning_sparkling.pretrain.advice.run_plan import plan_run
    from lightning_sparkling.pretrain.cli import parse
    from lightning_sparkling.pretrain.measure.measure_runs import plan_runs

    config = repro.build_config(size_preset(cell.size), cell.axis, repro.ROWS[cell.row], cell.seed)
    for item in overrides:
        key, _, value = item.partition("=")
        repro.set_dotted(config, key, yaml.safe_load(value))
    path = out / "configs" / f"{cell.key.replace('/', '_')}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({**config, "out_dir": str(out / cell.key)}, sort_keys=False))
    _, run, dumped = parse(["--config", str(path)], "plan")
    run_plan = plan_run(run)  # the stages' plans, the compute and the advice, once
    est, grown = run_plan.compute, run_plan.final_config
    per_step = 6.0 * est.active_params[-1] * run.tokens_per_step
    runs = plan_runs(yaml.safe_load(dumped), dataclasses.asdict(grown), growth_flops=est.flops, flops_per_step=per_step,
                     seeds=[cell.seed], budgets=cell.budgets, out=out / cell.key)
    facts = {"params": est.total_params[-1], "tokens": run.total_tokens,
             "tokens_per_param": run.total_tokens / est.active_params[-1], "growth_flops": est.flops,
             "steps": {r.name: round(r.flops / per_step) if r.kind == "scratch" else run.steps for r in runs},
             "tokens_per_step": run.tokens_per_step, "run": run, "run_plan": run_plan}
    return runs, facts


def estimate_seconds(flops: float, steps: int) -> float:
    """A run's estimated GPU seconds (see the module's docstring)."""
    return max(flops / H100_FLOPS_PER_S, steps * STEP_FLOOR_S) + RUN_OVERHEAD_S


def read_results(path: Path) -> dict[str, dict]:
    """The finished runs of the results file, by ``'<cell key>/<run name>'``."""
    done = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                entry = json.loads(line)
                done[f"{entry['cell']}/{entry['run']}"] = entry
    return done


def parse_deadline(text: str, now: float | None = None) -> float:
    """``--deadline`` as ``time.time()`` seconds (``HH:MM[:SS]`` today in UTC, ISO, ``+N[m|s]``, epoch)."""
    now = time.time() if now is None else now
    if m := re.fullmatch(r"\+(\d+(?:\.\d+)?)([ms]?)", text):
        return now + float(m[1]) * (1 if m[2] == "s" else 60)
    if re.fullmatch(r"\d{9,}(\.\d+)?", text):
        return float(text)
    if re.fullmatch(r"\d{1,2}:\d{2}(:\d{2})?", text):
        day = datetime.fromtimestamp(now, timezone.utc)
        parts = [int(p) for p in text.split(":")] + [0]
        at = day.replace(hour=parts[0], minute=parts[1], second=parts[2], microsecond=0)
        return (at if at.timestamp() > now - 12 * 3600 else at + timedelta(days=1)).timestamp()
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--deadline {text!r}: give HH:MM (UTC), an ISO date-time, +MINUTES or epoch "
                         "seconds") from None
    return (at if at.tzinfo else at.replace(tzinfo=timezone.utc)).timestamp()


def auto_jobs(device: str, per_run_bytes: float, slices: int = 1) -> int:
    """Runs at once: on GPUs as many as one GPU's free memory holds (``per_run_bytes`` each, estimated) on each of
    ``slices`` slices of the visible GPUs, at most 8 (on 8 GPUs: one run alone on each)."""
    if device == "cpu":
        return 1
    import torch

    free, _ = torch.cuda.mem_get_info()
    return max(1, min(8, slices * int(0.8 * free // max(per_run_bytes, 1))))


def dry_run(cells: Sequence[Cell], done: dict, out: Path, overrides: Sequence[str]) -> str:
    """The queue, one line per cell: its size, tokens per parameter, runs done, estimated GPU-minutes left."""
    lines, total = [], 0.0
    for cell in cells:
        runs, facts = cell_runs(cell, out, overrides)
        left = [r for r in runs if f"{cell.key}/{r.name}" not in done]
        minutes = sum(estimate_seconds(r.flops, facts["steps"][r.name]) for r in left) / 60
        total += minutes
        lines.append(f"{cell.key:<48} {facts['params'] / 1e6:6.2f}M params, {facts['tokens_per_param']:5.1f} "
                     f"tokens/param, {len(runs) - len(left)}/{len(runs)} runs done, ~{minutes:5.1f} GPU-min left")
    lines.append(f"{len(cells)} cells, ~{total:.0f} GPU-minutes left (estimated: 1 H100, bf16, runs one after "
                 "another; runs at once share the device)")
    return "\n".join(lines)


def run_campaign(cells: Sequence[Cell], *, results: Path, out: Path, deadline: float, jobs: int | str,
                 overrides: Sequence[str] = (), log=print) -> int:
    """Train the next unfinished runs of ``cells`` until ``deadline``; append each finished run to ``results``, then
    write the complete cells (:func:`write_cells`). Returns 0, the deadline reached or not (the runs it stopped are
    trained again next time); a ``SIGINT`` or ``SIGTERM`` stops the runs and raises ``KeyboardInterrupt``."""
    from lightning_sparkling.pretrain.measure.measure_runs import is_done, prepare_data, read_result, train_runs
    from lightning_sparkling.pretrain.measure.placement import on_gpu, place_jobs, visible_gpus

    done = read_results(results)
    todo, cell_of = [], {}
    for cell in cells:
        runs, facts = cell_runs(cell, out, overrides)
        for r in runs:
            if f"{cell.key}/{r.name}" not in done:
                todo.append(r)
                cell_of[r.run_dir] = (cell, facts)
    if not todo:
        log("every run of the queue is in the results file")
        return 0
    first = cell_of[todo[0].run_dir][1]["run"]
    device = _device(first)
    if jobs == "auto":
        params = max(f["params"] for _, f in cell_of.values())
        per_run = first.num_devices if on_gpu(first.accelerator) else 1
        jobs = auto_jobs(device, per_run_bytes=16 * params + 2e9,  # weights, grads, AdamW state + activations
                         slices=max(1, len(visible_gpus()) // per_run) if device != "cpu" else 1)
    # each run its own slice of the GPUs (more runs than slices: in turn) and master port; raises PlacementError
    placement = place_jobs(jobs, first.devices, first.accelerator, share=True)
    where = "" if placement.gpus[0] is None else f" (GPUs {' | '.join(placement.describe())})"
    log(f"{len(todo)} runs to train on {device}, {jobs} at a time{where}, until "
        f"{datetime.fromtimestamp(deadline, timezone.utc):%H:%M:%S} UTC")

    def append(run) -> None:
        cell, facts = cell_of[run.run_dir]
        entry = {"cell": cell.key, "run": run.name, "size": cell.size, "axis": cell.axis, "row": cell.row,
                 "seed": cell.seed, "kind": run.kind, "budget": run.budget, **read_result(run), "device": device,
                 "jobs": jobs, "alone": placement.alone,
                 "params": facts["params"], "tokens_per_param": round(facts["tokens_per_param"], 2)}
        results.parent.mkdir(parents=True, exist_ok=True)
        with results.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")

    for run in [r for r in todo if is_done(r)]:  # finished in an earlier call on this machine, never recorded
        append(run)
        todo.remove(run)
    if jobs > 1:  # one data cache per size, built before the runs start side by side
        for facts in {id(f["run"].data): f for _, f in cell_of.values()}.values():
            prepare_data(facts["run"])
    failed = train_runs(todo, jobs, log, deadline=deadline, on_done=append,  # a deadline returns; Ctrl-C raises
                        placement=placement)
    written = write_cells(results, cells, out, overrides)
    log(f"wrote {results.with_suffix('.cells.json')}: {len(written)} complete cell(s)"
        + (f"; {len(failed)} run(s) failed: {', '.join(r.name for r in failed)}" if failed else ""))
    return 0


def write_cells(results: Path, cells: Sequence[Cell], out: Path, overrides: Sequence[str] = ()) -> list[dict]:
    """Every complete cell of the results file in the measured map's format (plus ``wall_speedup``), written to
    ``<results>.cells.json``."""
    from lightning_sparkling.pretrain.advice.measured_size import cell_size
    from lightning_sparkling.pretrain.measure.command import shared_device_note
    from lightning_sparkling.pretrain.measure.measure_stats import compare

    done = read_results(results)
    out_cells = []
    for cell in cells:
        runs, facts = cell_runs(cell, out, overrides)
        entries = [done.get(f"{cell.key}/{r.name}") for r in runs]
        if not all(entries):
            continue
        growth = {cell.seed: entries[0]}
        scratch = {e["budget"]: {cell.seed: e} for e in entries[1:]}
        stats = compare(growth, scratch)
        note = shared_device_note(max(int(e.get("jobs") or 0) or 2 for e in entries),  # no "jobs": an older,
                                  alone=all(e.get("alone") for e in entries))  # unrecorded run; the campaign has
        # always trained several at a time, and each alone on its GPUs only since "alone" is recorded
        run, run_plan = facts["run"], facts["run_plan"]
        advice = run_plan.advice
        entry = {"cell": cell.key, "axis": advice.category, "recipe": advice.recipe, "schedule": advice.schedule,
                 "growth_at": round(advice.growth_at, 3), "tokens_per_param": round(advice.tokens_per_param, 1),
                 "delta": round(stats["delta"], 3), "seeds": 1, "seeds_above": stats["seeds_above"],
                 "speedup": stats["speedup"] and round(stats["speedup"], 3),
                 "wall_speedup": None if note else stats["wall_speedup"] and round(stats["wall_speedup"], 3),
                 "wall_clock_note": note,
                 "per_seed": stats["per_seed"],
                 **cell_size(run_plan.final_config, device=entries[0]["device"], precision=str(run.precision),
                             corpus=str(run.data.source), tie_embeddings=run.train.tie_embeddings)}
        out_cells.append(entry)
    path = results.with_suffix(".cells.json")
    path.write_text(json.dumps(out_cells, indent=1) + "\n", encoding="utf-8")
    return out_cells


def _device(run: Any) -> str:
    import torch

    if str(run.accelerator) in ("gpu", "cuda", "auto") and torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return "cpu"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deadline", help="HH:MM (UTC), ISO date-time, +MINUTES, +Ns or epoch seconds")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the queue and estimated GPU-minutes; train nothing")
    parser.add_argument("--jobs", default="auto", help="runs at once (default auto: as the device's memory holds)")
    parser.add_argument("--sizes", default=",".join(GPU_SIZES), help=f"sizes in order (default {','.join(GPU_SIZES)})")
    parser.add_argument("--seeds", type=int, default=len(SEEDS), help="seeds per cell, 1..N (default 3)")
    parser.add_argument("--tiny", action="store_true", help="the CPU mode: a tiny model, seconds per run (CI)")
    parser.add_argument("--results", type=Path, default=None, help=f"results file (default {RESULTS})")
    parser.add_argument("--out", type=Path, default=Path("/tmp/campaign"), help="run folders (default /tmp/campaign)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a dotted config key on every run (e.g. data.cache_dir=/tmp/cache)")
    args = parser.parse_args(argv)
    sizes = ["tiny"] if args.tiny else [s.strip() for s in args.sizes.split(",") if s.strip()]
    import reproduce as repro
    from lightning_sparkling.pretrain.measure.placement import PlacementError

    unknown = [s for s in sizes if s != "tiny" and s not in repro.SIZES]
    if unknown:
        parser.error(f"--sizes {unknown[0]!r}: not a size of benchmarks/reproduce.py "
                     f"({', '.join(sorted(repro.SIZES))})")
    if args.seeds < 1:
        parser.error(f"--seeds {args.seeds}: give 1 or more")
    if args.jobs != "auto" and not (args.jobs.isdigit() and int(args.jobs) >= 1):
        parser.error(f"--jobs {args.jobs!r}: give a whole number >= 1 or auto")
    results = args.results or (args.out / "campaign_tiny.jsonl" if args.tiny else RESULTS)
    cells = queue(sizes, range(1, args.seeds + 1))
    if args.tiny:
        cells = [dataclasses.replace(c, budgets=(1.0, 2.0)) for c in cells]
    if args.dry_run:
        print(dry_run(cells, read_results(results), args.out, args.set))
        return 0
    if not args.deadline:
        parser.error("--deadline is required to train (or give --dry-run)")
    try:
        deadline = parse_deadline(args.deadline)
    except ValueError as err:
        parser.error(str(err))
    try:
        return run_campaign(cells, results=results, out=args.out, deadline=deadline,
                            jobs=args.jobs if args.jobs == "auto" else int(args.jobs), overrides=args.set)
    except PlacementError as err:  # before any run starts
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (not the deadline): the running runs were stopped
        print(f"campaign: interrupted; the finished runs are in {results} (run it again to go on; the cells file is "
              "written when a call ends by itself)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
