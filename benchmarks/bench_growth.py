"""Growth time and the per-step cost of the new-entry learning-rate mechanism, on CPU, at >= 50M parameters.

    python benchmarks/bench_growth.py            # prints a table, writes benchmarks/results/growth.json

What is timed (median of repeated runs, after warm-up):
- growth: ``grow_model`` (plan, new tensors, swap) plus the AdamW state patch, for several stages;
- a training step (forward, backward, AdamW step) of the grown model without and with ``RewarmupRescale`` (the
  copy of new entries before ``optimizer.step()`` and the ``lerp`` after it), and the optimizer step alone; plain
  and hooked runs alternate and the cost is the median of the per-pair differences.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from litgpt import GPT, Config

from lightning_sparkling import GrowthStage, grow_model
from lightning_sparkling.growth.compute import count_params
from lightning_sparkling.growth.optim_state import RewarmupRescale, NewEntryRegion, plan_optimizer_patch


def base_config() -> Config:
    return Config(name="bench", n_embd=512, n_head=8, n_layer=8, intermediate_size=2048, vocab_size=32000,
                  padded_vocab_size=32000, block_size=256, mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm",
                  bias=False, parallel_residual=False)


def train_step(model, optimizer, ids) -> None:
    logits = model(ids[:, :-1])
    loss = F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)


def run_case(name: str, stage: GrowthStage, repeats: int, batch: int, seq: int) -> dict:
    torch.manual_seed(0)
    model = GPT(base_config())
    model.apply(model._init_weights)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    ids = torch.randint(0, 32000, (batch, seq + 1))
    train_step(model, optimizer, ids)  # creates AdamW state, so the patch has real moments to grow
    params_before = count_params(model.config)[1]

    t0 = time.perf_counter()
    result = grow_model(model, stage)
    t_model = time.perf_counter() - t0
    patch = plan_optimizer_patch(optimizer, result, "asymmetric")
    patch.apply()
    t_total = time.perf_counter() - t0
    params_after = count_params(model.config)[1]

    train_step(model, optimizer, ids)  # warm-up at the new shapes
    regions = {0: [NewEntryRegion(result.new_params[n], [(result.new_params[n].data, piece) for piece in pieces],
                                  lambda: 1.3e-3) for n, pieces in result.new_entries.items()]}

    hook = RewarmupRescale(optimizer, regions)  # one hook for the whole run, as the callback keeps it
    active = hook.regions

    def timed(fn, with_hook: bool) -> float:
        hook.regions = active if with_hook else {}
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    # paired: plain and hooked alternate, so drift of the machine cancels in the per-pair differences
    pairs = [(timed(lambda: train_step(model, optimizer, ids), False),
              timed(lambda: train_step(model, optimizer, ids), True)) for _ in range(repeats)]
    no_hook = statistics.median(a for a, _ in pairs)
    with_hook = no_hook + statistics.median(b - a for a, b in pairs)
    logits = model(ids[:, :-1])  # gradients in place for optimizer-only timings
    F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()).backward()
    opt_pairs = [(timed(optimizer.step, False), timed(optimizer.step, True)) for _ in range(repeats)]
    opt_only = statistics.median(a for a, _ in opt_pairs)
    opt_hook = opt_only + statistics.median(b - a for a, b in opt_pairs)
    hook.remove()
    new_entries = sum(sum(result.new_params[n][piece].numel() for piece in result.new_entries[n])
                      for n in result.new_params)
    return {
        "case": name, "params_before": params_before, "params_after": params_after, "new_entries": new_entries,
        "grow_model_s": t_model, "growth_with_optimizer_s": t_total,
        "step_s": no_hook, "step_with_new_entry_lr_s": with_hook,
        "step_overhead_pct": 100 * (with_hook - no_hook) / no_hook,
        "optimizer_step_s": opt_only, "optimizer_step_with_new_entry_lr_s": opt_hook,
        "new_entry_lr_cost_s": opt_hook - opt_only,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "growth.json"))
    args = parser.parse_args()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    cases = [
        ("inner 2x (2048->4096)", GrowthStage(1, intermediate_size=4096)),
        ("hidden 1.5x (512->768)", GrowthStage(1, n_embd=768)),
        ("hidden 2x + inner 2x", GrowthStage(1, n_embd=1024, intermediate_size=4096)),
    ]
    rows = [run_case(name, stage, args.repeats, args.batch, args.seq) for name, stage in cases]
    header = (f"{'case':<24}{'params':>18}{'grow (s)':>10}{'+optim (s)':>11}{'step (s)':>10}"
              f"{'step+LR (s)':>12}{'overhead':>10}{'LR cost (s)':>12}")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch} x seq {args.seq}, "
          f"AdamW, median of {args.repeats} alternating pairs")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['case']:<24}{r['params_before'] / 1e6:>8.1f}M->{r['params_after'] / 1e6:>6.1f}M"
              f"{r['grow_model_s']:>10.2f}{r['growth_with_optimizer_s']:>11.2f}{r['step_s']:>10.3f}"
              f"{r['step_with_new_entry_lr_s']:>12.3f}{r['step_overhead_pct']:>9.1f}%{r['new_entry_lr_cost_s']:>12.3f}")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"torch": torch.__version__, "threads": torch.get_num_threads(), "batch": args.batch,
                               "seq": args.seq, "repeats": args.repeats, "rows": rows}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
