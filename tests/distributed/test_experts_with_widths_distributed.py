"""Experts grown with widths and depth in the same stage on every parallel backend (2 CPU ranks, gloo;
experts_dist_script.py with ``--with-widths``): dense -> MoE with the hidden size 32 -> 48 and the MLP 64 -> 96 (expert
0 is the MLP widened, the new experts copy it widened), then 2x experts with their inner size 96 -> 112 (uneven over
2 ranks) and 2 -> 3 blocks in one stage, then 3 -> 4 blocks; ends where one process with the same global batch ends (float64, relative < 1e-4), ranks
agreeing exactly, and resumes from a checkpoint saved between the growths to where the uninterrupted run ends. One
case per backend, accumulation 2."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from _dist import final_states, rel_diff, run_script

SCRIPT = Path(__file__).resolve().parents[1] / "experts_dist_script.py"
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("with-widths-single")
    run_script(SCRIPT, str(out), "single", "--accumulate=2", "--with-widths")
    return torch.load(out / "single-acc2" / "final-rank0.pt")


@pytest.mark.parametrize("mode, checkpoint", [("fsdp2", "sharded6"), ("ddp", "full10"), ("fsdp1", "sharded10")])
def test_experts_with_widths_match_single_process_and_resume(tmp_path: Path, single, mode, checkpoint):
    run_script(SCRIPT, str(tmp_path), mode, "--accumulate=2", "--with-widths")
    run = f"{mode}-acc2"
    run_script(SCRIPT, str(tmp_path), mode, "--accumulate=2", "--with-widths", "--resume",
               str(tmp_path / run / f"{checkpoint}.ckpt"), f"--tag=-{checkpoint}")
    ranks = final_states(tmp_path, run)
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
    resumed = final_states(tmp_path, run, f"-{checkpoint}")
    for name in state:
        assert torch.equal(resumed[0]["state"][name], resumed[1]["state"][name]), name
    assert rel_diff(resumed[0]["state"], state) < 1e-12
