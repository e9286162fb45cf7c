"""The measured map (lightning_sparkling/pretrain/advice/measured.json) and the advice a run gets from it."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest

import lightning_sparkling.pretrain.advice.measured as measured_module
from lightning_sparkling import GrowthStage
from lightning_sparkling.pretrain.advice.measured import (DEMO_TOKENS_PER_PARAM, MAP_PATH, NEAR_RATIO, MeasuredCell,
                                                          advise, classify_category, load_map, nearest)

BENCHMARKS = Path(__file__).resolve().parents[2] / "docs" / "BENCHMARKS.md"


def cell(**kw) -> MeasuredCell:
    base = dict(category="joint", recipe="recommended", schedule="cosine", growth_at=0.5, tokens_per_param=2.8,
                delta=-0.02, sd=0.01, seeds=3, seeds_above=0, where="test")
    return MeasuredCell(**{**base, **kw})


def test_docstring_examples_hold():
    result = doctest.testmod(measured_module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0, result


def published(c: MeasuredCell, text: str) -> bool:
    """Whether docs/BENCHMARKS.md's ``text`` shows the cell's Δ (``-0.067 ± 0.010``) and, when the cell has one, its
    speed-up at equal loss (``1.35x ± 0.08``)."""
    text = text.replace("−", "-").replace("+", "")
    found = f"{c.delta:+.3f} ± {c.sd:.3f}".replace("+", "") in text
    if c.speedup is not None:
        found = found and f"{c.speedup:.2f}x ± {c.speedup_sd:.2f}" in text
    return found


def test_every_stored_cell_is_published_in_benchmarks_with_its_seeds():
    text = BENCHMARKS.read_text(encoding="utf-8")
    cells = load_map()
    assert len(cells) >= 20
    for c in cells:
        assert 0 <= c.seeds_above <= c.seeds and c.seeds >= 2 and 0 < c.growth_at < 1 and c.tokens_per_param > 0
        assert published(c, text), c
    keys = {(c.category, c.recipe, c.schedule, c.growth_at, c.tokens_per_param, c.init, c.params) for c in cells}
    assert len(keys) == len(cells)  # one cell per setting and size
    assert json.loads(MAP_PATH.read_text())["about"]


@pytest.mark.parametrize("stages,expected", [
    ([GrowthStage(5, n_embd=64, intermediate_size=256)], "joint"),
    ([GrowthStage(5, n_embd=64)], "hidden"),
    ([GrowthStage(5, intermediate_size=256)], "inner"),
    ([GrowthStage(5, n_layer=8)], "depth"),
    ([GrowthStage(5, n_layer=8, n_embd=64, intermediate_size=256)], "depth+width"),
    ([GrowthStage(5, n_embd=64, n_head=8)], "hidden+heads"),
    ([GrowthStage(5, n_embd=48), GrowthStage(9, n_embd=64)], "two-stage"),
    ([GrowthStage(5, n_layer=8), GrowthStage(9, n_embd=64)], "several stages"),
])
def test_classify_axis(stages, expected):
    assert classify_category(stages) == expected


def test_a_named_target_is_classified_by_the_sizes_it_changes():
    stage = GrowthStage(5, model_name="pythia-31m")
    assert classify_category([stage], sizes=[["n_embd", "intermediate_size", "n_head", "n_query_groups"]]) == \
        "width+heads"
    assert classify_category([stage], sizes=[["n_embd", "n_head", "n_query_groups"]]) == "hidden+heads"


def test_nearest_picks_the_closest_ratio_then_timing_and_says_when_it_is_too_far():
    cells = [cell(tokens_per_param=2.8), cell(tokens_per_param=11.0, delta=0.01), cell(tokens_per_param=2.8,
                                                                                        growth_at=0.25),
             cell(recipe="paper", tokens_per_param=4.0), cell(schedule="wsd", tokens_per_param=4.0)]
    best, near = nearest(cells, category="joint", recipe="recommended", schedule="cosine", growth_at=0.3,
                         tokens_per_param=3.0)
    assert (best.tokens_per_param, best.growth_at, near) == (2.8, 0.25, True)
    best, near = nearest(cells, category="joint", recipe="recommended", schedule="cosine", growth_at=0.5,
                         tokens_per_param=8.0)
    assert (best.tokens_per_param, near) == (11.0, True)
    # the factor NEAR_RATIO is the edge: just inside is near, just outside is not
    assert nearest(cells, category="joint", recipe="recommended", schedule="cosine", growth_at=0.5,
                   tokens_per_param=11.0 * NEAR_RATIO * 0.999)[1]
    assert not nearest(cells, category="joint", recipe="recommended", schedule="cosine", growth_at=0.5,
                       tokens_per_param=11.0 * NEAR_RATIO * 1.001)[1]
    # timing too far: the closest cell is named but not near
    best, near = nearest(cells, category="joint", recipe="recommended", schedule="cosine", growth_at=0.9,
                         tokens_per_param=2.8)
    assert best.growth_at == 0.5 and not near
    assert nearest(cells, category="depth", recipe="recommended", schedule="cosine", growth_at=0.5,
                   tokens_per_param=2.8) == (None, False)


@pytest.mark.parametrize("ratio,recipe,pays,says", [
    (2.8, "recommended", True, "Δ -0.020 ± 0.018"),
    (2.8, "paper", False, "Δ +0.076 ± 0.021"),
    (13.0, "recommended", False, "11.3 tokens per parameter: speed-up at equal loss 0.99x ± 0.05 (3 seeds), Δ +0.006"),
    (17.0, "recommended", False, "above scratch in 2/3 seeds"),
    (17.0, "random-zero", False, "Δ +0.050 ± 0.005"),
    (100.0, "recommended", False, "nothing near this run"),
    (1.0, "recommended", False, "nothing near this run"),
])
def test_advice_on_the_joint_axis_reads_the_stored_map(ratio, recipe, pays, says):
    stage = GrowthStage.from_recipe(recipe, 500, n_embd=64, intermediate_size=256)
    advice = advise([stage], total_steps=1000, tokens_per_param=ratio, recipe=recipe)
    assert advice.pays is pays and says in advice.message()


def test_advice_for_an_unmeasured_schedule_or_axis_says_nothing_was_measured():
    stage = GrowthStage(500, n_embd=64, intermediate_size=256)
    cosine_only = [c for c in load_map() if c.schedule == "cosine"]
    wsd = advise([stage], total_steps=1000, tokens_per_param=2.8, recipe="recommended", schedule="wsd",
                 cells=cosine_only)
    assert wsd.cell is None and not wsd.pays and "nothing was measured" in wsd.message()
    assert "wsd schedule" in wsd.message()
    # the stored map: recommended paid at 2.8 under cosine and did not under WSD (the schedule is part of the key)
    measured = advise([stage], total_steps=1000, tokens_per_param=2.8, recipe="recommended", schedule="wsd")
    assert not measured.pays and "Δ +0.053 ± 0.007" in measured.message()
    assert advise([stage], total_steps=1000, tokens_per_param=2.8, recipe="recommended").pays
    rand = advise([GrowthStage(600, n_embd=64, intermediate_size=256)], total_steps=1000, tokens_per_param=2.8,
                  recipe="recommended", schedule="wsd")
    assert rand.cell.growth_at == 0.5  # 60%: nearest timing among the WSD cells (50%, 25%)
    depth = advise([GrowthStage(250, n_layer=8)], total_steps=1000, tokens_per_param=5.0, recipe="paper")
    assert depth.pays and depth.cell.category == "depth" and "growth paid there" in depth.message()


def test_the_advice_follows_the_stored_data(tmp_path):
    stage = GrowthStage(500, n_embd=64, intermediate_size=256)
    flipped = [cell(delta=0.05, seeds_above=3)]
    advice = advise([stage], total_steps=1000, tokens_per_param=2.8, recipe="recommended", cells=flipped)
    assert not advice.pays and advice.message().startswith("growth cost near this run")
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"about": "x", "cells": [vars(cell(tokens_per_param=7.0))]}))
    assert load_map(path)[0].tokens_per_param == 7.0


def test_advice_names_a_recipe_measured_better_near_the_run():
    """Under WSD at 2.8 the default recipe ended above scratch and the ``wsd`` recipe below it: the advice for a
    ``recommended`` run names ``growth.recipe wsd`` with its Δ; a recipe is not named when it is not near the run,
    did not pay in most seeds, or ended above the run's own cell."""
    stage = GrowthStage(500, n_embd=64, intermediate_size=256)
    advice = advise([stage], total_steps=1000, tokens_per_param=2.8, recipe="recommended", schedule="wsd")
    assert advice.better is not None and advice.better.recipe == "wsd" and advice.better.delta == -0.089
    assert "Measured better near this run: growth.recipe wsd" in advice.message()
    assert "Δ -0.089 ± 0.011" in advice.message()
    # the run's own recipe is never its own "better"; nor is a cell above the run's own
    own = advise([stage], total_steps=1000, tokens_per_param=2.8, recipe="wsd", schedule="wsd")
    assert own.pays and own.better is None and "Measured better" not in own.message()
    cells = [cell(schedule="wsd", delta=-0.05), cell(schedule="wsd", recipe="wsd", delta=-0.04),
             cell(schedule="wsd", recipe="paper", delta=-0.09, seeds_above=2),        # paid in 1 seed of 3
             cell(schedule="wsd", recipe="random-zero", delta=-0.2, tokens_per_param=11.0)]  # too far
    assert advise([stage], total_steps=1000, tokens_per_param=2.8, recipe="recommended", schedule="wsd",
                  cells=cells).better is None
    # better by less than the seeds' spread (0.01 here): not named
    close = [cell(schedule="wsd", delta=-0.05, sd=0.01), cell(schedule="wsd", recipe="wsd", delta=-0.059, sd=0.005)]
    assert advise([stage], total_steps=1000, tokens_per_param=2.8, recipe="recommended", schedule="wsd",
                  cells=close).better is None
    close[1] = cell(schedule="wsd", recipe="wsd", delta=-0.061, sd=0.005)
    assert advise([stage], total_steps=1000, tokens_per_param=2.8, recipe="recommended", schedule="wsd",
                  cells=close).better.recipe == "wsd"
    # the stored map under cosine at 2.8: wsd (-0.025) is within the spread of recommended (-0.020); the
    # random-zero recipe (-0.071) is not, and random-zero-3x (-0.088, the cosine default) ended lowest
    cosine = advise([stage], total_steps=1000, tokens_per_param=2.8, recipe="recommended")
    assert cosine.better.recipe == "random-zero-3x" and cosine.better.delta == -0.088
    assert "speed-up at equal loss 1.23x ± 0.05" in cosine.message()
    # the run's own cell (paper, -0.09) is lower than every other: nothing better
    assert advise([stage], total_steps=1000, tokens_per_param=2.8, recipe="paper", schedule="wsd",
                  cells=cells).better is None
    # the run's own cell too far (random-zero at 11): the lowest Δ that paid, of another recipe
    far = advise([stage], total_steps=1000, tokens_per_param=2.8, recipe="random-zero", schedule="wsd", cells=cells)
    assert not far.near and far.better.recipe == "recommended" and "growth.recipe recommended" in far.message()


@pytest.mark.parametrize("recipe,keys,expected", [
    ("recommended", {"n_embd": 64, "intermediate_size": 256}, "recommended"),
    ("random-zero", {"n_embd": 64, "intermediate_size": 256}, "random-zero"),
    ("wsd", {"n_embd": 64, "intermediate_size": 256}, "wsd"),
    ("paper", {"n_embd": 64, "intermediate_size": 256}, "paper"),
    # a depth-only stage: the loop and the init pair do not apply, so recommended and wsd grow it as the paper does
    ("recommended", {"n_layer": 8}, "paper"),
    ("wsd", {"n_layer": 8}, "paper"),
    ("random-zero", {"n_layer": 8}, "random-zero"),  # its 10x re-warmup does apply to new blocks
])
def test_run_recipe_names_what_the_stages_do(recipe, keys, expected):
    from lightning_sparkling.pretrain.advice.planning import run_recipe

    assert run_recipe([GrowthStage.from_recipe(recipe, 500, **keys)]) == expected


# ------------------------------------------------------------------------------------------- speed-up at equal loss
def test_the_publication_check_reads_the_speedup_when_a_cell_has_one():
    with_speedup = cell(delta=-0.067, sd=0.010, speedup=1.35, speedup_sd=0.08)
    assert published(with_speedup, "| depth | −0.067 ± 0.010 | 1.35x ± 0.08 |")
    assert not published(with_speedup, "| depth | −0.067 ± 0.010 | 1.53x ± 0.08 |")  # another speed-up
    assert not published(with_speedup, "| depth | −0.067 ± 0.010 |")  # not published at all
    assert published(cell(delta=-0.067, sd=0.010), "| depth | −0.067 ± 0.010 |")  # a cell without one


def test_cells_with_and_without_a_speedup_load_and_the_advice_leads_with_it(tmp_path):
    path = tmp_path / "m.json"
    old = vars(cell(tokens_per_param=2.8))
    new = {**vars(cell(tokens_per_param=11.0, delta=-0.04)), "speedup": 1.35, "speedup_sd": 0.08}
    path.write_text(json.dumps({"about": "x", "cells": [
        {k: v for k, v in old.items() if not k.startswith("speedup")}, new]}))
    cells = load_map(path)
    assert (cells[0].speedup, cells[0].speedup_sd) == (None, None) and (cells[1].speedup, cells[1].speedup_sd) == (
        1.35, 0.08)
    stage = GrowthStage(500, n_embd=64, intermediate_size=256)
    message = advise([stage], total_steps=1000, tokens_per_param=11.0, recipe="recommended", cells=cells).message()
    assert "11 tokens per parameter: speed-up at equal loss 1.35x ± 0.08 (3 seeds), Δ -0.040 ± 0.010" in message
    message = advise([stage], total_steps=1000, tokens_per_param=2.8, recipe="recommended", cells=cells).message()
    assert "speed-up" not in message and "2.8 tokens per parameter: Δ -0.020" in message


@pytest.mark.parametrize("keys, message", [
    (dict(speedup=1.3), r"speedup=1.3, speedup_sd=None: give both"),
    (dict(speedup_sd=0.1), r"speedup=None, speedup_sd=0.1: give both"),
    (dict(speedup=0.0, speedup_sd=0.1), r"speedup=0.0: must be a finite number > 0"),
    (dict(speedup=float("inf"), speedup_sd=0.1), r"speedup=inf: must be a finite number > 0"),
    (dict(speedup=1.2, speedup_sd=-0.1), r"speedup_sd=-0.1: must be a finite number >= 0"),
    (dict(speedup="1.2", speedup_sd=0.1), r"speedup='1.2': must be a finite number"),
])
def test_a_bad_speedup_is_refused_naming_the_cell_and_the_value(keys, message):
    with pytest.raises(ValueError, match=r"measured cell joint/recommended/cosine@50%/2.8: " + message):
        cell(**keys)


def test_a_demo_length_run_is_told_so_in_one_line():
    """The quickstart (0.31 training tokens per parameter) is far below every measured setting: one line says it is a
    demo, whatever its recipe; at the map's smallest ratio the ordinary advice comes back."""
    stage = GrowthStage(120, n_embd=128, intermediate_size=512)
    demo = advise([stage], total_steps=300, tokens_per_param=0.31, recipe="random-zero-3x")
    assert demo.demo and not demo.pays and "\n" not in demo.message()
    assert demo.message().startswith("this run is a demo (0.31 training tokens per final active parameter")
    assert min(c.tokens_per_param for c in load_map()) >= DEMO_TOKENS_PER_PARAM
    real = advise([stage], total_steps=300, tokens_per_param=1.7, recipe="random-zero-3x")
    assert not real.demo and "demo" not in real.message()


_TIE = """
import dataclasses, sys
from lightning_sparkling.pretrain.advice.measured import MeasuredCell, better_recipe
base = MeasuredCell(category="joint", recipe="r", schedule="cosine", growth_at=0.5, tokens_per_param=2.8, delta=-0.1,
                    sd=0.01, seeds=3, seeds_above=0, where="test")
names = [f"tie-{i}" for i in range(8)]
cells = [dataclasses.replace(base, recipe=name) for name in names]
print(better_recipe(cells, category="joint", recipe="paper", schedule="cosine", growth_at=0.5, tokens_per_param=2.8,
                    than=None).recipe)
"""


def test_a_tie_between_recipes_is_named_the_same_under_every_hash_seed():
    """Eight recipes with the same Δ: the advice names one, and the same one whatever Python's string hash seed
    (it walked a set of names, whose order follows the seed)."""
    import os
    import subprocess
    import sys

    picked = set()
    for seed in ("0", "1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", _TIE], env=env, capture_output=True, text=True, check=True)
        picked.add(out.stdout.strip())
    assert picked == {"tie-0"}, picked
