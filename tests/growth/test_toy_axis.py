"""Issue 47: a growth axis a user adds is one module and one registration (``tests/_rope_axis_source.py``: a toy axis
that grows ``rope_base``, a ``litgpt.Config`` field that is not a shape). Its stage key lives in
``GrowthStage.extra`` and is checked by the axis; ``stage.sizes`` and the map category include it; and a config
change that is not a shape leaves the config-derived buffers (litgpt's RoPE cache) as a fresh ``GPT`` of the grown
config has them. The CLI side (``plugins:``) is ``tests/pretrain/test_cli_plugins.py``."""

from __future__ import annotations

import dataclasses
import importlib
import sys

import pytest
import torch
from _rope_axis_source import ROPE_AXIS
from conftest import llama_config, make_gpt, make_tokens
from litgpt.model import GPT

from lightning_sparkling import GrowthStage, StageError, grow_model, plan_growth
from lightning_sparkling.growth.axes import registered_axes, unregister_axis
from lightning_sparkling.growth.surgery import derived_buffers
from lightning_sparkling.pretrain.advice.measured import classify_category


@pytest.fixture
def rope_axis(tmp_path, monkeypatch):
    """The toy axis' module, written on ``PYTHONPATH`` and imported (which registers it); unregistered after."""
    (tmp_path / "toy_rope_axis.py").write_text(ROPE_AXIS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("toy_rope_axis", None)
    module = importlib.import_module("toy_rope_axis")
    try:
        yield module
    finally:
        unregister_axis(module.ROPE)
        sys.modules.pop("toy_rope_axis", None)


def test_the_toy_axis_key_is_a_stage_key_checked_by_the_axis(rope_axis):
    assert [a.name for a in registered_axes()][-1] == "rope"
    stage = GrowthStage.from_keys(3, rope_base=20000, recipe="paper")
    assert stage.extra == {"rope_base": 20000} and stage.get("rope_base") == 20000
    assert stage.sizes == {"rope_base": 20000}  # the axis' size, with the built-in ones'
    assert GrowthStage.from_keys(3, n_embd=128, rope_base=20000).sizes == {"n_embd": 128, "rope_base": 20000}
    assert classify_category([stage]) == "rope"  # the axis' own name: no labeller of the measured map names it
    assert "rope_base" not in {f.name for f in dataclasses.fields(GrowthStage)}
    with pytest.raises(StageError, match=r"rope_base=-1\): must be a positive integer") as caught:
        GrowthStage.from_keys(3, rope_base=-1)
    assert caught.value.key == "rope_base"
    assert "extra={'rope_base': 20000}" in repr(stage)


def _logits(model: GPT, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(tokens)


@pytest.mark.parametrize("keys", [dict(), dict(n_embd=128, intermediate_size=256)], ids=["alone", "with-width"])
def test_growing_rope_base_rebuilds_the_rope_cache(rope_axis, keys):
    """The grown model computes what a fresh ``GPT`` of the grown config computes with the same weights: its RoPE
    cache is rebuilt from the new ``rope_base`` (not the old one kept), and a rollback puts the old cache back."""
    config = llama_config()
    model = make_gpt(config)
    tokens = make_tokens(config)
    before, old_cos = _logits(model, tokens), model.cos
    stage = GrowthStage.from_keys(0, rope_base=4 * int(config.rope_base), recipe="paper", **keys)
    assert plan_growth(config, stage).new_config.rope_base == 4 * config.rope_base
    result = grow_model(model, stage)
    assert model.config.rope_base == 4 * config.rope_base
    fresh = GPT(model.config)
    fresh.load_state_dict(model.state_dict(), strict=True)
    assert torch.equal(model.cos, fresh.cos) and torch.equal(model.sin, fresh.sin)
    assert not torch.equal(model.cos, old_cos)
    assert torch.equal(_logits(model, tokens), _logits(fresh, tokens))
    assert not torch.allclose(_logits(model, tokens), before, atol=1e-4)  # the base did change the function
    result.rollback()
    assert model.cos is old_cos and torch.equal(_logits(model, tokens), before)


def test_an_unchanged_rope_cache_is_left_as_it_is():
    """A growth that changes no RoPE field keeps the very buffers (bit for bit what they were)."""
    config = llama_config()
    model = make_gpt(config)
    cos = model.cos
    grow_model(model, GrowthStage(0, n_embd=2 * config.n_embd, recipe="paper"))
    assert model.cos is cos and derived_buffers(model, config) == {}
