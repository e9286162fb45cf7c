"""What ``compile: true`` costs and gives on this machine: compile time, recompile time at a growth, steady step
times compiled and eager, and the RMS monitor's overhead on a compiled model; with ``--scopes``, whole-GPT compile
against per-block compile.

    python benchmarks/compile_cost.py                    # table + benchmarks/results/compile_cost.json
    python benchmarks/compile_cost.py --steps 40 --grow-at 15 --n-embd 64   # smoke run
    python benchmarks/compile_cost.py --scopes           # whole against per block: results/compile_scope.json
    python benchmarks/compile_cost.py --scopes --n-layer 2 --n-embd 32 --seq 32 --rounds 2 --window 2 \
        --backend eager --out /tmp/scope.json            # smoke run (seconds)
    python benchmarks/compile_cost.py --scopes --device cuda --bf16 --n-layer 12 --n-embd 768 --seq 1024 \
        --batch 8 --vocab 50304 --out scope_gpu.json     # on a GPU

``--scopes`` (one process, one run): two copies of the same GPT (``--n-layer`` 12 by default, ``--n-embd``, same
seed), one compiled whole (``compile_gpt(model)``), one per block (``compile_gpt(model, per_block=True)``), each
trained by a plain loop (forward, cross-entropy, backward, AdamW step; ``--threads`` intra-op threads, a fresh
inductor cache directory unless ``--cache-dir``). A step's time is its wall time (CUDA: synchronized) and this
process' CPU time (``time.process_time()``: on a shared machine less swayed by the others' load than the wall time;
inductor's compile workers are other processes, not counted). Measured, each for both: the first step (compiling);
the steady step: ``--rounds`` rounds of ``--window`` steps, whole and per block alternating, the median of each
round's median, after 2 warm steps; a width growth (``grow_model``: ``n_embd`` x2, MLP x2, then
``recompile_after_growth`` and a fresh AdamW) and its first step; the steady step again; a depth growth
(``--depth-to``, default ``n_layer`` + 4) and its first step; the steady step again (``--phases N``: the first N
of the three). Each row has the ratio
whole / per block. ``os.getloadavg()`` is recorded at start and end. ``--summarize FILE`` recomputes the table of
either kind from its raw step times.

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
from typing import Any

import lightning as L
import torch
from lightning.pytorch.loggers import CSVLogger

from lightning_sparkling import (
    ActivationRMSMonitor,
    GrowthCallback,
    GrowthStage,
    grow_model,
)
from lightning_sparkling.parallel.compile import compile_gpt, recompile_after_growth
from lightning_sparkling.pretrain.model.gpt import build_gpt
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


SCOPES = ("whole", "blocks")
#: the phases of ``--scopes``, in order: a first step (compiling) before each steady window
SCOPE_PHASES = ("base", "width", "depth")


class ScopeRun:
    """One GPT compiled in one scope, its optimizer, and its step times."""

    def __init__(self, args: argparse.Namespace, scope: str) -> None:
        self.args, self.scope = args, scope
        self.device = torch.device(args.device)
        self.model = build_gpt(_scope_config(args), seed=0).to(self.device)
        options = {} if args.backend is None else {"backend": args.backend}
        compile_gpt(self.model, per_block=scope == "blocks", **options)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        generator = torch.Generator().manual_seed(0)
        self.batch = torch.randint(0, args.vocab, (args.batch, args.seq + 1), generator=generator).to(self.device)

    def step(self) -> tuple[float, float]:
        """One training step; its wall time and this process' CPU time, in seconds."""
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        sync()
        start, cpu = time.perf_counter(), time.process_time()
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.args.bf16):
            logits = self.model(self.batch[:, :-1])  # (B, T, vocab)
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), self.batch[:, 1:].flatten())
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        sync()
        return time.perf_counter() - start, time.process_time() - cpu

    def grow(self, stage: GrowthStage) -> None:
        grow_model(self.model, stage)
        recompile_after_growth(self.model, self.model)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3)


def _scope_config(args: argparse.Namespace) -> dict:
    return dict(n_embd=args.n_embd, n_head=4, n_layer=args.n_layer, block_size=args.seq, vocab_size=args.vocab,
                padded_vocab_size=args.vocab, mlp_class_name="LLaMAMLP", intermediate_size=4 * args.n_embd,
                norm_class_name="RMSNorm", bias=False)


def measure_scopes(args: argparse.Namespace) -> dict:
    """Whole against per block, in one process: the raw step times of every phase and their summary."""
    torch.set_num_threads(args.threads)
    load = os.getloadavg()
    started = time.perf_counter()
    runs = {scope: ScopeRun(args, scope) for scope in SCOPES}
    stages = {"width": GrowthStage(0, n_embd=2 * args.n_embd, intermediate_size=8 * args.n_embd),
              "depth": GrowthStage(0, n_layer=args.depth_to or args.n_layer + 4)}
    raw: dict[str, dict[str, Any]] = {scope: {} for scope in SCOPES}
    for phase in SCOPE_PHASES[:args.phases]:
        for scope, r in runs.items():
            if phase != "base":
                r.grow(stages[phase])
            wall, cpu = r.step()
            raw[scope][f"{phase}_first_ms"] = round(1e3 * wall, 2)
            raw[scope][f"{phase}_first_cpu_ms"] = round(1e3 * cpu, 2)
            print(f"{scope}: {phase}: first step {wall:.1f}s (CPU {cpu:.1f}s)", flush=True)
        for r in runs.values():
            for _ in range(2):
                r.step()  # warm: a second backward, the optimizer's first full step
        for scope in SCOPES:
            raw[scope][f"{phase}_steady_ms"], raw[scope][f"{phase}_steady_cpu_ms"] = [], []
        for _ in range(args.rounds):  # alternating rounds: a change of the machine's load hits both alike
            for scope, r in runs.items():
                times = [r.step() for _ in range(args.window)]
                raw[scope][f"{phase}_steady_ms"].append([round(1e3 * wall, 2) for wall, _ in times])
                raw[scope][f"{phase}_steady_cpu_ms"].append([round(1e3 * cpu, 2) for _, cpu in times])
    result = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                          "threads": args.threads, "device": str(args.device),
                          "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None,
                          "loadavg_start": load, "loadavg_end": os.getloadavg(), "torch": torch.__version__,
                          "inductor_cache": os.environ.get("TORCHINDUCTOR_CACHE_DIR"),
                          "wall_s": round(time.perf_counter() - started, 1)},
              "raw_ms": raw}
    result["table"] = summarize_scopes(raw)
    return result


def summarize_scopes(raw: dict[str, dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Rows (first step of each phase, steady step of each phase, in seconds) with whole, per block and their ratio
    whole / per block. A steady step: the median of the rounds' medians.

    Example::

        >>> raw = {s: {"base_first_ms": f, "base_steady_ms": [[1000, t, t], [t, t, 1000]]}
        ...        for s, f, t in (("whole", 9000, 500), ("blocks", 3000, 400))}
        >>> summarize_scopes(raw)["base_steady_s"]
        {'whole': 0.5, 'blocks': 0.4, 'whole_over_blocks': 1.25}
    """
    rows: dict[str, dict[str, float]] = {}
    phases = [p for p in SCOPE_PHASES if f"{p}_first_ms" in raw["whole"]]
    for phase in phases:
        for kind in ("first", "first_cpu", "steady", "steady_cpu"):
            key = f"{phase}_{kind}_ms"
            if key not in raw["whole"]:
                continue
            whole, blocks = (_seconds(raw[s][key]) for s in SCOPES)
            rows[f"{phase}_{kind}_s"] = {"whole": whole, "blocks": blocks, "whole_over_blocks": whole / blocks}
    return rows


def _seconds(times: float | list[list[float]]) -> float:
    if isinstance(times, list):
        return statistics.median(statistics.median(window) for window in times) / 1e3
    return times / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scopes", action="store_true", help="whole-GPT against per-block compile")
    parser.add_argument("--n-embd", type=int, default=128)
    parser.add_argument("--n-layer", type=int, default=None, help="default: 4; --scopes: 12")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--vocab", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--grow-at", type=int, default=40)
    parser.add_argument("--every", type=int, default=10, help="the monitor's every_n_steps (more samples than 50)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--depth-to", type=int, default=None, help="--scopes: layers after the depth growth")
    parser.add_argument("--rounds", type=int, default=5, help="--scopes: steady rounds per phase")
    parser.add_argument("--window", type=int, default=4, help="--scopes: steps per round")
    parser.add_argument("--phases", type=int, default=3, choices=(1, 2, 3),
                        help="--scopes: the first N of base, width, depth")
    parser.add_argument("--backend", default=None, help="--scopes: torch.compile backend (default: inductor)")
    parser.add_argument("--device", default="cpu", help="--scopes: cpu or cuda")
    parser.add_argument("--bf16", action="store_true", help="--scopes: bf16 autocast")
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="--scopes: the inductor cache directory (default: a fresh one, cold compiles)")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: benchmarks/results/compile_cost.json (--scopes: compile_scope.json)")
    parser.add_argument("--summarize", type=Path, default=None,
                        help="recompute the summary of a saved result (its raw step times) instead of running")
    args = parser.parse_args()
    if args.n_layer is None:
        args.n_layer = 12 if args.scopes else 4
    if args.out is None:
        args.out = ROOT / "results" / ("compile_scope.json" if args.scopes else "compile_cost.json")
    if args.summarize is not None:
        result = json.loads(args.summarize.read_text())
        if "table" in result:
            result["table"] = summarize_scopes(result["raw_ms"])
        else:
            vars(args).update({k: v for k, v in result["args"].items() if k not in ("out", "summarize")})
            raw = {k: [t / 1e3 for t in v] for k, v in result["raw_ms"].items()}
            result.update(summarize(args, raw["eager"], raw["compiled"], raw["monitored"], result))
        args.out = args.summarize
    elif args.scopes:
        # cold compiles: no graph of an earlier run on disk (inductor reads the variable at each compile)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(args.cache_dir or tempfile.mkdtemp(prefix="compile_scope_"))
        result = measure_scopes(args)
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
