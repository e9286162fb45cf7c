"""The size presets (model shapes, data, batch, length) and the config helpers: merge, set_dotted, resolve_size,
slug."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any




HERE = Path(__file__).resolve().parents[1]  # benchmarks/
RESULTS = HERE / "results"

# ------------------------------------------------------------------------------------------------------------ sizes
_MODEL = {"mlp_class_name": "LLaMAMLP", "norm_class_name": "RMSNorm", "bias": False, "parallel_residual": False,
          "rotary_percentage": 1.0}
_ADAMW = {"class_path": "torch.optim.AdamW", "init_args": {"lr": 0.003, "weight_decay": 0.1, "betas": [0.9, 0.95]}}

SIZES: dict[str, dict[str, Any]] = {
    # The regime of issue #15: 4 layers, 2 heads of 16, n_embd 32 -> 64, MLP 128 -> 256, vocabulary 1024,
    # 3000 steps of 16 x 128 tokens (6.1M tokens, ~17 per parameter of the grown model), growth at half the run.
    "cpu": {
        "small": {"n_layer": 4, "n_head": 2, "n_query_groups": 2, "head_size": 16, "n_embd": 32,
                  "intermediate_size": 128, "block_size": 128},
        "large": {"n_embd": 64, "intermediate_size": 256},
        "config": {
            "precision": "32-true", "accelerator": "cpu", "devices": 1, "num_threads": 1,
            "data": {"source": "stdlib", "vocab_size": 1024, "seq_len": 128},
            "train": {"global_batch_size": 16, "micro_batch_size": 16, "max_steps": 3000, "max_norm": 1.0,
                      "log_interval": 10, "save_interval": None},
            "eval": {"interval": 250, "max_iters": 40},
            "optimizer": _ADAMW, "rms_monitor": None,
        },
        "rewarmup_steps": 150,
        "axes": ["inner", "hidden", "joint", "two-stage"],
        "rows": None,  # all
    },
    # A smaller version of the same regime: same shapes and vocabulary, 1000 steps of 8 x 128 tokens (1.0M tokens,
    # ~3 per grown parameter), growth at step 500, joint 2x only, the six rows that answer "does growth pay".
    "quick": {
        "base": "cpu",
        "config": {"train": {"global_batch_size": 8, "micro_batch_size": 8, "max_steps": 1000},
                   "eval": {"interval": 250, "max_iters": 20}},
        "rewarmup_steps": 50,
        "axes": ["joint"],
        "rows": ["scratch small", "scratch large (iso-token)", "scratch large (iso-FLOPs)", "naive growth",
                 "SPARKLING", "SPARKLING random-random"],
    },
    # The quick regime at half the width (issue 32's size trend): 2 heads of 8, n_embd 16 -> 32, MLP 64 -> 128, the
    # same vocabulary, data and batch; 336 steps of 8 x 128 tokens keep quick's ~2.8 tokens per grown parameter
    # (the grown model has 0.36x quick's parameters), growth at half the run, re-warmup 5% of the run as quick's.
    "mini": {
        "base": "quick",
        "small": {"n_layer": 4, "n_head": 2, "n_query_groups": 2, "head_size": 8, "n_embd": 16,
                  "intermediate_size": 64, "block_size": 128},
        "large": {"n_embd": 32, "intermediate_size": 128},
        "config": {"train": {"max_steps": 336}, "eval": {"interval": 84}},
        "rewarmup_steps": 17,
    },
    # Issue 38's size ladder on CPU: the quick regime (vocabulary 1024, 8 x 128 tokens per step) with 4 heads of 32
    # and n_embd 64 -> 128, MLP 256 -> 512: the joint axis' grown model has 10x mini's parameters (1.31M) and its
    # token embedding and output head hold 20% of them. Few tokens per parameter (the CPU budget of one session);
    # the depth axes grow 4 -> 8 layers at the small widths.
    "cpu-1m": {
        "base": "quick",
        "small": {"n_layer": 4, "n_head": 4, "n_query_groups": 4, "head_size": 32, "n_embd": 64,
                  "intermediate_size": 256, "block_size": 128},
        "large": {"n_embd": 128, "intermediate_size": 512},
        "config": {"train": {"max_steps": 1000}, "eval": {"interval": 100, "max_iters": 20}},
        "rewarmup_steps": 50,
    },
    # Issue 38's GPU ladder (benchmarks/campaign.py), bf16 on stdlib+site-packages, 20+ tokens per grown parameter.
    # gpu-s: 6 layers, 4 heads of 64, n_embd 128 -> 256, MLP 512 -> 1024, vocabulary 4096: the joint axis' grown
    # model has 8.4M parameters (embedding + head 25%); 5200 steps of 64 x 512 tokens = 170M tokens (20 per grown
    # parameter). Not run by the session that wrote it (no GPU). The `gpu` size's settings, heads of 64.
    "gpu-s": {
        "base": "gpu",
        "small": {"n_layer": 6, "n_head": 4, "n_query_groups": 4, "head_size": 64, "n_embd": 128,
                  "intermediate_size": 512, "block_size": 512},
        "config": {"train": {"max_steps": 5200, "log_interval": 50}, "eval": {"interval": 520, "max_iters": 20}},
        "rewarmup_steps": 260,
        "axes": ["joint", "depth"],
    },
    # gpu-m: 12 layers, 8 heads of 64, n_embd 256 -> 512, MLP 1024 -> 2048: the joint grown model has 54.5M
    # parameters (embedding + head 8%); 16700 steps of 64 x 1024 tokens = 1.09B tokens (20 per grown parameter).
    "gpu-m": {
        "base": "gpu-s",
        "small": {"n_layer": 12, "n_head": 8, "n_query_groups": 8, "head_size": 64, "n_embd": 256,
                  "intermediate_size": 1024, "block_size": 1024},
        "large": {"n_embd": 512, "intermediate_size": 2048},
        "config": {"data": {"seq_len": 1024}, "train": {"max_steps": 16700}, "eval": {"interval": 1670}},
        "rewarmup_steps": 835,
    },
    # A smoke test of the harness itself (minutes): meaningless losses.
    "tiny": {
        "base": "cpu",
        "config": {"train": {"global_batch_size": 4, "micro_batch_size": 4, "max_steps": 40},
                   "eval": {"interval": 20, "max_iters": 2}},
        "rewarmup_steps": 5,
        "axes": ["joint"],
        "rows": ["scratch small", "scratch large (iso-token)", "scratch large (iso-FLOPs)", "naive growth",
                 "SPARKLING", "uneven split 1:2"],
    },
    # One GPU (bf16): 6 layers, 4 heads of 32, n_embd 128 -> 256, MLP 512 -> 1024, vocabulary 4096 on the standard
    # library plus installed packages (~40M tokens); 8000 steps of 64 x 512 tokens = 262M tokens (~35 per grown
    # parameter, several epochs of the corpus). Not run by the session that wrote this.
    "gpu": {
        "small": {"n_layer": 6, "n_head": 4, "n_query_groups": 4, "head_size": 32, "n_embd": 128,
                  "intermediate_size": 512, "block_size": 512},
        "large": {"n_embd": 256, "intermediate_size": 1024},
        "config": {
            "precision": "bf16-mixed", "accelerator": "gpu", "devices": 1,
            "data": {"source": "stdlib+site-packages", "vocab_size": 4096, "seq_len": 512, "num_workers": 2},
            "train": {"global_batch_size": 64, "micro_batch_size": 64, "max_steps": 8000, "max_norm": 1.0,
                      "log_interval": 20, "save_interval": None},
            "eval": {"interval": 500, "max_iters": 50},
            "optimizer": {"class_path": "torch.optim.AdamW",
                          "init_args": {"lr": 0.002, "weight_decay": 0.1, "betas": [0.9, 0.95]}},
            "rms_monitor": None,
        },
        "rewarmup_steps": 250,
        "axes": ["inner", "hidden", "joint", "two-stage"],
        "rows": None,
    },
}

# ------------------------------------------------------------------------------------------------------------ config
def merge(base: dict, extra: dict) -> dict:
    out = copy.deepcopy(base)
    for k, v in extra.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def set_dotted(config: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    node = config
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = value


def resolve_size(name: str) -> dict:
    size = SIZES[name]
    if "base" in size:
        base = resolve_size(size["base"])
        size = {**base, **{k: v for k, v in size.items() if k not in ("base", "config")},
                "config": merge(base["config"], size.get("config", {}))}
    return copy.deepcopy(size)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
