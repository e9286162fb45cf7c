"""The paper's closed forms (``fan_in_scale``) and the copy index maps (``copy_source_index``)."""

from __future__ import annotations

import math

import pytest
import torch

from lightning_sparkling import copy_source_index, fan_in_scale
from lightning_sparkling.growth.scaling import derive_seed, make_generator, parse_init

MODES = ("copy", "random", "zero")
ALL_PAIRS = [f"{a}-{b}" for a in MODES for b in MODES]
GRID = [(d, d_new) for d in (1, 2, 3, 7, 16, 64, 512) for d_new in
        sorted({d + 1, d + d // 3 + 1, 3 * d // 2 + 1, 2 * d - 1, 2 * d, 2 * d + 1, 3 * d, 5 * d + 3, 8 * d})
        if d_new > d]



def paper_alpha(d: int, d_new: int, init: str) -> float:
    """Paper Eq. 9-12 (section 3.2.3), written in terms of d and d'."""
    fan_out, fan_in = init.split("-")
    if fan_out == "copy" and fan_in == "copy":  # both sides copied (Eq. 12)
        if d_new <= 2 * d:
            return math.sqrt(d / (3 * d_new - 2 * d))
        return d / d_new
    return math.sqrt(d / d_new)  # random, one side copied, a zero side treated as random (Eq. 10)


@pytest.mark.parametrize("init", ALL_PAIRS)
def test_fan_in_scale_matches_closed_forms_on_grid(init):
    for d, d_new in GRID:
        assert fan_in_scale(d, d_new, init=init) == pytest.approx(paper_alpha(d, d_new, init), rel=1e-12), (d, d_new)
        assert fan_in_scale(d, d_new, init=init, rms_preserving=False) == 1.0


def test_fan_in_scale_default_is_copy_copy():
    assert fan_in_scale(512, 768) == pytest.approx(math.sqrt(512 / (3 * 768 - 1024)))
    assert fan_in_scale(512, 1024) == pytest.approx(0.5)
    assert fan_in_scale(512, 2048) == pytest.approx(0.25)


@pytest.mark.parametrize("c", [0.01, 0.125, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 7.0])
def test_copy_copy_matches_paper_c_form(c):
    """Paper Eq. 11: d' = (1 + c) d; alpha = 1 / sqrt(1 + 3c) for c <= 1 and 1 / (1 + c) for c > 1."""
    d = 400
    d_new = round((1 + c) * d)
    assert d_new == pytest.approx((1 + c) * d)
    expected = 1 / math.sqrt(1 + 3 * c) if c <= 1 else 1 / (1 + c)
    assert fan_in_scale(d, d_new, init="copy-copy") == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("k", [2, 3, 4, 8])
def test_copy_copy_is_function_preserving_at_integer_ratio(k):
    """k copies of every term, each scaled by alpha: k * alpha == 1."""
    assert k * fan_in_scale(12, 12 * k, init="copy-copy") == pytest.approx(1.0, rel=1e-12)


def test_copy_copy_is_continuous_at_twice_the_width():
    d = 96
    below = fan_in_scale(d, 2 * d, init="copy-copy")
    above = fan_in_scale(d, 2 * d + 1, init="copy-copy")
    assert below == pytest.approx(0.5)
    assert above == pytest.approx(d / (2 * d + 1))
    assert abs(below - above) < 0.01


@pytest.mark.parametrize("d_in,d_in_new", [(0, 4), (-1, 4), (4, 4), (8, 4), (4, 0), (4, -8), (0, 0)])
def test_fan_in_scale_refuses_non_growing_widths(d_in, d_in_new):
    for rms_preserving in (True, False):
        with pytest.raises(ValueError, match="d_in"):
            fan_in_scale(d_in, d_in_new, rms_preserving=rms_preserving)


@pytest.mark.parametrize("d_in,d_in_new", [(4.0, 8), (4, 8.0), ("4", 8)])
def test_fan_in_scale_refuses_non_integers(d_in, d_in_new):
    with pytest.raises(ValueError, match="d_in"):
        fan_in_scale(d_in, d_in_new)


@pytest.mark.parametrize("init", ["copy", "copy-", "-copy", "copy-copy-copy", "copy_copy", "Copy-copy", "ones-copy",
                                  "copy-xavier", "", None, 3])
def test_unknown_init_raises(init):
    with pytest.raises(ValueError, match="init"):
        fan_in_scale(4, 8, init=init)
    with pytest.raises(ValueError, match="init"):
        parse_init(init)


def test_parse_init_splits_the_pair():
    assert parse_init("zero-copy") == ("zero", "copy")
    assert parse_init("random-zero") == ("random", "zero")


# ---------------------------------------------------------------- copy_source_index


@pytest.mark.parametrize("d,k", [(1, 2), (4, 2), (7, 3), (64, 2), (64, 3), (10, 5)])
def test_copy_source_index_tiles_at_integer_ratio(d, k):
    src = copy_source_index(d, k * d)  # no generator needed: nothing random
    assert src.dtype == torch.long
    assert src.tolist() == list(range(d)) * (k - 1)
    # the generator, when given, does not change an integer-ratio map
    assert torch.equal(copy_source_index(d, k * d, make_generator(3, "x")), src)


@pytest.mark.parametrize("d,d_new", [(512, 768), (64, 200), (16, 50), (32, 48), (5, 6), (5, 9), (3, 100)])
def test_copy_source_index_non_integer_ratio(d, d_new):
    src = copy_source_index(d, d_new, make_generator(0, "axis"))
    n_new = d_new - d
    full, remainder = divmod(n_new, d)
    assert src.shape == (n_new,)
    assert src.dtype == torch.long
    assert int(src.min()) >= 0 and int(src.max()) < d
    counts = torch.bincount(src, minlength=d)
    # total appearances (itself + copies) of every old channel is at most ceil(d_new / d), at least floor
    appearances = 1 + counts
    assert int(appearances.max()) <= math.ceil(d_new / d)
    assert int(appearances.min()) >= d_new // d
    # every channel is copied `full` times, then `remainder` distinct extra channels once more
    assert int((counts == full + 1).sum()) == remainder
    assert int((counts == full).sum()) == d - remainder
    # the part past the full tiles has no duplicates
    tail = src[full * d:]
    assert tail.numel() == remainder
    assert len(set(tail.tolist())) == remainder
    assert src[: full * d].tolist() == list(range(d)) * full


def test_copy_source_index_is_seeded():
    a = copy_source_index(64, 200, make_generator(0, "axis", "n_embd"))
    b = copy_source_index(64, 200, make_generator(0, "axis", "n_embd"))
    assert torch.equal(a, b)
    # does not depend on (or consume) the global RNG
    torch.manual_seed(1)
    c = copy_source_index(512, 768, make_generator(7))
    torch.manual_seed(2)
    state = torch.get_rng_state()
    d = copy_source_index(512, 768, make_generator(7))
    assert torch.equal(c, d)
    assert torch.equal(state, torch.get_rng_state())


def test_copy_source_index_different_seeds_give_different_maps():
    maps = {tuple(copy_source_index(512, 768, make_generator(seed)).tolist()) for seed in range(5)}
    assert len(maps) == 5
    maps = {tuple(copy_source_index(64, 200, make_generator(0, "axis", name)).tolist())
            for name in ("n_embd", "intermediate_size", "moe_intermediate_size")}
    assert len(maps) == 3


def test_copy_source_index_remainder_is_spread_over_all_channels():
    """The extra sources are drawn at random without replacement, not always the first channels."""
    hits = torch.zeros(16, dtype=torch.long)
    for seed in range(200):
        hits += torch.bincount(copy_source_index(16, 20, make_generator(seed)), minlength=16)
    assert int(hits.min()) > 0  # every channel gets picked sometimes
    assert hits.float().std() / hits.float().mean() < 0.35  # roughly uniform (expected 50 each)


def test_copy_source_index_needs_generator_for_non_integer_ratio():
    with pytest.raises(ValueError, match="generator"):
        copy_source_index(4, 6)


@pytest.mark.parametrize("d,d_new", [(0, 4), (4, 4), (8, 4), (-2, 4)])
def test_copy_source_index_refuses_non_growing(d, d_new):
    with pytest.raises(ValueError, match="d_new"):
        copy_source_index(d, d_new, make_generator(0))


def test_derive_seed_depends_on_every_key():
    base = derive_seed(0, "stage", 0, "axis", "n_embd")
    assert base == derive_seed(0, "stage", 0, "axis", "n_embd")
    others = {derive_seed(1, "stage", 0, "axis", "n_embd"), derive_seed(0, "stage", 1, "axis", "n_embd"),
              derive_seed(0, "stage", 0, "axis", "intermediate_size")}
    assert base not in others and len(others) == 3
    assert 0 <= base < 2**63
