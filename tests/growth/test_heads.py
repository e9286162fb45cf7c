"""Heads growth (``paper_stage(n_head=..., n_query_groups=...)``) and growth into a named litgpt config
(``model_name`` / ``model_config``): litgpt's fused ``qkv`` layout under MHA, GQA (both ways) and MQA, function
preservation under copy-copy at integer ratios, pythia by name, refusals, and inside a fit the applied LR of every
entry class (read from SGD updates) through a width growth followed by a heads growth, and bit-exact resume."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from litgpt import GPT, Config

from lightning_sparkling import WidthGrowthCallback, grow_model, rewarmup_lr
from lightning_sparkling.growth.compute import count_params
from lightning_sparkling.growth.head_layout import head_layout
from lightning_sparkling.growth.plan import GrowthError, plan_growth
from lightning_sparkling.growth.schedules import WarmupCosineLambda
from lightning_sparkling.growth.symmetry import copy_specs, symmetry_metrics

from _measure import RecordSteps, applied_lr
from _tiny import TinyModule, assert_states_equal, make_trainer, paper_stage
from conftest import (
    assert_unchanged,
    gemma_config,
    latent_attention_config,
    llama_config,
    make_gpt,
    make_tokens,
    moe_config,
    neox_config,
    olmo2_config,
    qk_norm_config,
    snapshot,
)


def test_head_layout_keeps_each_copy_in_its_source_group():
    layout = head_layout(4, 2, 8, 2)  # GQA, groups of 2 -> groups of 4
    assert layout.q_source == (0, 1, 0, 1, 2, 3, 2, 3)
    assert layout.q_fresh == (False, False, True, True, False, False, True, True)
    assert layout.kv_source == (0, 1) and not any(layout.kv_fresh)
    layout = head_layout(4, 2, 8, 4)  # new groups copy groups: heads per group unchanged
    assert layout.q_source == (0, 1, 2, 3, 0, 1, 2, 3) and layout.kv_source == (0, 1, 0, 1)
    assert layout.kv_fresh == (False, False, True, True)
    for old_h, old_g, new_h, new_g in [(4, 2, 8, 2), (4, 2, 8, 4), (4, 4, 12, 12), (4, 1, 6, 1), (6, 2, 12, 3)]:
        layout = head_layout(old_h, old_g, new_h, new_g, torch.Generator().manual_seed(0))
        q, q_new = old_h // old_g, new_h // new_g
        for p, s in enumerate(layout.q_source):
            # the group a new head reads is (a copy of) its source's group
            assert layout.kv_source[p // q_new] == s // q
        kept = [s for s, f in zip(layout.q_source, layout.q_fresh) if not f]
        assert kept == list(range(old_h))


@pytest.mark.parametrize("old_h, old_g, new_h, new_g, message", [
    (4, 2, 2, 2, "heads can only grow"),
    (4, 2, 6, 4, "not a multiple"),
    (4, 2, 8, 8, "1 query heads per group, fewer than the model's 2"),
])
def test_head_layout_refuses_what_cannot_keep_the_groups(old_h, old_g, new_h, new_g, message):
    with pytest.raises(ValueError, match=message):
        head_layout(old_h, old_g, new_h, new_g)


CASES = {
    "mha (neox: parallel residual, partial rotary, biases)": (neox_config(), dict(n_head=8)),
    "mha 3x": (neox_config(), dict(n_head=12)),
    "gqa join groups": (llama_config(), dict(n_head=8)),
    "gqa new groups": (llama_config(), dict(n_head=8, n_query_groups=4)),
    "mqa (gemma: post-norms, soft-capping)": (gemma_config(), dict(n_head=8)),
    "olmo2 qk norms over the projection": (olmo2_config(), dict(n_head=8, n_query_groups=4)),
    "per-head qk norms": (qk_norm_config(), dict(n_head=8)),
    "moe": (moe_config(), dict(n_head=8)),
    "heads + width + depth": (llama_config(), dict(n_head=8, n_embd=64, intermediate_size=128, n_layer=4,
                                                   depth_order="interleave")),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_copy_copy_heads_growth_keeps_the_logits(case):
    config, keys = CASES[case]
    model = make_gpt(config)
    x = make_tokens(config)
    with torch.no_grad():
        before = model(x)
    grow_model(model, paper_stage(0, **keys))
    with torch.no_grad():
        torch.testing.assert_close(model(x), before, atol=1e-5, rtol=0)
    assert model.config.n_head == keys["n_head"] and model.config.head_size == config.head_size
    mha = config.n_query_groups == config.n_head
    assert model.config.n_query_groups == keys.get("n_query_groups", keys["n_head"] if mha else config.n_query_groups)
    GPT(model.config).load_state_dict(model.state_dict(), strict=True)


def test_random_zero_heads_start_random_with_zeroed_proj_columns():
    model = make_gpt(llama_config())
    grow_model(model, paper_stage(0, n_head=8, init="random-zero"))
    attn = model.transformer.h[0].attn
    hs = model.config.head_size
    fresh_heads = [2, 3, 6, 7]  # groups of 2 -> 4: slots 2 and 3 of each group are new
    for h in fresh_heads:
        assert not attn.proj.weight[:, h * hs:(h + 1) * hs].any()
        assert attn.qkv.weight[h * hs:(h + 1) * hs].abs().sum() > 0
    assert not torch.equal(attn.qkv.weight[2 * hs:3 * hs], attn.qkv.weight[0:hs])


def test_a_heads_stage_that_does_not_fit_is_refused_before_anything_changes():
    model = make_gpt(llama_config())
    snap = snapshot(model)
    with pytest.raises(GrowthError, match="query heads per group"):
        grow_model(model, paper_stage(0, n_head=8, n_query_groups=8))
    with pytest.raises(GrowthError, match="n_head=2 shrinks"):
        grow_model(model, paper_stage(0, n_head=2))
    assert_unchanged(model, snap)
    with pytest.raises(GrowthError, match="latent attention"):
        plan_growth(latent_attention_config(), paper_stage(0, n_head=8))
    with pytest.raises(ValueError, match="not supported with a heads growth"):
        paper_stage(0, n_head=8, split="uneven")


# ----------------------------------------------------------------------------------------------- named configs
def test_pythia_14m_to_31m_by_name_keeps_the_function_and_ends_with_31m_shapes():
    model = make_gpt(Config.from_name("pythia-14m"))
    x = make_tokens(model.config)
    with torch.no_grad():
        before = model(x)
    grow_model(model, paper_stage(0, model_name="pythia-31m"))
    with torch.no_grad():
        torch.testing.assert_close(model(x), before, atol=1e-5, rtol=0)
    target = Config.from_name("pythia-31m")
    differs = [f.name for f in dataclasses.fields(target) if getattr(target, f.name) != getattr(model.config, f.name)]
    assert differs == []
    reference = GPT(target)
    assert ({n: t.shape for n, t in reference.state_dict().items()}
            == {n: t.shape for n, t in model.state_dict().items()})


def test_pythia_70m_to_160m_by_name_loads_strictly_into_160m():
    model = GPT(Config.from_name("pythia-70m"))
    result = grow_model(model, paper_stage(0, model_name="pythia-160m"))
    GPT(Config.from_name("pythia-160m")).load_state_dict(model.state_dict(), strict=True)
    assert result.plan.stage.sizes == {"n_embd": 768, "intermediate_size": 3072, "n_head": 12, "n_query_groups": 12,
                                       "n_layer": 12}


@pytest.mark.parametrize("keys, message", [
    (dict(model_name="pythia-70m"), "head_size=64 differs from the model's head_size=32"),
    (dict(model_name="pythia-14m"), "the target has the model's shape"),
    (dict(model_name="no-such-model"), "not a litgpt config"),
    (dict(model_config={**dataclasses.asdict(Config.from_name("pythia-31m")), "vocab_size": 1000,
                        "padded_vocab_size": 1024}), "vocab_size=1000 differs"),
    (dict(model_config={**dataclasses.asdict(Config.from_name("pythia-31m")), "n_embd": 64, "n_head": 2,
                        "n_query_groups": 2}),
     "n_embd=64 is smaller than the model's n_embd=128"),
])
def test_a_target_config_that_is_not_a_growth_is_refused_naming_the_field(keys, message):
    model = GPT(Config.from_name("pythia-14m"))
    snap = snapshot(model)
    with pytest.raises(GrowthError, match=message):
        grow_model(model, paper_stage(0, **keys))
    assert_unchanged(model, snap)


def test_model_config_by_fields_takes_the_targets_name_and_block_size():
    small = Config.from_name("pythia-14m")
    target = {**dataclasses.asdict(Config.from_name("pythia-31m")), "name": "my-31m", "block_size": 4096}
    model = GPT(small)
    grow_model(model, paper_stage(0, model_config=target))
    assert (model.config.name, model.config.block_size, model.config.n_embd) == ("my-31m", 4096, 256)


def test_stage_refuses_a_target_with_sizes():
    with pytest.raises(ValueError, match="the target config sets every size"):
        paper_stage(0, model_name="pythia-31m", n_embd=256)
    with pytest.raises(ValueError, match="give one of them"):
        paper_stage(0, model_name="pythia-31m", model_config={"n_embd": 256})


# ----------------------------------------------------------------------------------------------- symmetry
def test_heads_symmetry_is_one_at_growth():
    model = make_gpt(llama_config())
    result = grow_model(model, paper_stage(0, n_head=8))
    specs = copy_specs(result.plan)
    assert {"attn_q", "attn_qkv"} <= set(specs)
    params = dict(model.named_parameters())
    names = sorted({n for spec in specs.values() for n, _ in spec.tensors})
    metrics = symmetry_metrics(specs, ((n, params[n]) for n in names), "s")
    assert metrics["s/attn_qkv"] == pytest.approx(1.0, abs=1e-6) and metrics["s/attn_q"] == pytest.approx(1.0, abs=1e-6)


# ----------------------------------------------------------------------------------------------- in a fit
MAX_STEPS = 20
WIDTH_AT, HEADS_AT = 6, 12


def _stages():
    return [paper_stage(WIDTH_AT, n_embd=48, rewarmup_ratio=2.0, rewarmup_steps=3),
            paper_stage(HEADS_AT, n_head=8, rewarmup_ratio=1.5, rewarmup_steps=2)]


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])
def test_applied_lr_of_every_entry_class_through_a_width_then_heads_growth(accumulate):
    """SGD: in ``attn.qkv`` after the heads growth, the new heads' rows follow the heads stage's re-warmup, the old
    heads' rows (moved inside their groups) keep the width stage's re-warmup on the columns it added and the module's
    schedule on the original ones; ``attn.proj``'s new head columns follow the heads stage."""
    lr = 0.05
    module = TinyModule(optimizer="sgd", lr=lr, max_steps=MAX_STEPS, accumulate=accumulate)
    recorder = RecordSteps()
    trainer = make_trainer([recorder, WidthGrowthCallback(_stages())], max_steps=MAX_STEPS, accumulate=accumulate,
                           precision="64-true")
    trainer.fit(module)
    schedule = WarmupCosineLambda(5, MAX_STEPS, 0.1)

    def stage_lr(at, ratio, warmup):
        return lambda s: rewarmup_lr(s, growth_step=at, lr_at_growth=lr * schedule(at), ratio=ratio,
                                     warmup_steps=warmup, total_steps=MAX_STEPS, min_lr=lr * 0.1)

    expected = {-1: lambda s: lr * schedule(s), 0: stage_lr(WIDTH_AT, 2.0, 3), 1: stage_lr(HEADS_AT, 1.5, 2)}
    hs = 8  # tiny config: n_embd 32, 4 heads
    fresh_rows = torch.zeros(8 * hs + 2 * 2 * hs, dtype=torch.bool)
    for h in (2, 3, 6, 7):  # groups of 2 -> 4
        fresh_rows[h * hs:(h + 1) * hs] = True
    checked = {-1: 0, 0: 0, 1: 0}
    for record in recorder.records:
        step = record["step"]
        if step <= HEADS_AT:
            continue
        for name in ("transformer.h.0.attn.qkv.weight", "transformer.h.1.attn.qkv.weight"):
            w = record["before"][name]
            creator = torch.full(w.shape, -1)
            creator[:, 32:] = 0
            creator[fresh_rows] = 1
            for k in (-1, 0, 1):
                got = applied_lr(w, record["grad"][name], record["after"][name], creator == k)
                assert got.numel() > 0, (step, name, k)
                assert torch.allclose(got, torch.full_like(got, expected[k](step)), rtol=1e-6), (step, name, k)
                checked[k] += got.numel()
        proj = "transformer.h.0.attn.proj.weight"
        w = record["before"][proj]
        creator = torch.full(w.shape, -1)
        creator[32:, :] = 0
        creator[:, fresh_rows[:8 * hs]] = 1
        got = applied_lr(w, record["grad"][proj], record["after"][proj], creator == 1)
        assert torch.allclose(got, torch.full_like(got, expected[1](step)), rtol=1e-6), step
    assert min(checked.values()) > 500
    s = HEADS_AT + 2
    assert len({round(expected[k](s), 9) for k in (-1, 0, 1)}) == 3


def _fit(module, **kwargs):
    growth = WidthGrowthCallback(_stages())
    ckpt_path = kwargs.pop("ckpt_path", None)
    trainer = make_trainer([growth] + kwargs.pop("callbacks", []), **kwargs)
    trainer.fit(module, ckpt_path=ckpt_path)
    return growth


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])
def test_resume_bit_exact_across_a_heads_growth(tmp_path: Path, accumulate):
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1, filename="{step}")
    reference = TinyModule(max_steps=MAX_STEPS, accumulate=accumulate)
    _fit(reference, max_steps=MAX_STEPS, accumulate=accumulate, callbacks=[ckpt], enable_checkpointing=True)
    assert reference.model.config.n_head == 8
    expected = {n: t.detach().clone() for n, t in reference.model.state_dict().items()}
    for step in (HEADS_AT - 1, HEADS_AT, HEADS_AT + 3):
        resumed = TinyModule(max_steps=MAX_STEPS, accumulate=accumulate)
        _fit(resumed, max_steps=MAX_STEPS, accumulate=accumulate, ckpt_path=str(tmp_path / f"step={step}.ckpt"))
        assert_states_equal(resumed.model.state_dict(), expected, f"resume from step {step}")


def test_estimate_compute_counts_a_named_config_stage_as_its_target():
    from lightning_sparkling import estimate_compute

    small, target = Config.from_name("pythia-70m"), Config.from_name("pythia-160m")
    est = estimate_compute(small, paper_stage(30, model_name="pythia-160m"), total_steps=100, tokens_per_step=64)
    assert est.configs[-1].n_layer == target.n_layer and est.configs[-1].n_embd == target.n_embd
    final_active = count_params(target)[0]
    assert est.active_params == (count_params(small)[0], final_active)
    assert est.flops_from_scratch == 6 * final_active * 64 * 100
