"""The options that make the grown capacity learn (issue 15), read from the parameters:

- ``bias_correction='fresh'``: new entries move as under an Adam that started at the growth (their own step count),
  checked against a hook-free twin optimizer whose ``step`` is set to the new entries' age;
- ``symmetry_target``: the new entries' LR is doubled every ``symmetry_interval`` steps while their copies' mean
  cosine to their sources is above the target, then handed back to the re-warmup schedule; the cosine is measured
  here from the weights, the LR from the updates (SGD: ``-delta / grad``).

Both on accumulation 1 and 2, and resumed bit for bit from a checkpoint taken while the boost is on.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest

import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint

from lightning_sparkling import GrowthStage, WidthGrowthCallback, rewarmup_lr
from lightning_sparkling.growth.plan import GrowthError, plan_growth
from lightning_sparkling.growth.schedules import RewarmupLambda, WarmupCosineLambda, fresh_bias_factor

from _measure import RecordSteps, applied_lr
from _tiny import TinyModule, make_trainer, paper_stage, tiny_config

MAX_STEPS = 20
AT = 6


# ------------------------------------------------------------------------------------------------ fresh bias correction
def test_fresh_bias_factor_is_the_ratio_of_two_adams_first_updates():
    """Two scalar Adams fed the same gradients: one fresh, one whose step count says it is ``t0`` steps old (zero
    moments, the state of a new entry). The fresh one's update is ``fresh_bias_factor(k, t0 + k)`` times the other's
    at every step ``k`` (``eps`` negligible)."""
    betas, t0 = (0.9, 0.95), 37
    fresh = torch.nn.Parameter(torch.zeros(5, dtype=torch.float64))
    mature = torch.nn.Parameter(torch.zeros(5, dtype=torch.float64))
    opt_f = torch.optim.Adam([fresh], lr=1e-3, betas=betas, eps=1e-30)
    opt_m = torch.optim.Adam([mature], lr=1e-3, betas=betas, eps=1e-30)
    mature.grad = torch.zeros_like(mature)
    opt_m.step()  # create the state, then make it "t0 steps old with zero moments"
    opt_m.state[mature]["step"].fill_(t0)
    opt_m.state[mature]["exp_avg"].zero_()
    opt_m.state[mature]["exp_avg_sq"].zero_()
    mature.data.zero_()
    g = torch.Generator().manual_seed(0)
    for k in range(1, 60):
        grad = torch.randn(5, generator=g, dtype=torch.float64) + 0.3
        before_f, before_m = fresh.detach().clone(), mature.detach().clone()
        fresh.grad, mature.grad = grad.clone(), grad.clone()
        opt_f.step()
        opt_m.step()
        want = fresh_bias_factor(k, t0 + k, betas)
        torch.testing.assert_close(fresh.detach() - before_f, want * (mature.detach() - before_m), rtol=1e-9, atol=0)
    assert fresh_bias_factor(1, 1000, betas) == pytest.approx(1 / (1 - 0.9) * math.sqrt(1 - 0.95))
    with pytest.raises(ValueError, match="1 <= k <= t"):
        fresh_bias_factor(0, 5, betas)


def test_rewarmup_lambda_with_betas_multiplies_by_the_factor():
    kw = dict(growth_step=10, lr_at_growth=1e-3, ratio=1.3, warmup_steps=5, total_steps=100, min_lr=1e-5)
    plain, fresh = RewarmupLambda(**kw), RewarmupLambda(**kw, betas=(0.9, 0.95))
    for j in (0, 1, 4, 30):
        assert fresh(j) == pytest.approx(plain(j) * fresh_bias_factor(j + 1, 10 + j + 1, (0.9, 0.95)), rel=1e-12)
    old = RewarmupLambda(**kw)
    del old.betas  # a lambda pickled by a version without the key
    assert old(3) == plain(3)


def _adamw_module(accumulate: int) -> TinyModule:
    class _NoDecayAdamW(TinyModule):
        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.model.parameters(), lr=1e-2, weight_decay=0.0, betas=(0.9, 0.95),
                                    eps=1e-12)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, WarmupCosineLambda(5, self.max_steps, 0.1))
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    return _NoDecayAdamW(max_steps=MAX_STEPS, accumulate=accumulate)


class _FreshTwin(RecordSteps):
    """Also records, per step, the parameters after the same step taken by a hook-free clone of the optimizer whose
    ``step`` counters are set to ``global_step - AT`` (the new entries' age: after the step it is ``k``)."""

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        super().on_before_optimizer_step(trainer, pl_module, optimizer)
        if trainer.global_step < AT:
            return
        named = dict(pl_module.model.named_parameters())
        name_of = {id(p): n for n, p in named.items()}
        clones, groups = {}, []
        for group in optimizer.param_groups:
            params = []
            for p in group["params"]:
                c = torch.nn.Parameter(p.detach().clone())
                c.grad = p.grad.detach().clone()
                clones[name_of[id(p)]] = c
                params.append(c)
            groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": params})
        twin = type(optimizer)(groups)
        state = copy.deepcopy(optimizer.state_dict()["state"])
        for s in state.values():
            s["step"] = torch.tensor(float(trainer.global_step - AT))
        twin.load_state_dict({"state": state, "param_groups": twin.state_dict()["param_groups"]})
        with torch.no_grad():
            twin.step()
        self._pending["fresh"] = {n: c.detach() for n, c in clones.items()}


@pytest.mark.parametrize("accumulate", [1, 2])
def test_fresh_bias_correction_moves_new_entries_like_a_fresh_adam(accumulate):
    """AdamW (no decay), copy-copy MLP growth with ``bias_correction='fresh'``: at every step after the growth the
    new entries move by ``lr_new / lr_group`` times what a fresh AdamW (the twin with the new entries' step count)
    moves them, old entries exactly as the optimizer's own step. With ``shared`` the same check fails (the first
    update would be 0.45x)."""
    stage = paper_stage(AT, intermediate_size=96, rewarmup_ratio=1.5, rewarmup_steps=4, bias_correction="fresh")
    module = _adamw_module(accumulate)
    recorder = _FreshTwin(baseline=True)
    trainer = make_trainer([recorder, WidthGrowthCallback(stage)], max_steps=MAX_STEPS, accumulate=accumulate,
                           precision="64-true")
    trainer.fit(module)
    schedule = WarmupCosineLambda(5, MAX_STEPS, 0.1)
    checked = 0
    for record in recorder.records:
        step = record["step"]
        if step < AT:
            continue
        ratio = rewarmup_lr(step, growth_step=AT, lr_at_growth=1e-2 * schedule(AT), ratio=1.5, warmup_steps=4,
                            total_steps=MAX_STEPS, min_lr=1e-3) / (1e-2 * schedule(step))
        for name in ("transformer.h.0.mlp.fc_1.weight", "transformer.h.1.mlp.proj.weight"):
            before, after = record["before"][name], record["after"][name]
            new = torch.zeros_like(before, dtype=torch.bool)
            if name.endswith("fc_1.weight"):
                new[64:] = True
            else:
                new[:, 64:] = True
            assert torch.equal(after[~new], record["baseline"][name][~new]), (step, name)
            fresh_update = record["fresh"][name][new] - before[new]
            torch.testing.assert_close(after[new] - before[new], ratio * fresh_update, rtol=2e-5, atol=0,
                                       msg=f"step {step}, {name}")
            checked += 1
    assert checked == 2 * (MAX_STEPS - AT)


def test_fresh_bias_correction_needs_betas_and_a_rewarmup():
    with pytest.raises(ValueError, match="rewarmup_ratio is None"):
        paper_stage(5, n_embd=48, bias_correction="fresh", rewarmup_ratio=None)
    with pytest.raises(ValueError, match="bias_correction='newest'"):
        paper_stage(5, n_embd=48, bias_correction="newest")
    module = TinyModule(optimizer="sgd", max_steps=MAX_STEPS)
    trainer = make_trainer([WidthGrowthCallback(paper_stage(AT, n_embd=48, rewarmup_steps=3,
                                                            bias_correction="fresh"))], max_steps=MAX_STEPS)
    with pytest.raises(GrowthError, match="no Adam 'betas'.*bias_correction='shared'"):
        trainer.fit(module)
    assert module.steps_run == 0


# ------------------------------------------------------------------------------------------------ symmetry target
def _mlp_copy_cosine(weights: dict[str, torch.Tensor], old: int, src: torch.Tensor) -> float:
    """The mean over every copy-initialized MLP tensor of the mean cosine of each copied channel to its source:
    rows ``old + j`` vs ``src[j]`` of ``fc_1`` / ``fc_2`` (fan-out), columns of ``proj`` (fan-in)."""
    per_tensor = []
    for i in range(2):
        for n in ("fc_1", "fc_2", "proj"):
            w = weights[f"transformer.h.{i}.mlp.{n}.weight"]
            w = w.T if n == "proj" else w
            per_tensor.append(float(F.cosine_similarity(w[old:], w[src], dim=1).mean()))
    return sum(per_tensor) / len(per_tensor)


def _symmetry_run(tmp_path: Path | None, accumulate: int, target: float, ckpt_every: int | None = None,
                  resume: str | None = None, max_boost: float = 4.0, precision: str = "64-true",
                  release: str = "schedule"):
    stage = paper_stage(AT, intermediate_size=96, rewarmup_ratio=1.5, rewarmup_steps=4, symmetry_target=target,
                        symmetry_interval=2, symmetry_max_boost=max_boost, symmetry_release=release)
    module = TinyModule(optimizer="sgd", lr=0.05, max_steps=MAX_STEPS, accumulate=accumulate)
    recorder = RecordSteps()
    callbacks = [recorder, WidthGrowthCallback(stage, symmetry_every_n_steps=0)]
    if ckpt_every:
        callbacks.append(ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=ckpt_every, save_top_k=-1,
                                         filename="{step}"))
    trainer = make_trainer(callbacks, max_steps=MAX_STEPS, accumulate=accumulate, precision=precision,
                           enable_checkpointing=bool(ckpt_every))
    trainer.fit(module, ckpt_path=resume)
    return module, recorder


@pytest.mark.slow
@pytest.mark.parametrize("accumulate, release", [(1, "schedule"), (2, "schedule"), (1, "hold"), (2, "hold")])
def test_symmetry_target_boosts_the_new_entries_lr_until_the_copies_part(accumulate, release):
    """SGD, float64, MLP 64 -> 96 by copy-copy, checks every 2 steps, boost up to 4x. The applied LR of the new
    entries (from the updates) is the re-warmup schedule times a boost that doubles at each check whose cosine
    (measured here, from the weights) is above the target; at the first check below it the checks stop and the
    boost drops to 1 for good (``schedule``) or stays where it is (``hold``)."""
    src = plan_growth(tiny_config(), paper_stage(AT, intermediate_size=96), seed=0).channels["intermediate_size"].src
    # the target: the cosine the copies reach 8 steps after growth without a boost, so the boost must end
    _, plain = _symmetry_run(None, accumulate, target=0.999999, max_boost=1.0)
    after = {r["step"] + 1: r["after"] for r in plain.records}
    target = _mlp_copy_cosine(after[AT + 8], 64, src)
    assert target < 1.0, target  # the copies did part a little without a boost
    module, recorder = _symmetry_run(None, accumulate, target=target, release=release)
    schedule = WarmupCosineLambda(5, MAX_STEPS, 0.1)
    boost, done, boosts = 1.0, False, []
    for record in recorder.records:
        step = record["step"]
        if step < AT:
            continue
        if step > AT and (step - AT) % 2 == 0 and not done:  # the check after the step that made `step` steps
            weights = record["before"]  # = after `step` optimizer steps
            cosine = _mlp_copy_cosine(weights, 64, src)
            if cosine < target:
                boost, done = (1.0 if release == "schedule" else boost), True
            else:
                boost = min(2 * boost, 4.0)
        boosts.append(boost)
        want = boost * rewarmup_lr(step, growth_step=AT, lr_at_growth=0.05 * schedule(AT), ratio=1.5,
                                   warmup_steps=4, total_steps=MAX_STEPS, min_lr=0.005)
        name = "transformer.h.1.mlp.fc_2.weight"
        before = record["before"][name]
        got = applied_lr(before[64:], record["grad"][name][64:], record["after"][name][64:],
                         torch.ones_like(before[64:], dtype=torch.bool))
        assert got.numel() > 100
        torch.testing.assert_close(got, torch.full_like(got, want), rtol=1e-6, atol=0,
                                   msg=f"step {step}: boost {boost}")
    assert max(boosts) >= 2.0 and done, boosts  # both regimes were checked
    assert boosts[-1] == (1.0 if release == "schedule" else max(boosts)), boosts


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])
def test_symmetry_boost_resumes_bit_exact(tmp_path: Path, accumulate):
    """A checkpoint taken while the boost is 2x or 4x resumes to the same final weights, bit for bit (float32:
    Lightning's ``64-true`` resume is not bit-exact even without growth)."""
    target = 0.2  # never reached in 20 steps: the boost is on from the first check to the end
    full, _ = _symmetry_run(tmp_path, accumulate, target, ckpt_every=1, precision="32-true")
    for step in (9, 10, 13):  # boost 2x after the check at 8; at 10 the check and the save share a step
        ckpt = tmp_path / f"step={step}.ckpt"
        assert ckpt.is_file(), sorted(p.name for p in tmp_path.iterdir())
        resumed, _ = _symmetry_run(tmp_path / "again", accumulate, target, resume=str(ckpt), precision="32-true")
        for name, value in full.model.state_dict().items():
            assert torch.equal(value, resumed.model.state_dict()[name]), (step, name)


def test_symmetry_target_settings_are_checked():
    with pytest.raises(ValueError, match=r"symmetry_target=1\.5.*\(0, 1\)"):
        paper_stage(5, n_embd=48, symmetry_target=1.5)
    with pytest.raises(ValueError, match="copies nothing"):
        paper_stage(5, n_embd=48, init="random-random", symmetry_target=0.5)
    with pytest.raises(ValueError, match="rewarmup_ratio is None"):
        paper_stage(5, n_embd=48, symmetry_target=0.5, rewarmup_ratio=None)
    with pytest.raises(ValueError, match="rewarmup_scope='all' every entry follows one LR"):
        paper_stage(5, n_embd=48, symmetry_target=0.5, rewarmup_scope="all")
    with pytest.raises(ValueError, match="symmetry_interval=0"):
        paper_stage(5, n_embd=48, symmetry_target=0.5, symmetry_interval=0)
    with pytest.raises(ValueError, match="symmetry_release='never'"):
        paper_stage(5, n_embd=48, symmetry_target=0.5, symmetry_release="never")
    with pytest.raises(ValueError, match="symmetry_max_boost=0.5"):
        paper_stage(5, n_embd=48, symmetry_target=0.5, symmetry_max_boost=0.5)
    stage = paper_stage(5, n_embd=48, symmetry_target=0.5)
    assert GrowthStage(**stage.to_dict()) == stage


def test_fresh_bias_correction_uses_each_param_groups_own_betas():
    """Two AdamW param groups with different betas (matrices 0.9/0.95, vectors 0.8/0.99, no decay) and an ``n_embd``
    growth, so both groups hold new entries: each group's new entries move by the re-warmup ratio times a fresh
    AdamW's update with that group's betas."""

    class _TwoBetas(TinyModule):
        def configure_optimizers(self):
            matrices = [p for p in self.model.parameters() if p.ndim == 2]
            vectors = [p for p in self.model.parameters() if p.ndim < 2]
            opt = torch.optim.AdamW([{"params": matrices, "lr": 1e-2, "betas": (0.9, 0.95)},
                                     {"params": vectors, "lr": 5e-3, "betas": (0.8, 0.99)}], weight_decay=0.0,
                                    eps=1e-12)
            sched = torch.optim.lr_scheduler.LambdaLR(opt, WarmupCosineLambda(5, self.max_steps, 0.1))
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    stage = paper_stage(AT, n_embd=48, rewarmup_ratio=1.5, rewarmup_steps=4, bias_correction="fresh")
    recorder = _FreshTwin()
    trainer = make_trainer([recorder, WidthGrowthCallback(stage)], max_steps=MAX_STEPS, precision="64-true")
    trainer.fit(_TwoBetas(max_steps=MAX_STEPS))
    schedule = WarmupCosineLambda(5, MAX_STEPS, 0.1)
    checked = [r["step"] for r in recorder.records if r["step"] >= AT]
    assert checked == list(range(AT, MAX_STEPS))
    for record in recorder.records:
        step = record["step"]
        if step < AT:
            continue
        ratio = rewarmup_lr(step, growth_step=AT, lr_at_growth=schedule(AT), ratio=1.5, warmup_steps=4,
                            total_steps=MAX_STEPS, min_lr=0.1) / schedule(step)
        for name, new in (("transformer.h.0.attn.proj.weight", (slice(32, None),)),
                          ("transformer.h.1.norm_2.weight", (slice(32, None),))):
            before, after, fresh = record["before"][name], record["after"][name], record["fresh"][name]
            torch.testing.assert_close(after[new] - before[new], ratio * (fresh[new] - before[new]), rtol=2e-5,
                                       atol=0, msg=f"step {step}, {name}")
