"""Heads growth under DDP, FSDP2 (ModelParallelStrategy) and FSDP1 (FSDPStrategy, a CPU subclass) on 2 CPU ranks
(gloo), run by heads_dist_script.py: a width growth (n_embd 32 -> 48, MLP 64 -> 97), then n_head 4 -> 8 in the same
2 key/value groups (old heads move inside their group, the k and v blocks shift), then growth into a named litgpt
config (``model_name``, registered by the script: n_embd 49, 12 heads in 3 groups, a new key/value group) ends where
one process with the same global batch ends (float64 weights, relative < 1e-4), ranks agree exactly, the
optimizer's param groups are the single process's, and resuming from checkpoints saved between the two heads
growths and after both ends where the uninterrupted run ends. Gradient accumulation 1 under DDP, 2 under FSDP2 and
FSDP1.

Each rank also reports which entries the new-entry learning rate addresses as each stage's new entries, right after
each growth and at the end (its part of the global slices, through the backend's ``new_entry_pieces``: FSDP2's
``local_piece``, FSDP1's ``flat_pieces``; gathered): exactly once each, and exactly the entries obtained by growing
a stage's new-entry mask through every later stage as zeros (old entries moved where the heads growths move them).
A heads growth's new entries are several row runs of ``qkv`` and column runs of ``attn.proj``, and earlier stages'
regions are re-indexed by ``GrowthPlan.carry_region``; FSDP2 splits the final ``qkv`` rows inside a run of new
heads. On one process this checks ``carry_region`` itself, which a comparison with one process cannot.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from _dist import backend_fixtures, final_states, rel_diff

from _tiny import tiny_config

from lightning_sparkling.growth.plan import plan_growth
from lightning_sparkling.growth.surgery import grow_tensor

SCRIPT = Path(__file__).resolve().parents[1] / "heads_dist_script.py"
pytestmark = pytest.mark.slow

#: (backend, accumulation, checkpoints to resume from): accumulation 1 under DDP, 2 under the sharded backends; FSDP1
#: (a GPU backend for users) resumes its sharded checkpoint alone, FSDP2 and DDP the full files (each run and resume
#: is a 2-rank process pair: the suite's time; tests/distributed/test_ddp.py runs FSDP2 at accumulation 1)
RUNS = [("ddp", 1, ("full10",)), ("fsdp2", 2, ("sharded10", "full14")), ("fsdp1", 2, ("sharded10",))]


_rel_diff, _final = rel_diff, final_states
singles, multi = backend_fixtures(SCRIPT, RUNS)  # the one-process twins by accumulation; each backend and resume


@pytest.fixture(scope="module")
def expected_coverage() -> dict[int, list[dict[str, torch.Tensor]]]:
    """By step (right after each growth, and at the end), per stage grown by then, the mask of its new entries,
    carried independently of ``carry_region``: each stage's ``new_region()`` marked on its grown shapes, then grown
    by every later stage as zeros (``grow_tensor`` with ``mode="zero"``: old entries follow the layout, later
    stages' entries are 0)."""
    from heads_dist_script import MAX_STEPS, STAGES

    config, masks, by_step = tiny_config(), [], {}
    for k, stage in enumerate(STAGES):
        plan = plan_growth(config, stage, seed=0, stage_index=k)
        masks = [{plan.carry(name): (grow_tensor(m, plan.tensors[plan.carry(name)], plan.channels, mode="zero",
                                                 scale=1.0)
                                     if plan.carry(name) in plan.tensors else m) for name, m in mask.items()}
                 for mask in masks]
        mask = {}
        for name, spec in plan.tensors.items():
            pieces = spec.new_region()
            if pieces:
                mask[name] = torch.zeros(spec.new_shape, dtype=torch.float64)
                for piece in pieces:
                    mask[name][piece] += 1
        masks.append(mask)
        by_step[stage.at_step] = masks
        config = plan.new_config
    by_step[MAX_STEPS] = masks
    return by_step


def test_heads_growth_matches_single_process_and_ranks_agree(multi, singles):
    mode, acc, out, _ = multi
    single = singles[acc]
    ranks = _final(out, f"{mode}-acc{acc}")
    state = ranks[0]["state"]
    assert ranks[0]["config"] == single["config"] == dict(n_embd=49, n_head=12, n_query_groups=3, head_size=8,
                                                          intermediate_size=97, name="tiny-h12-g3")
    assert state["transformer.h.1.attn.qkv.weight"].shape == (144, 49)  # every stage applied
    assert state["transformer.h.1.attn.proj.weight"].shape == (49, 96)
    assert state.keys() == single["state"].keys()
    for name in state:
        assert torch.equal(state[name], ranks[1]["state"][name]), name
        assert state[name].dtype == torch.float64, name
    # float64 weights: 2 ranks and one process end ~1e-7 apart; a misplaced head or a new-entry learning rate
    # applied to the wrong rows would be far larger
    assert _rel_diff(state, single["state"]) < 1e-4
    # the heads symmetry metrics (copied heads against their sources) are read through the backend on every rank
    assert ranks[0]["symmetry"] == ranks[1]["symmetry"]
    assert set(ranks[0]["symmetry"]) == set(single["symmetry"]) >= {
        "symmetry/stage_1/attn_q", "symmetry/stage_1/attn_qkv", "symmetry/stage_2/attn_qkv",
        "symmetry/stage_0/n_embd"}
    for key, value in single["symmetry"].items():
        assert abs(ranks[0]["symmetry"][key] - value) < 1e-5, key


def test_optimizer_layout_is_the_single_process_one(multi, singles):
    mode, acc, out, _ = multi
    expected = singles[acc]["layout"]
    for rank in _final(out, f"{mode}-acc{acc}"):
        if mode == "fsdp1":  # this rank's 1-D views of the flattened parameters: their count and order of sizes
            assert [len(group) for group in rank["layout"]] == [len(group) for group in expected]
        else:
            assert rank["layout"] == expected


def _assert_coverage(found: dict[int, list[dict]], expected: dict[int, list[dict]], what: str) -> None:
    assert found and set(found) <= set(expected), (what, sorted(found))
    for step in found:
        assert len(found[step]) == len(expected[step]), (what, step)
        for k, (got, want) in enumerate(zip(found[step], expected[step])):
            assert got.keys() == want.keys(), (what, step, k, sorted(got.keys() ^ want.keys())[:4])
            for name in want:
                assert torch.equal(got[name], want[name]), (
                    f"{what} at step {step}: stage {k}'s new entries of {name} as the new-entry LR addresses them: "
                    f"{int((got[name] != want[name]).sum())} of {want[name].numel()} entries wrong "
                    f"(addressed {int(got[name].sum())} times, {int(want[name].sum())} expected)")


def test_new_entry_regions_are_each_stages_new_entries_once(multi, singles, expected_coverage):
    """What each rank's new-entry LR hook addresses, gathered, right after each growth and at the end, is every
    stage's carried new entries exactly once (on one process too: that checks carry_region itself), also after a
    resume (regions rebuilt by the resume)."""
    mode, acc, out, resumes = multi
    assert sum(int(m.sum()) for m in expected_coverage[4][0].values()) > 0
    _assert_coverage(singles[acc]["coverage"], expected_coverage, f"single-acc{acc}")
    assert sorted(singles[acc]["coverage"]) == sorted(expected_coverage)
    for tag in ("", *(f"-{kind}" for kind in resumes)):
        ranks = _final(out, f"{mode}-acc{acc}", tag)
        if not tag:
            assert sorted(ranks[0]["coverage"]) == sorted(expected_coverage)
        for r, rank in enumerate(ranks):
            _assert_coverage(rank["coverage"], expected_coverage, f"{mode}-acc{acc}{tag} rank {r}")


def test_resume_after_heads_growth_matches_uninterrupted(multi):
    mode, acc, out, resumes = multi
    run = f"{mode}-acc{acc}"
    reference = _final(out, run)[0]["state"]
    for kind in resumes:
        resumed = _final(out, run, f"-{kind}")
        for name in reference:
            assert torch.equal(resumed[0]["state"][name], resumed[1]["state"][name]), (kind, name)
        assert _rel_diff(resumed[0]["state"], reference) < 1e-12, f"{run} resumed from the {kind} checkpoint"
