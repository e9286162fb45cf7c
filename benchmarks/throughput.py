"""Steady-state speed after growth: a grown model against the same shape trained from scratch, in one run.

    python benchmarks/throughput.py                          # size 39M, batches 4 and 16 x 256 tokens
    python benchmarks/throughput.py --size 12M --repeats 5   # smoke test

Two measurements, both by alternating the two variants step by step in one process (so drift of a shared machine
cancels in per-pair ratios; medians reported):

1. **Grown vs from scratch.** A small model is trained a few AdamW steps and grown (hidden 2x + MLP inner 2x, as
   ``GrowthCallback`` does it: ``grow_model`` and the asymmetric AdamW state patch); a second model of the
   grown shape is built from scratch with its own AdamW. Their training steps (forward, backward, AdamW) alternate.
   ``ratio = scratch step time / grown step time`` (target >= 0.97: growth must not leave slow, strided or
   fragmented tensors). The grown model's parameters and optimizer state are also checked for layout: contiguous,
   storage offset 0, a storage no larger than the tensor (no view into a bigger buffer).
2. **The new-entry LR's cost.** The grown model's steps with and without ``RewarmupRescale`` (the per-element re-warmup
   of new entries: one copy of the new entries before ``optimizer.step()``, one ``lerp`` after), alternating, for
   each batch size in ``--batches``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from growth_cost import SIZES, VOCAB, make_config, train_step  # noqa: E402 (after the sys.path line)


def layout_problems(tensors: dict) -> list[str]:
    """Names of tensors that are not plain, dense, exclusively owned blocks of memory."""
    bad = []
    for name, t in tensors.items():
        if not t.is_contiguous():
            bad.append(f"{name}: not contiguous (stride {t.stride()})")
        elif t.storage_offset() != 0:
            bad.append(f"{name}: storage offset {t.storage_offset()}")
        elif t.untyped_storage().nbytes() != t.numel() * t.element_size():
            bad.append(f"{name}: storage {t.untyped_storage().nbytes()} B for {t.numel() * t.element_size()} B")
    return bad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", default="39M", choices=list(SIZES), help="model size (grown), see growth_cost.py")
    parser.add_argument("--batches", default="4,16", help="comma list of sequences per step (default 4,16)")
    parser.add_argument("--seq", type=int, default=256, help="tokens per sequence (default 256)")
    parser.add_argument("--repeats", type=int, default=15, help="alternating pairs per measurement (default 15)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    parser.add_argument("--out", default=str(HERE / "results" / "throughput.json"))
    args = parser.parse_args()

    import torch
    from litgpt import GPT

    from lightning_sparkling import GrowthStage, grow_model
    from lightning_sparkling.growth.compute import count_params
    from lightning_sparkling.growth.optim_state import RewarmupRescale, NewEntryRegion, plan_optimizer_patch
    from lightning_sparkling.growth.plan import grown_config

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    small, widths = SIZES[args.size]
    config = make_config(small, args.seq)
    batches = [int(b) for b in args.batches.split(",")]
    ids = {b: torch.randint(0, VOCAB, (b, args.seq + 1)) for b in batches}

    grown = GPT(config)
    grown.apply(grown._init_weights)
    opt_g = torch.optim.AdamW(grown.parameters(), lr=1e-3, weight_decay=0.1)
    for _ in range(2):
        train_step(grown, opt_g, ids[batches[0]])
    result = grow_model(grown, GrowthStage(2, **widths))
    plan_optimizer_patch(opt_g, result, "asymmetric").apply()
    regions = {0: [NewEntryRegion(result.new_params[n], [(result.new_params[n].data, piece) for piece in pieces],
                                  lambda: 1.3e-3) for n, pieces in result.new_entries.items()]}
    new_entries = sum(sum(result.new_params[n][piece].numel() for piece in result.new_entries[n])
                      for n in result.new_params)
    hook = RewarmupRescale(opt_g, regions)
    active = hook.regions
    hook.regions = {}

    scratch = GPT(grown_config(config, widths))
    scratch.apply(scratch._init_weights)
    opt_s = torch.optim.AdamW(scratch.parameters(), lr=1e-3, weight_decay=0.1)

    tensors = {f"param {n}": p.data for n, p in grown.named_parameters()}
    names = {id(p): n for n, p in grown.named_parameters()}
    for p, st in opt_g.state.items():
        tensors.update({f"state {names.get(id(p), '?')}.{k}": v for k, v in st.items()
                        if isinstance(v, torch.Tensor) and v.dim() > 0})
    problems = layout_problems(tensors)

    out = {"torch": torch.__version__, "threads": args.threads, "seq": args.seq, "repeats": args.repeats,
           "size": args.size, "params_before": count_params(config)[1], "params_after": count_params(grown.config)[1],
           "new_entries": new_entries, "layout_checked": len(tensors), "layout_problems": problems, "rows": []}
    print(f"{args.size}: {out['params_before'] / 1e6:.1f}M -> {out['params_after'] / 1e6:.1f}M parameters, "
          f"{args.threads} threads, seq {args.seq}; layout: {len(tensors)} tensors checked, {len(problems)} problems"
          + "".join(f"\n  {p}" for p in problems[:10]), flush=True)
    for b in batches:
        x = ids[b]
        for _ in range(2):  # warm-up at this batch
            train_step(grown, opt_g, x)
            train_step(scratch, opt_s, x)
        pairs = []
        for i in range(args.repeats):  # alternate which goes first as well
            if i % 2:
                s = train_step(scratch, opt_s, x)
                g = train_step(grown, opt_g, x)
            else:
                g = train_step(grown, opt_g, x)
                s = train_step(scratch, opt_s, x)
            pairs.append((g, s))
        hooked = []
        for _ in range(args.repeats):
            hook.regions = {}
            plain = train_step(grown, opt_g, x)
            hook.regions = active
            with_hook = train_step(grown, opt_g, x)
            hooked.append((plain, with_hook))
        hook.regions = {}
        row = {
            "batch": b, "tokens_per_step": b * args.seq,
            "grown_step_s": statistics.median(g for g, _ in pairs),
            "scratch_step_s": statistics.median(s for _, s in pairs),
            "ratio_scratch_over_grown": statistics.median(s / g for g, s in pairs),
            "plain_step_s": statistics.median(a for a, _ in hooked),
            "new_entry_lr_cost_s": statistics.median(h - a for a, h in hooked),
        }
        row["new_entry_lr_cost_pct"] = 100 * row["new_entry_lr_cost_s"] / row["plain_step_s"]
        row["ok_ratio"] = row["ratio_scratch_over_grown"] >= 0.97
        out["rows"].append(row)
        print(f"batch {b} x {args.seq}: grown {row['grown_step_s']:.3f} s, scratch {row['scratch_step_s']:.3f} s, "
              f"ratio {row['ratio_scratch_over_grown']:.3f}; new-entry LR +{row['new_entry_lr_cost_s'] * 1e3:.1f} ms "
              f"({row['new_entry_lr_cost_pct']:+.1f}%)", flush=True)
    hook.remove()
    head = ("| batch (tokens) | grown step (s) | from-scratch step (s) | scratch / grown (median of pairs) | "
            "step without new-entry LR (s) | new-entry LR cost |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in out["rows"]:
        lines.append(f"| {r['batch']} x {args.seq} ({r['tokens_per_step']}) | {r['grown_step_s']:.3f} | "
                     f"{r['scratch_step_s']:.3f} | {r['ratio_scratch_over_grown']:.3f} | {r['plain_step_s']:.3f} | "
                     f"{r['new_entry_lr_cost_s'] * 1e3:+.1f} ms ({r['new_entry_lr_cost_pct']:+.1f}%) |")
    out["table"] = "\n".join(lines)
    print(out["table"])
    path = Path(args.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
