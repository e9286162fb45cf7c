"""Behaviours of the LR baselines that no other test pinned (issue 31's mutation audit): under
``rewarmup_scope='all'`` every param group of every optimizer re-warms from its own LR at growth to its own
``min_lr`` (read from SGD updates); ``rewarmup_scope='all'`` with no per-step scheduler runs on the trainer's step;
``decay_speedup`` refuses a scheduler stepped every other step; after an optimizer step that raised, the user's LR is
put back before the next baseline LR is applied."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from lightning_sparkling import WidthGrowthCallback, rewarmup_lr
from lightning_sparkling.growth.baselines import BaselineLR
from lightning_sparkling.growth.plan import GrowthError
from lightning_sparkling.growth.schedules import WarmupCosineLambda

from _measure import applied_lr
from _tiny import TinyModule, make_trainer, paper_stage

MAX_STEPS, AT, LR, WARMUP = 16, 6, 0.05, 3
STAGE = dict(n_embd=48, intermediate_size=96, rewarmup_ratio=1.5, rewarmup_steps=3, rewarmup_scope="all")
# (optimizer, group): (base LR, min_lr ratio of its WarmupCosineLambda)
GROUPS = {(0, 0): (LR, 0.1), (0, 1): (LR / 2, 0.3), (1, 0): (LR / 4, 0.5)}


def _split(model) -> tuple[list, list, list]:
    """The blocks' attention tensors, the blocks' other tensors (MLPs, norms), everything outside the blocks."""
    named = list(model.named_parameters())
    attn = [p for n, p in named if ".h." in n and ".attn." in n]
    others = [p for n, p in named if ".h." in n and ".attn." not in n]
    rest = [p for n, p in named if ".h." not in n]
    return attn, others, rest


def _scheduler(opt, groups) -> dict:
    lambdas = [WarmupCosineLambda(WARMUP, MAX_STEPS, GROUPS[og][1]) for og in groups]
    return {"scheduler": torch.optim.lr_scheduler.LambdaLR(opt, lambdas), "interval": "step"}


class TwoGroups(TinyModule):
    """One SGD, two param groups with their own LR and min_lr (the groups of optimizer 0 of :data:`GROUPS`; the
    rest of the model sits in group 1 too)."""

    def configure_optimizers(self):
        attn, others, rest = _split(self.model)
        opt = torch.optim.SGD([{"params": attn, "lr": GROUPS[0, 0][0]},
                               {"params": others + rest, "lr": GROUPS[0, 1][0]}], lr=LR)
        return {"optimizer": opt, "lr_scheduler": _scheduler(opt, [(0, 0), (0, 1)])}


class TwoOptimizers(TinyModule):
    """Manual optimization with two SGDs (as the package's Muon + AdamW module): the first with the two groups of
    optimizer 0, the second with the tensors outside the blocks (:data:`GROUPS`)."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.automatic_optimization = False

    def configure_optimizers(self):
        attn, others, rest = _split(self.model)
        first = torch.optim.SGD([{"params": attn, "lr": GROUPS[0, 0][0]},
                                 {"params": others, "lr": GROUPS[0, 1][0]}], lr=LR)
        second = torch.optim.SGD(rest, lr=GROUPS[1, 0][0])
        return [first, second], [_scheduler(first, [(0, 0), (0, 1)]), _scheduler(second, [(1, 0)])]

    def training_step(self, batch, batch_idx):
        from _tiny import token_batch

        loss = self.loss_on(token_batch(self.global_step, 0))
        self.manual_backward(loss)
        first, second = self.optimizers()
        first.step()  # one Lightning step per global step (the package's module does the same)
        second.optimizer.step()
        for opt in (first, second):
            opt.zero_grad()
        for sched in self.lr_schedulers():
            sched.step()
        return loss


class RecordUpdates(Callback):
    """Per optimizer step (hooks on every optimizer from the start: the growth's hooks, registered later, set the LR
    of the step between them): the optimizer, its scheduler's position (the step's time), and per parameter its
    group, value before, gradient and value after."""

    def __init__(self) -> None:
        self.records: list[tuple[int, int, dict]] = []
        self._pending: dict = {}

    def on_train_start(self, trainer, pl_module):
        self.module = pl_module
        for o, opt in enumerate(trainer.optimizers):
            opt.register_step_pre_hook(partial(self._pre, o))
            opt.register_step_post_hook(partial(self._post, o))

    def _time(self, optimizer) -> int:
        configs = [c for c in self.module.trainer.lr_scheduler_configs if c.scheduler.optimizer is optimizer]
        return configs[0].scheduler.last_epoch if configs else self.module.trainer.global_step

    def _pre(self, o, optimizer, args, kwargs):
        self._pending[o] = [[p.detach().clone() for p in group["params"]] for group in optimizer.param_groups]

    def _post(self, o, optimizer, args, kwargs):
        # the gradients are read after the step: under automatic optimization the closure computes them inside it
        names = {id(p): n for n, p in self.module.model.named_parameters()}
        entries = {names[id(p)]: (g, before, p.grad.detach().clone(), p.detach().clone())
                   for g, (group, befores) in enumerate(zip(optimizer.param_groups, self._pending.pop(o)))
                   for p, before in zip(group["params"], befores) if p.grad is not None}
        self.records.append((o, self._time(optimizer), entries))


def user_lr(og, t: int) -> float:
    base, ratio = GROUPS[og]
    return base * WarmupCosineLambda(WARMUP, MAX_STEPS, ratio)(t)


def check_every_group_rewarms_on_its_own(recorder, groups, *, lr=user_lr, min_lr=None) -> None:
    seen = set()
    for o, t, entries in recorder.records:
        for name, (g, before, grad, after) in entries.items():
            og = (o, g)
            own_min = GROUPS[og][0] * GROUPS[og][1] if min_lr is None else min_lr
            expected = lr(og, t) if t < AT else rewarmup_lr(t, growth_step=AT, lr_at_growth=lr(og, AT), ratio=1.5,
                                                            warmup_steps=3, total_steps=MAX_STEPS, min_lr=own_min)
            got = applied_lr(before, grad, after, torch.ones_like(before, dtype=torch.bool))
            if got.numel():
                assert torch.allclose(got, torch.full_like(got, expected), rtol=2e-3), (og, t, name, expected, got[:3])
                seen.add((og, t))
    assert seen == {(og, t) for og in groups for t in range(MAX_STEPS)}


def test_rewarmup_all_rewarms_each_param_group_from_its_own_lr_to_its_own_min_lr():
    recorder = RecordUpdates()
    trainer = make_trainer([recorder, WidthGrowthCallback(paper_stage(AT, **STAGE))], max_steps=MAX_STEPS)
    trainer.fit(TwoGroups(optimizer="sgd", max_steps=MAX_STEPS))
    check_every_group_rewarms_on_its_own(recorder, [(0, 0), (0, 1)])
    # the groups really differ: at growth, and at the end (min_lr)
    assert user_lr((0, 0), AT) != user_lr((0, 1), AT)
    assert GROUPS[0, 0][0] * GROUPS[0, 0][1] != GROUPS[0, 1][0] * GROUPS[0, 1][1]


def test_rewarmup_all_rewarms_each_optimizer_from_its_own_lr_to_its_own_min_lr():
    recorder = RecordUpdates()
    trainer = make_trainer([recorder, WidthGrowthCallback(paper_stage(AT, **STAGE))], max_steps=MAX_STEPS)
    trainer.fit(TwoOptimizers(optimizer="sgd", max_steps=MAX_STEPS))
    assert len(trainer.optimizers) == 2
    check_every_group_rewarms_on_its_own(recorder, list(GROUPS))


def test_rewarmup_all_without_a_scheduler_runs_on_the_trainer_step():
    """A constant user LR (no scheduler, ``min_lr`` given): the re-warmup's time is the trainer's step."""
    recorder = RecordUpdates()
    growth = WidthGrowthCallback(paper_stage(AT, **STAGE), min_lr=LR / 10)
    trainer = make_trainer([recorder, growth], max_steps=MAX_STEPS)
    trainer.fit(TinyModule(optimizer="sgd", lr=LR, schedule=None, max_steps=MAX_STEPS))
    assert trainer.global_step == MAX_STEPS
    check_every_group_rewarms_on_its_own(recorder, [(0, 0)], lr=lambda og, t: LR, min_lr=LR / 10)


class EveryOtherStep(TinyModule):
    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=self.lr)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, WarmupCosineLambda(2, self.max_steps))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step", "frequency": 2}}


def test_decay_speedup_refuses_a_scheduler_stepped_every_other_step():
    module = EveryOtherStep(optimizer="sgd", max_steps=MAX_STEPS)
    growth = WidthGrowthCallback(paper_stage(AT, intermediate_size=96, rewarmup_ratio=None, decay_speedup=0.25))
    with pytest.raises(GrowthError, match=r"decay_speedup=0.25.*LambdaLR \(interval='step', frequency=2\).*"
                                          r"interval='step' and frequency=1"):
        make_trainer([growth], max_steps=MAX_STEPS).fit(module)
    assert module.steps_run == 0


def test_after_a_step_that_raised_the_users_lr_is_restored_before_the_next_baseline_lr():
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=0.1)
    hooks = BaselineLR(opt, {0: lambda: 0.5})

    def failing():
        raise FloatingPointError("loss is nan")

    with pytest.raises(FloatingPointError):
        opt.step(failing)  # the pre-hook set 0.5; the post-hook never ran
    assert opt.param_groups[0]["lr"] == 0.5
    param.grad = torch.ones(1)
    opt.step()
    assert param.item() == pytest.approx(-0.5)  # the step used the baseline LR ...
    assert opt.param_groups[0]["lr"] == 0.1  # ... and the user's LR is back, not the LR the failed step left
    opt.param_groups[0]["lr"] = 0.2  # the user's scheduler moves it between steps
    opt.step()
    assert param.item() == pytest.approx(-1.0) and opt.param_groups[0]["lr"] == 0.2
    hooks.remove()
    opt.step()
    assert param.item() == pytest.approx(-1.2) and math.isclose(opt.param_groups[0]["lr"], 0.2)
