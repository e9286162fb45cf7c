"""The advice words follow the statistics (issue 52): "paid" only where every seed ended below scratch or the mean
Δ is more than its sd below zero; "cost" the mirror image; anything else is "no measurable difference". The same
words in ``plan``, ``plan --suggest``, ``measure``'s summary, the README and BENCHMARKS' summary."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lightning_sparkling.pretrain.measure.command import describe
from lightning_sparkling.pretrain.advice.measured import load_map
from lightning_sparkling.pretrain.advice.verdict import COST, PAID, TIE, phrase, verdict

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("delta, sd, seeds, above, word", [
    (-0.084, 0.006, 3, 0, PAID),    # every seed below, beyond the sd
    (-0.015, 0.027, 3, 0, PAID),    # every seed below though the mean is within its sd
    (-0.05, 0.01, 3, 1, PAID),      # one seed above, the mean more than its sd below zero
    (-0.005, 0.026, 3, 1, TIE),     # the case: within its sd, seeds on both sides
    (-0.01, 0.01, 3, 1, TIE),       # exactly one sd below: not beyond it
    (0.0, 0.01, 3, 1, TIE),         # level
    (0.0, 0.0, 1, 0, TIE),          # one seed exactly level
    (0.005, 0.02, 3, 2, TIE),
    (0.02, 0.05, 3, 3, COST),       # every seed above though the mean is within its sd
    (0.05, 0.01, 3, 2, COST),       # two of three above, the mean more than its sd above zero
    (0.01, 0.0, 1, 1, COST),        # one seed, above
    (-0.01, 0.0, 1, 0, PAID),       # one seed, below
])
def test_the_verdict_of_a_paired_comparison(delta, sd, seeds, above, word):
    assert verdict(delta, sd, seeds, above) == word


def test_no_cell_of_the_map_is_called_paid_unless_its_seeds_say_so():
    for cell in load_map():
        paid = cell.delta < 0 and (cell.seeds_above == 0 or cell.delta < -cell.sd)
        assert cell.pays == (paid and (cell.start_delta is None or cell.verdict == PAID)), cell.key()


def test_measure_s_summary_says_the_verdict_in_the_same_words():
    cell = {"axis": "depth", "recipe": "paper", "schedule": "wsd", "growth_at": 0.5, "tokens_per_param": 20.0,
            "delta": -0.005, "sd": 0.026, "seeds": 3, "seeds_above": 1, "speedup": None, "speedup_sd": None,
            "params": 1000, "device": "cpu"}
    result = {"cells": [cell], "per_seed": {}, "growth_recipe": "paper"}
    assert f"(growth above scratch in 1/3 seeds): {phrase(TIE)}" in describe(result)
    assert "paid" not in describe(result)
    result["cells"][0].update(delta=-0.084, sd=0.006, seeds_above=0)
    assert describe(result).count(phrase(PAID)) == 1


def _readme_deltas(readme: str):
    """Each Δ of the README's tables with its seeds: ``(row, delta, sd, seeds, seeds_above, the words after)``. The
    first table gives the seeds where growth did better, ``(3/3)``; the others say ``(better k/n)`` or ``(worse
    k/n)``."""
    for row in re.findall(r"^\|.*\|$", readme, flags=re.M):
        for delta, sd, side, k, n, words in re.findall(
                r"([+-]\d\.\d+) ± (\d\.\d+) \((better |worse )?(\d)/(\d)(?: seeds)?:? ?([^)]*)\)", row):
            above = int(k) if side == "worse " else int(n) - int(k)
            yield row, float(delta), float(sd), int(n), above, words


def _summary_tables() -> str:
    """The README and docs/BENCHMARKS.md's "Where growth pays: the summary" (the README's tables of the map moved
    there), the tables written in the commands' words."""
    benchmarks = (ROOT / "docs" / "BENCHMARKS.md").read_text()
    summary = benchmarks.split("\n## Where growth pays: the summary\n", 1)[1].split("\n## ", 1)[0]
    return (ROOT / "README.md").read_text() + "\n" + summary


def test_the_readme_says_what_the_seeds_say():
    """Every Δ of the README's tables and of BENCHMARKS' summary with its seeds: a tie says "no measurable
    difference" and is never bold (bold marks a saving); "no measurable difference" is said of ties only."""
    readme = _summary_tables()
    assert len(list(_readme_deltas((ROOT / "README.md").read_text()))) >= 8
    rows = list(_readme_deltas(readme))
    assert len(rows) > 30
    ties = 0
    for row, delta, sd, seeds, above, words in rows:
        word = verdict(delta, sd, seeds, above)
        if word == TIE:
            ties += 1
            assert words == TIE and f"**{delta:+.3f}" not in row, row
        else:
            assert words != TIE, row
    assert ties >= 4
