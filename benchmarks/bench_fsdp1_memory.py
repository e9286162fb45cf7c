"""Per-rank memory of an FSDP1 growth (FSDPStrategy, use_orig_params=True, 2 CPU ranks, gloo) vs. steady-state
training: the twin of ``bench_fsdp2_memory.py`` (same model, stage, steps and table).

    python benchmarks/bench_fsdp1_memory.py      # launches 2 ranks; prints a table; writes results/fsdp1_memory.json

Lightning's ``FSDPStrategy`` refuses CPU ranks, so the script runs a subclass that lifts that check (as
``tests/ddp_script.py`` does). ``configure_model`` wraps each block, then the GPT (``wrap_gpt``), so growth goes
one FSDP unit at a time (``summon_full_params(unit, recurse=False)``), optimizer state through the same round trip.

A sampler thread reads this process's resident set size (/proc/self/statm) every millisecond. Reported per rank:
the RSS before growth, the highest RSS during the growth (build the new wrapped GPT -> per unit: gather old, grow,
write back into the new shards -> the same for each optimizer state key), during the training steps before it and
during the training steps of the grown model after it, next to the sizes that bound it: the full grown model (what a
naive gather of the whole model would add), one full grown block (old + grown), the GPT's own unit (embedding, head,
final norm; old + grown), the largest unit gathered at a time, and the sharded model and optimizer state.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import FSDPStrategy
from litgpt import GPT, Config

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lightning_sparkling import GrowthStage, WidthGrowthCallback  # noqa: E402
from lightning_sparkling.module import wrap_gpt  # noqa: E402
from lightning_sparkling.plan import grown_config  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
GROW_AT, MAX_STEPS = 6, 10
CONFIG = dict(name="bench", n_embd=512, n_head=8, n_layer=8, intermediate_size=2048, vocab_size=16384,
              padded_vocab_size=16384, block_size=128, mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm",
              bias=False, parallel_residual=False)
STAGE = dict(n_embd=1024, intermediate_size=4096)


def _full_state_dict_context_cpu(module, world_size: int, rank0_only: bool = True):
    """Lightning's full-state-dict context without ``offload_to_cpu`` (on CPU ranks FSDP1's "offload" aliases the
    gathered parameters, which are freed before the state dict clones them). Not used by this benchmark's run
    (no checkpoints), kept so the strategy below behaves like the tests' one."""
    from torch.distributed.fsdp import FullOptimStateDictConfig, FullStateDictConfig, StateDictType
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    return FSDP.state_dict_type(module, StateDictType.FULL_STATE_DICT,
                                FullStateDictConfig(offload_to_cpu=False, rank0_only=rank0_only),
                                FullOptimStateDictConfig(offload_to_cpu=False, rank0_only=rank0_only))


class CPUFSDPStrategy(FSDPStrategy):
    """``FSDPStrategy`` on CPU ranks: a subclass is not caught by Lightning's GPU-only check, FSDP1 needs
    ``device_id=cpu`` where Lightning passes the CPU device's index (``None``), and full state dicts must not be
    "offloaded" to the CPU they are already on."""

    def setup_environment(self) -> None:
        import lightning.fabric.strategies.fsdp as fabric_fsdp
        import lightning.pytorch.strategies.fsdp as pytorch_fsdp

        fabric_fsdp._get_full_state_dict_context = _full_state_dict_context_cpu
        pytorch_fsdp._get_full_state_dict_context = _full_state_dict_context_cpu
        super().setup_environment()

    @contextmanager
    def model_sharded_context(self):
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import enable_wrap

        with enable_wrap(wrapper_cls=FullyShardedDataParallel, cpu_offload=self.cpu_offload,
                         mixed_precision=self.mixed_precision_config, sharding_strategy=self.sharding_strategy,
                         device_id=torch.device("cpu"), **self.kwargs):
            yield


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

    def configure_model(self) -> None:
        self.model = wrap_gpt(self.model)  # each block, then the GPT (idempotent; growth calls it again)

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
    nbytes = lambda m: sum(p.numel() * 4 for p in m.parameters()) / 2**20  # noqa: E731
    block = lambda m: nbytes(m.transformer.h[0])  # noqa: E731
    root = lambda m: nbytes(m) - sum(nbytes(b) for b in m.transformer.h)  # noqa: E731  (the GPT's own unit)
    return {"full_grown_model_mb": nbytes(new), "full_old_model_mb": nbytes(old),
            "one_block_old_plus_grown_mb": block(old) + block(new), "embedding_grown_mb": 16384 * 1024 * 4 / 2**20,
            "root_unit_old_plus_grown_mb": root(old) + root(new),
            "sharded_grown_model_mb": nbytes(new) / world, "sharded_grown_adamw_mb": 2 * nbytes(new) / world}


def main() -> None:
    torch.set_num_threads(1)
    sampler = Sampler()
    before, after = Probe(sampler, True), Probe(sampler, False)
    growth = WidthGrowthCallback(GrowthStage(GROW_AT, **STAGE, rewarmup_steps=2), min_lr=0.0)
    trainer = L.Trainer(accelerator="cpu", devices=2, strategy=CPUFSDPStrategy(use_orig_params=True),
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
        print(f"FSDP1 growth {CONFIG['n_embd']}->{STAGE['n_embd']} hidden, {CONFIG['intermediate_size']}->"
              f"{STAGE['intermediate_size']} inner, {CONFIG['n_layer']} layers, 2 CPU ranks (RSS, MiB)")
        print(f"{'rank':>4} {'before growth':>14} {'train peak (small)':>19} {'growth peak':>12} "
              f"{'growth - before':>16} {'train peak (grown)':>19} {'seconds':>8}")
        for r in table:
            print(f"{int(r['rank']):>4} {r['before_growth_mb']:>14.0f} {r['train_peak_mb']:>19.0f} "
                  f"{r['growth_peak_mb']:>12.0f} {r['growth_peak_mb'] - r['before_growth_mb']:>16.0f} "
                  f"{r['grown_train_peak_mb']:>19.0f} {r['growth_seconds']:>8.2f}")
        print("reference sizes (MiB, fp32): " + ", ".join(f"{k}={v:.0f}" for k, v in ref.items()))
        out = Path(__file__).parent / "results" / "fsdp1_memory.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"ranks": table, "reference_mb": ref, "config": CONFIG, "stage": STAGE}, indent=2))
        print(f"wrote {out}")
    if torch.distributed.is_initialized():  # an orderly gloo shutdown (avoids an abort at interpreter exit)
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
