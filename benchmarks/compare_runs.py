"""Are two ``sparkling pretrain`` runs the same run? Compares, bit for bit, the final litgpt weights, every optimizer
state entry of the checkpoints both runs saved, and every TensorBoard scalar (``throughput/*`` and wall-clock tags,
``train/device/*_per_sec`` and ``mfu`` among them, left out), and prints what differs. For a change that must not change
behaviour (a refactor): train the same config before and after it and compare.

    PYTHONPATH=<old worktree> sparkling pretrain --config benchmarks/identity/every_axis.yaml --out_dir /tmp/before
    sparkling pretrain --config benchmarks/identity/every_axis.yaml --out_dir /tmp/after
    python benchmarks/compare_runs.py /tmp/before /tmp/after       # exit code 1 if anything differs

``benchmarks/identity/every_axis.yaml`` grows every axis in 14 steps (dense -> MoE with drop-upcycle, then hidden
and expert width with copy-copy, then heads, then depth ``interleave``, then 4 -> 8 experts with top-4);
``width_heads_depth_map.yaml`` grows width and heads in one stage, then depth by a ``depth_map``.
"""

from __future__ import annotations

import argparse
import glob
import sys
from pathlib import Path

import torch


WALL_CLOCK = ("seconds", "time", "memory", "per_sec", "mfu")
"""Words of the tags that measure the machine, not the run (``train/device/items_per_sec``, ``.../mfu``, ...)."""


def _flat(obj, prefix: str = ""):
    if isinstance(obj, dict):
        for key, value in obj.items():
            yield from _flat(value, f"{prefix}/{key}")
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            yield from _flat(value, f"{prefix}/{i}")
    else:
        yield prefix, obj


def _same(a, b) -> bool:
    if torch.is_tensor(a) or torch.is_tensor(b):
        return torch.is_tensor(a) and torch.is_tensor(b) and a.shape == b.shape and torch.equal(a, b)
    return a == b


def _scalars(run: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(glob.glob(str(run / "logs" / "**" / "events*"), recursive=True)):
        events = EventAccumulator(path, size_guidance={"scalars": 0})
        events.Reload()
        for tag in events.Tags()["scalars"]:
            if tag.startswith("throughput") or any(word in tag for word in WALL_CLOCK):
                continue
            out.setdefault(tag, []).extend((e.step, e.value) for e in events.Scalars(tag))
    return out


def compare(a: Path, b: Path) -> list[str]:
    """What differs between runs ``a`` and ``b`` (empty: the same run)."""
    found = []
    wa = torch.load(a / "final" / "lit_model.pth", weights_only=True)
    wb = torch.load(b / "final" / "lit_model.pth", weights_only=True)
    found += [f"weights: {k} only in one run" for k in sorted(set(wa) ^ set(wb))]
    found += [f"weights: {k} differs" for k in sorted(set(wa) & set(wb)) if not _same(wa[k], wb[k])]
    ckpts_a = {p.name for p in (a / "checkpoints").glob("*.ckpt")}
    ckpts_b = {p.name for p in (b / "checkpoints").glob("*.ckpt")}
    for name in sorted(ckpts_a & ckpts_b):
        sa = dict(_flat(torch.load(a / "checkpoints" / name, weights_only=False)["optimizer_states"]))
        sb = dict(_flat(torch.load(b / "checkpoints" / name, weights_only=False)["optimizer_states"]))
        found += [f"{name}: optimizer {k} differs" for k in sorted(set(sa) | set(sb))
                  if k not in sa or k not in sb or not _same(sa[k], sb[k])]
    ta, tb = _scalars(a), _scalars(b)
    found += [f"scalar {t} only in one run" for t in sorted(set(ta) ^ set(tb))]
    found += [f"scalar {t} differs" for t in sorted(set(ta) & set(tb)) if ta[t] != tb[t]]
    print(f"{len(wa)} weights, {len(ckpts_a & ckpts_b)} checkpoints, {len(set(ta) & set(tb))} scalar tags compared")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path, help="a run's out_dir")
    parser.add_argument("b", type=Path, help="the other run's out_dir")
    args = parser.parse_args(argv)
    found = compare(args.a, args.b)
    for line in found[:40]:
        print(line)
    print("the same run" if not found else f"{len(found)} differences")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
