"""``sparkling plot a b``: the heatmaps name the run they show and how to draw the other's; an empty panel's note
stays inside its axes (issue 40)."""

from __future__ import annotations

import pytest
from test_plotting import two_runs  # noqa: F401  (the fixture: runs "grown" and "baseline")

from lightning_sparkling.dashboards.plotting import PANEL_LABEL_PREFIX, dashboard_figure


def _axes(fig, panel):
    return next(ax for ax in fig.axes if ax.get_label() == PANEL_LABEL_PREFIX + panel)


@pytest.mark.parametrize("heatmap_run", [None, "baseline"])
def test_with_two_runs_the_heatmaps_name_their_run(two_runs, heatmap_run):  # noqa: F811
    _, dirs = two_runs
    fig = dashboard_figure(dirs, panels="loss,residual", heatmap_run=heatmap_run)
    title = _axes(fig, "residual").get_title()
    assert title.endswith(f"[{heatmap_run or 'grown'}] (1 of 2 runs; --heatmap-run NAME for another)"), title
    single = dashboard_figure(dirs[:1], panels="residual")
    assert "--heatmap-run" not in _axes(single, "residual").get_title()


def test_an_empty_panels_note_stays_inside_its_axes(two_runs):  # noqa: F811
    _, dirs = two_runs
    fig = dashboard_figure(dirs[1:], panels="loss,symmetry")  # the baseline copies nothing: no symmetry/*
    fig.canvas.draw()
    ax = _axes(fig, "symmetry")
    (note,) = [t for t in ax.texts if t.get_text().startswith("no symmetry/")]
    inside = ax.get_window_extent()
    box = note.get_window_extent()
    assert inside.x0 <= box.x0 and box.x1 <= inside.x1, (box, inside)
