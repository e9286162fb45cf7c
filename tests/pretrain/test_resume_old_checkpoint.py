"""Checkpoints written by an earlier release (commit 752b4ef, before the callback split, the schedule registry and
the typed stage record) resume under this code and end with the weights that release ends with, bit for bit
(fixtures from ``tests/make_resume_fixture.py``: a 2-stage growth with fresh bias correction and the symmetry loop's
boost, under a warmup-cosine and a WSD baseline)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from make_resume_fixture import MAX_STEPS, fit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize("case", ["cosine", "wsd"])
def test_checkpoint_of_the_previous_release_resumes_bit_exact(case):
    ckpt = torch.load(FIXTURES / f"resume_{case}.ckpt", map_location="cpu", weights_only=False)
    state = ckpt["callbacks"]["WidthGrowthCallback"]  # the key it has always had
    assert state["grown"] == 2 and state["records"][1]["symmetry_boost"] > 1
    expected = torch.load(FIXTURES / f"resume_{case}_final.pt", map_location="cpu")
    resumed = fit(case, ckpt_path=str(FIXTURES / f"resume_{case}.ckpt"))
    assert resumed.trainer.global_step == MAX_STEPS
    got = resumed.model.state_dict()
    assert got.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name
