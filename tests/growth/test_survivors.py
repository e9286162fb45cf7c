"""Behaviours a mutation audit found untested (issue 40, "The survivors"): each test here fails when the named line is
broken (docs/MUTATIONS.md lists the mutation, the test and the failure line it gives).

Survivors 1-7 and 10 of the growth layer: frozen sources keep new experts and new blocks frozen, a zero fan-out still
copies norm weights, a plug-in cannot claim a registered size, ``better_recipe`` never recommends a cell that ended
above scratch in half its seeds, ``WSDLambda`` decays linearly by default, two stages at one step are refused, and a
stage record of an older checkpoint (no ``symmetry_done``) reads as done.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from conftest import llama_config, make_gpt, olmo2_config, pure_moe_config

from lightning_sparkling import GrowthStage, grow_model
from lightning_sparkling.growth.axes import BaseAxis, register_axis, registered_axes, unregister_axis
from lightning_sparkling.pretrain.advice.measured import Advice, MeasuredCell, better_recipe, load_map
from lightning_sparkling.growth.record import StageRecord
from lightning_sparkling.growth.schedules import SCHEDULES, WSDLambda, wsd_decay_start
from lightning_sparkling.growth.stage import resolve_timing


def _flags(module: torch.nn.Module) -> dict[str, bool]:
    return {name: p.requires_grad for name, p in module.named_parameters()}


# ------------------------------------------------------------------------ 1. experts copied from frozen sources
def test_new_experts_take_requires_grad_from_the_expert_they_copy():
    """Expert 1 of block 0 frozen: its copy (expert 5) is frozen too; every other new expert trains."""
    model = make_gpt(pure_moe_config())  # 4 experts, top-2, two MoE blocks
    model.transformer.h[0].mlp.experts[1].requires_grad_(False)
    grow_model(model, GrowthStage(0, n_expert=8, n_expert_per_token=4))
    experts = model.transformer.h[0].mlp.experts
    assert len(experts) == 8
    assert set(_flags(experts[5]).values()) == {False}  # 5 <- 1
    for e in (4, 6, 7):
        assert set(_flags(experts[e]).values()) == {True}, e
    assert set(_flags(model.transformer.h[1].mlp.experts).values()) == {True}


def test_upcycled_experts_of_a_frozen_mlp_stay_frozen():
    model = make_gpt(llama_config())
    model.transformer.h[0].mlp.requires_grad_(False)
    grow_model(model, GrowthStage(0, mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2))
    frozen, trained = model.transformer.h[0].mlp, model.transformer.h[1].mlp
    for e in range(4):  # expert 0 is the MLP itself, 1..3 its copies
        assert set(_flags(frozen.experts[e]).values()) == {False}, e
        assert set(_flags(trained.experts[e]).values()) == {True}, e


# ------------------------------------------------------------------------ 2. blocks copied from frozen blocks
@pytest.mark.parametrize("order", ["stack", "interleave"])
def test_new_blocks_take_requires_grad_from_the_block_they_copy(order):
    """Block 0 frozen entirely, block 1 frozen in its first norm only: every new block has its source's flags."""
    model = make_gpt(llama_config())
    model.transformer.h[0].requires_grad_(False)
    model.transformer.h[1].norm_1.weight.requires_grad_(False)
    before = [_flags(block) for block in model.transformer.h]
    assert before[0] != before[1]
    result = grow_model(model, GrowthStage(0, n_layer=4, depth_order=order))
    depth = result.plan.changes["depth"]
    assert sum(depth.fresh) == 2
    for j, (source, fresh) in enumerate(zip(depth.source, depth.fresh)):
        assert _flags(model.transformer.h[j]) == before[source], (j, source, fresh)


# ------------------------------------------------------------------------ 3. norms under a zero fan-out
@pytest.mark.parametrize("init", ["zero-copy", "zero-random"])
def test_zero_fan_out_copies_the_new_norm_weights(init):
    """A zero norm weight on a channel whose input is zero too blocks every gradient into it: under a zero fan-out
    the new norm entries (``n_embd`` norms and OLMo-2 q/k norms) are copies of old entries, never zero."""
    model = make_gpt(olmo2_config())
    old = {name: p.detach().clone() for name, p in model.named_parameters() if p.ndim == 1}
    grow_model(model, GrowthStage(0, n_embd=2 * model.config.n_embd, n_head=2 * model.config.n_head,
                                  n_query_groups=2 * model.config.n_query_groups, init=init))
    checked = 0
    for name, p in model.named_parameters():
        if name not in old or not name.endswith("weight") or p.shape == old[name].shape:
            continue
        new = p.detach()[old[name].numel():]
        assert (new != 0).all(), f"{name}: new norm weights are zero under init={init}"
        assert torch.isin(new, old[name]).all(), f"{name}: new norm weights are not copies of old ones"
        checked += 1
    assert checked == 1 + 4 * model.config.n_layer  # ln_f; norm_1, norm_2, attn.norm_q, attn.norm_k of each block


# ------------------------------------------------------------------------ 4. a plug-in claiming a registered size
def test_register_axis_refuses_a_plugin_that_claims_a_registered_size():
    class ClaimsHidden(BaseAxis):
        name = "my-hidden"
        sizes = ("n_embd",)

    before = registered_axes()
    with pytest.raises(ValueError, match=r"axis 'my-hidden' \(sizes \('n_embd',\)\) clashes with the registered "
                                         r"axis 'width'"):
        register_axis(ClaimsHidden())
    assert registered_axes() == before

    @dataclasses.dataclass(frozen=True)
    class FreshKeys:
        rope_condense_ratio: int | None = None

    class Fresh(BaseAxis):  # a size of its own (a litgpt.Config field, a stage key of its own): accepted
        name = "my-axis"
        sizes = ("rope_condense_ratio",)
        stage_keys = FreshKeys

    axis = register_axis(Fresh())
    try:
        assert registered_axes()[-1] is axis
    finally:
        unregister_axis(axis)


# ------------------------------------------------------------------------ 5. better_recipe and half the seeds
def _cell(recipe: str, delta: float, seeds_above: int, seeds: int = 4) -> MeasuredCell:
    return MeasuredCell(category="joint", recipe=recipe, schedule="wsd", growth_at=0.25, tokens_per_param=11.3,
                        delta=delta, sd=0.005, seeds=seeds, seeds_above=seeds_above, where="test")


@pytest.mark.parametrize("seeds_above, seeds, switch", [(2, 4, False), (3, 6, False), (1, 3, True), (2, 5, True),
                                                        (3, 4, False)])
def test_better_recipe_needs_most_seeds_below_scratch(seeds_above, seeds, switch):
    """A cell below scratch on average but above it in half its seeds (or more) is no reason to switch recipe."""
    cells = [_cell("paper", 0.05, seeds, seeds), _cell("wsd", -0.04, seeds_above, seeds)]
    found = better_recipe(cells, category="joint", recipe="paper", schedule="wsd", growth_at=0.25,
                          tokens_per_param=11.3, than=cells[0])
    if switch:
        assert found is cells[1]
    else:
        assert found is None, f"recommended a cell above scratch in {seeds_above}/{seeds} seeds: {found.describe()}"


# ------------------------------------------------------------------------ 6. WSDLambda's default decay shape
def test_wsd_lambda_decays_linearly_by_default():
    """Warmup 10, decay over the last 20 of 100 steps to 0.1: a quarter into the decay (step 85) a linear decay is at
    0.1 + 0.9 * 0.75 = 0.775 (cosine: 0.1 + 0.9 * (1 + cos(pi / 4)) / 2 = 0.868)."""
    f = WSDLambda(warmup_steps=10, total_steps=100, min_lr_ratio=0.1)
    assert f(85) == pytest.approx(0.775, abs=1e-12)
    assert f.decay_shape == "linear"
    assert f(85) == WSDLambda(10, 100, 0.1, decay_shape="linear")(85)
    assert f(85) != pytest.approx(WSDLambda(10, 100, 0.1, decay_shape="cosine")(85), abs=1e-3)


# ------------------------------------------------------------------------ 7. two stages at one step
def test_two_stages_at_the_same_step_are_refused():
    with pytest.raises(ValueError, match=r"strictly increasing at_step order, got at_step=\[10, 10\]"):
        resolve_timing([GrowthStage(10, n_embd=64), GrowthStage(10, intermediate_size=256)], 100)


def test_an_at_fraction_landing_on_another_stages_step_is_refused():
    with pytest.raises(ValueError, match=r"got at_step=\[50, 50 \(at_fraction=0.5\)\]"):
        resolve_timing([GrowthStage(50, n_embd=64), GrowthStage(at_fraction=0.5, intermediate_size=256)], 100)
    assert [s.at_step for s in resolve_timing([GrowthStage(50, n_embd=64),
                                               GrowthStage(at_fraction=0.51, intermediate_size=256)], 100)] == [50, 51]


# ------------------------------------------------------------------------ 10. a record without symmetry_done
def test_a_stage_record_of_an_older_checkpoint_without_symmetry_keys_reads_as_done():
    """Checkpoints written before the symmetry loop hold no ``symmetry_boost`` / ``symmetry_done``: such a stage has
    no loop, so it is done at boost 1 (a record left 'not done' would be checked against a ``None`` target)."""
    old = {"stage_index": 0, "global_step": 6, "lr_at_growth": [0.003], "min_lr": [3e-5], "total_steps": 12,
           "betas": None}
    record = StageRecord.from_dict(old)
    assert (record.symmetry_done, record.symmetry_boost, record.has_lr_decay) == (True, 1.0, False)
    assert StageRecord(0, 6, [0.003], [3e-5], 12).symmetry_done is True


# ------------------------------------------------------------------------ the audit's further survivors (record.py)
def test_stage_record_dicts_are_deep_copies_and_keep_their_strings():
    """A record is mutated after growth (the symmetry boost, a resume's decay): the checkpointed dict and a record read
    back from it share no list or dict with it, and the decay shape stays a string."""
    decay = [{"decay_start": 80, "decay_shape": "linear"}, None]
    record = StageRecord(0, 10, [1e-3, 2e-3], [1e-5, 2e-5], 100, lr_decay=decay)
    saved = record.to_dict()
    assert saved["lr_decay"] == [{"decay_start": 80, "decay_shape": "linear"}, None]
    record.lr_at_growth[0], record.lr_decay[0]["decay_start"] = 5.0, 1
    assert saved["lr_at_growth"] == [1e-3, 2e-3] and saved["lr_decay"][0]["decay_start"] == 80
    back = StageRecord.from_dict(saved)
    saved["min_lr"][0], saved["lr_decay"][0]["decay_shape"] = 0.0, "cosine"
    assert back.min_lr == [1e-5, 2e-5] and back.lr_decay[0] == {"decay_start": 80, "decay_shape": "linear"}


def test_decay_of_reads_the_recorded_decay_of_each_group():
    assert StageRecord(0, 10, [1e-3], [1e-5], 100).decay_of(0) is None  # unset: the paper's cosine tail
    assert StageRecord(0, 10, [1e-3], [1e-5], 100, lr_decay=None).decay_of(0) is None
    record = StageRecord(0, 10, [1e-3, 1e-3], [1e-5, 1e-5], 100, lr_decay=[None, {"decay_start": 80,
                                                                                 "decay_shape": "sqrt"}])
    assert (record.decay_of(0), record.decay_of(1)) == (None, {"decay_start": 80, "decay_shape": "sqrt"})


# ------------------------------------------------------------------------ the audit's further survivors (measured.py)
def test_the_maps_cells_are_read_only():
    """``load_map`` is cached: every plan shares its cells, so none may be changed in place (nor an advice)."""
    cell = load_map()[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cell.delta = -1.0  # type: ignore[misc]
    advice = Advice(category=cell.category, recipe=cell.recipe, schedule=cell.schedule, growth_at=cell.growth_at,
                    tokens_per_param=cell.tokens_per_param, cell=cell, near=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        advice.near = False  # type: ignore[misc]


def test_a_cell_level_with_scratch_but_above_its_start_model_is_said_to_be_above_the_start_model():
    """Δ 0 against scratch (level with it) but +0.05 against the model it grew from: growth did not pay, and the
    reason named is the model it grew from, not scratch."""
    cell = MeasuredCell(category="upcycle", recipe="paper", schedule="cosine", growth_at=0.25, tokens_per_param=10.0,
                        delta=0.0, sd=0.01, seeds=3, seeds_above=1, where="test", init="copy", start_delta=0.05,
                        start_sd=0.01, start_seeds_above=3)
    advice = Advice(category="upcycle", recipe="paper", schedule="cosine", growth_at=0.25, tokens_per_param=10.0,
                    cell=cell, near=True, init="copy")
    message = advice.message()
    assert not advice.pays and message.startswith("growth cost near")
    # the reason ends the sentence (the next one points to `sparkling measure`), not "above scratch"
    assert "above the model it grew from continued on the same FLOPs. " in message, message
    assert "), above scratch" not in message, message


def test_better_recipe_switches_only_for_a_gap_larger_than_the_seeds_spread():
    """0.5 - (-0.25) = 0.75 exactly: a gap equal to the larger sd is inside the seeds' spread (no switch); a gap a
    little larger is not."""
    run = MeasuredCell(category="joint", recipe="paper", schedule="wsd", growth_at=0.25, tokens_per_param=11.3,
                       delta=0.5, sd=0.75, seeds=4, seeds_above=4, where="test")
    kw = dict(category="joint", recipe="paper", schedule="wsd", growth_at=0.25, tokens_per_param=11.3, than=run)
    level = _cell("wsd", -0.25, 0)
    assert better_recipe([run, level], **kw) is None
    lower = _cell("wsd", -0.375, 0)
    assert better_recipe([run, lower], **kw) is lower


def test_a_speedup_measured_without_spread_is_accepted_and_a_negative_spread_refused():
    base = dict(category="depth", recipe="paper", schedule="cosine", growth_at=0.05, tokens_per_param=31.0, delta=-0.05,
                sd=0.01, seeds=3, seeds_above=0, where="test")
    assert MeasuredCell(**base, speedup=1.2, speedup_sd=0.0).describe_speedup() == \
        "speed-up at equal loss 1.20x ± 0.00 (3 seeds)"
    with pytest.raises(ValueError, match=r"speedup_sd=-0.1: must be a finite number >= 0"):
        MeasuredCell(**base, speedup=1.2, speedup_sd=-0.1)


# ------------------------------------------------------------------------ the audit's further survivors (schedules.py)
@pytest.mark.parametrize("warmup, total", [(-1, 40), (50, 40)])
def test_wsd_decay_start_refuses_a_warmup_outside_the_run(warmup, total):
    with pytest.raises(ValueError, match=rf"need 0 <= warmup_steps <= total_steps, got warmup_steps={warmup}, "
                                         rf"total_steps={total}"):
        wsd_decay_start(warmup_steps=warmup, total_steps=total, decay_fraction=0.2)
    assert wsd_decay_start(warmup_steps=0, total_steps=40, decay_fraction=0.2) == 32
    assert wsd_decay_start(warmup_steps=40, total_steps=40, decay_fraction=0.2) == 40  # all warmup: no decay left


def test_the_registered_schedules_are_read_only():
    """Every run reads ``SCHEDULES``: a kind changed in place would change every later run's recipe."""
    with pytest.raises(dataclasses.FrozenInstanceError):
        SCHEDULES["wsd"].recipe = "paper"  # type: ignore[misc]
