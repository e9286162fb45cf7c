"""Per-rank memory of a growth under FSDP2 (ModelParallelStrategy) or FSDP1 (FSDPStrategy, use_orig_params=True)
on 2 CPU ranks (gloo), vs. steady-state training.

    python benchmarks/bench_fsdp_memory.py --strategy fsdp2   # launches 2 ranks; prints a table;
    python benchmarks/bench_fsdp_memory.py --strategy fsdp1   # writes results/<strategy>_memory.json

FSDP2: the module's ``configure_model`` shards each block, then the GPT (``shard_gpt``); growth gathers, grows and
re-shards one block at a time. FSDP1: Lightning's ``FSDPStrategy`` refuses CPU ranks, so this runs
``lightning_sparkling.parallel.testing.CPUFSDPStrategy``; ``configure_model`` wraps each block, then the GPT
(``wrap_gpt``), and growth goes one FSDP unit at a time (``summon_full_params(unit, recurse=False)``), optimizer state
through the
same round trip.

A sampler thread reads this process's resident set size (/proc/self/statm) every millisecond. Reported per rank:
the RSS before growth, the highest RSS during the growth (optimizer state included), during the training steps
before it and during the training steps of the grown model after it, next to the sizes that bound it: the full
grown model (what a naive gather of the whole model would add), one full block (old + grown), the GPT's own
parameters (embedding, head, final norm; old + grown: FSDP1's largest unit here), and the sharded model and
optimizer state.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import ModelParallelStrategy
from litgpt import GPT, Config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lightning_sparkling import GrowthStage, GrowthCallback
from lightning_sparkling.growth.plan import grown_config
from lightning_sparkling.parallel.testing import CPUFSDPStrategy
from lightning_sparkling.parallel import shard_gpt, wrap_gpt

PAGE = os.sysconf("SC_PAGE_SIZE")
GROW_AT, MAX_STEPS = 6, 10
CONFIG = dict(name="bench", n_embd=512, n_head=8, n_layer=8, intermediate_size=2048, vocab_size=16384,
              padded_vocab_size=16384, block_size=128, mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm",
              bias=False, parallel_residual=False)
STAGE = dict(n_embd=1024, intermediate_size=4096)

def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE / 2**20


class Sampler:
    def __init__(self) -> None:
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_mb())
            time.sleep(0.001)

    def reset(self) -> float:
        value, self.peak = self.peak, rss_mb()
        return value


class Module(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = GPT(Config(**CONFIG))

    def configure_model(self) -> None:  # idempotent: growth calls it again on the grown GPT
        if self.device_mesh is not None:  # FSDP2
            shard_gpt(self.model, self.device_mesh)
        else:  # FSDP1: each block, then the GPT
            self.model = wrap_gpt(self.model)

    def training_step(self, batch, batch_idx):
        g = torch.Generator().manual_seed(self.global_step)
        ids = torch.randint(0, CONFIG["vocab_size"], (2, 65), generator=g)
        logits = self.model(ids[:, :-1])
        return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.zeros(1000, 1), batch_size=1)


class Probe(Callback):
    """Around the growth callback: RSS peaks of the training steps before growth and of the growth itself."""

    def __init__(self, sampler: Sampler, before: bool) -> None:
        self.sampler, self.before = sampler, before
        self.stats: dict[str, float] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step != GROW_AT:
            return
        if self.before:  # runs before the growth callback
            self.stats["train_peak_mb"] = self.sampler.reset()
            self.stats["before_growth_mb"] = rss_mb()
        else:  # runs after it
            self.stats["growth_peak_mb"] = self.sampler.reset()
            self.stats["after_growth_mb"] = rss_mb()

    def on_train_end(self, trainer, pl_module):
        if not self.before:
            self.stats["grown_train_peak_mb"] = self.sampler.reset()


def sizes_mb(world: int) -> dict[str, float]:
    small, big = Config(**CONFIG), grown_config(Config(**CONFIG), STAGE)
    with torch.device("meta"):
        old, new = GPT(small), GPT(big)
    nbytes = lambda m: sum(p.numel() * 4 for p in m.parameters()) / 2**20
    block = lambda m: nbytes(m.transformer.h[0])
    root = lambda m: nbytes(m) - sum(nbytes(b) for b in m.transformer.h)
    return {"full_grown_model_mb": nbytes(new), "full_old_model_mb": nbytes(old),
            "one_block_old_plus_grown_mb": block(old) + block(new), "embedding_grown_mb": 16384 * 1024 * 4 / 2**20,
            "root_unit_old_plus_grown_mb": root(old) + root(new),
            "sharded_grown_model_mb": nbytes(new) / world, "sharded_grown_adamw_mb": 2 * nbytes(new) / world}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", choices=["fsdp2", "fsdp1"], default="fsdp2")
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default: results/<strategy>_memory.json)")
    args = parser.parse_args()
    strategy = (ModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1) if args.strategy == "fsdp2"
                else CPUFSDPStrategy(use_orig_params=True))
    torch.set_num_threads(1)
    sampler = Sampler()
    before, after = Probe(sampler, True), Probe(sampler, False)
    growth = GrowthCallback(GrowthStage(GROW_AT, **STAGE, rewarmup_steps=2), min_lr=0.0)
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=strategy,
                        max_steps=MAX_STEPS, callbacks=[before, growth, after],
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False)
    trainer.fit(Module())
    row = {"rank": trainer.global_rank, **before.stats, **after.stats,
           "growth_seconds": growth.summaries[0]["seconds"]}
    rows = trainer.strategy.all_gather(torch.tensor([row[k] for k in sorted(row)], dtype=torch.float64))
    if trainer.global_rank == 0:
        keys = sorted(row)
        table = [dict(zip(keys, map(float, r))) for r in rows.tolist()]
        ref = sizes_mb(trainer.world_size)
        print(f"{args.strategy.upper()} growth {CONFIG['n_embd']}->{STAGE['n_embd']} hidden, "
              f"{CONFIG['intermediate_size']}->{STAGE['intermediate_size']} inner, {CONFIG['n_layer']} layers, "
              "2 CPU ranks (RSS, MiB)")
        print(f"{'rank':>4} {'before growth':>14} {'train peak (small)':>19} {'growth peak':>12} "
              f"{'growth - before':>16} {'train peak (grown)':>19} {'seconds':>8}")
        for r in table:
            print(f"{int(r['rank']):>4} {r['before_growth_mb']:>14.0f} {r['train_peak_mb']:>19.0f} "
                  f"{r['growth_peak_mb']:>12.0f} {r['growth_peak_mb'] - r['before_growth_mb']:>16.0f} "
                  f"{r['grown_train_peak_mb']:>19.0f} {r['growth_seconds']:>8.2f}")
        print("reference sizes (MiB, fp32): " + ", ".join(f"{k}={v:.0f}" for k, v in ref.items()))
        out = args.out or Path(__file__).parent / "results" / f"{args.strategy}_memory.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"ranks": table, "reference_mb": ref, "config": CONFIG, "stage": STAGE}, indent=2))
        print(f"wrote {out}")
    if torch.distributed.is_initialized():  # an orderly gloo shutdown (avoids an abort at interpreter exit)
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
