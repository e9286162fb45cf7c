"""``train.lr_decay_shape: sqrt`` (the ``1 - sqrt`` cooldown of Hägele et al. 2024) end to end: the schedule
registry's closed form, and a ``sparkling pretrain`` run under WSD whose parameters take exactly that LR at every
step (read from plain-SGD updates, ``update = -lr * grad``), the grown model's new entries their re-warmup held to
the decay phase and then decayed by the same shape."""

from __future__ import annotations

import math

import pytest
import torch
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from lightning_sparkling.growth.schedules import DECAY_SHAPES, build_schedule, rewarmup_wsd_lr, wsd_lr

from test_cli import tiny_config, write_config

LR, MIN_LR, STEPS, AT, REWARM, DECAY_START = 0.05, 0.005, 12, 4, 2, 6


def sqrt_closed(t: float) -> float:
    """``lr_max (1 - sqrt(p))`` down to ``min``: WSD with warmup 2, decay from step 6 to 12 (fraction 0.5)."""
    if t < 2:
        return LR * t / 2
    if t < DECAY_START:
        return LR
    p = min((t - DECAY_START) / (STEPS - DECAY_START), 1.0)
    return MIN_LR + (LR - MIN_LR) * (1 - math.sqrt(p))


def test_sqrt_decay_closed_form():
    assert DECAY_SHAPES["sqrt"](0.25) == 0.5
    fn = build_schedule("wsd", 2, STEPS, MIN_LR / LR, decay_fraction=0.5, decay_shape="sqrt")
    assert fn.decay_start == DECAY_START
    for t in range(STEPS + 2):
        assert LR * fn(t) == pytest.approx(sqrt_closed(t), rel=1e-12), t
        assert wsd_lr(t, warmup_steps=2, total_steps=STEPS, lr_init=0.0, lr_max=LR, lr_min=MIN_LR,
                      decay_fraction=0.5, decay_shape="sqrt") == pytest.approx(sqrt_closed(t), rel=1e-12)


class AppliedLR:
    """Global optimizer step hooks: per step, each parameter before, then its gradient and the parameter after
    (post-hooks run after the optimizer's own, so ``after`` is the update every hook left)."""

    def __init__(self) -> None:
        self.steps: list[list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] = []
        self._before: list[torch.Tensor] = []

    def pre(self, optimizer, args, kwargs):
        self._before = [p.detach().clone() for g in optimizer.param_groups for p in g["params"]]

    def post(self, optimizer, args, kwargs):
        params = [p for g in optimizer.param_groups for p in g["params"]]
        self.steps.append([(b, p.grad.detach().clone(), p.detach().clone())
                           for b, p in zip(self._before, params) if p.grad is not None])


def lr_of(before: torch.Tensor, grad: torch.Tensor, after: torch.Tensor) -> torch.Tensor:
    keep = grad.abs() * LR * 1e-2 > 1e3 * torch.finfo(torch.float32).eps * before.abs().clamp_min(1e-3)
    return -(after - before)[keep] / grad[keep]


def test_cli_run_under_wsd_sqrt_applies_the_sqrt_decay(tmp_path):
    from lightning_sparkling.pretrain.cli import main

    config = tiny_config(tmp_path / "cache", train={"lr_schedule": "wsd", "lr_decay_shape": "sqrt",
                                                    "lr_decay_fraction": 0.5, "min_lr": MIN_LR, "max_norm": 0.0})
    config["optimizer"] = {"class_path": "torch.optim.SGD", "init_args": {"lr": LR}}
    config["growth"] = {"recipe": "wsd", "stages": [{"at_step": AT, "intermediate_size": 128,
                                                     "rewarmup_steps": REWARM}]}
    recorder = AppliedLR()
    handles = [register_optimizer_step_pre_hook(recorder.pre),
               register_optimizer_step_post_hook(recorder.post)]
    try:
        assert main(["pretrain", "--config", str(write_config(tmp_path / "run.yaml", config)),
                     "--out_dir", str(tmp_path / "out")]) == 0
    finally:
        for handle in handles:
            handle.remove()
    assert len(recorder.steps) == STEPS
    new_checked, old_checked = 0, {}
    for t, entries in enumerate(recorder.steps):
        new = t >= AT and rewarmup_wsd_lr(t, growth_step=AT, lr_at_growth=sqrt_closed(AT), ratio=1.3,
                                          warmup_steps=REWARM, total_steps=STEPS, min_lr=MIN_LR,
                                          decay_start=DECAY_START, decay_shape="sqrt")
        for before, grad, after in entries:
            if t >= AT and before.shape == (128, 32):  # fc_1 / fc_2 of a grown block: rows 64.. are new channels
                got = lr_of(before[64:], grad[64:], after[64:])
                assert torch.allclose(got, torch.full_like(got, new), rtol=1e-3), (t, new, got[:3])
                new_checked += got.numel()
                before, grad, after = before[:64], grad[:64], after[:64]
            if t >= AT and before.shape == (32, 128):  # mlp.proj of a grown block: columns 64.. are new channels
                got = lr_of(before[:, 64:], grad[:, 64:], after[:, 64:])
                assert torch.allclose(got, torch.full_like(got, new), rtol=1e-3), (t, new, got[:3])
                new_checked += got.numel()
                before, grad, after = before[:, :64], grad[:, :64], after[:, :64]
            if sqrt_closed(t) == 0:  # the first warmup step
                assert torch.equal(before, after)
                continue
            got = lr_of(before, grad, after)
            assert torch.allclose(got, torch.full_like(got, sqrt_closed(t)), rtol=1e-3), (t, sqrt_closed(t), got[:3])
            old_checked[t] = old_checked.get(t, 0) + got.numel()
    assert new_checked > 1000 and sorted(old_checked) == list(range(1, STEPS))
    assert min(old_checked.values()) > 1000
    assert sqrt_closed(9) < 0.6 * LR  # the sqrt drop: 1 - sqrt(1/2) of the way at half the decay
