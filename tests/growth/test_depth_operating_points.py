"""The depth operating points of the published results (issue 32): ``at_fraction`` (a growth at a fraction of the
run), ``depth_map`` (prts's layer map: one old-block index per grown block) and a 4x depth growth in one stage.

Single process: validation naming the value and the fix; the named orders are depth maps (a map grows exactly what its
named order grows); copy-zero keeps the logits at 4x on every litgpt family and under any accepted map, with per-block
sliding-window and RoPE indicators following the map; an ``at_fraction`` stage grows at ``ceil(f * max_steps)`` inside a
fit and in ``estimate_compute``; bit-exact resume before, at and after a 4x growth and an ``at_fraction`` ``depth_map``
growth at accumulation 1 and 2. Two CPU ranks (depth4x_dist_script.py): both stages under DDP and FSDP2 end where one
process ends, ranks agree, and resuming between the growths ends where the uninterrupted run ends."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from litgpt import GPT

from lightning_sparkling import GrowthStage, WidthGrowthCallback, estimate_compute, grow_model
from lightning_sparkling.growth.depth_maps import check_depth_map, named_depth_map
from lightning_sparkling.growth.plan import GrowthError, plan_growth
from lightning_sparkling.growth.stage import fraction_step, resolve_timing

from _dist import backend_fixtures, final_states, rel_diff
from _tiny import TinyModule, assert_states_equal, make_trainer, paper_stage, tiny_config
from conftest import assert_unchanged, gemma_config, make_gpt, make_tokens, snapshot
from test_depth import FAMILIES


# ----------------------------------------------------------------------------------------------- at_fraction
@pytest.mark.parametrize("fraction, max_steps, step", [
    (0.05, 100, 5), (0.07, 100, 7), (0.25, 30, 8), (1 / 3, 300, 100), (0.8, 1000, 800), (0.001, 10, 1),
    (0.999, 10, 10),  # past the run: the callback refuses it (below)
])
def test_at_fraction_rounds_up_on_the_decimal_value(fraction, max_steps, step):
    assert fraction_step(fraction, max_steps) == step
    assert paper_stage(at_fraction=fraction, n_layer=4).resolved(max_steps).at_step == step


@pytest.mark.parametrize("keys, message", [
    (dict(), r"give exactly one of at_step .* and at_fraction"),
    (dict(at_step=5, at_fraction=0.5), r"give exactly one of at_step"),
    (dict(at_fraction=0.0), r"at_fraction=0.0\): must be a number in \(0, 1\)"),
    (dict(at_fraction=1.0), r"at_fraction=1.0\): must be a number in \(0, 1\)"),
    (dict(at_fraction=-0.2), r"at_fraction=-0.2\): must be a number in \(0, 1\)"),
    (dict(at_fraction=True), r"at_fraction=True\): must be a number"),
    (dict(at_fraction="0.5"), r"at_fraction='0.5'\): must be a number"),
])
def test_bad_timing_is_refused_naming_the_value(keys, message):
    with pytest.raises(ValueError, match=message):
        paper_stage(n_layer=4, **keys)


@pytest.mark.parametrize("max_steps", [None, -1, 0])
def test_at_fraction_without_a_run_length_is_refused(max_steps):
    with pytest.raises(ValueError, match=rf"at_fraction=0.5\): .* max_steps is {max_steps}; set Trainer\(max_steps"):
        paper_stage(at_fraction=0.5, n_layer=4).resolved(max_steps)


def test_stages_are_ordered_after_resolution():
    stages = [paper_stage(at_fraction=0.5, n_embd=48), paper_stage(40, n_layer=4)]
    with pytest.raises(ValueError, match=r"increasing at_step order, got at_step=\[50 \(at_fraction=0.5\), 40\]"):
        resolve_timing(stages, 100)
    assert [s.at_step for s in resolve_timing(stages, 60)] == [30, 40]
    assert all(s.at_fraction is None for s in resolve_timing(stages, 60))


def test_estimate_compute_takes_the_fraction_of_total_steps():
    config = tiny_config()
    by_fraction = estimate_compute(config, paper_stage(at_fraction=0.3, n_layer=8), total_steps=40,
                                   tokens_per_step=64)
    by_step = estimate_compute(config, paper_stage(12, n_layer=8), total_steps=40, tokens_per_step=64)
    assert by_fraction == by_step and by_fraction.phase_steps == (12, 28)


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])
def test_an_at_fraction_stage_grows_at_its_step_inside_a_fit(accumulate):
    module = TinyModule(max_steps=12, accumulate=accumulate)
    growth = WidthGrowthCallback([paper_stage(at_fraction=0.3, n_layer=8, rewarmup_steps=2)])
    seen: list[tuple[int, int]] = []

    class Layers(Callback):  # records the block count the optimizer step at each global_step trains
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen.append((trainer.global_step, pl_module.model.config.n_layer))

    trainer = make_trainer([growth, Layers()], max_steps=12, accumulate=accumulate)
    trainer.fit(module)
    assert growth.stages[0].at_step == 4 and growth.summaries[0]["global_step"] == 4  # ceil(0.3 * 12)
    assert {step for step, n in seen if n == 2} == set(range(4)) and {step for step, n in seen if n == 8} == set(
        range(4, 12))


def test_the_callback_refuses_an_at_fraction_stage_without_max_steps_or_past_the_run():
    from lightning_sparkling.growth.plan import GrowthError as Error

    growth = WidthGrowthCallback([paper_stage(at_fraction=0.5, n_layer=4, rewarmup_ratio=None)])
    trainer = make_trainer([growth], max_steps=-1, max_epochs=1, limit_train_batches=2)
    with pytest.raises(Error, match=r"at_fraction=0.5\): a fraction of the run needs the run's length"):
        trainer.fit(TinyModule())
    growth = WidthGrowthCallback([paper_stage(at_fraction=0.95, n_layer=4, rewarmup_steps=1)])
    with pytest.raises(Error, match=r"at_step=10\) is at or past trainer.max_steps=10"):
        make_trainer([growth], max_steps=10).fit(TinyModule(max_steps=10))


# ----------------------------------------------------------------------------------------------- depth_map
@pytest.mark.parametrize("old, new, order", [(4, 8, "stack"), (4, 8, "interleave"), (3, 7, "interleave"),
                                             (5, 7, "middle"), (2, 8, "stack"), (2, 8, "middle")])
def test_the_named_orders_are_depth_maps(old, new, order):
    """A stage with the named order's map grows exactly what the named order grows (tensor for tensor)."""
    depth_map = named_depth_map(old, new, order)
    assert len(depth_map) == new
    config = FAMILIES["llama"](n_layer=old)
    a, b = make_gpt(config), make_gpt(config)
    grow_model(a, paper_stage(0, n_layer=new, depth_order=order, depth_init="copy"))
    grow_model(b, paper_stage(0, depth_map=depth_map, depth_init="copy"))
    assert a.state_dict().keys() == b.state_dict().keys()
    for name, value in a.state_dict().items():
        assert torch.equal(value, b.state_dict()[name]), name
    assert a.config == b.config


def test_the_issue_examples_at_4_to_8_and_gstacks_4x():
    assert named_depth_map(4, 8, "stack") == (0, 1, 2, 3, 0, 1, 2, 3)
    assert named_depth_map(4, 8, "interleave") == (0, 0, 1, 1, 2, 2, 3, 3)
    assert named_depth_map(2, 8, "stack") == (0, 1, 0, 1, 0, 1, 0, 1)
    assert named_depth_map(2, 8, "interleave") == (0, 0, 0, 0, 1, 1, 1, 1)
    # G_stack 6 -> 24 layers: prts's stacking_list for its 4x example
    assert named_depth_map(6, 24, "stack") == (0, 1, 2, 3, 4, 5) * 4


@pytest.mark.parametrize("depth_map", [(0, 0, 1, 0, 1, 1), (0, 1, 1, 1, 1, 0, 0, 0), (0, 1, 0, 0, 0, 0, 0, 0)])
def test_copy_zero_keeps_the_logits_under_any_accepted_map_and_new_blocks_copy_their_source(depth_map):
    model = make_gpt(FAMILIES["llama"](n_layer=2))
    x = make_tokens(model.config)
    with torch.no_grad():
        before = model(x)
    old = [dict(b.named_parameters()) for b in model.transformer.h]
    old = [{n: p.detach().clone() for n, p in b.items()} for b in old]
    result = grow_model(model, paper_stage(0, depth_map=depth_map))
    with torch.no_grad():
        torch.testing.assert_close(model(x), before, atol=1e-5, rtol=0)
    assert model.config.n_layer == len(depth_map)
    assert result.plan.depth.source == depth_map
    for j, i in enumerate(depth_map):
        for name, p in model.transformer.h[j].named_parameters():
            zeroed = result.plan.depth.fresh[j] and name in ("attn.proj.weight", "mlp.proj.weight")
            assert torch.equal(p, torch.zeros_like(p) if zeroed else old[i][name]), (j, name)


def test_per_block_indicators_follow_the_map():
    config = gemma_config(n_layer=3, sliding_window_size=4, sliding_window_indices=[1, 0, 1], block_size=16)
    model = make_gpt(config)
    x = make_tokens(config, length=16)
    with torch.no_grad():
        before = model(x)
    grow_model(model, paper_stage(0, depth_map=(0, 1, 1, 1, 2, 0), depth_init="copy-zero"))
    assert model.config.sliding_window_indices == [1, 0, 0, 0, 1, 1]
    with torch.no_grad():
        torch.testing.assert_close(model(x), before, atol=1e-5, rtol=0)
    # RoPE indicators (litgpt's forward on them is not exercised here: only the grown config)
    rope = FAMILIES["llama"](n_layer=3, rope_indices=[0, 1, 1])
    assert plan_growth(rope, paper_stage(0, depth_map=(0, 1, 1, 1, 2, 0))).new_config.rope_indices == [0, 1, 1, 1,
                                                                                                     1, 0]


@pytest.mark.parametrize("keys, message", [
    (dict(depth_map=[]), r"depth_map=\[\]\): must be a non-empty list of old-block indices"),
    (dict(depth_map=[0, -1]),
     r"depth_map=\[0, -1\]\): must be a non-empty list of old-block indices \(integers >= 0\)"),
    (dict(depth_map=[0, 1.0]), r"must be a non-empty list"),
    (dict(depth_map="0101"), r"must be a non-empty list"),
    (dict(depth_map=[1, 0, 1, 0]), r"position 0 holds old block 1 before old block 0 first appears"),
    (dict(depth_map=[0, 2, 1, 0]), r"position 1 holds old block 2 before old block 1 first appears"),
    (dict(depth_map=[0, 1, 0, 1], n_layer=6), r"the map has 4 entries, .* give n_layer=4 or leave n_layer out"),
    (dict(depth_map=[0, 1, 0, 1], depth_order="interleave"), r"depth_order='interleave'\): give one of them"),
])
def test_bad_depth_maps_are_refused_when_the_stage_is_built(keys, message):
    with pytest.raises(ValueError, match=message):
        paper_stage(0, **keys)


@pytest.mark.parametrize("depth_map, message, grown", [
    ((0, 1, 2, 0), r"names old block 2, but the model has 2 blocks \(indices 0..1\); use indices below 2", None),
    ((0, 0, 0, 0), r"leaves out old block\(s\) \[1\] of the model's 2; every old block must appear", None),
    ((0, 1), r"has 2 entries for a model of 2 blocks; a depth growth adds blocks", "n_layer=2 does not change"),
])
def test_a_map_that_does_not_fit_the_model_is_refused_before_anything_changes(depth_map, message, grown):
    model = make_gpt(FAMILIES["llama"](n_layer=2))
    snap = snapshot(model)
    with pytest.raises(GrowthError, match=grown or message):
        grow_model(model, paper_stage(0, depth_map=depth_map))
    assert_unchanged(model, snap)
    with pytest.raises(ValueError, match=message):
        check_depth_map(depth_map, 2)


def test_a_map_on_a_named_target_must_have_its_length():
    config = tiny_config(n_layer=2)
    target = {k: getattr(config, k) for k in ("n_embd", "n_head", "n_query_groups", "intermediate_size",
                                              "vocab_size", "padded_vocab_size", "block_size", "mlp_class_name",
                                              "norm_class_name", "bias", "parallel_residual")}
    with pytest.raises(GrowthError, match=r"the map has 3 entries, .*give n_layer=3 .*\(the target sets n_layer=4"):
        plan_growth(config, paper_stage(0, model_config={**target, "n_layer": 4}, depth_map=(0, 1, 0)))
    plan = plan_growth(config, paper_stage(0, model_config={**target, "n_layer": 4}, depth_map=(0, 0, 1, 1)))
    assert plan.depth.source == (0, 0, 1, 1) and plan.new_config.n_layer == 4


def test_stages_with_a_map_survive_the_checkpoint_round_trip():
    stage = paper_stage(at_fraction=0.5, depth_map=[0, 1, 0, 1])
    assert stage.depth_map == (0, 1, 0, 1) and stage.n_layer == 4
    assert GrowthStage(**stage.to_dict()) == stage


# ----------------------------------------------------------------------------------------------- 4x depth
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_4x_depth_in_one_stage_keeps_the_logits_on_every_family(family):
    config = FAMILIES[family](n_layer=2)
    order = "interleave" if family == "moe" else "stack"  # dense first block: stack is refused there
    model = make_gpt(config)
    x = make_tokens(config)
    with torch.no_grad():
        before = model(x)
    result = grow_model(model, paper_stage(0, n_layer=8, depth_order=order))
    with torch.no_grad():
        torch.testing.assert_close(model(x), before, atol=1e-5, rtol=0)
    assert len(result.plan.depth.new_blocks) == 6 and len(model.transformer.h) == 8
    fresh = GPT(model.config)
    fresh.load_state_dict(model.state_dict(), strict=True)


MAX_STEPS = 16


def _operating_points(kind: str) -> list[GrowthStage]:
    if kind == "4x":  # 2 -> 8 blocks at step 5 (stack, copy-zero), then a width growth
        return [paper_stage(5, n_layer=8, rewarmup_ratio=2.0, rewarmup_steps=3),
                paper_stage(10, n_embd=48, rewarmup_ratio=1.5, rewarmup_steps=2)]
    # a depth map at 40% of the run: ceil(0.4 * 16) = step 7, 2 -> 6 blocks, copies of block 0 then of block 1
    return [paper_stage(at_fraction=0.4, depth_map=(0, 0, 0, 1, 1, 1), depth_init="copy", rewarmup_ratio=2.0,
                        rewarmup_steps=3)]


@pytest.mark.slow
@pytest.mark.parametrize("accumulate", [1, 2])
@pytest.mark.parametrize("kind, steps", [("4x", (3, 5, 8, 12)), ("map-at-fraction", (4, 7, 11))])
def test_resume_bit_exact_before_at_and_after_the_growth(tmp_path: Path, kind, steps, accumulate):
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=1, save_top_k=-1, filename="{step}")
    reference = TinyModule(max_steps=MAX_STEPS, accumulate=accumulate)
    growth = WidthGrowthCallback(_operating_points(kind))
    make_trainer([growth, ckpt], max_steps=MAX_STEPS, accumulate=accumulate, enable_checkpointing=True
                 ).fit(reference)
    assert [s["global_step"] for s in growth.summaries] == [s.at_step for s in growth.stages]
    assert reference.model.config.n_layer == (8 if kind == "4x" else 6)
    expected = {n: t.detach().clone() for n, t in reference.model.state_dict().items()}
    for step in steps:
        resumed = TinyModule(max_steps=MAX_STEPS, accumulate=accumulate)
        make_trainer([WidthGrowthCallback(_operating_points(kind))], max_steps=MAX_STEPS, accumulate=accumulate
                     ).fit(resumed, ckpt_path=str(tmp_path / f"step={step}.ckpt"))
        assert_states_equal(resumed.model.state_dict(), expected, f"{kind}: resume from step {step}")


@pytest.mark.slow
def test_resuming_an_at_fraction_growth_under_another_max_steps_is_refused(tmp_path: Path):
    ckpt = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=9, save_top_k=-1, filename="{step}")
    make_trainer([WidthGrowthCallback(_operating_points("map-at-fraction")), ckpt], max_steps=MAX_STEPS,
                 enable_checkpointing=True).fit(TinyModule(max_steps=MAX_STEPS))
    from lightning_sparkling.growth.plan import GrowthError as Error

    with pytest.raises(Error, match="grown by different stages.*resume with the max_steps the run was started with"):
        # 0.4 of 30 is step 12, the checkpoint grew at 7
        make_trainer([WidthGrowthCallback(_operating_points("map-at-fraction"))], max_steps=30).fit(
            TinyModule(max_steps=30), ckpt_path=str(tmp_path / "step=9.ckpt"))


# ----------------------------------------------------------------------------------------------- 2 CPU ranks
SCRIPT = Path(__file__).resolve().parents[1] / "depth4x_dist_script.py"
singles, multi = backend_fixtures(SCRIPT, [("ddp", 2, ("full8",)), ("fsdp2", 1, ("sharded8",))])


@pytest.mark.slow
def test_4x_and_a_depth_map_at_a_fraction_match_one_process_on_2_ranks(multi, singles):
    mode, acc, out, resumes = multi
    single = singles[acc]
    ranks = final_states(out, f"{mode}-acc{acc}")
    assert single["grown_at"] == ranks[0]["grown_at"] == [5, 11]  # at_fraction 0.6 of 18: step 11
    assert ranks[0]["n_layer"] == single["n_layer"] == 10
    state = ranks[0]["state"]
    assert state.keys() == single["state"].keys()
    for name in state:
        assert torch.equal(state[name], ranks[1]["state"][name]), name
    assert ranks[0]["layout"] == single["layout"]
    assert rel_diff(state, single["state"]) < 1e-4
    for kind in resumes:
        resumed = final_states(out, f"{mode}-acc{acc}", f"-{kind}")
        assert rel_diff(resumed[0]["state"], state) < 1e-12, f"{mode} resumed from {kind}"
