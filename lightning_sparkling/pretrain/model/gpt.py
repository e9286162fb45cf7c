"""A plain ``litgpt.GPT`` for pretraining: built from a config, a dict or a name with litgpt's init drawn from a
seeded generator, so every rank builds the same weights (:func:`build_gpt`, :func:`init_gpt_weights`), and rebuilt
for a checkpoint of another config (:func:`_rebuilt_gpt`). Counted by
:func:`~lightning_sparkling.growth.compute.active_parameter_count`; sharded by
:func:`~lightning_sparkling.parallel.sharding.shard_gpt` (FSDP2) or
:func:`~lightning_sparkling.parallel.sharding.wrap_gpt` (FSDP1).
"""

from __future__ import annotations

import math
from dataclasses import fields

import torch
import torch.nn as nn
from litgpt import GPT, Config
from litgpt.model import CausalSelfAttention, LLaMAMLP

__all__ = ["build_gpt", "init_gpt_weights"]


def _as_config(model_config: Config | dict | str) -> Config:
    if isinstance(model_config, Config):
        return model_config
    if isinstance(model_config, str):
        return Config.from_name(model_config)
    if isinstance(model_config, dict):
        known = {f.name for f in fields(Config)}
        unknown = sorted(set(model_config) - known)
        if unknown:
            raise ValueError(f"model_config has keys litgpt.Config does not know: {unknown}")
        return Config(**model_config)
    raise TypeError(f"model_config must be a litgpt.Config, a dict of its fields or a model name, "
                    f"got {type(model_config).__name__}")


@torch.no_grad()
def init_gpt_weights(model: GPT, *, seed: int = 42) -> GPT:
    """litgpt's pretraining init (``litgpt.pretrain.initialize_weights``, GPT-NeoX): every ``nn.Linear`` and
    ``nn.Embedding`` weight ~ N(0, sqrt(2 / (5 n_embd))), the output projections ``proj`` of attention and LLaMA-style
    MLPs ~ N(0, 1 / sqrt(n_embd) / n_layer), biases zero, every other module's ``reset_parameters`` (norms: ones).

    Values are drawn on the CPU from ``torch.Generator().manual_seed(seed)`` in module order and copied in place, so
    the result is the same on every device and every rank (needed before FSDP2 shards a locally built model).

    Args:
        model: a ``litgpt.GPT`` (any device, not sharded).
        seed: generator seed.

    Returns:
        ``model``, initialized in place.

    Example::

        >>> cfg = Config(n_embd=16, n_head=2, n_layer=2, block_size=8, vocab_size=32, padded_vocab_size=32,
        ...              mlp_class_name="LLaMAMLP", intermediate_size=32, norm_class_name="RMSNorm", bias=False)
        >>> a, b = init_gpt_weights(GPT(cfg), seed=1), init_gpt_weights(GPT(cfg), seed=1)
        >>> all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
        True
    """
    config = model.config
    std = math.sqrt(2.0 / 5 / config.n_embd)
    proj_std = 1 / math.sqrt(config.n_embd) / config.n_layer
    proj_ids = {id(m.proj) for m in model.modules() if isinstance(m, (LLaMAMLP, CausalSelfAttention))}
    generator = torch.Generator().manual_seed(int(seed))
    seen: set[int] = set()
    for module in model.modules():
        if isinstance(module, (nn.Linear, nn.Embedding)):
            weight = module.weight
            if id(weight) not in seen:
                seen.add(id(weight))
                sample = torch.empty(weight.shape, dtype=torch.float32)
                sample.normal_(0.0, proj_std if id(module) in proj_ids else std, generator=generator)
                weight.copy_(sample)
            if (bias := getattr(module, "bias", None)) is not None:
                bias.zero_()
        elif callable(getattr(module, "reset_parameters", None)):
            module.reset_parameters()
    return model


def build_gpt(config: Config | dict | str, *, seed: int = 42, tie_embeddings: bool = False,
              init_weights: bool = True) -> GPT:
    """Build a ``litgpt.GPT`` with litgpt's init (:func:`init_gpt_weights`), optionally tying ``wte`` to
    ``lm_head`` as litgpt's pretraining does (``wte.weight = lm_head.weight``).

    Args:
        config: ``litgpt.Config``, a dict of its fields, or a litgpt model name.
        seed: init seed.
        tie_embeddings: share the input embedding and the output head.
        init_weights: apply :func:`init_gpt_weights` (``False``: torch's default init, e.g. before loading weights).

    Example::

        >>> m = build_gpt(dict(n_embd=16, n_head=2, n_layer=1, block_size=8, vocab_size=32), tie_embeddings=True)
        >>> m.transformer.wte.weight is m.lm_head.weight
        True
    """
    model = GPT(_as_config(config))
    if init_weights:
        init_gpt_weights(model, seed=seed)
    if tie_embeddings:
        model.transformer.wte.weight = model.lm_head.weight
    return model


def _rebuilt_gpt(old: GPT | None, config: Config, *, seed: int, tie_embeddings: bool) -> GPT:
    """A fresh GPT of ``config`` (torch's default init: weights are loaded next) on the device and in the
    floating dtype of ``old``'s parameters (unless those are on ``meta``), keeping ``old``'s shorter
    ``max_seq_length``."""
    reference = next(old.parameters(), None) if old is not None else None
    model = build_gpt(config, seed=seed, tie_embeddings=tie_embeddings, init_weights=False)
    if reference is not None and reference.device.type != "meta":
        model = model.to(device=reference.device)
        if reference.dtype != torch.float32 and reference.is_floating_point():
            model = model.to(dtype=reference.dtype)
    if old is not None and old.max_seq_length != config.block_size and old.max_seq_length <= config.block_size:
        model.max_seq_length = old.max_seq_length
    return model
