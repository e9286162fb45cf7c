"""``grow_tensor``'s in-place fill (one tensor of the grown shape, old block then each dim's new slices) gives the
tensors of the dim-by-dim append (``expand_dim``, then the scale) bit for bit: weights, the optimizer state of every
recipe, float32 and float64, every model kind and every init pair; the cases it does not take (random draws, heads'
layouts, an uneven split, perturb, bfloat16 scaling) keep the general path."""

from __future__ import annotations

import pytest
import torch

from lightning_sparkling.growth import surgery
from lightning_sparkling.growth.optim_state import grow_state
from lightning_sparkling.growth.plan import plan_growth
from lightning_sparkling.growth.stage import GrowthStage
from tests.conftest import gemma_config, llama_config, moe_config, neox_config

STAGES = [dict(n_embd=64, intermediate_size=128), dict(n_embd=64, init="copy-zero"), dict(n_embd=48, init="zero-copy"),
          dict(n_embd=64, rms_preserving=False), dict(n_embd=64, init="random-zero"), dict(n_embd=64, split="random"),
          dict(n_embd=64, perturb=0.1), dict(n_head=8), dict(n_embd=64, n_layer=4)]


def _grown(plan, tensors, in_place: bool, monkeypatch) -> dict[str, torch.Tensor]:
    with monkeypatch.context() as m:
        if not in_place:
            m.setattr(surgery, "_fills_in_place", lambda *args: False)
        return surgery.grow_tensors(plan, tensors)


@pytest.mark.parametrize("factory", [llama_config, neox_config, gemma_config, moe_config])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_in_place_fill_is_bit_identical_to_appending_dim_by_dim(monkeypatch, factory, dtype):
    config = factory()
    g = torch.Generator().manual_seed(0)
    for keys in STAGES:
        try:
            stage = GrowthStage(1, **keys)
            plan = plan_growth(config, stage, seed=5, stage_index=1)
        except ValueError:
            continue
        tensors = {spec.source_name: torch.randn(spec.old_shape, generator=g).to(dtype)
                   for spec in plan.tensors.values()}
        fast, general = _grown(plan, tensors, True, monkeypatch), _grown(plan, tensors, False, monkeypatch)
        assert fast.keys() == general.keys()
        for name in fast:
            assert fast[name].dtype == general[name].dtype and torch.equal(fast[name], general[name]), (keys, name)
        for recipe in ("asymmetric", "copy", "drop", "asymmetric-scaled", "scaled"):
            for name, spec in plan.tensors.items():
                state = tensors[spec.source_name].abs()
                grown = [grow_state("exp_avg_sq", state, spec, plan.channels, recipe, "AdamW")]
                with monkeypatch.context() as m:
                    m.setattr(surgery, "_fills_in_place", lambda *args: False)
                    grown.append(grow_state("exp_avg_sq", state, spec, plan.channels, recipe, "AdamW"))
                assert torch.equal(*grown), (keys, recipe, name)


def test_the_in_place_fill_is_taken_for_a_plain_width_growth(monkeypatch):
    """Not a test that cannot fail: the in-place path must be the one a copy-copy width growth runs."""
    plan = plan_growth(llama_config(), GrowthStage(1, n_embd=64, intermediate_size=128))
    calls = []
    real = surgery._grow_in_place
    monkeypatch.setattr(surgery, "_grow_in_place", lambda *a: calls.append(a[1].name) or real(*a))
    tensors = {spec.source_name: torch.randn(spec.old_shape) for spec in plan.tensors.values()}
    surgery.grow_tensors(plan, tensors)
    assert set(calls) == set(plan.tensors)
