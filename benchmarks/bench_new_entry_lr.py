"""The per-step cost of the new-entry learning rate (``RewarmupRescale``), this checkout's against a reference one, in
one run on one machine: a small model grown hidden 2x + MLP 2x (``growth_cost.py``'s sizes), then AdamW training steps
of the grown model taken in rotation without the hook, with the reference ``RewarmupRescale`` and with this one.

    git show <ref>:lightning_sparkling/growth/optim_state.py > /tmp/ref_optim_state.py
    python benchmarks/bench_new_entry_lr.py --ref /tmp/ref_optim_state.py --sizes 12M,39M --batch 4 --repeats 15

The cost of each is the median of its per-rotation difference to the plain step (rotations also rotate which goes
first, so the machine's drift cancels); the shared 2-core box is noisy, so the whole measurement is repeated
``--runs`` times and each run's medians are reported with the median over runs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from growth_cost import SIZES, VOCAB, make_config, train_step  # noqa: E402


def load_reference(path: str):
    spec = importlib.util.spec_from_file_location("_ref_optim_state", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def measure(size: str, batch: int, seq: int, repeats: int, ref) -> dict:
    import torch
    from litgpt import GPT

    from lightning_sparkling import GrowthStage, grow_model
    from lightning_sparkling.growth import optim_state as new

    torch.manual_seed(0)
    small, widths = SIZES[size]
    model = GPT(make_config(small, seq))
    model.apply(model._init_weights)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    ids = torch.randint(0, VOCAB, (batch, seq + 1))
    for _ in range(2):
        train_step(model, opt, ids)
    result = grow_model(model, GrowthStage(2, **widths))
    new.plan_optimizer_patch(opt, result, "asymmetric").apply()
    hooks = {}
    for name, mod in (("reference", ref), ("this", new)):
        lr = lambda: 1.3e-3
        regions = {0: [mod.NewEntryRegion(result.new_params[n], [(result.new_params[n].data, p) for p in pieces], lr)
                       for n, pieces in result.new_entries.items()]}
        hook = getattr(mod, "RewarmupRescale", None) or mod.NewEntryLR  # a reference checkout may predate the name
        hook = hook(opt, regions)
        hooks[name] = (hook, hook.regions)
        hook.regions = {}
    for _ in range(3):
        train_step(model, opt, ids)
    order = ["plain", "reference", "this"]
    times: dict[str, list[float]] = {k: [] for k in order}
    for i in range(repeats):
        for which in order[i % 3:] + order[: i % 3]:
            for name, (hook, active) in hooks.items():
                hook.regions = active if name == which else {}
            times[which].append(train_step(model, opt, ids))
    for hook, _ in hooks.values():
        hook.remove()
    plain = statistics.median(times["plain"])
    row = {"size": size, "batch": batch, "tokens_per_step": batch * seq, "plain_step_s": plain,
           "new_entries": sum(sum(result.new_params[n][p].numel() for p in result.new_entries[n])
                              for n in result.new_params)}
    for name in ("reference", "this"):
        cost = statistics.median(b - a for a, b in zip(times["plain"], times[name]))
        row[f"{name}_cost_s"], row[f"{name}_cost_pct"] = cost, 100 * cost / plain
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ref", required=True, help="a reference optim_state.py (e.g. from git show main:...)")
    parser.add_argument("--sizes", default="12M,39M")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default=str(HERE / "results" / "new_entry_lr.json"))
    args = parser.parse_args()
    import os

    import torch

    torch.set_num_threads(args.threads)
    ref = load_reference(args.ref)
    out = {"torch": torch.__version__, "threads": args.threads, "seq": args.seq, "batch": args.batch,
           "repeats": args.repeats, "runs": args.runs, "load_average_at_start": os.getloadavg(), "sizes": {}}
    for size in args.sizes.split(","):
        rows = []
        for run in range(args.runs):
            row = measure(size, args.batch, args.seq, args.repeats, ref)
            rows.append(row)
            print(f"{size} run {run}: step {row['plain_step_s']:.3f} s; "
                  f"reference +{row['reference_cost_s'] * 1e3:.1f} ms ({row['reference_cost_pct']:+.2f}%), "
                  f"this +{row['this_cost_s'] * 1e3:.1f} ms "
                  f"({row['this_cost_pct']:+.2f}%)", flush=True)
        summary = {k: statistics.median(r[k] for r in rows) for k in
                   ("plain_step_s", "reference_cost_s", "reference_cost_pct", "this_cost_s", "this_cost_pct")}
        out["sizes"][size] = {"runs": rows, "median": summary}
        print(f"{size} median of {args.runs}: reference {summary['reference_cost_pct']:+.2f}%, "
              f"this {summary['this_cost_pct']:+.2f}%", flush=True)
    out["load_average_at_end"] = os.getloadavg()
    Path(args.out).write_text(json.dumps(out, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
