"""Behaviours of depth and heads growth that no other test pinned (issue 31's mutation audit): the per-block config
lists follow the blocks' sources after an ``interleave`` or ``middle`` growth; at a non-integer group ratio a new
key/value group's query heads copy the heads of the group it copies; ``head_layout`` refuses fewer groups;
``describe_heads`` lists the moved heads and only those."""

from __future__ import annotations

import pytest
import torch

from lightning_sparkling import GrowthStage, grow_model
from lightning_sparkling.growth.depth_maps import depth_change, depth_config_values
from lightning_sparkling.growth.head_layout import describe_heads, head_layout

from conftest import llama_config, make_gpt, make_tokens


# ------------------------------------------------------------------------------------------------------------ depth
@pytest.mark.parametrize("order, indicator, expected", [
    ("interleave", [1, 0], [1, 1, 0, 0]),        # [a, b] -> [a, a', b, b']
    ("middle", [1, 0], [1, 1, 0, 0]),
    ("middle", [1, 0, 1, 0], [1, 0, 0, 1, 0]),   # [a, b, c, d] -> [a, b, b', c, d]
    ("interleave", [1, 0, 0], [1, 1, 0, 0, 0]),  # [a, b, c] -> [a, a', b, c, c']
    ("stack", [1, 0, 0], [1, 0, 0, 1, 0]),       # [a, b, c] -> [a, b, c, a', b']
])
def test_per_block_lists_follow_the_blocks_sources(order, indicator, expected):
    old, new = len(indicator), len(expected)
    config = llama_config(n_layer=old, sliding_window_size=4, sliding_window_indices=list(indicator),
                          rope_indices=[1 - i for i in indicator])
    values = depth_config_values(config, depth_change(old, new, order, "copy-zero"))
    assert values["n_layer"] == new
    assert values["sliding_window_indices"] == expected
    assert values["rope_indices"] == [1 - i for i in expected]


@pytest.mark.parametrize("order", ["interleave", "middle"])
@pytest.mark.parametrize("key", ["sliding_window_indices", "rope_indices"])
def test_a_moved_block_keeps_its_indicator_so_the_grown_model_computes_the_same(order, key):
    """[a, b] grown 2 -> 4 by interleave/middle: old block 1 moves to position 2, and its sliding window (or its
    RoPE base) moves with it: the grown model (copy-zero) computes the same logits, and its config says [a, a, b, b]."""
    extra = dict(sliding_window_size=3, sliding_window_indices=[1, 0]) if key == "sliding_window_indices" else \
        dict(rope_indices=[1, 0], rope_local_base_freq=100.0)  # block 0 local RoPE, block 1 global (Gemma 3)
    config = llama_config(n_layer=2, **extra)
    model = make_gpt(config)
    x = make_tokens(config)
    with torch.no_grad():
        before = model(x)
    grow_model(model, GrowthStage(0, n_layer=4, depth_order=order))
    assert list(getattr(model.config, key)) == [1, 1, 0, 0]
    with torch.no_grad():
        torch.testing.assert_close(model(x), before, atol=1e-5, rtol=0)


# ------------------------------------------------------------------------------------------------------------ heads
def test_at_a_non_integer_group_ratio_a_new_group_s_heads_copy_the_group_it_copies():
    """6 heads in 2 groups -> 12 heads in 3 groups (1.5x groups): with seed 1 the new group 2 copies group 1, so its
    four query heads copy group 1's heads 3, 4, 5 (and 3 again): they attend with the keys and values they had."""
    layout = head_layout(6, 2, 12, 3, torch.Generator().manual_seed(1))
    assert layout.kv_source == (0, 1, 1) and layout.kv_fresh == (False, False, True)
    assert layout.q_source == (0, 1, 2, 0, 3, 4, 5, 3, 3, 4, 5, 3)
    assert layout.q_fresh == (False, False, False, True, False, False, False, True, True, True, True, True)
    # and with the seed that draws group 0, group 2's heads copy group 0's
    drawn = {head_layout(6, 2, 12, 3, torch.Generator().manual_seed(s)).kv_source[2] for s in range(8)}
    assert drawn == {0, 1}
    for seed in range(8):
        layout = head_layout(6, 2, 12, 3, torch.Generator().manual_seed(seed))
        src = layout.kv_source[2]
        assert layout.q_source[8:] == (3 * src, 3 * src + 1, 3 * src + 2, 3 * src)


@pytest.mark.parametrize("old_h, old_g, new_h, new_g", [(4, 4, 8, 2), (4, 2, 4, 1), (8, 4, 8, 2)])
def test_head_layout_refuses_fewer_key_value_groups(old_h, old_g, new_h, new_g):
    with pytest.raises(ValueError, match=rf"heads can only grow: n_head {old_h} -> {new_h}, n_query_groups "
                                         rf"{old_g} -> {new_g}"):
        head_layout(old_h, old_g, new_h, new_g)


@pytest.mark.parametrize("args, expected", [
    ((2, 1, 4, 1), "new q 2<-0, 3<-1"),                                 # nothing moves: no "moved" part
    ((4, 2, 8, 2), "new q 2<-0, 3<-1, 6<-2, 7<-3; moved q 2->4, 3->5"),  # group 1's heads move behind group 0's copies
    ((4, 2, 8, 4), "new q 4<-0, 5<-1, 6<-2, 7<-3; new kv 2<-0, 3<-1"),  # new groups appended: no head moves
])
def test_describe_heads_lists_the_new_and_the_moved_heads_only(args, expected):
    assert describe_heads(head_layout(*args)) == expected
