"""The LR side of the paper's comparison baselines: ``rewarmup_scope='all'`` ("Re-warmup All") and
``decay_speedup`` ("same peak LR, faster decay") give every entry the LR they claim at every step (read from SGD
updates, ``update = -lr * grad``), with gradient accumulation 1 and 2, on top of the module's own LambdaLR or
CosineAnnealingLR (which keeps owning the param groups' LR between steps), and resume bit for bit."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from lightning_sparkling import WidthGrowthCallback, rewarmup_lr, warmup_cosine_lr
from lightning_sparkling.growth.baselines import fast_decay_position
from lightning_sparkling.growth.plan import GrowthError
from lightning_sparkling.growth.stage import check_rewarmup_fits, decay_end

from _tiny import TinyModule, assert_states_equal, make_trainer, paper_stage

MAX_STEPS, AT, LR, MIN_RATIO = 30, 10, 0.05, 0.1


def user_lr(schedule: str, t: float) -> float:
    """The module's own schedule (TinyModule): WarmupCosineLambda(5, MAX_STEPS) or CosineAnnealingLR."""
    if schedule == "warmup_cosine":
        return LR * warmup_cosine_lr(t, warmup_steps=5, total_steps=MAX_STEPS, lr_init=0.0, lr_max=1.0,
                                     lr_min=MIN_RATIO)
    return LR * MIN_RATIO + (LR - LR * MIN_RATIO) * (1 + math.cos(math.pi * t / MAX_STEPS)) / 2


def fast_lr(schedule: str, t: int, speedup: float) -> float:
    """The baseline after a growth at AT with the remaining decay (MAX_STEPS - AT steps) run in (1 - s) of them."""
    end = AT + round((1 - speedup) * (MAX_STEPS - AT))
    if t >= end:
        return user_lr(schedule, MAX_STEPS)
    return user_lr(schedule, AT + (t - AT) * (MAX_STEPS - AT) / (end - AT))


class RecordSGD(Callback):
    """Per optimizer step: parameters before, gradients, parameters after; and the group LR Lightning leaves
    between steps. Placed before the growth callback (sees the stepped, not yet grown, model)."""

    def __init__(self) -> None:
        self.records: list[tuple[int, dict, dict, dict]] = []
        self.group_lr: dict[int, float] = {}
        self._pending = None

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        named = dict(pl_module.model.named_parameters())
        self._pending = (trainer.global_step, {n: p.detach().clone() for n, p in named.items()},
                         {n: p.grad.detach().clone() for n, p in named.items() if p.grad is not None})

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._pending is not None:
            step, before, grads = self._pending
            after = {n: p.detach().clone() for n, p in pl_module.model.named_parameters()}
            self.records.append((step, before, grads, after))
            self._pending = None
        self.group_lr[trainer.global_step] = float(trainer.optimizers[0].param_groups[0]["lr"])


def applied_lr(before, grad, after, mask):
    """-(after - before) / grad on entries whose update is far above float32 rounding of the weight."""
    g, w = grad[mask], before[mask]
    keep = (g.abs() * 1e-2) > 1e4 * torch.finfo(torch.float32).eps * w.abs().clamp_min(1e-3)
    return -(after[mask] - w)[keep] / g[keep]


def new_mask(name: str, shape) -> torch.Tensor:
    """New entries of paper_stage(AT, n_embd=48, intermediate_size=128) from n_embd 32, intermediate 64."""
    mask = torch.zeros(shape, dtype=torch.bool)
    if name.endswith("mlp.proj.weight"):
        mask[32:, :] = True
        mask[:32, 64:] = True
    elif name.endswith(("fc_1.weight", "fc_2.weight")):
        mask[64:, :] = True
        mask[:64, 32:] = True
    elif name.endswith(("attn.proj.weight",)):
        mask[32:, :] = True
    elif name.endswith(("qkv.weight", "lm_head.weight", "wte.weight")):
        mask[:, 32:] = True
    elif name.endswith(".weight") and len(shape) == 1:  # norms
        mask[32:] = True
    return mask


def fit(module, stage, *, accumulate=1, callbacks=(), ckpt_path=None, **kw):
    growth = WidthGrowthCallback(stage)
    trainer = make_trainer([*callbacks, growth], max_steps=MAX_STEPS, accumulate=accumulate, **kw)
    trainer.fit(module, ckpt_path=ckpt_path)
    return trainer, growth


def check_lrs(recorder, expected_old, expected_new, *, min_checked=2000):
    checked = 0
    steps = set()
    for step, before, grads, after in recorder.records:
        for name, w in before.items():
            if name not in grads:
                continue
            if step < AT:
                pairs = ((torch.ones_like(w, dtype=torch.bool), expected_old(step)),)
            else:
                new = new_mask(name, w.shape)
                pairs = ((~new, expected_old(step)), (new, expected_new(step)))
            for mask, expected in pairs:
                got = applied_lr(w, grads[name], after[name], mask)
                if got.numel():
                    assert torch.allclose(got, torch.full_like(got, expected), rtol=2e-3), (step, name, expected,
                                                                                           got[:3])
                    checked += got.numel()
        steps.add(step)
    assert steps == set(range(MAX_STEPS)) and checked > min_checked


@pytest.mark.parametrize("accumulate", [1, 2])
@pytest.mark.parametrize("schedule", ["warmup_cosine", "cosine"])
def test_rewarmup_all_gives_every_entry_the_rewarmup(schedule, accumulate):
    module = TinyModule(optimizer="sgd", lr=LR, schedule=schedule, max_steps=MAX_STEPS, min_lr_ratio=MIN_RATIO,
                        accumulate=accumulate)
    recorder = RecordSGD()
    stage = paper_stage(AT, n_embd=48, intermediate_size=128, rewarmup_ratio=1.5, rewarmup_steps=4,
                        rewarmup_scope="all")
    trainer, growth = fit(module, stage, accumulate=accumulate, callbacks=[recorder])

    def rewarm(step):
        return rewarmup_lr(step, growth_step=AT, lr_at_growth=user_lr(schedule, AT), ratio=1.5, warmup_steps=4,
                           total_steps=MAX_STEPS, min_lr=LR * MIN_RATIO)

    def expected(step):
        return user_lr(schedule, step) if step < AT else rewarm(step)

    check_lrs(recorder, expected, expected)
    # the re-warmup really differs from the baseline, and the module's scheduler still owns the group LR
    assert rewarm(AT + 4) > 1.4 * user_lr(schedule, AT + 4)
    for step, lr in recorder.group_lr.items():
        assert lr == pytest.approx(user_lr(schedule, step), rel=1e-6), step
    assert growth._lr_hooks and all(type(h).__name__ == "BaselineLR" for h in growth._lr_hooks)


@pytest.mark.parametrize("accumulate", [1, 2])
@pytest.mark.parametrize("schedule", ["warmup_cosine", "cosine"])
def test_decay_speedup_runs_the_remaining_decay_faster_then_holds(schedule, accumulate):
    speedup = 0.5
    module = TinyModule(optimizer="sgd", lr=LR, schedule=schedule, max_steps=MAX_STEPS, min_lr_ratio=MIN_RATIO,
                        accumulate=accumulate)
    recorder = RecordSGD()
    stage = paper_stage(AT, n_embd=48, intermediate_size=128, rewarmup_ratio=1.3, rewarmup_steps=4,
                        decay_speedup=speedup)
    end = decay_end(stage, MAX_STEPS)
    assert end == AT + 10

    def old(step):
        return user_lr(schedule, step) if step < AT else fast_lr(schedule, step, speedup)

    def new(step):  # the new entries' re-warmup decays to min_lr at the same, earlier end
        return rewarmup_lr(step, growth_step=AT, lr_at_growth=user_lr(schedule, AT), ratio=1.3, warmup_steps=4,
                           total_steps=end, min_lr=LR * MIN_RATIO)

    fit(module, stage, accumulate=accumulate, callbacks=[recorder])
    check_lrs(recorder, old, new)
    assert old(end) == pytest.approx(LR * MIN_RATIO) and new(end) == pytest.approx(LR * MIN_RATIO)
    assert old(AT + 5) < 0.8 * user_lr(schedule, AT + 5)  # really faster
    for step, lr in recorder.group_lr.items():
        assert lr == pytest.approx(user_lr(schedule, step), rel=1e-6), step


def test_decay_speedup_without_rewarmup_moves_every_entry_to_the_fast_baseline():
    speedup = 0.25
    module = TinyModule(optimizer="sgd", lr=LR, schedule="warmup_cosine", max_steps=MAX_STEPS, min_lr_ratio=MIN_RATIO)
    recorder = RecordSGD()
    stage = paper_stage(AT, n_embd=48, intermediate_size=128, rewarmup_ratio=None, decay_speedup=speedup)

    def lr(step):
        return user_lr("warmup_cosine", step) if step < AT else fast_lr("warmup_cosine", step, speedup)

    trainer, _ = fit(module, stage, callbacks=[recorder])
    assert [c.name for c in trainer.lr_scheduler_configs] == [None]  # no new-entry scheduler
    check_lrs(recorder, lr, lr)


def test_fast_decay_position_and_end():
    assert decay_end(paper_stage(100, n_embd=8, decay_speedup=0.25), 300) == 250
    assert decay_end(paper_stage(100, n_embd=8, decay_speedup=0.5), 300) == 200
    assert decay_end(paper_stage(100, n_embd=8), 300) == 300
    assert decay_end(paper_stage(0, n_embd=8, decay_speedup=0.999), 10) == 1  # at least one step of decay
    kw = dict(growth_step=100, total_steps=300, end=200)
    assert [fast_decay_position(t, **kw) for t in (50, 100, 150, 199, 200, 1000)] == [50, 100, 200.0, 298.0, 300,
                                                                                    300]
    assert fast_decay_position(150, growth_step=100, total_steps=300, end=300) == 150


def test_rewarmup_must_fit_before_the_faster_end():
    check_rewarmup_fits([paper_stage(100, n_embd=8, rewarmup_steps=99, decay_speedup=0.5)], 300)
    with pytest.raises(ValueError, match="decay_speedup=0.5"):
        check_rewarmup_fits([paper_stage(100, n_embd=8, rewarmup_steps=100, decay_speedup=0.5)], 300)


@pytest.mark.parametrize("schedule", ["step", None])
def test_decay_speedup_refuses_a_schedule_it_cannot_compute(schedule):
    module = TinyModule(optimizer="sgd", lr=LR, schedule=schedule, max_steps=MAX_STEPS)
    growth = WidthGrowthCallback(paper_stage(AT, intermediate_size=128, rewarmup_ratio=None, decay_speedup=0.25))
    trainer = make_trainer([growth], max_steps=MAX_STEPS)
    with pytest.raises(GrowthError, match="decay_speedup=0.25.*(StepLR|no scheduler).*LambdaLR or CosineAnnealingLR"):
        trainer.fit(module)
    assert module.steps_run == 0


def test_baseline_options_only_on_the_last_stage():
    first = paper_stage(5, intermediate_size=96, rewarmup_scope="all", rewarmup_steps=2)
    with pytest.raises(ValueError, match="rewarmup_scope='all'.*only the last stage"):
        WidthGrowthCallback([first, paper_stage(10, intermediate_size=128)])
    with pytest.raises(ValueError, match="decay_speedup=0.5.*only the last stage"):
        WidthGrowthCallback([paper_stage(5, intermediate_size=96, decay_speedup=0.5),
                             paper_stage(10, intermediate_size=128)])
    WidthGrowthCallback([paper_stage(5, intermediate_size=96), paper_stage(10, intermediate_size=128,
                                                                           rewarmup_scope="all")])


def test_two_stages_with_rewarmup_all_last_overrides_the_first_stages_regions():
    """Stage 0 (default recipe) re-warms its own new entries; stage 1 with scope 'all' then moves every entry,
    stage 0's included, to its re-warmup."""
    module = TinyModule(optimizer="sgd", lr=LR, schedule="cosine", max_steps=MAX_STEPS, min_lr_ratio=MIN_RATIO)
    recorder = RecordSGD()
    stages = [paper_stage(AT, n_embd=48, intermediate_size=128, rewarmup_ratio=1.5, rewarmup_steps=4),
              paper_stage(20, intermediate_size=160, rewarmup_ratio=1.2, rewarmup_steps=3, rewarmup_scope="all")]
    growth = WidthGrowthCallback(stages)
    trainer = make_trainer([recorder, growth], max_steps=MAX_STEPS)
    trainer.fit(module)
    lr_20 = user_lr("cosine", 20)
    checked = 0
    for step, before, grads, after in recorder.records:
        if step < 20:
            continue
        expected = rewarmup_lr(step, growth_step=20, lr_at_growth=lr_20, ratio=1.2, warmup_steps=3,
                               total_steps=MAX_STEPS, min_lr=LR * MIN_RATIO)
        for name in grads:
            got = applied_lr(before[name], grads[name], after[name], torch.ones_like(before[name], dtype=torch.bool))
            assert torch.allclose(got, torch.full_like(got, expected), rtol=2e-3), (step, name)
            checked += got.numel()
    assert checked > 2000


@pytest.mark.parametrize("stage_kwargs", [
    dict(rewarmup_scope="all", split="uneven", optimizer_state="scaled"),
    dict(decay_speedup=0.5, split="random", perturb=0.05),
])
def test_bit_exact_resume_with_baseline_options(tmp_path: Path, stage_kwargs):
    def stage():
        return paper_stage(AT, n_embd=48, intermediate_size=128, rewarmup_steps=4, **stage_kwargs)

    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1, filename="{step}")
    reference = TinyModule(max_steps=MAX_STEPS, accumulate=2)
    fit(reference, stage(), accumulate=2, callbacks=[ckpt], enable_checkpointing=True)
    expected = {n: p.detach().clone() for n, p in reference.model.state_dict().items()}
    saved = torch.load(tmp_path / "step=15.ckpt", map_location="cpu", weights_only=False)
    state = saved["callbacks"]["GrowthCallback"]
    for key, value in stage_kwargs.items():
        assert state["stages"][0][key] == value  # recorded with the growth state
    for step in (5, 10, 15, 22):
        resumed = TinyModule(max_steps=MAX_STEPS, accumulate=2)
        fit(resumed, stage(), accumulate=2, ckpt_path=str(tmp_path / f"step={step}.ckpt"))
        assert_states_equal(resumed.model.state_dict(), expected, f"resume from step {step}")
    # a callback with other baseline options refuses the checkpoint
    other = paper_stage(AT, n_embd=48, intermediate_size=128, rewarmup_steps=4)
    with pytest.raises(GrowthError, match="different stages"):
        fit(TinyModule(max_steps=MAX_STEPS, accumulate=2), other, accumulate=2,
            ckpt_path=str(tmp_path / "step=15.ckpt"))


class RecordStepLR(Callback):
    """Registers (once, after the growth) a step pre-hook on every optimizer that records the LR each param group
    has when the optimizer steps: registered after the growth callback's hooks, it sees the LR they set."""

    def __init__(self, after: int) -> None:
        self.after = after
        self.seen: list[tuple[int, int, float]] = []  # (optimizer, step, lr of group 0)
        self._step = 0
        self._hooked = False

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._step = trainer.global_step
        if not self._hooked and trainer.global_step > self.after:
            self._hooked = True
            for o, opt in enumerate(trainer.optimizers):
                opt.register_step_pre_hook(
                    lambda opt, args, kwargs, o=o: self.seen.append((o, self._step, float(opt.param_groups[0]["lr"]))))


def test_decay_speedup_under_manual_optimization_with_two_optimizers():
    """The package's module with Muon (Muon for block matrices + AdamW for the rest, stepped by the module under
    manual optimization, 2 micro-batches per step): Lightning's global step already counts the step when the second
    optimizer steps, so the time of a step is each optimizer's scheduler position; both get the fast baseline."""
    from lightning_sparkling.pretrain.training.module import LitGPTPretrainModule

    from _tiny import VOCAB, tiny_config

    module = LitGPTPretrainModule(tiny_config(), {"class_path": "torch.optim.Muon", "init_args": {"lr": LR}},
                                  max_steps=MAX_STEPS, lr_warmup_steps=5, min_lr=LR * MIN_RATIO,
                                  accumulate_grad_batches=2)
    data = torch.utils.data.DataLoader(torch.randint(0, VOCAB, (4 * 2 * MAX_STEPS, 17),
                                                     generator=torch.Generator().manual_seed(0)), batch_size=4)
    recorder = RecordStepLR(after=AT)
    growth = WidthGrowthCallback(paper_stage(AT, n_embd=48, intermediate_size=128, rewarmup_steps=4,
                                             decay_speedup=0.5))
    trainer = make_trainer([recorder, growth], max_steps=MAX_STEPS)
    trainer.fit(module, train_dataloaders=data)
    assert trainer.global_step == MAX_STEPS and len(trainer.optimizers) == 2
    assert sorted(recorder.seen) == sorted(recorder.seen) and {o for o, _, _ in recorder.seen} == {0, 1}
    assert len(recorder.seen) == 2 * (MAX_STEPS - AT - 1)
    for o, step, lr in recorder.seen:
        assert lr == pytest.approx(fast_lr("warmup_cosine", step, 0.5), rel=1e-9), (o, step)


class EpochSchedule(TinyModule):
    """SGD with an epoch-interval scheduler (the epoch never ends here: the LR stays at ``LR``)."""

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.lr)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}


class TwoSchedules(TinyModule):
    """SGD with two step-interval schedulers: WarmupCosineLambda, then an identity ConstantLR."""

    def configure_optimizers(self):
        from lightning_sparkling.growth.schedules import WarmupCosineLambda

        opt = torch.optim.SGD(self.parameters(), lr=self.lr)
        first = torch.optim.lr_scheduler.LambdaLR(opt, WarmupCosineLambda(5, self.max_steps, self.min_lr_ratio))
        second = torch.optim.lr_scheduler.ConstantLR(opt, factor=1.0, total_iters=0)
        return [opt], [{"scheduler": first, "interval": "step"}, {"scheduler": second, "interval": "step"}]


@pytest.mark.parametrize("accumulate", [1, 2])
@pytest.mark.parametrize("case", ["no_scheduler", "epoch_interval", "two_schedulers"])
def test_rewarmup_all_without_one_step_scheduler_uses_the_global_step(case, accumulate):
    """``rewarmup_scope='all'`` on an optimizer with no single step-interval scheduler (none, an epoch-interval one,
    two) times the re-warmup by the trainer's global step: every entry takes the re-warmup LR at every step after
    the growth (read from SGD updates), and training runs to the end."""
    kw = dict(optimizer="sgd", lr=LR, max_steps=MAX_STEPS, min_lr_ratio=MIN_RATIO, accumulate=accumulate)
    module = {"no_scheduler": lambda: TinyModule(schedule=None, **kw), "epoch_interval": lambda: EpochSchedule(**kw),
              "two_schedulers": lambda: TwoSchedules(**kw)}[case]()
    schedule = "warmup_cosine" if case == "two_schedulers" else None

    def user(step):
        return LR if schedule is None else user_lr(schedule, step)

    recorder = RecordSGD()
    stage = paper_stage(AT, n_embd=48, intermediate_size=128, rewarmup_ratio=1.5, rewarmup_steps=4,
                        rewarmup_scope="all")
    growth = WidthGrowthCallback(stage, min_lr=LR * MIN_RATIO)
    trainer = make_trainer([recorder, growth], max_steps=MAX_STEPS, accumulate=accumulate)
    trainer.fit(module)
    assert trainer.global_step == MAX_STEPS

    def expected(step):
        if step < AT:
            return user(step)
        return rewarmup_lr(step, growth_step=AT, lr_at_growth=user(AT), ratio=1.5, warmup_steps=4,
                           total_steps=MAX_STEPS, min_lr=LR * MIN_RATIO)

    check_lrs(recorder, expected, expected)
    assert expected(AT + 4) > 1.4 * user(AT + 4)  # the re-warmup really differs from the user's LR
    for step, lr in recorder.group_lr.items():  # the user's schedule still owns the group LR between steps
        assert lr == pytest.approx(user(step), rel=1e-6), step
