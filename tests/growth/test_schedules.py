"""Learning-rate schedules against the paper: the baseline f (Eq. 13-14) and the new entries' re-warmup (Eq. 15-16)."""

from __future__ import annotations

import math
import pickle

import pytest
import torch

from lightning_sparkling import rewarmup_lr, warmup_cosine_lr
from lightning_sparkling.growth.schedules import RewarmupLambda, RewarmupLR, WarmupCosineLambda



def paper_f(t, T_w, T, eta_0, eta_max, eta_min):
    """Paper Eq. 13: linear warmup from eta_0 to eta_max over T_w steps, then
    eta_min + (eta_max - eta_min) psi((t - T_w) / (T - T_w)) with psi(x) = (1 + cos(pi x)) / 2 (Eq. 14)."""
    if 0 <= t < T_w:
        return eta_0 + (eta_max - eta_0) * t / T_w
    assert T_w <= t <= T
    x = (t - T_w) / (T - T_w)
    return eta_min + (eta_max - eta_min) * 0.5 * (1 + math.cos(math.pi * x))


@pytest.mark.parametrize("T_w,T,eta_0,eta_max,eta_min", [
    (10, 100, 0.0, 1.0, 0.1),
    (30, 1000, 1e-5, 3e-4, 3e-6),  # the paper's 3% warmup and 0.01 final ratio
    (1, 7, 0.5, 2.0, 0.0),
    (0, 50, 0.0, 1e-3, 1e-5),
])
def test_warmup_cosine_equals_paper_eq13(T_w, T, eta_0, eta_max, eta_min):
    points = sorted({0, 1, T_w // 2, max(T_w - 1, 0), T_w, T_w + 1, (T_w + T) // 2, (T_w + 3 * T) // 4, T - 1, T})
    for t in points:
        got = warmup_cosine_lr(t, warmup_steps=T_w, total_steps=T, lr_init=eta_0, lr_max=eta_max, lr_min=eta_min)
        assert got == pytest.approx(paper_f(t, T_w, T, eta_0, eta_max, eta_min), rel=1e-12, abs=1e-15), t
    # landmarks
    kw = dict(warmup_steps=T_w, total_steps=T, lr_init=eta_0, lr_max=eta_max, lr_min=eta_min)
    assert warmup_cosine_lr(T_w, **kw) == pytest.approx(eta_max)
    assert warmup_cosine_lr(T, **kw) == pytest.approx(eta_min)
    assert warmup_cosine_lr(T + 5, **kw) == pytest.approx(eta_min)  # stays at the floor after T
    if T_w:
        assert warmup_cosine_lr(0, **kw) == pytest.approx(eta_0)


@pytest.mark.parametrize("warmup_steps,total_steps", [(-1, 10), (11, 10)])
def test_warmup_cosine_refuses_bad_steps(warmup_steps, total_steps):
    with pytest.raises(ValueError, match="warmup_steps"):
        warmup_cosine_lr(0, warmup_steps=warmup_steps, total_steps=total_steps, lr_init=0, lr_max=1, lr_min=0)


REWARMUP = dict(growth_step=400, lr_at_growth=2e-4, ratio=1.3, warmup_steps=50, total_steps=1000, min_lr=1e-5)


def test_rewarmup_equals_paper_eq16():
    """eta_new(t) = f(t - t_e; tau_w, T - t_e, eta_e, rho eta_e, eta_min)."""
    t_e, eta_e, rho, tau_w, T = 400, 2e-4, 1.3, 50, 1000
    for t in (400, 401, 425, 449, 450, 451, 600, 725, 999, 1000):
        expected = paper_f(t - t_e, tau_w, T - t_e, eta_e, rho * eta_e, 1e-5)
        assert rewarmup_lr(t, **REWARMUP) == pytest.approx(expected, rel=1e-12), t


@pytest.mark.parametrize("ratio", [1.3, 2.0, 1.0, 0.8])
def test_rewarmup_landmarks_and_monotone_pieces(ratio):
    kw = dict(REWARMUP, ratio=ratio)
    g, w, T, lr_e, lr_min = kw["growth_step"], kw["warmup_steps"], kw["total_steps"], kw["lr_at_growth"], kw["min_lr"]
    assert rewarmup_lr(g, **kw) == pytest.approx(lr_e, rel=1e-12)  # starts at the LR at growth
    assert rewarmup_lr(g + w, **kw) == pytest.approx(ratio * lr_e, rel=1e-12)  # peak after the warmup
    assert rewarmup_lr(T, **kw) == pytest.approx(lr_min, rel=1e-12)  # ends at min_lr
    warm = [rewarmup_lr(s, **kw) for s in range(g, g + w + 1)]
    steps = [b - a for a, b in zip(warm, warm[1:])]
    if ratio > 1:
        assert all(d > 0 for d in steps)
    elif ratio < 1:
        assert all(d < 0 for d in steps)
    else:
        assert all(abs(d) < 1e-18 for d in steps)
    # linear warmup: constant increments
    assert max(steps) - min(steps) < 1e-15
    decay = [rewarmup_lr(s, **kw) for s in range(g + w, T + 1)]
    assert all(b <= a for a, b in zip(decay, decay[1:]))
    assert all(lr_min - 1e-18 <= v <= max(lr_e, ratio * lr_e) + 1e-18 for v in warm + decay)


def test_rewarmup_is_continuous_with_the_baseline_at_growth():
    """New entries start exactly at the old entries' LR at the growth step."""
    base = dict(warmup_steps=30, total_steps=1000, lr_init=0.0, lr_max=3e-4, lr_min=3e-6)
    for t_e in (30, 200, 700):
        eta_e = warmup_cosine_lr(t_e, **base)
        assert rewarmup_lr(t_e, growth_step=t_e, lr_at_growth=eta_e, ratio=1.3, warmup_steps=250,
                           total_steps=1000, min_lr=3e-6) == pytest.approx(eta_e, rel=1e-12)


def test_rewarmup_without_room_for_the_warmup():
    """Growing closer to the end than the warmup length: still starts at lr_at_growth and ends at min_lr."""
    kw = dict(growth_step=990, lr_at_growth=1e-4, ratio=1.3, warmup_steps=250, total_steps=1000, min_lr=1e-6)
    values = [rewarmup_lr(s, **kw) for s in range(990, 1001)]
    assert values[0] == pytest.approx(1e-4)
    assert values[-1] == pytest.approx(1e-6)
    assert all(math.isfinite(v) for v in values)
    assert rewarmup_lr(1000, **dict(kw, growth_step=1000)) == pytest.approx(1e-6)


def test_rewarmup_before_growth_raises():
    with pytest.raises(ValueError, match="growth_step"):
        rewarmup_lr(399, **REWARMUP)


def test_warmup_cosine_lambda_drives_lambdalr():
    base_lr = 0.3
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=base_lr)
    fn = WarmupCosineLambda(warmup_steps=5, total_steps=40, min_lr_ratio=0.1, init_lr_ratio=0.2)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, fn)
    for step in range(45):
        expected = paper_f(min(step, 40), 5, 40, 0.2 * base_lr, base_lr, 0.1 * base_lr)
        assert opt.param_groups[0]["lr"] == pytest.approx(expected, rel=1e-12), step
        opt.step()
        sched.step()
    assert fn(0) == pytest.approx(0.2) and fn(5) == pytest.approx(1.0) and fn(40) == pytest.approx(0.1)
    assert "min_lr_ratio=0.1" in repr(fn)
    # picklable (LambdaLR checkpoints hold it) and equal after a round trip
    clone = pickle.loads(pickle.dumps(fn))
    assert [clone(s) for s in range(45)] == [fn(s) for s in range(45)]


def test_warmup_cosine_lambda_default_warms_up_from_zero():
    fn = WarmupCosineLambda(warmup_steps=10, total_steps=100)
    assert fn(0) == 0.0 and fn(5) == pytest.approx(0.5) and fn(100) == pytest.approx(0.1)


def test_warmup_cosine_lambda_validates_steps():
    with pytest.raises(ValueError, match="warmup_steps"):
        WarmupCosineLambda(warmup_steps=50, total_steps=10)


def test_rewarmup_lambda_and_scheduler():
    lam = RewarmupLambda(**REWARMUP)
    assert [lam(k) for k in (0, 50, 600)] == [rewarmup_lr(REWARMUP["growth_step"] + k, **REWARMUP)
                                             for k in (0, 50, 600)]
    lam2 = RewarmupLambda(**dict(REWARMUP, lr_at_growth=1e-3))
    sched = RewarmupLR([lam, lam2])
    for k in range(80):
        for j, fn in enumerate((lam, lam2)):
            assert sched.optimizer.param_groups[j]["lr"] == pytest.approx(fn(k), rel=1e-12)
            assert sched.lr_for(j) == pytest.approx(fn(k), rel=1e-12)
        sched.step()
    state = sched.state_dict()
    restored = RewarmupLR([pickle.loads(pickle.dumps(lam)), lam2])
    restored.load_state_dict(state)
    assert restored.last_epoch == 80
    for j, fn in enumerate((lam, lam2)):
        assert restored.optimizer.param_groups[j]["lr"] == pytest.approx(fn(80), rel=1e-12)


def test_rewarmup_scheduler_state_holds_no_lambdas_and_restores_its_step():
    """The new-entry scheduler's checkpointed state is its step alone: its lambdas are rebuilt from the stage record,
    so a restored scheduler at step 7 gives the LR of the one it was saved from."""
    lam = RewarmupLambda(**REWARMUP)
    sched = RewarmupLR([lam])
    for _ in range(7):
        sched.step()
    state = sched.state_dict()
    assert state["lr_lambdas"] == [None] and state["last_epoch"] == 7
    restored = RewarmupLR([RewarmupLambda(**REWARMUP)])
    restored.load_state_dict(state)
    assert restored.last_epoch == 7 and restored.lr_lambdas[0].lr_at_growth == REWARMUP["lr_at_growth"]
    assert restored.optimizer.param_groups[0]["lr"] == pytest.approx(lam(7), rel=1e-12)
