"""One AdamW step, fused against foreach, over the parameters of litgpt GPTs (the figure behind fusing on the CPU too;
docs/ARCHITECTURE.md, "Fused AdamW").

    python benchmarks/bench_fused_adamw.py                  # CPU, one thread
    python benchmarks/bench_fused_adamw.py --device cuda

Both optimizers step the same parameters with the same random gradients, alternating, ``--repeats`` times; the median
of the steps after the first three is printed in milliseconds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from litgpt import GPT, Config

SHAPES = ((128, 4), (384, 6))  # (n_embd, n_layer): 2.1M and 17.3M parameters with a 4096-token vocabulary


def step_times(n_embd: int, n_layer: int, device: str, repeats: int) -> tuple[int, dict[str, float]]:
    config = Config(n_embd=n_embd, n_head=4, n_layer=n_layer, intermediate_size=4 * n_embd, vocab_size=4096,
                    padded_vocab_size=4096, block_size=128, mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm",
                    bias=False)
    model = GPT(config).to(device)
    for p in model.parameters():
        p.grad = torch.randn_like(p)
    optimizers = {name: torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, **{name: True})
                  for name in ("fused", "foreach")}
    times: dict[str, list[float]] = {name: [] for name in optimizers}
    for _ in range(repeats):
        for name, opt in optimizers.items():
            if device == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            opt.step()
            if device == "cuda":
                torch.cuda.synchronize()
            times[name].append(time.perf_counter() - start)
    n = sum(p.numel() for p in model.parameters())
    return n, {name: 1e3 * statistics.median(t[3:]) for name, t in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for n_embd, n_layer in SHAPES:
        n, ms = step_times(n_embd, n_layer, args.device, args.repeats)
        print(f"{n / 1e6:.1f}M parameters: fused {ms['fused']:.2f} ms, foreach {ms['foreach']:.2f} ms "
              f"({ms['foreach'] / ms['fused']:.1f}x)")


if __name__ == "__main__":
    main()
