"""The channel layout of a litgpt ``GPT``: which dimension of which tensor reads or writes which channels, and the
per-tensor plans of every channel dimension that grows (the width axis' widths and the heads axis' attention
channels, :class:`~lightning_sparkling.growth.types.ChannelChange` objects by name).

=========================  ==========================================  ===========================================
channels                   fan-out (writers: new rows / coords)        fan-in (readers: new columns, scaled alpha)
=========================  ==========================================  ===========================================
``n_embd``                 ``wte`` columns, ``attn.proj``, MLP/expert  ``attn.qkv``, MLP ``fc*``, expert ``fc_*``,
                           ``proj``; norms (``norm_1/2``, post-norms,   router ``gate``, ``lm_head``
                           ``ln_f``) copy or draw new coordinates
``intermediate_size``      dense ``mlp.fc_1``/``fc_2``/``fc``           dense ``mlp.proj``
``moe_intermediate_size``  every expert's ``fc_1``/``fc_2``             every expert's ``proj``
``shared_expert_size``     shared experts' ``fc_1``/``fc_2``            shared experts' ``proj``
``attn_qkv``               the fused ``attn.qkv`` rows (laid out anew)
``attn_q`` / ``attn_kv``   OLMo-2's ``norm_q`` / ``norm_k``             ``attn.proj`` (``attn_q``)
=========================  ==========================================  ===========================================

``shared_expert_size`` is ``moe_intermediate_size * n_shared_expert``: it grows with the expert size.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch.nn as nn

from lightning_sparkling.growth.errors import GrowthError
from lightning_sparkling.growth.operators import runs
from lightning_sparkling.growth.scaling import fan_in_scale
from lightning_sparkling.growth.types import DimGrowth, TensorPlan

SUPPORTED_MLPS = ("GptNeoxMLP", "LLaMAMLP", "GemmaMLP", "LLaMAMoE")
SHARED_EXPERT_CHANNEL = "shared_expert_size"
"""The channel dimension of the shared experts' inner width (``moe_intermediate_size * n_shared_expert``
channels): a channel's name, not an axis."""


def channel_tensors(ctx) -> dict:
    """``{state_dict name: TensorPlan}`` of every tensor of ``ctx.old_model`` with a dimension on a growing channel
    dimension of ``ctx.channels`` (or a scale to apply), by its pre-growth name.

    Args:
        ctx: the :class:`~lightning_sparkling.growth.axes.PlanContext` (``channels``: the channel dimensions).
    """
    config, stage, channels, old_model = ctx.config, ctx.stage, ctx.channels, ctx.old_model
    old_shapes = ctx.old_shapes
    fan_out, fan_in = stage.fan_out_init, stage.fan_in_init
    tensors: dict = {}
    E = channels.get("n_embd")

    def add(name: str, dims: list, scale: float = 1.0, unit_offset: bool = False) -> None:
        dims = [d if channels[d.channel].layout is None else dataclasses.replace(
            d, new_runs=runs(channels[d.channel].fresh), old_runs=runs(~channels[d.channel].fresh))
                for d in dims if d.channel in channels]
        if not dims and scale == 1.0:
            return
        shape = list(old_shapes[name])
        for d in dims:
            shape[d.dim] = channels[d.channel].new
        tensors[name] = TensorPlan(name, old_shapes[name], tuple(shape), tuple(sorted(dims, key=lambda d: d.dim)),
                                   scale, unit_offset)

    def norm_mode() -> str:
        # A zero norm weight on coordinates whose input is also zero blocks every gradient path into them, so a
        # zero fan-out copies norm weights (paper 3.2.4: copy or random both keep RMS(z)).
        return "random" if fan_out == "random" else "copy"

    def add_norm(prefix: str, module: nn.Module, scale: float = 1.0) -> None:
        unit_offset = bool(getattr(module, "add_unit_offset", False))
        if getattr(module, "weight", None) is not None:
            add(f"{prefix}.weight", [DimGrowth(0, "n_embd", "fan_out", norm_mode())], scale, unit_offset)
        if getattr(module, "bias", None) is not None:
            add(f"{prefix}.bias", [DimGrowth(0, "n_embd", "fan_out", fan_out)], scale)

    def alpha_of(channel: str) -> float:
        return channels[channel].alpha if channel in channels else 1.0

    def add_linear_fan_in(prefix: str, channel: str) -> None:  # readers of `channel`: new columns, bias unchanged
        add(f"{prefix}.weight", [DimGrowth(1, channel, "fan_in", fan_in)], alpha_of(channel))

    def add_mlp(prefix: str, mlp: Any, inner: str) -> None:  # a litgpt MLP (untyped)
        cls = type(mlp).__name__
        if cls == "GptNeoxMLP":
            writers = {"fc": fan_out}
        elif cls in ("LLaMAMLP", "GemmaMLP"):
            # zero on a gated MLP zeroes the up projection (fc_2) and copies the gate (fc_1): act(gate) * 0 keeps
            # the new channels silent at growth, while zeroing both would leave them with a zero gradient forever.
            writers = {"fc_1": "copy" if fan_out == "zero" else fan_out, "fc_2": fan_out}
        else:
            raise GrowthError(f"{prefix} is a {cls}; supported MLPs are {SUPPORTED_MLPS}")
        for fc, mode in writers.items():
            add(f"{prefix}.{fc}.weight",
                [DimGrowth(0, inner, "fan_out", mode), DimGrowth(1, "n_embd", "fan_in", fan_in)], alpha_of("n_embd"))
            if getattr(mlp, fc).bias is not None:
                add(f"{prefix}.{fc}.bias", [DimGrowth(0, inner, "fan_out", mode)])
        add(f"{prefix}.proj.weight",
            [DimGrowth(0, "n_embd", "fan_out", fan_out), DimGrowth(1, inner, "fan_in", fan_in)], alpha_of(inner))
        if mlp.proj.bias is not None:
            add(f"{prefix}.proj.bias", [DimGrowth(0, "n_embd", "fan_out", fan_out)])

    # embeddings, final norm, output head
    embed_scale = math.sqrt(E.old / E.new) if (E and config.scale_embeddings) else 1.0
    add("transformer.wte.weight", [DimGrowth(1, "n_embd", "fan_out", fan_out)], embed_scale)
    if ctx.tied_embeddings:
        if E:
            ln_f = old_model.transformer.ln_f
            if getattr(ln_f, "weight", None) is None:
                raise GrowthError(
                    "tied embeddings with a parameter-free final norm (ln_f) cannot be grown exactly: the lm_head "
                    "fan-in scale is folded into ln_f's weight; untie the embeddings"
                )
            # One tensor is both the embedding (fan-out, its new columns follow the fan-out side) and lm_head
            # (fan-in). lm_head therefore reads copies of its own copied columns: its alpha is that of the pair
            # (fan_out, fan_out), and it is folded into ln_f, whose output only lm_head reads (the paper
            # multiplies the logits by it).
            lm_alpha = fan_in_scale(E.old, E.new, init=f"{fan_out}-{fan_out}", rms_preserving=stage.rms_preserving)
            add_norm("transformer.ln_f", ln_f, scale=lm_alpha / embed_scale)
        tensors_alias = tensors.get("transformer.wte.weight")
        if tensors_alias is not None:
            tensors["lm_head.weight"] = dataclasses.replace(tensors_alias, name="lm_head.weight")
    else:
        add_norm("transformer.ln_f", old_model.transformer.ln_f)
        add_linear_fan_in("lm_head", "n_embd")

    for i, block in enumerate(old_model.transformer.h):
        p = f"transformer.h.{i}"
        for norm in ("norm_1", "norm_2", "post_attention_norm", "post_mlp_norm"):
            module = getattr(block, norm)
            if module is not None and not isinstance(module, nn.Identity):
                add_norm(f"{p}.{norm}", module)
        # the fused qkv rows (laid out anew when heads grow) read n_embd; attn.proj reads the query channels
        add(f"{p}.attn.qkv.weight", [DimGrowth(0, "attn_qkv", "fan_out", fan_out),
                                     DimGrowth(1, "n_embd", "fan_in", fan_in)], alpha_of("n_embd"))
        if block.attn.qkv.bias is not None:
            add(f"{p}.attn.qkv.bias", [DimGrowth(0, "attn_qkv", "fan_out", fan_out)])
        add(f"{p}.attn.proj.weight", [DimGrowth(0, "n_embd", "fan_out", fan_out),
                                      DimGrowth(1, "attn_q", "fan_in", fan_in)], alpha_of("attn_q"))
        if config.norm_qk and config.norm_qk_type == "olmo2":  # norms over the whole query / key projection
            for norm, channel in (("norm_q", "attn_q"), ("norm_k", "attn_kv")):
                module = getattr(block.attn, norm)
                if getattr(module, "weight", None) is not None:
                    add(f"{p}.attn.{norm}.weight", [DimGrowth(0, channel, "fan_out", norm_mode())])
                if getattr(module, "bias", None) is not None:
                    add(f"{p}.attn.{norm}.bias", [DimGrowth(0, channel, "fan_out", fan_out)])
        if block.attn.proj.bias is not None:
            add(f"{p}.attn.proj.bias", [DimGrowth(0, "n_embd", "fan_out", fan_out)])
        mlp = block.mlp
        if type(mlp).__name__ == "LLaMAMoE":
            add_linear_fan_in(f"{p}.mlp.gate", "n_embd")  # nn.Linear or GroupedTopkRouter: (n_expert, n_embd)
            for e in range(len(mlp.experts)):
                add_mlp(f"{p}.mlp.experts.{e}", mlp.experts[e], "moe_intermediate_size")
            if getattr(mlp, "shared_experts", None) is not None:
                add_mlp(f"{p}.mlp.shared_experts", mlp.shared_experts, SHARED_EXPERT_CHANNEL)
        else:
            add_mlp(f"{p}.mlp", mlp, "intermediate_size")
    return tensors
