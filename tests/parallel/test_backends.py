"""Backend selection (one GrowthBackend per strategy) and the single-device backend piece by piece.

The DDP, FSDP2 and FSDP1 backends are exercised end to end, through the callback, by ``test_ddp.py`` and
``test_fsdp1.py`` (their scripts assert which backend grew the model)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from _tiny import TinyModule, paper_stage, tiny_config
from lightning.pytorch.strategies import (
    DDPStrategy,
    DeepSpeedStrategy,
    FSDPStrategy,
    ModelParallelStrategy,
    SingleDeviceStrategy,
    Strategy,
)
from litgpt import GPT

from lightning_sparkling import GrowthError, GrowthStage, WidthGrowthCallback
from lightning_sparkling.growth.optim_state import plan_optimizer_patch
from lightning_sparkling.parallel import GrowthBackend, select_backend
from lightning_sparkling.parallel.fsdp1 import FSDP1Backend
from lightning_sparkling.parallel.fsdp2 import FSDP2Backend
from lightning_sparkling.parallel.single import DDPBackend, SingleBackend


@pytest.mark.parametrize(("strategy", "backend"), [
    (lambda: SingleDeviceStrategy(device="cpu"), SingleBackend),
    (lambda: DDPStrategy(), DDPBackend),
    (lambda: DDPStrategy(start_method="spawn"), DDPBackend),
    (lambda: ModelParallelStrategy(data_parallel_size=1, tensor_parallel_size=1), FSDP2Backend),
    (lambda: FSDPStrategy(use_orig_params=True), FSDP1Backend),
])
def test_select_backend_by_strategy(strategy, backend):
    strategy = strategy()
    chosen = select_backend(strategy)
    assert type(chosen) is backend
    assert isinstance(chosen, GrowthBackend)  # implements the whole protocol
    assert type(select_backend(SimpleNamespace(strategy=strategy))) is backend  # a trainer works too


def test_every_backend_implements_the_protocol():
    methods = [n for n in vars(GrowthBackend) if not n.startswith("_") and callable(getattr(GrowthBackend, n))]
    assert {"grow", "plan_optimizer_patch", "rewrap", "new_entry_pieces", "full_tensors", "regrow",
            "hook_resume"} <= set(methods)
    for backend in (SingleBackend, DDPBackend, FSDP2Backend, FSDP1Backend):
        for name in methods:
            assert callable(getattr(backend, name)), (backend, name)
        assert isinstance(backend.name, str) and isinstance(backend.restores_after_fit_start, bool)


class _OtherStrategy(Strategy):
    """A strategy no backend knows (its abstract methods are never called)."""


_OtherStrategy.__abstractmethods__ = frozenset()


@pytest.mark.parametrize(("make", "match"), [
    (lambda: DeepSpeedStrategy.__new__(DeepSpeedStrategy), r"DeepSpeedStrategy is not supported.*strategy='ddp'"),
    (lambda: _OtherStrategy.__new__(_OtherStrategy), r"_OtherStrategy is not supported.*strategy='ddp'.*FSDP2"),
    (lambda: ModelParallelStrategy(data_parallel_size=1, tensor_parallel_size=2), "tensor_parallel_size=2"),
    (lambda: FSDPStrategy(use_orig_params=False), r"use_orig_params=False.*use_orig_params=True"),
])
def test_unsupported_strategy_refused_in_setup(make, match):
    callback = WidthGrowthCallback(paper_stage(2, n_embd=64, rewarmup_steps=1), min_lr=0.0)
    trainer = SimpleNamespace(strategy=make(), max_steps=10)
    with pytest.raises(GrowthError, match=match):
        callback.setup(trainer, TinyModule(max_steps=10), "fit")
    with pytest.raises(GrowthError, match=match):
        select_backend(trainer.strategy)


def test_backend_is_chosen_in_setup():
    callback = WidthGrowthCallback(paper_stage(2, n_embd=64, rewarmup_steps=1), min_lr=0.0)
    with pytest.raises(RuntimeError, match="chosen in setup"):
        _ = callback.backend
    module = TinyModule(max_steps=10)
    callback.setup(SimpleNamespace(strategy=SingleDeviceStrategy(device="cpu"), max_steps=10), module, "fit")
    assert type(callback.backend) is SingleBackend
    callback._remove_resume_hook()
    assert "on_load_checkpoint" not in module.__dict__  # the resume hook is gone with it


def test_single_backend_pieces():
    torch.manual_seed(0)
    gpt = GPT(tiny_config())
    backend = SingleBackend()
    optimizer = torch.optim.AdamW(gpt.parameters(), lr=1e-3)
    gpt(torch.randint(0, gpt.config.vocab_size, (2, 8))).sum().backward()
    optimizer.step()
    stage = paper_stage(1, n_embd=2 * gpt.config.n_embd)
    result = backend.grow(SimpleNamespace(), None, gpt, stage, seed=0, stage_index=0)
    assert gpt.config.n_embd == stage.n_embd
    patch = backend.plan_optimizer_patch(optimizer, result, stage.optimizer_state)
    reference = plan_optimizer_patch(optimizer, result, stage.optimizer_state)
    assert [r[:2] for r in patch.replacements] == [r[:2] for r in reference.replacements]
    assert backend.forward_module(None, gpt) is gpt
    name, piece = "transformer.wte.weight", result.new_entries["transformer.wte.weight"]
    param = dict(gpt.named_parameters())[name]
    assert [p[1] for p in backend.new_entry_pieces(None, gpt)(param, piece)] == list(piece)
    full = dict(backend.full_tensors(None, gpt, [name, "lm_head.weight"]))
    assert full[name] is not None and full["lm_head.weight"].shape[1] == stage.n_embd
    backend.rewrap(SimpleNamespace(strategy=SingleDeviceStrategy(device="cpu")), None)  # nothing to do
    fresh = GPT(tiny_config())
    backend.regrow(SimpleNamespace(), None, fresh, [result.plan])
    assert fresh.config.n_embd == stage.n_embd
    assert {n: p.shape for n, p in fresh.named_parameters()} == {n: p.shape for n, p in gpt.named_parameters()}
