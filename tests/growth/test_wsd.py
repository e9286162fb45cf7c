"""Warmup-stable-decay (issue 23): the schedule against its closed form, the new entries' LR under it read from the
parameters (SGD, ``update = -lr * grad``) at gradient accumulation 1 and 2 with ``decay_speedup``,
``rewarmup_scope='all'`` and the symmetry loop on top, ``min_lr`` read from ``WSDLambda``, bit-exact resume across a
growth, and the refusal (CLI) or warning (callback) of a growth inside the decay phase."""

from __future__ import annotations

import math
import pickle
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_sparkling import GrowthStage, WidthGrowthCallback, rewarmup_lr
from lightning_sparkling.growth.plan import GrowthError
from lightning_sparkling.growth.schedules import (
    RewarmupLambda,
    WSDLambda,
    check_growth_before_decay,
    rewarmup_wsd_lr,
    wsd_decay_start,
    wsd_lr,
)

from _measure import RecordSteps, applied_lr
from _tiny import TinyModule, assert_states_equal, make_trainer, paper_stage

ROOT = Path(__file__).resolve().parents[2]

# a 30-step run: warmup 5, decay over the last 30% (steps 21..30), growth at step 8 in the stable phase
MAX_STEPS, WARMUP, FRACTION, DECAY_START, AT = 30, 5, 0.3, 21, 8
LR, MIN_RATIO, RATIO, REWARM = 0.05, 0.1, 1.5, 4


def phi(x: float, shape: str) -> float:
    return 1.0 - x if shape == "linear" else 0.5 * (1.0 + math.cos(math.pi * x))


def wsd_closed(t, *, T_w, T, D, eta_0, eta_max, eta_min, shape):
    """WSD written out: linear warmup, the peak held up to D, then phi down to eta_min at T, held after."""
    if t < T_w:
        return eta_0 + (eta_max - eta_0) * t / T_w
    if t >= T:
        return eta_min
    if t < D:
        return eta_max
    return eta_min + (eta_max - eta_min) * phi((t - D) / (T - D), shape)


def new_closed(t, *, t_e, eta_e, ratio, w, D, T, eta_min, shape):
    """The new entries of a growth at t_e in the stable phase (re-warmup ends before D): linear from eta_e to
    ratio * eta_e over w steps, held, then the baseline's decay shape from D down to eta_min at T."""
    peak = ratio * eta_e
    if t < t_e + w:
        return eta_e + (peak - eta_e) * (t - t_e) / w
    if t >= T:
        return eta_min
    if t < D:
        return peak
    return eta_min + (peak - eta_min) * phi((t - D) / (T - D), shape)


# ------------------------------------------------------------------------------------------------ schedule values
@pytest.mark.parametrize("shape", ["linear", "cosine"])
@pytest.mark.parametrize("T_w,T,f,D,eta_0,eta_max,eta_min", [
    (10, 100, 0.2, 80, 0.0, 1.0, 0.1),
    (30, 1000, 0.1, 900, 1e-5, 3e-4, 3e-6),
    (5, 30, 0.3, 21, 0.0, 0.05, 0.005),
    (3, 300, 0.2, 240, 0.0, 1e-3, 0.0),  # 0.2 * 300 = 60.000000000000007 in floats: still 60 decay steps
    (10, 100, 1.0, 10, 0.0, 1.0, 0.0),  # no stable phase: warmup then decay
    (0, 50, 0.5, 25, 0.0, 1e-3, 1e-5),
])
def test_wsd_equals_its_closed_form(shape, T_w, T, f, D, eta_0, eta_max, eta_min):
    assert wsd_decay_start(warmup_steps=T_w, total_steps=T, decay_fraction=f) == D
    kw = dict(warmup_steps=T_w, total_steps=T, lr_init=eta_0, lr_max=eta_max, lr_min=eta_min, decay_fraction=f,
              decay_shape=shape)
    for t in sorted({0, 1, T_w // 2, max(T_w - 1, 0), T_w, T_w + 1, (T_w + D) // 2, D - 1, D, D + 1, (D + T) // 2,
                     T - 1, T, T + 7}):
        want = wsd_closed(t, T_w=T_w, T=T, D=D, eta_0=eta_0, eta_max=eta_max, eta_min=eta_min, shape=shape)
        assert wsd_lr(t, **kw) == pytest.approx(want, rel=1e-12, abs=1e-15), t
    # the stable phase is the exact peak, and the decay ends exactly at eta_min
    assert all(wsd_lr(t, **kw) == eta_max for t in range(T_w, D + 1))
    assert wsd_lr(T, **kw) == eta_min
    assert wsd_lr(D + 0.5, **kw) < eta_max  # real-valued steps (decay_speedup evaluates between steps)


@pytest.mark.parametrize("shape", ["linear", "cosine"])
def test_wsd_lambda_drives_lambdalr_and_pickles(shape):
    param = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([param], lr=0.3)
    fn = WSDLambda(5, 40, 0.1, decay_fraction=0.25, decay_shape=shape, init_lr_ratio=0.2)
    assert fn.decay_start == 30 and fn.min_lr_ratio == 0.1 and fn.total_steps == 40
    sched = torch.optim.lr_scheduler.LambdaLR(opt, fn)
    for step in range(45):
        want = wsd_closed(step, T_w=5, T=40, D=30, eta_0=0.06, eta_max=0.3, eta_min=0.03, shape=shape)
        assert opt.param_groups[0]["lr"] == pytest.approx(want, rel=1e-12), step
        opt.step()
        sched.step()
    assert f"decay_shape={shape!r}" in repr(fn) and "decay_fraction=0.25" in repr(fn)
    clone = pickle.loads(pickle.dumps(fn))
    assert [clone(s) for s in range(45)] == [fn(s) for s in range(45)]
    # LambdaLR checkpoints hold the lambda's __dict__: a state_dict round trip restores it
    other = torch.optim.lr_scheduler.LambdaLR(torch.optim.SGD([param], lr=0.3), WSDLambda(1, 2))
    other.load_state_dict(sched.state_dict())
    assert repr(other.lr_lambdas[0]) == repr(fn)


@pytest.mark.parametrize("kwargs, match", [
    (dict(decay_fraction=0.0), "decay_fraction"), (dict(decay_fraction=1.5), "decay_fraction"),
    (dict(decay_shape="exp"), "decay_shape"), (dict(warmup_steps=50), "warmup_steps"),
])
def test_wsd_refuses_bad_settings(kwargs, match):
    args = dict(warmup_steps=5, total_steps=40) | kwargs
    with pytest.raises(ValueError, match=match):
        WSDLambda(**args)


def test_rewarmup_wsd_closed_forms():
    kw = dict(growth_step=AT, lr_at_growth=LR, ratio=RATIO, warmup_steps=REWARM, total_steps=MAX_STEPS,
              min_lr=LR * MIN_RATIO, decay_start=DECAY_START)
    for shape in ("linear", "cosine"):
        for t in range(AT, MAX_STEPS + 3):
            want = new_closed(t, t_e=AT, eta_e=LR, ratio=RATIO, w=REWARM, D=DECAY_START, T=MAX_STEPS,
                              eta_min=LR * MIN_RATIO, shape=shape)
            assert rewarmup_wsd_lr(t, **kw, decay_shape=shape) == pytest.approx(want, rel=1e-12), (shape, t)
    # a re-warmup that runs into the decay phase: continuous, the ramp decayed as it rises, min_lr at the end
    spill = dict(kw, growth_step=18, warmup_steps=6)
    values = [rewarmup_wsd_lr(t, **spill) for t in range(18, MAX_STEPS + 1)]
    assert values[0] == LR and values[-1] == LR * MIN_RATIO
    assert values[3] == pytest.approx(LR * (1 + 0.5 * 3 / 6))  # step 21 = D: not decayed yet
    t = 23
    ramp = LR * (1 + 0.5 * (t - 18) / 6)
    assert rewarmup_wsd_lr(t, **spill) == pytest.approx(LR * MIN_RATIO + (ramp - LR * MIN_RATIO) * (1 - 2 / 9))
    # a growth inside the decay phase starts at the LR at growth (continuous with the baseline)
    inside = dict(kw, growth_step=25)
    assert rewarmup_wsd_lr(25, **inside) == pytest.approx(LR)
    assert rewarmup_wsd_lr(MAX_STEPS, **inside) == LR * MIN_RATIO
    with pytest.raises(ValueError, match="growth_step"):
        rewarmup_wsd_lr(AT - 1, **kw)
    # RewarmupLambda with decay_start is this schedule; without it the paper's cosine tail
    lam = RewarmupLambda(**kw)
    assert [lam(k) for k in range(25)] == [rewarmup_wsd_lr(AT + k, **kw) for k in range(25)]
    cos = RewarmupLambda(**{k: v for k, v in kw.items() if k != "decay_start"})
    assert cos(15) == rewarmup_lr(AT + 15, **{k: v for k, v in kw.items() if k != "decay_start"})


def test_check_growth_before_decay():
    check_growth_before_decay([0, 10, 239], decay_start=240, total_steps=300)
    with pytest.raises(ValueError, match=r"growth.stages\[1\].at_step: the growth at step 240 falls inside the WSD "
                                         r"decay phase \(steps 240..300, x=1\)"):
        check_growth_before_decay([10, 240], decay_start=240, total_steps=300,
                                  names=["growth.stages[0].at_step", "growth.stages[1].at_step"], setting=", x=1")


# ------------------------------------------------------------------------------------------------ in training
class WSDModule(TinyModule):
    """TinyModule with the package's WSD schedule (optionally two param groups with their own base LRs)."""

    def __init__(self, *args, shape="linear", lrs=None, user_lambda=False, **kwargs):
        super().__init__(*args, **kwargs)
        self.shape, self.lrs, self.user_lambda = shape, lrs, user_lambda

    def _schedule(self, opt):
        fn = WSDLambda(WARMUP, self.max_steps, self.min_lr_ratio, decay_fraction=FRACTION, decay_shape=self.shape)
        if self.user_lambda:  # the user's own WSD: a plain function the callback cannot look into
            fn = lambda s, f=fn: f(s)
        return torch.optim.lr_scheduler.LambdaLR(opt, fn)

    def configure_optimizers(self):
        if self.lrs is None:
            return super().configure_optimizers()
        matrices = [p for p in self.model.parameters() if p.ndim == 2]
        vectors = [p for p in self.model.parameters() if p.ndim < 2]
        opt = torch.optim.SGD([{"params": matrices, "lr": self.lrs[0]}, {"params": vectors, "lr": self.lrs[1]}])
        return {"optimizer": opt, "lr_scheduler": {"scheduler": self._schedule(opt), "interval": "step"}}


def new_mask(name: str, shape) -> torch.Tensor:
    """New entries of paper_stage(AT, n_embd=48, intermediate_size=128) from n_embd 32, intermediate 64."""
    mask = torch.zeros(shape, dtype=torch.bool)
    if name.endswith("mlp.proj.weight"):
        mask[32:, :] = True
        mask[:32, 64:] = True
    elif name.endswith(("fc_1.weight", "fc_2.weight")):
        mask[64:, :] = True
        mask[:64, 32:] = True
    elif name.endswith("attn.proj.weight"):
        mask[32:, :] = True
    elif name.endswith(("qkv.weight", "lm_head.weight", "wte.weight")):
        mask[:, 32:] = True
    elif len(shape) == 1:  # norms
        mask[32:] = True
    return mask


def check_applied(recorder: RecordSteps, expected_old, expected_new, *, rtol=1e-6) -> dict[str, int]:
    """Every recorded step's applied LR of old and new entries of every tensor against the closed forms."""
    checked = {"old": 0, "new": 0}
    assert [r["step"] for r in recorder.records] == list(range(MAX_STEPS))
    for record in recorder.records:
        step = record["step"]
        for name, before in record["before"].items():
            new = new_mask(name, before.shape) if step >= AT else torch.zeros_like(before, dtype=torch.bool)
            for kind, mask, want in (("old", ~new, expected_old(name, step)), ("new", new, expected_new(name, step))):
                got = applied_lr(before, record["grad"][name], record["after"][name], mask)
                if got.numel():
                    torch.testing.assert_close(got, torch.full_like(got, want), rtol=rtol, atol=0,
                                               msg=f"step {step}, {name}, {kind} entries: expected {want:.6g}")
                    checked[kind] += got.numel()
    assert checked["old"] > 1000 and checked["new"] > 1000, checked
    return checked


def _fit(module, stages, *, accumulate=1, callbacks=(), min_lr=None, **kw):
    growth = WidthGrowthCallback(stages, min_lr=min_lr, symmetry_every_n_steps=0)
    trainer = make_trainer([*callbacks, growth], max_steps=MAX_STEPS, accumulate=accumulate, precision="64-true",
                           **kw)
    trainer.fit(module)
    return trainer, growth


def _stage(**kw) -> GrowthStage:
    return paper_stage(AT, n_embd=48, intermediate_size=128, rewarmup_ratio=RATIO, rewarmup_steps=REWARM, **kw)


@pytest.mark.parametrize("accumulate", [1, 2])
@pytest.mark.parametrize("shape", ["linear", "cosine"])
def test_new_entries_hold_their_peak_then_decay_with_the_baseline(shape, accumulate):
    """A growth in the stable phase, two param groups (their own base LRs), min_lr read from WSDLambda: old entries
    follow the WSD baseline; new entries re-warm to 1.5x the LR at growth, hold it through the stable phase and decay
    with the baseline's decay phase (same start step, same shape) to min_lr at max_steps."""
    lrs = (LR, LR / 2)
    module = WSDModule(optimizer="sgd", max_steps=MAX_STEPS, min_lr_ratio=MIN_RATIO, accumulate=accumulate,
                       shape=shape, lrs=lrs)
    recorder = RecordSteps()
    trainer, growth = _fit(module, [_stage()], accumulate=accumulate, callbacks=[recorder])

    def base(name):
        return lrs[0] if recorder.records[-1]["before"][name].ndim == 2 else lrs[1]

    def old(name, t):
        b = base(name)
        return wsd_closed(t, T_w=WARMUP, T=MAX_STEPS, D=DECAY_START, eta_0=0.0, eta_max=b, eta_min=b * MIN_RATIO,
                          shape=shape)

    def new(name, t):
        b = base(name)
        return new_closed(t, t_e=AT, eta_e=b, ratio=RATIO, w=REWARM, D=DECAY_START, T=MAX_STEPS,
                          eta_min=b * MIN_RATIO, shape=shape)

    check_applied(recorder, old, new)
    # the new entries really held a peak above the old entries' LR all through the stable phase and decayed after
    assert all(new("lm_head.weight", t) == RATIO * LR for t in range(AT + REWARM, DECAY_START + 1))
    assert new("lm_head.weight", DECAY_START + 4) < 0.8 * RATIO * LR
    assert growth._records[0].lr_decay == [{"decay_start": DECAY_START, "decay_shape": shape}] * 2
    assert growth._records[0].min_lr == [lrs[0] * MIN_RATIO, lrs[1] * MIN_RATIO]  # read from WSDLambda


def _user_lr(t):
    return LR * wsd_closed(t, T_w=WARMUP, T=MAX_STEPS, D=DECAY_START, eta_0=0.0, eta_max=1.0, eta_min=MIN_RATIO,
                           shape="linear")


def _fast_position(t, end):  # fast_decay_position written out
    if t <= AT:
        return t
    if t >= end:
        return MAX_STEPS
    return AT + (t - AT) * (MAX_STEPS - AT) / (end - AT)


@pytest.mark.parametrize("accumulate", [1, 2])
@pytest.mark.parametrize("variant", ["decay_speedup", "rewarmup_scope_all", "symmetry_loop"])
def test_baseline_options_and_symmetry_loop_on_wsd(variant, accumulate):
    """``decay_speedup=0.5``: the WSD baseline after the growth runs in half the remaining steps (its stable phase
    too), then holds; the new entries hold their peak to where the sped-up baseline starts decaying (step 14.5), then
    decay with it to min_lr at its end (19). ``rewarmup_scope='all'``: every entry follows the WSD re-warmup.
    Symmetry loop: the boost multiplies the WSD re-warmup."""
    eta_min = LR * MIN_RATIO
    if variant == "decay_speedup":
        stage, end = _stage(decay_speedup=0.5), AT + round(0.5 * (MAX_STEPS - AT))
        assert end == 19

        def old(name, t):
            return _user_lr(t) if t < AT else _user_lr(_fast_position(t, end))

        def new(name, t):  # hold until the mapped decay start 14.5, then linear down to eta_min at 19
            if t < AT + REWARM:
                return LR * (1 + (RATIO - 1) * (t - AT) / REWARM)
            return RATIO * LR if t < 14.5 else max(eta_min, eta_min + (RATIO * LR - eta_min) * (1 - (t - 14.5) / 4.5))
    elif variant == "rewarmup_scope_all":
        stage = _stage(rewarmup_scope="all")

        def new(name, t):
            return new_closed(t, t_e=AT, eta_e=LR, ratio=RATIO, w=REWARM, D=DECAY_START, T=MAX_STEPS, eta_min=eta_min,
                              shape="linear")

        def old(name, t):
            return _user_lr(t) if t < AT else new(name, t)
    else:
        stage = _stage(symmetry_target=0.01, symmetry_interval=2, symmetry_max_boost=4.0, symmetry_release="hold")

        def old(name, t):
            return _user_lr(t)

        def new(name, t):
            boost = min(2.0 ** max(0, (t - AT) // 2), 4.0)
            return boost * new_closed(t, t_e=AT, eta_e=LR, ratio=RATIO, w=REWARM, D=DECAY_START, T=MAX_STEPS,
                                      eta_min=eta_min, shape="linear")
    module = WSDModule(optimizer="sgd", lr=LR, max_steps=MAX_STEPS, min_lr_ratio=MIN_RATIO, accumulate=accumulate)
    recorder = RecordSteps()
    _fit(module, [stage], accumulate=accumulate, callbacks=[recorder])
    check_applied(recorder, old, new)


# ------------------------------------------------------------------------------------------------ resume
@pytest.mark.parametrize("scope", ["new", "all"])
def test_bit_exact_resume_across_a_growth_under_wsd(tmp_path: Path, scope):
    """Resume from before, at and after a growth in the stable phase, and from inside the decay phase, ends bit for
    bit where the uninterrupted run ends (AdamW, float32); the record holds the decay phase as plain data."""
    max_steps = 14  # decay over the last 30%: steps 9..14
    stages = lambda: [paper_stage(4, n_embd=64, intermediate_size=128, rewarmup_ratio=2.0,
                                  rewarmup_steps=3, rewarmup_scope=scope)]
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1, filename="{step}")
    reference = WSDModule(max_steps=max_steps)
    growth = WidthGrowthCallback(stages())
    trainer = make_trainer([ckpt, growth], max_steps=max_steps, enable_checkpointing=True)
    trainer.fit(reference)
    assert growth._records[0].lr_decay == [{"decay_start": 9, "decay_shape": "linear"}]
    expected = {n: p.detach().clone() for n, p in reference.model.state_dict().items()}
    saved = torch.load(tmp_path / "step=6.ckpt", map_location="cpu", weights_only=False)
    state = saved["callbacks"]["GrowthCallback"]
    assert state["records"][0]["lr_decay"] == [{"decay_start": 9, "decay_shape": "linear"}]
    for step in (3, 4, 5, 8, 11):
        resumed = WSDModule(max_steps=max_steps)
        trainer = make_trainer([WidthGrowthCallback(stages())], max_steps=max_steps)
        trainer.fit(resumed, ckpt_path=str(tmp_path / f"step={step}.ckpt"))
        assert_states_equal(resumed.model.state_dict(), expected, f"resume from step {step}")


# ------------------------------------------------------------------------------------------------ min_lr, user WSD
def test_user_wsd_lambda_needs_min_lr_and_gets_the_cosine_tail_with_a_warning():
    """A user's own WSD ``LambdaLR`` (not WSDLambda): ``min_lr`` cannot be read (refused, naming min_lr); given, the
    new entries get the documented cosine tail, and the callback warns that the schedule holds its LR after the
    growth, pointing at WSDLambda."""
    module = WSDModule(optimizer="sgd", lr=LR, max_steps=MAX_STEPS, min_lr_ratio=MIN_RATIO, user_lambda=True)
    with pytest.raises(GrowthError, match=r"min_lr=<LR"):
        _fit(module, [_stage()])
    module = WSDModule(optimizer="sgd", lr=LR, max_steps=MAX_STEPS, min_lr_ratio=MIN_RATIO, user_lambda=True)
    with pytest.warns(UserWarning, match="holds its LR over steps 8..16 .* use lightning_sparkling.growth.schedules."
                                         "WSDLambda"):
        _, growth = _fit(module, [_stage()], min_lr=LR * MIN_RATIO)
    lam = growth._schedulers[0].lr_lambdas[0]
    assert lam.decay_start is None and growth._records[0].lr_decay is None
    kw = dict(growth_step=AT, lr_at_growth=LR, ratio=RATIO, warmup_steps=REWARM, total_steps=MAX_STEPS,
              min_lr=LR * MIN_RATIO)
    assert [lam(k) for k in range(20)] == [rewarmup_lr(AT + k, **kw) for k in range(20)]


def test_callback_warns_about_a_growth_inside_the_wsd_decay_phase():
    module = WSDModule(max_steps=MAX_STEPS, min_lr_ratio=MIN_RATIO)
    stage = paper_stage(DECAY_START, n_embd=48, rewarmup_steps=3)
    with pytest.warns(UserWarning, match=r"GrowthStage\(at_step=21\): the growth at step 21 falls inside the WSD "
                                         r"decay phase \(steps 21..30\)"):
        _fit(module, [stage])
    module = WSDModule(max_steps=MAX_STEPS, min_lr_ratio=MIN_RATIO)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.filterwarnings("ignore", message=".*(does not have many workers|LightningModule.*GPU).*")
        _fit(module, [paper_stage(DECAY_START - 1, n_embd=48, rewarmup_steps=3)])  # the last stable step: fine


def test_wsd_lambda_stepped_per_epoch_is_refused():
    class PerEpoch(WSDModule):
        def configure_optimizers(self):
            opt = torch.optim.SGD(self.parameters(), lr=LR)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": self._schedule(opt), "interval": "epoch"}}

    with pytest.raises(GrowthError, match="interval='epoch'"):
        _fit(PerEpoch(max_steps=MAX_STEPS), [_stage()])


# ------------------------------------------------------------------------------------------------ CLI
def _quickstart(tmp_path: Path, **train) -> Path:
    config = yaml.safe_load((ROOT / "examples" / "quickstart.yaml").read_text())
    config["train"].update(train)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_cli_builds_wsd_and_plans_it(tmp_path, capsys):
    from lightning_sparkling.pretrain.cli import build_module, main, parse

    path = _quickstart(tmp_path, lr_schedule="wsd", lr_decay_fraction=0.25, lr_decay_shape="cosine")
    _, run, dumped = parse(["--config", str(path)], "plan")
    assert (run.train.lr_schedule, run.train.lr_decay_fraction, run.train.lr_decay_shape) == ("wsd", 0.25, "cosine")
    steps, at = run.steps, run.stages[0].at_step
    module = build_module(run)
    config = module.configure_optimizers()
    fn = config["lr_scheduler"]["scheduler"].lr_lambdas[0]
    assert isinstance(fn, WSDLambda)
    assert (fn.total_steps, fn.decay_fraction, fn.decay_shape) == (steps, 0.25, "cosine")
    assert fn.decay_start == steps - math.ceil(0.25 * steps) and at < fn.decay_start
    assert main(["plan", "--config", str(path)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert f"held to the WSD decay at step {fn.decay_start:,}, then cosine decay to min_lr" in printed
    # the default stays the paper's cosine
    _, plain, _ = parse(["--config", str(_quickstart(tmp_path))], "plan")
    assert plain.train.lr_schedule == "cosine"
    from lightning_sparkling.growth.schedules import WarmupCosineLambda
    assert isinstance(build_module(plain).configure_optimizers()["lr_scheduler"]["scheduler"].lr_lambdas[0],
                      WarmupCosineLambda)


@pytest.mark.parametrize("train, stages, key", [
    (dict(lr_schedule="wsd"), "[{at_step: 240, n_embd: 128, rewarmup_steps: 5}]", "growth.stages[0].at_step"),
    (dict(lr_schedule="wsd", lr_decay_fraction=0.5), "[{at_step: 100, n_embd: 96, rewarmup_steps: 5}, "
     "{at_step: 150, n_embd: 128, rewarmup_steps: 5}]", "growth.stages[1].at_step"),
    (dict(lr_schedule="wsd"), "[{at_tokens: 512000, n_embd: 128, rewarmup_steps: 5}]",
     "growth.stages[0].at_tokens"),
    (dict(lr_schedule="linear"), None, "train.lr_schedule"),
    (dict(lr_schedule="wsd", lr_decay_fraction=0.0), None, "train.lr_decay_fraction"),
    (dict(lr_schedule="wsd", lr_decay_fraction=1.5), None, "train.lr_decay_fraction"),
    (dict(lr_schedule="wsd", lr_decay_shape="exp"), None, "train.lr_decay_shape"),
])
def test_cli_refuses_a_growth_in_the_decay_phase_and_bad_keys(tmp_path, capsys, train, stages, key):
    from lightning_sparkling.pretrain.cli import parse

    args = ["--config", str(_quickstart(tmp_path, **train))] + (["--growth.stages", stages] if stages else [])
    with pytest.raises(SystemExit):
        parse(args, "plan")
    err = capsys.readouterr().err
    assert f"error: {key}:" in err, err
    if "stages" in key:
        assert "falls inside the WSD decay phase" in err and "train.lr_decay_fraction=" in err


def test_cli_accepts_a_growth_on_the_last_stable_step(tmp_path):
    from lightning_sparkling.pretrain.cli import parse

    _, run, _ = parse(["--config", str(_quickstart(tmp_path, lr_schedule="wsd")), "--growth.stages",
                       "[{at_step: 239, n_embd: 128, rewarmup_steps: 5}]"], "plan")
    assert run.steps == 300 and run.stages[0].at_step == 239
