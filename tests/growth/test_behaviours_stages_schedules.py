"""Behaviours of stages, recipes and LR schedules that no other test pinned (issue 31's mutation audit): the
``recommended`` loop on width stages whose fan-in side alone is copied; a copied-block stage with its own
``symmetry_target``; a named target with explicit sizes; ``decay_end`` of a growth at the last step; the WSD decay
start under float rounding; a WSD growth inside the decay phase; a WSD re-warmup of length 0."""

from __future__ import annotations

import pytest

from lightning_sparkling import GrowthStage
from lightning_sparkling.growth.schedules import rewarmup_wsd_lr, wsd_decay_start, wsd_lr
from lightning_sparkling.growth.stage import apply_recipe, decay_end


# ------------------------------------------------------------------------------------------------------------ recipes
@pytest.mark.parametrize("init", ["random-copy", "zero-copy", "copy-random", "copy-zero"])
def test_recommended_gives_its_loop_to_a_width_stage_with_one_copied_side(init):
    """The copies the loop unlocks exist whenever one side of the init pair is copied, fan-in side included."""
    keys = apply_recipe("recommended", {"n_embd": 64, "init": init})
    assert keys == {"n_embd": 64, "init": init, "symmetry_target": 0.5, "symmetry_max_boost": 8.0,
                    "symmetry_release": "hold"}
    stage = GrowthStage.from_recipe("recommended", 10, n_embd=64, init=init)
    assert stage.symmetry_target == 0.5 and stage.copies


@pytest.mark.parametrize("depth_init", ["copy-zero", "copy"])
def test_a_copied_block_stage_accepts_its_own_symmetry_target(depth_init):
    stage = GrowthStage(10, n_layer=4, depth_init=depth_init, symmetry_target=0.5)
    assert stage.copies and stage.symmetry_target == 0.5
    with pytest.raises(ValueError, match="depth_init='random-zero' copies nothing"):
        GrowthStage(10, n_layer=4, depth_init="random-zero", symmetry_target=0.5)


@pytest.mark.parametrize("target", [dict(model_config={"n_embd": 64}), dict(model_name="pythia-31m")])
@pytest.mark.parametrize("sizes", [dict(n_embd=64), dict(n_layer=4), dict(intermediate_size=128, n_head=8)])
def test_a_named_target_with_explicit_sizes_is_refused(target, sizes):
    with pytest.raises(ValueError, match=rf"model_name/model_config with {', '.join(sizes)}\): the target config "
                                         "sets every size"):
        GrowthStage(10, **target, **sizes)
    assert GrowthStage(10, **target).sizes == {}


@pytest.mark.parametrize("at_step, max_steps, expected", [(100, 100, 100), (100, 90, 90), (100, 101, 101),
                                                          (100, 300, 200)])
def test_decay_end_of_a_growth_at_or_after_the_last_step_is_max_steps(at_step, max_steps, expected):
    stage = GrowthStage(at_step, n_embd=64, decay_speedup=0.5)
    assert decay_end(stage, max_steps) == expected
    assert decay_end(GrowthStage(0, n_embd=64, decay_speedup=0.5), 100, growth_step=100) == 100


# ------------------------------------------------------------------------------------------------------------ WSD
@pytest.mark.parametrize("total, fraction, start", [
    (100, 0.07, 93),    # 0.07 * 100 = 7.000000000000001: 7 decay steps, not 8
    (100, 0.29, 71),    # 28.999999999999996: 29 (a ceiling, not a floor)
    (300, 0.2, 240),
    (1000, 0.1, 900),
    (101, 0.07, 93),    # 7.07: 8 decay steps
])
def test_wsd_decay_start_rounds_the_product_before_the_ceiling(total, fraction, start):
    assert wsd_decay_start(warmup_steps=0, total_steps=total, decay_fraction=fraction) == start


LR, MIN = 1e-3, 1e-4


@pytest.mark.parametrize("shape", ["linear", "cosine"])
def test_a_wsd_growth_in_the_decay_phase_starts_at_the_lr_at_growth_and_follows_the_decay(shape):
    """Growth at step 90 of 100, decay from step 80: the new entries start at the LR at growth and, without a
    re-warmup (ratio 1), follow the baseline's remaining decay exactly; with ratio r, once re-warmed, ``r * LR at
    growth`` decayed as the baseline has decayed since the growth."""
    total, start, t_e = 100, 80, 90
    base = dict(warmup_steps=5, total_steps=total, lr_init=0.0, lr_max=LR, lr_min=MIN, decay_fraction=0.2,
                decay_shape=shape)
    at_growth = wsd_lr(t_e, **base)
    assert MIN < at_growth < LR  # inside the decay
    kw = dict(growth_step=t_e, lr_at_growth=at_growth, total_steps=total, min_lr=MIN, decay_start=start,
              decay_shape=shape)
    assert rewarmup_wsd_lr(t_e, ratio=1.5, warmup_steps=4, **kw) == at_growth
    for t in range(t_e, total + 1):
        assert rewarmup_wsd_lr(t, ratio=1.0, warmup_steps=0, **kw) == pytest.approx(wsd_lr(t, **base), rel=1e-12), t
    for t in range(t_e + 4, total):
        decayed = (wsd_lr(t, **base) - MIN) / (at_growth - MIN)  # the baseline's decay since the growth
        assert rewarmup_wsd_lr(t, ratio=1.5, warmup_steps=4, **kw) == pytest.approx(
            MIN + (1.5 * at_growth - MIN) * decayed, rel=1e-9), t


def test_a_wsd_rewarmup_of_zero_steps_is_at_its_peak_from_the_growth_step():
    kw = dict(growth_step=50, lr_at_growth=LR, ratio=1.5, warmup_steps=0, total_steps=100, min_lr=MIN,
              decay_start=80)
    assert rewarmup_wsd_lr(50, **kw) == 1.5 * LR
    assert rewarmup_wsd_lr(79, **kw) == 1.5 * LR
    assert rewarmup_wsd_lr(100, **kw) == MIN
