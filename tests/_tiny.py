"""Tiny litgpt models and LightningModules shared by the callback tests (CPU, deterministic)."""

from __future__ import annotations

import lightning as L
import torch
import torch.nn.functional as F
from litgpt import GPT, Config

from lightning_sparkling.growth.schedules import WarmupCosineLambda, WSDLambda
from lightning_sparkling.growth.stage import GrowthStage

VOCAB = 64
SEQ = 16


def paper_stage(*args, **keys) -> GrowthStage:
    """A ``GrowthStage`` of the paper's recipe (copy-copy, re-warmup 1.3x): what the tests of its mechanics (copies,
    the symmetry lock and its loop) grow by; ``GrowthStage``'s own default is ``recipe='auto'``."""
    return GrowthStage(*args, recipe="paper", **keys)


def tiny_config(**overrides) -> Config:
    kw = dict(n_embd=32, n_head=4, n_query_groups=2, n_layer=2, intermediate_size=64, vocab_size=VOCAB,
              padded_vocab_size=VOCAB, block_size=SEQ, mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm",
              bias=False, parallel_residual=False)
    kw.update(overrides)
    return Config(**kw)


def token_batch(step: int, micro: int, batch_size: int = 4, rank: int = 0) -> torch.Tensor:
    """Batch of the optimizer step `step`, micro-batch `micro`, rank `rank`: depends on nothing else, so resume
    is exact and a single process can reproduce the global batch of several ranks."""
    g = torch.Generator().manual_seed(1000 * step + micro + 100_000 * rank)
    start = torch.randint(0, VOCAB, (batch_size, 1), generator=g)
    stride = torch.randint(1, 4, (batch_size, 1), generator=g)
    # float32 draws whatever the default dtype (Lightning's "true" precisions set it during training_step)
    mask = torch.rand(batch_size, SEQ + 1, generator=g, dtype=torch.float32) < 0.1
    noise = mask * torch.randint(0, VOCAB, (batch_size, SEQ + 1), generator=g)
    return (start + stride * torch.arange(SEQ + 1) + noise) % VOCAB  # learnable: arithmetic runs, 10% noise


class TinyModule(L.LightningModule):
    """Holds one litgpt GPT at `self.model`; data comes from `token_batch(global_step, micro)`."""

    def __init__(self, config: Config | None = None, optimizer: str = "adamw", lr: float = 1e-2,
                 schedule: str = "warmup_cosine", max_steps: int = 40, min_lr_ratio: float = 0.1,
                 accumulate: int = 1, seed: int = 0, emulate_ranks: int = 0,
                 dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.model = GPT(config or tiny_config())
        self.model.apply(self.model._init_weights)
        self.model.to(dtype)  # float64: strategies compared with far less rounding noise
        self.optimizer_name, self.lr, self.schedule = optimizer, lr, schedule
        self.max_steps, self.min_lr_ratio, self.accumulate = max_steps, min_lr_ratio, accumulate
        self.emulate_ranks = emulate_ranks  # >0: one process computes the global batch of that many ranks
        self.steps_run = 0
        self.losses: list[float] = []
        if optimizer == "muon":
            self.automatic_optimization = False

    def configure_model(self) -> None:
        """FSDP2 under ModelParallelStrategy: shard the blocks, then the GPT; FSDP1 under FSDPStrategy: wrap the
        blocks, then the GPT (both idempotent)."""
        from lightning.pytorch.strategies import FSDPStrategy

        from lightning_sparkling.parallel import shard_gpt, wrap_gpt

        if self.device_mesh is not None:
            shard_gpt(self.model, self.device_mesh)
        elif isinstance(self.trainer.strategy, FSDPStrategy):
            self.model = wrap_gpt(self.model)

    def loss_on(self, ids: torch.Tensor) -> torch.Tensor:
        ids = ids.to(self.device)
        logits = self.model(ids[:, :-1])
        logits = logits if logits.dtype == torch.float64 else logits.float()
        return F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())

    def training_step(self, batch, batch_idx):
        self.steps_run += 1
        micro = batch_idx % self.accumulate
        if self.emulate_ranks:
            ids = torch.cat([token_batch(self.global_step, micro, rank=r) for r in range(self.emulate_ranks)])
        else:
            ids = token_batch(self.global_step, micro, rank=self.global_rank)
        loss = self.loss_on(ids)
        self.losses.append(loss.item())
        self.log("train_loss", loss)
        if self.automatic_optimization:
            return loss
        optimizers = self.optimizers()
        self.manual_backward(loss)
        for opt in optimizers:
            opt.step()
            opt.zero_grad()
        for sched in self.lr_schedulers() or []:
            sched.step()
        return loss

    def _schedule(self, opt):
        if self.schedule == "warmup_cosine":
            return torch.optim.lr_scheduler.LambdaLR(opt, WarmupCosineLambda(5, self.max_steps, self.min_lr_ratio))
        if self.schedule == "cosine":
            return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=self.max_steps,
                                                              eta_min=self.lr * self.min_lr_ratio)
        if self.schedule == "wsd":
            return torch.optim.lr_scheduler.LambdaLR(opt, WSDLambda(5, self.max_steps, self.min_lr_ratio))
        if self.schedule == "lambda":  # a user's own multiplier: warmup, then linear decay
            return torch.optim.lr_scheduler.LambdaLR(
                opt, lambda s: min(1.0, (s + 1) / 5) * (1 - 0.9 * s / self.max_steps))
        if self.schedule == "step":
            return torch.optim.lr_scheduler.StepLR(opt, step_size=10)
        return None

    def configure_optimizers(self):
        if self.optimizer_name == "muon":
            matrices = [p for n, p in self.model.named_parameters() if p.ndim == 2 and ".h." in n]
            rest = [p for n, p in self.model.named_parameters() if not (p.ndim == 2 and ".h." in n)]
            muon = torch.optim.Muon(matrices, lr=self.lr, weight_decay=0.1)
            adamw = torch.optim.AdamW(rest, lr=self.lr, weight_decay=0.1)
            return [muon, adamw], [self._schedule(muon), self._schedule(adamw)]
        if self.optimizer_name == "adamw":
            opt = torch.optim.AdamW(self.parameters(), lr=self.lr, weight_decay=0.1)
        elif self.optimizer_name == "adam":
            opt = torch.optim.Adam(self.parameters(), lr=self.lr)
        elif self.optimizer_name == "sgd":
            opt = torch.optim.SGD(self.parameters(), lr=self.lr)
        elif self.optimizer_name == "sgd_momentum":
            opt = torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9, weight_decay=0.01)
        elif self.optimizer_name == "adagrad":
            opt = torch.optim.Adagrad(self.parameters(), lr=self.lr)
        else:
            raise ValueError(self.optimizer_name)
        sched = self._schedule(opt)
        if sched is None:
            return opt
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.zeros(100_000, 1), batch_size=1)


def assert_states_equal(got: dict, expected: dict, where: str) -> None:
    """Two state dicts bit for bit: the same keys, every tensor equal (``where`` names the run in the message)."""
    assert got.keys() == expected.keys(), f"{where}: keys differ"
    for name, value in expected.items():
        assert torch.equal(got[name], value), f"{where}: {name} differs"


def make_trainer(callbacks, max_steps: int = 40, accumulate: int = 1, **kwargs) -> L.Trainer:
    defaults = dict(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                    enable_progress_bar=False, enable_model_summary=False, deterministic=True)
    defaults.update(kwargs)
    return L.Trainer(max_steps=max_steps, callbacks=callbacks, accumulate_grad_batches=accumulate, **defaults)


def exit_now() -> None:
    """End a multi-process test script once its results are written, skipping interpreter finalization: gloo's
    worker threads can still hold tensors then, and freeing them while the interpreter is torn down aborts the
    process now and then ("terminate called without an active exception", exit code -6; see pytorch/pytorch#179291),
    which would fail a run whose results are complete."""
    import os
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
