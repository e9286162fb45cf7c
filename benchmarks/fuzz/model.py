"""The model of a program (weights, frozen set, optimizer), snapshots and the contract's exactness oracle."""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass

import torch
from litgpt import GPT, Config

from fuzz.programs import TOKENS, Program
from lightning_sparkling import GrowthStage


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
            frozen = (p.ndim == 1 and "norm" in name) or ".ln_f." in name or name.startswith("transformer.ln_f")
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
    widths and heads by copy-copy with the RMS-preserving scale at whole ratios (heads: of the groups and of the
    heads per group); depth by ``copy-zero`` /
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
        for k in ("n_embd", "intermediate_size", "moe_intermediate_size", "n_query_groups"):
            if getattr(old, k) and getattr(new, k) and not _whole(getattr(old, k), getattr(new, k)):
                return False
        # heads: the heads per group grow by a whole factor (each group's heads copied evenly; a whole n_head
        # ratio is not enough: 2 heads in 1 group -> 6 in 2 copies head 0 three times and head 1 once)
        if not _whole(old.n_head // old.n_query_groups, new.n_head // new.n_query_groups):
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
    import inspect

    from lightning_sparkling.growth.axes.registry import describe_changes

    takes_model = "model" in inspect.signature(describe_changes).parameters  # (older versions: the plan alone)
    lines = describe_changes(result.plan, model) if takes_model else describe_changes(result.plan)
    return any("function kept" in line for line in lines.values())
