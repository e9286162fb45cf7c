"""How growth changes Muon's step size on the *old* entries of a grown matrix (torch.optim.Muon, CPU).

    python benchmarks/bench_muon_adjust.py     # prints a table, writes benchmarks/results/muon_adjust.json

Muon's update of an ``A x B`` matrix is ``adjusted_lr * NS(momentum)``, with ``adjusted_lr = lr * sqrt(max(1, A/B))``
(``adjust_lr_fn="original"``) or ``lr * 0.2 * sqrt(max(A, B))`` (``"match_rms_adamw"``); ``NS`` is close to an
orthogonal matrix. Growing ``A`` or ``B`` changes Muon's multiplier for the whole matrix, old entries included.
lightning-sparkling keeps Muon's rule (the grown matrix is stepped as a matrix of that shape from scratch); this
script measures the effect: the RMS of the update over the old entries in the last step before growth and the
first step after it (same learning rate), for the default asymmetric state (momentum ``[M, 0]``: the orthogonalized
old block is ``NS(M)``, so only the multiplier changes) and for ``copy`` state (momentum ``[M, M]``: the
orthogonalization spreads over the copies, another ``1/sqrt(copies)`` per grown side).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from litgpt import GPT, Config

from lightning_sparkling import GrowthStage, grow_model
from lightning_sparkling.growth.optim_state import plan_optimizer_patch


def adjust(shape: tuple[int, int], fn: str) -> float:
    """torch.optim.Muon's learning-rate multiplier for an ``A x B`` matrix."""
    a, b = shape
    return math.sqrt(max(1.0, a / b)) if fn == "original" else 0.2 * math.sqrt(max(a, b))


def step(model, optimizer, ids) -> dict[str, torch.Tensor]:
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.ndim == 2 and ".h." in n}
    logits = model(ids[:, :-1])
    F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()).backward()
    optimizer.step()
    optimizer.zero_grad()
    return {n: dict(model.named_parameters())[n].detach() - before[n] for n in before}


def run(fn: str, recipe: str) -> list[dict]:
    torch.manual_seed(0)
    config = Config(n_embd=128, n_head=4, n_layer=2, intermediate_size=256, vocab_size=256, padded_vocab_size=256,
                    block_size=64, mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm", bias=False,
                    parallel_residual=False)
    model = GPT(config)
    model.apply(model._init_weights)
    matrices = [p for n, p in model.named_parameters() if p.ndim == 2 and ".h." in n]
    optimizer = torch.optim.Muon(matrices, lr=0.01, weight_decay=0.0, adjust_lr_fn=fn)
    ids = torch.randint(0, 256, (8, 65), generator=torch.Generator().manual_seed(0))
    for _ in range(5):
        updates_before = step(model, optimizer, ids)
    shapes_before = {n: tuple(p.shape) for n, p in model.named_parameters() if n in updates_before}
    result = grow_model(model, GrowthStage(5, n_embd=256, intermediate_size=768))
    plan_optimizer_patch(optimizer, result, recipe).apply()
    updates_after = step(model, optimizer, ids)
    rows = []
    for name in ("transformer.h.0.attn.qkv.weight", "transformer.h.0.attn.proj.weight",
                 "transformer.h.0.mlp.fc_1.weight", "transformer.h.0.mlp.proj.weight"):
        old = shapes_before[name]
        new = tuple(result.new_params[name].shape)
        rms_before = updates_before[name].pow(2).mean().sqrt().item()
        rms_after = updates_after[name][: old[0], : old[1]].pow(2).mean().sqrt().item()
        # asymmetric: momentum [M, ~0] -> NS over the old entries is NS(M): only Muon's multiplier changes.
        # copy: momentum [M, M] (k copies) -> NS spreads over the copies: an extra 1/sqrt(copies) per grown side.
        copies = [n_new / n_old for n_new, n_old in zip(new, old)]
        spread = 1.0 if recipe == "asymmetric" else 1.0 / math.sqrt(math.prod(copies))
        rows.append({"adjust_lr_fn": fn, "optimizer_state": recipe, "tensor": name.split("h.0.")[1],
                     "shape_before": old, "shape_after": new, "measured_ratio": rms_after / rms_before,
                     "adjust_ratio": adjust(new, fn) / adjust(old, fn),
                     "predicted_ratio": adjust(new, fn) / adjust(old, fn) * spread})
    return rows


def main() -> None:
    rows = [r for fn in ("original", "match_rms_adamw") for recipe in ("asymmetric", "copy") for r in run(fn, recipe)]
    print("Muon update RMS of old entries, first step after growth / last step before "
          "(n_embd 128->256, inner 256->768)")
    print(f"{'adjust_lr_fn':<16}{'state':<12}{'tensor':<18}{'shape':>22}{'measured':>10}{'predicted':>11}"
          f"{'Muon factor':>13}")
    for r in rows:
        shape = f"{r['shape_before'][0]}x{r['shape_before'][1]}->{r['shape_after'][0]}x{r['shape_after'][1]}"
        print(f"{r['adjust_lr_fn']:<16}{r['optimizer_state']:<12}{r['tensor']:<18}{shape:>22}"
              f"{r['measured_ratio']:>10.3f}{r['predicted_ratio']:>11.3f}{r['adjust_ratio']:>13.3f}")
    out = Path(__file__).parent / "results" / "muon_adjust.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
