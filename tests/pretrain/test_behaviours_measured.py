"""Behaviours of the measured map that no other test pinned (issue 31's mutation audit): the nearest cell is chosen by
token ratio first, then timing; a cell 0.2 of the run away is not near; a Δ of exactly 0 counts as paying and is
never named "better"; ``n_embd`` + ``moe_intermediate_size`` is the ``joint`` category; a multi-stage run is timed by
its first stage; a non-positive token ratio was never measured; and every field of every stored cell is the one
docs/BENCHMARKS.md publishes, under a section its ``where`` names."""

from __future__ import annotations

from pathlib import Path

import pytest

from lightning_sparkling import GrowthStage
from lightning_sparkling.pretrain.advice.measured import MeasuredCell, advise, classify_category, load_map, nearest
from lightning_sparkling.pretrain.advice.measured_size import format_params

BENCHMARKS = Path(__file__).resolve().parents[2] / "docs" / "BENCHMARKS.md"
RESULTS = BENCHMARKS.parents[1] / "benchmarks" / "results"
INDEX_HEADING = "## The measured map, cell by cell"


def cell(**kw) -> MeasuredCell:
    base = dict(category="joint", recipe="recommended", schedule="cosine", growth_at=0.5, tokens_per_param=2.8,
                delta=-0.02, sd=0.01, seeds=3, seeds_above=0, where="test")
    return MeasuredCell(**{**base, **kw})


WHERE = dict(category="joint", recipe="recommended", schedule="cosine")


# ------------------------------------------------------------------------------------------------------------ nearest
def test_the_nearest_cell_is_the_closest_ratio_even_when_another_is_closer_in_timing():
    close_ratio = cell(tokens_per_param=2.8, growth_at=0.25)
    close_timing = cell(tokens_per_param=11.0, growth_at=0.5)
    best, near = nearest([close_timing, close_ratio], **WHERE, growth_at=0.5, tokens_per_param=3.0)
    assert best == close_ratio and not near  # 0.25 of the run away: named, but not near
    # at the same ratio, timing decides
    best, near = nearest([cell(growth_at=0.25), cell(growth_at=0.6)], **WHERE, growth_at=0.5, tokens_per_param=2.8)
    assert best.growth_at == 0.6 and near


@pytest.mark.parametrize("growth_at, near", [(0.5, True), (0.6, True), (0.65, True), (0.3, False), (0.7, False),
                                             (0.1, False)])
def test_a_cell_more_than_0_15_of_the_run_away_is_not_near(growth_at, near):
    assert nearest([cell(growth_at=0.5)], **WHERE, growth_at=growth_at, tokens_per_param=2.8)[1] is near
    stage = GrowthStage(int(growth_at * 1000), n_embd=64, intermediate_size=256)
    advice = advise([stage], total_steps=1000, tokens_per_param=2.8, recipe="recommended", cells=[cell()])
    assert advice.near is near and advice.pays is near
    assert ("nothing near this run" in advice.message()) is not near


def test_a_delta_of_exactly_zero_is_no_measurable_difference_and_is_never_named_better():
    """Issue 52: a tie is no saving. Δ 0 (or within its sd of zero with seeds on both sides) is "no measurable
    difference", never "paid"."""
    stage = GrowthStage(500, n_embd=64, intermediate_size=256)
    level = [cell(delta=0.0, sd=0.01, seeds_above=1)]
    advice = advise([stage], total_steps=1000, tokens_per_param=2.8, recipe="recommended", cells=level)
    assert not advice.pays and "growth paid" not in advice.message()
    assert advice.message().startswith("no measurable difference near this run")
    # another recipe at exactly 0, the run's own cell far above it: not named
    cells = [cell(delta=0.2, sd=0.01, seeds_above=3), cell(recipe="wsd", delta=0.0, sd=0.01, seeds_above=0)]
    advice = advise([stage], total_steps=1000, tokens_per_param=2.8, recipe="recommended", cells=cells)
    assert advice.better is None and "Measured better" not in advice.message()
    cells[1] = cell(recipe="wsd", delta=-0.001, sd=0.01, seeds_above=0)  # just below 0: named
    assert advise([stage], total_steps=1000, tokens_per_param=2.8, recipe="recommended", cells=cells).better == cells[1]


@pytest.mark.parametrize("sizes, category", [
    (dict(n_embd=64, moe_intermediate_size=32), "joint"),
    (dict(n_embd=64, intermediate_size=128, moe_intermediate_size=32), "joint"),
    (dict(n_embd=64, intermediate_size=128), "joint"),
    (dict(moe_intermediate_size=32), "inner"),
    (dict(intermediate_size=128, moe_intermediate_size=32), "inner"),
])
def test_n_embd_with_any_mlp_size_is_the_joint_category(sizes, category):
    assert classify_category([GrowthStage(10, **sizes)]) == category


def test_a_multi_stage_run_is_timed_by_every_stage_and_matched_with_cells_of_as_many_growths():
    """Issue 52: a schedule of two growths is matched with the cells that record two (their ``stages``), each growth
    near in timing; a one-growth cell is not its evidence."""
    stages = [GrowthStage(300, n_embd=48), GrowthStage(600, n_embd=64)]
    two = [{"at_fraction": 0.333, "factors": {"n_embd": 1.5}}, {"at_fraction": 0.667, "factors": {"n_embd": 1.3333}}]
    advice = advise(stages, total_steps=1000, tokens_per_param=2.8, recipe="recommended",
                    cells=[cell(category="two-stage", growth_at=0.333, stages=two)])
    assert advice.growth_at == 0.3 and advice.timings == (0.3, 0.6) and advice.near
    assert "first growth at 30%" in advice.message() and "growths at 33%, 67%" in advice.message()
    one = advise(stages, total_steps=1000, tokens_per_param=2.8, recipe="recommended",
                 cells=[cell(category="two-stage", growth_at=0.3)])
    assert one.cell is None
    late = [GrowthStage(300, n_embd=48), GrowthStage(900, n_embd=64)]  # the second growth 0.23 of the run away
    assert not advise(late, total_steps=1000, tokens_per_param=2.8, recipe="recommended",
                      cells=[cell(category="two-stage", growth_at=0.333, stages=two)]).near


@pytest.mark.parametrize("ratio", [0.0, -1.0])
def test_a_run_without_a_positive_token_ratio_was_never_measured(ratio):
    stage = GrowthStage(500, n_embd=64, intermediate_size=256)
    assert nearest(load_map(), **WHERE, growth_at=0.5, tokens_per_param=ratio) == (None, False)
    advice = advise([stage], total_steps=1000, tokens_per_param=ratio, recipe="recommended")
    assert advice.cell is None and not advice.pays and "nothing was measured" in advice.message()


# ------------------------------------------------------------------------------------------------------------ docs
def _published_cells(text: str) -> tuple[set[tuple], str]:
    """The cells of BENCHMARKS.md's index table (every field), and the text before it."""
    before, _, index = text.partition(INDEX_HEADING)
    assert index, f"docs/BENCHMARKS.md has no section {INDEX_HEADING!r}"
    index = index.split("\n## ", 1)[0]
    rows = [line for line in index.splitlines() if line.startswith("| ") and not line.startswith("| axis |")]
    cells = set()
    for row in rows:
        axis, recipe, schedule, growth_at, ratio, size, delta, above, where = (c.strip() for c in
                                                                                row.strip("|").split("|"))
        params, device = size.split(", ", 1)
        # an experts cell: "upcycle (expert_init copy)"; a depth cell of G_stack's full copy: "depth (depth_init copy)"
        axis, _, init = axis.replace(" (depth_init ", " (expert_init ").partition(" (expert_init ")
        mean, sd = delta.split(" ± ")
        seeds_above, seeds = above.split("/")
        cells.add((axis, init.rstrip(")") or None, recipe, schedule, round(float(growth_at.rstrip("%")) / 100, 6),
                   float(ratio), params, device, float(mean), float(sd), int(seeds), int(seeds_above), where))
    assert len(cells) == len(rows), "a row is listed twice"
    return cells, before


def test_every_field_of_every_stored_cell_is_published_in_benchmarks():
    text = BENCHMARKS.read_text(encoding="utf-8").replace("−", "-")
    published, before = _published_cells(text)
    stored = {(c.category, c.init, c.recipe, c.schedule, round(c.growth_at, 6), c.tokens_per_param,
               format_params(c.params), c.device, c.delta, c.sd, c.seeds, c.seeds_above, c.where) for c in load_map()}
    assert len(stored) == len(load_map())
    assert stored - published == set(), "stored in measured.json, not (or otherwise) in docs/BENCHMARKS.md's index"
    assert published - stored == set(), "in docs/BENCHMARKS.md's index, not (or otherwise) in measured.json"
    # and each cell's Δ ± sd and seed count are those of a row (or sentence) of the study that measured it: its
    # table in BENCHMARKS or the study's run log under benchmarks/results/ (the full tables moved there)
    lines = before.splitlines()
    for log in sorted(RESULTS.glob("*_log.md")):
        lines += log.read_text(encoding="utf-8").replace("−", "-").splitlines()
    headings = [line.lstrip("#").strip() for line in before.splitlines() if line.startswith("##")]
    for c in load_map():
        section = c.where.split(" (")[0]
        assert any(h.startswith(section) for h in headings), f"{c.where!r}: no such section in docs/BENCHMARKS.md"
        delta = f"{c.delta:+.3f} ± {c.sd:.3f}"
        hits = [line for line in lines if delta in line or delta.lstrip("+") in line]
        assert any(f"{c.seeds_above}/{c.seeds}" in line for line in hits), (c, hits)
