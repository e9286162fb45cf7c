"""``GrowthStage`` validation: every refused setting raises a ``ValueError`` that names it."""

from __future__ import annotations

import dataclasses

import pytest

from lightning_sparkling import GrowthStage



def test_defaults_are_the_sparkling_recipe():
    stage = GrowthStage(10, n_embd=64)
    assert stage.init == "copy-copy"
    assert stage.rms_preserving is True
    assert stage.optimizer_state == "asymmetric"
    assert stage.rewarmup_ratio == 1.3
    assert stage.rewarmup_steps == 250
    assert stage.widths == {"n_embd": 64}
    assert (stage.fan_out_init, stage.fan_in_init) == ("copy", "copy")


def test_widths_in_axis_order_and_round_trip():
    stage = GrowthStage(0, moe_intermediate_size=32, n_embd=64, intermediate_size=128, init="random-zero",
                        rms_preserving=False, optimizer_state="copy", rewarmup_ratio=None, rewarmup_steps=0)
    assert list(stage.widths.items()) == [("n_embd", 64), ("intermediate_size", 128), ("moe_intermediate_size", 32)]
    assert (stage.fan_out_init, stage.fan_in_init) == ("random", "zero")
    assert GrowthStage(**stage.to_dict()) == stage


def test_stage_is_frozen():
    stage = GrowthStage(1, n_embd=64)
    with pytest.raises(dataclasses.FrozenInstanceError):
        stage.n_embd = 128


@pytest.mark.parametrize("init", ["copy-copy", "copy-random", "copy-zero", "random-copy", "random-random",
                                  "random-zero", "zero-copy", "zero-random"])
def test_every_init_pair_but_zero_zero_is_accepted(init):
    assert GrowthStage(0, n_embd=64, init=init).init == init


@pytest.mark.parametrize("state", ["asymmetric", "copy", "drop", "asymmetric-scaled"])
def test_every_optimizer_state_is_accepted(state):
    assert GrowthStage(0, n_embd=64, optimizer_state=state).optimizer_state == state


@pytest.mark.parametrize(
    "kwargs,setting",
    [
        (dict(at_step=-1, n_embd=64), "at_step"),
        (dict(at_step=-100, intermediate_size=64), "at_step"),
        (dict(at_step=1.5, n_embd=64), "at_step"),
        (dict(at_step="10", n_embd=64), "at_step"),
        (dict(at_step=True, n_embd=64), "at_step"),
        (dict(at_step=10), "n_embd"),  # no size: the message lists the sizes it could have been
        (dict(at_step=10), "moe_intermediate_size"),
        (dict(at_step=10, n_embd=0), "n_embd"),
        (dict(at_step=10, n_embd=-64), "n_embd"),
        (dict(at_step=10, intermediate_size=0), "intermediate_size"),
        (dict(at_step=10, intermediate_size=-1), "intermediate_size"),
        (dict(at_step=10, moe_intermediate_size=0), "moe_intermediate_size"),
        (dict(at_step=10, moe_intermediate_size=-32), "moe_intermediate_size"),
        (dict(at_step=10, n_embd=True), "n_embd"),
        (dict(at_step=10, intermediate_size=False), "intermediate_size"),
        (dict(at_step=10, moe_intermediate_size=True), "moe_intermediate_size"),
        (dict(at_step=10, n_embd=64.0), "n_embd"),
        (dict(at_step=10, n_embd=64, intermediate_size=-5), "intermediate_size"),
        (dict(at_step=10, n_embd=64, init="copy"), "init"),
        (dict(at_step=10, n_embd=64, init="ones-copy"), "init"),
        (dict(at_step=10, n_embd=64, init="copy-copy-copy"), "init"),
        (dict(at_step=10, n_embd=64, init="net2net"), "init"),
        (dict(at_step=10, n_embd=64, init="zero-zero"), "init"),
        (dict(at_step=10, n_embd=64, optimizer_state="symmetric"), "optimizer_state"),
        (dict(at_step=10, n_embd=64, optimizer_state="reset"), "optimizer_state"),
        (dict(at_step=10, n_embd=64, optimizer_state=None), "optimizer_state"),
        (dict(at_step=10, n_embd=64, rewarmup_ratio=0), "rewarmup_ratio"),
        (dict(at_step=10, n_embd=64, rewarmup_ratio=0.0), "rewarmup_ratio"),
        (dict(at_step=10, n_embd=64, rewarmup_ratio=-1.3), "rewarmup_ratio"),
        (dict(at_step=10, n_embd=64, rewarmup_ratio=True), "rewarmup_ratio"),
        (dict(at_step=10, n_embd=64, rewarmup_ratio="1.3"), "rewarmup_ratio"),
        (dict(at_step=10, n_embd=64, rewarmup_ratio=float("nan")), "rewarmup_ratio"),
        (dict(at_step=10, n_embd=64, rewarmup_steps=-1), "rewarmup_steps"),
        (dict(at_step=10, n_embd=64, rewarmup_steps=2.5), "rewarmup_steps"),
        (dict(at_step=10, n_embd=64, rewarmup_steps=True), "rewarmup_steps"),
        (dict(at_step=10, n_embd=64, rms_preserving="yes"), "rms_preserving"),
    ],
)
def test_refused_settings_name_the_setting(kwargs, setting):
    with pytest.raises(ValueError, match=setting):
        GrowthStage(**kwargs)


def test_zero_zero_message_explains_why():
    with pytest.raises(ValueError, match="zero-zero") as info:
        GrowthStage(3, intermediate_size=128, init="zero-zero")
    assert "gradient" in str(info.value)


def test_rewarmup_can_be_turned_off_and_zero_steps_allowed():
    stage = GrowthStage(0, n_embd=64, rewarmup_ratio=None, rewarmup_steps=0)
    assert stage.rewarmup_ratio is None and stage.rewarmup_steps == 0
    assert GrowthStage(0, n_embd=64, rewarmup_ratio=0.5).rewarmup_ratio == 0.5  # a lower peak is allowed


def test_rewarmup_must_finish_before_max_steps():
    from lightning_sparkling.growth.stage import check_rewarmup_fits, rewarmup_window

    fits = GrowthStage(100, n_embd=128, rewarmup_steps=199)  # warm-up ends at 299: one cosine step to min_lr
    check_rewarmup_fits([fits], 300)
    assert rewarmup_window(fits, 300) == (299, 1, 200)
    check_rewarmup_fits([GrowthStage(100, n_embd=128, rewarmup_ratio=None)], 120)  # no re-warmup: nothing to fit
    with pytest.raises(ValueError, match=r"growth.stages\[1\]: rewarmup_steps=200 does not fit in the 200 steps left "
                                         r"after the growth \(at_step=100, max_steps=300\).*at most 199 \(e.g. 20"):
        check_rewarmup_fits([GrowthStage(50, n_embd=128, rewarmup_steps=10),
                             GrowthStage(100, intermediate_size=512, rewarmup_steps=200)], 300,
                            names=["growth.stages[0]", "growth.stages[1]"])
    with pytest.raises(ValueError, match=r"GrowthStage\(at_step=100\): rewarmup_steps=250"):
        check_rewarmup_fits(GrowthStage(100, n_embd=128), 300)
    # one step left: only no ramp fits, and the message suggests nothing else
    with pytest.raises(ValueError, match=r"1 steps left .* Set rewarmup_steps to at most 0, grow earlier") as info:
        check_rewarmup_fits(GrowthStage(1, n_embd=128, rewarmup_steps=1), 2)
    assert "e.g." not in str(info.value)
