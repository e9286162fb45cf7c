"""The experts axis (``growth/axes/experts.py``): MoE -> more experts and dense -> MoE upcycling on litgpt GPTs:
refusals before anything changes, function preservation where it is exact (and the cases where it is not), the
copies, drop-upcycle and random inits, strict reloading, rollback and the optimizer patch."""

from __future__ import annotations

import pickle

import pytest
import torch
from conftest import (
    assert_unchanged,
    llama_config,
    make_gpt,
    make_tokens,
    moe_config,
    neox_config,
    olmo2_config,
    pure_moe_config,
    qk_norm_config,
    snapshot,
)
from litgpt import GPT

from lightning_sparkling import GrowthError, GrowthStage, grow_model, plan_growth
from lightning_sparkling.growth.depth_maps import litgpt_init_std
from lightning_sparkling.growth.optim_state import plan_optimizer_patch
from lightning_sparkling.growth.stage import StageError


def grouped_config(**overrides):
    """DeepSeek-V3's grouped top-k router (sigmoid scores, ``norm_topk_prob``, ``routed_scaling_factor``)."""
    kwargs = dict(name="moe-grouped-tiny", n_expert_groups=2, n_topk_groups=1, n_topk_scores_per_group=2,
                  norm_topk_prob=True, routed_scaling_factor=2.5)
    kwargs.update(overrides)
    return moe_config(**kwargs)


def logits(model, tokens):
    with torch.no_grad():
        return model(tokens)


def upcycle(n_expert=4, k=2, at=0, **keys):
    return GrowthStage(at, mlp_class_name="LLaMAMoE", n_expert=n_expert, n_expert_per_token=k, **keys)


# ------------------------------------------------------------------------------------- stage refusals
STAGE_REFUSALS = [
    (dict(n_expert=4, n_expert_per_token=8), "n_expert_per_token=8.*at most 4"),
    (dict(mlp_class_name="MixtralMoE", n_expert=4, n_expert_per_token=2), "mlp_class_name='MixtralMoE'.*LLaMAMoE"),
    (dict(mlp_class_name="LLaMAMoE", n_expert=4), "mlp_class_name='LLaMAMoE'.*n_expert_per_token"),
    (dict(n_expert=8, expert_init="drop-upcycle", expert_reinit_fraction=1.5), "expert_reinit_fraction=1.5.*\\[0, 1\\]"),
    (dict(n_expert=8, expert_init="drop-upcycle", expert_reinit_fraction=-0.1), "expert_reinit_fraction=-0.1"),
    (dict(n_expert=8, expert_reinit_fraction=0.25), "expert_reinit_fraction=0.25.*drop-upcycle"),
    (dict(n_expert=8, expert_init="clone"), "expert_init='clone'.*copy, drop-upcycle, random"),
    (dict(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2, router_init="uniform"),
     "router_init='uniform'.*random, zero"),
    (dict(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2, router_init="zero"),
     "router_init='zero', expert_init='copy'.*never part"),
    (dict(n_expert=8, router_init="zero", expert_init="drop-upcycle"), "router_init='zero'.*dense -> MoE"),
    (dict(n_expert=0), "n_expert=0.*positive integer"),
    (dict(n_expert=8, n_expert_per_token=True), "n_expert_per_token=True"),
    (dict(n_expert_per_token=4), "n_expert_per_token=4.*give n_expert"),
    (dict(n_embd=64, expert_init="random"), "expert_init='random'.*only used"),
    (dict(n_expert=8, model_name="pythia-14m"), "n_expert=8\\) with model_name.*named target sets the experts"),
    (dict(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2, first_k_dense_replace=-1),
     "first_k_dense_replace=-1\\): must be an integer >= 0"),
    (dict(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2, first_k_dense_replace=True),
     "first_k_dense_replace=True\\): must be an integer >= 0"),
    (dict(first_k_dense_replace=1), "first_k_dense_replace=1\\): only used when.*mlp_class_name='LLaMAMoE'"),
    (dict(n_embd=64, first_k_dense_replace=1), "first_k_dense_replace=1\\): only used when.*or drop it"),
]


@pytest.mark.parametrize("keys,message", STAGE_REFUSALS, ids=[m.split(".")[0] for _, m in STAGE_REFUSALS])
def test_bad_expert_keys_are_refused_at_construction(keys, message):
    with pytest.raises(ValueError, match=message):
        GrowthStage(0, **keys)


MODEL_REFUSALS = [
    ("fewer", pure_moe_config, dict(n_expert=2), "n_expert=2\\): fewer experts than the model \\(n_expert=4\\).*> 4"),
    ("same", pure_moe_config, dict(n_expert=4, n_expert_per_token=4), "n_expert=4\\): as many experts"),
    ("fewer-per-token", pure_moe_config, dict(n_expert=8, n_expert_per_token=1), "n_expert_per_token=1\\): fewer"),
    ("no-experts", llama_config, dict(n_expert=4), "n_expert=4\\): this model has no experts.*mlp_class_name='LLaMAMoE'"),
    ("already-moe", pure_moe_config, dict(mlp_class_name="LLaMAMoE", n_expert=8, n_expert_per_token=2),
     "already a LLaMAMoE.*drop mlp_class_name"),
    ("neox-mlp", neox_config, dict(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2),
     "GptNeoxMLP cannot be copied"),
    ("group-size", grouped_config, dict(n_expert=5), "multiple of 2"),
]


@pytest.mark.parametrize("factory,keys,message", [r[1:] for r in MODEL_REFUSALS], ids=[r[0] for r in MODEL_REFUSALS])
def test_experts_growth_a_model_cannot_take_is_refused_before_anything_changes(factory, keys, message):
    config = factory()
    model = make_gpt(config)
    snap = snapshot(model)
    with pytest.raises(GrowthError, match=message):
        grow_model(model, GrowthStage(0, **keys))
    assert_unchanged(model, snap)
    with pytest.raises(GrowthError, match=message):
        plan_growth(config, GrowthStage(0, **keys))


# ------------------------------------------------------------------------------- function preservation
EXACT = [
    ("moe-shared-dense-first-x2", moe_config, dict(n_expert=8, n_expert_per_token=4)),
    ("moe-shared-dense-first-x3", moe_config, dict(n_expert=12, n_expert_per_token=6)),
    ("pure-moe-x2", pure_moe_config, dict(n_expert=8, n_expert_per_token=4)),
    ("pure-moe-top1-more-experts", lambda: pure_moe_config(n_expert_per_token=1), dict(n_expert=6)),
    ("pure-moe-4-to-12-top2-to-top6", pure_moe_config, dict(n_expert=12, n_expert_per_token=6)),  # a whole 3x
    ("grouped-norm-topk-scaled-x2", grouped_config, dict(n_expert=8, n_expert_per_token=4)),
    ("upcycle-llama-4x2", llama_config, dict(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2)),
    ("upcycle-llama-8x1", llama_config, dict(mlp_class_name="LLaMAMoE", n_expert=8, n_expert_per_token=1)),
    ("upcycle-llama-bias", lambda: llama_config(bias=True), dict(mlp_class_name="LLaMAMoE", n_expert=3,
                                                                 n_expert_per_token=3)),
    ("upcycle-qk-norm", qk_norm_config, dict(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2)),
    ("upcycle-olmo2", olmo2_config, dict(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2)),
]


@pytest.mark.parametrize("factory,keys", [c[1:] for c in EXACT], ids=[c[0] for c in EXACT])
def test_exact_expert_growth_keeps_logits_and_reloads_strictly(factory, keys):
    config = factory()
    model = make_gpt(config)
    tokens = make_tokens(config, batch=3, length=16)
    before = logits(model, tokens)
    grow_model(model, GrowthStage(0, **keys))
    assert model.config.n_expert == keys["n_expert"]
    torch.testing.assert_close(logits(model, tokens), before, atol=1e-5, rtol=0)
    fresh = GPT(model.config)
    fresh.load_state_dict(model.state_dict(), strict=True)
    torch.testing.assert_close(logits(fresh, tokens), before, atol=1e-5, rtol=0)


# experts with widths (and heads) in one stage: function-preserving widths (copy-copy, fan-in alpha = 1/2 at 2x)
_NAIVE_WIDTH = dict(init="copy-copy", rms_preserving=True)
WITH_WIDTH = [
    ("upcycle+hidden+mlp", llama_config,
     lambda c: dict(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2, n_embd=2 * c.n_embd,
                    intermediate_size=2 * c.intermediate_size)),
    ("upcycle-dense-first+mlp", lambda: llama_config(n_layer=3),
     lambda c: dict(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2, first_k_dense_replace=1,
                    intermediate_size=2 * c.intermediate_size)),
    ("more-experts-x2+hidden+expert-inner", pure_moe_config,
     lambda c: dict(n_expert=2 * c.n_expert, n_expert_per_token=2 * c.n_expert_per_token, n_embd=2 * c.n_embd,
                    moe_intermediate_size=2 * c.moe_intermediate_size)),
    ("more-experts-x2+hidden+heads-shared", moe_config,
     lambda c: dict(n_expert=2 * c.n_expert, n_expert_per_token=2 * c.n_expert_per_token, n_embd=2 * c.n_embd,
                    n_head=2 * c.n_head, n_query_groups=2 * c.n_query_groups)),
    ("grouped-x2+hidden", grouped_config,
     lambda c: dict(n_expert=2 * c.n_expert, n_expert_per_token=2 * c.n_expert_per_token, n_embd=2 * c.n_embd)),
]


@pytest.mark.parametrize("factory,keys", [c[1:] for c in WITH_WIDTH], ids=[c[0] for c in WITH_WIDTH])
def test_experts_and_widths_in_one_stage_keep_logits_and_copy_the_widened_source(factory, keys):
    """The width's channel plans come first, so a moved MLP is widened into expert 0 and every new expert copies its
    source widened (bit for bit), the router keeps its widened columns beside its new rows; the grown model loads
    strictly into GPT(grown config)."""
    config = factory()
    keys = keys(config)
    model = make_gpt(config)
    tokens = make_tokens(config, batch=3, length=16)
    before = logits(model, tokens)
    result = grow_model(model, GrowthStage(0, **keys, **_NAIVE_WIDTH))
    assert {"width", "experts"} <= set(result.plan.changes)
    assert (model.config.n_expert, model.config.n_embd) == (keys["n_expert"], keys.get("n_embd", config.n_embd))
    torch.testing.assert_close(logits(model, tokens), before, atol=1e-5, rtol=0)
    fresh = GPT(model.config)
    fresh.load_state_dict(model.state_dict(), strict=True)
    change = result.plan.changes["experts"]
    for i in change.blocks:
        experts = model.transformer.h[i].mlp.experts
        assert experts[0].fc_1.weight.shape[1] == model.config.n_embd
        assert experts[0].fc_1.weight.shape[0] == model.config.moe_intermediate_size
        for j, source in enumerate(change.source):
            assert torch.equal(experts[change.old + j].fc_1.weight, experts[source].fc_1.weight)
            assert torch.equal(experts[change.old + j].proj.weight, experts[source].proj.weight)


WITH_DEPTH = [
    ("upcycle+depth-stack", llama_config, dict(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2,
                                               n_layer=4)),
    ("upcycle+depth-interleave-dense-first", llama_config,
     dict(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2, n_layer=4, depth_order="interleave",
          first_k_dense_replace=1)),
    ("upcycle+depth-middle+widths", llama_config,
     dict(mlp_class_name="LLaMAMoE", n_expert=3, n_expert_per_token=3, n_layer=3, depth_order="middle", n_embd=64,
          intermediate_size=128, **_NAIVE_WIDTH)),
    ("more-experts-x2+depth", pure_moe_config, dict(n_expert=8, n_expert_per_token=4, n_layer=4)),
    ("more-experts-x2+depth-shared-dense-first+hidden", moe_config,
     dict(n_expert=8, n_expert_per_token=4, n_layer=4, depth_order="interleave", n_embd=64, **_NAIVE_WIDTH)),
]


@pytest.mark.parametrize("keys_factory,keys", [c[1:] for c in WITH_DEPTH], ids=[c[0] for c in WITH_DEPTH])
def test_experts_and_depth_in_one_stage_keep_logits_and_new_blocks_start_as_their_source(keys_factory, keys):
    """Depth re-keys the blocks first, then the experts are planned per block of the grown model: a kept block's MLP
    becomes expert 0 with copies beside it, a new block is built with its experts, each starting as the new block's
    own MLP does (``copy-zero``: its source's, output projection zeroed), so the function is kept."""
    config = keys_factory()
    model = make_gpt(config)
    tokens = make_tokens(config, batch=3, length=16)
    before = logits(model, tokens)
    result = grow_model(model, GrowthStage(0, **keys))
    assert {"depth", "experts"} <= set(result.plan.changes)
    grown = model.config
    assert (grown.n_layer, grown.n_expert) == (keys["n_layer"], keys["n_expert"])
    torch.testing.assert_close(logits(model, tokens), before, atol=1e-5, rtol=0)
    GPT(grown).load_state_dict(model.state_dict(), strict=True)
    depth, change = result.plan.changes["depth"], result.plan.changes["experts"]
    for j in change.blocks:
        experts = model.transformer.h[j].mlp.experts
        assert len(experts) == keys["n_expert"]
        if depth.fresh[j]:  # a new block: every expert's output projection zero (copy-zero), its inputs copied
            assert all(not e.proj.weight.any() for e in experts)
            source = model.transformer.h[depth.copies()[j]].mlp  # a kept block: dense when first_k keeps it so
            source = source.experts[change.source[-1]] if hasattr(source, "experts") else source
            assert torch.equal(experts[-1].fc_1.weight, source.fc_1.weight)


FROZEN_WITH_DEPTH = [  # (stage keys, the old block each grown block holds or copies)
    ("more-experts+stack", pure_moe_config, dict(n_expert=8, n_expert_per_token=4, n_layer=4), (0, 1, 0, 1)),
    ("more-experts+interleave", pure_moe_config,
     dict(n_expert=8, n_expert_per_token=4, n_layer=4, depth_order="interleave"), (0, 0, 1, 1)),
    ("more-experts+map", pure_moe_config, dict(n_expert=8, n_expert_per_token=4, depth_map=(0, 1, 1)), (0, 1, 1)),
    ("upcycle+interleave", llama_config,
     dict(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2, n_layer=4, depth_order="interleave"),
     (0, 0, 1, 1)),
    ("upcycle+map", llama_config,
     dict(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2, depth_map=(0, 0, 1)), (0, 0, 1)),
]


@pytest.mark.parametrize("frozen", [0, 1])
@pytest.mark.parametrize("factory,keys,source", [c[1:] for c in FROZEN_WITH_DEPTH],
                         ids=[c[0] for c in FROZEN_WITH_DEPTH])
def test_experts_and_depth_in_one_stage_keep_each_blocks_requires_grad(factory, keys, source, frozen):
    """One old block frozen: every parameter of each grown block (kept, moved, or new, and its new experts and
    router) trains exactly when the old block it holds or copies does; the rest of the model keeps its flags."""
    model = make_gpt(factory())
    for p in model.transformer.h[frozen].parameters():
        p.requires_grad_(False)
    grow_model(model, GrowthStage(0, **keys))
    assert len(model.transformer.h) == len(source)
    for j, block in enumerate(model.transformer.h):
        flags = {n: p.requires_grad for n, p in block.named_parameters()}
        assert set(flags.values()) == {source[j] != frozen}, (j, flags)
    assert all(p.requires_grad for n, p in model.named_parameters() if not n.startswith("transformer.h."))


def test_drop_upcycle_with_depth_keeps_each_new_blocks_expert_zero_its_mlp():
    """Drop-upcycle re-draws channels of the *new* experts only: a new block's expert 0 is that block's MLP (a copy of
    its source's), as a kept block's expert 0 is its own MLP."""
    model = make_gpt(llama_config())
    result = grow_model(model, upcycle(n_layer=4, expert_init="drop-upcycle"))
    depth = result.plan.changes["depth"]
    new = depth.new_blocks[0]
    source = model.transformer.h[depth.copies()[new]].mlp.experts
    experts = model.transformer.h[new].mlp.experts
    assert torch.equal(experts[0].fc_1.weight, source[0].fc_1.weight)
    assert not torch.equal(experts[1].fc_1.weight, source[0].fc_1.weight)  # re-drawn channels


def test_more_grouped_experts_with_depth_in_one_stage_is_refused_naming_the_fix():
    config = grouped_config()
    with pytest.raises(GrowthError, match="GroupedTopkRouter.*stages of their own"):
        plan_growth(config, GrowthStage(0, n_expert=2 * config.n_expert, n_layer=2 * config.n_layer))


def test_upcycled_model_is_not_trivially_equal_when_experts_differ():
    """The exactness above comes from identical experts: perturb one copy and the logits move."""
    model = make_gpt(llama_config())
    tokens = make_tokens(model.config, batch=3, length=16)
    before = logits(model, tokens)
    grow_model(model, upcycle())
    with torch.no_grad():
        for block in model.transformer.h:
            block.mlp.experts[1].proj.weight.mul_(3.0)
    assert (logits(model, tokens) - before).abs().max() > 1e-3


CHANGED = [
    ("more-experts-same-top2", pure_moe_config, dict(n_expert=8)),
    # 6 / 4 = 3 / 2 = 1.5 experts per source, but only experts 0 and 1 get a copy: not a whole multiple
    ("pure-moe-4-to-6-top2-to-top3", pure_moe_config, dict(n_expert=6, n_expert_per_token=3)),
    ("grouped-without-norm", lambda: grouped_config(norm_topk_prob=False), dict(n_expert=8, n_expert_per_token=4)),
    ("drop-upcycle", pure_moe_config, dict(n_expert=8, n_expert_per_token=4, expert_init="drop-upcycle")),
    ("random", pure_moe_config, dict(n_expert=8, n_expert_per_token=4, expert_init="random")),
    ("upcycle-drop-zero-router", llama_config, dict(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2,
                                                    expert_init="drop-upcycle", router_init="zero")),
]


@pytest.mark.parametrize("factory,keys", [c[1:] for c in CHANGED], ids=[c[0] for c in CHANGED])
def test_settings_that_change_the_function_say_so(factory, keys):
    from lightning_sparkling.growth.axes.experts import EXPERTS

    config = factory()
    model = make_gpt(config)
    tokens = make_tokens(config, batch=3, length=16)
    before = logits(model, tokens)
    result = grow_model(model, GrowthStage(0, **keys))
    assert (logits(model, tokens) - before).abs().max() > 1e-4
    assert EXPERTS.describe(result.plan).endswith("function changes")


@pytest.mark.parametrize("factory,keys", [c[1:] for c in EXACT], ids=[c[0] for c in EXACT])
def test_exact_settings_are_described_as_keeping_the_function(factory, keys):
    from lightning_sparkling.growth.axes.experts import EXPERTS

    config = factory()
    plan = plan_growth(config, GrowthStage(0, **keys))
    assert EXPERTS.describe(plan, make_gpt(config)).endswith("function kept")  # a grouped router's corrections 0


def _set_score_corrections(model, signed: bool, seed: int = 0) -> None:
    """Every grouped router's ``e_score_correction_bias``: normal(-0.3, 1) (signed, as load balancing trains it) or
    uniform [0, 1)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for block in model.transformer.h[model.config.first_k_dense_replace or 0:]:
            bias = block.mlp.gate.e_score_correction_bias
            bias.copy_(torch.randn(bias.shape, generator=g) - 0.3 if signed else torch.rand(bias.shape, generator=g))


GROUPED_CLAIMS = [  # (config, stage, signed corrections, the growth log's words)
    ("doubled-signed", {}, dict(n_expert=8, n_expert_per_token=4), True, "function changes"),
    ("doubled-nonnegative", {}, dict(n_expert=8, n_expert_per_token=4), False, "function kept"),
    ("doubled-no-group-masked-signed", dict(n_topk_groups=2), dict(n_expert=8, n_expert_per_token=4), True,
     "function kept"),
    # 8 experts in 4 groups of 2, the top group kept, K = 4 > its 2 experts: masked experts are picked whatever the
    # corrections
    ("k-past-the-kept-groups", dict(n_expert=8, n_expert_groups=4, n_topk_groups=1, n_expert_per_token=4),
     dict(n_expert=16, n_expert_per_token=8), False, "function changes"),
    # K = 1 kept with 2 of 4 groups kept and a group scored by its best 2: the best expert can fall out
    ("top1-two-groups-kept", dict(n_expert=8, n_expert_groups=4, n_topk_groups=2, n_expert_per_token=1),
     dict(n_expert=16), False, "function changes"),
]


@pytest.mark.parametrize("overrides,keys,signed,verdict", [c[1:] for c in GROUPED_CLAIMS],
                         ids=[c[0] for c in GROUPED_CLAIMS])
def test_grouped_router_growth_log_says_kept_exactly_when_the_logits_are(overrides, keys, signed, verdict):
    """A ``GroupedTopkRouter`` masks the groups it does not keep to 0.0 before its top-k: a kept expert whose score
    plus (signed) correction is below 0.0, or a K past the kept groups, picks a masked expert, and the grown model
    breaks that tie differently. The growth log reads the corrections from the grown model."""
    from lightning_sparkling.growth.axes import describe_changes, growth_log_lines, size_pairs

    config = grouped_config(**overrides)
    model = make_gpt(config)
    _set_score_corrections(model, signed)
    tokens = make_tokens(config, batch=4, length=16)
    before = logits(model, tokens)
    result = grow_model(model, GrowthStage(0, **keys))
    moved = ((logits(model, tokens) - before).abs().max() / before.abs().max()).item()
    assert describe_changes(result.plan, model)["experts"].endswith(verdict)
    log = "\n".join(growth_log_lines(result.plan, size_pairs(result.old_config, result.new_config), model))
    assert log.count(verdict) == 2 and log.splitlines()[-1].split() == ["logits", *verdict.split()], log
    assert moved <= 1e-4 if verdict == "function kept" else moved > 1e-3, moved


def test_grouped_router_plan_without_the_model_names_the_corrections_it_depends_on():
    """``sparkling plan`` has no trained corrections to read: the doubling is kept only while they are >= 0."""
    from lightning_sparkling.growth.axes import describe_changes

    plan = plan_growth(grouped_config(), GrowthStage(0, n_expert=8, n_expert_per_token=4))
    assert describe_changes(plan)["experts"].endswith(
        "function kept while every e_score_correction_bias >= 0, else it changes")


@pytest.mark.parametrize("router_init,expert_init", [("random", "copy"), ("zero", "drop-upcycle")])
def test_upcycling_a_dense_config_with_a_routed_scaling_factor_keeps_the_function(router_init, expert_init):
    """A dense config's ``routed_scaling_factor`` is inert (no router); the upcycled MoE gets 1.0, so its K weights
    still sum to one: copies give the MLP's logits, and the growth log names the factor it reset."""
    from lightning_sparkling.growth.axes import describe_changes

    config = llama_config(routed_scaling_factor=2.5)
    model = make_gpt(config)
    tokens = make_tokens(config, batch=3, length=16)
    before = logits(model, tokens)
    result = grow_model(model, upcycle(expert_init=expert_init, router_init=router_init,
                                       **({"expert_reinit_fraction": 0.0} if expert_init == "drop-upcycle" else {})))
    assert model.config.routed_scaling_factor == 1.0
    torch.testing.assert_close(logits(model, tokens), before, rtol=1e-4, atol=1e-5)
    line = describe_changes(result.plan, model)["experts"]
    assert "routed_scaling_factor 2.5 -> 1 (inert on the dense MLP)" in line
    assert line.endswith("function kept" if expert_init == "copy" else "function changes")  # drop-upcycle 0: a copy
    reference = GPT(model.config)
    reference.load_state_dict(model.state_dict(), strict=True)
    torch.testing.assert_close(logits(reference, tokens), before, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------- the copies
def test_new_experts_copy_expert_i_mod_e_and_their_router_rows():
    config = grouped_config()
    model = make_gpt(config)
    with torch.no_grad():
        for block in model.transformer.h[1:]:
            block.mlp.gate.e_score_correction_bias.copy_(torch.arange(4.0))
    old = {n: p.detach().clone() for n, p in model.named_parameters()}
    result = grow_model(model, GrowthStage(0, n_expert=12, n_expert_per_token=6))
    assert model.config.n_expert_groups == 6 and model.config.n_topk_groups == 3  # 2 experts per group kept
    block = model.transformer.h[1]
    for j in range(4, 12):
        for rest in ("fc_1.weight", "fc_2.weight", "proj.weight"):
            assert torch.equal(dict(block.mlp.experts[j].named_parameters())[rest],
                               old[f"transformer.h.1.mlp.experts.{j % 4}.{rest}"])
    gate = old["transformer.h.1.mlp.gate.weight"]
    assert torch.equal(block.mlp.gate.weight, torch.cat([gate, gate, gate]))
    assert torch.equal(block.mlp.gate.e_score_correction_bias, torch.arange(4.0).repeat(3))
    assert type(model.transformer.h[0].mlp).__name__ == "LLaMAMLP"  # first_k_dense_replace block untouched
    assert set(result.added) == {f"transformer.h.1.mlp.experts.{j}.{r}" for j in range(4, 12)
                                 for r in ("fc_1.weight", "fc_2.weight", "proj.weight")}
    assert set(result.new_params) == {"transformer.h.1.mlp.gate.weight"}


def test_upcycle_turns_the_mlp_into_expert_zero_and_copies_it():
    model = make_gpt(llama_config(n_layer=2))
    mlps = [block.mlp for block in model.transformer.h]
    params = {n: p for n, p in model.named_parameters()}
    result = grow_model(model, upcycle(n_expert=3, k=2))
    for i, block in enumerate(model.transformer.h):
        assert type(block.mlp).__name__ == "LLaMAMoE" and block.mlp.config is model.config
        assert block.mlp.experts[0] is mlps[i]  # the same module and Parameters: its optimizer state stays
        assert block.mlp.experts[0].fc_1.weight is params[f"transformer.h.{i}.mlp.fc_1.weight"]
        for e in (1, 2):
            for rest in ("fc_1", "fc_2", "proj"):
                got = getattr(block.mlp.experts[e], rest).weight
                assert torch.equal(got, getattr(mlps[i], rest).weight) and got is not getattr(mlps[i], rest).weight
        gate = block.mlp.gate.weight
        assert gate.shape == (3, 32)
        assert abs(gate.std().item() - litgpt_init_std(32)) < 0.3 * litgpt_init_std(32)
    assert model.config.moe_intermediate_size == model.config.intermediate_size == 64
    assert not result.new_params and len(result.added) == 2 * (2 * 3 + 1)
    assert result.plan.carry("transformer.h.1.mlp.proj.weight") == "transformer.h.1.mlp.experts.0.proj.weight"


@pytest.mark.parametrize("factory,stage", [(pure_moe_config, GrowthStage(0, n_expert=8, n_expert_per_token=4)),
                                           (llama_config, upcycle()),
                                           (grouped_config, GrowthStage(0, n_expert=8, n_expert_per_token=4))])
def test_rollback_restores_the_model(factory, stage):
    model = make_gpt(factory())
    tokens = make_tokens(model.config)
    before = logits(model, tokens)
    snap = snapshot(model)
    buffers = {n: b.clone() for n, b in model.named_buffers()}
    result = grow_model(model, stage)
    result.rollback()
    assert_unchanged(model, snap)
    assert {n: b for n, b in model.named_buffers()}.keys() == buffers.keys()
    assert all(torch.equal(b, buffers[n]) for n, b in model.named_buffers())
    assert torch.equal(logits(model, tokens), before)


# ---------------------------------------------------------------------------------- drop-upcycle, random
def _inner_differs(model, block: int, expert: int, source: int) -> dict[str, torch.Tensor]:
    new, src = model.transformer.h[block].mlp.experts[expert], model.transformer.h[block].mlp.experts[source]
    return {"fc_1": (new.fc_1.weight != src.fc_1.weight).any(1), "fc_2": (new.fc_2.weight != src.fc_2.weight).any(1),
            "proj": (new.proj.weight != src.proj.weight).any(0)}


@pytest.mark.parametrize("fraction", [0.25, 0.5, 1.0])
def test_drop_upcycle_redraws_the_same_fraction_of_channels_in_each_matrix(fraction):
    model = make_gpt(pure_moe_config())
    grow_model(model, GrowthStage(0, n_expert=8, n_expert_per_token=4, expert_init="drop-upcycle",
                                  expert_reinit_fraction=fraction))
    picks = []
    for block in range(2):
        for expert in range(4, 8):
            rows = _inner_differs(model, block, expert, expert - 4)
            assert torch.equal(rows["fc_1"], rows["fc_2"]) and torch.equal(rows["fc_1"], rows["proj"])
            assert int(rows["fc_1"].sum()) == round(fraction * 16)
            picks.append(rows["fc_1"])
    if fraction < 1:  # chosen per expert: the 4 new experts of block 0 do not all share their channels
        assert any(not torch.equal(picks[0], p) for p in picks[1:4])
    old = model.transformer.h[0].mlp.experts[0].fc_1.weight
    new = model.transformer.h[0].mlp.experts[4].fc_1.weight[picks[0]]
    assert abs(new.std().item() - old.std().item()) < 0.35 * old.std().item()


def test_drop_upcycle_is_seeded_and_zero_fraction_is_a_copy():
    def grown(seed: int, fraction: float = 0.5):
        model = make_gpt(llama_config())
        grow_model(model, upcycle(expert_init="drop-upcycle", expert_reinit_fraction=fraction), seed=seed)
        return model.state_dict()

    a, b, c = grown(0), grown(0), grown(1)
    assert all(torch.equal(a[n], b[n]) for n in a)
    assert any(not torch.equal(a[n], c[n]) for n in a if ".experts.1." in n)
    zero = grown(0, 0.0)
    for n in zero:
        if ".experts.1." in n:
            assert torch.equal(zero[n], zero[n.replace("experts.1", "experts.0")])


def test_random_experts_use_litgpts_init_and_random_router_rows():
    model = make_gpt(pure_moe_config())
    gate = model.transformer.h[0].mlp.gate.weight.detach().clone()
    grow_model(model, GrowthStage(0, n_expert=8, n_expert_per_token=4, expert_init="random"))
    std = litgpt_init_std(32)
    w = torch.cat([model.transformer.h[0].mlp.experts[e].fc_1.weight.flatten() for e in range(4, 8)])
    assert abs(w.std().item() - std) < 0.15 * std
    rows = model.transformer.h[0].mlp.gate.weight[4:]
    assert not any(torch.equal(rows[i], gate[i]) for i in range(4))
    assert torch.equal(model.transformer.h[0].mlp.gate.weight[:4], gate)


# ------------------------------------------------------------------------------------------ optimizer
@pytest.mark.parametrize("recipe", ["asymmetric", "copy"])
@pytest.mark.parametrize("factory,stage", [
    (pure_moe_config, dict(n_expert=8, n_expert_per_token=4)),
    (llama_config, dict(mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2))])
def test_new_experts_and_router_rows_get_fresh_or_copied_state(recipe, factory, stage):
    model = make_gpt(factory())
    decay = [p for p in model.parameters() if p.ndim == 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}])
    model(make_tokens(model.config)).sum().backward()
    opt.step()
    old_state = {n: {k: v.clone() for k, v in opt.state[p].items()} for n, p in model.named_parameters()}
    result = grow_model(model, GrowthStage(1, optimizer_state=recipe, **stage))
    patch = plan_optimizer_patch(opt, result, recipe)
    patch.apply()
    names = {id(p): n for n, p in model.named_parameters()}
    assert {names[id(p)] for group in opt.param_groups for p in group["params"]} == set(names.values())
    for name, (_, new) in result.added.items():
        got, spec = opt.state[new], result.plan.tensors[name]
        src = old_state[spec.source_name]
        assert torch.equal(got["step"], src["step"])
        for key in ("exp_avg", "exp_avg_sq"):
            copied = recipe == "copy" and not name.endswith("gate.weight")  # a new router has no source entries
            want = src[key] if copied else torch.zeros(spec.new_shape)
            assert torch.equal(got[key], want), (name, key)
    for name, new in result.new_params.items():  # the router's new rows (MoE -> more experts)
        got, src = opt.state[new], old_state[name]
        rows = src["exp_avg"] if recipe == "copy" else torch.zeros_like(src["exp_avg"])
        assert torch.equal(got["exp_avg"], torch.cat([src["exp_avg"], rows]))
    entries = result.new_entries
    assert all(entries[n] == [(slice(0, s[0]), slice(0, s[1]))] for n, s in
               ((n, result.plan.tensors[n].new_shape) for n in result.added))
    if result.new_params:
        assert entries["transformer.h.0.mlp.gate.weight"] == [(slice(4, 8), slice(0, 32))]
    patch.undo()
    assert sum(len(g["params"]) for g in opt.param_groups) == len(decay) + len(no_decay)


# --------------------------------------------------------------------------------- compute, symmetry, RMS
def test_estimate_compute_counts_active_experts_per_phase():
    from lightning_sparkling import estimate_compute

    config = llama_config()
    stages = [upcycle(n_expert=4, k=2, at=20), GrowthStage(60, n_expert=8, n_expert_per_token=4)]
    est = estimate_compute(config, stages, total_steps=100, tokens_per_step=64)
    mlp = 3 * 32 * 64  # fc_1, fc_2, proj of one LLaMAMLP (no bias)
    dense = sum(p.numel() for p in make_gpt(config).parameters())
    router = lambda e: 2 * e * 32  # noqa: E731  (one router per block, 2 blocks)
    assert est.total_params == (dense, dense + 2 * 3 * mlp + router(4), dense + 2 * 7 * mlp + router(8))
    assert est.active_params == (dense, dense + 2 * mlp + router(4), dense + 2 * 3 * mlp + router(8))
    assert est.flops == pytest.approx(6 * 64 * sum(n * s for n, s in zip(est.active_params, (20, 40, 40))))


def test_symmetry_of_copied_experts_and_router_rows_is_one_at_growth_and_drops_when_they_part():
    from lightning_sparkling.growth.symmetry import copy_specs, symmetry_metrics

    def measure(model, result):
        specs = copy_specs(result.plan)
        params = dict(model.named_parameters())
        return symmetry_metrics(specs, ((n, params[n]) for s in specs.values() for n in s.names()), "symmetry/s0")

    model = make_gpt(pure_moe_config())
    result = grow_model(model, GrowthStage(0, n_expert=8, n_expert_per_token=4))
    assert measure(model, result) == pytest.approx({"symmetry/s0/n_expert": 1.0, "symmetry/s0/experts": 1.0})
    with torch.no_grad():
        for block in model.transformer.h:
            block.mlp.experts[5].fc_1.weight.neg_()
            block.mlp.gate.weight[6].neg_()
    got = measure(model, result)
    assert got["symmetry/s0/experts"] < 0.95 and got["symmetry/s0/n_expert"] < 0.95
    model = make_gpt(llama_config())
    result = grow_model(model, upcycle(expert_init="drop-upcycle"))
    assert 0.3 < measure(model, result)["symmetry/s0/experts"] < 0.7  # half the channels re-drawn
    model = make_gpt(pure_moe_config())
    assert not copy_specs(grow_model(model, GrowthStage(0, n_expert=8, expert_init="random")).plan).get("experts")


def test_rms_monitor_follows_the_upcycled_mixture_and_reads_the_same_values():
    from lightning_sparkling.callbacks.rms_monitor import compute_rms

    model = make_gpt(llama_config())
    tokens = make_tokens(model.config, batch=3, length=16)
    before = compute_rms(model, tokens, per_linear=True)
    grow_model(model, upcycle())
    after = compute_rms(model, tokens, per_linear=True)
    assert {k for k in before if "/gain/" not in k} <= after.keys()
    for tag, value in before.items():
        if tag in after and "/gain/" not in tag:
            assert after[tag] == pytest.approx(value, rel=1e-5, abs=1e-7), tag
    assert any("experts.3" in tag for tag in after)  # the new experts' linears are watched from the growth on


def test_a_named_moe_target_with_more_experts_grows_the_experts():
    target = {**{k: getattr(pure_moe_config(), k) for k in ("name", "block_size", "n_layer", "n_embd", "n_head",
                                                            "n_query_groups", "intermediate_size",
                                                            "moe_intermediate_size", "mlp_class_name",
                                                            "norm_class_name", "bias", "parallel_residual",
                                                            "rotary_percentage", "vocab_size", "padded_vocab_size")},
              "n_expert": 8, "n_expert_per_token": 4}
    model = make_gpt(pure_moe_config())
    tokens = make_tokens(model.config)
    before = logits(model, tokens)
    result = grow_model(model, GrowthStage(0, model_config=target))
    assert (model.config.n_expert, model.config.n_expert_per_token) == (8, 4)
    assert result.plan.stage.n_expert == 8 and result.plan.stage.model_config == target
    torch.testing.assert_close(logits(model, tokens), before, atol=1e-5, rtol=0)
    with pytest.raises(GrowthError, match="n_expert=2 is smaller than the model.s n_expert=4"):
        plan_growth(pure_moe_config(), GrowthStage(0, model_config={**target, "n_expert": 2, "n_expert_per_token": 2}))


@pytest.mark.parametrize("factory,keys", [(llama_config, dict(mlp_class_name="LLaMAMoE", n_expert=4,
                                                              n_expert_per_token=2, expert_init="drop-upcycle")),
                                          (grouped_config, dict(n_expert=8, n_expert_per_token=4,
                                                                expert_init="random"))])
def test_bf16_model_stays_bf16(factory, keys):
    model = make_gpt(factory()).to(torch.bfloat16)
    grow_model(model, GrowthStage(0, **keys))
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    model(make_tokens(model.config))  # runs


# ------------------------------------------------------------------------- first_k_dense_replace (dense -> MoE)
DENSE_KEY = "first_k_dense_replace"


@pytest.mark.parametrize("k", [1, 2])
def test_upcycle_keeps_the_first_k_blocks_dense_and_the_function(k):
    """Blocks ``0..k-1`` keep the very MLP module and Parameters, blocks ``k..`` upcycle; logits kept; the grown config
    carries litgpt's ``first_k_dense_replace`` so ``GPT(grown config)`` loads the state dict strictly."""
    model = make_gpt(llama_config(n_layer=4))
    tokens = make_tokens(model.config, batch=3, length=16)
    before = logits(model, tokens)
    mlps = [block.mlp for block in model.transformer.h]
    params = dict(model.named_parameters())
    values = {n: p.detach().clone() for n, p in params.items()}
    result = grow_model(model, upcycle(n_expert=4, k=2, **{DENSE_KEY: k}))
    assert model.config.first_k_dense_replace == k and model.config.mlp_class_name == "LLaMAMoE"
    assert [type(b.mlp).__name__ for b in model.transformer.h] == ["LLaMAMLP"] * k + ["LLaMAMoE"] * (4 - k)
    for i in range(k):
        mlp = model.transformer.h[i].mlp
        assert mlp is mlps[i] and mlp.config is model.config
        for rest, p in mlp.named_parameters():
            name = f"transformer.h.{i}.mlp.{rest}"
            assert p is params[name] and torch.equal(p, values[name])
    for i in range(k, 4):
        assert model.transformer.h[i].mlp.experts[0] is mlps[i]
    torch.testing.assert_close(logits(model, tokens), before, atol=1e-5, rtol=0)
    fresh = GPT(model.config)
    assert [type(b.mlp).__name__ for b in fresh.transformer.h] == [type(b.mlp).__name__ for b in model.transformer.h]
    fresh.load_state_dict(model.state_dict(), strict=True)
    torch.testing.assert_close(logits(fresh, tokens), before, atol=1e-5, rtol=0)
    blocks = {int(n.split(".")[2]) for n in list(result.plan.tensors) + list(result.added) + list(result.new_entries)}
    assert blocks == set(range(k, 4))  # nothing planned, added or re-warmed in the dense blocks
    assert len(result.added) == (4 - k) * (3 * 3 + 1) and not result.new_params
    from lightning_sparkling.growth.axes.experts import EXPERTS

    kept = "block 0 kept dense" if k == 1 else "blocks 0-1 kept dense"
    assert kept in EXPERTS.describe(result.plan) and EXPERTS.describe(result.plan).endswith("function kept")


@pytest.mark.parametrize("recipe", ["asymmetric", "copy"])
def test_dense_blocks_keep_their_adamw_state_and_train_as_if_nothing_grew(recipe):
    """After the patch the kept MLP's AdamW state is the very same (step, moments), it is listed once in its group, and
    the next AdamW step moves it exactly as on an ungrown twin (copied experts keep the function, so its gradient is
    the twin's): a reset or copied-over state would change that step."""
    def trained():
        model = make_gpt(llama_config(n_layer=3))
        decay = [p for p in model.parameters() if p.ndim == 2]
        no_decay = [p for p in model.parameters() if p.ndim < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                                lr=1e-2)
        for seed in range(2):
            opt.zero_grad()
            model(make_tokens(model.config, seed=seed)).sum().backward()
            opt.step()
        return model, opt

    model, opt = trained()
    twin, twin_opt = trained()
    kept = {n: p for n, p in model.named_parameters() if n.startswith("transformer.h.0.mlp.")}
    state = {n: dict(opt.state[p]) for n, p in kept.items()}  # the state tensors themselves, not copies
    values = {n: {k: v.clone() for k, v in s.items()} for n, s in state.items()}
    result = grow_model(model, upcycle(n_expert=4, k=2, at=2, optimizer_state=recipe, **{DENSE_KEY: 1}))
    plan_optimizer_patch(opt, result, recipe).apply()
    listed = [p for group in opt.param_groups for p in group["params"]]
    for name, p in kept.items():
        assert sum(q is p for q in listed) == 1 and name not in result.new_entries
        for key, value in opt.state[p].items():
            assert value is state[name][key] and torch.equal(value, values[name][key]), (name, key)
    start = {n: p.detach().clone() for n, p in kept.items()}
    for o, m in ((opt, model), (twin_opt, twin)):
        o.zero_grad()
        m(make_tokens(m.config, seed=2)).sum().backward()
        o.step()
    twin_params = dict(twin.named_parameters())
    for name, p in kept.items():
        assert (p - start[name]).abs().mean() > 1e-3  # the step moved it (lr 1e-2), 1000x the tolerance
        torch.testing.assert_close(p.detach(), twin_params[name].detach(), atol=1e-6, rtol=0)


MODEL_DENSE_REFUSALS = [
    ("k-is-n_layer", llama_config, upcycle(**{DENSE_KEY: 2}), "first_k_dense_replace=2\\): the model has n_layer=2 "
                                                              "blocks.*use first_k_dense_replace <= 1"),
    ("k-past-n_layer", llama_config, upcycle(**{DENSE_KEY: 5}), "first_k_dense_replace=5\\).*<= 1"),
    ("differs-from-moe", moe_config, GrowthStage(0, n_expert=8, n_expert_per_token=4, **{DENSE_KEY: 0}),
     "first_k_dense_replace=0\\): this MoE model has first_k_dense_replace=1.*drop first_k_dense_replace or give 1"),
    ("moe-has-none", pure_moe_config, GrowthStage(0, n_expert=8, **{DENSE_KEY: 1}),
     "first_k_dense_replace=1\\): this MoE model has first_k_dense_replace=0"),
]


@pytest.mark.parametrize("factory,stage,message", [r[1:] for r in MODEL_DENSE_REFUSALS],
                         ids=[r[0] for r in MODEL_DENSE_REFUSALS])
def test_a_first_k_the_model_cannot_take_is_refused_by_key_before_anything_changes(factory, stage, message):
    model = make_gpt(factory())
    snap = snapshot(model)
    with pytest.raises(StageError, match=message) as info:
        grow_model(model, stage)
    assert info.value.key == DENSE_KEY and isinstance(info.value, GrowthError)  # plan_growth's callers catch both
    assert_unchanged(model, snap)
    copy = pickle.loads(pickle.dumps(info.value))  # raised on a rank, re-raised on another
    assert (type(copy), copy.key, str(copy)) == (type(info.value), DENSE_KEY, str(info.value))


def test_more_experts_may_repeat_the_models_own_first_k():
    model = make_gpt(moe_config())
    tokens = make_tokens(model.config)
    before = logits(model, tokens)
    grow_model(model, GrowthStage(0, n_expert=8, n_expert_per_token=4, **{DENSE_KEY: 1}))
    assert model.config.first_k_dense_replace == 1 and type(model.transformer.h[0].mlp).__name__ == "LLaMAMLP"
    torch.testing.assert_close(logits(model, tokens), before, atol=1e-5, rtol=0)


def test_first_k_zero_is_every_block_upcycled():
    model = make_gpt(llama_config())
    grow_model(model, upcycle(**{DENSE_KEY: 0}))
    assert model.config.first_k_dense_replace is None
    assert all(type(b.mlp).__name__ == "LLaMAMoE" for b in model.transformer.h)


def test_symmetry_and_rms_monitor_with_dense_first_blocks():
    from lightning_sparkling.callbacks.rms_monitor import compute_rms
    from lightning_sparkling.growth.symmetry import copy_specs, symmetry_metrics

    model = make_gpt(llama_config(n_layer=3))
    tokens = make_tokens(model.config, batch=3, length=16)
    before = compute_rms(model, tokens, per_linear=True)
    result = grow_model(model, upcycle(**{DENSE_KEY: 1}))
    specs = copy_specs(result.plan)
    names = [n for s in specs.values() for n in s.names()]
    assert names and not any(n.startswith("transformer.h.0.") for n in names)
    params = dict(model.named_parameters())
    metrics = symmetry_metrics(specs, ((n, params[n]) for n in names), "symmetry/s0")
    assert metrics == pytest.approx({"symmetry/s0/experts": 1.0})
    with torch.no_grad():
        for block in model.transformer.h[1:]:
            block.mlp.experts[2].fc_1.weight.neg_()
    assert symmetry_metrics(specs, ((n, params[n]) for n in names), "symmetry/s0")["symmetry/s0/experts"] < 0.95
    with torch.no_grad():
        for block in model.transformer.h[1:]:
            block.mlp.experts[2].fc_1.weight.neg_()
    after = compute_rms(model, tokens, per_linear=True)
    dense = {t for t in before if t.endswith("block_00") or "block_00/" in t}
    assert "rms/gain/block_00/mlp.fc_1" in dense and dense == {t for t in after if t.endswith("block_00") or
                                                                 "block_00/" in t}  # the kept MLP watched as before
    for tag, value in before.items():
        if tag in after and ("/gain/" not in tag or tag in dense):
            assert after[tag] == pytest.approx(value, rel=1e-5, abs=1e-7), tag
    assert "rms/gain/block_01/mlp.experts.3.fc_1" in after and "rms/gain/block_01/mlp.fc_1" not in after


@pytest.mark.parametrize("order,n_layer,k", [("interleave", 4, 2), ("middle", 3, 2), ("map", 3, 1)])
def test_depth_after_upcycling_with_dense_first_blocks_keeps_them_first(order, n_layer, k):
    model = make_gpt(llama_config())
    tokens = make_tokens(model.config, batch=3, length=16)
    grow_model(model, upcycle(**{DENSE_KEY: 1}))
    before = logits(model, tokens)
    keys = dict(depth_map=(0, 1, 1)) if order == "map" else dict(depth_order=order)
    grow_model(model, GrowthStage(0, n_layer=n_layer, **keys))
    assert model.config.first_k_dense_replace == k
    assert [type(b.mlp).__name__ for b in model.transformer.h] == ["LLaMAMLP"] * k + ["LLaMAMoE"] * (n_layer - k)
    torch.testing.assert_close(logits(model, tokens), before, atol=1e-5, rtol=0)  # copy-zero: new blocks add nothing
    GPT(model.config).load_state_dict(model.state_dict(), strict=True)


@pytest.mark.parametrize("keys,message", [
    (dict(depth_order="stack"), "depth_order='stack' puts a copy of a dense block at position 2 of 4; use "
                                "depth_order='interleave' or 'middle'"),
    (dict(depth_map=(0, 1, 0, 1)), "depth_map=\\(0, 1, 0, 1\\) puts a copy of a dense block at position 2 of 4; list "
                                   "the copies of blocks 0..0 before the first of block 1 in depth_map"),
])
def test_depth_that_would_put_a_dense_copy_after_the_experts_is_refused(keys, message):
    model = make_gpt(llama_config())
    grow_model(model, upcycle(**{DENSE_KEY: 1}))
    snap = snapshot(model)
    with pytest.raises(GrowthError, match=message):
        grow_model(model, GrowthStage(0, n_layer=4, **keys))
    assert_unchanged(model, snap)


def test_estimate_compute_counts_only_the_upcycled_blocks_experts():
    from lightning_sparkling import estimate_compute

    config = llama_config(n_layer=3)
    est = estimate_compute(config, [upcycle(n_expert=4, k=2, at=20, **{DENSE_KEY: 1})], total_steps=100,
                           tokens_per_step=64)
    mlp, router = 3 * 32 * 64, 4 * 32  # one LLaMAMLP's weights, one router
    dense = sum(p.numel() for p in make_gpt(config).parameters())
    assert est.total_params == (dense, dense + 2 * (3 * mlp + router))  # blocks 1 and 2 only
    assert est.active_params == (dense, dense + 2 * (mlp + router))


def test_a_named_moe_target_with_other_dense_blocks_is_refused_not_ignored():
    """A ``model_config`` MoE target whose ``first_k_dense_replace`` differs from the MoE model's: a growth of the
    experts keeps which blocks are dense, so the grown checkpoint would not be the target's config: refused, naming
    both values and the fix, before anything changes (was: silently grown with the model's value)."""
    from litgpt import Config

    from lightning_sparkling.growth.errors import GrowthError
    from lightning_sparkling.growth.plan import stage_config

    common = dict(n_layer=3, n_embd=32, n_head=2, vocab_size=64, padded_vocab_size=64, mlp_class_name="LLaMAMoE",
                  intermediate_size=64, moe_intermediate_size=64, n_expert_per_token=2)
    model = Config(**common, n_expert=4, first_k_dense_replace=1)
    stage = GrowthStage(10, model_config={**common, "n_expert": 8, "first_k_dense_replace": 2})
    for call in (plan_growth, stage_config):
        with pytest.raises(GrowthError, match=r"target's first_k_dense_replace=2 is not what this growth gives the "
                                              r"grown model \(first_k_dense_replace=1: the model's own, kept\); grow "
                                              r"into a config with first_k_dense_replace=1"):
            call(model, stage)
    same = plan_growth(model, GrowthStage(10, model_config={**common, "n_expert": 8, "first_k_dense_replace": 1}))
    assert (same.new_config.n_expert, same.new_config.first_k_dense_replace) == (8, 1)
