"""``first_k_dense_replace`` at dense -> MoE under DDP and FSDP2 (2 CPU ranks, gloo; experts_dist_script.py with
``--first-k=1``): block 0's MLP stays the (wrapped or sharded) dense module through the upcycling; the depth growth
(``middle``) copies it, so the run ends with 2 dense blocks and one MoE block, where one process with the same global
batch ends (float64, relative < 1e-4), ranks agreeing exactly, and it resumes from a checkpoint saved between the
growths to where the uninterrupted run ends. One case per backend, accumulation 2 (the runs are slow; FSDP1's
dense -> MoE is test_experts_distributed.py's); in a file of its own so that the distributed tests spread over the
test workers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from _dist import backend_fixtures, final_states, rel_diff

SCRIPT = Path(__file__).resolve().parents[1] / "experts_dist_script.py"
pytestmark = pytest.mark.slow
RUNS = [("fsdp2", 2, ("sharded6",)), ("ddp", 2, ("full6",))]

singles, multi = backend_fixtures(SCRIPT, RUNS, flags=("--first-k=1",))


def test_dense_first_blocks_match_single_process_and_resume(multi, singles):
    mode, acc, out, (checkpoint,) = multi
    single = singles[acc]
    ranks = final_states(out, f"{mode}-acc{acc}")
    state = ranks[0]["state"]
    assert ranks[0]["first_k_dense_replace"] == single["first_k_dense_replace"] == 2
    assert {n.split(".mlp.")[0] for n in state if ".mlp.gate." in n} == {"transformer.h.2"}
    assert "transformer.h.1.mlp.fc_1.weight" in state and state.keys() == single["state"].keys()
    for name in state:
        assert torch.equal(state[name], ranks[1]["state"][name]), name
    assert rel_diff(state, single["state"]) < 1e-4
    resumed = final_states(out, f"{mode}-acc{acc}", f"-{checkpoint}")
    for name in state:
        assert torch.equal(resumed[0]["state"][name], resumed[1]["state"][name]), name
    assert rel_diff(resumed[0]["state"], state) < 1e-12
