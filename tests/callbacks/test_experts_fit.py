"""Experts growth inside a Lightning fit (one process, CPU): dense -> MoE, then MoE -> 2x experts, then a depth
growth; the new experts' and router rows' applied learning rate read from SGD updates (accumulation 1 and 2),
bit-exact resume before, at and after each growth, and the checkpoint a plain litgpt state dict."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from _measure import RecordSteps, applied_lr
from _tiny import TinyModule, make_trainer, tiny_config
from lightning.pytorch.callbacks import ModelCheckpoint
from litgpt import GPT

from lightning_sparkling import GrowthStage, WidthGrowthCallback, rewarmup_lr
from lightning_sparkling.growth.schedules import WarmupCosineLambda

MAX_STEPS = 16
UPCYCLE_AT, EXPERTS_AT, DEPTH_AT = 4, 8, 12


def _stages() -> list[GrowthStage]:
    return [GrowthStage(UPCYCLE_AT, mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2,
                        expert_init="drop-upcycle", rewarmup_ratio=2.0, rewarmup_steps=2),
            GrowthStage(EXPERTS_AT, n_expert=8, n_expert_per_token=4, optimizer_state="copy", rewarmup_ratio=1.5,
                        rewarmup_steps=2),
            GrowthStage(DEPTH_AT, n_layer=4, depth_order="interleave", rewarmup_steps=2)]


def _fit(module, stages, **kwargs):
    growth = WidthGrowthCallback(stages)
    callbacks = [growth] + kwargs.pop("callbacks", [])
    ckpt_path = kwargs.pop("ckpt_path", None)
    trainer = make_trainer(callbacks, **kwargs)
    trainer.fit(module, ckpt_path=ckpt_path)
    return trainer, growth


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])
def test_new_experts_follow_their_rewarmup_and_old_entries_the_schedule(accumulate):
    """SGD: every entry of an upcycled expert 1..3 and of the new router follows stage 0's re-warmup, expert 0 (the
    MLP itself) the module's schedule; after stage 1 the new experts 4..7 and router rows 4..7 follow stage 1's."""
    lr, steps = 0.05, 12
    module = TinyModule(optimizer="sgd", lr=lr, max_steps=steps, accumulate=accumulate)
    recorder = RecordSteps()
    trainer = make_trainer([recorder, WidthGrowthCallback(_stages()[:2])], max_steps=steps, accumulate=accumulate,
                           precision="64-true")
    trainer.fit(module)
    schedule = WarmupCosineLambda(5, steps, 0.1)

    def stage_lr(s, at, ratio):
        return rewarmup_lr(s, growth_step=at, lr_at_growth=lr * schedule(at), ratio=ratio, warmup_steps=2,
                           total_steps=steps, min_lr=lr * 0.1)

    checked = {"stage0": 0, "stage1": 0, "old": 0}
    for record in recorder.records:
        step = record["step"]
        for name, before in record["before"].items():
            if name not in record["grad"] or before.ndim < 2:
                continue
            masks = {"old": torch.ones_like(before, dtype=torch.bool)}
            expert = int(name.split(".")[5]) if ".experts." in name else None
            if expert is not None and expert in (1, 2, 3) or name.endswith("gate.weight"):
                masks = {"stage0": masks["old"]}
            if name.endswith("gate.weight") and before.shape[0] == 8:
                rows = torch.zeros_like(before, dtype=torch.bool)
                rows[4:] = True
                masks = {"stage0": ~rows, "stage1": rows}
            elif expert is not None and expert >= 4:
                masks = {"stage1": masks["old"]}
            for kind, mask in masks.items():
                want = {"old": lambda: lr * schedule(step), "stage0": lambda: stage_lr(step, UPCYCLE_AT, 2.0),
                        "stage1": lambda: stage_lr(step, EXPERTS_AT, 1.5)}[kind]()
                got = applied_lr(before, record["grad"][name], record["after"][name], mask)
                got = got[torch.isfinite(got)]  # entries of an expert no token picked this step have no update
                assert torch.allclose(got, torch.full_like(got, want), rtol=1e-6, atol=0), (step, name, kind, want)
                checked[kind] += got.numel()
    assert min(checked.values()) > 500, checked
    assert stage_lr(UPCYCLE_AT + 2, UPCYCLE_AT, 2.0) != pytest.approx(lr * schedule(UPCYCLE_AT + 2))


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])
def test_resume_bit_exact_across_upcycling_more_experts_and_depth(tmp_path: Path, accumulate):
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1, filename="{step}")
    reference = TinyModule(max_steps=MAX_STEPS, accumulate=accumulate)
    _, growth = _fit(reference, _stages(), max_steps=MAX_STEPS, accumulate=accumulate, callbacks=[ckpt],
                     enable_checkpointing=True)
    assert growth.grown_stages == 3
    assert (reference.model.config.n_expert, reference.model.config.n_layer) == (8, 4)
    expected = {n: t.detach().clone() for n, t in reference.model.state_dict().items()}
    for step in (2, UPCYCLE_AT, 6, EXPERTS_AT, DEPTH_AT, 14):  # before, at, between and after the growths
        resumed = TinyModule(max_steps=MAX_STEPS, accumulate=accumulate)
        _fit(resumed, _stages(), max_steps=MAX_STEPS, accumulate=accumulate,
             ckpt_path=str(tmp_path / f"step={step}.ckpt"))
        got = resumed.model.state_dict()
        assert got.keys() == expected.keys()
        for name, value in expected.items():
            assert torch.equal(got[name], value), f"resume from step {step}: {name} differs"


@pytest.mark.slow
def test_checkpoint_after_upcycling_is_a_plain_litgpt_state_dict(tmp_path: Path):
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=UPCYCLE_AT + 1, save_top_k=-1, filename="{step}")
    module = TinyModule(max_steps=6)
    _fit(module, _stages()[:1], max_steps=6, callbacks=[ckpt], enable_checkpointing=True)
    state = torch.load(tmp_path / f"step={UPCYCLE_AT + 1}.ckpt", weights_only=False)["state_dict"]
    gpt = GPT(tiny_config(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2, moe_intermediate_size=64))
    gpt.load_state_dict({k.removeprefix("model."): v for k, v in state.items()}, strict=True)
