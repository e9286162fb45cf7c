"""Activation checkpointing (``activation_checkpointing: true``, :func:`checkpoint_blocks`) on one process: the same
losses and weights as without it, bit for bit, under gradient accumulation 1 and 2; every block's forward really
runs twice per micro-batch (forward, then recomputed in the backward); a depth growth's new blocks are checkpointed
too. The 2-rank DDP and FSDP2 cases are in tests/distributed/test_runtime_distributed.py."""

from __future__ import annotations

import functools

import lightning as L
import pytest
import torch
from litgpt import GPT
from lightning.pytorch.callbacks import Callback

from _tiny import assert_states_equal, tiny_config
from lightning_sparkling import GrowthCallback, GrowthStage
from lightning_sparkling.parallel import checkpoint_blocks
from lightning_sparkling.parallel.activation_checkpointing import checkpoint_new_blocks, is_checkpointed
from lightning_sparkling.pretrain.training.module import LitGPTPretrainModule

ADAMW = {"class_path": "torch.optim.AdamW", "init_args": {"lr": 3e-3, "weight_decay": 0.1, "betas": [0.9, 0.95]}}


class Record(Callback):
    """Losses of every micro-batch, and how often each block's MLP ran during the last optimizer step."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self.calls: dict[int, int] = {}
        self._handles: list = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        for h in self._handles:
            h.remove()
        self.calls = {}
        self._handles = [block.mlp.register_forward_pre_hook(functools.partial(self._count, i))
                         for i, block in enumerate(pl_module.model.transformer.h)]

    def _count(self, i, module, args) -> None:  # a pre-hook: the recomputation stops early, inside the MLP
        self.calls[i] = self.calls.get(i, 0) + 1

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.losses.append(float(outputs["loss"]))

    def on_train_end(self, trainer, pl_module) -> None:
        for h in self._handles:
            h.remove()


def fit(checkpointing: bool, accumulate: int = 1, stages=(), max_steps: int = 6):
    torch.manual_seed(0)
    data = torch.utils.data.DataLoader(torch.randint(0, 64, (8 * max_steps * accumulate, 17)), batch_size=4)
    module = LitGPTPretrainModule(tiny_config(), ADAMW, max_steps=max_steps, lr_warmup_steps=1,
                                  activation_checkpointing=checkpointing)
    record = Record()
    callbacks = [record] + ([GrowthCallback(list(stages))] if stages else [])
    trainer = L.Trainer(max_steps=max_steps, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, deterministic=True,
                        accumulate_grad_batches=accumulate, callbacks=callbacks)
    trainer.fit(module, data)
    return module, record


@pytest.mark.parametrize("accumulate", [1, 2])
def test_same_losses_and_weights_and_blocks_recomputed(accumulate):
    plain, plain_record = fit(False, accumulate)
    ckpt, ckpt_record = fit(True, accumulate)
    assert len(ckpt_record.losses) == 6 * accumulate
    assert ckpt_record.losses == plain_record.losses  # bit for bit
    assert_states_equal(ckpt.model.state_dict(), plain.model.state_dict(), "activation checkpointing")
    assert all(is_checkpointed(b) for b in ckpt.model.transformer.h)
    assert not any(is_checkpointed(b) for b in plain.model.transformer.h)
    # the last micro-batch: once in the forward without checkpointing, once more in the backward with it
    assert plain_record.calls == {0: 1, 1: 1} and ckpt_record.calls == {0: 2, 1: 2}


def test_depth_growth_checkpoints_the_new_blocks():
    stages = [GrowthStage(3, n_layer=4, depth_order="stack", rewarmup_ratio=None)]
    plain, plain_record = fit(False, stages=stages)
    ckpt, ckpt_record = fit(True, stages=stages)
    assert ckpt.model.config.n_layer == 4
    assert [is_checkpointed(b) for b in ckpt.model.transformer.h] == [True] * 4
    assert ckpt_record.calls == {0: 2, 1: 2, 2: 2, 3: 2}  # new blocks 2 and 3 recomputed too
    assert plain_record.calls == {0: 1, 1: 1, 2: 1, 3: 1}
    assert ckpt_record.losses == plain_record.losses
    assert_states_equal(ckpt.model.state_dict(), plain.model.state_dict(), "depth growth with checkpointing")


def test_checkpoint_blocks_is_idempotent_plain_named_and_refuses_a_replaced_forward():
    model = GPT(tiny_config())
    names, params = list(model.state_dict()), [n for n, _ in model.named_parameters()]
    checkpoint_blocks(model)
    forwards = [b.forward for b in model.transformer.h]
    checkpoint_blocks(model)  # again: nothing changes
    assert [b.forward for b in model.transformer.h] == forwards
    assert list(model.state_dict()) == names and [n for n, _ in model.named_parameters()] == params  # plain names
    assert checkpoint_new_blocks(model) == []
    plain = GPT(tiny_config())
    assert checkpoint_new_blocks(plain) == []  # nothing checkpointed: new blocks are left alone
    plain.transformer.h[0].forward = torch.compile(plain.transformer.h[0].forward, backend="eager")
    with pytest.raises(ValueError, match="block 0's forward is already replaced.*before compiling"):
        checkpoint_blocks(plain)
