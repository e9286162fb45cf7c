"""The GPU examples, shrunk to a few dozen steps so that each grows, on one GPU: do they run, grow and fit there?
The first step of ``benchmarks/gpu_checks.sh`` (its smoke): a table of pass / first error line per example.

    python benchmarks/gpu_examples.py                                # every GPU example, 40 steps each
    python benchmarks/gpu_examples.py --examples joint_2x,depth_2x --steps 60 --jobs 2
    python benchmarks/gpu_examples.py --steps 12 --jobs 4 --compile auto --table smoke.md   # the smoke
    python benchmarks/gpu_examples.py --tiny --steps 6                # on the CPU: widths / 16, layers / 6

Each ``examples/<name>.yaml`` keeps its model, batch, precision, optimizer, clipping and growth stages; only the
length is changed: ``train.max_tokens`` becomes ``--steps`` steps, each stage's ``at_tokens`` keeps its share of the
run, the corpus is the standard library (``data.source: stdlib``, the example's vocabulary: a tokenizer of seconds,
where ``stdlib+site-packages`` takes minutes to build on a machine with many packages), evaluation runs at half the
run and at its end on 4 batches, and no checkpoint is kept but ``final/``. ``--compile`` sets the top-level
``compile`` key (``auto``: on CUDA only). ``--tiny`` also shrinks the model (:func:`shrink_sizes`: widths / 16,
layers / 6, experts / 4; a vocabulary of 512 and 32-token windows, 2 sequences per micro-batch): the CPU test of
every example (tests/pretrain/test_gpu_path.py) runs it so. Per example: whether it finished and grew at the planned
steps, the first error line of a failure, its wall-clock and fit seconds, its parameters before and after, and the
final val loss (a few dozen steps: the mechanics, not a result). Each example's row is printed, and the JSON (and
``--table``) rewritten, as soon as it ends, so a run cut short keeps what finished.

``--jobs J`` places the examples as ``sparkling measure --jobs`` does
(:func:`~lightning_sparkling.pretrain.measure.placement.place_jobs`): on GPUs each of the J at a time gets its own
slice of the visible GPUs (``CUDA_VISIBLE_DEVICES``, its ``devices`` wide) and master port; more than the GPUs hold
take the slices in turn (the smoke's 7 at once on one GPU). The JSON says where (``gpus``, ``alone``).
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from lightning_sparkling.pretrain.errors import first_error_line  # noqa: E402
from lightning_sparkling.pretrain.measure.placement import Placement, PlacementError, place_jobs  # noqa: E402

EXAMPLES = ("dense_inner_2x", "hidden_2x", "joint_2x", "depth_2x", "olmoe_inner_2x", "two_stage",
            "pythia_70m_to_160m")


WIDTH_KEYS = ("n_embd", "intermediate_size", "moe_intermediate_size", "head_size")


def shrink_sizes(sizes: dict) -> None:
    """``--tiny``: widths / 16 (512 -> 32, head_size 64 -> 4), layers / 6 (at least 1; depth_2x's 6 -> 12 becomes
    1 -> 2), experts / 4 (32 -> 8, top-4 kept), in place, on a ``model_config`` or a stage alike."""
    for key in WIDTH_KEYS:
        if key in sizes:
            sizes[key] //= 16
    if "n_layer" in sizes:
        sizes["n_layer"] = max(1, sizes["n_layer"] // 6)
    if "n_expert" in sizes:
        sizes["n_expert"] //= 4


def shrink(config: dict, steps: int, out_dir: Path, tiny: bool = False) -> tuple[dict, list[int]]:
    """``config`` at ``steps`` steps, its stages at the same shares of the run (each at least one step after the
    previous one); the stages' steps. ``tiny``: the model shrunk too (:func:`shrink_sizes`), the batch cut to 2
    sequences per micro-batch with the example's accumulation kept, a one-step warmup."""
    train = config["train"]
    total = train.pop("max_tokens", None)
    tokens_per_step = train["global_batch_size"] * config["data"]["seq_len"]
    train["max_tokens"] = steps * tokens_per_step
    train["save_interval"] = None
    if tiny:
        model = config.setdefault("model_config", {})
        shrink_sizes(model)
        if "model_name" not in config:
            model["block_size"] = 32
        accumulation = train["global_batch_size"] // train["micro_batch_size"]
        train.update(global_batch_size=2 * accumulation, micro_batch_size=2, max_tokens=None, max_steps=steps,
                     lr_warmup_steps=1, log_interval=1)
        train.pop("lr_warmup_fraction", None)
        config["data"] = {**config["data"], "vocab_size": 512, "seq_len": 32, "max_files": 10, "max_bytes": 100_000,
                          "val_percent": 20}
    at_steps = []
    for stage in config["growth"]["stages"]:
        share = stage.pop("at_tokens") / total if "at_tokens" in stage else stage.pop("at_fraction")
        at = min(steps - 1, max(at_steps[-1] + 1 if at_steps else 1, round(share * steps)))
        stage["at_step"] = at
        stage["rewarmup_steps"] = max(1, min(stage.get("rewarmup_steps", 1), (steps - at) // 2))
        if tiny:
            shrink_sizes(stage)
        at_steps.append(at)
    config["data"] = {**config["data"], "source": "stdlib", "num_workers": 0}
    config["eval"] = {"interval": None if tiny else steps // 2, "max_iters": 1 if tiny else 4}
    if config.get("rms_monitor"):
        config["rms_monitor"] = {"every_n_steps": max(1, steps // 8 if not tiny else 2)}
    config["out_dir"] = str(out_dir)
    return config, at_steps


def run_one(name: str, steps: int, work: Path, timeout: float, compile: str | None = None,
            tiny: bool = False, env: dict[str, str] | None = None) -> dict:
    """Train example ``name`` shortened to ``steps`` steps (:func:`shrink`) in a subprocess (``env``: variables added
    to its environment, e.g. its GPUs); its row: exit code, first error line, growth steps, sizes, seconds, loss."""
    config = yaml.safe_load((ROOT / "examples" / f"{name}.yaml").read_text())
    config, at_steps = shrink(config, steps, work / name, tiny=tiny)
    if compile is not None:
        config["compile"] = compile
    if tiny:
        config["accelerator"] = "cpu"
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "lightning_sparkling.pretrain.cli", "pretrain", "--config",
                               str(path)], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})})
        rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-1500:]
        error = first_error_line(proc.stdout + proc.stderr) if rc != 0 else None
    except subprocess.TimeoutExpired:
        rc, tail, error = "timeout", "", f"timed out after {timeout:g} s"
    row = {"example": name, "rc": rc, "wall_s": round(time.perf_counter() - t0, 1), "planned_growth_steps": at_steps,
           "first_error": error}
    summary = work / name / "summary.json"
    if summary.is_file():
        s = json.loads(summary.read_text())
        row.update({"steps": s["steps"], "grew_at": [e["global_step"] for e in s["growth_events"]],
                    "params": [s["total_params"][0], s["total_params"][-1]] if isinstance(s.get("total_params"), list)
                    else s.get("total_params"), "fit_s": s.get("fit_seconds"), "val_loss": s.get("val_loss"),
                    # the first step after each growth: under compile, the recompile of the grown shapes
                    "first_step_after_growth_s": [round(e["first_step_seconds"], 2) for e in s["growth_events"]
                                                  if e.get("first_step_seconds") is not None]})
    if rc != 0:
        row["tail"] = tail
    elif row.get("grew_at") != at_steps:
        row["first_error"] = f"finished without growing at the planned steps {at_steps} (grew at {row.get('grew_at')})"
    return row


def table_row(r: dict) -> str:
    """One example's line of the table: finished, first error line, growth steps, sizes, seconds, loss."""
    ok = r["rc"] == 0 and not r.get("first_error")
    error = (r.get("first_error") or "").replace("|", "/")[:160]
    return (f"| {r['example']} | {'pass' if ok else 'FAIL'} | {error or '-'} | {r.get('grew_at', '-')} "
            f"({r['planned_growth_steps']}) | {r.get('params', '-')} | {r['wall_s']} | {r.get('fit_s', '-')} | "
            f"{r.get('val_loss', '-')} | {r.get('first_step_after_growth_s', '-')} |")


def place(names: list[str], jobs: int, tiny: bool) -> Placement:
    """Where the examples run, ``jobs`` at a time: each its own slice of the visible GPUs (sized by the widest
    example's ``devices``), in turn when they are fewer (``--tiny``: the CPU, master ports only)."""
    configs = [yaml.safe_load((ROOT / "examples" / f"{n}.yaml").read_text()) for n in names]
    devices = max(int(c.get("devices", 1)) for c in configs)
    accelerator = "cpu" if tiny else str(configs[0].get("accelerator", "auto"))
    return place_jobs(jobs, devices, accelerator, share=True)


def run_placed(slots: queue.Queue, placement: Placement, name: str, *args, **kwargs) -> dict:
    """:func:`run_one` in a free slot of ``placement`` (taken from ``slots``, given back when it ends)."""
    slot = slots.get()
    try:
        return {**run_one(name, *args, **kwargs, env=placement.env(slot)), "gpus": placement.describe()[slot]}
    finally:
        slots.put(slot)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", default=",".join(EXAMPLES), help="comma list (default: every GPU example)")
    parser.add_argument("--steps", type=int, default=40, help="steps per example (default 40)")
    parser.add_argument("--jobs", type=int, default=1, help="examples at once on the GPU (default 1)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per example (default 600)")
    parser.add_argument("--work", default=None, help="folder for the runs (default: a temporary one)")
    parser.add_argument("--out", default=str(HERE / "results" / "gpu_examples.json"), help="JSON path")
    parser.add_argument("--table", default=None, help="also write the markdown table here, row by row")
    parser.add_argument("--compile", choices=("auto", "true", "false"), default=None,
                        help="the top-level compile key of every example (default: the example's own)")
    parser.add_argument("--tiny", action="store_true", help="shrink the models too (a CPU run: seconds each)")
    args = parser.parse_args(argv)
    names = args.examples.split(",")
    unknown = [n for n in names if n not in EXAMPLES]
    if unknown:
        parser.error(f"--examples: unknown {', '.join(unknown)} (known: {', '.join(EXAMPLES)})")
    work = Path(args.work or tempfile.mkdtemp(prefix="gpu_examples_"))
    work.mkdir(parents=True, exist_ok=True)
    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    try:
        placement = place(names, args.jobs, args.tiny)
    except PlacementError as err:
        parser.error(str(err))
    slots: queue.Queue = queue.Queue()
    for slot in range(placement.jobs):
        slots.put(slot)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    head = ["| example | result | first error line | grew at (planned) | parameters | wall-clock (s) | fit (s) | "
            "val loss | first step after growth (s) |", "|---|---|---|---|---|---|---|---|---|"]
    print("\n".join(head), flush=True)
    rows, lines = [], list(head)
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_placed, slots, placement, n, args.steps, work, args.timeout, args.compile,
                               args.tiny) for n in names]
        for future in as_completed(futures):  # each row as its example ends, the JSON rewritten each time
            r = future.result()
            rows.append(r)
            lines.append(table_row(r))
            print(lines[-1], flush=True)
            if r["rc"] != 0:
                print(f"--- {r['example']}: {r['rc']}\n{r['tail']}", flush=True)
            out.write_text(json.dumps({"device": device, "steps": args.steps, "jobs": args.jobs,
                                       "gpus": placement.describe(), "alone": placement.alone, "rows": rows,
                                       "table": "\n".join(lines)}, indent=2) + "\n")
            if args.table:
                Path(args.table).write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")
    return 0 if all(r["rc"] == 0 and not r.get("first_error") for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
