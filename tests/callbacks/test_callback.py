"""WidthGrowthCallback inside a real Lightning fit on CPU: symmetry, re-warmup LR, resume, refusals, atomicity."""

from __future__ import annotations

import math
from pathlib import Path

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import Callback
from litgpt import GPT

from lightning_sparkling import GrowthCallback, GrowthStage, WidthGrowthCallback, rewarmup_lr
from lightning_sparkling.callbacks.growth import GrowthFailedError
from lightning_sparkling.growth.plan import GrowthError

from _measure import RecordSteps, applied_lr
from _tiny import TinyModule, make_trainer, tiny_config


def _fit(module, stages, max_steps=40, accumulate=1, callbacks=(), min_lr=None, ckpt_path=None, **kw):
    growth = WidthGrowthCallback(stages, min_lr=min_lr)
    trainer = make_trainer([*callbacks, growth], max_steps=max_steps, accumulate=accumulate, **kw)
    trainer.fit(module, ckpt_path=ckpt_path)
    return trainer, growth


def _copy_gap(model: GPT, old_inner: int) -> float:
    """Largest relative difference between copied MLP channels and their sources (fc_1/fc_2 rows, proj columns);
    an integer-ratio growth copies channel ``j`` from ``j mod old_inner``."""
    gaps = []
    for block in model.transformer.h:
        n_new = block.mlp.fc_1.weight.shape[0] - old_inner
        src = torch.arange(n_new) % old_inner
        for w, dim in ((block.mlp.fc_1.weight, 0), (block.mlp.fc_2.weight, 0), (block.mlp.proj.weight, 1)):
            source = w.index_select(dim, src)
            gaps.append(((w.narrow(dim, old_inner, n_new) - source).abs().max() / source.abs().max()).item())
    return max(gaps)


@pytest.mark.parametrize("optimizer_state", ["copy", "drop"])
def test_symmetry_lock_persists_under_symmetric_recipe(optimizer_state):
    """copy-copy + symmetric optimizer state + no re-warmup: copied channels stay equal to their sources."""
    module = TinyModule(max_steps=60)
    stage = GrowthStage(10, intermediate_size=128, init="copy-copy", optimizer_state=optimizer_state,
                        rewarmup_ratio=None)
    _fit(module, stage, max_steps=60)
    assert module.model.config.intermediate_size == 128
    assert _copy_gap(module.model, 64) < 1e-4


def test_paper_recipe_breaks_the_symmetry_lock():
    module = TinyModule(max_steps=60)
    _fit(module, GrowthStage(10, intermediate_size=128, rewarmup_steps=10, recipe="paper"), max_steps=60)
    assert _copy_gap(module.model, 64) > 1e-2


def test_new_entries_follow_rewarmup_and_old_entries_the_user_schedule():
    max_steps, at, lr, min_ratio = 40, 12, 0.05, 0.1
    module = TinyModule(optimizer="sgd", lr=lr, schedule="cosine", max_steps=max_steps, min_lr_ratio=min_ratio)
    recorder = RecordSteps()
    stage = GrowthStage(at, n_embd=48, intermediate_size=128, rewarmup_ratio=1.5, rewarmup_steps=6)
    _fit(module, stage, max_steps=max_steps, callbacks=[recorder])

    def user_lr(s):  # CosineAnnealingLR closed form
        return lr * min_ratio + (lr - lr * min_ratio) * (1 + math.cos(math.pi * s / max_steps)) / 2

    checked_new = checked_old = 0
    for record in recorder.records:
        step, before, grads, after = record["step"], record["before"], record["grad"], record["after"]
        if step < at:
            continue
        expected_new = rewarmup_lr(step, growth_step=at, lr_at_growth=user_lr(at), ratio=1.5, warmup_steps=6,
                                   total_steps=max_steps, min_lr=lr * min_ratio)
        for name in ("transformer.h.0.mlp.proj.weight", "transformer.h.1.attn.qkv.weight", "lm_head.weight"):
            w, g, a = before[name], grads[name], after[name]
            new_mask = torch.zeros_like(w, dtype=torch.bool)
            if name.endswith("proj.weight"):
                new_mask[32:, :] = True  # new n_embd rows
                new_mask[:32, 64:] = True  # new inner columns
            else:
                new_mask[:, 32:] = True  # new n_embd columns
            got_new = applied_lr(w, g, a, new_mask)
            got_old = applied_lr(w, g, a, ~new_mask)
            assert torch.allclose(got_new, torch.full_like(got_new, expected_new), rtol=1e-3), (step, name)
            assert torch.allclose(got_old, torch.full_like(got_old, user_lr(step)), rtol=1e-3), (step, name)
            checked_new += got_new.numel()
            checked_old += got_old.numel()
    assert checked_new > 500 and checked_old > 500
    # the re-warmup differs from the baseline: new entries really got their own rate
    assert rewarmup_lr(at + 6, growth_step=at, lr_at_growth=user_lr(at), ratio=1.5, warmup_steps=6,
                       total_steps=max_steps, min_lr=lr * min_ratio) > 1.4 * user_lr(at + 6)


def test_rewarmup_off_gives_new_entries_the_baseline_schedule():
    module = TinyModule(optimizer="sgd", lr=0.05, schedule="cosine", max_steps=30)
    recorder = RecordSteps()
    trainer, _ = _fit(module, GrowthStage(10, intermediate_size=128, rewarmup_ratio=None), max_steps=30,
                      callbacks=[recorder])
    assert [c.name for c in trainer.lr_scheduler_configs] == [None]  # no new-entry scheduler registered
    last = recorder.records[-1]
    before, grads, after = last["before"], last["grad"], last["after"]
    name = "transformer.h.0.mlp.proj.weight"
    lrs = applied_lr(before[name], grads[name], after[name], torch.ones_like(before[name], dtype=torch.bool))
    assert torch.allclose(lrs, lrs[0].expand_as(lrs), rtol=1e-3)


@pytest.mark.parametrize("optimizer", ["adamw", "sgd_momentum", "adam", "muon"])
def test_optimizers_grow_and_keep_training(optimizer):
    module = TinyModule(optimizer=optimizer, lr=1e-2 if optimizer != "sgd_momentum" else 0.05, max_steps=40)
    stages = [GrowthStage(10, n_embd=64, intermediate_size=128, rewarmup_steps=5),
              GrowthStage(20, intermediate_size=160, init="random-copy", rewarmup_steps=5)]
    trainer, growth = _fit(module, stages, max_steps=40)
    assert growth.grown_stages == 2
    assert module.model.config.intermediate_size == 160
    assert all(math.isfinite(x) for x in module.losses)
    after = module.losses[len(module.losses) // 2:]
    assert min(after) < module.losses[0]
    for optimizer_ in trainer.optimizers:  # optimizer references and state shapes follow the grown model
        for group in optimizer_.param_groups:
            for p in group["params"]:
                for v in optimizer_.state.get(p, {}).values():
                    if isinstance(v, torch.Tensor) and v.ndim:
                        assert v.shape == p.shape
    params = {id(p) for p in module.model.parameters()}
    assert {id(p) for o in trainer.optimizers for g in o.param_groups for p in g["params"]} == params


def test_asymmetric_state_is_zero_for_new_entries_and_kept_for_old():
    module = TinyModule(max_steps=20)

    class Snapshot(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == 5:
                opt = trainer.optimizers[0]
                p = pl_module.model.transformer.h[0].mlp.proj.weight
                self.before = opt.state[p]["exp_avg"].clone()

    snap = Snapshot()
    grab = {}

    class After(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == 5 and not grab:
                opt = trainer.optimizers[0]
                p = pl_module.model.transformer.h[0].mlp.proj.weight
                grab["state"] = opt.state[p]["exp_avg"].clone()

    growth = WidthGrowthCallback(GrowthStage(5, intermediate_size=128, rewarmup_steps=0))
    trainer = make_trainer([snap, growth, After()], max_steps=6)
    trainer.fit(module)
    state = grab["state"]
    assert state.shape == (32, 128)
    assert torch.equal(state[:, :64], snap.before)  # old entries keep their (unscaled) state
    assert torch.count_nonzero(state[:, 64:]) == 0  # new entries start at zero


@pytest.mark.parametrize("precision", ["bf16-mixed", "bf16-true"])
def test_precision_plugins_and_clipping_keep_training(precision):
    module = TinyModule(max_steps=16)
    trainer, growth = _fit(module, GrowthStage(6, n_embd=64, intermediate_size=128, rewarmup_steps=3), max_steps=16,
                           precision=precision, gradient_clip_val=1.0, deterministic=False)
    assert growth.grown_stages == 1
    assert all(math.isfinite(x) for x in module.losses)
    expected = torch.bfloat16 if precision == "bf16-true" else torch.float32
    assert {p.dtype for p in module.model.parameters()} == {expected}


def test_throughput_and_lr_monitors_and_compiled_model(tmp_path):
    from lightning.pytorch.callbacks import LearningRateMonitor, ThroughputMonitor
    from lightning.pytorch.loggers import CSVLogger

    module = TinyModule(max_steps=12)
    module.flops_per_batch = 1000.0
    module.model = torch.compile(module.model, backend="eager")
    trainer, growth = _fit(module, GrowthStage(5, n_embd=64, intermediate_size=128, rewarmup_steps=2), max_steps=12,
                           callbacks=[LearningRateMonitor("step"), ThroughputMonitor(lambda b: 4)],
                           logger=CSVLogger(tmp_path), log_every_n_steps=1)
    summary = growth.summaries[0]
    assert module.flops_per_batch == pytest.approx(1000.0 * summary["active_params_after"]
                                                   / summary["active_params_before"])
    assert module.model._orig_mod.config.n_embd == 64
    assert all(math.isfinite(x) for x in module.losses) and len(module.losses) == 12
    metrics = (Path(trainer.logger.log_dir) / "metrics.csv").read_text()
    assert "lr-AdamW" in metrics and "growth/lr_new/stage_0" in metrics and "growth/event" in metrics


# ----------------------------------------------------------------------------------------- refusals
def _assert_refused(module, stages, match, max_steps=20, **kw):
    with pytest.raises((GrowthError, ValueError), match=match):
        _fit(module, stages, max_steps=max_steps, **kw)
    assert module.steps_run == 0  # refused before the first optimizer step


@pytest.mark.parametrize(
    "stages, match",
    [
        (GrowthStage(20, intermediate_size=128), "at_step=20.*max_steps=20"),
        (GrowthStage(25, intermediate_size=128), "at_step=25"),
        (GrowthStage(5, intermediate_size=32), "intermediate_size=32 shrinks"),
        (GrowthStage(5, n_embd=32), "n_embd=32 does not change"),
        (GrowthStage(5, moe_intermediate_size=64), "moe_intermediate_size=64: this model has no experts"),
        ([GrowthStage(5, intermediate_size=128), GrowthStage(8, intermediate_size=96)], "intermediate_size=96 shrinks"),
    ],
)
def test_refused_settings_before_first_step(stages, match):
    _assert_refused(TinyModule(max_steps=20), stages, match)


def test_unsorted_stages_refused_at_construction():
    with pytest.raises(ValueError, match="increasing at_step"):
        WidthGrowthCallback([GrowthStage(10, intermediate_size=128), GrowthStage(5, n_embd=64)])


def test_min_lr_must_be_exact_or_given():
    _assert_refused(TinyModule(schedule="step"), GrowthStage(5, intermediate_size=128, rewarmup_steps=2), "min_lr")
    _assert_refused(TinyModule(schedule="none"), GrowthStage(5, intermediate_size=128, rewarmup_steps=2), "min_lr")
    module = TinyModule(schedule="step", max_steps=12)  # given explicitly: fine
    _, growth = _fit(module, GrowthStage(5, intermediate_size=128, rewarmup_steps=2), max_steps=12, min_lr=1e-4)
    assert growth.grown_stages == 1


def test_unknown_optimizer_refused():
    _assert_refused(TinyModule(optimizer="adagrad"), GrowthStage(5, intermediate_size=128, rewarmup_steps=2), "Adagrad")


def test_unbounded_run_refused_with_rewarmup():
    _assert_refused(TinyModule(), GrowthStage(5, intermediate_size=128), "max_steps", max_steps=-1, max_epochs=1)


class _TwoGPTs(TinyModule):
    def __init__(self):
        super().__init__()
        self.teacher = GPT(tiny_config())


class _NoGPT(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(2, 2)
        self.steps_run = 0

    def training_step(self, batch, batch_idx):
        self.steps_run += 1
        return self.layer(batch).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.zeros(8, 2), batch_size=1)


@pytest.mark.parametrize("module_cls, match", [(_TwoGPTs, "found 2 litgpt GPTs.*'model', 'teacher'.*and 2 whose "
                                                           "parameters the optimizers train.*model_attr="),
                                                (_NoGPT, "needs a litgpt GPT inside the LightningModule, found none")])
def test_gpt_must_be_unique(module_cls, match):
    _assert_refused(module_cls(), GrowthStage(5, intermediate_size=128, rewarmup_steps=2), match)


# ----------------------------------------------------------------------------------------- atomicity
@pytest.mark.parametrize("failure", ["optimizer_patch", "non_finite_loss"])
def test_failed_growth_keeps_pre_growth_model_and_optimizer(monkeypatch, failure):
    import lightning_sparkling.callbacks.growth as growth_mod

    module = TinyModule(max_steps=20)
    snapshot = {}

    class Snapshot(Callback):  # before the growth callback: the model/optimizer right before growing
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == 6:
                snapshot["params"] = dict(pl_module.model.named_parameters())
                snapshot["values"] = {n: p.detach().clone() for n, p in pl_module.model.named_parameters()}
                snapshot["config"] = pl_module.model.config
                opt = trainer.optimizers[0]
                snapshot["opt_params"] = [p for g in opt.param_groups for p in g["params"]]
                snapshot["opt_state"] = {id(p): {k: v.clone() for k, v in s.items()} for p, s in opt.state.items()}

    if failure == "optimizer_patch":
        def boom(*args, **kwargs):
            raise RuntimeError("injected failure")
        from lightning_sparkling.parallel.single import SingleBackend

        monkeypatch.setattr(SingleBackend, "plan_optimizer_patch", boom)  # the backend's optimizer patch fails
    else:
        original = growth_mod.WidthGrowthCallback._check_loss

        def nan_batch(self, pl_module, gpt, batch):
            with torch.no_grad():
                gpt.transformer.h[0].mlp.proj.weight[0, -1] = float("nan")  # the grown model only
            return original(self, pl_module, gpt, batch)
        monkeypatch.setattr(growth_mod.WidthGrowthCallback, "_check_loss", nan_batch)

    growth = WidthGrowthCallback(GrowthStage(6, n_embd=64, intermediate_size=128, rewarmup_steps=2))
    trainer = make_trainer([Snapshot(), growth], max_steps=20)
    with pytest.raises(GrowthFailedError, match="pre-growth"):
        trainer.fit(module)
    model = module.model
    assert model.config is snapshot["config"] and model.config.n_embd == 32
    for name, p in model.named_parameters():
        assert p is snapshot["params"][name]
        assert torch.equal(p, snapshot["values"][name])
    assert model.transformer.h[0].mlp.proj.in_features == 64
    opt = trainer.optimizers[0]
    assert [p for g in opt.param_groups for p in g["params"]] == snapshot["opt_params"]
    for p, s in opt.state.items():
        for k, v in s.items():
            assert torch.equal(v, snapshot["opt_state"][id(p)][k])
    assert growth.grown_stages == 0


def test_fsdp1_without_orig_params_refused_clearly():
    from types import SimpleNamespace

    from lightning.pytorch.strategies import FSDPStrategy

    from lightning_sparkling.parallel import check_strategy_supported

    check_strategy_supported(SimpleNamespace(strategy=FSDPStrategy()))  # Lightning defaults to use_orig_params=True
    with pytest.raises(GrowthError, match=r"use_orig_params=False.*FSDPStrategy\(use_orig_params=True"):
        check_strategy_supported(SimpleNamespace(strategy=FSDPStrategy(use_orig_params=False)))


@pytest.mark.parametrize("strategy_name", ["DeepSpeedStrategy"])
def test_unsupported_strategies_refused_clearly(strategy_name):
    from types import SimpleNamespace

    import lightning.pytorch.strategies as strategies

    from lightning_sparkling.parallel import check_strategy_supported

    strategy = getattr(strategies, strategy_name).__new__(getattr(strategies, strategy_name))
    with pytest.raises(GrowthError, match=f"{strategy_name} is not supported.*strategy='ddp'.*ModelParallelStrategy"):
        check_strategy_supported(SimpleNamespace(strategy=strategy))


def test_tensor_parallel_refused_clearly():
    from types import SimpleNamespace

    from lightning.pytorch.strategies import ModelParallelStrategy

    from lightning_sparkling.parallel import check_strategy_supported

    strategy = ModelParallelStrategy(data_parallel_size=1, tensor_parallel_size=2)
    with pytest.raises(GrowthError, match="tensor_parallel_size=2.*tensor_parallel_size=1"):
        check_strategy_supported(SimpleNamespace(strategy=strategy))


def test_grow_at_step_zero_before_the_first_step():
    module = TinyModule(max_steps=6)
    _, growth = _fit(module, GrowthStage(0, intermediate_size=128, rewarmup_steps=2), max_steps=6)
    assert growth.summaries[0]["global_step"] == 0
    assert module.model.config.intermediate_size == 128 and all(math.isfinite(x) for x in module.losses)


def test_rewarmup_that_cannot_finish_by_max_steps_is_refused_before_the_first_step():
    """As the CLI refuses it: the new entries' LR would still be rising at max_steps."""
    _assert_refused(TinyModule(max_steps=12), GrowthStage(5, intermediate_size=128),
                    r"GrowthStage\(at_step=5\): rewarmup_steps=250 does not fit in the 7 steps left.*"
                    r"Set rewarmup_steps to at most 6", max_steps=12)


def test_growth_summaries_survive_a_resume_past_the_growth(tmp_path):
    """``summary.json``'s ``growth_events`` is ``GrowthCallback.summaries``: a resume from a checkpoint taken after
    the growth used to report ``[]`` while the model had grown (issue 40)."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    stage = GrowthStage(4, intermediate_size=128, rewarmup_steps=1)
    first = GrowthCallback(stage, min_lr=1e-4)
    saver = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=6, save_top_k=-1)
    make_trainer([first, saver], max_steps=6, enable_checkpointing=True).fit(TinyModule(max_steps=10))
    (event,) = first.summaries
    assert event["stage"] == 0 and event["recipe"] == "random-zero-3x"
    resumed = GrowthCallback(stage, min_lr=1e-4)
    module = TinyModule(max_steps=10)
    make_trainer([resumed], max_steps=10).fit(module, ckpt_path=str(next(tmp_path.glob("*.ckpt"))))
    assert module.model.config.intermediate_size == 128
    assert resumed.summaries == [event]
