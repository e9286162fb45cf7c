"""Cost of :class:`~lightning_sparkling.ActivationRMSMonitor`: step time of a small litgpt GPT trained with Lightning
with the monitor off, every 50 steps and every step, plus a paired loop (with and without ``per_linear``).

    python benchmarks/bench_rms_monitor.py                      # table + benchmarks/results/rms_monitor.json
    python benchmarks/bench_rms_monitor.py --quick --steps 20   # smoke run
    python benchmarks/bench_rms_monitor.py --example-dashboard docs/img/example_dashboard.png

Method (defaults: n_embd 256, 4 layers, seq 128, batch 8, vocab 2048, one intra-op thread because on a shared
2-core machine two threads oversubscribe and step times swing by 2-5x): one ``Trainer.fit`` per setting,
``--warmup`` steps discarded, then ``--steps`` measured; a step's time is the wall time between consecutive
``on_train_batch_start`` calls of a timing callback placed first (so it covers the monitor's attach, the
forward/backward/optimizer step, the monitor's reduction and logging). Settings run interleaved over ``--rounds``
rounds so that machine drift hits them alike. Reported per setting: median and mean step time, the median of
logging steps, and

* ``overhead_mean_pct``: mean step time relative to "off" (what a run pays; noisy on a shared CPU);
* ``cost_per_logging_step_ms``: median(logging steps) - median(steps of "off");
* ``amortized_pct_at_50``: that cost / 50 relative to the median "off" step (the expected overhead at the default
  ``every_n_steps=50``, a less noisy estimate than the measured mean).

The paired loop (``--paired-steps`` pairs, no Lightning) alternates plain training steps with monitored ones (probe
attached, removed before backward, cross-rank reduction, TensorBoard ``log_metrics``) and reports the median of the
per-pair differences: the most robust estimate of the cost of one logging step on a busy machine.

``--example-dashboard PATH`` instead trains two tiny runs (a model grown 64 -> 128 wide at step 30 and a fixed-width
baseline, 60 steps, synthetic Markov-chain tokens) with the monitor, a LearningRateMonitor and the package's
``GrowthCallback`` (default SPARKLING recipe), then renders ``plot_runs`` on them.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import lightning.pytorch as L
import torch
import torch.nn as nn
from lightning.pytorch.callbacks import LearningRateMonitor
from lightning.pytorch.loggers import TensorBoardLogger
from litgpt import Config
from litgpt.model import GPT

from lightning_sparkling import ActivationRMSMonitor, GrowthStage, GrowthCallback

ROOT = Path(__file__).resolve().parent


# --------------------------------------------------------------------------------------------------------------------
# model and data
# --------------------------------------------------------------------------------------------------------------------


def make_config(n_embd: int, n_layer: int, seq: int, vocab: int, n_head: int | None = None,
                intermediate_size: int | None = None) -> Config:
    n_head = n_head or max(1, n_embd // 64)
    return Config(name="bench-llama", n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_query_groups=n_head,
                  vocab_size=vocab, padded_vocab_size=vocab, block_size=seq,
                  intermediate_size=intermediate_size or int(8 * n_embd / 3) // 8 * 8,
                  mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm", bias=False, parallel_residual=False)


def markov_tokens(n_seq: int, seq: int, vocab: int, seed: int = 0, branching: int = 4,
                  chain_seed: int = 0) -> torch.Tensor:
    """Sequences of a random sparse Markov chain (fixed by ``chain_seed``; ``seed`` draws the sequences): each token
    has ``branching`` likely successors, so the loss can fall from ln(vocab) to about the chain's entropy."""
    gc = torch.Generator().manual_seed(chain_seed)
    succ = torch.randint(0, vocab, (vocab, branching), generator=gc)
    probs = torch.softmax(torch.randn(vocab, branching, generator=gc) * 1.5, dim=-1)
    g = torch.Generator().manual_seed(1000 + seed)
    out = torch.empty(n_seq, seq + 1, dtype=torch.long)
    out[:, 0] = torch.randint(0, vocab, (n_seq,), generator=g)
    for t in range(seq):
        choice = torch.multinomial(probs[out[:, t]], 1, generator=g).squeeze(1)
        out[:, t + 1] = succ[out[:, t], choice]
    return out


class LM(L.LightningModule):
    def __init__(self, config: Config, data: torch.Tensor, batch_size: int, lr: float = 3e-3, warmup: int = 10,
                 total_steps: int = 1000, val_data: torch.Tensor | None = None, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.model = GPT(config)
        self.model.apply(self.model._init_weights)
        self.data, self.val_data, self.batch_size = data, val_data, batch_size
        self.lr, self.warmup, self.total_steps = lr, warmup, total_steps
        self.tokens = 0

    def _loss(self, batch: torch.Tensor) -> torch.Tensor:
        logits = self.model(batch[:, :-1])
        return nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1))

    def training_step(self, batch, batch_idx):
        loss = self._loss(batch)
        self.tokens += batch[:, :-1].numel()
        self.log("train_loss", loss)
        self.log("tokens", float(self.tokens))
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self._loss(batch))

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=0.1, betas=(0.9, 0.95))

        def schedule(step: int) -> float:  # warmup, then cosine to 10%
            if step < self.warmup:
                return (step + 1) / self.warmup
            x = min(1.0, (step - self.warmup) / max(1, self.total_steps - self.warmup))
            return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * x))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def train_dataloader(self):
        return torch.utils.data.DataLoader(self.data, batch_size=self.batch_size, shuffle=True,
                                           generator=torch.Generator().manual_seed(0), drop_last=True)

    def val_dataloader(self):
        if self.val_data is None:
            return []
        return torch.utils.data.DataLoader(self.val_data, batch_size=self.batch_size)


class StepTimer(L.Callback):
    """Wall time between consecutive ``on_train_batch_start`` calls (place it first in ``callbacks``)."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.steps: list[int] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.starts.append(time.perf_counter())
        self.steps.append(trainer.global_step)

    def on_train_end(self, trainer, pl_module):
        self.starts.append(time.perf_counter())

    def durations(self) -> list[tuple[int, float]]:
        return [(s, b - a) for s, a, b in zip(self.steps, self.starts, self.starts[1:])]


# --------------------------------------------------------------------------------------------------------------------
# benchmark
# --------------------------------------------------------------------------------------------------------------------

SETTINGS = {
    "off": None,
    "every_50": dict(every_n_steps=50),
    "every_1": dict(every_n_steps=1),
    "every_1_per_linear": dict(every_n_steps=1, per_linear=True),
}


def run_setting(name: str, args, logdir: Path) -> list[tuple[int, float]]:
    config = make_config(args.n_embd, args.n_layer, args.seq, args.vocab)
    n_steps = args.warmup + args.steps
    data = markov_tokens(n_steps * args.batch, args.seq, args.vocab, seed=1)
    module = LM(config, data, args.batch, total_steps=n_steps)
    timer = StepTimer()
    callbacks: list[L.Callback] = [timer]
    if SETTINGS[name] is not None:
        callbacks.append(ActivationRMSMonitor(**SETTINGS[name]))
    trainer = L.Trainer(max_steps=n_steps, logger=TensorBoardLogger(str(logdir), name=name), callbacks=callbacks,
                        accelerator="cpu", devices=1, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, log_every_n_steps=50, num_sanity_val_steps=0, limit_val_batches=0)
    trainer.fit(module)
    return [(s, d) for s, d in timer.durations() if s >= args.warmup]


def summarize(name: str, durations: list[tuple[int, float]], every: int | None) -> dict:
    times = [d for _, d in durations]
    logging = [d for s, d in durations if every is not None and s % every == 0]
    other = [d for s, d in durations if every is None or s % every != 0]
    return {
        "setting": name,
        "every_n_steps": every,
        "n_steps": len(times),
        "median_ms": 1e3 * statistics.median(times),
        "mean_ms": 1e3 * statistics.fmean(times),
        "median_logging_ms": 1e3 * statistics.median(logging) if logging else None,
        "median_non_logging_ms": 1e3 * statistics.median(other) if other else None,
        "n_logging_steps": len(logging),
    }


def paired_cost(args, per_linear: bool = False) -> dict:
    """Cost of one logging step measured in a paired loop, robust to a busy machine: plain training steps
    (forward, backward, AdamW) alternate with monitored ones (probe attached, removed before backward, then the
    monitor's cross-rank reduction and a TensorBoard ``log_metrics``); medians of each kind are compared."""
    from lightning_sparkling.callbacks.rms_monitor import RMSProbe

    config = make_config(args.n_embd, args.n_layer, args.seq, args.vocab)
    torch.manual_seed(0)
    model = GPT(config)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    data = markov_tokens(args.batch * 4, args.seq, args.vocab, seed=3)
    monitor = ActivationRMSMonitor(every_n_steps=1, per_linear=per_linear)
    plain, monitored = [], []
    with tempfile.TemporaryDirectory() as tmp:
        logger = TensorBoardLogger(tmp, name="paired")
        for i in range(2 * (args.paired_steps + args.warmup)):
            batch = data[(i % 4) * args.batch:((i % 4) + 1) * args.batch]
            on = i % 2 == 1
            t0 = time.perf_counter()
            probe = RMSProbe(model, per_linear=per_linear).attach(lazy=True) if on else None
            logits = model(batch[:, :-1])
            loss = nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1))
            if probe is not None:
                probe.detach()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if probe is not None:
                values = monitor._reduce(probe.tags, probe.results(), torch.device("cpu"))
                logger.log_metrics(values, step=i)
            dt = time.perf_counter() - t0
            if i >= 2 * args.warmup:
                (monitored if on else plain).append(dt)
        logger.finalize("success")
    p_med, m_med = statistics.median(plain), statistics.median(monitored)
    # per-pair differences cancel slow drift of the machine's load
    diffs = [m - p for p, m in zip(plain, monitored)]
    return {
        "per_linear": per_linear, "pairs": len(diffs),
        "median_plain_ms": 1e3 * p_med, "median_monitored_ms": 1e3 * m_med,
        "cost_per_logging_step_ms": 1e3 * statistics.median(diffs),
        "cost_per_logging_step_pct": 100 * statistics.median(diffs) / p_med,
        "amortized_pct_at_50": 100 * statistics.median(diffs) / 50 / p_med,
    }


def benchmark(args) -> dict:
    torch.set_num_threads(args.threads)
    names = [n for n in SETTINGS if n in args.settings]
    collected: dict[str, list[tuple[int, float]]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            for name in names:
                t0 = time.perf_counter()
                collected[name] += run_setting(name, args, Path(tmp) / f"round{r}")
                print(f"  round {r} {name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    rows = [summarize(n, collected[n], (SETTINGS[n] or {}).get("every_n_steps")) for n in names]
    base = next(r for r in rows if r["setting"] == "off")
    for row in rows:
        row["overhead_mean_pct"] = 100 * (row["mean_ms"] / base["mean_ms"] - 1)
        row["overhead_median_pct"] = 100 * (row["median_ms"] / base["median_ms"] - 1)
        if row["median_logging_ms"] is not None:
            row["cost_per_logging_step_ms"] = row["median_logging_ms"] - base["median_ms"]
            row["amortized_pct_at_50"] = 100 * row["cost_per_logging_step_ms"] / 50 / base["median_ms"]
    return {
        "benchmark": "ActivationRMSMonitor step-time overhead",
        "model": dict(n_embd=args.n_embd, n_layer=args.n_layer, seq=args.seq, batch=args.batch, vocab=args.vocab,
                      arch="LLaMA-style (RMSNorm, LLaMAMLP)"),
        "steps_measured_per_round": args.steps, "warmup_steps": args.warmup, "rounds": args.rounds,
        "device": "cpu", "threads": args.threads, "torch": torch.__version__, "lightning": L.__version__,
        "python": platform.python_version(), "machine": platform.processor() or platform.machine(),
        "results": rows,
        "paired": [paired_cost(args), paired_cost(args, per_linear=True)] if args.paired_steps else [],
    }


def print_table(result: dict) -> None:
    m = result["model"]
    print(f"\nActivationRMSMonitor overhead: n_embd={m['n_embd']} n_layer={m['n_layer']} seq={m['seq']} "
          f"batch={m['batch']}, {result['rounds']} x {result['steps_measured_per_round']} steps, "
          f"{result['threads']} CPU threads\n")
    head = (f"{'setting':<20} {'median ms':>10} {'mean ms':>9} {'logging-step ms':>16} {'mean ovh %':>11} "
            f"{'cost/log-step ms':>17} {'amortized@50 %':>15}")
    print(head)
    print("-" * len(head))
    def fmt(v, width: int, spec: str) -> str:
        sign = "+" if spec.startswith("+") else ""
        return format(v, f">{sign}{width}{spec.lstrip('+')}") if v is not None else format("-", f">{width}")

    for r in result["results"]:
        print(f"{r['setting']:<20} {r['median_ms']:>10.1f} {r['mean_ms']:>9.1f} "
              f"{fmt(r['median_logging_ms'], 16, '.1f')} "
              f"{r['overhead_mean_pct']:>+11.2f} {fmt(r.get('cost_per_logging_step_ms'), 17, '+.1f')} "
              f"{fmt(r.get('amortized_pct_at_50'), 15, '+.3f')}")
    if result.get("paired"):
        print("\npaired loop (plain and monitored steps alternating, median of per-pair differences):")
        for r in result["paired"]:
            print(f"  per_linear={r['per_linear']!s:<5}  plain {r['median_plain_ms']:.1f} ms, monitored "
                  f"{r['median_monitored_ms']:.1f} ms, cost/logging step {r['cost_per_logging_step_ms']:+.2f} ms "
                  f"({r['cost_per_logging_step_pct']:+.2f} %), amortized at every_n_steps=50: "
                  f"{r['amortized_pct_at_50']:+.3f} %")


# --------------------------------------------------------------------------------------------------------------------
# example dashboard
# --------------------------------------------------------------------------------------------------------------------


def example_dashboard(out: Path, logdir: Path | None, steps: int = 60, grow_at: int = 30) -> Path:
    from lightning_sparkling.dashboards.plotting import plot_runs

    torch.set_num_threads(2)
    logdir = Path(logdir or tempfile.mkdtemp(prefix="sparkling_example_"))
    vocab, seq, batch = 256, 64, 16
    data = markov_tokens(steps * batch, seq, vocab, seed=1)
    val = markov_tokens(4 * batch, seq, vocab, seed=2)
    dirs = []
    for name, grow in (("grown_64to128_at30", True), ("fixed_64", False)):
        config = make_config(64, 6, seq, vocab, n_head=4, intermediate_size=128)
        module = LM(config, data, batch, lr=3e-3, warmup=5, total_steps=steps, val_data=val)
        callbacks: list[L.Callback] = [ActivationRMSMonitor(every_n_steps=2), LearningRateMonitor("step")]
        if grow:
            callbacks.insert(0, GrowthCallback(GrowthStage(grow_at, n_embd=128, intermediate_size=256,
                                                                rewarmup_steps=10), min_lr=3e-4))
        logger = TensorBoardLogger(str(logdir), name=name)
        L.Trainer(max_steps=steps, logger=logger, callbacks=callbacks, accelerator="cpu", devices=1,
                  enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                  log_every_n_steps=1, val_check_interval=10, num_sanity_val_steps=0).fit(module)
        dirs.append(logger.log_dir)
    path = plot_runs(dirs, out, x_axis="step",
                     title=f"SPARKLING example: 6-layer LLaMA-style GPT grown 64 -> 128 wide at step {grow_at} "
                           f"(copy-copy, RMS-preserving) vs fixed width 64")
    print(f"logs in {logdir}\nwrote {path}")
    return path


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n-embd", type=int, default=256)
    p.add_argument("--n-layer", type=int, default=4)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--steps", type=int, default=100, help="measured steps per setting and round")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--paired-steps", type=int, default=60, help="pairs in the paired loop (0: skip)")
    p.add_argument("--threads", type=int, default=1,
                   help="intra-op threads (1: robust on a shared machine, where 2 threads oversubscribe)")
    p.add_argument("--settings", nargs="+", default=["off", "every_50", "every_1"], choices=list(SETTINGS),
                   help="Lightning runs (per_linear is measured in the paired loop in any case)")
    p.add_argument("--quick", action="store_true", help="tiny model, for a smoke run")
    p.add_argument("--out", type=Path, default=ROOT / "results" / "rms_monitor.json")
    p.add_argument("--example-dashboard", type=Path, default=None, metavar="PNG",
                   help="render the example dashboard instead of benchmarking")
    p.add_argument("--example-logdir", type=Path, default=None)
    args = p.parse_args(argv)
    if args.example_dashboard is not None:
        example_dashboard(args.example_dashboard, args.example_logdir)
        return 0
    if args.quick:
        args.n_embd, args.n_layer, args.seq, args.batch, args.vocab = 64, 2, 64, 4, 256
    result = benchmark(args)
    print_table(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
