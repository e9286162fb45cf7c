"""A heads growth says the same thing everywhere (issue 40): under an ``init`` whose fan-out side is not ``copy`` new
heads start random, so the growth line names no source head, and the tensors and the symmetry metric find no copy."""

from __future__ import annotations

import pytest
from conftest import llama_config

from lightning_sparkling import GrowthStage, plan_growth
from lightning_sparkling.growth.axes import size_details
from lightning_sparkling.growth.symmetry import copy_specs


@pytest.mark.parametrize(("init", "line", "copies"), [
    ("copy-copy", "new q 1<-0, 3<-1, 5<-2, 7<-3; moved q 1->2, 2->4, 3->6", True),
    ("random-zero", "new q 1, 3, 5, 7 (random); moved q 1->2, 2->4, 3->6", False),
])
def test_heads_growth_line_agrees_with_the_tensors_it_grows(init, line, copies):
    config = llama_config(n_embd=64, n_head=4, n_query_groups=4, head_size=16)
    plan = plan_growth(config, GrowthStage(5, n_head=8, n_query_groups=4, init=init))
    assert size_details(plan)["n_head"].endswith(line)
    qkv = plan.tensors["transformer.h.0.attn.qkv.weight"]
    assert (qkv.dims[0].mode == "copy") is copies
    copied = [name for spec in copy_specs(plan).values() for name, _ in spec.tensors if ".attn." in name]
    assert bool(copied) is copies
