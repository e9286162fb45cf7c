"""The new entries' learning rate, read from the parameters, on the paths users take: two stages on different axes
(entries new in one stage and grown again by the next), gradient accumulation 1 (Lightning runs forward and
backward inside ``optimizer.step``, after the step pre-hooks) and 2, several param groups, and resume from every
step of a run with two growths."""

from __future__ import annotations

from pathlib import Path

import pytest

import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from litgpt import GPT

from lightning_sparkling import GrowthStage, WidthGrowthCallback, rewarmup_lr
from lightning_sparkling.growth.plan import grown_config
from lightning_sparkling.growth.schedules import WarmupCosineLambda

from _measure import RecordSteps, applied_lr
from _tiny import TinyModule, assert_states_equal, make_trainer, paper_stage, tiny_config

pytestmark = pytest.mark.slow

MAX_STEPS = 20
# stage 0 grows n_embd 32 -> 48 and the MLP 64 -> 128; stage 1 grows the MLP again, 128 -> 192, with another ratio
STAGES = (dict(at=6, ratio=1.5, warmup=4, widths=dict(n_embd=48, intermediate_size=128)),
          dict(at=12, ratio=2.0, warmup=3, widths=dict(intermediate_size=192)))
# which stage created index i of each width (-1: the model before any growth)
CREATED = {"n_embd": lambda i: -1 if i < 32 else 0, "inner": lambda i: -1 if i < 64 else (0 if i < 128 else 1)}
# the width each dim of a tensor runs along (None: a width that never grows)
DIMS = {
    "transformer.h.0.mlp.proj.weight": ("n_embd", "inner"),
    "transformer.h.1.mlp.fc_1.weight": ("inner", "n_embd"),
    "transformer.h.0.mlp.fc_2.weight": ("inner", "n_embd"),
    "transformer.h.1.attn.qkv.weight": (None, "n_embd"),
    "transformer.h.0.attn.proj.weight": ("n_embd", None),
    "transformer.wte.weight": (None, "n_embd"),
    "lm_head.weight": (None, "n_embd"),
    "transformer.h.1.norm_2.weight": ("n_embd",),
}


def _stages() -> list[GrowthStage]:
    return [paper_stage(s["at"], **s["widths"], rewarmup_ratio=s["ratio"], rewarmup_steps=s["warmup"]) for s in STAGES]


def _creator(name: str, shape: torch.Size) -> torch.Tensor:
    """The stage that created each entry (-1: old): the latest stage among the entry's coordinates."""
    out = torch.full(tuple(shape), -1, dtype=torch.long)
    for dim, (axis, size) in enumerate(zip(DIMS[name], shape)):
        if axis is None:
            continue
        created = torch.tensor([CREATED[axis](i) for i in range(size)])
        view = [1] * len(shape)
        view[dim] = size
        out = torch.maximum(out, created.view(view))
    return out


def _applied_lrs(recorder: RecordSteps):
    """``(step, name, k, applied LR of the entries of class k)`` for every recorded step, checked tensor and entry
    class (``k``: the stage that created the entries, -1 for the model before growth); SGD only."""
    for record in recorder.records:
        for name in DIMS:
            before = record["before"][name]
            creator = _creator(name, before.shape)
            for k in creator.unique().tolist():
                yield record["step"], name, k, applied_lr(before, record["grad"][name], record["after"][name],
                                                          creator == k)


def _expected_lrs(base_lr: float, schedule: WarmupCosineLambda) -> dict[int, callable]:
    """Expected LR per entry class at global step ``s`` (closed forms, not the package's schedulers)."""

    def stage_lr(k):
        s0 = STAGES[k]
        return lambda s: rewarmup_lr(s, growth_step=s0["at"], lr_at_growth=base_lr * schedule(s0["at"]),
                                     ratio=s0["ratio"], warmup_steps=s0["warmup"], total_steps=MAX_STEPS,
                                     min_lr=base_lr * schedule.min_lr_ratio)

    return {-1: lambda s: base_lr * schedule(s), 0: stage_lr(0), 1: stage_lr(1)}


@pytest.mark.parametrize("accumulate", [1, 2])
def test_applied_lr_of_every_entry_class_at_every_step_two_stages_on_different_axes(accumulate):
    """SGD (update = -lr * grad): old entries follow the user's schedule, and each stage's entries, including those
    of stage 0 that stage 1 grew around, follow that stage's re-warmup, at every step after its growth."""
    lr = 0.05
    module = TinyModule(optimizer="sgd", lr=lr, max_steps=MAX_STEPS, accumulate=accumulate)
    recorder = RecordSteps()
    growth = WidthGrowthCallback(_stages())
    trainer = make_trainer([recorder, growth], max_steps=MAX_STEPS, accumulate=accumulate, precision="64-true")
    trainer.fit(module)
    expected = _expected_lrs(lr, WarmupCosineLambda(5, MAX_STEPS, 0.1))
    assert [r["step"] for r in recorder.records] == list(range(MAX_STEPS))
    checked = {-1: 0, 0: 0, 1: 0}
    for step, name, k, got in _applied_lrs(recorder):
        want = expected[k](step)
        assert got.numel() > 0, (step, name, k)
        assert torch.allclose(got, torch.full_like(got, want), rtol=1e-6, atol=0), (
            f"step {step}, {name}, entries of {'the model before growth' if k < 0 else f'stage {k}'}: "
            f"applied LR {got.min().item():.6g}..{got.max().item():.6g}, expected {want:.6g}")
        checked[k] += got.numel()
    assert min(checked.values()) > 1000, checked
    # the schedules really differ over the steps checked: a wrong class assignment cannot pass by coincidence
    s = STAGES[1]["at"] + STAGES[1]["warmup"]
    assert len({round(expected[k](s), 9) for k in (-1, 0, 1)}) == 3


class _TwoGroups(TinyModule):
    """AdamW with decay (matrices, lr 1e-2) and no-decay (vectors, lr 5e-3) param groups, one warmup-cosine
    ``LambdaLR`` over both."""

    LRS = (1e-2, 5e-3)

    def configure_optimizers(self):
        decay = [p for p in self.model.parameters() if p.ndim == 2]
        no_decay = [p for p in self.model.parameters() if p.ndim < 2]
        opt = torch.optim.AdamW([{"params": decay, "lr": self.LRS[0], "weight_decay": 0.1},
                                 {"params": no_decay, "lr": self.LRS[1], "weight_decay": 0.0}], betas=(0.9, 0.95))
        sched = torch.optim.lr_scheduler.LambdaLR(opt, WarmupCosineLambda(5, self.max_steps, 0.1))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


@pytest.mark.parametrize("accumulate", [1, 2])
def test_new_entry_update_is_lr_ratio_times_the_baseline_step_adamw_two_groups(accumulate):
    """At every step after a growth, with AdamW and two param groups: old entries move exactly as the optimizer's
    own step moves them, and each stage's new entries by ``lr_new / lr_group`` times that step, where the step
    without the mechanism is taken by a hook-free clone of the optimizer on the same state and gradients."""
    module = _TwoGroups(max_steps=MAX_STEPS, accumulate=accumulate)
    recorder = RecordSteps(baseline=True)
    trainer = make_trainer([recorder, WidthGrowthCallback(_stages())], max_steps=MAX_STEPS, accumulate=accumulate,
                           precision="64-true")
    trainer.fit(module)
    opt = trainer.optimizers[0]
    for g in range(len(_TwoGroups.LRS)):  # grown parameters stayed in their own group
        assert all((p.ndim == 2) == (g == 0) for p in opt.param_groups[g]["params"])
        assert opt.param_groups[g]["weight_decay"] == (0.1 if g == 0 else 0.0)
    schedule = WarmupCosineLambda(5, MAX_STEPS, 0.1)
    ratios_seen = set()
    for record in recorder.records:
        step = record["step"]
        if step < STAGES[0]["at"]:
            continue
        for name in DIMS:
            before, after, base = record["before"][name], record["after"][name], record["baseline"][name]
            lr_group = _TwoGroups.LRS[0 if before.ndim == 2 else 1]
            expected = _expected_lrs(lr_group, schedule)
            creator = _creator(name, before.shape)
            old = creator == -1
            assert torch.equal(after[old], base[old]), (step, name)
            for k in [k for k in creator.unique().tolist() if k >= 0]:
                ratio = expected[k](step) / expected[-1](step)
                ratios_seen.add(round(ratio, 6))
                mask = creator == k
                update, baseline_update = after[mask] - before[mask], base[mask] - before[mask]
                assert baseline_update.abs().max() > 0, (step, name, k)
                torch.testing.assert_close(update, ratio * baseline_update, rtol=1e-9, atol=1e-15,
                                           msg=f"step {step}, {name}, stage {k} entries (ratio {ratio:.4f})")
    assert len(ratios_seen) > 5 and max(ratios_seen) > 1.5


def _final_state(module):
    return {n: p.detach().clone() for n, p in module.model.state_dict().items()}


@pytest.mark.parametrize("accumulate", [1, 2])
def test_bit_exact_resume_from_every_step_of_a_two_growth_run(tmp_path: Path, accumulate):
    """Resume from the checkpoint of every step (before, at, between and after two growths, one with random init)
    ends bit-for-bit where the uninterrupted run ends, on CPU in float32."""
    max_steps = 14
    stages = lambda: [paper_stage(4, n_embd=64, intermediate_size=128, rewarmup_steps=3),
                      paper_stage(8, intermediate_size=192, init="random-copy", rewarmup_ratio=2.0,
                                  rewarmup_steps=3)]
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1, filename="{step}")
    reference = TinyModule(max_steps=max_steps, accumulate=accumulate)
    trainer = make_trainer([ckpt, WidthGrowthCallback(stages())], max_steps=max_steps, accumulate=accumulate,
                           enable_checkpointing=True)
    trainer.fit(reference)
    expected = _final_state(reference)

    # the model part of a checkpoint is a plain litgpt state_dict of that moment's config
    saved = torch.load(tmp_path / "step=6.ckpt", map_location="cpu", weights_only=False)
    sd = {k.removeprefix("model."): v for k, v in saved["state_dict"].items()}
    GPT(grown_config(tiny_config(), {"n_embd": 64, "intermediate_size": 128})).load_state_dict(sd, strict=True)
    state = saved["callbacks"]["GrowthCallback"]
    assert state["grown"] == 1 and all(not isinstance(v, torch.Tensor) for v in state["records"][0].values())

    for step in range(1, max_steps):
        resumed = TinyModule(max_steps=max_steps, accumulate=accumulate)  # freshly built small model
        trainer = make_trainer([WidthGrowthCallback(stages())], max_steps=max_steps, accumulate=accumulate)
        trainer.fit(resumed, ckpt_path=str(tmp_path / f"step={step}.ckpt"))
        assert_states_equal(_final_state(resumed), expected, f"resume from step {step}")


@pytest.mark.parametrize("accumulate", [1, 2])
def test_two_stages_each_with_its_own_symmetry_loop(accumulate):
    """Two stages on different axes, each with its own symmetry loop (checks every 2 steps, a target the copies
    cannot reach in 20 steps, held) and its own cap: 4x for stage 0, 2x for stage 1. Read from the SGD updates,
    each stage's entries follow that stage's re-warmup times that stage's boost, which doubles at each of its
    own checks up to its own cap, while stage 1's growth and its boost leave stage 0's boost alone."""
    caps = (4.0, 2.0)
    stages = [paper_stage(s["at"], **s["widths"], rewarmup_ratio=s["ratio"], rewarmup_steps=s["warmup"],
                          symmetry_target=0.01, symmetry_interval=2, symmetry_max_boost=cap,
                          symmetry_release="hold") for s, cap in zip(STAGES, caps)]
    lr = 0.05
    module = TinyModule(optimizer="sgd", lr=lr, max_steps=MAX_STEPS, accumulate=accumulate)
    recorder = RecordSteps()
    trainer = make_trainer([recorder, WidthGrowthCallback(stages, symmetry_every_n_steps=0)], max_steps=MAX_STEPS,
                           accumulate=accumulate, precision="64-true")
    trainer.fit(module)
    expected = _expected_lrs(lr, WarmupCosineLambda(5, MAX_STEPS, 0.1))

    def boost(k: int, step: int) -> float:
        """Stage k's boost for the step that makes ``step + 1`` steps: doubled at each check after a step
        ``at + 2j`` (j >= 1), capped (closed form, not the callback's records)."""
        at = STAGES[k]["at"]
        checks = max(0, (step - at) // 2) if step >= at else 0
        return min(2.0 ** checks, caps[k])

    seen = {0: set(), 1: set()}
    for step, name, k, got in _applied_lrs(recorder):
        want = expected[k](step) * (boost(k, step) if k >= 0 else 1.0)
        torch.testing.assert_close(got, torch.full_like(got, want), rtol=1e-6, atol=0,
                                   msg=f"step {step}, {name}, class {k}")
        if k >= 0:
            seen[k].add(boost(k, step))
    assert seen == {0: {1.0, 2.0, 4.0}, 1: {1.0, 2.0}}, seen  # each stage reached its own cap, not the other's
    growth = next(c for c in trainer.callbacks if isinstance(c, WidthGrowthCallback))
    assert [r.symmetry_boost for r in growth._records] == [4.0, 2.0], growth._records


def test_a_scheduler_stepped_every_other_step_is_not_every_step():
    """Mutation audit (issue 47): ``every_step`` needs ``interval='step'`` *and* ``frequency=1`` under automatic
    optimization (a WSD decay read from a scheduler stepped every 2 steps would be in the wrong steps); under manual
    optimization the module steps it."""
    from types import SimpleNamespace

    from lightning_sparkling.callbacks.rewarmup import every_step

    auto = SimpleNamespace(lightning_module=SimpleNamespace(automatic_optimization=True))
    manual = SimpleNamespace(lightning_module=SimpleNamespace(automatic_optimization=False))
    assert every_step(auto, SimpleNamespace(interval="step", frequency=1))
    assert not every_step(auto, SimpleNamespace(interval="step", frequency=2))
    assert not every_step(auto, SimpleNamespace(interval="epoch", frequency=1))
    assert every_step(manual, SimpleNamespace(interval="epoch", frequency=3))
