"""Growth under DDP, FSDP2 (ModelParallelStrategy) and FSDP1 (FSDPStrategy) with 2 CPU ranks (gloo), with gradient
accumulation 1 and 2: a two-stage growth (hidden+inner, then inner to an odd width with random init, so the shards
are uneven) ends where one process with the same global batch ends (float64 weights, relative < 1e-5), ranks agree
exactly, and resuming checkpoints saved before, at and after a growth (full files; FSDP2 and FSDP1 also sharded
directories) matches the uninterrupted run (see RUNS for which backend resumes from what).

FSDP1 runs Lightning's own FSDPStrategy on CPU through a test subclass (see ddp_script.py); the same script on 2 GPUs
(``fsdp1-cuda``, the plain FSDPStrategy with nccl) is the GPU-marked test at the end."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from _dist import backend_fixtures, final_states, rel_diff, run_script

SCRIPT = Path(__file__).resolve().parents[1] / "ddp_script.py"
pytestmark = pytest.mark.slow


_rel_diff = rel_diff


def _run(*args: str) -> None:
    run_script(SCRIPT, *args)


def _final(out: Path, run: str, tag: str = "") -> list[dict]:
    return [saved["state"] for saved in final_states(out, run, tag)]


ACCUMULATE = [1, 2]  # 1: Lightning runs forward/backward inside optimizer.step, after the step pre-hooks

#: (backend, accumulation, checkpoints to resume from): before the growth (it then happens in the resumed run),
#: right at it, between the two growths; full files and (FSDP) sharded directories. Each backend resumes from every
#: point once, the points shared out between accumulation 1 and 2 (the suite's time: each resume is a 2-rank run).
#: FSDP1 (a GPU backend for users, gloo here) runs accumulation 2 alone; its one-GPU test runs both.
RUNS = [("ddp", 1, ("full4", "full12")), ("ddp", 2, ("full8",)),
        ("fsdp2", 1, ("sharded4", "full12")), ("fsdp2", 2, ("full8", "sharded8", "sharded12")),
        ("fsdp1", 2, ("sharded4", "sharded8", "full12"))]

singles, multi = backend_fixtures(SCRIPT, RUNS)


def test_two_stage_growth_matches_single_process_and_ranks_agree(multi, singles):
    mode, acc, out, _ = multi
    run = f"{mode}-acc{acc}"
    ranks = _final(out, run)
    assert ranks[0]["transformer.h.0.mlp.proj.weight"].shape == (64, 191)  # both stages applied (uneven shards)
    for name in ranks[0]:
        assert torch.equal(ranks[0][name], ranks[1][name]), name
        assert ranks[0][name].dtype == torch.float64, name  # the grown model keeps the model's dtype
    # float64 weights (litgpt's RMSNorm still computes in float32, so rank-split batches round differently there):
    # noise ends near 5e-7 here, where float32 runs end near 4e-5 after 24 AdamW steps
    assert _rel_diff(ranks[0], singles[acc]["state"]) < 1e-5
    # the symmetry loop of stage 0 boosted its new entries to the 4x cap, on both ranks as in one process
    boosts = [torch.load(out / run / f"final-rank{r}.pt")["boosts"] for r in (0, 1)]
    assert boosts[0] == boosts[1] == [4.0, 1.0], boosts
    # stage 1 is GrowthStage's default recipe, auto: resolved alike on every rank from the module's cosine schedule
    recipes = [torch.load(out / run / f"final-rank{r}.pt")["recipes"] for r in (0, 1)]
    assert recipes[0] == recipes[1] == ["paper", "random-zero-3x"], recipes


def test_resume_after_growth_matches_uninterrupted(multi):
    mode, acc, out, resumes = multi
    run = f"{mode}-acc{acc}"
    reference = _final(out, run)[0]
    for kind in resumes:
        resumed = _final(out, run, f"-{kind}")
        assert torch.equal(resumed[0]["lm_head.weight"], resumed[1]["lm_head.weight"])
        assert _rel_diff(resumed[0], reference) < 1e-12, f"{run} resumed from the {kind} checkpoint"
        recipes = torch.load(out / run / f"final-{kind}-rank0.pt")["recipes"]
        assert recipes == ["paper", "random-zero-3x"], (kind, recipes)  # growths before the resume still reported


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="FSDPStrategy on GPUs needs 2 CUDA devices")
@pytest.mark.parametrize("acc", ACCUMULATE)
def test_fsdp1_on_gpus_matches_single_process_and_resumes(tmp_path, acc):
    _run(str(tmp_path / "ref"), "single", f"--accumulate={acc}")
    reference = torch.load(tmp_path / "ref" / f"single-acc{acc}" / "final-rank0.pt")["state"]
    run = f"fsdp1-cuda-acc{acc}"
    _run(str(tmp_path), "fsdp1-cuda", f"--accumulate={acc}")
    ranks = _final(tmp_path, run)
    for name in ranks[0]:
        assert torch.equal(ranks[0][name], ranks[1][name]), name
    assert _rel_diff(ranks[0], reference) < 1e-3  # GPU matmuls (TF32 off by default) vs the CPU single process
    for kind in ("sharded8", "full8"):
        _run(str(tmp_path), "fsdp1-cuda", f"--accumulate={acc}", "--resume", str(tmp_path / run / f"{kind}.ckpt"),
             f"--tag=-{kind}")
        assert _rel_diff(_final(tmp_path, run, f"-{kind}")[0], ranks[0]) < 1e-5, kind


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("acc", ACCUMULATE)
def test_fsdp1_on_one_gpu_matches_single_process_and_resumes(tmp_path, acc):
    """Lightning's own FSDPStrategy on one GPU (nccl, one rank, float32): the FSDP1 backend's gather, grow and
    re-flatten on CUDA, both stages, ends where one CPU process ends, and resumes from a checkpoint saved right at
    the first growth (sharded and full) to the same weights."""
    _run(str(tmp_path / "ref"), "single", f"--accumulate={acc}", "--ranks=1")
    reference = torch.load(tmp_path / "ref" / f"single-acc{acc}" / "final-rank0.pt")["state"]
    run = f"fsdp1-cuda-acc{acc}"
    _run(str(tmp_path), "fsdp1-cuda", f"--accumulate={acc}", "--ranks=1")
    state = torch.load(tmp_path / run / "final-rank0.pt")["state"]
    assert state["transformer.h.0.mlp.proj.weight"].shape == (64, 191)  # both stages applied
    assert all(t.dtype == torch.float32 for t in state.values())
    # GPU float32 vs the CPU float64 process, 24 AdamW steps: 1.7e-3 (accumulation 1) on an H100; a wrong growth
    # or optimizer-state patch is off by far more
    diff = _rel_diff(state, reference)
    assert diff < 5e-3, f"FSDP1 on one GPU vs the float64 CPU process, accumulation {acc}: {diff:.2e}"
    for kind in ("sharded8", "full8"):
        _run(str(tmp_path), "fsdp1-cuda", f"--accumulate={acc}", "--ranks=1", "--resume",
             str(tmp_path / run / f"{kind}.ckpt"), f"--tag=-{kind}")
        resumed = torch.load(tmp_path / run / f"final-{kind}-rank0.pt")["state"]
        assert _rel_diff(resumed, state) < 1e-5, kind
