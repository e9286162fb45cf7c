"""``estimate_compute`` against parameter counts written out by hand, and the paper's FLOPs accounting
(C ~ 6 N D; section 4.4: C* = 6 (N_small D_e + N_large (D - D_e)), FLOPs saved = 1 - C* / C_scratch)."""

from __future__ import annotations

import pytest
from conftest import llama_config, moe_config, neox_config

from lightning_sparkling import GrowthError, GrowthStage, estimate_compute
from lightning_sparkling.growth.compute import count_params


TPS = 4096  # tokens per optimizer step


def llama_params(*, V, d, L, h, g, hs, I, tied=False):  # noqa: E741
    """LLaMA-style GPT (RMSNorm, gated MLP, no bias):
    embeddings V*d, lm_head V*d (none when tied), final norm d, and per layer: two norms 2d,
    qkv d*(h + 2g)*hs, attention output proj (h*hs)*d, MLP fc_1 + fc_2 + proj 3*d*I."""
    per_layer = 2 * d + d * (h + 2 * g) * hs + h * hs * d + 3 * d * I
    return V * d + (0 if tied else V * d) + d + L * per_layer


def neox_params(*, V, d, L, h, hs, I):  # noqa: E741
    """NeoX-style GPT (LayerNorm with bias, GELU MLP, biases everywhere, lm_head bias):
    embeddings V*d, lm_head V*d + V, final norm 2d, per layer: two norms 4d, qkv d*3*h*hs + 3*h*hs,
    proj h*hs*d + d, fc d*I + I, mlp proj I*d + d."""
    per_layer = 4 * d + (d * 3 * h * hs + 3 * h * hs) + (h * hs * d + d) + (d * I + I) + (I * d + d)
    return V * d + (V * d + V) + 2 * d + L * per_layer


def moe_params(*, V, d, L, h, g, hs, I, I_e, E, k, shared, dense, tied=False):  # noqa: E741
    """(active, total) of a LLaMA-MoE GPT: the first ``dense`` blocks have a dense gated MLP (3*d*I); the others a
    router d*E, E experts of 3*d*I_e and a shared expert of inner size I_e*shared (3*d*I_e*shared). Active counts
    k experts per token instead of E."""
    common = V * d + (0 if tied else V * d) + d + L * (2 * d + d * (h + 2 * g) * hs + h * hs * d)
    dense_mlp = 3 * d * I
    moe_total = d * E + E * 3 * d * I_e + 3 * d * I_e * shared
    moe_active = d * E + k * 3 * d * I_e + 3 * d * I_e * shared
    n_moe = L - dense
    total = common + dense * dense_mlp + n_moe * moe_total
    active = common + dense * dense_mlp + n_moe * moe_active
    return active, total


def test_llama_one_stage_by_hand():
    config = llama_config()  # V=100, d=32, L=2, 4 heads of 8, 2 query groups, I=64
    est = estimate_compute(config, GrowthStage(300, n_embd=64, intermediate_size=128), total_steps=1000,
                           tokens_per_step=TPS)
    n_small = llama_params(V=100, d=32, L=2, h=4, g=2, hs=8, I=64)
    n_large = llama_params(V=100, d=64, L=2, h=4, g=2, hs=8, I=128)  # heads and head size unchanged
    assert est.active_params == est.total_params == (n_small, n_large)
    assert est.phase_steps == (300, 700)
    d_total, d_e = 1000 * TPS, 300 * TPS
    assert est.flops == pytest.approx(6 * (n_small * d_e + n_large * (d_total - d_e)), rel=1e-12)
    assert est.flops_from_scratch == pytest.approx(6 * n_large * d_total, rel=1e-12)
    assert est.flops_saved == pytest.approx(1 - est.flops / est.flops_from_scratch, rel=1e-12)
    assert 0 < est.flops_saved < 1
    assert [c.n_embd for c in est.configs] == [32, 64]
    assert [c.head_size for c in est.configs] == [8, 8]
    assert est.configs[0] is config and config.n_embd == 32  # input config untouched


def test_llama_two_stages_and_tied_embeddings():
    config = llama_config()
    stages = [GrowthStage(200, n_embd=48), GrowthStage(600, intermediate_size=192)]
    for tied in (False, True):
        est = estimate_compute(config, stages, total_steps=1000, tokens_per_step=TPS, tie_embeddings=tied)
        n = [llama_params(V=100, d=32, L=2, h=4, g=2, hs=8, I=64, tied=tied),
             llama_params(V=100, d=48, L=2, h=4, g=2, hs=8, I=64, tied=tied),
             llama_params(V=100, d=48, L=2, h=4, g=2, hs=8, I=192, tied=tied)]
        assert est.active_params == est.total_params == tuple(n)
        assert est.phase_steps == (200, 400, 400)
        assert est.flops == pytest.approx(6 * TPS * (n[0] * 200 + n[1] * 400 + n[2] * 400), rel=1e-12)
        assert est.flops_from_scratch == pytest.approx(6 * TPS * n[2] * 1000, rel=1e-12)
        assert est.flops_saved == pytest.approx(1 - est.flops / est.flops_from_scratch, rel=1e-12)
    untied = estimate_compute(config, stages, total_steps=1000, tokens_per_step=TPS)
    tied = estimate_compute(config, stages, total_steps=1000, tokens_per_step=TPS, tie_embeddings=True)
    assert [u - t for u, t in zip(untied.total_params, tied.total_params)] == [100 * 32, 100 * 48, 100 * 48]


def test_neox_with_biases_by_hand():
    config = neox_config()  # V=100, d=32, L=2, 4 heads of 8, I=64, biases, lm_head bias
    est = estimate_compute(config, GrowthStage(500, n_embd=64, intermediate_size=256), total_steps=800,
                           tokens_per_step=TPS)
    assert est.total_params == (neox_params(V=100, d=32, L=2, h=4, hs=8, I=64),
                                neox_params(V=100, d=64, L=2, h=4, hs=8, I=256))
    assert est.phase_steps == (500, 300)


def test_moe_active_params_count_only_routed_experts():
    config = moe_config()  # d=32, I=64 (first block dense), 4 experts of 16, 2 per token, shared expert 2 x 16
    est = estimate_compute(config, GrowthStage(100, n_embd=64, moe_intermediate_size=48), total_steps=400,
                           tokens_per_step=TPS)
    common = dict(V=100, L=2, h=4, g=2, hs=8, I=64, E=4, k=2, shared=2, dense=1)
    small = moe_params(d=32, I_e=16, **common)
    large = moe_params(d=64, I_e=48, **common)
    assert est.active_params == (small[0], large[0])
    assert est.total_params == (small[1], large[1])
    assert all(a < t for a, t in zip(est.active_params, est.total_params))
    # 6 N D uses the active parameters
    assert est.flops == pytest.approx(6 * TPS * (small[0] * 100 + large[0] * 300), rel=1e-12)
    assert est.flops_from_scratch == pytest.approx(6 * TPS * large[0] * 400, rel=1e-12)
    tied = estimate_compute(config, GrowthStage(100, n_embd=64, moe_intermediate_size=48), total_steps=400,
                            tokens_per_step=TPS, tie_embeddings=True)
    assert tied.active_params == (moe_params(d=32, I_e=16, tied=True, **common)[0],
                                  moe_params(d=64, I_e=48, tied=True, **common)[0])


@pytest.mark.parametrize("factory", [llama_config, neox_config, moe_config])
def test_total_params_match_a_real_gpt(factory):
    from litgpt import GPT

    config = factory()
    active, total = count_params(config)
    assert total == sum(p.numel() for p in GPT(config).parameters())
    assert active <= total


def test_paper_style_2x_saving():
    """Growing every width 2x at 50% of training saves about half of the small model's share; with N_large ~ 4
    N_small (non-embedding) the saving is well above 20%."""
    config = llama_config(vocab_size=16, padded_vocab_size=16)
    est = estimate_compute(config, GrowthStage(500, n_embd=64, intermediate_size=128), total_steps=1000,
                           tokens_per_step=1)
    n_small, n_large = est.active_params
    assert est.flops_saved == pytest.approx(0.5 * (1 - n_small / n_large), rel=1e-12)
    assert est.flops_saved > 0.2


def test_single_stage_and_growth_at_the_end():
    config = llama_config()
    est = estimate_compute(config, GrowthStage(1000, n_embd=64), total_steps=1000, tokens_per_step=TPS)
    assert est.phase_steps == (1000, 0)
    # never trained at the large width: all compute was the small model's
    assert est.flops == pytest.approx(6 * TPS * est.active_params[0] * 1000)
    est = estimate_compute(config, GrowthStage(0, n_embd=64), total_steps=1000, tokens_per_step=TPS)
    assert est.phase_steps == (0, 1000) and est.flops_saved == pytest.approx(0.0)


@pytest.mark.parametrize("stages", [
    [GrowthStage(600, n_embd=48), GrowthStage(200, n_embd=64)],
    [GrowthStage(300, n_embd=48), GrowthStage(300, n_embd=64)],
])
def test_refuses_unsorted_stages(stages):
    with pytest.raises(ValueError, match="at_step"):
        estimate_compute(llama_config(), stages, total_steps=1000, tokens_per_step=TPS)


def test_refuses_stage_past_total_steps():
    with pytest.raises(ValueError, match="total_steps"):
        estimate_compute(llama_config(), GrowthStage(1001, n_embd=64), total_steps=1000, tokens_per_step=TPS)
    with pytest.raises(ValueError, match="total_steps"):
        estimate_compute(llama_config(), [GrowthStage(10, n_embd=48), GrowthStage(2000, n_embd=64)],
                         total_steps=1000, tokens_per_step=TPS)


def test_refuses_stage_that_does_not_fit_the_model():
    with pytest.raises(GrowthError, match="moe_intermediate_size"):
        estimate_compute(llama_config(), GrowthStage(10, moe_intermediate_size=64), total_steps=100,
                         tokens_per_step=TPS)
    # the second stage is checked against the model as grown by the first
    with pytest.raises(GrowthError, match="n_embd"):
        estimate_compute(llama_config(), [GrowthStage(10, n_embd=64), GrowthStage(20, n_embd=48)], total_steps=100,
                         tokens_per_step=TPS)
