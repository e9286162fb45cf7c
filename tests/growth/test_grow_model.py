"""``grow_model`` on litgpt GPTs: function preservation, strict reloading, refusals, atomicity, dtype/device,
seeded randomness and the :class:`GrowthResult` it returns."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn as nn
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
    olmo_config,
    pure_moe_config,
    qk_norm_config,
    snapshot,
)
from litgpt import GPT, Config

import lightning_sparkling.growth.surgery as surgery
from lightning_sparkling import GrowthError, GrowthResult, GrowthStage, fan_in_scale, grow_model, plan_growth
from lightning_sparkling.growth.plan import build_meta_gpt
from lightning_sparkling.growth.surgery import grow_tensors

INITS = ["copy-copy", "copy-random", "copy-zero", "random-copy", "random-random", "random-zero", "zero-copy",
         "zero-random"]



def grouped_router_moe_config(**overrides) -> Config:
    """MoE with DeepSeek-V3's grouped top-k router (a ``GroupedTopkRouter`` gate instead of ``nn.Linear``)."""
    kwargs = dict(name="moe-grouped-tiny", n_expert_groups=2, n_topk_groups=1, n_topk_scores_per_group=2,
                  norm_topk_prob=True, routed_scaling_factor=2.5)
    kwargs.update(overrides)
    return moe_config(**kwargs)


def qwen_config(**overrides) -> Config:
    """LLaMA-style with a bias on the fused qkv only (``attn_bias=True, bias=False``)."""
    kwargs = dict(name="qwen-tiny", attn_bias=True)
    kwargs.update(overrides)
    return llama_config(**kwargs)


def falcon_config(**overrides) -> Config:
    """Falcon-style: parallel residual with one shared norm for attention and MLP (``norm_2`` is None)."""
    kwargs = dict(name="falcon-tiny", shared_attention_norm=True, lm_head_bias=False)
    kwargs.update(overrides)
    return neox_config(**kwargs)


def logits(model: GPT, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(tokens)


# (case id, config factory, widths, tie_embeddings); integer ratios 2x and 3x on every axis and combined
FUNCTION_PRESERVING_CASES = [
    *[(f"llama-{k}", llama_config, w, False) for k, w in {
        "embd2x": dict(n_embd=64), "embd3x": dict(n_embd=96), "inter2x": dict(intermediate_size=128),
        "inter3x": dict(intermediate_size=192), "both2x": dict(n_embd=64, intermediate_size=128),
        "embd3x-inter2x": dict(n_embd=96, intermediate_size=128)}.items()],
    *[(f"neox-{k}", neox_config, w, False) for k, w in {
        "embd2x": dict(n_embd=64), "embd3x": dict(n_embd=96), "inter2x": dict(intermediate_size=128),
        "inter3x": dict(intermediate_size=192), "embd2x-inter3x": dict(n_embd=64, intermediate_size=192)}.items()],
    *[(f"moe-{k}", moe_config, w, False) for k, w in {
        "embd2x": dict(n_embd=64), "embd3x": dict(n_embd=96), "inter2x": dict(intermediate_size=128),
        "expert2x": dict(moe_intermediate_size=32), "expert3x": dict(moe_intermediate_size=48),
        "all": dict(n_embd=64, intermediate_size=192, moe_intermediate_size=32),
        "all3x": dict(n_embd=96, intermediate_size=192, moe_intermediate_size=48)}.items()],
    ("pure-moe-expert2x", pure_moe_config, dict(moe_intermediate_size=32), False),
    ("pure-moe-embd3x-expert2x", pure_moe_config, dict(n_embd=96, moe_intermediate_size=32), False),
    ("grouped-router-moe-all", grouped_router_moe_config, dict(n_embd=64, intermediate_size=128,
                                                               moe_intermediate_size=48), False),
    *[(f"gemma-{k}", gemma_config, w, False) for k, w in {
        "embd2x": dict(n_embd=64), "embd3x": dict(n_embd=96), "inter2x": dict(intermediate_size=128),
        "both3x": dict(n_embd=96, intermediate_size=192)}.items()],
    ("olmo2-qknorm-embd2x", olmo2_config, dict(n_embd=64), False),
    ("olmo2-qknorm-both3x", olmo2_config, dict(n_embd=96, intermediate_size=192), False),
    ("headwise-qknorm-embd2x", qk_norm_config, dict(n_embd=64), False),
    ("headwise-qknorm-both3x", qk_norm_config, dict(n_embd=96, intermediate_size=192), False),
    ("qwen-attn-bias-embd2x", qwen_config, dict(n_embd=64, intermediate_size=128), False),
    ("falcon-shared-attention-norm-both2x", falcon_config, dict(n_embd=64, intermediate_size=128), False),
    ("olmo1-nonaffine-layernorm-embd2x", olmo_config, dict(n_embd=64), False),
    ("olmo1-nonaffine-layernorm-both3x", olmo_config, dict(n_embd=96, intermediate_size=192), False),
    ("tied-llama-embd2x", llama_config, dict(n_embd=64), True),
    ("tied-llama-embd3x-inter2x", llama_config, dict(n_embd=96, intermediate_size=128), True),
    ("tied-llama-inter2x", llama_config, dict(intermediate_size=128), True),
    ("tied-neox-embd2x", neox_config, dict(n_embd=64), True),
    ("tied-gemma-embd2x", gemma_config, dict(n_embd=64), True),
    ("tied-gemma-both3x", gemma_config, dict(n_embd=96, intermediate_size=192), True),
    ("tied-moe-all", moe_config, dict(n_embd=64, moe_intermediate_size=32), True),
]


@pytest.mark.parametrize("factory,widths,tied", [c[1:] for c in FUNCTION_PRESERVING_CASES],
                         ids=[c[0] for c in FUNCTION_PRESERVING_CASES])
def test_copy_copy_at_integer_ratio_preserves_logits(factory: Callable[..., Config], widths, tied):
    config = factory()
    model = make_gpt(config, seed=1, tie_embeddings=tied)
    tokens = make_tokens(config, batch=2, length=16)
    before = logits(model, tokens)
    assert before.std() > 0.05  # logits are not trivially small

    result = grow_model(model, GrowthStage(0, **widths), seed=3)

    for axis, size in widths.items():
        assert getattr(model.config, axis) == size
    if "n_embd" in widths:
        assert model.transformer.wte.weight.shape == (config.padded_vocab_size, widths["n_embd"])
        assert model.lm_head.weight.shape == (config.padded_vocab_size, widths["n_embd"])
    if tied:
        assert model.lm_head.weight is model.transformer.wte.weight
        assert isinstance(model.lm_head.weight, nn.Parameter)
        assert len(list(model.parameters())) == len(dict(model.named_parameters(remove_duplicate=False))) - 1
    assert result.new_params  # something was replaced
    after = logits(model, tokens)
    assert after.shape == before.shape
    torch.testing.assert_close(after, before, atol=1e-5, rtol=0)


@pytest.mark.parametrize("factory,widths,tied", [
    (neox_config, dict(n_embd=96, intermediate_size=128), False),
    (neox_config, dict(n_embd=64, intermediate_size=192), True),
    (llama_config, dict(n_embd=64, intermediate_size=192), False),
], ids=["neox-3x", "neox-tied", "llama"])
def test_copy_copy_preserves_logits_in_float64_to_rounding(factory, widths, tied):
    """In float64 the growth is exact to ~1e-12: scales like 1/3 are applied in float64, not float32.

    RMSNorm models grow n_embd by 2x only here: litgpt's RMSNorm computes in float32 whatever the dtype, and its
    mean over 3 tiled copies is not bitwise the mean over one; any 1e-16 change of its input shows at float32
    precision. Gemma (irrational embedding compensation sqrt(d/d')) and MoE (litgpt's router softmax is float32) are
    left out for the same reason."""
    config = factory()
    model = make_gpt(config, seed=2, tie_embeddings=tied).double()
    tokens = make_tokens(config)
    before = logits(model, tokens)
    grow_model(model, GrowthStage(0, **widths))
    assert all(p.dtype == torch.float64 for p in model.parameters())
    torch.testing.assert_close(logits(model, tokens), before, atol=1e-12, rtol=0)


@pytest.mark.parametrize("factory", [llama_config, neox_config, gemma_config])
def test_growth_is_not_trivially_function_preserving(factory):
    """The function-preservation tests can fail: naive copy-copy (alpha = 1) and copy-copy at a non-integer ratio
    both change the logits by far more than the tolerance used above."""
    config = factory()
    tokens = make_tokens(config)
    for stage in (GrowthStage(0, n_embd=64, rms_preserving=False),
                  GrowthStage(0, intermediate_size=128, rms_preserving=False),
                  GrowthStage(0, n_embd=48), GrowthStage(0, intermediate_size=100)):
        model = make_gpt(config, seed=1)
        before = logits(model, tokens)
        grow_model(model, stage)
        assert (logits(model, tokens) - before).abs().max() > 1e-3, stage


def test_two_successive_stages_preserve_logits():
    config = moe_config()
    model = make_gpt(config, seed=4, tie_embeddings=True)
    tokens = make_tokens(config)
    before = logits(model, tokens)
    grow_model(model, GrowthStage(10, n_embd=64, moe_intermediate_size=32), stage_index=0)
    grow_model(model, GrowthStage(20, n_embd=128, intermediate_size=128, moe_intermediate_size=96), stage_index=1)
    assert (model.config.n_embd, model.config.intermediate_size, model.config.moe_intermediate_size) == (128, 128, 96)
    torch.testing.assert_close(logits(model, tokens), before, atol=1e-5, rtol=0)
    GPT(model.config).load_state_dict(model.state_dict(), strict=True)


# ---------------------------------------------------------------- strict reload and the grown Config

RELOAD_CASES = [
    ("llama", llama_config, dict(n_embd=64, intermediate_size=128), False),
    ("neox", neox_config, dict(n_embd=96, intermediate_size=100), False),
    ("moe", moe_config, dict(n_embd=48, intermediate_size=128, moe_intermediate_size=50), False),
    ("pure-moe", pure_moe_config, dict(n_embd=64, moe_intermediate_size=24), False),
    ("gemma", gemma_config, dict(n_embd=48, intermediate_size=96), False),
    ("olmo2", olmo2_config, dict(n_embd=64), False),
    ("olmo1", olmo_config, dict(n_embd=48, intermediate_size=96), False),
    ("qk-norm", qk_norm_config, dict(n_embd=40), False),
    ("grouped-router", grouped_router_moe_config, dict(n_embd=64, moe_intermediate_size=32), False),
    ("tied-llama", llama_config, dict(n_embd=48), True),
    ("tied-gemma", gemma_config, dict(n_embd=64, intermediate_size=128), True),
]


@pytest.mark.parametrize("init", ["copy-copy", "random-zero", "zero-copy"])
@pytest.mark.parametrize("factory,widths,tied", [c[1:] for c in RELOAD_CASES], ids=[c[0] for c in RELOAD_CASES])
def test_grown_state_dict_loads_strictly_into_gpt_of_new_config(factory, widths, tied, init):
    config = factory()
    model = make_gpt(config, seed=0, tie_embeddings=tied)
    old_config = model.config
    old_values = {f.name: getattr(old_config, f.name) for f in old_config.__dataclass_fields__.values()}
    old_derived = (old_config.head_size, old_config.n_head, old_config.n_query_groups, old_config.rope_n_elem)
    modules_before = dict(model.named_modules())

    grow_model(model, GrowthStage(0, init=init, **widths), seed=11)

    # in place: the very same module objects, tied weights still one Parameter
    modules_after = dict(model.named_modules())
    assert modules_after.keys() == modules_before.keys()
    assert all(modules_after[n] is modules_before[n] for n in modules_before)
    assert (model.lm_head.weight is model.transformer.wte.weight) is tied

    new_config = model.config
    assert isinstance(new_config, Config) and new_config is not old_config
    # the old Config object was not mutated
    assert {f.name: getattr(old_config, f.name) for f in old_config.__dataclass_fields__.values()} == old_values
    # heads, head size and RoPE unchanged; the requested widths set; other widths unchanged
    assert (new_config.head_size, new_config.n_head, new_config.n_query_groups, new_config.rope_n_elem) == old_derived
    for axis in ("n_embd", "intermediate_size", "moe_intermediate_size"):
        assert getattr(new_config, axis) == widths.get(axis, getattr(old_config, axis))
    assert new_config.padded_vocab_size == old_config.padded_vocab_size
    assert new_config.n_layer == old_config.n_layer and new_config.name == old_config.name
    # every module refers to the new config, none to the old one
    for name, module in model.named_modules():
        if "config" in module.__dict__:
            assert module.config is new_config, name

    fresh = GPT(new_config)
    fresh.load_state_dict(model.state_dict(), strict=True)
    tokens = make_tokens(config)
    out = logits(model, tokens)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(logits(fresh, tokens), out, atol=1e-6, rtol=0)

    # module size attributes agree with GPT(new_config) (same class, same sizes), module by module
    reference = dict(build_meta_gpt(new_config).named_modules())
    assert str(model) == str(build_meta_gpt(new_config))
    for name, module in model.named_modules():
        ref = reference[name]
        assert type(module) is type(ref), name
        for attr in ("in_features", "out_features", "embedding_dim", "normalized_shape", "intermediate_size"):
            if hasattr(ref, attr):
                assert getattr(module, attr) == getattr(ref, attr), f"{name}.{attr}"


@pytest.mark.parametrize("init", INITS)
@pytest.mark.parametrize("factory,widths", [
    (llama_config, dict(n_embd=48)),  # 1.5x
    (llama_config, dict(n_embd=48, intermediate_size=200)),  # 1.5x and 3.125x
    (neox_config, dict(n_embd=50, intermediate_size=100)),
    (moe_config, dict(moe_intermediate_size=50)),  # 16 -> 50
    (moe_config, dict(n_embd=48, intermediate_size=96, moe_intermediate_size=50)),
], ids=["llama-embd1.5", "llama-embd1.5-inter3.125", "neox-embd50-inter100", "moe-expert16to50", "moe-all"])
def test_non_integer_ratios_grow_and_train(factory, widths, init):
    config = factory()
    model = make_gpt(config, seed=5)
    grow_model(model, GrowthStage(0, init=init, **widths), seed=2)
    GPT(model.config).load_state_dict(model.state_dict(), strict=True)
    tokens = make_tokens(config)
    out = model(tokens)
    assert torch.isfinite(out).all()
    # gradients flow into the grown parameters with the right shapes
    nn.functional.cross_entropy(out.flatten(0, 1), tokens.flatten()).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.shape == p.shape, name
        assert torch.isfinite(p.grad).all(), name


def test_requires_grad_is_kept():
    model = make_gpt(llama_config())
    model.transformer.wte.weight.requires_grad_(False)
    model.transformer.h[0].norm_1.weight.requires_grad_(False)
    grow_model(model, GrowthStage(0, n_embd=64))
    assert not model.transformer.wte.weight.requires_grad
    assert not model.transformer.h[0].norm_1.weight.requires_grad
    assert model.transformer.h[0].attn.qkv.weight.requires_grad


# ---------------------------------------------------------------- refusals leave the model untouched

REFUSALS = [
    ("shrink-embd", llama_config, dict(n_embd=16), "n_embd"),
    ("equal-embd", llama_config, dict(n_embd=32), "n_embd"),
    ("shrink-inter", neox_config, dict(intermediate_size=32), "intermediate_size"),
    ("equal-inter", neox_config, dict(n_embd=64, intermediate_size=64), "intermediate_size"),
    ("shrink-expert", moe_config, dict(moe_intermediate_size=8), "moe_intermediate_size"),
    ("equal-expert", moe_config, dict(n_embd=64, moe_intermediate_size=16), "moe_intermediate_size"),
    ("expert-on-dense", llama_config, dict(moe_intermediate_size=32), "moe_intermediate_size"),
    ("expert-on-neox", neox_config, dict(n_embd=64, moe_intermediate_size=32), "moe_intermediate_size"),
    ("inter-on-pure-moe", pure_moe_config, dict(intermediate_size=128), "intermediate_size"),
    ("latent-attention", latent_attention_config, dict(n_embd=64), "latent_attention"),
]


@pytest.mark.parametrize("factory,widths,setting", [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS])
def test_refused_growth_names_the_setting_and_leaves_model_untouched(factory, widths, setting):
    config = factory()
    model = make_gpt(config)
    tokens = make_tokens(config)
    before = logits(model, tokens)
    snap = snapshot(model)
    stage = GrowthStage(0, **widths)
    with pytest.raises(GrowthError, match=setting):
        grow_model(model, stage)
    assert_unchanged(model, snap)
    assert torch.equal(logits(model, tokens), before)
    # the planner alone refuses the same way
    with pytest.raises(GrowthError, match=setting):
        plan_growth(config, stage)


def test_growth_error_is_a_value_error():
    assert issubclass(GrowthError, ValueError)


@pytest.mark.parametrize("wrap", ["sequential", "linear", "lightning-like"])
def test_non_gpt_model_is_refused(wrap):
    gpt = make_gpt(llama_config())
    if wrap == "sequential":
        model = nn.Sequential(gpt)
    elif wrap == "linear":
        model = nn.Linear(32, 32)
    else:
        class Wrapper(nn.Module):
            def __init__(self):
                super().__init__()
                self.model = gpt
                self.config = gpt.config

        model = Wrapper()
    snap = snapshot(gpt)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    with pytest.raises(GrowthError, match="GPT"):
        grow_model(model, GrowthStage(0, n_embd=64))
    assert_unchanged(gpt, snap)
    for n, p in model.named_parameters():
        assert torch.equal(p, before[n])


def test_modified_gpt_is_refused():
    """A GPT whose tensors no longer match its config (e.g. a layer swapped by hand) is not a plain GPT."""
    model = make_gpt(llama_config())
    model.transformer.h[1].mlp.proj = nn.Linear(64, 32, bias=True)
    snap = snapshot(model)
    with pytest.raises(GrowthError, match="GPT"):
        grow_model(model, GrowthStage(0, n_embd=64))
    assert_unchanged(model, snap)


def test_model_with_kv_cache_is_refused():
    config = llama_config()
    model = make_gpt(config)
    model.set_kv_cache(batch_size=1)
    snap = snapshot(model)
    with pytest.raises(GrowthError, match="kv_cache"):
        grow_model(model, GrowthStage(0, n_embd=64))
    assert_unchanged(model, snap)
    assert all(b.attn.kv_cache is not None for b in model.transformer.h)
    model.clear_kv_cache()
    grow_model(model, GrowthStage(0, n_embd=64))
    assert model.config.n_embd == 64


# ---------------------------------------------------------------- atomicity


def _assert_failed_growth_left_no_trace(model, snap, tokens, before, stage):
    assert_unchanged(model, snap)
    assert torch.equal(logits(model, tokens), before)
    # a later growth works and gives exactly what growing an untouched twin gives
    twin = make_gpt(model.config, seed=0, tie_embeddings=snap.tied)
    for (n, p), (n2, p2) in zip(model.named_parameters(), twin.named_parameters()):
        assert n == n2 and torch.equal(p, p2)
    grow_model(model, stage, seed=1)
    grow_model(twin, stage, seed=1)
    for (n, p), (_, p2) in zip(model.named_parameters(), twin.named_parameters()):
        assert torch.equal(p, p2), n
    torch.testing.assert_close(logits(model, tokens), before, atol=1e-5, rtol=0)


@pytest.mark.parametrize("factory,tied", [(llama_config, False), (neox_config, False), (gemma_config, True),
                                          (moe_config, False)])
def test_failure_in_structural_check_restores_model(monkeypatch, factory, tied):
    config = factory()
    model = make_gpt(config, seed=0, tie_embeddings=tied)
    tokens = make_tokens(config)
    before = logits(model, tokens)
    snap = snapshot(model)
    widths = dict(n_embd=64, intermediate_size=128)
    if config.mlp_class_name == "LLaMAMoE":
        widths["moe_intermediate_size"] = 32
    stage = GrowthStage(0, **widths)
    real = surgery.build_meta_gpt
    calls = []

    def failing(cfg):
        calls.append(cfg.n_embd)
        if cfg.n_embd == 64:  # the grown config: only the post-swap structural check builds it in surgery
            raise RuntimeError("injected failure in the structural check")
        return real(cfg)

    monkeypatch.setattr(surgery, "build_meta_gpt", failing)
    with pytest.raises(RuntimeError, match="injected"):
        grow_model(model, stage, seed=1)
    assert 64 in calls  # the failure really happened inside the swap
    monkeypatch.setattr(surgery, "build_meta_gpt", real)
    _assert_failed_growth_left_no_trace(model, snap, tokens, before, stage)


def test_structural_mismatch_is_refused_and_restores_model(monkeypatch):
    """If the swapped model did not look like GPT(grown config), grow_model raises its own GrowthError and undoes."""
    config = llama_config()
    model = make_gpt(config)
    tokens = make_tokens(config)
    before = logits(model, tokens)
    snap = snapshot(model)
    real = surgery.build_meta_gpt
    stage = GrowthStage(0, n_embd=64)
    # the reference for the check is built from a config with a different MLP width
    monkeypatch.setattr(surgery, "build_meta_gpt",
                        lambda cfg: real(Config(**{**{f: getattr(cfg, f) for f in cfg.__dataclass_fields__},
                                                   "intermediate_size": 96}))
                        if cfg.n_embd == 64 else real(cfg))
    with pytest.raises(GrowthError, match="structure"):
        grow_model(model, stage)
    monkeypatch.setattr(surgery, "build_meta_gpt", real)
    _assert_failed_growth_left_no_trace(model, snap, tokens, before, stage)


@pytest.mark.parametrize("fail_after", [0, 1, 5, 12])
@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_failure_midway_through_attribute_sync_restores_model(monkeypatch, fail_after, exc):
    config = llama_config()
    model = make_gpt(config, tie_embeddings=True)
    tokens = make_tokens(config)
    before = logits(model, tokens)
    snap = snapshot(model)
    real = surgery._sync_module_attributes
    count = [0]

    def flaky(swap, module):
        if count[0] >= fail_after:
            raise exc("injected failure mid-way")
        count[0] += 1
        real(swap, module)  # some attributes are already changed when the failure hits

    monkeypatch.setattr(surgery, "_sync_module_attributes", flaky)
    stage = GrowthStage(0, n_embd=64, intermediate_size=128)
    with pytest.raises(exc):
        grow_model(model, stage)
    assert count[0] == fail_after
    monkeypatch.setattr(surgery, "_sync_module_attributes", real)
    _assert_failed_growth_left_no_trace(model, snap, tokens, before, stage)


@pytest.mark.parametrize("factory,tied", [(gemma_config, True), (olmo_config, False), (moe_config, False)])
def test_rollback_restores_the_model(factory, tied):
    config = factory()
    model = make_gpt(config, tie_embeddings=tied)
    tokens = make_tokens(config)
    before = logits(model, tokens)
    snap = snapshot(model)
    widths = dict(n_embd=64, intermediate_size=128)
    if config.mlp_class_name == "LLaMAMoE":
        widths["moe_intermediate_size"] = 48
    result = grow_model(model, GrowthStage(0, init="random-copy", **widths))
    assert model.config is not snap.config and model.transformer.wte.weight.shape[1] == 64
    result.rollback()
    assert_unchanged(model, snap)
    assert torch.equal(logits(model, tokens), before)
    with pytest.raises(RuntimeError, match="rolled back"):
        result.rollback()


# ---------------------------------------------------------------- dtype, device, randomness


@pytest.mark.parametrize("init", ["copy-copy", "random-random", "zero-copy"])
def test_bf16_model_stays_bf16(init):
    config = moe_config()
    model = make_gpt(config).to(torch.bfloat16)
    grow_model(model, GrowthStage(0, init=init, n_embd=48, intermediate_size=128, moe_intermediate_size=32))
    for name, p in model.named_parameters():
        assert p.dtype == torch.bfloat16, name
        assert p.device.type == "cpu"
    out = model(make_tokens(config))
    assert out.dtype == torch.bfloat16 and torch.isfinite(out.float()).all()


def test_bf16_copy_copy_stays_close():
    """In bf16 copy-copy at 2x is exact up to bf16 rounding of the (re-ordered) sums."""
    config = llama_config()
    model = make_gpt(config).to(torch.bfloat16)
    tokens = make_tokens(config)
    before = logits(model, tokens).float()
    grow_model(model, GrowthStage(0, n_embd=64, intermediate_size=128))
    torch.testing.assert_close(logits(model, tokens).float(), before, atol=2e-2, rtol=2e-2)


def _grown_params(seed_model: int, growth_seed: int, init: str, global_seed: int) -> dict[str, torch.Tensor]:
    model = make_gpt(moe_config(), seed=seed_model)
    torch.manual_seed(global_seed)
    grow_model(model, GrowthStage(0, init=init, n_embd=48, intermediate_size=100, moe_intermediate_size=24),
               seed=growth_seed)
    return {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("init", ["random-random", "copy-copy", "random-zero"])
def test_growth_randomness_comes_only_from_the_seed(init):
    a = _grown_params(0, growth_seed=7, init=init, global_seed=1)
    b = _grown_params(0, growth_seed=7, init=init, global_seed=999)
    assert a.keys() == b.keys()
    for n in a:
        assert torch.equal(a[n], b[n]), n
    c = _grown_params(0, growth_seed=8, init=init, global_seed=1)
    assert any(not torch.equal(a[n], c[n]) for n in a)


def test_different_seed_changes_random_entries_only():
    config = llama_config()
    m1, m2 = make_gpt(config), make_gpt(config)
    r1 = grow_model(m1, GrowthStage(0, init="random-random", intermediate_size=128), seed=0)
    grow_model(m2, GrowthStage(0, init="random-random", intermediate_size=128), seed=1)
    p1, p2 = dict(m1.named_parameters()), dict(m2.named_parameters())
    for name, pieces in r1.new_entries.items():
        old = r1.old_params[name]
        alpha = r1.alpha[name]
        for t in (p1[name], p2[name]):  # old entries: same (up to alpha) whatever the seed
            torch.testing.assert_close(t[tuple(slice(0, s) for s in old.shape)], old * alpha, rtol=1e-6, atol=0)
        for piece in pieces:
            assert not torch.equal(p1[name][piece], p2[name][piece]), name


@pytest.mark.parametrize("init", ["random-random", "copy-copy", "zero-random"])
def test_grow_model_does_not_touch_global_rng(init):
    model = make_gpt(moe_config())
    torch.manual_seed(123)
    state = torch.get_rng_state()
    grow_model(model, GrowthStage(0, init=init, n_embd=40, moe_intermediate_size=20), seed=3)
    assert torch.equal(torch.get_rng_state(), state)


def test_grown_tensors_do_not_depend_on_subset_or_order():
    """Each tensor has its own seeded generator: growing one tensor alone (as FSDP does layer by layer) gives the
    same numbers as growing all of them."""
    model = make_gpt(llama_config())
    plan = plan_growth(model.config, GrowthStage(0, init="random-random", n_embd=48, intermediate_size=80), seed=4)
    tensors = {n: p.detach() for n, p in model.named_parameters()}
    everything = grow_tensors(plan, tensors)
    names = list(tensors)
    for name in (names[-1], names[3], names[0]):
        alone = grow_tensors(plan, {name: tensors[name]})
        assert torch.equal(alone[name], everything[name]), name
    reversed_order = grow_tensors(plan, dict(reversed(list(tensors.items()))))
    for name in everything:
        assert torch.equal(reversed_order[name], everything[name])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_growth_on_cuda_stays_on_cuda_and_matches_cpu():
    config = moe_config()
    cpu_model = make_gpt(config)
    gpu_model = make_gpt(config).cuda()
    stage = GrowthStage(0, init="random-random", n_embd=48, intermediate_size=100, moe_intermediate_size=24)
    grow_model(cpu_model, stage, seed=5)
    grow_model(gpu_model, stage, seed=5)
    cpu_params = dict(cpu_model.named_parameters())
    for name, p in gpu_model.named_parameters():
        assert p.device.type == "cuda", name
        # same random draws; mean/std reductions on the GPU may differ in the last bits
        torch.testing.assert_close(p.cpu(), cpu_params[name], rtol=1e-5, atol=1e-7)
    # and copy-copy growth is function preserving on the GPU too
    model = make_gpt(config).cuda()
    tokens = make_tokens(config).cuda()
    before = logits(model, tokens)
    grow_model(model, GrowthStage(0, n_embd=64, intermediate_size=128, moe_intermediate_size=32))
    assert all(p.device.type == "cuda" for p in model.parameters())
    torch.testing.assert_close(logits(model, tokens), before, atol=1e-4, rtol=0)


# ---------------------------------------------------------------- GrowthResult

# how each llama parameter grows: {suffix: ((dim, axis, role), ...)}
LLAMA_LAYOUT = {
    "transformer.wte.weight": ((1, "n_embd", "fan_out"),),
    "lm_head.weight": ((1, "n_embd", "fan_in"),),
    "transformer.ln_f.weight": ((0, "n_embd", "fan_out"),),
    "norm_1.weight": ((0, "n_embd", "fan_out"),),
    "norm_2.weight": ((0, "n_embd", "fan_out"),),
    "attn.qkv.weight": ((1, "n_embd", "fan_in"),),
    "attn.proj.weight": ((0, "n_embd", "fan_out"),),
    "mlp.fc_1.weight": ((0, "intermediate_size", "fan_out"), (1, "n_embd", "fan_in")),
    "mlp.fc_2.weight": ((0, "intermediate_size", "fan_out"), (1, "n_embd", "fan_in")),
    "mlp.proj.weight": ((0, "n_embd", "fan_out"), (1, "intermediate_size", "fan_in")),
}
OLD = {"n_embd": 32, "intermediate_size": 64}


def _layout(name: str):
    matches = [v for k, v in LLAMA_LAYOUT.items() if name.endswith(k)]
    assert len(matches) == 1, name
    return matches[0]


def _mask_of(shape, pieces):
    mask = torch.zeros(shape, dtype=torch.int32)
    for piece in pieces:
        mask[piece] += 1
    return mask


@pytest.mark.parametrize("widths", [dict(n_embd=64, intermediate_size=128), dict(n_embd=48, intermediate_size=100),
                                    dict(intermediate_size=192), dict(n_embd=80)])
def test_growth_result_copy_copy(widths):
    model = make_gpt(llama_config(), seed=3)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    old_objects = dict(model.named_parameters())
    stage = GrowthStage(0, **widths)
    result = grow_model(model, stage, seed=9)
    assert isinstance(result, GrowthResult) and result.seconds >= 0
    assert result.old_config.n_embd == 32 and result.new_config is model.config
    now = dict(model.named_parameters())

    # exactly the parameters on a growing axis were replaced
    expected_changed = {n for n in before if any(axis in widths for _, axis, _ in _layout(n))}
    assert set(result.new_params) == set(result.old_params) == expected_changed
    for n in now:
        if n in expected_changed:
            assert result.old_params[n] is old_objects[n] and result.new_params[n] is now[n]
            assert now[n] is not old_objects[n]
        else:
            assert now[n] is old_objects[n] and torch.equal(now[n], before[n])

    # sources: one map per axis; tiles at integer ratio; otherwise in range, with the right multiplicities
    assert set(result.sources) == set(widths)
    for axis, new in widths.items():
        src = result.sources[axis]
        old = OLD[axis]
        assert src.shape == (new - old,)
        if new % old == 0:
            assert src.tolist() == list(range(old)) * (new // old - 1)
        assert int(src.max()) < old and int(torch.bincount(src, minlength=old).max()) <= math.ceil((new - old) / old)

    alphas = {axis: fan_in_scale(OLD[axis], new, init="copy-copy") for axis, new in widths.items()}
    for name in expected_changed:
        layout = _layout(name)
        grown_dims = [(dim, axis, role) for dim, axis, role in layout if axis in widths]
        fan_in = [axis for _, axis, role in grown_dims if role == "fan_in"]
        expected_alpha = alphas[fan_in[0]] if fan_in else 1.0
        assert result.alpha[name] == pytest.approx(expected_alpha, rel=1e-12), name

        old, new = before[name], now[name].detach()
        assert torch.equal(result.old_params[name], old), f"{name}: the old parameter was modified in place"
        assert result.new_params[name].data_ptr() != result.old_params[name].data_ptr()
        # new_entries: disjoint pieces covering exactly the entries outside the old block
        mask = _mask_of(new.shape, result.new_entries[name])
        assert int(mask.max()) == 1, f"{name}: overlapping pieces"
        old_block = tuple(slice(0, s) for s in old.shape)
        assert int(mask[old_block].sum()) == 0
        assert int(mask.sum()) == new.numel() - old.numel()

        # old entries are the old weight times alpha
        torch.testing.assert_close(new[old_block], old * expected_alpha, rtol=1e-6, atol=0)
        # new entries are copies of their sources (rows first, then columns), times alpha
        expected = old
        for dim, axis, _ in sorted(grown_dims):
            expected = torch.cat([expected, expected.index_select(dim, result.sources[axis])], dim=dim)
        for piece in result.new_entries[name]:
            torch.testing.assert_close(new[piece], expected[piece] * expected_alpha, rtol=1e-6, atol=0)


def test_growth_result_random_and_zero_new_entries():
    model = make_gpt(llama_config(), seed=3)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    result = grow_model(model, GrowthStage(0, init="random-zero", n_embd=64, intermediate_size=128), seed=9)
    now = dict(model.named_parameters())
    qkv = "transformer.h.0.attn.qkv.weight"  # fan-in on n_embd: zero new columns
    alpha = fan_in_scale(32, 64, init="random-zero")
    assert result.alpha[qkv] == pytest.approx(alpha) == pytest.approx(math.sqrt(0.5))
    torch.testing.assert_close(now[qkv][:, :32], before[qkv] * alpha, rtol=1e-6, atol=0)
    assert torch.count_nonzero(now[qkv][:, 32:]) == 0
    fc = "transformer.h.1.mlp.fc_2.weight"  # fan-out on intermediate (random rows), fan-in on n_embd (zero cols)
    new_rows = now[fc][64:, :32] / alpha
    assert torch.count_nonzero(now[fc][:, 32:]) == 0
    assert new_rows.std().item() == pytest.approx(before[fc].std().item(), rel=0.15)
    assert abs(new_rows.mean().item() - before[fc].mean().item()) < 0.005
    assert not torch.allclose(new_rows, before[fc], atol=1e-3)  # drawn, not copied
    emb = "transformer.wte.weight"  # fan-out only: random columns matching its distribution, alpha 1
    assert result.alpha[emb] == 1.0
    assert torch.equal(now[emb][:, :32], before[emb])
    assert now[emb][:, 32:].std().item() == pytest.approx(before[emb].std().item(), rel=0.1)
    norm = "transformer.h.0.norm_1.weight"  # random fan-out: norm weights drawn from their distribution
    assert torch.equal(now[norm][:32], before[norm])
    assert now[norm][32:].mean().item() == pytest.approx(before[norm].mean().item(), abs=0.25)
    assert not torch.allclose(now[norm][32:], before[norm][result.sources["n_embd"]], atol=1e-3)  # not copies
    assert now[norm][32:].std().item() == pytest.approx(before[norm].std().item(), rel=0.5)
    ln_f = "transformer.ln_f.weight"
    assert not torch.allclose(now[ln_f][32:], before[ln_f][result.sources["n_embd"]], atol=1e-3)


def test_growth_result_zero_fan_out_of_gated_mlp_is_silent():
    """zero-copy on a gated MLP: the up projection's new rows are zero and the gate's are copies, so the new inner
    channels output exactly zero at growth and the block output is alpha times the old one."""
    config = llama_config()
    model = make_gpt(config, seed=3)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    result = grow_model(model, GrowthStage(0, init="zero-copy", intermediate_size=128), seed=9)
    now = dict(model.named_parameters())
    p = "transformer.h.0.mlp."
    assert torch.count_nonzero(now[p + "fc_2.weight"][64:]) == 0
    assert torch.equal(now[p + "fc_1.weight"][64:], before[p + "fc_1.weight"])  # tiled sources at 2x
    alpha = fan_in_scale(64, 128, init="zero-copy")
    assert result.alpha[p + "proj.weight"] == pytest.approx(alpha)
    x = torch.randn(5, 32, generator=torch.Generator().manual_seed(0))
    mlp = model.transformer.h[0].mlp
    old = nn.functional.silu(x @ before[p + "fc_1.weight"].T) * (x @ before[p + "fc_2.weight"].T)
    with torch.no_grad():
        torch.testing.assert_close(mlp(x), alpha * old @ before[p + "proj.weight"].T, atol=1e-6, rtol=1e-5)


def test_growth_result_moe_alphas():
    config = moe_config()
    model = make_gpt(config, seed=1)
    stage = GrowthStage(0, init="random-copy", n_embd=64, intermediate_size=96, moe_intermediate_size=40)
    result = grow_model(model, stage)
    a_embd = fan_in_scale(32, 64, init="random-copy")
    a_inter = fan_in_scale(64, 96, init="random-copy")
    a_expert = fan_in_scale(16, 40, init="random-copy")
    a_shared = fan_in_scale(16 * config.n_shared_expert, 40 * config.n_shared_expert, init="random-copy")
    expected = {
        "lm_head.weight": a_embd, "transformer.wte.weight": 1.0, "transformer.ln_f.weight": 1.0,
        "transformer.h.0.mlp.fc_1.weight": a_embd, "transformer.h.0.mlp.proj.weight": a_inter,
        "transformer.h.1.mlp.gate.weight": a_embd,
        "transformer.h.1.mlp.experts.3.fc_2.weight": a_embd, "transformer.h.1.mlp.experts.2.proj.weight": a_expert,
        "transformer.h.1.mlp.shared_experts.fc_1.weight": a_embd,
        "transformer.h.1.mlp.shared_experts.proj.weight": a_shared,
        "transformer.h.1.attn.proj.weight": 1.0, "transformer.h.1.norm_2.weight": 1.0,
    }
    for name, alpha in expected.items():
        assert result.alpha[name] == pytest.approx(alpha, rel=1e-12), name
    sizes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert sizes["transformer.h.1.mlp.experts.0.fc_1.weight"] == (40, 64)
    assert sizes["transformer.h.1.mlp.shared_experts.fc_1.weight"] == (40 * config.n_shared_expert, 64)
    assert sizes["transformer.h.1.mlp.gate.weight"] == (config.n_expert, 64)
    assert sizes["transformer.h.0.mlp.proj.weight"] == (64, 96)
    assert set(result.sources) >= {"n_embd", "intermediate_size", "moe_intermediate_size"}


def test_gemma_scaled_embeddings_are_compensated():
    """``scale_embeddings`` multiplies the embedding by sqrt(n_embd): the grown table is scaled by sqrt(d / d') so
    that the residual stream keeps its values."""
    config = gemma_config()
    model = make_gpt(config, seed=0)
    old = model.transformer.wte.weight.detach().clone()
    result = grow_model(model, GrowthStage(0, n_embd=64))
    new = model.transformer.wte.weight.detach()
    torch.testing.assert_close(new * math.sqrt(64), torch.cat([old, old], dim=1) * math.sqrt(32), rtol=1e-6, atol=0)
    assert result.alpha["transformer.wte.weight"] == pytest.approx(math.sqrt(32 / 64))


# ------------------------------------------------------------------ a target with another block_size
def _target(config: Config, **changes) -> dict:
    """``model_config`` of ``config`` with ``changes``: every field ``Config`` takes."""
    import dataclasses

    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init}
    return {**fields, **changes}


@pytest.mark.parametrize("block_size", [8, 32])
@pytest.mark.parametrize("sizes", [dict(n_embd=64), dict(n_layer=4)], ids=["n_embd", "n_layer"])
def test_a_target_with_another_block_size_grows_into_gpt_of_its_config(block_size, sizes):
    """The grown model is ``GPT(model.config)``: the length and RoPE cache of the target's ``block_size`` (shorter:
    ``max_seq_length`` within it; longer: a forward of the full length), a strict reload and the same logits; the
    function is kept at a length both models take."""
    config = llama_config(block_size=16)
    model = make_gpt(config)
    tokens = make_tokens(config, batch=2, length=min(16, block_size))
    before = logits(model, tokens)
    stage = GrowthStage(0, model_config=_target(config, block_size=block_size, **sizes))
    grow_model(model, stage)
    assert model.config.block_size == block_size and model.max_seq_length == block_size
    reference = GPT(model.config)
    reference.load_state_dict(model.state_dict(), strict=True)
    assert model.max_seq_length == reference.max_seq_length
    assert torch.equal(model.cos, reference.cos) and torch.equal(model.sin, reference.sin)
    full = make_tokens(config, batch=2, length=block_size, seed=1)
    torch.testing.assert_close(logits(model, full), logits(reference, full), rtol=0, atol=0)
    torch.testing.assert_close(logits(model, tokens), before, rtol=1e-4, atol=1e-5)


def test_a_shorter_max_seq_length_the_user_set_is_kept_within_the_targets_block_size():
    config = llama_config(block_size=16)
    model = make_gpt(config)
    model.max_seq_length = 12
    grow_model(model, GrowthStage(0, model_config=_target(config, block_size=32, n_embd=64)))
    assert model.max_seq_length == 12 and model.cos.shape[0] == 12
    model = make_gpt(config)
    model.max_seq_length = 12
    grow_model(model, GrowthStage(0, model_config=_target(config, block_size=8, n_embd=64)))
    assert model.max_seq_length == 8 and model.cos.shape[0] == 8


def test_a_failed_growth_to_another_block_size_restores_the_length_and_cache(monkeypatch):
    config = llama_config(block_size=16)
    model = make_gpt(config)
    cos = model.cos

    def fail(*args, **kwargs):
        raise RuntimeError("injected")

    monkeypatch.setattr(surgery, "_structure", fail)
    with pytest.raises(RuntimeError, match="injected"):
        grow_model(model, GrowthStage(0, model_config=_target(config, block_size=32, n_embd=64)))
    assert model.max_seq_length == 16 and model.cos is cos and model.config.block_size == 16
