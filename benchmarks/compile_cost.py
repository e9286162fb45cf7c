"""What ``compile: true`` costs and gives on this machine: compile time, recompile time at a growth, steady step
times compiled and eager, and the RMS monitor's overhead on a compiled model.

    python benchmarks/compile_cost.py                    # table + benchmarks/results/compile_cost.json
    python benchmarks/compile_cost.py --steps 40 --grow-at 15 --n-embd 64   # smoke run

Method: ``LitGPTPretrainModule`` (AdamW, fp32, one intra-op thread: on a shared 2-core machine more threads
oversubscribe) trained by ``Trainer.fit`` on random tokens, a width growth ``n_embd`` x2 / MLP x2 at ``--grow-at``.
A step's time is the wall time between consecutive ``on_train_batch_start`` calls (forward, backward, optimizer
step, callbacks). Runs: eager; compiled (inductor, litgpt's default); compiled with ``ActivationRMSMonitor`` every
``--every`` steps. Reported:

* ``compile_s``: the first compiled step (compiling forward and backward) minus the median steady compiled step;
* ``recompile_s``: the first step after the growth minus the median steady compiled step after it
  (``GrowthCallback``'s ``first_step_seconds`` is the raw time, logged as ``growth/first_step_seconds``);
* steady medians before / after the growth, eager and compiled, and the speed-up;
* the monitor: median(logging steps) - median(other steps) of the monitored compiled run (a logging step runs
  eagerly), amortized over 50 steps relative to the median compiled step: the overhead at ``every_n_steps: 50``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger

from lightning_sparkling import ActivationRMSMonitor, GrowthCallback, GrowthStage
from lightning_sparkling.pretrain.module import LitGPTPretrainModule

ROOT = Path(__file__).resolve().parent


class StepClock(L.Callback):
    """Wall time of every step: between consecutive ``on_train_batch_start`` calls (the last one: to fit end)."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.end = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.starts.append(time.perf_counter())

    def on_train_end(self, trainer, pl_module) -> None:
        self.end = time.perf_counter()

    @property
    def steps(self) -> list[float]:
        return [b - a for a, b in zip(self.starts, self.starts[1:] + [self.end])]


def run(args: argparse.Namespace, compiled: bool, every: int | None) -> dict:
    torch.compiler.reset()
    torch.manual_seed(0)
    config = dict(n_embd=args.n_embd, n_head=4, n_layer=args.n_layer, block_size=args.seq, vocab_size=args.vocab,
                  padded_vocab_size=args.vocab, mlp_class_name="LLaMAMLP", intermediate_size=4 * args.n_embd,
                  norm_class_name="RMSNorm", bias=False)
    module = LitGPTPretrainModule(config, {"class_path": "torch.optim.AdamW", "init_args": {"lr": 1e-3}},
                                  max_steps=args.steps, lr_warmup_steps=2, compile=compiled)
    data = torch.utils.data.DataLoader(torch.randint(0, args.vocab, (args.batch * args.steps, args.seq + 1)),
                                       batch_size=args.batch)
    clock = StepClock()
    growth = GrowthCallback(GrowthStage(args.grow_at, n_embd=2 * args.n_embd, intermediate_size=8 * args.n_embd))
    callbacks = [clock, growth] + ([ActivationRMSMonitor(every_n_steps=every)] if every else [])
    with tempfile.TemporaryDirectory() as tmp:
        trainer = L.Trainer(max_steps=args.steps, accelerator="cpu", logger=CSVLogger(tmp), callbacks=callbacks,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(module, data)
    return {"steps": clock.steps, "first_step_seconds": growth.summaries[0].get("first_step_seconds"),
            "growth_seconds": growth.summaries[0]["seconds"]}


def summarize(args: argparse.Namespace, eager: dict, compiled: dict, monitored: dict) -> dict:
    g = args.grow_at  # step index g is the first after the growth
    skip = 3  # steps after a (re)compile before the steady window

    def steady(steps: list[float], lo: int, hi: int, exclude: set[int] = frozenset()) -> float:
        return statistics.median(t for i, t in enumerate(steps[lo:hi], lo) if i not in exclude)

    e, c, m = eager["steps"], compiled["steps"], monitored["steps"]
    n = len(c)
    c_before, c_after = steady(c, skip, g), steady(c, g + skip, n)
    e_before, e_after = steady(e, skip, g), steady(e, g + skip, n)
    logging = {i for i in range(n) if i % args.every == 0}
    # logging steps of the monitored run, away from the compiles (step 0 ran eagerly, step 1 compiled; the growth's)
    measured = [m[i] for i in sorted(logging) if i >= skip and not g <= i < g + skip]
    others = [t for i, t in enumerate(m) if i not in logging and i >= skip and not g <= i < g + skip + 1]
    cost = statistics.median(measured) - statistics.median(others)
    return {
        "compile_s": c[0] - c_before, "first_compiled_step_s": c[0],
        "recompile_s": c[g] - c_after, "first_step_after_growth_s": c[g],
        "first_step_seconds_logged": compiled["first_step_seconds"],
        "eager_first_step_after_growth_s": e[g], "growth_seconds": compiled["growth_seconds"],
        "steady_ms": {"eager_before": 1e3 * e_before, "compiled_before": 1e3 * c_before,
                      "eager_after": 1e3 * e_after, "compiled_after": 1e3 * c_after},
        "speedup_before": e_before / c_before, "speedup_after": e_after / c_after,
        "monitor": {"every": args.every, "logging_steps": len(measured), "cost_per_logging_step_ms": 1e3 * cost,
                    "amortized_pct_at_50": 100 * cost / 50 / statistics.median(others)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-embd", type=int, default=128)
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--grow-at", type=int, default=40)
    parser.add_argument("--every", type=int, default=10, help="the monitor's every_n_steps (more samples than 50)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "compile_cost.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    load = os.getloadavg()
    eager, compiled, monitored = run(args, False, None), run(args, True, None), run(args, True, args.every)
    result = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                          "loadavg_before": load, "loadavg_after": os.getloadavg(), "torch": torch.__version__},
              **summarize(args, eager, compiled, monitored),
              "raw_ms": {k: [round(1e3 * t, 2) for t in r["steps"]] for k, r in
                         (("eager", eager), ("compiled", compiled), ("monitored", monitored))}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "raw_ms"}, indent=1))


if __name__ == "__main__":
    main()
