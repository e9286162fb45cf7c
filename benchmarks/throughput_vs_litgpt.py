"""Training throughput of ``sparkling pretrain`` against ``litgpt pretrain``: same model, data, batch, precision.

    python benchmarks/throughput_vs_litgpt.py                        # CPU, eager, 3 repeats
    python benchmarks/throughput_vs_litgpt.py --tiny --repeats 1     # seconds: the test's smoke run
    python benchmarks/throughput_vs_litgpt.py --accelerator gpu --precision bf16-mixed --compile true --size gpu

Both tools train the same litgpt ``Config`` with no growth stage on the same text (stdlib sources copied into a
folder of ``.txt`` files: ``sparkling`` reads it as ``data.data_dir``, litgpt through ``litgpt.data.TextFiles``),
tokenized by the byte-level BPE that ``sparkling`` trains (its ``final/`` folder is litgpt's ``tokenizer_dir``), with
one micro-batch per optimizer step, AdamW with the same arguments, clipping at 1.0, one data-loader worker and no
validation or checkpoint inside the timed steps. Each tool's own optimizer default is kept (litgpt: fused AdamW on
CUDA only; sparkling: fused on CUDA and the CPU); ``--sparkling-foreach`` adds a sparkling variant with litgpt's CPU
kernel, ``--activation-checkpointing`` one with ``activation_checkpointing: true`` (every block's activations
recomputed in the backward; litgpt's pretrain has no such switch, so its ratio is its cost against litgpt).

**What is timed, the same way on both sides.** Both log fabric's ``Throughput`` counters after every optimizer step
(litgpt's pretrain loop does; ``sparkling`` through ``TokenThroughputMonitor``): ``time``, seconds since the training
loop started (after the model, the data and, for litgpt, the sanity validation), and ``lengths``, the input tokens
seen. Tokens/s is ``(lengths[last] - lengths[w]) / (time[last] - time[w])`` with ``w = --warmup`` steps: process
start, imports, data preparation, the first steps (and their compilation with ``--compile true``) are left out on
both sides equally. The variants (litgpt, sparkling with the RMS monitor off, and on at ``--rms-every``) run one after
another within each repeat, so a shared machine's drift hits all of them alike; the ratio is taken per repeat and
its median and range reported. Writes a table and ``--out`` (JSON). A line is printed as each run starts and as it
ends (its steps, tokens/s, seconds), and ``--out`` is rewritten before the setup and around every run, marked
``"complete": false`` until the end, with the runs done so far (``runs``, ``summary`` of the variants that have
some), the run going on (``running``) or what stopped it (``error``): a benchmark stopped by a timeout keeps every
run it finished.

**FLOPs per batch and MFU, read the same way.** Both tools count a micro-batch's training FLOPs with Lightning's
``measure_flops`` on a meta-device copy of the model (litgpt once, ``sparkling`` again after each growth) and log
``flops_per_sec`` over a window of 5 micro-batches (:data:`FLOPS_WINDOW`). The FLOPs per batch each tool counted are
read back from that: ``flops_per_sec`` at the last step times the window's seconds over its 4 batches
(:func:`flops_per_batch_from_log`); ``sparkling`` also logs its figure as ``train/flops_per_batch``. The two tools
agree within 1% on the same config (``flops_per_batch``'s ``ratio_median``); MFU (``device/mfu``, median over the
timed steps) is logged where Lightning knows the device's peak (CUDA GPUs; ``null`` on a CPU).

``--compile false`` runs litgpt eager by ``TORCHDYNAMO_DISABLE=1`` (its pretrain always calls ``torch.compile``);
``--compile true`` passes ``--compile true`` to ``sparkling`` (the ``compile`` key) and lets litgpt compile.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

#: model sizes: litgpt Config fields (LLaMA-style) and the sequence length / micro-batch of the run
SIZES = {
    "tiny": dict(n_layer=2, n_embd=64, n_head=4, intermediate_size=128, vocab=512, seq=64, batch=2),
    "cpu": dict(n_layer=4, n_embd=256, n_head=4, intermediate_size=704, vocab=4096, seq=256, batch=4),
    "gpu": dict(n_layer=12, n_embd=768, n_head=12, intermediate_size=2048, vocab=16384, seq=1024, batch=8),
}
VARIANTS = ("litgpt", "sparkling", "sparkling+rms")
#: micro-batches in both tools' FLOP/s window: litgpt's ``ThroughputMonitor(window_size=5)`` gets one update per
#: logged step (``log_interval`` 1, one micro-batch per step), ``sparkling``'s ``TokenThroughputMonitor`` one per
#: micro-batch over ``5 * accumulate`` (accumulation 1 here)
FLOPS_WINDOW = 5
#: the metrics.csv keys of each tool: (time, input tokens, FLOP/s per device, MFU)
KEYS = {"litgpt": ("time", "lengths", "device/flops_per_sec", "device/mfu"),
        "sparkling": ("train/time", "train/lengths", "train/device/flops_per_sec", "train/device/mfu")}


def model_config(size: dict) -> dict:
    return dict(name="bench", block_size=size["seq"], vocab_size=size["vocab"], padded_vocab_size=size["vocab"],
                n_layer=size["n_layer"], n_embd=size["n_embd"], n_head=size["n_head"], n_query_groups=size["n_head"],
                intermediate_size=size["intermediate_size"], mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm",
                bias=False, parallel_residual=False, rotary_percentage=1.0)


def param_count(size: dict) -> int:
    import torch
    from litgpt import GPT, Config

    with torch.device("meta"):
        return sum(p.numel() for p in GPT(Config(**model_config(size))).parameters())


# ------------------------------------------------------------------------------------------------------------ setup
def write_text(folder: Path, max_bytes: int) -> Path:
    """``folder/train/*.txt`` and ``folder/val/*.txt``: stdlib sources (by the corpus's own file split), capped."""
    from lightning_sparkling.pretrain.data.corpus import corpus_splits

    if (folder / "done").is_file():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    splits = corpus_splits("stdlib", None, False, val_percent=10.0, max_files=None, max_bytes=max_bytes)
    for split, files in zip(("train", "val"), splits):
        (folder / split).mkdir(parents=True)
        for i, f in enumerate(files):
            (folder / split / f"{i:05d}.txt").write_text(Path(f.path).read_text(errors="replace"))
    (folder / "done").write_text("")
    return folder


def common(args: argparse.Namespace, size: dict) -> dict:
    """The config keys both tools read the same way (litgpt's names)."""
    return {
        "model_name": "bench", "model_config": model_config(size), "precision": args.precision, "devices": 1,
        "seed": 42, "logger_name": "csv",
        "train": {"global_batch_size": size["batch"], "micro_batch_size": size["batch"], "log_interval": 1,
                  "max_norm": 1.0, "lr_warmup_steps": 2, "min_lr": 3e-5, "save_interval": None},
        "optimizer": {"class_path": "torch.optim.AdamW",
                      "init_args": {"lr": 3e-4, "weight_decay": 0.1, "betas": [0.9, 0.95]}},
    }


def sparkling_config(args, size: dict, text: Path, out: Path, variant: str) -> dict:
    cfg = common(args, size)
    cfg.pop("model_name")
    cfg.update(accelerator=args.accelerator, out_dir=str(out),
               data={"data_dir": str(text), "vocab_size": size["vocab"], "seq_len": size["seq"],
                     "cache_dir": str(args.workdir / "cache"), "num_workers": 1},
               eval={"interval": args.steps + 1, "max_iters": 1, "final_validation": False},
               rms_monitor={"every_n_steps": args.rms_every} if variant == "sparkling+rms" else None)
    cfg["train"]["max_steps"] = args.steps
    if variant == "sparkling-foreach":
        cfg["optimizer"]["init_args"]["foreach"] = True
    if variant == "sparkling+ac":
        cfg["activation_checkpointing"] = True
    return cfg


def litgpt_config(args, size: dict, text: Path, out: Path, tokenizer: Path) -> dict:
    cfg = common(args, size)
    cfg.update(out_dir=str(out), tokenizer_dir=str(tokenizer),
               data={"class_path": "litgpt.data.TextFiles",
                     "init_args": {"train_data_path": str(text / "train"), "val_data_path": str(text / "val"),
                                   "num_workers": 1}},
               eval={"interval": args.steps + 1, "max_iters": 1, "initial_validation": False,
                     "final_validation": False})
    cfg["train"]["max_tokens"] = args.steps * size["batch"] * size["seq"]
    return cfg


def _yaml(path: Path, cfg: dict) -> Path:
    import yaml

    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _sparkling_has_compile() -> bool:
    """Whether this version of ``sparkling pretrain`` has the top-level ``compile`` key."""
    import inspect

    from lightning_sparkling.pretrain.config.schema import pretrain_arguments

    return "compile" in inspect.signature(pretrain_arguments).parameters


def command(tool: str, cfg_path: Path, args) -> tuple[list[str], dict]:
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONWARNINGS": "ignore"}
    if tool == "litgpt":
        if args.compile == "false":
            env["TORCHDYNAMO_DISABLE"] = "1"
        return [sys.executable, "-m", "litgpt", "pretrain", "--config", str(cfg_path)], env
    cmd = [sys.executable, "-m", "lightning_sparkling.pretrain.cli", "pretrain", "--config", str(cfg_path)]
    if args.compile == "true" or (args.compile == "false" and _sparkling_has_compile()):
        cmd += ["--compile", args.compile]
    return cmd, env


# ------------------------------------------------------------------------------------------------------------ measure
def read_csv(out: Path, time_key: str, tokens_key: str) -> list[tuple[float, float]]:
    """``[(time, tokens)]`` per logged step from the run's ``metrics.csv`` (rows that carry both)."""
    rows = []
    for path in sorted(out.rglob("metrics.csv")):
        with open(path) as f:
            for row in csv.DictReader(f):
                if row.get(time_key) and row.get(tokens_key):
                    rows.append((float(row[time_key]), float(row[tokens_key])))
    return sorted(rows, key=lambda r: r[1])


def read_steps(out: Path) -> dict[int, dict[str, float]]:
    """``{step: {key: value}}`` of every numeric cell of the run's ``metrics.csv`` files (rows of one step merged)."""
    steps: dict[int, dict[str, float]] = {}
    for path in sorted(out.rglob("metrics.csv")):
        with open(path) as f:
            for row in csv.DictReader(f):
                if not row.get("step"):
                    continue
                cells = steps.setdefault(int(float(row["step"])), {})
                for key, value in row.items():
                    if key != "step" and value not in ("", None):
                        with contextlib.suppress(ValueError):
                            cells[key] = float(value)
    return steps


def flops_per_batch_from_log(steps: dict[int, dict[str, float]], time_key: str, flops_key: str,
                             window: int = FLOPS_WINDOW) -> float | None:
    """The FLOPs of one micro-batch a tool counted, read back from its log: Lightning's ``flops_per_sec`` at the last
    step that has it is the window's FLOPs but its first batch's (``window - 1`` batches, one per step here) over the
    window's seconds (``time`` of the last step minus that of ``window - 1`` steps before). ``None`` when the log has
    no FLOP/s.

    Args:
        steps: :func:`read_steps` of the run.
        time_key: the tool's cumulative-seconds key (``time``, ``train/time``).
        flops_key: its FLOP/s key (``device/flops_per_sec``, ``train/device/flops_per_sec``).
        window: micro-batches in the tool's FLOP/s window (one per logged step).

    Example::

        >>> steps = {s: {"time": 2.0 * s} for s in range(6)}
        >>> steps[5]["device/flops_per_sec"] = 4 * 1000 / (10.0 - 2.0)   # 1000 FLOPs per batch
        >>> flops_per_batch_from_log(steps, "time", "device/flops_per_sec")
        1000.0
    """
    logged = [s for s, cells in steps.items() if flops_key in cells]
    if not logged:
        return None
    last = max(logged)
    first = last - (window - 1)
    if first not in steps or time_key not in steps[first]:
        raise RuntimeError(f"step {first} has no {time_key!r}: the FLOP/s window needs every step logged")
    return steps[last][flops_key] * (steps[last][time_key] - steps[first][time_key]) / (window - 1)


def median_mfu(steps: dict[int, dict[str, float]], mfu_key: str, warmup: int) -> float | None:
    """The median logged MFU of the steps after ``warmup`` (``None`` where Lightning knows no peak, e.g. a CPU)."""
    values = [cells[mfu_key] for s, cells in sorted(steps.items()) if s >= warmup and mfu_key in cells]
    return statistics.median(values) if values else None


def steady_tokens_per_sec(rows: list[tuple[float, float]], warmup: int) -> float:
    """Tokens/s between the end of step ``warmup`` and the last step (time and tokens are cumulative)."""
    if len(rows) <= warmup + 1:
        raise RuntimeError(f"{len(rows)} steps logged: need more than warmup + 1 = {warmup + 1}")
    (t0, n0), (t1, n1) = rows[warmup], rows[-1]
    return (n1 - n0) / (t1 - t0)


def median_step_tokens_per_sec(rows: list[tuple[float, float]], warmup: int) -> float:
    """Tokens of one step over the median step time after ``warmup`` steps: on a shared machine, a step stalled by
    another process (seconds, where a step takes one) weighs in the mean above, not here."""
    steady_tokens_per_sec(rows, warmup)  # enough steps
    steps = [(t1 - t0, n1 - n0) for (t0, n0), (t1, n1) in zip(rows[warmup:], rows[warmup + 1:])]
    return statistics.median(n for _, n in steps) / statistics.median(t for t, _ in steps)


def run_one(variant: str, args, size: dict, text: Path, tokenizer: Path, rep: int) -> dict:
    out = args.workdir / "runs" / f"{variant}-{rep}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    if variant == "litgpt":
        cfg = litgpt_config(args, size, text, out, tokenizer)
    else:
        cfg = sparkling_config(args, size, text, out, variant)
    cmd, env = command("litgpt" if variant == "litgpt" else "sparkling", _yaml(out / "config.yaml", cfg), args)
    start, load = time.perf_counter(), os.getloadavg()[0]
    proc = subprocess.run(cmd, env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=args.timeout)
    wall = time.perf_counter() - start
    (out / "log.txt").write_text(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(f"{variant} failed (exit {proc.returncode}): {_first_error(proc)}; log {out / 'log.txt'}"
                           f"\n{proc.stderr[-3000:]}")
    return {"variant": variant, "repeat": rep, **measure(out, variant, args.warmup), "wall_s": wall,
            "load_1min": load}


def _first_error(proc: subprocess.CompletedProcess) -> str:
    from lightning_sparkling.pretrain.errors import first_error_line

    return first_error_line((proc.stdout or "") + "\n" + (proc.stderr or "")) or "no error line in its output"


def measure(out: Path, variant: str, warmup: int) -> dict:
    """The steady-state figures of one finished run's ``metrics.csv``: tokens/s (over the window, and from the median
    step), the FLOPs per batch read back from the logged FLOP/s (:func:`flops_per_batch_from_log`; ``sparkling``'s
    own ``train/flops_per_batch`` too) and the median MFU (``None`` without a known peak)."""
    time_key, tokens_key, flops_key, mfu_key = KEYS["litgpt" if variant == "litgpt" else "sparkling"]
    rows = read_csv(out, time_key, tokens_key)
    steps = read_steps(out)
    result = {"tokens_per_sec": steady_tokens_per_sec(rows, warmup),
              "median_step_tokens_per_sec": median_step_tokens_per_sec(rows, warmup), "steps_logged": len(rows),
              "flops_per_batch": flops_per_batch_from_log(steps, time_key, flops_key),
              "mfu": median_mfu(steps, mfu_key, warmup)}
    if variant != "litgpt":
        logged = [cells["train/flops_per_batch"] for _, cells in sorted(steps.items())
                  if "train/flops_per_batch" in cells]
        result["flops_per_batch_logged"] = logged[-1] if logged else None
    return result


def prepare(args, size: dict) -> tuple[Path, Path]:
    """The text folder and the tokenizer (a one-step sparkling run trains it and fills its token cache)."""
    text = write_text(args.workdir / "text", args.max_bytes)
    out = args.workdir / "setup"
    tokenizer = out / "final"
    if not (tokenizer / "tokenizer.json").is_file():
        cfg = sparkling_config(args, size, text, out, "sparkling")
        cfg["train"]["max_steps"] = 1
        cfg["train"]["lr_warmup_steps"] = 0
        eager = argparse.Namespace(**{**vars(args), "compile": "false"})  # one step: a compile would only cost
        cmd, env = command("sparkling", _yaml(args.workdir / "setup.yaml", cfg), eager)
        proc = subprocess.run(cmd, env=env, cwd=str(ROOT), capture_output=True, text=True, timeout=args.timeout)
        if proc.returncode != 0:  # the child's own error line, not a CalledProcessError that hides it
            (args.workdir / "setup.log").write_text(proc.stdout + proc.stderr)
            raise RuntimeError(f"setup run (sparkling pretrain, 1 step) failed (exit {proc.returncode}): "
                               f"{_first_error(proc)}; log {args.workdir / 'setup.log'}")
    return text, tokenizer


def summarize(results: list[dict], variants: list[str], key: str = "tokens_per_sec") -> dict:
    """Per variant: the median, min and max of ``key`` over the repeats and, against litgpt, the per-repeat ratios
    (each repeat's runs ran back to back) with their median, min and max."""
    by = {v: [r for r in results if r["variant"] == v] for v in variants}
    out = {}
    for v, runs in by.items():
        tps = [r[key] for r in runs]
        out[v] = {"median": statistics.median(tps), "min": min(tps), "max": max(tps), "runs": tps}
        if v != "litgpt":
            ratios = [r[key] / lit[key] for r, lit in zip(runs, by["litgpt"])]
            out[v].update(ratio_median=statistics.median(ratios), ratio_min=min(ratios), ratio_max=max(ratios),
                          ratios=ratios)
    return out


def print_table(by_figure: dict) -> None:
    for key, summary in by_figure.items():
        print(f"{key}:")
        print(f"{'variant':<20} {'median':>18} {'min..max':>20} {'ratio to litgpt (median, min..max)':>36}")
        for v, s in summary.items():
            ratio = (f"{s['ratio_median']:.3f} ({s['ratio_min']:.3f}..{s['ratio_max']:.3f})"
                     if "ratio_median" in s else "1")
            print(f"{v:<20} {_fmt(s['median']):>18} {_fmt(s['min']):>9}..{_fmt(s['max']):<9} {ratio:>36}")


def _fmt(x: float) -> str:
    """Tokens/s with one decimal; FLOPs (large) and MFU (below 1) with four significant digits."""
    return f"{x:.1f}" if 1 <= abs(x) < 1e6 else f"{x:.4g}"


#: the figures :func:`summaries` summarizes: tokens/s always; FLOPs per batch and MFU where every run logged them
FIGURES = ("tokens_per_sec", "median_step_tokens_per_sec", "flops_per_batch", "mfu")


def summaries(results: list[dict], variants: list[str]) -> dict:
    """The figures' summaries: tokens/s over the whole window and from the median step time; the FLOPs per batch each
    tool counted (their ratio: how far the two counts agree) and MFU, where every run has them (a run of an older
    record, or MFU on a CPU, has none)."""
    return {key: summarize(results, variants, key) for key in FIGURES
            if all(r.get(key) is not None for r in results)}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=sorted(SIZES), default="cpu")
    p.add_argument("--tiny", action="store_true",
                   help="the tiny size, 6 steps, warmup 2, the RMS monitor every 2 steps (a smoke run)")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5, help="steps left out of tokens/s")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--accelerator", default="cpu")
    p.add_argument("--precision", default="32-true")
    p.add_argument("--compile", choices=("true", "false"), default="false")
    p.add_argument("--rms-every", type=int, default=50, help="the RMS monitor's every_n_steps when on")
    p.add_argument("--sparkling-foreach", action="store_true", help="also sparkling with foreach AdamW")
    p.add_argument("--activation-checkpointing", action="store_true",
                   help="also sparkling with activation_checkpointing: true")
    p.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of every run")
    p.add_argument("--max-bytes", type=int, default=3_000_000, help="text copied from the stdlib")
    p.add_argument("--timeout", type=float, default=900, help="seconds per run")
    p.add_argument("--workdir", type=Path, default=Path("/tmp/throughput_vs_litgpt"))
    p.add_argument("--out", type=Path, default=HERE / "results" / "throughput_vs_litgpt_cpu.json")
    p.add_argument("--report-only", action="store_true",
                   help="measure the runs already in --workdir/runs again and rewrite --out's figures")
    args = p.parse_args(argv)
    if args.report_only:
        return report_only(args)
    if args.tiny:
        args.size, args.steps, args.warmup, args.max_bytes, args.rms_every = "tiny", 6, 2, 300_000, 2
    if args.warmup < 1 or args.steps < args.warmup + 2:
        p.error(f"--warmup {args.warmup} must be >= 1 and --steps {args.steps} at least warmup + 2")
    size = SIZES[args.size]
    if not rms_steps_timed(args):
        print(f"note: with --rms-every {args.rms_every} the RMS monitor measures no step of the timed window (steps "
              f"{args.warmup + 1}..{args.steps - 1}): 'sparkling+rms' times its hooks' absence, not a measurement")
    args.workdir.mkdir(parents=True, exist_ok=True)
    variants = (list(VARIANTS) + (["sparkling-foreach"] if args.sparkling_foreach else [])
                + (["sparkling+ac"] if args.activation_checkpointing else []))
    import torch

    record = {"size": args.size, "model": model_config(size), "params": param_count(size),
              "batch": size["batch"], "seq": size["seq"], "steps": args.steps, "warmup": args.warmup,
              "accelerator": args.accelerator, "precision": args.precision, "compile": args.compile,
              "rms_every": args.rms_every, "rms_steps_timed": rms_steps_timed(args), "threads": args.threads,
              "cpus": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version(),
              "variants": variants, "repeats": args.repeats, "complete": False, "repeats_done": 0, "runs": []}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    try:
        write_partial(args.out, record, variants)  # what was planned, before anything long runs
        print(f"[0 s] setup: text and tokenizer (a 1-step sparkling run) in {args.workdir}", flush=True)
        text, tokenizer = prepare(args, size)
        record["setup_s"] = round(time.perf_counter() - t0, 1)
        print(f"[{time.perf_counter() - t0:.0f} s] setup: done, {record['setup_s']:.0f} s", flush=True)
        for rep in range(args.repeats):
            for v in variants:
                print(f"[{time.perf_counter() - t0:.0f} s] {v} repeat {rep}: start, {args.steps} steps", flush=True)
                record["running"] = f"{v} repeat {rep}, started {time.perf_counter() - t0:.0f} s in"
                write_partial(args.out, record, variants)  # killed meanwhile, the record names the run
                result = run_one(v, args, size, text, tokenizer, rep)
                del record["running"]
                record["runs"].append(result)
                flops = result["flops_per_batch"]
                print(f"[{time.perf_counter() - t0:.0f} s] {v} repeat {rep}: done, {result['steps_logged']} steps, "
                      f"{result['tokens_per_sec']:.1f} tokens/s, {result['wall_s']:.0f} s "
                      f"({'no' if flops is None else f'{flops:.4g}'} FLOPs per batch, load "
                      f"{result['load_1min']:.2f})", flush=True)
                # written after every run: a benchmark stopped by its deadline keeps the runs it finished
                record["repeats_done"] = rep + (v == variants[-1])
                write_partial(args.out, record, variants)
    except BaseException as err:  # a failed run (its error line), a run's --timeout, Ctrl-C: the record says so
        record["error"] = f"{type(err).__name__}: {(str(err).splitlines() or [''])[0]}"[:500]
        write_partial(args.out, record, variants)
        raise
    record["complete"] = True
    record["summary"] = summaries(record["runs"], variants)
    _write_json(args.out, record)
    print_table(record["summary"])
    print(f"wrote {args.out}")
    return record


def write_partial(out: Path, record: dict, variants: list[str]) -> None:
    """Write ``record`` to ``out`` while runs are still to come (``"complete": false``): the runs done so far, the
    summary of the variants that have runs (their ratios against litgpt's runs of the same repeats), the run going
    on (``running``) or what stopped the benchmark (``error``), so that one stopped by its deadline keeps what
    finished. The last write, at the end, is the whole record with ``"complete": true``."""
    done = [v for v in variants if any(r["variant"] == v for r in record["runs"])]
    record["summary"] = summaries(record["runs"], done) if done else {}
    _write_json(out, record)


def _write_json(path: Path, record: dict) -> None:
    """``path`` replaced whole (written next to it, then renamed): a kill while writing leaves the previous record."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, path)


def rms_steps_timed(args: argparse.Namespace) -> int:
    """How many steps inside the timed window the RMS monitor measures (it measures step ``s`` when
    ``s % every_n_steps == 0``; the window is steps ``warmup + 1 .. steps - 1``, 0-based)."""
    return sum(1 for s in range(args.warmup + 1, args.steps) if s % args.rms_every == 0)


def report_only(args: argparse.Namespace) -> dict:
    """Re-measure the finished runs of ``args.workdir`` (their ``metrics.csv``) into ``args.out``'s record."""
    record = json.loads(args.out.read_text())
    for run in record["runs"]:
        run.update(measure(args.workdir / "runs" / f"{run['variant']}-{run['repeat']}", run["variant"],
                           record["warmup"]))
    variants = list(dict.fromkeys(r["variant"] for r in record["runs"]))
    record["summary"] = summaries(record["runs"], variants)
    args.out.write_text(json.dumps(record, indent=1))
    print_table(record["summary"])
    return record


if __name__ == "__main__":
    main()
