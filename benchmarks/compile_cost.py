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
* per phase (before / after the growth, 3 steps after each compile left out): median steps eager and compiled, the
  speed-up, and the monitor: median(logging steps) - median(other steps) of the monitored compiled run (a logging
  step runs eagerly), amortized over 50 steps relative to its median other step (``monitor_pct_at_50``: the
  overhead at ``every_n_steps: 50``), and the bound (eager - compiled) / 50 / compiled from the two other runs.

The inductor cache on disk (``TORCHINDUCTOR_CACHE_DIR``) makes a compile of shapes seen before far cheaper: give a
fresh directory for cold numbers (the monitored run, third, then hits the compiled run's entries).
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
from lightning_sparkling.pretrain.training.module import LitGPTPretrainModule

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
    rewarmup = max(1, (args.steps - args.grow_at) // 10)  # a tenth of the steps left: the re-warmup ends in the run
    growth = GrowthCallback(GrowthStage(args.grow_at, n_embd=2 * args.n_embd, intermediate_size=8 * args.n_embd,
                                        rewarmup_steps=rewarmup))
    callbacks = [clock, growth] + ([ActivationRMSMonitor(every_n_steps=every)] if every else [])
    with tempfile.TemporaryDirectory() as tmp:
        trainer = L.Trainer(max_steps=args.steps, accelerator="cpu", logger=CSVLogger(tmp), callbacks=callbacks,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(module, data)
    return {"steps": clock.steps, "first_step_seconds": growth.summaries[0].get("first_step_seconds"),
            "growth_seconds": growth.summaries[0]["seconds"]}


def summarize(args: argparse.Namespace, e: list[float], c: list[float], m: list[float], compiled: dict) -> dict:
    """The table's numbers from the step times (seconds) of the eager, compiled and monitored runs."""
    g = args.grow_at  # step index g is the first after the growth
    skip = 3  # steps after a (re)compile left out of the steady windows
    phases = {"before": (skip, g), "after": (g + skip, len(c))}

    def median(steps: list[float], phase: str, keep=lambda i: True) -> float:
        lo, hi = phases[phase]
        return statistics.median(t for i, t in enumerate(steps[lo:hi], lo) if keep(i))

    out = {"compile_s": c[0] - median(c, "before"), "first_compiled_step_s": c[0],
           "recompile_s": c[g] - median(c, "after"), "first_step_after_growth_s": c[g],
           "first_step_seconds_logged": compiled.get("first_step_seconds"), "eager_first_step_after_growth_s": e[g],
           "growth_seconds": compiled.get("growth_seconds"),
           "monitored_first_compiled_step_s": m[1], "monitored_first_step_after_growth_s": m[g + 1]}
    for phase in phases:
        eager_ms, compiled_ms = 1e3 * median(e, phase), 1e3 * median(c, phase)
        # the monitored run: its logging steps (eager) against its other steps (compiled), in the same window
        logging = 1e3 * median(m, phase, lambda i: i % args.every == 0)
        others = 1e3 * median(m, phase, lambda i: i % args.every != 0)
        out[phase] = {"eager_ms": eager_ms, "compiled_ms": compiled_ms, "speedup": eager_ms / compiled_ms,
                      "logging_step_cost_ms": logging - others,
                      "monitor_pct_at_50": 100 * (logging - others) / 50 / others,
                      "monitor_bound_pct_at_50": 100 * (eager_ms - compiled_ms) / 50 / compiled_ms}
    return out


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
    parser.add_argument("--summarize", type=Path, default=None,
                        help="recompute the summary of a saved result (its raw step times) instead of running")
    args = parser.parse_args()
    if args.summarize is not None:
        result = json.loads(args.summarize.read_text())
        vars(args).update({k: v for k, v in result["args"].items() if k not in ("out", "summarize")})
        raw = {k: [t / 1e3 for t in v] for k, v in result["raw_ms"].items()}
        result.update(summarize(args, raw["eager"], raw["compiled"], raw["monitored"], result))
        args.out = args.summarize
    else:
        result = measure(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "raw_ms"}, indent=1))


def measure(args: argparse.Namespace) -> dict:
    torch.set_num_threads(args.threads)
    load = os.getloadavg()
    eager, compiled, monitored = run(args, False, None), run(args, True, None), run(args, True, args.every)
    return {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                        "loadavg_before": load, "loadavg_after": os.getloadavg(), "torch": torch.__version__},
            **summarize(args, eager["steps"], compiled["steps"], monitored["steps"], compiled),
            "raw_ms": {k: [round(1e3 * t, 2) for t in r["steps"]] for k, r in
                       (("eager", eager), ("compiled", compiled), ("monitored", monitored))},
            "first_step_seconds": compiled["first_step_seconds"], "growth_seconds": compiled["growth_seconds"]}


if __name__ == "__main__":
    main()
