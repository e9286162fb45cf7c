"""Tensor operators: copy / random / zero expansion along one dimension, fan-in scale, norms and embeddings."""

from __future__ import annotations

import pytest
import torch

from lightning_sparkling import fan_in_scale
from lightning_sparkling.growth.operators import (
    TensorStats,
    expand_dim,
    expand_embedding,
    expand_fan_in,
    expand_fan_out,
    expand_norm,
)
from lightning_sparkling.growth.scaling import copy_source_index, make_generator



def _weight(d_out=6, d_in=5, seed=0):
    return torch.randn(d_out, d_in, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("dim", [0, 1, -1, -2])
def test_copy_appends_source_slices(dim):
    w = _weight()
    n = w.shape[dim]
    src = torch.tensor([2, 0, 2])
    out = expand_dim(w, dim, src, "copy")
    assert out.shape[dim] == n + 3 and out.shape[1 - dim % 2] == w.shape[1 - dim % 2]
    assert torch.equal(out.narrow(dim, 0, n), w)
    for j, s in enumerate(src.tolist()):
        assert torch.equal(out.select(dim, n + j), w.select(dim, s))


def test_zero_appends_zeros_and_keeps_input():
    w = _weight()
    before = w.clone()
    out = expand_dim(w, 1, torch.tensor([0, 1, 2, 3]), "zero")
    assert torch.equal(w, before)  # input untouched
    assert out.shape == (6, 9)
    assert torch.equal(out[:, :5], w)
    assert torch.count_nonzero(out[:, 5:]) == 0


def test_random_matches_the_tensor_distribution():
    g = torch.Generator().manual_seed(0)
    w = 0.3 + 0.05 * torch.randn(256, 128, generator=g)
    out = expand_fan_out(w, torch.arange(256), "random", generator=make_generator(0, "t"))
    new = out[256:]
    assert torch.equal(out[:256], w)
    assert new.mean().item() == pytest.approx(0.3, abs=0.005)
    assert new.std().item() == pytest.approx(0.05, rel=0.05)
    # not copies of old rows
    assert not torch.allclose(new, w)


def test_random_uses_given_stats():
    w = torch.zeros(4, 3)
    out = expand_dim(w, 0, torch.arange(2000) % 4, "random", generator=make_generator(1),
                     stats=TensorStats(mean=2.0, std=0.5))
    assert out[4:].mean().item() == pytest.approx(2.0, abs=0.05)
    assert out[4:].std().item() == pytest.approx(0.5, rel=0.1)


def test_random_is_deterministic_by_generator_and_leaves_global_rng():
    w = _weight()
    src = torch.arange(5)
    state = torch.get_rng_state()
    a = expand_fan_in(w, src, "random", 0.5, generator=make_generator(3, "w"))
    torch.manual_seed(12345)  # the global RNG plays no part
    b = expand_fan_in(w, src, "random", 0.5, generator=make_generator(3, "w"))
    c = expand_fan_in(w, src, "random", 0.5, generator=make_generator(4, "w"))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)
    torch.set_rng_state(state)
    expand_fan_in(w, src, "random", 0.5, generator=make_generator(3, "w"))
    assert torch.equal(torch.get_rng_state(), state)


def test_random_needs_generator():
    with pytest.raises(ValueError, match="generator"):
        expand_dim(_weight(), 0, torch.tensor([0]), "random")


@pytest.mark.parametrize("mode", ["ones", "copy-copy", "", "Random"])
def test_unknown_mode_raises(mode):
    with pytest.raises(ValueError, match="mode"):
        expand_dim(_weight(), 0, torch.tensor([0]), mode)


@pytest.mark.parametrize("mode", ["copy", "random", "zero"])
def test_fan_in_scales_the_whole_weight(mode):
    w = _weight(4, 6)
    src = copy_source_index(6, 10, make_generator(0))
    alpha = fan_in_scale(6, 10, init=f"copy-{mode}")
    unscaled = expand_dim(w, 1, src, mode, generator=make_generator(9))
    out = expand_fan_in(w, src, mode, alpha, generator=make_generator(9))
    assert out.shape == (4, 10)
    torch.testing.assert_close(out, alpha * unscaled, rtol=1e-6, atol=0)
    torch.testing.assert_close(out[:, :6], alpha * w, rtol=1e-6, atol=0)  # old columns scaled too


def test_copy_copy_fan_in_fan_out_pair_is_function_preserving():
    """A fan-out layer A (new rows copied) feeding a fan-in layer B (new columns copied, scaled alpha) computes the
    same function at an integer ratio, and is off at a non-integer one."""
    g = torch.Generator().manual_seed(0)
    a, b, x = torch.randn(8, 5, generator=g), torch.randn(3, 8, generator=g), torch.randn(5, 100, generator=g)
    for d_new, preserved in ((16, True), (24, True), (12, False)):
        src = copy_source_index(8, d_new, make_generator(0))
        a2 = expand_fan_out(a, src, "copy")
        b2 = expand_fan_in(b, src, "copy", fan_in_scale(8, d_new, init="copy-copy"))
        same = torch.allclose(b2 @ torch.tanh(a2 @ x), b @ torch.tanh(a @ x), atol=1e-5)
        assert same is preserved, d_new


def test_norm_and_embedding_expansion():
    gamma = torch.tensor([1.0, 2.0, 3.0])
    src = torch.tensor([2, 2, 0])
    assert expand_norm(gamma, src, "copy").tolist() == [1.0, 2.0, 3.0, 3.0, 3.0, 1.0]
    assert expand_norm(gamma, src, "zero").tolist() == [1.0, 2.0, 3.0, 0.0, 0.0, 0.0]
    emb = _weight(10, 3)
    out = expand_embedding(emb, src, "copy")
    assert out.shape == (10, 6)
    assert torch.equal(out[:, 3:], emb[:, [2, 2, 0]])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("mode", ["copy", "random", "zero"])
def test_dtype_is_kept(dtype, mode):
    w = _weight().to(dtype)
    out = expand_fan_in(w, torch.tensor([0, 1]), mode, 0.5, generator=make_generator(0))
    assert out.dtype == dtype and out.device == w.device
    out = expand_fan_out(w, torch.tensor([0, 1]), mode, generator=make_generator(0))
    assert out.dtype == dtype


def test_random_draws_do_not_depend_on_dtype_beyond_rounding():
    """Random draws come from a float32 CPU sample, cast afterwards: bf16 gives the rounded float32 numbers."""
    w = _weight()
    a = expand_fan_out(w, torch.arange(4), "random", generator=make_generator(0), stats=TensorStats(0.0, 1.0))
    b = expand_fan_out(w.bfloat16(), torch.arange(4), "random", generator=make_generator(0),
                       stats=TensorStats(0.0, 1.0))
    assert torch.equal(a[6:].bfloat16(), b[6:])


def test_tensor_stats():
    s = TensorStats.of(torch.tensor([1.0, 3.0]))
    assert s.mean == pytest.approx(2.0)
    assert s.std == pytest.approx(2**0.5)
    assert TensorStats.of(torch.tensor([5.0])).std == 0.0


@pytest.mark.parametrize("widths", [{"n_embd": 48}, {"intermediate_size": 100},
                                    {"n_embd": 64, "intermediate_size": 96}])
def test_zero_state_growth_fast_path_equals_appending_zeros_dim_by_dim(widths):
    """``grow_tensor(mode="zero")`` (optimizer state) allocates the grown tensor once and copies the old block in; it
    equals appending zero slices dim by dim with :func:`expand_dim`, for every tensor of a model, any widths."""
    from litgpt import GPT

    from lightning_sparkling import GrowthStage
    from lightning_sparkling.growth.plan import plan_growth
    from lightning_sparkling.growth.surgery import grow_tensor

    from _tiny import tiny_config

    config = tiny_config()
    plan = plan_growth(config, GrowthStage(1, **widths), seed=0)
    torch.manual_seed(0)
    state = {n: torch.randn_like(p) for n, p in GPT(config).named_parameters()}
    checked = 0
    for name, spec in plan.tensors.items():
        slow = state[name]
        for d in spec.dims:
            slow = expand_dim(slow, d.dim, plan.channels[d.channel].src, "zero")
        fast = grow_tensor(state[name], spec, plan.channels, mode="zero", scale=1.0)
        assert fast.shape == spec.new_shape and torch.equal(fast, slow), name
        assert fast.data_ptr() != state[name].data_ptr()
        checked += 1
    assert checked >= 6  # 3 MLP tensors per layer at least
