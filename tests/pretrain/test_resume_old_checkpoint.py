"""A stored checkpoint resumes under this code and ends with the weights the code that wrote it ends with
(fixtures from ``tests/make_resume_fixture.py``: a 2-stage growth with fresh bias correction and the symmetry loop's
boost, under a warmup-cosine and a WSD baseline), so a change to the checkpoint's contents that breaks resuming fails
here.

"Bit for bit" holds on the CPU the fixtures were written on. On another CPU float32 kernels round differently:
measured, the resumed weights then differ by at most 2.2e-6 of each tensor's largest entry, while a resume that loses
the symmetry boost is off by 0.73 and one whose Adam second moments are 1% off by 9.2e-3. So the bound is 2e-5 of
each tensor's largest entry: ten times the rounding, 460 times under a 1% state error. Bit-exact resume on one machine
is tested by the resume tests that write their own checkpoints (tests/callbacks,
tests/pretrain/test_resume_boundary.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from make_resume_fixture import MAX_STEPS, fit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.mark.parametrize("case", ["cosine", "wsd"])
def test_a_stored_checkpoint_resumes_to_the_weights_it_was_stored_with(case):
    ckpt = torch.load(FIXTURES / f"resume_{case}.ckpt", map_location="cpu", weights_only=False)
    state = ckpt["callbacks"]["GrowthCallback"]
    assert state["grown"] == 2 and state["records"][1]["symmetry_boost"] > 1
    expected = torch.load(FIXTURES / f"resume_{case}_final.pt", map_location="cpu")
    resumed = fit(case, ckpt_path=str(FIXTURES / f"resume_{case}.ckpt"))
    assert resumed.trainer.global_step == MAX_STEPS
    got = resumed.model.state_dict()
    assert got.keys() == expected.keys()
    for name, tensor in expected.items():
        bound = ROUNDING_BOUND * tensor.abs().max().item()
        torch.testing.assert_close(got[name], tensor, rtol=0.0, atol=bound, msg=lambda m: f"{name}: {m}")


ROUNDING_BOUND = 2e-5
"""The largest difference from the stored weights, as a share of a tensor's largest entry (module docstring)."""
