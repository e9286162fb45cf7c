"""Issue 38: every measured cell knows the size it was measured at, and the advice states how far a run is from it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from lightning_sparkling import GrowthStage
from lightning_sparkling.pretrain.advice.measured import FAR_SIZE, MeasuredCell, advise, load_map, nearest, size_trend

ROOT = Path(__file__).resolve().parents[2]
STAGE = GrowthStage(500, n_embd=64, intermediate_size=256)


def cell(**kw) -> MeasuredCell:
    base = dict(category="joint", recipe="recommended", schedule="cosine", growth_at=0.5, tokens_per_param=2.8,
                delta=-0.05, sd=0.01, seeds=3, seeds_above=0, where="test", speedup=1.2, speedup_sd=0.05,
                params=600_000, active_params=600_000, embedding_share=0.2, device="cpu", precision="32-true",
                corpus="stdlib")
    return MeasuredCell(**{**base, **kw})


def test_every_stored_cell_has_a_size_a_device_a_precision_and_a_corpus():
    for c in load_map():
        assert c.params and 0 < c.active_params <= c.params, c
        assert 0 < c.embedding_share < 1, c
        assert c.device and c.precision and c.corpus, c
    # the experts cells count their top-K experts only
    assert any(c.active_params < c.params for c in load_map() if c.category in ("upcycle", "experts"))


def test_the_stored_sizes_are_the_ones_computed_from_the_runs_configs(capsys):
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import backfill_sizes
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    assert backfill_sizes.main(["--check"]) == 0, capsys.readouterr().out


def test_the_nearest_cell_weighs_log_parameters():
    small = cell(params=100_000, tokens_per_param=2.8)
    large = cell(params=10_000_000, tokens_per_param=3.5)  # farther in token ratio, 100x nearer in size
    assert nearest([small, large], category="joint", recipe="recommended", schedule="cosine", growth_at=0.5,
                   tokens_per_param=2.8, params=12_000_000)[0] is large
    # without the run's size, the token ratio decides alone (as before sizes were recorded)
    assert nearest([small, large], category="joint", recipe="recommended", schedule="cosine", growth_at=0.5,
                   tokens_per_param=2.8)[0] is small


@pytest.mark.parametrize("run_params, far", [(590_912 * 9, False), (590_912 * 11, True), (110_221_824, True),
                                             (590_912 // 11, True)])
def test_beyond_ten_times_the_size_growth_never_paid_there_alone(run_params, far):
    measured = cell(params=590_912)
    advice = advise([STAGE], total_steps=1000, tokens_per_param=2.8, recipe="recommended", cells=[measured],
                    params=run_params)
    assert advice.near and advice.far_in_size is far and advice.pays is not far
    message = advice.message()
    assert "measured at 0.59M parameters" in message
    if far:
        assert "growth paid there" not in message and "sparkling measure --config" in message
        assert "too far to say whether growth pays at this size" in message
    else:
        assert message.endswith("growth paid there") and "9x smaller than this run's 5.32M" in message
    assert FAR_SIZE == 10


def test_the_gap_is_named_in_both_directions():
    advice = advise([STAGE], total_steps=1000, tokens_per_param=2.8, recipe="recommended",
                    cells=[cell(params=110_221_824)], params=590_912)
    assert "187x larger than this run's 0.59M" in advice.message()


def test_the_size_trend_lists_the_axis_speedups_smallest_model_first():
    cells = [cell(params=1_311_872, speedup=1.05), cell(params=123_168, speedup=1.16),
             cell(params=361_024, speedup=1.23), cell(params=361_024, speedup=1.10, recipe="paper"),
             cell(category="depth", params=50_000, speedup=0.9)]
    trend = size_trend(cells, category="joint", schedule="cosine")
    assert trend == ("1.16x at 0.12M (2.8 tokens/param), 1.23x at 0.36M (2.8 tokens/param), "
                     "1.05x at 1.31M (2.8 tokens/param)")
    assert size_trend(cells, category="depth", schedule="cosine") is None  # one size is no trend
    advice = advise([STAGE], total_steps=1000, tokens_per_param=2.8, recipe="recommended", cells=cells,
                    params=110_000_000)
    assert f"The size trend of this growth category: {trend}." in advice.message()


def test_plan_on_the_pythia_example_states_the_size_gap():
    from lightning_sparkling.pretrain.cli import parse
    from lightning_sparkling.pretrain.advice.planning import plan

    _, run, _ = parse(["--config", str(ROOT / "examples" / "pythia_70m_to_160m.yaml")], "plan")
    report = plan(run, print_report=False)
    warning = report["regime_warning"]
    assert warning is not None and "x smaller than this run's 110M" in warning
    assert "growth paid there" not in warning and "sparkling measure --config" in warning
    assert "No size trend was measured in this growth category" in warning  # depth+width: one size measured


def test_a_bad_size_is_refused_naming_the_cell_and_the_value():
    with pytest.raises(ValueError, match=r"joint/recommended/cosine@50%/2.8: params=0: must be a positive integer"):
        cell(params=0)
