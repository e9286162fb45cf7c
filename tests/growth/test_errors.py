"""The growth layer's refusals carry the stage key they are about (:class:`GrowthError.key`), so the CLI names
``growth.stages[k].<key>`` without reading the message; a refusal about the model or a stage's target as a whole
carries none."""

from __future__ import annotations

import pickle

import pytest
from litgpt import Config

from lightning_sparkling.growth.errors import GrowthError
from lightning_sparkling.growth.plan import plan_growth
from lightning_sparkling.growth.stage import GrowthStage

GQA = dict(n_embd=64, n_head=4, n_query_groups=2, n_layer=2, intermediate_size=128, vocab_size=100,
           mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm", bias=False)
MOE = dict(GQA, n_query_groups=4, mlp_class_name="LLaMAMoE", moe_intermediate_size=32, n_expert=4,
           n_expert_per_token=2)


@pytest.mark.parametrize("model, stage, key", [
    (GQA, dict(n_embd=32), "n_embd"),                                   # shrinks
    (GQA, dict(intermediate_size=256, n_layer=2), "n_layer"),          # does not change
    (GQA, dict(n_head=5), "n_head"),                                    # not a multiple of the groups
    (GQA, dict(n_query_groups=4), "n_query_groups"),                    # fewer query heads per group
    (GQA, dict(moe_intermediate_size=64, intermediate_size=256), "moe_intermediate_size"),  # no experts
    (MOE, dict(intermediate_size=256), "intermediate_size"),            # no dense MLP
    (GQA, dict(depth_map=[0, 1, 2, 0]), "depth_map"),                   # names a block the model lacks
    (GQA, dict(n_expert=8), "n_expert"),                                # no experts to add to
    (MOE, dict(n_expert=8, n_expert_per_token=1), "n_expert_per_token"),
    (GQA, dict(model_config=dict(GQA, n_layer=4), depth_map=[0, 1, 0]), "depth_map"),  # the target's n_layer=4
    (GQA, dict(model_config=dict(GQA, n_embd=32)), None),               # the target as a whole
    (GQA, dict(model_config=dict(GQA, n_layer=4, bias=True)), None),
])
def test_each_refusal_carries_the_key_it_is_about(model, stage, key):
    with pytest.raises(GrowthError) as info:
        plan_growth(Config(**model), GrowthStage(10, **stage))
    assert info.value.key == key, str(info.value)


def test_the_key_survives_pickling_and_is_a_value_error():
    copy = pickle.loads(pickle.dumps(GrowthError("bad", key="n_head")))
    assert (str(copy), copy.key) == ("bad", "n_head") and isinstance(copy, ValueError)
    assert GrowthError("bad").key is None
