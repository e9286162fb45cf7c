"""The new-entry regions of heads growths, the way the growth callback keeps them (``TensorPlan.new_region`` at each
growth, re-indexed by ``GrowthPlan.carry_region`` at every later one), split into ranks' pieces the way the sharded
backends do: FSDP2's row chunks (``shard0_piece``, what ``local_piece`` applies to a DTensor) and FSDP1's flat
ranges (``flat_pieces``), on 2 to 8 ranks, with a tensor's new entries in several row and column runs. One process,
no fit: the 2-rank fits are in test_heads_distributed.py.

The truth is independent of ``carry_region``: a stage's new-entry mask grown through every later stage as zeros
(``grow_tensor(mode="zero")``: old entries go where the layout puts them, later stages' entries are 0)."""

from __future__ import annotations

import pytest
import torch

from _tiny import tiny_config
from conftest import neox_config, olmo2_config

from lightning_sparkling import GrowthStage
from lightning_sparkling.growth.plan import plan_growth
from lightning_sparkling.growth.surgery import grow_tensor
from lightning_sparkling.parallel.fsdp1 import flat_pieces
from lightning_sparkling.parallel.fsdp2 import shard0_piece

SCHEDULES = {
    # the 2-rank fits' schedule: width, new heads join their groups (old heads move), a new key/value group
    "width, join groups, new group": (tiny_config(), [
        GrowthStage(4, n_embd=48, intermediate_size=97), GrowthStage(8, n_head=8),
        GrowthStage(12, n_embd=49, n_head=12, n_query_groups=3)]),
    "mha 4 -> 6 -> 12 with width between": (neox_config(), [
        GrowthStage(1, n_head=6), GrowthStage(2, n_embd=40), GrowthStage(3, n_head=12)]),
    "gqa 4/2 -> 6/3 (not an integer ratio) -> 9/3": (tiny_config(), [
        GrowthStage(1, n_head=6, n_query_groups=3), GrowthStage(2, n_head=9)]),
    "olmo2 qk norms, heads + depth": (olmo2_config(), [
        GrowthStage(1, n_embd=48), GrowthStage(2, n_head=8, n_query_groups=4, n_layer=3, depth_order="middle")]),
}


def _mask(shape: tuple[int, ...], pieces: list[tuple[slice, ...]]) -> torch.Tensor:
    mask = torch.zeros(shape, dtype=torch.float64)
    for piece in pieces:
        mask[piece] += 1
    return mask


def _regions_and_truth(name: str):
    """Per stage, the callback's regions (``{name: pieces}``) and the true masks, after the whole schedule."""
    config, stages = SCHEDULES[name]
    regions, truth = [], []
    for k, stage in enumerate(stages):
        plan = plan_growth(config, stage, seed=3, stage_index=k)
        carried = [[plan.carry_region(n, pieces) for n, pieces in stage_regions.items()] for stage_regions in regions]
        regions = [{n: pieces for n, pieces in found if n is not None} for found in carried]
        truth = [{plan.carry(n): grow_tensor(m, plan.tensors[plan.carry(n)], plan.channels, mode="zero", scale=1.0)
                  if plan.carry(n) in plan.tensors else m for n, m in masks.items() if plan.carry(n) is not None}
                 for masks in truth]
        new = {n: pieces for n, spec in plan.tensors.items() if (pieces := spec.new_region())}
        regions.append(new)
        truth.append({n: _mask(plan.tensors[n].new_shape, pieces) for n, pieces in new.items()})
        config = plan.new_config
    return regions, truth


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_carried_regions_are_each_stages_new_entries_once(name):
    regions, truth = _regions_and_truth(name)
    moved = 0
    for k, (stage_regions, masks) in enumerate(zip(regions, truth)):
        assert stage_regions.keys() == masks.keys(), (k, sorted(stage_regions.keys() ^ masks.keys())[:4])
        for n, pieces in stage_regions.items():
            assert torch.equal(_mask(masks[n].shape, pieces), masks[n]), (k, n)
            moved += len(pieces) > 2
    assert moved  # some tensors' new entries are several runs


@pytest.mark.parametrize("world", [2, 3, 4, 8])
@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_fsdp2_row_chunks_hold_the_regions_exactly_once(name, world):
    regions, truth = _regions_and_truth(name)
    for k, (stage_regions, masks) in enumerate(zip(regions, truth)):
        for n, pieces in stage_regions.items():
            shape = masks[n].shape
            chunk = -(-shape[0] // world)
            locals_ = []
            for rank in range(world):
                local = torch.zeros((max(0, min(shape[0], (rank + 1) * chunk) - min(shape[0], rank * chunk)),
                                     *shape[1:]), dtype=torch.float64)
                for piece in pieces:
                    found = shard0_piece(shape[0], world, rank, piece)
                    if found is not None:
                        local[found] += 1
                locals_.append(local)
            assert torch.equal(torch.cat(locals_), masks[n]), (k, n, world)


@pytest.mark.parametrize("world", [2, 3, 8])
@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_fsdp1_flat_ranges_hold_the_regions_exactly_once(name, world):
    """Each tensor's flattened values split at boundaries anywhere (an FSDP1 flat parameter packs several tensors,
    so a rank's range of one starts and ends mid-row)."""
    regions, truth = _regions_and_truth(name)
    g = torch.Generator().manual_seed(world)
    for k, (stage_regions, masks) in enumerate(zip(regions, truth)):
        for n, pieces in stage_regions.items():
            shape = tuple(masks[n].shape)
            numel = masks[n].numel()
            cuts = sorted(torch.randint(0, numel + 1, (world - 1,), generator=g).tolist())
            flat = torch.zeros(numel, dtype=torch.float64)
            for start, stop in zip([0, *cuts], [*cuts, numel]):
                shard = flat[start:stop]
                for piece in pieces:
                    for fp in flat_pieces(shape, piece, start, stop):
                        fp(shard).add_(1)
            assert torch.equal(flat.view(shape), masks[n]), (k, n, world)
