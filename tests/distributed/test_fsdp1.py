"""FSDP1 growth (lightning_sparkling.parallel.fsdp1) piece by piece. The end-to-end runs (two-stage growth against one
process, resume from sharded and full checkpoints) are in test_ddp.py; these check the parts on 2 CPU ranks (gloo):

- the grown shards of weights and AdamW state are exactly those of the plain growth of the gathered model;
- the flat-shard pieces that carry the new-entry learning rate cover every new entry exactly once across ranks,
  and nothing else;
- a failed optimizer patch rolls the wrapped model back and training goes on;
- LitGPTPretrainModule wraps itself with wrap_gpt, clips through the root unit and keeps FLOPs right after growth.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lightning_sparkling.parallel.fsdp1 import FlatPiece, clean_name, flat_pieces

SCRIPT = Path(__file__).resolve().parents[1] / "fsdp1_script.py"


def _launch(out: Path, mode: str) -> list[dict]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    if mode.startswith("module"):  # Lightning starts rank 1 itself
        cmd = [sys.executable, str(SCRIPT), str(out), mode]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(SCRIPT),
               str(out), mode]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    return [json.loads((out / f"{mode}-rank{r}.json").read_text()) for r in (0, 1)]


# ------------------------------------------------------------------------------------------------ flat pieces
def _brute_force(shape, piece, start, stop) -> torch.Tensor:
    mask = torch.zeros(shape)
    mask[piece] = 1.0
    return mask.flatten()[start:stop]


@pytest.mark.parametrize("seed", range(40))
def test_flat_pieces_select_exactly_the_block_inside_the_shard(seed):
    rng = random.Random(seed)
    shape = (rng.randint(1, 9),) if seed % 5 == 0 else (rng.randint(1, 9), rng.randint(1, 9))
    piece = tuple(slice(*sorted(rng.sample(range(n + 1), 2))) if rng.random() < 0.7 else slice(None) for n in shape)
    numel = int(torch.tensor(shape).prod())
    start = rng.randint(0, numel)
    stop = rng.randint(start, numel)
    pieces = flat_pieces(shape, piece, start, stop)
    assert len(pieces) <= 3
    marker = torch.zeros(stop - start)
    for fp in pieces:
        fp(marker).add_(1.0)  # a view: writes land in the shard
    assert torch.equal(marker, _brute_force(shape, piece, start, stop)), (shape, piece, start, stop, pieces)


def test_flat_piece_is_a_view_of_the_shard():
    shard = torch.arange(12.0)
    view = FlatPiece(start=3, stop=9, row=3, c0=1, c1=3)(shard)  # rows [3,4,5], [6,7,8] -> columns 1..2
    assert view.tolist() == [[4.0, 5.0], [7.0, 8.0]]
    view.zero_()
    assert shard[4] == 0 and shard[3] == 3


def test_flat_pieces_refuse_3d_parameters():
    from lightning_sparkling.growth.plan import GrowthError

    with pytest.raises(GrowthError, match="3-D parameters"):
        flat_pieces((2, 2, 2), (slice(None),), 0, 8)


def test_clean_name_strips_wrapper_prefixes():
    name = "_fsdp_wrapped_module.transformer.h.1._fsdp_wrapped_module._checkpoint_wrapped_module.mlp.fc_1.weight"
    assert clean_name(name) == "transformer.h.1.mlp.fc_1.weight"


# ------------------------------------------------------------------------------------------------ 2 CPU ranks

@pytest.mark.slow
def test_grown_shards_equal_the_plain_growth_and_pieces_cover_new_entries(tmp_path):
    ranks = _launch(tmp_path, "surgery")
    for r in ranks:
        assert r["config"] == 64
        assert r["placement_diff"] == 0.0  # shard_range places each rank's view where FSDP's state dict has it
        assert r["weight_diff"] == 0.0 and r["state_diff"] == 0.0
        assert all(torch.isfinite(torch.tensor(r["steps_after"])))
    names = set(ranks[0]["new_entries"]) | set(ranks[1]["new_entries"])
    assert "transformer.h.0.mlp.fc_1.weight" in names and "lm_head.weight" in names
    checked = 0
    for name in names:
        expected = torch.tensor(next(r["new_entries"][name] for r in ranks if name in r["new_entries"]))
        covered = sum(torch.tensor(r["covered"][name]) for r in ranks if name in r["covered"])
        assert expected.max() <= 1  # the stage's new-entry slices are disjoint
        assert torch.equal(covered, expected), name
        checked += int(expected.sum())
    assert checked > 0


@pytest.mark.slow
def test_failed_optimizer_patch_rolls_back_the_wrapped_model(tmp_path):
    for r in _launch(tmp_path, "rollback"):
        assert r["raised"]
        assert r["same_objects"] and r["same_values"] and r["same_optimizer"]
        assert r["width"] == 32
        assert all(torch.isfinite(torch.tensor(r["steps_after"])))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["module", "module-bf16"])
def test_litgpt_pretrain_module_grows_under_fsdp_strategy(tmp_path, mode):
    ranks = _launch(tmp_path, mode)
    for r in ranks:
        assert r["param_dtypes"] == ["torch.float32"]  # bf16-mixed: FSDP keeps fp32 shards, the grown ones too
        assert r["wrapped"] == "FullyShardedDataParallel" and r["n_embd"] == 64 and r["step"] == 6
        assert r["flops_per_batch"] == r["expected_flops"]  # litgpt's count of the global (grown) model
        assert r["checkpointed_blocks"] == 2  # the strategy's activation checkpointing, re-applied to the grown GPT
        assert r["loss_after"] < 5.0
        assert set(r["symmetry"]) == {"symmetry/stage_0/n_embd", "symmetry/stage_0/intermediate_size"}
        assert all(0.0 < v <= 1.0 + 1e-6 for v in r["symmetry"].values())
        # the last forward (global step 5, after the growth at 3), one residual series per block
        assert r["rms_step"] == 5 and len([t for t in r["rms"] if t.startswith("rms/residual/")]) == 2
        assert all(0.0 < v < float("inf") for v in r["rms"].values())
    assert ranks[0]["symmetry"] == ranks[1]["symmetry"]  # from the gathered tensors
    assert ranks[0]["rms"] == ranks[1]["rms"]  # averaged across ranks
