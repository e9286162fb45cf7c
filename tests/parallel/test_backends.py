"""Backend selection (one GrowthBackend per strategy) and the single-device backend piece by piece.

The DDP, FSDP2 and FSDP1 backends are exercised end to end, through the callback, by ``test_ddp.py`` and
``test_fsdp1.py`` (their scripts assert which backend grew the model)."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import yaml
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


_TOY_MODULE = '''
"""A toy growth backend: its own module, every growth step the shared base's; its CLI pieces its own."""
from lightning_sparkling.parallel import BaseBackend


class ToyStrategy:
    """Stands for a strategy of a third-party package."""

    def __init__(self, world_size=1):
        self.world_size = world_size


class ToyBackend(BaseBackend):
    name = "toy"
    compile_per_block = True

    @classmethod
    def accepts(cls, strategy):
        return isinstance(strategy, ToyStrategy)

    @classmethod
    def make_strategy(cls, world_size):
        return ToyStrategy(world_size)

    @classmethod
    def prepare_model(cls, pl_module, gpt):
        gpt.prepared_by = (cls.name, pl_module)  # what a sharding backend's wrap or shard stands for
        return gpt
'''


def _toy_run_config(tmp_path, strategy: str) -> list[str]:
    """``sparkling plan`` arguments of a tiny run under ``strategy`` (nothing is trained or tokenized)."""
    import yaml

    config = {"model_config": dict(n_layer=2, n_embd=32, n_head=4, intermediate_size=64, mlp_class_name="LLaMAMLP",
                                   norm_class_name="RMSNorm", bias=False),
              "precision": "32-true", "accelerator": "cpu", "devices": 1, "strategy": strategy,
              "data": {"vocab_size": 512, "seq_len": 32, "cache_dir": str(tmp_path / "cache")},
              "train": {"global_batch_size": 8, "micro_batch_size": 4, "max_steps": 12, "lr_warmup_steps": 2}}
    path = tmp_path / "toy.yaml"
    path.write_text(yaml.safe_dump(config))
    return ["--config", str(path), "--out_dir", str(tmp_path / "out")]


def test_a_backend_is_its_module_and_one_registration(tmp_path, monkeypatch):
    """A new backend: a module with a ``BaseBackend`` subclass, and one ``register_backend`` line; select_backend,
    its message, the CLI's strategy choices, its checks, its Trainer strategy and its module's ``configure_model``
    follow the registry; no select_backend branch, no list to edit, no CLI branch."""
    from lightning.pytorch.strategies import Strategy

    from lightning_sparkling.parallel import cli_strategies, register_backend, registered_backends, unregister_backend
    from lightning_sparkling.pretrain.cli import parse
    from lightning_sparkling.pretrain.training.module import LitGPTPretrainModule
    from lightning_sparkling.pretrain.training.trainer import _strategy

    (tmp_path / "toy_backend.py").write_text(_TOY_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import toy_backend

    class ToyStrategy(toy_backend.ToyStrategy, _OtherStrategy):  # a Lightning Strategy of the toy's kind
        pass

    strategy = ToyStrategy.__new__(ToyStrategy)
    with pytest.raises(GrowthError, match="ToyStrategy is not supported") as refused:
        select_backend(strategy)
    assert "toy_strategy()" not in str(refused.value)
    with pytest.raises(SystemExit):  # not a CLI strategy yet
        parse(_toy_run_config(tmp_path, "toy"), "plan")
    entry = register_backend("toy", "toy_backend:ToyBackend", usage="toy_strategy()", cli_strategy="toy",
                             cli_aliases=("toy-old",), alias_until="9.9", cli_help="a toy", supports_compile=False)
    try:
        backend = select_backend(strategy)
        assert type(backend) is toy_backend.ToyBackend and isinstance(backend, GrowthBackend)
        assert cli_strategies()[-1] == "toy" and registered_backends()[-1] is entry
        from lightning_sparkling.pretrain.config import schema

        assert schema.STRATEGIES[-1] == "toy"  # read now, not at import
        with pytest.raises(GrowthError, match=r"_OtherStrategy is not supported.*toy_strategy\(\)"):
            select_backend(_OtherStrategy.__new__(_OtherStrategy))
        with pytest.raises(ValueError, match="clashes with the registered backend 'toy'"):
            register_backend("toy", "toy_backend:ToyBackend", usage="again")
        with pytest.raises(ValueError, match="clashes with the registered backend 'toy'"):
            register_backend("toy2", "toy_backend:ToyBackend", usage="again", cli_strategy="toy-old")
        torch.manual_seed(0)
        gpt = GPT(tiny_config())  # the shared steps grow it as on one device
        result = backend.grow(SimpleNamespace(), None, gpt, GrowthStage(1, n_embd=2 * gpt.config.n_embd), seed=0,
                              stage_index=0)
        assert gpt.config.n_embd == 2 * result.old_config.n_embd and backend.forward_module(None, gpt) is gpt

        # the CLI: `sparkling plan` resolves `strategy: toy` (its alias with a note), the Trainer trains under the
        # toy's strategy, the module's configure_model prepares the GPT the toy's way and reads the toy's facts
        _, run, _ = parse(_toy_run_config(tmp_path, "toy"), "plan")
        assert run.strategy == "toy" and not run.compile and not any("deprecated" in n for n in run.notes)
        _, old, dumped = parse(_toy_run_config(tmp_path, "toy-old"), "plan")
        assert old.strategy == "toy"
        # the saved config (hparams.yaml, a resume's command) names the value, not the alias
        assert yaml.safe_load(dumped)["strategy"] == "toy"
        assert [n for n in old.notes if "deprecated" in n] == [
            "strategy: toy-old is a deprecated alias of strategy: toy (it goes in 9.9); write toy"]
        made = _strategy(run)
        assert type(made) is toy_backend.ToyStrategy and made.world_size == run.world_size == 1
        module = LitGPTPretrainModule(run.model_config, max_steps=2)
        module._trainer = SimpleNamespace(strategy=strategy)  # what configure_model reads of the Trainer
        module.configure_model()
        assert module.model.prepared_by == ("toy", module)
        module = LitGPTPretrainModule(run.model_config, max_steps=2, compile=True)
        module._trainer = SimpleNamespace(strategy=strategy)
        with pytest.raises(ValueError, match=r"compile is not supported under ToyStrategy \(backend toy\)"):
            module.configure_model()
    finally:
        unregister_backend(entry)
        sys.modules.pop("toy_backend", None)  # this test's module: gone with it
    assert "toy" not in cli_strategies() and isinstance(strategy, Strategy)
    with pytest.raises(GrowthError, match="ToyStrategy is not supported"):
        select_backend(strategy)


def test_the_cli_strategies_are_the_registry_s():
    from lightning_sparkling.parallel import cli_backend
    from lightning_sparkling.pretrain.config.schema import STRATEGIES

    assert STRATEGIES == ("auto", "ddp", "fsdp2", "fsdp1")
    assert cli_backend("fsdp1").name == "fsdp1" and cli_backend("fsdp") is None  # no alias: never released
    assert cli_backend("auto") is None and cli_backend("deepspeed") is None


def test_configure_model_prepares_the_gpt_per_backend_without_checking_the_strategy(monkeypatch):
    """The module's configure_model calls the strategy's backend's prepare_model (FSDP1: wrap_gpt, even for a
    user's FSDPStrategy that growth would refuse; FSDP2: shard_gpt over the device mesh; one device: nothing), and
    leaves the GPT as it is under a strategy no backend accepts."""
    from lightning_sparkling.parallel import sharding
    from lightning_sparkling.pretrain.training.module import LitGPTPretrainModule

    calls = []
    monkeypatch.setattr(sharding, "wrap_gpt", lambda gpt: calls.append(("wrap", gpt)) or gpt)
    monkeypatch.setattr(sharding, "shard_gpt", lambda gpt, mesh: calls.append(("shard", mesh)) or gpt)
    import lightning_sparkling.parallel.fsdp1 as fsdp1

    monkeypatch.setattr(fsdp1, "wrap_gpt", sharding.wrap_gpt)
    cfg = dict(n_layer=1, n_embd=16, n_head=2, vocab_size=32, block_size=8)
    for strategy, expected in ((FSDPStrategy(use_orig_params=False), "wrap"), (SingleDeviceStrategy("cpu"), None),
                               (_OtherStrategy.__new__(_OtherStrategy), None), (DDPStrategy(), None)):
        calls.clear()
        module = LitGPTPretrainModule(cfg)
        module._trainer = SimpleNamespace(strategy=strategy)
        module.configure_model()
        assert [c[0] for c in calls] == ([expected] if expected else []), strategy
        assert isinstance(module.model, GPT)
    module = LitGPTPretrainModule(cfg)
    module._trainer = SimpleNamespace(strategy=ModelParallelStrategy(data_parallel_size=1, tensor_parallel_size=1))
    mesh = object()
    monkeypatch.setattr(type(module), "device_mesh", property(lambda self: mesh))
    calls.clear()
    module.configure_model()
    assert calls == [("shard", mesh)]


def test_backends_import_no_private_name_of_another_module():
    """``parallel/`` imports no ``_private`` name from another module (issue 41: fsdp1 took three)."""
    import ast
    from pathlib import Path

    import lightning_sparkling

    bad = []
    for path in sorted((Path(lightning_sparkling.__file__).parent / "parallel").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lightning_sparkling"):
                bad += [f"{path.name}: {node.module}.{a.name}" for a in node.names
                        if a.name.startswith("_") and not a.name.startswith("__")]
    assert not bad, bad


def test_no_backend_module_imports_another_backend_module():
    """What the backends share lives in ``parallel/base.py`` (and ``sharding.py``), not in one of them: a backend's
    module imports no other backend's module (fsdp1 took ``place_meta_gpt`` / ``grown_values`` from fsdp2)."""
    import ast
    from pathlib import Path

    from lightning_sparkling.parallel.registry import backend_class, registered_backends

    modules = {backend_class(e).__module__ for e in registered_backends()}
    assert modules >= {"lightning_sparkling.parallel.fsdp1", "lightning_sparkling.parallel.fsdp2"}
    bad = []
    for module in sorted(modules):
        path = Path(sys.modules[module].__file__)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in modules - {module}:
                bad.append(f"{path.name}: from {node.module} import ...")
    assert not bad, bad
