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
its median and range reported. Writes a table and ``--out`` (JSON).

``--compile false`` runs litgpt eager by ``TORCHDYNAMO_DISABLE=1`` (its pretrain always calls ``torch.compile``);
``--compile true`` passes ``--compile true`` to ``sparkling`` (the ``compile`` key) and lets litgpt compile.
"""

from __future__ import annotations

import argparse
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
    from lightning_sparkling.pretrain.corpus import corpus_splits

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

    from lightning_sparkling.pretrain.schema import pretrain_arguments

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
        raise RuntimeError(f"{variant} failed ({proc.returncode}), log {out / 'log.txt'}:\n{proc.stderr[-3000:]}")
    return {"variant": variant, "repeat": rep, **measure(out, variant, args.warmup), "wall_s": wall,
            "load_1min": load}


def measure(out: Path, variant: str, warmup: int) -> dict:
    """The steady-state figures of one finished run's ``metrics.csv``."""
    rows = read_csv(out, *(("time", "lengths") if variant == "litgpt" else ("train/time", "train/lengths")))
    return {"tokens_per_sec": steady_tokens_per_sec(rows, warmup),
            "median_step_tokens_per_sec": median_step_tokens_per_sec(rows, warmup), "steps_logged": len(rows)}


def prepare(args, size: dict) -> tuple[Path, Path]:
    """The text folder and the tokenizer (a one-step sparkling run trains it and fills its token cache)."""
    text = write_text(args.workdir / "text", args.max_bytes)
    out = args.workdir / "setup"
    tokenizer = out / "final"
    if not (tokenizer / "tokenizer.json").is_file():
        cfg = sparkling_config(args, size, text, out, "sparkling")
        cfg["train"]["max_steps"] = 1
        cfg["train"]["lr_warmup_steps"] = 0
        cmd, env = command("sparkling", _yaml(args.workdir / "setup.yaml", cfg), args)
        subprocess.run(cmd, env=env, cwd=str(ROOT), check=True, capture_output=True, timeout=args.timeout)
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
            ratios = [r[key] / l[key] for r, l in zip(runs, by["litgpt"])]
            out[v].update(ratio_median=statistics.median(ratios), ratio_min=min(ratios), ratio_max=max(ratios),
                          ratios=ratios)
    return out


def print_table(by_figure: dict) -> None:
    for key, summary in by_figure.items():
        print(f"{key}:")
        print(f"{'variant':<20} {'tokens/s (median)':>18} {'min..max':>20} {'ratio to litgpt (median, min..max)':>36}")
        for v, s in summary.items():
            ratio = (f"{s['ratio_median']:.3f} ({s['ratio_min']:.3f}..{s['ratio_max']:.3f})"
                     if "ratio_median" in s else "1")
            print(f"{v:<20} {s['median']:>18.1f} {s['min']:>9.1f}..{s['max']:<9.1f} {ratio:>36}")


def summaries(results: list[dict], variants: list[str]) -> dict:
    """The two steady-state figures' summaries: over the whole window, and from the median step time."""
    return {key: summarize(results, variants, key) for key in ("tokens_per_sec", "median_step_tokens_per_sec")}


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
    text, tokenizer = prepare(args, size)
    variants = (list(VARIANTS) + (["sparkling-foreach"] if args.sparkling_foreach else [])
                + (["sparkling+ac"] if args.activation_checkpointing else []))
    import torch

    record = {"size": args.size, "model": model_config(size), "params": param_count(size),
              "batch": size["batch"], "seq": size["seq"], "steps": args.steps, "warmup": args.warmup,
              "accelerator": args.accelerator, "precision": args.precision, "compile": args.compile,
              "rms_every": args.rms_every, "rms_steps_timed": rms_steps_timed(args), "threads": args.threads, "cpus": os.cpu_count(),
              "torch": torch.__version__, "python": platform.python_version(), "runs": []}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for rep in range(args.repeats):
        for v in variants:
            result = run_one(v, args, size, text, tokenizer, rep)
            record["runs"].append(result)
            print(f"repeat {rep} {v}: {result['tokens_per_sec']:.1f} tokens/s (load {result['load_1min']:.2f})",
                  flush=True)
        # written after every repeat: a run stopped by its deadline keeps the repeats it finished
        record["repeats_done"] = rep + 1
        record["summary"] = summaries(record["runs"], variants)
        args.out.write_text(json.dumps(record, indent=1))
    print_table(record["summary"])
    print(f"wrote {args.out}")
    return record


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
