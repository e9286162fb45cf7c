"""The schedule's ceiling (issue 54): the speed-up a growth schedule reaches if the grown run matched scratch token for
token (scratch's FLOPs over the same steps / the growth run's, 6 N D per phase). Every cell of the map records its
ceiling and its block family; ``sparkling plan`` prints the ceiling at the cell's size and at the run's, the cell's
measured fraction of it, and a note when the run's block family differs from the cell's."""

from __future__ import annotations

import re

import sys
from pathlib import Path

import pytest

from lightning_sparkling.pretrain.cli import main, parse
from lightning_sparkling.pretrain.advice.measured import MeasuredCell, load_map
from lightning_sparkling.pretrain.advice.measured_axes import block_family
from lightning_sparkling.pretrain.advice.planning import plan

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_suggest import Q8, Q8S, _wsd, _wsd20
from test_cli import write_config

README_PROGRESSIVE = {"progressive": {"n_layer": [2, 4, 8], "at_fraction": [0.5, 0.75], "depth_init": "copy"}}
NEOX = {"mlp_class_name": "GptNeoxMLP", "norm_class_name": "LayerNorm", "bias": True, "parallel_residual": True,
        "rotary_percentage": 0.25}


def _plan(tmp_path: Path, model: dict, growth: dict) -> dict:
    config = {**_wsd(tmp_path, model), "growth": growth}
    _, run, _ = parse(["--config", str(write_config(tmp_path / "run.yaml", config))], "plan")
    return plan(run, print_report=False)


def test_every_cell_records_its_ceiling_and_block_family():
    for cell in load_map():
        assert cell.arch is not None and cell.ceiling is not None and cell.ceiling >= 1, cell.key()
        if cell.speedup is not None:
            assert cell.ceiling_fraction == pytest.approx(cell.speedup / cell.ceiling)


def test_the_ceiling_is_scratch_flops_over_the_same_steps_over_the_growth_runs(tmp_path):
    report = _plan(tmp_path, {**Q8, "n_layer": 2}, README_PROGRESSIVE)
    assert report["flops_from_scratch"] / report["flops"] == pytest.approx(1 / (1 - report["flops_saved"]))
    # 2 layers for half the run, 4 for a quarter, 8 for the last quarter, embeddings (50% of the 8-layer model) in each
    phases = [0.5, 0.25, 0.25]
    expected = report["active_params"][-1] / sum(f * p for f, p in zip(phases, report["active_params"]))
    assert f"{expected:.2f}x at this run's 1.05M" in report["regime_advice"]


def test_plan_prints_the_cell_s_ceiling_the_run_s_and_the_measured_fraction(tmp_path, capsys):
    """The README's progressive form at 20 tokens per parameter on a 0.39M model cites the 0.20M 20.8 cell, with both
    ceilings and the cell's measured fraction of its own."""
    (cell,) = [c for c in load_map() if c.stages and c.init == "copy" and c.params == 197_152]
    config = {**_wsd20(tmp_path, {**Q8S, "n_layer": 2}), "growth": README_PROGRESSIVE}
    _, run, _ = parse(["--config", str(write_config(tmp_path / "run.yaml", config))], "plan")
    report = plan(run, print_report=False)
    advice = report["regime_advice"]
    assert "growth paid there" in advice and "Depth at 20+ tokens per parameter (2 -> 4 -> 8, copy)" in advice
    phases = [0.5, 0.25, 0.25]  # the run's own ceiling, from its phases' active parameters
    own = report["active_params"][-1] / sum(f * p for f, p in zip(phases, report["active_params"]))
    assert (f"this schedule's ceiling (its saving if the grown run matched scratch token for token, from the phases' "
            f"6 N D): {cell.ceiling:.2f}x at the cell's 0.20M, {own:.2f}x at this run's 0.39M; measured "
            f"{cell.speedup:.2f}x = {cell.ceiling_fraction:.0%} of its ceiling") in advice
    assert "note: the cell was measured on" not in advice  # both llama blocks


def test_a_cell_without_a_speed_up_prints_both_ceilings_and_no_fraction(tmp_path):
    """The 1.38M cell has no speed-up (seed 2 ended above scratch at equal FLOPs): plan of a 1.05M run cites it with
    both ceilings and claims no fraction of them."""
    (cell,) = [c for c in load_map() if c.params == 1_377_888 and c.category == "depth"]
    assert cell.speedup is None
    advice = _plan(tmp_path, {**Q8, "n_layer": 2}, README_PROGRESSIVE)["regime_advice"]
    assert cell.where in advice and "no measurable difference near this run" in advice, advice
    assert advice.endswith(f"{cell.ceiling:.2f}x at the cell's 1.38M, 1.33x at this run's 1.05M"), advice
    assert "of its ceiling" not in advice


def test_a_grown_run_that_beats_same_steps_scratch_is_said_to_exceed_the_ceiling():
    from lightning_sparkling.growth.stage import GrowthStage
    from lightning_sparkling.pretrain.advice.measured import advise

    cell = MeasuredCell(category="depth", recipe="paper", schedule="cosine", growth_at=0.25, tokens_per_param=5.0,
                        delta=-0.08, sd=0.01, seeds=3, seeds_above=0, where="w", speedup=1.2, speedup_sd=0.02,
                        ceiling=1.09, arch="llama")
    advice = advise([GrowthStage(250, n_layer=8)], total_steps=1000, tokens_per_param=5.0, recipe="paper",
                    cells=[cell], ceiling=1.1, arch="llama")
    assert "measured 1.20x = 110% of its ceiling (above it: the grown run ended below scratch trained on the same " \
           "steps)" in advice.message()


def test_plan_notes_a_block_family_other_than_the_cell_s(tmp_path, capsys):
    """A phi-style run (NeoX's block with one norm for both branches): no cell of its family, so the cited cell's
    family is named with a note; a NeoX run cites the NeoX cell of the same schedule, with no note."""
    phi = {**Q8, **NEOX, "shared_attention_norm": True, "n_layer": 2}
    advice = _plan(tmp_path, phi, README_PROGRESSIVE)["regime_advice"]
    note = re.search(r"note: the cell was measured on (\w+) blocks and this run has phi blocks: a saving measured on "
                     r"one block family did not always hold on another", advice)
    assert note and note.group(1) in {"llama", "neox"}, advice
    assert f"{note.group(1)} blocks" in advice.split("note:")[0] or note.group(1) == "llama"
    # the printed plan says it too
    config = {**_wsd(tmp_path, phi), "growth": README_PROGRESSIVE}
    assert main(["plan", "--config", str(write_config(tmp_path / "phi.yaml", config))]) == 0
    assert "this run has phi blocks" in " ".join(capsys.readouterr().out.split())
    # a NeoX run: the map's NeoX cell (issue 54's held-out family) is cited, and no family note
    neox = _plan(tmp_path, {**Q8, **NEOX, "n_layer": 2}, README_PROGRESSIVE)["regime_advice"]
    assert "depth (depth_init copy), neox blocks" in neox and "note: the cell was measured on" not in neox, neox
    assert "Evidence that transfers (neox-sp, stages-248-copy)" in neox


@pytest.mark.parametrize("name, family", [("pythia-160m", "neox"), ("Llama-3.2-1B", "llama"), ("phi-2", "phi"),
                                          ("gemma-2b", "gemma"), ("OLMo-1B-hf", "sequential LayerNorm LLaMAMLP")])
def test_block_families_of_named_configs(name, family):
    from litgpt import Config

    try:
        config = Config.from_name(name)
    except ValueError:
        pytest.skip(f"litgpt has no config {name}")
    assert block_family(config) == family


def test_cells_of_the_run_s_block_family_are_the_nearer_evidence(tmp_path, capsys):
    """Two cells of one schedule, one measured on llama blocks and one on neox: a neox run is told the neox cell (and
    ``--suggest`` suggests it first), a llama run the llama cell, with no family note."""
    import json

    from lightning_sparkling.growth.stage import GrowthStage
    from lightning_sparkling.pretrain.advice.measured import advise

    base = dict(category="depth", recipe="paper", schedule="wsd", growth_at=0.5, tokens_per_param=20.0, delta=-0.08,
                sd=0.01, seeds=3, seeds_above=0, where="w")
    llama = MeasuredCell(**base, speedup=1.3, speedup_sd=0.02, arch="llama", params=200_000)
    neox = MeasuredCell(**{**base, "where": "neox"}, speedup=1.29, speedup_sd=0.02, arch="neox", params=2_000_000)
    kwargs = dict(total_steps=1000, tokens_per_param=20.0, recipe="paper", schedule="wsd", cells=[llama, neox],
                  params=200_000)
    assert advise([GrowthStage(500, n_layer=8)], arch="neox", **kwargs).cell is neox
    on_llama = advise([GrowthStage(500, n_layer=8)], arch="llama", **kwargs)
    assert on_llama.cell is llama and on_llama.family_note() is None
    # --suggest: the neox cell for a neox target although the llama cell was faster
    cells = tmp_path / "cells.json"
    cells.write_text(json.dumps({"cells": [{**c.to_json(), "factors": {"n_layer": 2}} for c in (llama, neox)]}))
    load_map.cache_clear()
    config = {**_wsd(tmp_path, {**Q8, **NEOX}), "growth": {"stages": []}}
    assert main(["plan", "--config", str(write_config(tmp_path / "n.yaml", config)), "--suggest", "--map",
                 str(cells)]) == 0
    out = capsys.readouterr().out
    assert "docs/BENCHMARKS.md, neox)" in out and "note: the cell was measured on" not in out, out
