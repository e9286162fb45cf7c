"""Depth growth under DDP, FSDP2 (ModelParallelStrategy) and FSDP1 (FSDPStrategy, a CPU subclass) on 2 CPU ranks
(gloo), run by depth_dist_script.py: a depth growth (2 -> 4 blocks, ``interleave``, ``copy``: a kept block moves,
new blocks are copies) then depth + width in one stage (4 -> 5 blocks ``middle``, n_embd 32 -> 48, MLP 64 -> 97, an
odd width sharded unevenly) ends where one process with the same global batch ends (float64 weights, relative
< 1e-4), ranks agree exactly, the optimizer's param groups list the same parameters in the same order as on one
process (new blocks in their source's group, in module order), and resuming from checkpoints saved between the two
growths (DDP a full file, FSDP2 a sharded directory and a full file, FSDP1 a sharded directory) ends where the
uninterrupted run ends. Gradient accumulation 1 under DDP, 2 under FSDP2 and FSDP1."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from _dist import backend_fixtures, final_states, rel_diff

SCRIPT = Path(__file__).resolve().parents[1] / "depth_dist_script.py"
pytestmark = pytest.mark.slow

#: (backend, accumulation, checkpoints to resume from): accumulation 1 under DDP, 2 under the sharded backends; FSDP1
#: (a GPU backend for users) resumes its sharded checkpoint alone, FSDP2 and DDP the full files (each run and resume
#: is a 2-rank process pair: the suite's time; tests/distributed/test_ddp.py runs FSDP2 at accumulation 1)
RUNS = [("ddp", 1, ("full8",)), ("fsdp2", 2, ("sharded8", "full8")), ("fsdp1", 2, ("sharded8",))]


_rel_diff, _final = rel_diff, final_states
singles, multi = backend_fixtures(SCRIPT, RUNS)  # the one-process twins by accumulation; each backend and resume


def test_depth_growth_matches_single_process_and_ranks_agree(multi, singles):
    mode, acc, out, _ = multi
    single = singles[acc]
    ranks = _final(out, f"{mode}-acc{acc}")
    state = ranks[0]["state"]
    assert ranks[0]["n_layer"] == single["n_layer"] == 5
    assert state["transformer.h.4.mlp.proj.weight"].shape == (48, 97)  # both stages applied (uneven shards)
    assert state.keys() == single["state"].keys()
    for name in state:
        assert torch.equal(state[name], ranks[1]["state"][name]), name
        assert state[name].dtype == torch.float64, name  # new blocks too keep the model's dtype
    # float64 weights: 2 ranks and one process end ~4e-7 apart; a missed or misplaced block would be O(1)
    assert _rel_diff(state, single["state"]) < 1e-4
    # the depth symmetry metric (copied blocks against their sources) is read through the backend on every rank
    assert ranks[0]["symmetry"] == ranks[1]["symmetry"]
    assert set(ranks[0]["symmetry"]) == set(single["symmetry"]) >= {"symmetry/stage_0/n_layer",
                                                                      "symmetry/stage_1/n_layer"}
    for key, value in single["symmetry"].items():
        assert abs(ranks[0]["symmetry"][key] - value) < 1e-5, key


def test_optimizer_layout_is_the_single_process_one(multi, singles):
    """New blocks join their source's group in module order: what configure_optimizers builds on the grown model
    at a resume, so that optimizer state saved by position loads into the right parameters."""
    mode, acc, out, _ = multi
    expected = singles[acc]["layout"]
    for rank in _final(out, f"{mode}-acc{acc}"):
        if mode == "fsdp1":  # this rank's 1-D views of the flattened parameters: their count and order of sizes
            assert [len(group) for group in rank["layout"]] == [len(group) for group in expected]
        else:
            assert rank["layout"] == expected


def test_resume_after_depth_growth_matches_uninterrupted(multi):
    mode, acc, out, resumes = multi
    run = f"{mode}-acc{acc}"
    reference = _final(out, run)[0]["state"]
    for kind in resumes:
        resumed = _final(out, run, f"-{kind}")
        for name in reference:
            assert torch.equal(resumed[0]["state"][name], resumed[1]["state"][name]), (kind, name)
        assert _rel_diff(resumed[0]["state"], reference) < 1e-12, f"{run} resumed from the {kind} checkpoint"
