"""Growth fuzzer: seeded random growth programs over every block family, checked against the growth contract.

A *program* is a tiny litgpt config of one block family (llama, NeoX, Falcon, Qwen, q/k-norm, OLMo 2, OLMo, Gemma,
Gemma 3, MoE, MoE with ``GroupedTopkRouter``), tied or not, some parameters frozen, an optimizer with state (or
none), and 1-3 :class:`~lightning_sparkling.GrowthStage` s drawn over every axis (widths, heads, depth, experts,
dense -> MoE, ``model_config`` targets) with random init pairs and recipe keys. Each stage is grown with
:func:`~lightning_sparkling.grow_model` and checked:

- ``exact``: the logits stay within 1e-4 (relative to their largest) where the contract makes the growth exact
  (:func:`contract_exact`: copy-copy RMS-preserving widths and heads at integer ratios, ``copy-zero`` /
  ``random-zero`` depth without ``depth_scaling``, copied experts at ``m x E`` / ``m x K``, dense -> MoE copies)
  or where the growth log says ``function kept`` (``claim``);
- ``refusal``: a ``GrowthError`` / ``ValueError`` with a message leaves the model bit-identical (parameters,
  buffers, config, ``requires_grad``); any other exception is a ``crash``;
- ``reload``: ``GPT(model.config)`` loads the state dict strictly, has the same buffers and ``max_seq_length``,
  gives the same logits, and the grown model runs a ``block_size``-long sequence;
- ``count``: the parameter counts of every phase equal ``estimate_compute``'s;
- ``determinism``: growing a copy of the model with the same seed gives bit-identical weights;
- ``requires_grad``: every parameter keeps its source's flag (a new entry: the tensor it is planned from);
- ``rollback``: a fault injected at the end of the swap, and ``GrowthResult.rollback()``, restore everything;
- ``optimizer``: the patch of AdamW, grouped AdamW or SGD with momentum is right per element (old entries keep
  their state, new entries follow ``optimizer_state``; new blocks join their source's group) and its undo
  restores the optimizer.

Each failure comes with a minimal reproduction (:func:`shrink`: the fewest stages and keys that still fail).

Example::

    python benchmarks/fuzz_growth.py --seeds 0:200                        # the rate, counts and failures
    python benchmarks/fuzz_growth.py --seeds 0:20000 --out benchmarks/results/fuzz_growth.json
    python benchmarks/fuzz_growth.py --repro '{"family": ..., "config": ..., "stages": [...]}'
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import math
import random
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch
from litgpt import GPT, Config

from lightning_sparkling import GrowthError, GrowthStage, grow_model
from lightning_sparkling.growth import surgery
from lightning_sparkling.growth.compute import estimate_compute
from lightning_sparkling.growth.optim_state import plan_optimizer_patch

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


# ------------------------------------------------------------------------------------------------ the model
def build_model(program: Program) -> GPT:
    """``GPT(config)`` with litgpt's init, random norm weights and biases, the router bias, tied and frozen."""
    config = Config(**program.config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(program.seed)
        model = GPT(config)
        model.apply(model._init_weights)
    g = torch.Generator().manual_seed(program.seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            module = model.get_submodule(name.rsplit(".", 1)[0])
            noise = torch.randn(p.shape, generator=g)
            if name.endswith("bias"):
                p.copy_(0.1 * noise)
            elif p.ndim == 1:  # a norm weight; a unit-offset (Gemma) RMSNorm's effective weight is 1 + w
                p.copy_((0.0 if getattr(module, "add_unit_offset", False) else 1.0) + 0.3 * noise)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias") and program.bias != "zero":
                draw = torch.randn(b.shape, generator=g)
                b.copy_(draw.abs() * 0.3 if program.bias == "positive" else draw)  # signed: as load balancing trains it
    if program.tied:
        model.transformer.wte.weight = model.lm_head.weight
    _freeze(model, program.freeze, random.Random(program.seed + 2))
    return model


def _freeze(model: GPT, how: str, rng: random.Random) -> None:
    for name, p in model.named_parameters():
        if how == "block0":
            frozen = name.startswith("transformer.h.0.")
        elif how == "embeddings":
            frozen = name in ("transformer.wte.weight", "lm_head.weight")
        elif how == "norms":
            frozen = p.ndim == 1 and "norm" in name or ".ln_f." in name or name.startswith("transformer.ln_f")
        elif how == "random":
            frozen = rng.random() < 0.3
        else:
            frozen = False
        p.requires_grad_(not frozen)


def build_optimizer(model: GPT, kind: str) -> torch.optim.Optimizer | None:
    trainable = [p for p in model.parameters() if p.requires_grad]
    if kind == "none" or not trainable:
        return None
    if kind == "adamw":
        return torch.optim.AdamW(trainable, lr=1e-2, weight_decay=0.1)
    if kind == "grouped-adamw":
        decay = [p for p in trainable if p.ndim >= 2]
        rest = [p for p in trainable if p.ndim < 2]
        groups = [g for g in ({"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0})
                  if g["params"]]
        return torch.optim.AdamW(groups, lr=1e-2)
    return torch.optim.SGD(trainable, lr=1e-2, momentum=0.9)


def train_steps(model: GPT, optimizer: torch.optim.Optimizer, tokens: torch.Tensor, steps: int = 2) -> None:
    for _ in range(steps):
        optimizer.zero_grad()
        logits = model(tokens[:, :-1])
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten()).backward()
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def logits_of(model: GPT, tokens: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(tokens[:, :TOKENS]).double()


def rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


@dataclass
class Snapshot:
    """Everything a failed growth must leave as it was."""

    state: dict[str, torch.Tensor]
    config: Config
    params: dict[str, torch.nn.Parameter]
    requires_grad: dict[str, bool]
    max_seq_length: int

    @classmethod
    def of(cls, model: GPT) -> Snapshot:
        return cls(state={k: v.detach().clone() for k, v in model.state_dict().items()},
                   config=copy.deepcopy(model.config), params=dict(model.named_parameters()),
                   requires_grad={n: p.requires_grad for n, p in model.named_parameters()},
                   max_seq_length=model.max_seq_length)

    def differences(self, model: GPT) -> list[str]:
        state = model.state_dict()
        out = []
        if state.keys() != self.state.keys():
            out.append(f"state_dict keys differ: {sorted(set(state) ^ set(self.state))[:4]}")
        out += [f"{k} changed" for k, v in self.state.items() if k in state and not (
            state[k].shape == v.shape and state[k].dtype == v.dtype and torch.equal(state[k], v))][:4]
        if model.config != self.config:
            out.append("config changed")
        params = dict(model.named_parameters())
        if params.keys() != self.params.keys() or any(params[n] is not p for n, p in self.params.items()):
            out.append("parameter objects changed")
        if {n: p.requires_grad for n, p in params.items()} != self.requires_grad:
            out.append("requires_grad changed")
        if model.max_seq_length != self.max_seq_length:
            out.append("max_seq_length changed")
        return out


# ------------------------------------------------------------------------------------------------ the oracle
def _whole(old: int, new: int) -> bool:
    return new == old or (new > old and new % old == 0)


def contract_exact(stage: GrowthStage, old: Config, new: Config, router_bias_nonnegative: bool, *,
                   experts: bool = True) -> bool:
    """Whether the documented contract makes this growth keep the logits (``GrowthStage``'s and the axes' docs):
    widths and heads by copy-copy with the RMS-preserving scale at whole ratios; depth by ``copy-zero`` /
    ``random-zero`` without ``depth_scaling``; dense -> MoE by copies (its ``routed_scaling_factor`` 1); ``m x E``
    with ``m x K`` copies (a grouped router: with ``norm_topk_prob`` and, since unselected groups score 0, a
    router bias that is never negative); ``n_expert`` alone at top-1 (linear router). ``experts=False``: whether
    the stage's other axes keep it (the experts' own line then says whether they do)."""
    grows_width = any(getattr(old, k) != getattr(new, k) for k in ("n_embd", "intermediate_size",
                                                                    "moe_intermediate_size", "n_head",
                                                                    "n_query_groups")
                      if getattr(old, k) is not None)
    if grows_width:
        if stage.init != "copy-copy" or not stage.rms_preserving:
            return False
        for k in ("n_embd", "intermediate_size", "moe_intermediate_size", "n_head", "n_query_groups"):
            if getattr(old, k) and getattr(new, k) and not _whole(getattr(old, k), getattr(new, k)):
                return False
    if new.n_layer != old.n_layer and (stage.depth_init == "copy" or stage.depth_scaling != "none"):
        return False
    if not experts:
        return True
    if old.mlp_class_name == "LLaMAMLP" and new.mlp_class_name == "LLaMAMoE":
        return stage.expert_init == "copy" and old.routed_scaling_factor == 1.0
    if old.mlp_class_name == "LLaMAMoE" and (new.n_expert, new.n_expert_per_token) != (old.n_expert,
                                                                                         old.n_expert_per_token):
        if stage.expert_init != "copy":
            return False
        E, K, E2, K2 = old.n_expert, old.n_expert_per_token, new.n_expert, new.n_expert_per_token
        if old.n_expert_groups:
            return E2 % E == 0 and E2 // E * K == K2 and old.norm_topk_prob and router_bias_nonnegative
        return (E2 % E == 0 and E2 // E * K == K2) or K == K2 == 1
    return True


def claims_kept(result, model: GPT) -> bool:
    """Whether the growth's own lines (the growth log's, of the grown ``model``) say ``function kept``."""
    from lightning_sparkling.growth.axes.registry import describe_changes

    import inspect

    takes_model = "model" in inspect.signature(describe_changes).parameters  # (older versions: the plan alone)
    lines = describe_changes(result.plan, model) if takes_model else describe_changes(result.plan)
    return any("function kept" in line for line in lines.values())


# ------------------------------------------------------------------------------------------------ the checker
@dataclass
class Failure:
    kind: str
    stage_index: int
    message: str


@dataclass
class CaseResult:
    program: Program
    stages: list[dict[str, Any]] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    axes: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)


def _axes_of(keys: dict[str, Any], old: Config, new: Config | None) -> list[str]:
    axes = [k for k in ("n_embd", "intermediate_size", "moe_intermediate_size") if k in keys]
    if "n_head" in keys or "n_query_groups" in keys:
        axes.append("heads")
    if "n_layer" in keys or "depth_map" in keys:
        axes.append("depth")
    if "mlp_class_name" in keys:
        axes.append("dense->moe")
    elif "n_expert" in keys or "n_expert_per_token" in keys:
        axes.append("experts")
    if "model_config" in keys:
        axes.append("target")
        if keys["model_config"].get("block_size") != old.block_size:
            axes.append("target-block_size")
    return axes


def run_program(program: Program, *, checks: bool = True) -> CaseResult:
    """Run ``program`` (drawing its stages from its seed when ``program.stages`` is None) and check every stage."""
    out = CaseResult(program)
    rng = random.Random(program.seed * 7919 + 17)
    try:
        model = build_model(program)
    except (ValueError, AssertionError, GrowthError) as err:  # a config litgpt refuses: not a growth case
        out.outcomes["bad-config"] += 1
        out.failures.append(Failure("fuzzer", -1, f"config refused by litgpt: {err}"))
        return out
    tokens = torch.randint(0, VOCAB, (4, TOKENS + 1), generator=torch.Generator().manual_seed(program.seed))
    optimizer = build_optimizer(model, program.optimizer)
    if optimizer is not None:
        train_steps(model, optimizer, tokens, steps=1)
    start = copy.deepcopy(model.config)
    applied: list[GrowthStage] = []
    phase_counts = [_counts(model)]
    n_stages = len(program.stages) if program.stages is not None else rng.choice((1, 1, 2, 3))
    for k in range(n_stages):
        keys = program.stages[k] if program.stages is not None else draw_stage(rng, model.config, k)
        out.stages.append(keys)
        old = copy.deepcopy(model.config)
        out.axes.update(_axes_of(keys, old, None))
        try:
            stage = GrowthStage.from_keys(10 * (k + 1), **copy.deepcopy(keys))
        except (ValueError, TypeError) as err:
            if not str(err):
                out.failures.append(Failure("refusal", k, f"GrowthStage refused with an empty message ({err!r})"))
            out.outcomes["stage-refused"] += 1
            continue
        grown = _grow_and_check(model, stage, k, program, tokens, optimizer, out)
        if grown:
            applied.append(stage)
            phase_counts.append(_counts(model))
    if checks and applied:  # every phase at once (estimate_compute counts each phase's config)
        _check_counts(start, applied, phase_counts, program.tied, len(out.stages) - 1, out)
    return out


def _counts(model: GPT) -> tuple[int, int]:
    """``(active, total)`` counted from the model's own parameters (tied once; a MoE block's skipped experts)."""
    params = {id(p): p for p in model.parameters()}
    total = sum(p.numel() for p in params.values())
    skipped = 0
    for block in model.transformer.h:
        experts = getattr(block.mlp, "experts", None)
        if experts is not None:
            per = sum(p.numel() for p in experts[0].parameters())
            skipped += per * (len(experts) - model.config.n_expert_per_token)
    return total - skipped, total


def _check_counts(start: Config, applied: list[GrowthStage], counts: list, tied: bool, k: int, out: CaseResult):
    try:
        est = estimate_compute(start, applied, total_steps=100, tokens_per_step=1, tie_embeddings=tied)
    except (ValueError, GrowthError) as err:
        out.failures.append(Failure("count", k, f"estimate_compute refused stages that grew: {err}"))
        return
    expected = list(zip(est.active_params, est.total_params))
    if expected != counts:
        out.failures.append(Failure("count", k, f"estimate_compute (active, total) per phase {expected} != the "
                                                f"models' {counts}"))


def _grow_and_check(model: GPT, stage: GrowthStage, k: int, program: Program, tokens: torch.Tensor,
                    optimizer: torch.optim.Optimizer | None, out: CaseResult) -> bool:
    """Grow ``model`` by ``stage`` and check it; ``True`` when it grew."""
    snap = Snapshot.of(model)
    before = logits_of(model, tokens)
    twin = copy.deepcopy(model) if (program.seed + k) % TWIN_EVERY == 0 else None  # determinism and rollback
    bias_ok = all((b >= 0).all() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias"))
    opt_before = _optimizer_snapshot(optimizer)
    try:
        result = grow_model(model, stage, seed=program.seed, stage_index=k)
    except (GrowthError, ValueError) as err:
        out.outcomes["refused"] += 1
        if not str(err):
            out.failures.append(Failure("refusal", k, f"refused with an empty message ({type(err).__name__})"))
        diff = snap.differences(model)
        if diff:
            out.failures.append(Failure("refusal", k, f"refused ({err}) but the model changed: {diff}"))
        return False
    except Exception as err:  # noqa: BLE001 - anything but a clean refusal is a finding
        out.outcomes["crash"] += 1
        out.failures.append(Failure("crash", k, f"{type(err).__name__}: {err}"))
        return False
    out.outcomes["grown"] += 1
    new_config = model.config
    after = logits_of(model, tokens)
    err = rel_error(after, before) if after.shape == before.shape else math.inf
    exact = contract_exact(stage, snap.config, new_config, bias_ok)
    claimed = claims_kept(result, model)
    out.outcomes["exact-by-contract" if exact else "not-exact-by-contract"] += 1
    out.outcomes["claimed-kept"] += claimed
    if exact and err > RTOL:
        out.failures.append(Failure("exact", k, f"the contract keeps the function, logits moved by {err:.3g}"))
    # the experts' line speaks for the experts: checked where the stage's other axes keep the function
    claimed = claimed and contract_exact(stage, snap.config, new_config, bias_ok, experts=False)
    if claimed and err > RTOL:
        out.failures.append(Failure("claim", k, f"'function kept' printed, logits moved by {err:.3g}"))
    if exact or claimed:
        out.outcomes["exact-checked"] += 1
    _check_reload(model, tokens, k, out)
    _check_requires_grad(model, result, snap, k, out)
    if (program.seed + k) % TWIN_EVERY == 0:  # determinism and rollback: a growth each, on a share of the stages
        _check_twin(twin, model, stage, program, k, out)
    if optimizer is not None and not _check_optimizer(optimizer, opt_before, result, stage, model, tokens, k, out):
        return False  # the patch refused: the growth was rolled back
    return True


def _check_reload(model: GPT, tokens: torch.Tensor, k: int, out: CaseResult) -> None:
    try:
        fresh = GPT(model.config)
        fresh.load_state_dict(model.state_dict(), strict=True)
    except Exception as err:  # noqa: BLE001
        out.failures.append(Failure("reload", k, f"GPT(model.config) does not load strictly: {err}"[:400]))
        return
    if fresh.max_seq_length != model.max_seq_length:
        out.failures.append(Failure("reload", k, f"max_seq_length {model.max_seq_length} != GPT(model.config)'s "
                                                 f"{fresh.max_seq_length} (block_size {model.config.block_size})"))
    mine, theirs = dict(model.named_buffers()), dict(fresh.named_buffers())
    if mine.keys() != theirs.keys():
        out.failures.append(Failure("reload", k, f"buffers differ: {sorted(set(mine) ^ set(theirs))}"))
    else:
        bad = [n for n in mine if not (mine[n].shape == theirs[n].shape and torch.allclose(mine[n], theirs[n]))]
        if bad:
            out.failures.append(Failure("reload", k, f"buffers {bad} differ from GPT(model.config)'s"))
    fresh.train(model.training)
    if rel_error(logits_of(fresh, tokens), logits_of(model, tokens)) > 1e-6:
        out.failures.append(Failure("reload", k, "GPT(model.config) with the state dict gives other logits"))
    full = torch.zeros((1, model.config.block_size), dtype=torch.long)
    try:
        with torch.no_grad():
            model(full)
    except Exception as err:  # noqa: BLE001
        out.failures.append(Failure("reload", k, f"the grown model refuses block_size={model.config.block_size} "
                                                 f"tokens: {err}"[:300]))


def _check_requires_grad(model: GPT, result, snap: Snapshot, k: int, out: CaseResult) -> None:
    wrong = []
    for name, p in model.named_parameters():
        spec = result.plan.tensors.get(name)
        source = spec.source_name if spec is not None else name
        if source not in snap.requires_grad:
            continue  # sourceless (a dense -> MoE router)
        if p.requires_grad != snap.requires_grad[source]:
            wrong.append(f"{name} requires_grad={p.requires_grad}, its source {source} {snap.requires_grad[source]}")
    if wrong:
        out.failures.append(Failure("requires_grad", k, f"{len(wrong)} parameters: {wrong[:3]}"))


class _Injected(RuntimeError):
    pass


def _check_twin(twin: GPT, model: GPT, stage: GrowthStage, program: Program, k: int, out: CaseResult) -> None:
    """On a copy of the pre-growth model: a fault at the end of the swap and ``rollback()`` restore it; the same
    seed then gives the same weights."""
    twin_snap = Snapshot.of(twin)
    if (program.seed + k) % (2 * TWIN_EVERY) == 0:  # half of those (each costs a growth)
        out.outcomes["fault-injected"] += 1
        real = surgery.derived_buffers

        def failing(*args, **kwargs):
            real(*args, **kwargs)  # the last step of the swap, then the fault
            raise _Injected("injected at the end of the swap")

        with mock.patch.object(surgery, "derived_buffers", failing):
            try:
                grow_model(twin, stage, seed=program.seed, stage_index=k)
                out.failures.append(Failure("fuzzer", k, "the injected fault was not reached (derived_buffers)"))
            except _Injected:
                pass
        diff = twin_snap.differences(twin)
        if diff:
            out.failures.append(Failure("rollback", k, f"a fault at the end of the swap left: {diff}"))
            return
    result = grow_model(twin, stage, seed=program.seed, stage_index=k)
    a, b = twin.state_dict(), model.state_dict()
    if a.keys() != b.keys() or any(not torch.equal(a[n], b[n]) for n in a) or twin.config != model.config:
        out.failures.append(Failure("determinism", k, "the same seed gave other weights"))
    result.rollback()
    diff = twin_snap.differences(twin)
    if diff:
        out.failures.append(Failure("rollback", k, f"GrowthResult.rollback() left: {diff}"))


# ------------------------------------------------------------------------------------------------ optimizer
def _optimizer_snapshot(optimizer):
    if optimizer is None:
        return None
    groups = [list(g["params"]) for g in optimizer.param_groups]
    state = {id(p): {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in s.items()}
             for p, s in optimizer.state.items()}
    return groups, state


def _check_optimizer(optimizer, before, result, stage: GrowthStage, model: GPT, tokens, k: int,
                     out: CaseResult) -> bool:
    """Patch ``optimizer`` for the growth and check it per element; ``False`` when the patch refused (the growth
    is then rolled back, as the callback does)."""
    groups_before, state_before = before
    recipe = stage.optimizer_state
    try:
        patch = plan_optimizer_patch(optimizer, result, recipe)
        patch.apply()
    except (GrowthError, ValueError) as err:
        out.outcomes["optimizer-refused"] += 1
        result.rollback()
        diff = []
        if [list(g["params"]) for g in optimizer.param_groups] != groups_before:
            diff.append("param groups changed")
        if diff:
            out.failures.append(Failure("optimizer", k, f"patch refused ({err}) and {diff}"))
        return False
    out.outcomes["optimizer-patched"] += 1
    problems = _optimizer_problems(optimizer, state_before, result, recipe, model)
    patch.undo()
    if [list(g["params"]) for g in optimizer.param_groups] != groups_before or any(
            not _same_state(optimizer.state.get(p), state_before.get(id(p))) for g in groups_before for p in g):
        problems.append("undo() did not restore the param groups and state")
    patch.apply()
    try:
        train_steps(model, optimizer, tokens, steps=1)
    except Exception as err:  # noqa: BLE001
        problems.append(f"a step after the patch fails: {type(err).__name__}: {err}"[:300])
    if problems:
        out.failures.append(Failure("optimizer", k, f"{type(optimizer).__name__} {recipe}: {problems[:3]}"))
    return True


def _same_state(a, b) -> bool:
    if not a and not b:
        return True
    if a is None or b is None or a.keys() != b.keys():
        return False
    return all(torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)


def _optimizer_problems(optimizer, state_before, result, recipe: str, model: GPT) -> list[str]:
    problems = []
    where: dict[int, int] = Counter()
    for g in optimizer.param_groups:
        for p in g["params"]:
            where[id(p)] += 1
    group_of = {id(p): i for i, g in enumerate(optimizer.param_groups) for p in g["params"]}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            if where[id(p)]:
                problems.append(f"frozen {name} is in the optimizer")
            continue
        spec = result.plan.tensors.get(name)
        if name in result.added:
            source, _ = result.added[name]
            if where[id(p)] != 1 and where[id(source)] == 1:
                problems.append(f"new block's {name} is in {where[id(p)]} groups")
            elif where[id(p)] and group_of.get(id(p)) != _group_before(optimizer, result, source, group_of):
                problems.append(f"new block's {name} is not in its source's group")
            old_state = state_before.get(id(source))
            new_state = optimizer.state.get(p)
            if old_state and new_state:
                for key, value in old_state.items():
                    if not isinstance(value, torch.Tensor) or value.ndim == 0:
                        continue
                    if recipe in ("asymmetric", "asymmetric-scaled", "drop") and new_state[key].abs().max() != 0:
                        problems.append(f"new block's {name} {key} is not zero under {recipe}")
                    if recipe == "copy" and value.shape == new_state[key].shape and not torch.equal(value,
                                                                                                   new_state[key]):
                        problems.append(f"new block's {name} {key} is not its source's under copy")
            continue
        old = result.old_params.get(name)
        if old is None:
            continue  # not replaced
        if where[id(old)]:
            problems.append(f"the pre-growth {name} is still in the optimizer")
        if where[id(p)] != 1:
            problems.append(f"grown {name} is in the optimizer {where[id(p)]} times")
        old_state, new_state = state_before.get(id(old)), optimizer.state.get(p)
        if not old_state:
            continue
        if not new_state:
            problems.append(f"grown {name} lost its state")
            continue
        new_region = torch.zeros(p.shape, dtype=torch.bool)
        for piece in result.new_entries.get(name, []):
            new_region[piece] = True
        relaid = spec is not None and any(result.plan.channels[d.channel].layout is not None for d in spec.dims)
        for key, value in old_state.items():
            grown = new_state.get(key)
            if not isinstance(value, torch.Tensor) or value.ndim == 0:
                if isinstance(value, torch.Tensor) and not torch.equal(value, grown):
                    problems.append(f"{name} {key} changed")
                continue
            if grown is None or grown.shape != p.shape:
                problems.append(f"{name} {key} has shape {None if grown is None else tuple(grown.shape)}")
                continue
            new_part, old_part = grown[new_region], grown[~new_region]
            if recipe in ("asymmetric", "asymmetric-scaled", "drop") and new_part.numel() and new_part.abs().max():
                problems.append(f"{name} {key}: new entries not zero under {recipe}")
            if recipe == "drop" and grown.abs().max():
                problems.append(f"{name} {key}: not all zero under drop")
            if recipe in ("asymmetric", "copy"):
                if relaid or spec is None:
                    same = torch.equal(old_part.sort().values, value.flatten().sort().values)
                else:
                    same = torch.equal(grown[tuple(slice(0, n) for n in value.shape)], value)
                if not same:
                    problems.append(f"{name} {key}: old entries do not keep their state under {recipe}")
            if recipe == "copy" and new_part.numel() and not torch.isin(new_part, torch.cat(
                    [value.flatten(), torch.zeros(1, dtype=value.dtype)])).all():
                problems.append(f"{name} {key}: new entries are not copies of old state under copy")
    return problems


def _group_before(optimizer, result, source, group_of) -> int | None:
    """The group a new block's parameter should be in: its source's (the source may itself have been replaced)."""
    if id(source) in group_of:
        return group_of[id(source)]
    for name, old in result.old_params.items():
        if old is source:
            return group_of.get(id(result.new_params[name]))
    return None


# ------------------------------------------------------------------------------------------------ known cases
KNOWN = {
    "grouped-router-bias": "grouped-router experts x m claim 'function kept' with a signed e_score_correction_bias",
    "target-block_size": "a target with another block_size leaves max_seq_length and the RoPE cache at the old one",
    "depth+experts-requires_grad": "depth and experts in one stage give new experts the wrong requires_grad",
    "dense->moe-routed_scaling_factor": "dense -> MoE with routed_scaling_factor != 1 claims 'function kept'",
}


def known_case(program: Program, stages: list[dict[str, Any]], failure: Failure) -> str | None:
    """Which of the :data:`KNOWN` wrong growths a failure is, by its stage's keys (``None``: a new finding)."""
    keys = stages[failure.stage_index] if 0 <= failure.stage_index < len(stages) else {}
    target = keys.get("model_config") or {}
    if failure.kind == "reload" and target and target.get("block_size") != program.config.get("block_size"):
        return "target-block_size"
    if failure.kind == "reload" and any(s.get("model_config", {}).get("block_size", 16) != 16 for s in stages):
        return "target-block_size"  # an earlier stage's target changed it
    experts = any(k in keys for k in ("n_expert", "mlp_class_name", "n_expert_per_token"))
    depth = any(k in keys for k in ("n_layer", "depth_map")) or (target and target.get("n_layer") is not None)
    if failure.kind in ("requires_grad", "optimizer") and experts and depth:
        return "depth+experts-requires_grad"
    if failure.kind == "claim" and program.family == "moe-grouped" and program.bias == "signed":
        return "grouped-router-bias"
    if failure.kind == "claim" and "mlp_class_name" in keys and program.config.get("routed_scaling_factor", 1) != 1:
        return "dense->moe-routed_scaling_factor"
    return None


# ------------------------------------------------------------------------------------------------ shrinking
def failure_kinds(result: CaseResult) -> set[str]:
    return {f.kind for f in result.failures}


def replay(program: Program, stages: list[dict[str, Any]]) -> CaseResult:
    return run_program(dataclasses.replace(program, stages=copy.deepcopy(stages)))


def shrink(program: Program, stages: list[dict[str, Any]], kind: str, budget: int = 60) -> list[dict[str, Any]]:
    """The fewest stages and keys of ``stages`` for which ``program`` still fails with ``kind`` (greedy: drop a
    stage, then a key, while the failure stays; at most ``budget`` replays)."""
    current = copy.deepcopy(stages)
    runs = 0

    def fails(candidate) -> bool:
        nonlocal runs
        runs += 1
        try:
            return kind in failure_kinds(replay(program, candidate))
        except Exception:  # noqa: BLE001 - a candidate that breaks the fuzzer itself is not a reproduction
            return False

    changed = True
    while changed and runs < budget:
        changed = False
        for i in range(len(current)):
            if len(current) > 1 and fails(current[:i] + current[i + 1:]):
                current = current[:i] + current[i + 1:]
                changed = True
                break
        else:
            for i, keys in enumerate(current):
                for key in list(keys):
                    if len(keys) == 1 or runs >= budget:
                        continue
                    candidate = copy.deepcopy(current)
                    del candidate[i][key]
                    if fails(candidate):
                        current, changed = candidate, True
                        break
                if changed:
                    break
    return current


def reproduction(program: Program, stages: list[dict[str, Any]]) -> dict[str, Any]:
    return dataclasses.replace(program, stages=stages).to_dict()


# ------------------------------------------------------------------------------------------------ the CLI
def run_seeds(seeds: range, *, shrink_failures: bool = True, shrink_per_kind: int = 3,
              log: Callable[[str], None] | None = None,
              checkpoint: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run every seed: counts per family, axis and outcome, and the failures by ``(family, kind)``: every seed,
    and the first ``shrink_per_kind`` with their minimal reproduction (:func:`shrink`). ``checkpoint`` gets the
    report so far every 200 cases (a long run stopped early keeps what it ran)."""
    families: Counter = Counter()
    axes: Counter = Counter()
    family_axes: dict[str, Counter] = {}
    outcomes: Counter = Counter()
    failures: dict[tuple[str, str, str | None], dict[str, Any]] = {}
    start = time.perf_counter()
    for n, seed in enumerate(seeds):
        program = draw_program(seed)
        result = run_program(program)
        families[program.family] += 1
        axes.update(result.axes)
        family_axes.setdefault(program.family, Counter()).update(result.axes)
        outcomes.update(result.outcomes)
        for kind in sorted(failure_kinds(result)):
            first = next(f for f in result.failures if f.kind == kind)
            known = known_case(program, result.stages, first)
            entry = failures.setdefault((program.family, kind, known), {
                "family": program.family, "kind": kind, "known": known, "count": 0, "seeds": [], "examples": []})
            entry["count"] += 1
            if len(entry["seeds"]) < 50:
                entry["seeds"].append(seed)
            if len(entry["examples"]) < shrink_per_kind:
                # new findings shrunk (a shrink costs up to 30 replays); a known case's stage is already named
                shrunk = shrink_failures and known is None
                minimal = shrink(program, result.stages, kind, budget=30) if shrunk else result.stages
                entry["examples"].append({"seed": seed, "family": program.family, "kind": kind,
                                          "stage": first.stage_index, "message": first.message,
                                          "repro": reproduction(program, minimal)})
            if log:
                log(f"seed {seed} {program.family} {kind}: {first.message[:300]}")
        if (n + 1) % 200 == 0:
            if log:
                log(f"{n + 1} cases, {time.perf_counter() - start:.0f} s, "
                    f"{sum(e['count'] for e in failures.values())} failures")
            if checkpoint:
                checkpoint(_report(seeds, seed + 1, families, axes, family_axes, outcomes, failures, start))
    return _report(seeds, seeds.stop, families, axes, family_axes, outcomes, failures, start)


def _report(seeds: range, stop: int, families, axes, family_axes, outcomes, failures, start: float) -> dict[str, Any]:
    return {"seeds": f"{seeds.start}:{stop}", "cases": sum(families.values()),
            "seconds": round(time.perf_counter() - start, 1), "families": dict(sorted(families.items())),
            "axes": dict(sorted(axes.items())),
            "family_axes": {f: dict(sorted(c.items())) for f, c in sorted(family_axes.items())},
            "outcomes": dict(sorted(outcomes.items())), "failures": list(failures.values())}


def merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One report of several (the parts of a seed range run in parallel processes): counts added, failures of the
    same ``(family, kind, known)`` joined."""
    def add(dicts):
        total: Counter = Counter()
        for d in dicts:
            total.update(d)
        return dict(sorted(total.items()))

    failures: dict[tuple, dict[str, Any]] = {}
    for report in reports:
        for entry in report["failures"]:
            key = (entry["family"], entry["kind"], entry["known"])
            joined = failures.setdefault(key, {**entry, "count": 0, "seeds": [], "examples": []})
            joined["count"] += entry["count"]
            joined["seeds"] = (joined["seeds"] + entry["seeds"])[:50]
            joined["examples"] = (joined["examples"] + entry["examples"])[:3]
    families = sorted({f for r in reports for f in r["family_axes"]})
    return {"seeds": " + ".join(r["seeds"] for r in reports), "cases": sum(r["cases"] for r in reports),
            "seconds": round(sum(r["seconds"] for r in reports), 1), "families": add(r["families"] for r in reports),
            "axes": add(r["axes"] for r in reports),
            "family_axes": {f: add(r["family_axes"].get(f, {}) for r in reports) for f in families},
            "outcomes": add(r["outcomes"] for r in reports), "failures": list(failures.values())}


AXES = ("n_embd", "intermediate_size", "moe_intermediate_size", "heads", "depth", "experts", "dense->moe", "target",
        "target-block_size")


def markdown(report: dict[str, Any]) -> str:
    """The report's counts as Markdown tables (``docs/BENCHMARKS.md``): stages per family and axis, outcomes,
    failures by family, kind and known case."""
    head = "| family | programs | " + " | ".join(f"`{a}`" for a in AXES) + " |"
    lines = [head, "|" + "---|" * (len(AXES) + 2)]
    for family, n in report["families"].items():
        counts = report["family_axes"].get(family, {})
        lines.append(f"| {family} | {n} | " + " | ".join(str(counts.get(a, 0)) for a in AXES) + " |")
    lines.append(f"| **all** | {report['cases']} | " + " | ".join(str(report['axes'].get(a, 0)) for a in AXES) + " |")
    lines += ["", "| outcome | stages |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in report["outcomes"].items()]
    lines += ["", "| family | check | known case | programs | first seeds |", "|---|---|---|---|---|"]
    lines += [f"| {e['family']} | {e['kind']} | {e['known'] or 'new'} | {e['count']} | "
              f"{', '.join(map(str, e['seeds'][:5]))} |" for e in report["failures"]]
    return "\n".join(lines)


def describe_failure(failure: dict[str, Any]) -> str:
    """A failure and its reproduction, for an assertion message."""
    return (f"seed {failure['seed']} ({failure['family']}) {failure['kind']} at stage {failure['stage']}: "
            f"{failure['message']}\n  reproduce: python benchmarks/fuzz_growth.py --repro "
            f"'{json.dumps(failure['repro'])}'")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0:200", help="a seed range start:stop")
    parser.add_argument("--out", default=None, help="write the counts and failures here (JSON)")
    parser.add_argument("--repro", default=None, help="replay one program (the JSON of a failure's 'repro')")
    parser.add_argument("--no-shrink", action="store_true")
    parser.add_argument("--merge", nargs="+", default=None, help="join these reports (parts of a range) into --out")
    parser.add_argument("--markdown", default=None, help="print this report's tables as Markdown")
    args = parser.parse_args(argv)
    if args.markdown:
        with open(args.markdown) as fh:
            print(markdown(json.load(fh)))
        return 0
    if args.merge:
        reports = []
        for path in args.merge:
            with open(path) as fh:
                reports.append(json.load(fh))
        merged = merge_reports(reports)
        with open(args.out, "w") as fh:
            fh.write(json.dumps(merged, indent=1) + "\n")
        print(json.dumps({k: v for k, v in merged.items() if k != "failures"}, indent=1))
        return 0
    torch.set_num_threads(1)
    if args.repro:
        program = Program(**json.loads(args.repro))
        result = run_program(program)
        for f in result.failures:
            print(f"stage {f.stage_index} {f.kind}: {f.message}")
        print(f"outcomes: {dict(result.outcomes)}")
        return 1 if result.failures else 0
    start, stop = (int(x) for x in args.seeds.split(":"))

    def write(report: dict[str, Any]) -> None:
        if args.out:
            with open(args.out, "w") as fh:
                fh.write(json.dumps(report, indent=1) + "\n")

    report = run_seeds(range(start, stop), shrink_failures=not args.no_shrink, checkpoint=write,
                       log=lambda line: print(line, file=sys.stderr, flush=True))
    write(report)
    print(json.dumps({k: v for k, v in report.items() if k != "failures"}, indent=1))
    print(f"{sum(e['count'] for e in report['failures'])} failing cases")
    for entry in report["failures"]:
        print(f"{entry['family']} {entry['kind']} ({entry['known'] or 'new'}): {entry['count']} cases, "
              f"seeds {entry['seeds'][:10]}")
        for example in entry["examples"]:
            print(describe_failure(example))
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
