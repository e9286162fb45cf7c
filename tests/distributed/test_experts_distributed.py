"""Experts growth under DDP, FSDP2 (ModelParallelStrategy) and FSDP1 (FSDPStrategy, a CPU subclass) on 2 CPU
ranks (gloo), run by experts_dist_script.py:
dense -> MoE (3 experts, drop-upcycle), then 2x experts and experts per token (copy), then a depth growth, end
where one process with the same global batch ends (float64 weights, relative < 1e-4); ranks agree exactly; new
experts and routers keep the model's dtype; the optimizer's param groups list the same parameters in the same order
as on one process; resuming from checkpoints saved between the growths (DDP a full file, FSDP2 a sharded directory
and a full file, FSDP1 a sharded directory) ends where the uninterrupted run ends. Gradient accumulation 1 under DDP,
2 under FSDP2 and FSDP1. FSDP1: a rank whose shard of a parameter is empty does not advance its Adam ``step``; new
experts move shard boundaries, so the patch takes the step the ranks agree on (it failed the checkpoint save before)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from _dist import backend_fixtures, final_states, rel_diff

SCRIPT = Path(__file__).resolve().parents[1] / "experts_dist_script.py"
pytestmark = pytest.mark.slow

#: (backend, accumulation, checkpoints to resume from): accumulation 1 under DDP, 2 under the sharded backends; FSDP1
#: (a GPU backend for users) resumes its sharded checkpoint alone, FSDP2 and DDP the full files (each run and resume
#: is a 2-rank process pair: the suite's time; tests/distributed/test_ddp.py runs FSDP2 at accumulation 1)
RUNS = [("ddp", 1, ("full6",)), ("fsdp2", 2, ("sharded10", "full6")), ("fsdp1", 2, ("sharded10",))]

singles, multi = backend_fixtures(SCRIPT, RUNS)


def test_experts_growth_matches_single_process_and_ranks_agree(multi, singles):
    mode, acc, out, _ = multi
    single = singles[acc]
    ranks = final_states(out, f"{mode}-acc{acc}")
    state = ranks[0]["state"]
    assert (ranks[0]["n_expert"], ranks[0]["n_layer"]) == (single["n_expert"], single["n_layer"]) == (6, 3)
    assert state["transformer.h.2.mlp.gate.weight"].shape == (6, 32)
    assert state.keys() == single["state"].keys()
    for name in state:
        assert torch.equal(state[name], ranks[1]["state"][name]), name
        assert state[name].dtype == torch.float64, name  # new experts and routers keep the model's dtype
    # float64: 2 ranks and one process end ~2e-7 apart; a misplaced expert or router row would be O(1)
    assert rel_diff(state, single["state"]) < 1e-4
    assert ranks[0]["symmetry"] == ranks[1]["symmetry"]
    assert set(ranks[0]["symmetry"]) == set(single["symmetry"]) >= {
        "symmetry/stage_0/experts", "symmetry/stage_1/experts", "symmetry/stage_1/n_expert"}  # gathered copies
    for key, value in single["symmetry"].items():
        assert abs(ranks[0]["symmetry"][key] - value) < 1e-5, key


def test_optimizer_layout_is_the_single_process_one(multi, singles):
    mode, acc, out, _ = multi
    expected = singles[acc]["layout"]
    for rank in final_states(out, f"{mode}-acc{acc}"):
        if mode == "fsdp1":  # this rank's 1-D views of the flattened parameters: their count per group
            assert [len(group) for group in rank["layout"]] == [len(group) for group in expected]
        else:
            assert rank["layout"] == expected


def test_resume_across_experts_growth_matches_uninterrupted(multi):
    mode, acc, out, resumes = multi
    run = f"{mode}-acc{acc}"
    reference = final_states(out, run)[0]["state"]
    for kind in resumes:
        resumed = final_states(out, run, f"-{kind}")
        for name in reference:
            assert torch.equal(resumed[0]["state"][name], resumed[1]["state"][name]), (kind, name)
        assert rel_diff(resumed[0]["state"], reference) < 1e-12, f"{run} resumed from the {kind} checkpoint"
