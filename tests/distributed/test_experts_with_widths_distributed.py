"""Experts grown with widths and depth in the same stage under DDP and FSDP2 (2 CPU ranks, gloo;
experts_dist_script.py with ``--with-widths``): dense -> MoE with the hidden size 32 -> 48 and the MLP 64 -> 96 (expert
0 is the MLP widened, the new experts copy it widened), then 2x experts with their inner size 96 -> 112 (uneven over
2 ranks) and 2 -> 3 blocks in one stage, then 3 -> 4 blocks; ends where one process with the same global batch ends
(float64, relative < 1e-4), ranks agreeing exactly, and resumes from a checkpoint saved between the growths to where
the uninterrupted run ends. One case per backend, accumulation 2 (FSDP1's experts growth, with a width stage, is
test_experts_distributed.py's)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from _dist import backend_fixtures, final_states, rel_diff

SCRIPT = Path(__file__).resolve().parents[1] / "experts_dist_script.py"
pytestmark = pytest.mark.slow
RUNS = [("fsdp2", 2, ("sharded6",)), ("ddp", 2, ("full10",))]

singles, multi = backend_fixtures(SCRIPT, RUNS, flags=("--with-widths",))


def test_experts_with_widths_and_depth_match_single_process_and_resume(multi, singles):
    mode, acc, out, (checkpoint,) = multi
    single = singles[acc]
    ranks = final_states(out, f"{mode}-acc{acc}")
    state = ranks[0]["state"]
    grown = (ranks[0]["n_expert"], ranks[0]["n_layer"], ranks[0]["n_embd"], ranks[0]["moe_intermediate_size"])
    assert grown == (single["n_expert"], single["n_layer"], single["n_embd"], single["moe_intermediate_size"]) \
        == (6, 4, 48, 112)
    assert state["transformer.h.3.mlp.experts.5.fc_1.weight"].shape == (112, 48)
    assert state.keys() == single["state"].keys()
    for name in state:
        assert torch.equal(state[name], ranks[1]["state"][name]), name
        assert state[name].dtype == torch.float64, name
    assert rel_diff(state, single["state"]) < 1e-4
    for key, value in single["symmetry"].items():
        assert abs(ranks[0]["symmetry"][key] - value) < 1e-5, key
    resumed = final_states(out, f"{mode}-acc{acc}", f"-{checkpoint}")
    for name in state:
        assert torch.equal(resumed[0]["state"][name], resumed[1]["state"][name]), name
    assert rel_diff(resumed[0]["state"], state) < 1e-12
