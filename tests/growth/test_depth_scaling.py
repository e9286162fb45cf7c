"""``depth_scaling`` (:mod:`lightning_sparkling.growth.depth_scaling`): at ``L -> L'`` blocks, ``sqrt`` multiplies
every block's output projections by ``sqrt(L / L')`` (depth-muP's ``1 / sqrt(L)`` branch multiplier folded into the
weights). What it claims, checked exactly: the grown model computes the old model with those projections scaled
(bit for bit, whatever the order), ``copy`` blocks are scaled copies, ``none`` changes nothing; refusals name the key;
a run resumed from any checkpoint around the growth ends bit for bit where the uninterrupted run ends."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from litgpt import GPT

from lightning_sparkling import GrowthStage, WidthGrowthCallback, grow_model
from lightning_sparkling.growth.errors import StageError
from lightning_sparkling.growth.plan import GrowthError, plan_growth
from lightning_sparkling.growth.progressive import progressive_stages

from _tiny import TinyModule, assert_states_equal, make_trainer, tiny_config
from conftest import make_gpt, make_tokens, moe_config, neox_config

def _scaled_reference(model: GPT, factor: float) -> GPT:
    """``model`` with every block's output projections multiplied by ``factor`` (the rule's claim, by hand)."""
    reference = copy.deepcopy(model)
    with torch.no_grad():
        for name, param in reference.named_parameters():
            if name.startswith("transformer.h.") and name.endswith((".proj.weight", ".proj.bias")):
                param.mul_(factor)  # attn.proj, mlp.proj, every expert's and the shared experts' proj
    return reference


@pytest.mark.parametrize("config_fn, old, new, order", [
    (tiny_config, 2, 8, "stack"),          # sqrt(2/8) = 0.5
    (tiny_config, 2, 3, "interleave"),     # sqrt(2/3); a kept block moves
    (neox_config, 3, 5, "middle"),         # biases, parallel residual
    (moe_config, 2, 4, "interleave"),      # every expert's proj
])
def test_sqrt_computes_the_old_model_with_every_branch_scaled(config_fn, old, new, order):
    model = make_gpt(config_fn(n_layer=old))
    x = make_tokens(model.config)
    factor = math.sqrt(old / new)
    reference = _scaled_reference(model, factor)
    grow_model(model, GrowthStage(0, n_layer=new, depth_order=order, depth_scaling="sqrt", recipe="paper"))
    assert model.config.n_layer == new
    with torch.no_grad():
        assert torch.equal(model(x), reference(x))  # copy-zero: new blocks add exactly nothing


def test_none_keeps_the_logits_and_sqrt_does_not():
    model = make_gpt(tiny_config(n_layer=2))
    x = make_tokens(model.config)
    with torch.no_grad():
        before = model(x)
    kept, scaled = copy.deepcopy(model), model
    grow_model(kept, GrowthStage(0, n_layer=4, recipe="paper"))
    grow_model(scaled, GrowthStage(0, n_layer=4, depth_scaling="sqrt", recipe="paper"))
    with torch.no_grad():
        assert torch.equal(kept(x), before)
        assert not torch.allclose(scaled(x), before, atol=1e-3)


def test_copied_blocks_are_scaled_copies_and_other_tensors_are_untouched():
    model = make_gpt(tiny_config(n_layer=2))
    old = {n: t.detach().clone() for n, t in model.state_dict().items()}
    grow_model(model, GrowthStage(0, n_layer=4, depth_init="copy", depth_scaling="sqrt", recipe="paper"))
    state, factor = model.state_dict(), math.sqrt(2 / 4)
    for j, source in ((0, 0), (1, 1), (2, 0), (3, 1)):  # stack: new block 2 + i copies block i
        for rest in ("attn.proj.weight", "mlp.proj.weight"):
            assert torch.equal(state[f"transformer.h.{j}.{rest}"], old[f"transformer.h.{source}.{rest}"] * factor)
        for rest in ("attn.qkv.weight", "mlp.fc_1.weight", "norm_1.weight"):
            assert torch.equal(state[f"transformer.h.{j}.{rest}"], old[f"transformer.h.{source}.{rest}"])
    assert torch.equal(state["transformer.wte.weight"], old["transformer.wte.weight"])


def test_with_a_width_growth_the_factor_multiplies_alpha():
    config = tiny_config(n_layer=2)
    stage = GrowthStage(0, n_layer=4, n_embd=64, depth_scaling="sqrt", recipe="paper")
    plan, without = plan_growth(config, stage), plan_growth(config, GrowthStage(0, n_layer=4, n_embd=64,
                                                                                 recipe="paper"))
    name = "transformer.h.1.mlp.proj.weight"
    assert plan.tensors[name].scale == pytest.approx(without.tensors[name].scale * math.sqrt(2 / 4), abs=0)
    fc = "transformer.h.1.mlp.fc_1.weight"
    assert plan.tensors[fc].scale == without.tensors[fc].scale


@pytest.mark.parametrize("keys, message", [
    (dict(n_layer=4, depth_scaling="cube"), "choose one of none, sqrt"),
    (dict(n_layer=4, n_expert=8, depth_scaling="sqrt"), "with an experts growth in the same stage"),
])
def test_bad_settings_are_refused_naming_the_key(keys, message):
    with pytest.raises(StageError, match=message) as info:
        GrowthStage(0, recipe="paper", **keys)
    assert info.value.key == "depth_scaling"


def test_a_stage_without_depth_growth_is_left_as_it_is():
    config = tiny_config(n_layer=2)
    plain = plan_growth(config, GrowthStage(0, n_embd=64, recipe="paper"))
    scaled = plan_growth(config, GrowthStage(0, n_embd=64, depth_scaling="sqrt", recipe="paper"))
    assert {n: t.scale for n, t in scaled.tensors.items()} == {n: t.scale for n, t in plain.tensors.items()}


def test_post_branch_norms_are_refused_before_anything_changes():
    config = neox_config(n_layer=2, post_attention_norm=True, post_mlp_norm=True)
    with pytest.raises(GrowthError, match="post-branch norms") as info:
        plan_growth(config, GrowthStage(0, n_layer=4, depth_scaling="sqrt", recipe="paper"))
    assert info.value.key == "depth_scaling"


def test_a_progressive_schedule_scales_at_every_growth():
    config = tiny_config(n_layer=1)
    factors = []
    for stage in progressive_stages(n_layer=[1, 2, 4], at_step=[0, 1], depth_scaling="sqrt", recipe="paper"):
        plan = plan_growth(config, stage)
        factors.append(plan.tensors["transformer.h.0.attn.proj.weight"].scale)
        config = plan.new_config
    assert factors == [math.sqrt(1 / 2), math.sqrt(2 / 4)]


# ------------------------------------------------------------------------------------------------------------ resume
MAX_STEPS, DEPTH_AT = 10, 4


def _fit(module: TinyModule, **kwargs):
    stage = GrowthStage(DEPTH_AT, n_layer=4, depth_scaling="sqrt", rewarmup_steps=2, recipe="paper")
    trainer = make_trainer([WidthGrowthCallback([stage])] + kwargs.pop("callbacks", []), max_steps=MAX_STEPS,
                           **kwargs)
    trainer.fit(module, ckpt_path=kwargs.get("ckpt_path"))
    return trainer


def test_resume_around_the_scaled_growth_is_bit_exact(tmp_path: Path):
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1, filename="{step}")
    reference = TinyModule(max_steps=MAX_STEPS)
    _fit(reference, callbacks=[ckpt], enable_checkpointing=True, default_root_dir=tmp_path)
    assert reference.model.config.n_layer == 4
    expected = {n: t.detach().clone() for n, t in reference.model.state_dict().items()}
    for step in (DEPTH_AT, DEPTH_AT + 1):  # the growth still to come, and just done
        resumed = TinyModule(max_steps=MAX_STEPS)
        stage = GrowthStage(DEPTH_AT, n_layer=4, depth_scaling="sqrt", rewarmup_steps=2, recipe="paper")
        make_trainer([WidthGrowthCallback([stage])], max_steps=MAX_STEPS).fit(
            resumed, ckpt_path=str(tmp_path / f"step={step}.ckpt"))
        assert_states_equal(resumed.model.state_dict(), expected, f"resume from step {step}")

