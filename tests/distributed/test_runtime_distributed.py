"""Activation checkpointing and ``torch.compile`` with a depth growth (2 -> 4 blocks) on 2 CPU ranks (gloo), run by
runtime_dist_script.py: with ``activation_checkpointing`` the losses and final weights are bit for bit those of the
run without it, every block (the growth's new ones too) is recomputed in the backward, and the ranks agree. DDP with
gradient accumulation 1, FSDP2 (``ModelParallelStrategy``) with 2. The compiled variants (``aot_eager``: per block
under FSDP2, the whole GPT under DDP) run only with ``SPARKLING_COMPILE_TESTS=1`` (``-m compile``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from _dist import rel_diff, run_script

SCRIPT = Path(__file__).resolve().parents[1] / "runtime_dist_script.py"
pytestmark = pytest.mark.slow
RUN_COMPILE = pytest.mark.skipif(not os.environ.get("SPARKLING_COMPILE_TESTS"),
                                 reason="compiles a lot: set SPARKLING_COMPILE_TESTS=1 (and -m compile)")


def run(tmp_path: Path, mode: str, accumulate: int, *flags: str) -> list[dict]:
    run_script(SCRIPT, str(tmp_path), mode, f"--accumulate={accumulate}", *flags)
    return [torch.load(tmp_path / f"{mode}-rank{r}.pt") for r in (0, 1)]


def check_checkpointing(ranks: list[dict], accumulate: int) -> None:
    for rank in ranks:
        plain, ckpt = rank["plain"], rank["checkpointed"]
        assert len(ckpt["losses"]) == 6 * accumulate
        assert ckpt["losses"] == plain["losses"]  # bit for bit
        assert ckpt["state"].keys() == plain["state"].keys()
        for name, value in plain["state"].items():
            assert torch.equal(ckpt["state"][name], value), name
        assert ckpt["checkpointed"] == [True] * 4 and plain["checkpointed"] == [False] * 4
        assert ckpt["calls"] == {0: 2, 1: 2, 2: 2, 3: 2} and plain["calls"] == {0: 1, 1: 1, 2: 1, 3: 1}
    for name, value in ranks[0]["checkpointed"]["state"].items():
        assert torch.equal(ranks[1]["checkpointed"]["state"][name], value), name
    assert ranks[0]["checkpointed"]["state"]["transformer.h.3.mlp.proj.weight"].shape == (32, 64)


@pytest.mark.parametrize("mode, accumulate", [("ddp", 1), ("fsdp2", 2)])
def test_activation_checkpointing_same_run_and_new_blocks_wrapped(tmp_path, mode, accumulate):
    check_checkpointing(run(tmp_path, mode, accumulate), accumulate)


@pytest.mark.compile
@RUN_COMPILE
@pytest.mark.parametrize("mode", ["ddp", "fsdp2"])
def test_compiled_growth_matches_eager(tmp_path, mode):
    compiled = run(tmp_path / "compiled", mode, 1, "--compile=aot_eager")
    check_checkpointing(compiled, 1)
    eager = run(tmp_path / "eager", mode, 1)
    for c, e in zip(compiled, eager):
        assert c["plain"]["compiled"] and not e["plain"]["compiled"]
        assert c["plain"]["summary"]["compiled"] and c["plain"]["summary"]["first_step_seconds"] > 0
        assert c["plain"]["losses"] == pytest.approx(e["plain"]["losses"], rel=1e-5)
        assert rel_diff(c["plain"]["state"], e["plain"]["state"]) < 1e-5
