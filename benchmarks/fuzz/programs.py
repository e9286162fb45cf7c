"""Growth programs: the block families' tiny configs and the seeded draw of a program and its stages."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from litgpt import Config

VOCAB = 64
TOKENS = 8  # sequence length of the logits compared (block sizes are >= 8)
RTOL = 1e-4
TWIN_EVERY = 3  # determinism and rollback() on every 3rd stage, a fault injected on every 6th (each costs a growth)
INITS = ("copy-copy", "copy-random", "copy-zero", "random-copy", "random-random", "random-zero", "zero-copy",
         "zero-random")
OPTIMIZER_STATES = ("asymmetric", "copy", "drop", "asymmetric-scaled", "scaled")
OPTIMIZERS = ("none", "adamw", "grouped-adamw", "sgd-momentum")
FREEZES = ("none", "none", "block0", "embeddings", "norms", "random")


# ------------------------------------------------------------------------------------------------ families
def _base(rng: random.Random) -> dict[str, Any]:
    n_head = rng.choice((2, 4))
    n_embd = rng.choice((16, 32)) if n_head == 2 else 32
    return dict(block_size=16, n_layer=rng.choice((1, 2, 2, 2, 3)), n_embd=n_embd, n_head=n_head,
                n_query_groups=rng.choice([g for g in (1, 2, 4) if n_head % g == 0]), vocab_size=VOCAB,
                padded_vocab_size=VOCAB, intermediate_size=rng.choice((32, 48)), mlp_class_name="LLaMAMLP",
                norm_class_name="RMSNorm", bias=False, parallel_residual=False,
                rotary_percentage=rng.choice((1.0, 1.0, 0.5)))


def _llama(rng):
    kw = dict(_base(rng), name="llama-tiny")
    if rng.random() < 0.25:  # inert on a dense model; dense -> MoE carries it
        kw["routed_scaling_factor"] = rng.choice((0.5, 2.5))
    return kw


def _neox(rng):
    return dict(_base(rng), name="neox-tiny", mlp_class_name="GptNeoxMLP", norm_class_name="LayerNorm", bias=True,
                lm_head_bias=True, parallel_residual=True, rotary_percentage=rng.choice((0.25, 0.5)))


def _falcon(rng):
    return dict(_base(rng), name="falcon-tiny", mlp_class_name="GptNeoxMLP", norm_class_name="LayerNorm",
                parallel_residual=True, shared_attention_norm=True)


def _qwen(rng):
    return dict(_base(rng), name="qwen-tiny", attn_bias=True)


def _qknorm(rng):
    return dict(_base(rng), name="qknorm-tiny", norm_qk=True, norm_qk_type="default")


def _olmo2(rng):
    return dict(_base(rng), name="olmo2-tiny", norm_qk=True, norm_qk_type="olmo2")


def _olmo(rng):
    return dict(_base(rng), name="OLMo-tiny", norm_class_name="LayerNorm")


def _gemma(rng):
    kw = dict(_base(rng), name="Gemma-tiny", head_size=rng.choice((8, 16)), mlp_class_name="GemmaMLP",
              gelu_approximate="tanh", scale_embeddings=True, post_attention_norm=True, post_mlp_norm=True,
              attention_logit_softcapping=50.0, final_logit_softcapping=30.0)
    if rng.random() < 0.5:
        kw.update(sliding_window_size=4, sliding_window_indices=[rng.randint(0, 1) for _ in range(kw["n_layer"])])
    return kw


def _gemma3(rng):
    kw = _gemma(rng)
    n = kw["n_layer"]
    kw.update(name="Gemma-3-tiny", rope_local_base_freq=100.0, rope_indices=[rng.randint(0, 1) for _ in range(n)],
              sliding_window_size=4, sliding_window_indices=[rng.randint(0, 1) for _ in range(n)])
    return kw


def _moe(rng):
    kw = dict(_base(rng), name="moe-tiny", mlp_class_name="LLaMAMoE", moe_intermediate_size=rng.choice((8, 16)),
              n_expert=rng.choice((2, 4)), n_expert_per_token=1)
    kw["n_expert_per_token"] = rng.choice([k for k in (1, 2) if k <= kw["n_expert"]])
    if rng.random() < 0.5:
        kw["n_shared_expert"] = rng.choice((1, 2))
    if kw["n_layer"] > 1 and rng.random() < 0.5:
        kw["first_k_dense_replace"] = 1
    if rng.random() < 0.4:
        kw["routed_scaling_factor"] = rng.choice((0.5, 2.5))
    return kw


def _moe_grouped(rng):
    kw = _moe(rng)
    kw.update(name="moe-grouped-tiny", n_expert=4, n_expert_per_token=rng.choice((1, 2)), n_expert_groups=2,
              n_topk_groups=rng.choice((1, 1, 2)), n_topk_scores_per_group=rng.choice((1, 2)),
              norm_topk_prob=rng.random() < 0.7)
    return kw


FAMILIES: dict[str, Callable[[random.Random], dict[str, Any]]] = {
    "llama": _llama, "neox": _neox, "falcon": _falcon, "qwen": _qwen, "qknorm": _qknorm, "olmo2": _olmo2,
    "olmo": _olmo, "gemma": _gemma, "gemma3": _gemma3, "moe": _moe, "moe-grouped": _moe_grouped,
}
FAMILY_NAMES = tuple(FAMILIES)


# ------------------------------------------------------------------------------------------------ programs
@dataclass
class Program:
    """One fuzz case: the model (config fields, tied, frozen set, optimizer) and its stages (plain dicts)."""

    seed: int
    family: str
    config: dict[str, Any]
    tied: bool = False
    freeze: str = "none"
    optimizer: str = "none"
    bias: str = "zero"  # a grouped router's e_score_correction_bias: zero, positive or signed
    stages: list[dict[str, Any]] | None = None  # None: drawn while the program runs (from the seed)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def draw_program(seed: int) -> Program:
    """The model part of seed ``seed``'s program (its stages are drawn as it runs, from the grown configs)."""
    rng = random.Random(seed)
    family = FAMILY_NAMES[seed % len(FAMILY_NAMES)]
    config = FAMILIES[family](rng)
    return Program(seed=seed, family=family, config=config, tied=rng.random() < 0.2, freeze=rng.choice(FREEZES),
                   optimizer=rng.choice(OPTIMIZERS), bias=rng.choice(("zero", "positive", "signed", "signed")))


def _ratio_size(rng: random.Random, old: int, step: int) -> int:
    """A larger size: an even (x2), odd (x3) or non-integer (x1.5, + step) ratio."""
    choice = rng.choice(("x2", "x2", "x3", "x1.5", "plus"))
    if choice == "x2":
        return 2 * old
    if choice == "x3":
        return 3 * old
    if choice == "x1.5" and old % 2 == 0 and (old // 2) % step == 0:
        return old + old // 2
    return old + step


def _recipe_keys(rng: random.Random, keys: dict[str, Any]) -> None:
    if rng.random() < 0.15:
        keys["recipe"] = rng.choice(("paper", "random-zero", "wsd", "recommended"))
    if rng.random() < 0.8:
        keys["init"] = rng.choice(INITS)
    if rng.random() < 0.25:
        keys["rms_preserving"] = False
    if rng.random() < 0.5:
        keys["optimizer_state"] = rng.choice(OPTIMIZER_STATES)
    if rng.random() < 0.15:
        keys["split"] = rng.choice(("uneven", "random"))
    if rng.random() < 0.1:
        keys["perturb"] = 0.01
    if rng.random() < 0.1:
        keys["rewarmup_ratio"] = None


def draw_stage(rng: random.Random, config: Config, index: int) -> dict[str, Any]:
    """Stage ``index`` of a program on a model of ``config``: 1-3 axes, their sizes, recipe keys."""
    keys: dict[str, Any] = {}
    moe = config.mlp_class_name == "LLaMAMoE"
    axes = ["n_embd", "intermediate_size", "heads", "depth", "experts", "target"]
    if moe:
        axes += ["moe_intermediate_size", "experts"]  # the experts axis twice as often on MoE models
    chosen = rng.sample(axes, rng.choice((1, 1, 2, 3)))
    if "target" in chosen and rng.random() < 0.7:
        chosen = ["target"]
    for axis in chosen:
        if axis == "n_embd":
            keys["n_embd"] = _ratio_size(rng, config.n_embd, 8)
        elif axis == "intermediate_size":
            keys["intermediate_size"] = _ratio_size(rng, config.intermediate_size, 8)
        elif axis == "moe_intermediate_size":
            keys["moe_intermediate_size"] = _ratio_size(rng, config.moe_intermediate_size, 4)
        elif axis == "heads":
            if rng.random() < 0.7:
                keys["n_head"] = _ratio_size(rng, config.n_head, config.n_query_groups)
            if rng.random() < 0.5 or "n_head" not in keys:
                groups = config.n_query_groups
                keys["n_query_groups"] = rng.choice((2 * groups, groups + 1, groups))
        elif axis == "depth":
            _depth_keys(rng, config, keys)
        elif axis == "experts":
            _expert_keys(rng, config, keys)
        elif axis == "target":
            keys.pop("n_embd", None)
            keys["model_config"] = _target(rng, config)
    for key in [k for k in keys if k.startswith("_")]:
        keys.pop(key)
    _recipe_keys(rng, keys)
    return keys


def _depth_keys(rng: random.Random, config: Config, keys: dict[str, Any]) -> None:
    L = config.n_layer
    n_new = rng.choice((L + 1, 2 * L, 3 * L, L + 2))
    how = rng.random()
    if how < 0.2:  # a depth_map: each old block once, in order (first occurrences), then random repeats
        order = list(range(L))
        extra = [rng.randrange(L) for _ in range(n_new - L)]
        grown = []
        for block in order:
            grown.append(block)
            grown.extend(e for e in extra if e == block and rng.random() < 0.5)
        grown.extend([rng.randrange(L) for _ in range(n_new - len(grown))])
        keys["depth_map"] = grown
    else:
        keys["n_layer"] = n_new
        if rng.random() < 0.7:
            keys["depth_order"] = rng.choice(("stack", "interleave", "middle"))
    if rng.random() < 0.6:
        keys["depth_init"] = rng.choice(("copy-zero", "copy", "random-zero"))
    if rng.random() < 0.1:
        keys["depth_scaling"] = "sqrt"


def _expert_keys(rng: random.Random, config: Config, keys: dict[str, Any]) -> None:
    if config.mlp_class_name == "LLaMAMoE":
        E, K = config.n_expert, config.n_expert_per_token
        m = rng.choice((2, 2, 3))
        keys["n_expert"] = rng.choice((m * E, E + 1)) if rng.random() < 0.8 else m * E
        if rng.random() < 0.7:
            keys["n_expert_per_token"] = m * K if keys["n_expert"] == m * E else K + 1
        if config.first_k_dense_replace is not None and rng.random() < 0.2:
            keys["first_k_dense_replace"] = config.first_k_dense_replace
    elif config.mlp_class_name == "LLaMAMLP":
        keys["mlp_class_name"] = "LLaMAMoE"
        keys["n_expert"] = rng.choice((2, 4))
        keys["n_expert_per_token"] = rng.choice((1, 2))
        if config.n_layer > 1 and rng.random() < 0.3:
            keys["first_k_dense_replace"] = rng.randrange(config.n_layer)
        if rng.random() < 0.2:
            keys["router_init"] = "zero"
    else:  # GptNeoxMLP / GemmaMLP: refused (dense -> MoE needs LLaMAMLP)
        keys["n_expert"] = 4
        keys["mlp_class_name"] = "LLaMAMoE"
    if rng.random() < 0.3:
        keys["expert_init"] = rng.choice(("copy", "drop-upcycle", "random"))


def _target(rng: random.Random, config: Config) -> dict[str, Any]:
    """A ``model_config`` target: the model's fields with some sizes larger (sometimes another ``block_size``)."""
    target = {k: v for k, v in dataclasses.asdict(config).items() if k not in ("rope_n_elem", "hf_config")}
    grown = rng.sample(["n_embd", "intermediate_size", "n_layer", "n_head"], rng.choice((1, 2)))
    for size in grown:
        if size == "n_layer":
            target["n_layer"] = config.n_layer + 1
            for per_block in ("sliding_window_indices", "rope_indices"):
                if target.get(per_block) is not None:  # stack: the new block copies block 0
                    target[per_block] = [*target[per_block], target[per_block][0]]
        elif size == "n_head":
            target["n_head"] = 2 * config.n_head
        else:
            target[size] = 2 * target[size]
    if rng.random() < 0.3:
        target["block_size"] = rng.choice((8, 32))
    return target
