"""What a growth carries over, checked value by value so that a deliberate breakage is noticed.

- scalar optimizer state (Adam's ``step``, any non-per-element entry) is kept, for grown and unchanged parameters;
- ``asymmetric-scaled``: old entries of fan-in tensors get ``exp_avg * alpha`` and ``exp_avg_sq * alpha**2``,
  new entries zero, fan-out-only tensors unscaled;
- a grown parameter stays in its own param group (same hyperparameters), and its new entries follow the re-warmup
  of *that* group of *that* optimizer (several groups, two optimizers, accumulation 1 and 2), measured from the
  parameters (plain SGD: update = -lr * grad);
- tied embeddings: the lm_head fan-in scale is folded into ``ln_f`` and makes the output head exact;
- a growth failing mid-way leaves the optimizer (groups, state keys, state values) and the model as they were;
- resume with a ``rewarmup_ratio=None`` stage between two re-warmed stages is bit-exact.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from _tiny import TinyModule, assert_states_equal, make_trainer, paper_stage, token_batch
from conftest import assert_unchanged, llama_config, make_gpt, make_tokens, snapshot
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from lightning_sparkling import (
    WidthGrowthCallback,
    fan_in_scale,
    grow_model,
    rewarmup_lr,
)
from lightning_sparkling.callbacks.growth import GrowthFailedError
from lightning_sparkling.growth.optim_state import plan_optimizer_patch
from lightning_sparkling.growth.schedules import WarmupCosineLambda

FAN_IN_E = ("attn.qkv.weight", "mlp.fc_1.weight", "mlp.fc_2.weight", "lm_head.weight")  # readers of n_embd
FAN_IN_I = ("mlp.proj.weight",)  # reader of intermediate_size


def _expected_alpha(name: str, alpha_e: float, alpha_i: float) -> float:
    """The fan-in scale of a tensor of a LLaMA-style GPT (DESIGN section 1), independent of the plan."""
    if name.endswith(FAN_IN_E):
        return alpha_e
    if name.endswith(FAN_IN_I):
        return alpha_i
    return 1.0


def _old_index(old_shape) -> tuple[slice, ...]:
    return tuple(slice(0, s) for s in old_shape)


def _prefixed(prefix: str):
    """A ``torch.testing.assert_close`` message callable that keeps its own report after ``prefix``."""
    return lambda message: f"{prefix}: {message}"


def _clone_state(state: dict) -> dict:
    return {k: v.detach().clone() if isinstance(v, torch.Tensor) else copy.deepcopy(v) for k, v in state.items()}


def _group_of(optimizer, p) -> int:
    found = [g for g, group in enumerate(optimizer.param_groups) if any(q is p for q in group["params"])]
    assert len(found) == 1, f"parameter in {len(found)} groups"
    return found[0]


def _hyper(group: dict) -> dict:
    return {k: copy.deepcopy(v) for k, v in group.items() if k != "params"}


def _check_carryover(before: dict, after: dict, alpha_e: float, alpha_i: float, recipe: str) -> None:
    """``before``/``after``: ``{name: state dict}`` of the same optimizer around one growth."""
    assert before.keys() == after.keys()
    for name, old in before.items():
        new = after[name]
        assert new.keys() == old.keys(), name
        for key, value in old.items():
            got = new[key]
            if not isinstance(value, torch.Tensor) or value.ndim == 0:
                # scalar entries (step, custom counters) are carried over unchanged
                if isinstance(value, torch.Tensor):
                    assert isinstance(got, torch.Tensor) and got.dtype == value.dtype and got.ndim == 0, (name, key)
                    assert torch.equal(got, value), f"{name}[{key!r}]: {value} became {got}"
                else:
                    assert got == value, f"{name}[{key!r}]: {value!r} became {got!r}"
                continue
            assert got.dtype == value.dtype, (name, key)
            idx = _old_index(value.shape)
            if got.shape == value.shape:  # unchanged parameter: state untouched
                assert torch.equal(got, value), f"{name}[{key!r}] of an unchanged parameter changed"
                continue
            alpha = _expected_alpha(name, alpha_e, alpha_i) if recipe == "asymmetric-scaled" else 1.0
            power = 2 if key in ("exp_avg_sq", "max_exp_avg_sq") else 1
            expected = value * (alpha**power)
            if alpha == 1.0:
                assert torch.equal(got[idx], value), f"{name}[{key!r}]: old entries of an unscaled tensor changed"
            else:
                torch.testing.assert_close(got[idx], expected, rtol=1e-6, atol=0,
                                           msg=_prefixed(f"{name}[{key!r}] old entries not x alpha^{power}"))
            rest = got.clone()
            rest[idx] = 0
            assert torch.count_nonzero(rest) == 0, f"{name}[{key!r}]: new entries are not zero"


# ----------------------------------------------------------------------------------------- direct: plan_optimizer_patch
def _trained(optimizer_factory, steps: int = 3):
    """A tiny GPT with two param groups and an optimizer that has taken ``steps`` real steps."""
    model = make_gpt(llama_config(), seed=1)
    named = dict(model.named_parameters())
    decay = [p for n, p in named.items() if p.ndim == 2 and ".h." in n]
    rest = [p for n, p in named.items() if not (p.ndim == 2 and ".h." in n)]
    optimizer = optimizer_factory([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}])
    x = make_tokens(model.config, batch=2, length=9)
    for _ in range(steps):
        optimizer.zero_grad()
        F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten()).backward()
        optimizer.step()
    return model, optimizer


OPTIMIZERS = {
    "adamw_amsgrad": lambda groups: torch.optim.AdamW(groups, lr=1e-2, amsgrad=True),
    "adam": lambda groups: torch.optim.Adam(groups, lr=1e-2),
    "sgd_momentum": lambda groups: torch.optim.SGD(groups, lr=1e-2, momentum=0.9),
}


@pytest.mark.parametrize("recipe", ["asymmetric", "asymmetric-scaled"])
@pytest.mark.parametrize("widths, init", [({"n_embd": 48, "intermediate_size": 96}, "copy-copy"),
                                          ({"n_embd": 48, "intermediate_size": 96}, "random-zero"),
                                          ({"intermediate_size": 96}, "copy-copy")])
@pytest.mark.parametrize("opt_name", list(OPTIMIZERS))
def test_plan_optimizer_patch_keeps_scalars_and_scales_moments_exactly(opt_name, widths, init, recipe):
    model, optimizer = _trained(OPTIMIZERS[opt_name])
    named = dict(model.named_parameters())
    for i, p in enumerate(named.values()):  # non-per-element entries of other kinds must be kept too
        optimizer.state[p]["custom_count"] = 7 + i
        optimizer.state[p]["custom_scalar"] = torch.tensor(0.25 * i, dtype=torch.float64)
    before = {n: _clone_state(optimizer.state[p]) for n, p in named.items()}
    groups = {n: _group_of(optimizer, p) for n, p in named.items()}
    hyper = [_hyper(g) for g in optimizer.param_groups]

    result = grow_model(model, paper_stage(0, **widths, init=init, optimizer_state=recipe))
    alpha_e = fan_in_scale(32, 48, init=init) if "n_embd" in widths else 1.0
    alpha_i = fan_in_scale(64, 96, init=init)
    assert abs(alpha_i - alpha_i**2) > 0.1
    expected_alphas = {"n_embd": alpha_e, "intermediate_size": alpha_i} if "n_embd" in widths else {
        "intermediate_size": alpha_i}
    assert result.plan.alphas() == expected_alphas
    patch = plan_optimizer_patch(optimizer, result, recipe)
    # planning modifies nothing
    assert all(_group_of(optimizer, named[n]) == g for n, g in groups.items())
    assert all(optimizer.state[named[n]]["custom_count"] == before[n]["custom_count"] for n in named)
    patch.apply()

    new_named = dict(model.named_parameters())
    unchanged = [n for n in new_named if n not in result.new_params]
    # inner growth only: wte, lm_head, ln_f and each block's norm_1, norm_2, attn.qkv, attn.proj are unchanged
    assert len(unchanged) == (0 if "n_embd" in widths else 11)
    assert all(new_named[n] is named[n] for n in unchanged)
    after = {n: optimizer.state[p] for n, p in new_named.items()}
    for n, p in new_named.items():  # the new Parameter sits where the old one was, group unchanged
        assert _group_of(optimizer, p) == groups[n], n
    assert [_hyper(g) for g in optimizer.param_groups] == hyper
    assert not any(p in optimizer.state for p in result.old_params.values())
    _check_carryover(before, after, alpha_e, alpha_i, recipe)
    if opt_name != "sgd_momentum":
        assert {float(s["step"]) for s in after.values()} == {3.0}

    # training goes on: every step counter advances together (no reset to 0 for grown tensors)
    x = make_tokens(model.config, batch=2, length=9, seed=5)
    optimizer.zero_grad()
    F.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten()).backward()
    optimizer.step()
    if opt_name != "sgd_momentum":
        assert {float(optimizer.state[p]["step"]) for p in new_named.values()} == {4.0}


def test_optimizer_patch_undo_restores_everything_deeply():
    model, optimizer = _trained(OPTIMIZERS["adamw_amsgrad"])
    snap_model = snapshot(model)
    snap_opt = _opt_snapshot(optimizer)
    result = grow_model(model, paper_stage(0, n_embd=64, intermediate_size=128, optimizer_state="asymmetric-scaled"))
    patch = plan_optimizer_patch(optimizer, result, "asymmetric-scaled")
    patch.apply()
    assert optimizer.state[model.lm_head.weight]["exp_avg"].shape == (100, 64)  # the grown state is in
    patch.undo()
    result.rollback()
    _assert_opt_unchanged(optimizer, snap_opt)
    assert_unchanged(model, snap_model)


# ----------------------------------------------------------------------------------------- deep optimizer snapshots
def _opt_snapshot(optimizer) -> dict:
    return {
        "groups": [(_hyper(g), list(g["params"])) for g in optimizer.param_groups],
        "state": [(p, _clone_state(s)) for p, s in optimizer.state.items()],
    }


def _assert_opt_unchanged(optimizer, snap: dict) -> None:
    assert len(optimizer.param_groups) == len(snap["groups"])
    for g, (group, (hyper, params)) in enumerate(zip(optimizer.param_groups, snap["groups"])):
        assert _hyper(group) == hyper, f"param group {g} hyperparameters changed"
        assert len(group["params"]) == len(params) and all(a is b for a, b in zip(group["params"], params)), (
            f"param group {g} holds other Parameter objects")
    state = {id(p): s for p, s in optimizer.state.items()}
    assert len(state) == len(snap["state"]) and set(state) == {id(p) for p, _ in snap["state"]}, (
        f"optimizer state keys changed: {len(state)} entries, expected {len(snap['state'])}")
    for p, saved in snap["state"]:
        current = state[id(p)]
        assert current.keys() == saved.keys()
        for key, value in saved.items():
            if isinstance(value, torch.Tensor):
                got = current[key]
                assert got.dtype == value.dtype and got.shape == value.shape and torch.equal(got, value), key
            else:
                assert current[key] == value, key


# ----------------------------------------------------------------------------------------- Lightning modules
def _split(model):
    """attn (weight decay, lr 0.05), mlp (lr 0.02), rest: embeddings, head, norms (lr 0.08)."""
    named = dict(model.named_parameters())
    attn = [p for n, p in named.items() if ".attn." in n]
    mlp = [p for n, p in named.items() if ".mlp." in n]
    rest = [p for n, p in named.items() if ".attn." not in n and ".mlp." not in n]
    return attn, mlp, rest


GROUP_LAMBDAS = lambda T: [WarmupCosineLambda(2, T, 0.1), WarmupCosineLambda(4, T, 0.2),
                           WarmupCosineLambda(3, T, 0.05)]


class GroupsModule(TinyModule):
    """TinyModule with three param groups of different lr, weight decay and schedule (one LambdaLR, per-group
    lambdas). ``kind="sgd"``: plain SGD, weight decay 0 on the mlp and rest groups (their update is -lr * grad)."""

    def __init__(self, kind: str = "sgd", **kw) -> None:
        super().__init__(**kw)
        self.kind = kind

    def configure_optimizers(self):
        attn, mlp, rest = _split(self.model)
        groups = [{"params": attn, "lr": 0.05, "weight_decay": 0.1}, {"params": mlp, "lr": 0.02, "weight_decay": 0.0},
                  {"params": rest, "lr": 0.08, "weight_decay": 0.0}]
        if self.kind == "sgd":
            opt = torch.optim.SGD(groups, lr=0.01)
        else:
            opt = torch.optim.AdamW(groups, lr=0.01, amsgrad=True, betas=(0.8, 0.95))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, GROUP_LAMBDAS(self.max_steps))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class TwoOptimizers(TinyModule):
    """Manual optimization, two plain-SGD optimizers with different LRs and schedules: A holds the block matrices
    (one group), B the embeddings/head (group 0) and the norms (group 1, weight decay). Gradient accumulation by
    hand. Records, for every optimizer step, the global step, the group LRs, the parameters and gradients."""

    def __init__(self, accumulate: int = 1, max_steps: int = 24) -> None:
        super().__init__(optimizer="sgd", accumulate=accumulate, max_steps=max_steps)
        self.automatic_optimization = False
        self.records: list[dict] = []

    def configure_optimizers(self):
        named = dict(self.model.named_parameters())
        blocks = [p for n, p in named.items() if ".h." in n and p.ndim == 2]
        head = [named["transformer.wte.weight"], named["lm_head.weight"]]
        norms = [p for n, p in named.items() if p.ndim == 1]
        a = torch.optim.SGD(blocks, lr=0.05)
        b = torch.optim.SGD([{"params": head, "lr": 0.02}, {"params": norms, "lr": 0.01, "weight_decay": 0.05}],
                            lr=0.02)
        T = self.max_steps
        self._own_schedulers = [torch.optim.lr_scheduler.LambdaLR(a, WarmupCosineLambda(2, T, 0.1)),
                                torch.optim.lr_scheduler.LambdaLR(b, [WarmupCosineLambda(4, T, 0.3),
                                                                      WarmupCosineLambda(4, T, 0.3)])]
        return [a, b], self._own_schedulers

    def training_step(self, batch, batch_idx):
        micro = batch_idx % self.accumulate
        loss = self.loss_on(token_batch(self.global_step, micro)) / self.accumulate
        self.manual_backward(loss)
        if micro == self.accumulate - 1:
            for o, opt in enumerate(self.optimizers()):
                named = dict(self.model.named_parameters())
                record = {"o": o, "step": self.trainer.global_step,
                          "lrs": [g["lr"] for g in opt.optimizer.param_groups],
                          "before": {n: p.detach().clone() for n, p in named.items()},
                          "grads": {n: p.grad.detach().clone() for n, p in named.items() if p.grad is not None}}
                opt.step()
                record["after"] = {n: p.detach().clone() for n, p in named.items()}
                self.records.append(record)
            for opt in self.optimizers():
                opt.zero_grad()
            for sched in self._own_schedulers:  # the module's own schedulers only
                sched.step()
        return loss


class _RecordSGD(Callback):
    """Per optimizer step (automatic optimization): global step, group LRs, parameters before, gradients, after.
    Placed before the growth callback so that on_train_batch_end sees the stepped, not yet grown, model."""

    def __init__(self) -> None:
        self.records: list[dict] = []
        self._pending = None

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        named = dict(pl_module.model.named_parameters())
        self._pending = {"o": 0, "step": trainer.global_step, "lrs": [g["lr"] for g in optimizer.param_groups],
                         "before": {n: p.detach().clone() for n, p in named.items()},
                         "grads": {n: p.grad.detach().clone() for n, p in named.items() if p.grad is not None}}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._pending is not None:
            self._pending["after"] = {n: p.detach().clone() for n, p in pl_module.model.named_parameters()}
            self.records.append(self._pending)
            self._pending = None


class _AroundGrowth(Callback):
    """Two instances, one before and one after the growth callback: record names -> (optimizer, group, Parameter),
    group hyperparameters and optimizer state at the first batch end with ``global_step == at``."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.seen = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step >= self.at and self.seen is None:
            named = dict(pl_module.model.named_parameters())
            where = {}
            for n, p in named.items():
                hits = [(o, g) for o, opt in enumerate(trainer.optimizers) for g, group in enumerate(opt.param_groups)
                        if any(q is p for q in group["params"])]
                assert len(hits) == 1, f"{n} is in {len(hits)} param groups"
                where[n] = hits[0]
            self.seen = {
                "step": trainer.global_step,
                "params": named,
                "where": where,
                "hyper": [[_hyper(g) for g in opt.param_groups] for opt in trainer.optimizers],
                "state": [{n: _clone_state(opt.state[p]) for n, p in named.items() if p in opt.state}
                          for opt in trainer.optimizers],
            }


def _fit(module, stages, max_steps, accumulate=1, callbacks=(), after=(), ckpt_path=None, **kw):
    growth = WidthGrowthCallback(stages)
    trainer = make_trainer([*callbacks, growth, *after], max_steps=max_steps, accumulate=accumulate, **kw)
    trainer.fit(module, ckpt_path=ckpt_path)
    return trainer, growth


def _assert_groups_kept(pre: dict, post: dict, new_params) -> None:
    """Every parameter (grown or not) is in the same optimizer and group as before, the grown ones by the identity
    of their new Parameter object, and every group keeps its hyperparameters."""
    assert pre["where"].keys() == post["where"].keys()
    moved = {n: (pre["where"][n], post["where"][n]) for n in pre["where"] if pre["where"][n] != post["where"][n]}
    assert not moved, f"parameters moved to another optimizer/param group, {{name: (before, after)}}: {moved}"
    for o, (hyper_pre, hyper_post) in enumerate(zip(pre["hyper"], post["hyper"])):
        assert hyper_pre == hyper_post, f"optimizer {o}: param group hyperparameters changed"
    grown = [n for n in post["params"] if post["params"][n] is not pre["params"][n]]
    assert sorted(grown) == sorted(new_params) and grown


# ----------------------------------------------------------------------------------------- Lightning: state carry-over
@pytest.mark.slow
@pytest.mark.parametrize("widths", [{"n_embd": 48, "intermediate_size": 96}, {"intermediate_size": 96}])
def test_lightning_growth_keeps_step_groups_and_scales_state(widths):
    at = 4
    module = GroupsModule(kind="adamw", max_steps=8)
    pre, post = _AroundGrowth(at), _AroundGrowth(at)
    stage = paper_stage(at, **widths, optimizer_state="asymmetric-scaled", rewarmup_steps=2)
    trainer, growth = _fit(module, stage, max_steps=8, callbacks=[pre], after=[post])
    assert growth.grown_stages == 1 and pre.seen["step"] == post.seen["step"] == at
    new_params = [n for n in post.seen["params"] if post.seen["params"][n] is not pre.seen["params"][n]]
    _assert_groups_kept(pre.seen, post.seen, new_params)
    assert len(new_params) == (17 if "n_embd" in widths else 6)  # inner only: fc_1, fc_2, proj of 2 blocks
    alpha_e, alpha_i = fan_in_scale(32, 48) if "n_embd" in widths else 1.0, fan_in_scale(64, 96)
    _check_carryover(pre.seen["state"][0], post.seen["state"][0], alpha_e, alpha_i, "asymmetric-scaled")
    assert {float(s["step"]) for s in post.seen["state"][0].values()} == {float(at)}
    opt = trainer.optimizers[0]  # four steps later every counter agrees
    assert {float(opt.state[p]["step"]) for p in module.model.parameters()} == {8.0}


# ----------------------------------------------------------------------------------------- Lightning: LR per group
def _applied_lr(before, grad, after, mask):
    """-(after - before) / grad on entries whose update is far above float32 rounding of the weight."""
    g, w = grad[mask], before[mask]
    keep = (g.abs() * 1e-2) > 1e4 * torch.finfo(torch.float32).eps * w.abs().clamp_min(1e-3)
    return -(after[mask] - w)[keep] / g[keep]


def _new_mask(name: str, shape, regions) -> torch.Tensor:
    mask = torch.zeros(shape, dtype=torch.bool)
    for piece in regions.get(name, []):
        mask[piece] = True
    return mask


def _check_measured_lrs(records, measured, at, pre, regions, min_lrs, ratio, warmup, max_steps):
    """``measured``: {name: (optimizer, group)}. New entries: rewarmup_lr of that group; old entries: group lr."""
    checked_new = checked_old = 0
    for rec in records:
        o, s = rec["o"], rec["step"]
        for name, (mo, g) in measured.items():
            if mo != o or name not in rec["grads"]:
                continue
            w, grad, a = rec["before"][name], rec["grads"][name], rec["after"][name]
            lr_group = rec["lrs"][g]
            new = _new_mask(name, w.shape, regions) if s >= at else torch.zeros_like(w, dtype=torch.bool)
            got_old = _applied_lr(w, grad, a, ~new)
            torch.testing.assert_close(got_old, torch.full_like(got_old, lr_group), rtol=1e-3, atol=0,
                                       msg=_prefixed(f"old entries of {name} at step {s}"))
            checked_old += got_old.numel()
            if s < at:
                continue
            lr_at_growth = pre["hyper"][o][g]["lr"]
            expected = rewarmup_lr(s, growth_step=at, lr_at_growth=lr_at_growth, ratio=ratio, warmup_steps=warmup,
                                   total_steps=max_steps, min_lr=min_lrs[(o, g)])
            got_new = _applied_lr(w, grad, a, new)
            assert got_new.numel() > 0, (name, s)
            torch.testing.assert_close(got_new, torch.full_like(got_new, expected), rtol=1e-3, atol=0,
                                       msg=_prefixed(f"new entries of {name} (opt {o} group {g}) at step {s}"))
            checked_new += got_new.numel()
    assert checked_new > 1000 and checked_old > 1000


def _regions(config, stage):
    from lightning_sparkling.growth.plan import plan_growth

    return {n: t.new_region() for n, t in plan_growth(config, stage).tensors.items()}


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])
def test_param_groups_kept_and_new_entries_follow_their_groups_rewarmup(accumulate):
    max_steps, at, ratio, warmup = 14, 5, 1.5, 3
    module = GroupsModule(kind="sgd", max_steps=max_steps, accumulate=accumulate)
    config = module.model.config
    stage = paper_stage(at, n_embd=48, intermediate_size=96, rewarmup_ratio=ratio, rewarmup_steps=warmup)
    recorder, pre, post = _RecordSGD(), _AroundGrowth(at), _AroundGrowth(at)
    _fit(module, stage, max_steps=max_steps, accumulate=accumulate, callbacks=[recorder, pre], after=[post])
    new_params = [n for n in post.seen["params"] if post.seen["params"][n] is not pre.seen["params"][n]]
    _assert_groups_kept(pre.seen, post.seen, new_params)
    assert [h["weight_decay"] for h in post.seen["hyper"][0]] == [0.1, 0.0, 0.0]

    lambdas = GROUP_LAMBDAS(max_steps)
    bases = [0.05, 0.02, 0.08]
    for g in range(3):  # the LR at growth is the group's own schedule at that step (and the groups differ)
        assert pre.seen["hyper"][0][g]["lr"] == pytest.approx(bases[g] * lambdas[g](at), rel=1e-12)
    min_lrs = {(0, g): bases[g] * lambdas[g].min_lr_ratio for g in range(3)}
    measured = {n: (0, 1 if ".mlp." in n else 2) for n in new_params
                if ".mlp." in n or n in ("lm_head.weight", "transformer.wte.weight")}
    assert len(measured) == 8
    assert len(recorder.records) == max_steps and [r["step"] for r in recorder.records] == list(range(max_steps))
    _check_measured_lrs(recorder.records, measured, at, pre.seen, _regions(config, stage), min_lrs, ratio, warmup,
                        max_steps)


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])
def test_two_optimizers_new_entries_follow_their_own_optimizers_rewarmup(accumulate):
    max_steps, at, ratio, warmup = 24, 8, 1.5, 4  # two optimizer steps per global batch: global_step += 2
    module = TwoOptimizers(accumulate=accumulate, max_steps=max_steps)
    config = module.model.config
    stage = paper_stage(at, n_embd=48, intermediate_size=96, rewarmup_ratio=ratio, rewarmup_steps=warmup)
    pre, post = _AroundGrowth(at), _AroundGrowth(at)
    _fit(module, stage, max_steps=max_steps, accumulate=1, callbacks=[pre], after=[post])
    assert pre.seen["step"] == at and module.model.config.n_embd == 48
    new_params = [n for n in post.seen["params"] if post.seen["params"][n] is not pre.seen["params"][n]]
    _assert_groups_kept(pre.seen, post.seen, new_params)
    lr_a, lr_b = pre.seen["hyper"][0][0]["lr"], pre.seen["hyper"][1][0]["lr"]
    assert abs(lr_a - lr_b) > 0.2 * lr_b  # the two optimizers' LRs at growth differ
    min_lrs = {(0, 0): 0.05 * 0.1, (1, 0): 0.02 * 0.3, (1, 1): 0.01 * 0.3}
    measured = {n: (0, 0) for n in new_params if ".h." in n and post.seen["params"][n].ndim == 2}
    measured.update({"lm_head.weight": (1, 0), "transformer.wte.weight": (1, 0)})
    assert len(measured) == 12
    steps = {(r["o"], r["step"]) for r in module.records}
    assert (0, at) in steps and (1, at + 1) in steps  # B steps while global_step is odd
    _check_measured_lrs(module.records, measured, at, pre.seen, _regions(config, stage), min_lrs, ratio, warmup,
                        max_steps)


# ----------------------------------------------------------------------------------------- tied embeddings
def _rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


@pytest.mark.parametrize("init", ["copy-copy", "copy-random", "copy-zero"])
def test_tied_embeddings_head_scale_folded_into_ln_f(init):
    """One tensor is the embedding (fan-out: its new columns follow the fan-out side, here copies) and lm_head
    (fan-in). So lm_head reads, through its copied columns, the copied residual coordinates: its RMS-preserving
    alpha is the copy-copy one (0.5 at 2x, not sqrt(d/d') = 0.71 as the fan-in side "random"/"zero" would give),
    which makes the head exact: logits == old head(old ln_f(old residual coordinates)). It is folded into ln_f's
    weight; the shared matrix itself is not scaled. Only copy-copy preserves the whole function (the blocks'
    fan-in scale is sqrt(d/d') otherwise, tied or not)."""
    config = llama_config()
    tied = make_gpt(config, seed=3, tie_embeddings=True)
    untied = make_gpt(config, seed=3)  # same weights; its lm_head is its own tensor
    with torch.no_grad():
        untied.lm_head.weight.copy_(tied.lm_head.weight)
        untied.transformer.wte.weight.copy_(tied.transformer.wte.weight)
    x = make_tokens(config, batch=3, length=12)
    with torch.no_grad():
        logits_before = tied(x)
    W, g = tied.lm_head.weight.detach().clone(), tied.transformer.ln_f.weight.detach().clone()
    eps = tied.transformer.ln_f.eps

    result = grow_model(tied, paper_stage(0, n_embd=64, init=init))
    grow_model(untied, paper_stage(0, n_embd=64, init=init))
    assert tied.lm_head.weight is tied.transformer.wte.weight
    src = result.plan.channels["n_embd"].src
    lm_alpha = fan_in_scale(32, 64, init="copy-copy")
    assert lm_alpha == 0.5 and fan_in_scale(32, 64, init=init) == (0.5 if init == "copy-copy" else math.sqrt(0.5))
    # the shared matrix: old columns untouched (an embedding is fan-out), new columns copies
    assert torch.equal(tied.lm_head.weight[:, :32], W) and torch.equal(tied.lm_head.weight[:, 32:], W[:, src])
    # the lm_head scale sits in ln_f: [g, g[src]] * alpha
    torch.testing.assert_close(tied.transformer.ln_f.weight.detach(), torch.cat([g, g[src]]) * lm_alpha,
                               rtol=1e-6, atol=0, msg=lambda m: f"ln_f weight is not [g, g[src]] * {lm_alpha}: {m}")

    residual = {}
    for name, model in (("tied", tied), ("untied", untied)):
        model.transformer.ln_f.register_forward_pre_hook(lambda m, a, name=name: residual.__setitem__(name, a[0]))
    with torch.no_grad():
        logits = tied(x)
        untied(x)
    y = residual["tied"]
    assert torch.equal(y, residual["untied"])  # the blocks grow the same way, tied or not
    assert torch.equal(y[..., 32:], y[..., src])  # copied residual coordinates
    head = F.linear(_rms_norm(y[..., :32], g, eps), W)
    torch.testing.assert_close(logits, head, rtol=0, atol=2e-6,
                               msg=lambda m: f"logits != old head(old ln_f(residual)): {m}")
    if init == "copy-copy":
        torch.testing.assert_close(logits, logits_before, rtol=0, atol=2e-6,
                                   msg=lambda m: f"copy-copy did not preserve the logits: {m}")


# ----------------------------------------------------------------------------------------- atomicity
@pytest.mark.slow
@pytest.mark.parametrize("failure", ["check_loss", "rewrap"])
def test_failed_growth_restores_optimizer_state_and_groups_deeply(monkeypatch, failure):
    import lightning_sparkling.callbacks.growth as growth_mod

    at = 5
    module = GroupsModule(kind="adamw", max_steps=12)
    snap = {}

    class Snapshot(Callback):  # before the growth callback: the model and optimizer right before growing
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if trainer.global_step == at:
                snap["model"] = snapshot(pl_module.model)
                snap["opt"] = _opt_snapshot(trainer.optimizers[0])
                snap["n_state"] = len(trainer.optimizers[0].state)

    applied = {}
    if failure == "check_loss":  # the optimizer patch is applied, then the loss check fails
        def fail(self, pl_module, gpt, batch):
            applied["state_shape"] = tuple(trainer.optimizers[0].state[gpt.lm_head.weight]["exp_avg"].shape)
            raise RuntimeError("injected failure")
        monkeypatch.setattr(growth_mod.WidthGrowthCallback, "_check_loss", fail)
    else:
        from lightning_sparkling.parallel.single import SingleBackend

        def fail(self, trainer_, pl_module):
            applied["state_shape"] = tuple(
                trainer_.optimizers[0].state[pl_module.model.lm_head.weight]["exp_avg"].shape)
            raise RuntimeError("injected failure")
        monkeypatch.setattr(SingleBackend, "rewrap", fail)

    growth = WidthGrowthCallback(paper_stage(at, n_embd=64, intermediate_size=128, optimizer_state="asymmetric-scaled",
                                             rewarmup_steps=2))
    trainer = make_trainer([Snapshot(), growth], max_steps=12)
    with pytest.raises(GrowthFailedError, match="pre-growth"):
        trainer.fit(module)
    assert applied["state_shape"] == (64, 64)  # the failure came after the grown state was in the optimizer
    assert snap["n_state"] == sum(1 for _ in module.model.parameters()) > 10
    optimizer = trainer.optimizers[0]
    _assert_opt_unchanged(optimizer, snap["opt"])
    assert_unchanged(module.model, snap["model"])
    assert growth.grown_stages == 0


# ----------------------------------------------------------------------------------------- resume
def _three_stages():
    return [paper_stage(6, n_embd=48, rewarmup_ratio=1.5, rewarmup_steps=4),
            paper_stage(12, intermediate_size=96, init="random-copy", rewarmup_ratio=None),
            paper_stage(18, n_embd=64, intermediate_size=128, rewarmup_ratio=1.3, rewarmup_steps=3)]


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])
def test_resume_bit_exact_with_a_stage_without_rewarmup_between(tmp_path: Path, accumulate):
    max_steps = 24
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1, filename="{step}")
    reference = TinyModule(max_steps=max_steps, accumulate=accumulate)
    trainer, growth = _fit(reference, _three_stages(), max_steps=max_steps, accumulate=accumulate, callbacks=[ckpt],
                           enable_checkpointing=True)
    assert growth.grown_stages == 3
    # stage 1 has no new-entry scheduler: two re-warmup schedulers besides the module's own
    assert [c.name for c in trainer.lr_scheduler_configs] == [None, "lr_new/stage_0", "lr_new/stage_2"]
    expected = {n: t.detach().clone() for n, t in reference.model.state_dict().items()}
    for step in (3, 6, 9, 12, 15, 18, 21):  # before, at, between and after each growth
        resumed = TinyModule(max_steps=max_steps, accumulate=accumulate)
        _fit(resumed, _three_stages(), max_steps=max_steps, accumulate=accumulate,
             ckpt_path=str(tmp_path / f"step={step}.ckpt"))
        assert_states_equal(resumed.model.state_dict(), expected, f"resume from step {step}")
