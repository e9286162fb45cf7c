"""Does growth pay? The paper's comparisons, with seeds: a grid of ``sparkling pretrain`` runs and its tables.

    python benchmarks/reproduce.py --quick                      # the CPU subset (3 seeds, joint 2x, 18 runs)
    python benchmarks/reproduce.py --size cpu --jobs 2           # the full CPU grid (every axis, every row)
    python benchmarks/reproduce.py --size gpu                    # the same grid sized for one GPU
    python benchmarks/reproduce.py --size cpu --dry-run          # list the runs (and refused rows) without training
    python benchmarks/reproduce.py --quick --set train.max_steps=4000   # the same rows on 4x the tokens
    python benchmarks/reproduce.py --quick --scan --dry-run      # the map of issue 23: list its cells and runs
    python benchmarks/reproduce.py --quick --scan --scan-ratios 1 --scan-schedules wsd --scan-axes joint,depth \
        --out /tmp/scan --scan-export /tmp/wsd_cells.json      # a part of it, its cells in measured.json's format

Every run is ``sparkling pretrain --config <generated>.yaml`` in a subprocess (one torch thread each; ``--jobs``
runs in parallel), in ``--out/<size>/<axis>/<row>/seed<k>/``. A finished run (``summary.json`` with status
``completed`` next to an identical ``config.yaml``) is reused, so an interrupted grid continues where it stopped,
and rows whose configurations are identical (e.g. the ablation's "RMS only" and naive growth under copy-copy at
2x) train once. Results: ``<results>/reproduce_<size>.json`` (every run, every curve), ``reproduce_<size>.md``
(the tables) and ``reproduce_<size>_<axis>.png`` (validation loss against tokens and against FLOPs, growth
marked); with ``--tag NAME``: ``reproduce_<size>_<NAME>.{json,md,png}`` (one PNG, a row per axis), so a grid's
results can go straight into ``benchmarks/results`` next to the size's own. Paths inside the repository are
written relative to it (``benchmarks/results/...``).

Axes: ``inner`` / ``hidden`` / ``joint`` (MLP, n_embd, both 2x at half the run), ``two-stage``, ``joint-5`` /
``joint-25`` / ``joint-75``, the depth axes (``depth``, ``depth-5``, ``depth-50``, ``depth+width``) and ``hidden+heads`` (the
``hidden`` axis' stage with ``n_head`` and ``n_query_groups`` grown by the same ratio at the same ``head_size``, so
the attention is as wide as the new hidden size; its scratch rows train that shape). The experts axes (issue 30):
``upcycle-25`` / ``upcycle-5`` (the dense small model becomes an ``LLaMAMoE`` of 4 experts, top-2, each the MLP's
inner size, at 25% / 5%; ``upcycle-e8-25``: of 8 experts, top-2, at 25%; rows ``upcycle copy`` / ``upcycle drop-upcycle`` / ``upcycle random``, each compared with
the MoE from scratch and the dense model continued, both on its FLOPs) and ``experts-2x`` (an E=4, K=2 MoE small
model to E=8 at 25%; rows ``experts 2x n_expert`` and ``experts 2x n_expert + K`` (K=4), each compared with the E=8
MoE of its K from scratch on its FLOPs). In the scan they report, per row, the Δ against each comparison, the
experts' load from the final checkpoint, the copies' cosine and the growth's seconds and peak memory:

    python benchmarks/reproduce.py --quick --scan --scan-ratios 1 --scan-schedules cosine --scan-axes upcycle-25 \
        --scan-rows "upcycle copy,upcycle drop-upcycle,upcycle random" --tag upcycle-25

A row is a plain dict, so a row for an option the installed package does not have yet is a one-line change:

- ``"stage": {...}``: :class:`~lightning_sparkling.GrowthStage` keys merged into every growth stage of the axis
  (on top of the axis' widths, ``at_step`` and the size's ``rewarmup_steps``);
- ``"set": {"dotted.key": value}``: any other configuration key (``optimizer.init_args.lr``, ``growth.seed``, ...);
- ``"model": "small" | "large"`` with no stage: training from scratch; ``"iso_compute": "<row>"`` sets its
  steps so that its FLOPs (``6 N D``) equal that growth row's (its own warmup and cosine over those steps).

A row whose keys the package refuses (``sparkling pretrain`` exits with a configuration error) is reported as
"not available in this version", with the package's message, and the rest of the grid runs.

The scan (``--scan``, issue 23: where growth pays) runs the map from one command. A cell is a token ratio
(``--scan-ratios``: ``train.max_steps`` multipliers of the size; at ``--size quick`` 1, 4 and 8 are about 2.8, 11
and 23 training tokens per grown parameter on the joint axis), a schedule (``--scan-schedules``: ``cosine``, or
``wsd``, set on every run of the cell, scratch included, so growth is compared with scratch on the same schedule; a
timing whose growth is not before the decay phase, ``1 - train.lr_decay_fraction``, is skipped), a growth timing and
axis (``--scan-axes``: ``joint-25`` / ``joint`` / ``joint-75`` with the "recommended recipe" row, ``depth-5`` /
``depth`` / ``depth-50`` with "depth stack copy-zero"; ``--scan-rows`` for other rows), each paired with "scratch
large (iso-FLOPs)". Each ratio and schedule trains in ``--out/x<ratio>-<schedule>/`` (a cell in its ``<size>/<axis>/``
below it), finished runs are reused, ``--dry-run`` lists the cells and run counts. The result is one line per cell
(paired Δ mean ± sd against that scratch, seeds above it, tokens per grown parameter, growth_at) in
``reproduce_<size>_scan[_<tag>].{json,md}``, and the cells of 2 seeds or more in the format of
``lightning_sparkling/pretrain/measured.json`` (printed; ``--scan-export PATH`` writes them as a JSON list).

Statistics: per row the mean and sample standard deviation of the final validation loss over seeds; against
SPARKLING the per-seed difference (same seed = same initial small model, same data order, same validation
batches), its mean, its standard deviation and a 95% t-interval.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import hashlib
import io
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
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
    # parameter). Not run by the session that wrote it (no GPU).
    "gpu-s": {
        "small": {"n_layer": 6, "n_head": 4, "n_query_groups": 4, "head_size": 64, "n_embd": 128,
                  "intermediate_size": 512, "block_size": 512},
        "large": {"n_embd": 256, "intermediate_size": 1024},
        "config": {
            "precision": "bf16-mixed", "accelerator": "gpu", "devices": 1,
            "data": {"source": "stdlib+site-packages", "vocab_size": 4096, "seq_len": 512, "num_workers": 2},
            "train": {"global_batch_size": 64, "micro_batch_size": 64, "max_steps": 5200, "max_norm": 1.0,
                      "log_interval": 50, "save_interval": None},
            "eval": {"interval": 520, "max_iters": 20},
            "optimizer": {"class_path": "torch.optim.AdamW",
                          "init_args": {"lr": 0.002, "weight_decay": 0.1, "betas": [0.9, 0.95]}},
            "rms_monitor": None,
        },
        "rewarmup_steps": 260,
        "axes": ["joint", "depth"],
        "rows": None,
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

# ------------------------------------------------------------------------------------------------------------ rows
_NO_ASYM = {"optimizer_state": "copy", "rewarmup_ratio": None}  # symmetric state, no re-warmup
_NAIVE = {"init": "copy-copy", "rms_preserving": True, **_NO_ASYM}  # function preserving (alpha = 1/2 at 2x)

ROWS: dict[str, dict[str, Any]] = {
    "scratch small": {"model": "small", "note": "the starting shape, never grown"},
    "scratch large (iso-token)": {"model": "large", "note": "the grown shape from scratch on the same tokens"},
    "scratch large (iso-FLOPs)": {"model": "large", "iso_compute": "SPARKLING",
                                  "note": "the grown shape from scratch on SPARKLING's FLOPs, its own schedule"},
    "naive growth": {"stage": _NAIVE, "note": "copy-copy, fan-in scale, copied state, no re-warmup"},
    "SPARKLING": {"stage": {}, "note": "the paper's recipe (GrowthStage's defaults, growth.recipe: paper)"},
    "SPARKLING random-random": {"stage": {"init": "random-random"}, "note": "random fan-out and fan-in"},
    # the paper's ablation (appendix "Ablation for RMS-Preserving Scaling and Asymmetric Strategies"), copy-copy
    "ablation: neither RMS nor asym.": {"stage": {"rms_preserving": False, **_NO_ASYM}},
    "ablation: RMS only": {"stage": {"rms_preserving": True, **_NO_ASYM}},
    "ablation: asym. only": {"stage": {"rms_preserving": False}},
    # the baselines of the baselines issue (keys of the branch that adds them; refused by older versions)
    "uneven split 1:2": {"stage": {**_NAIVE, "split": "uneven", "split_ratio": 1 / 3}},
    "random split r:(1-r)": {"stage": {**_NAIVE, "split": "random"}},
    "symmetric perturb": {"stage": {**_NAIVE, "perturb": 0.1}},
    "re-warmup all": {"stage": {"optimizer_state": "copy", "rewarmup_scope": "all"}},
    "scaled optimizer state": {"stage": {"optimizer_state": "scaled", "rewarmup_ratio": None}},
    "uneven + 25% faster decay": {"stage": {**_NAIVE, "split": "uneven", "split_ratio": 1 / 3,
                                            "decay_speedup": 0.25}},
}
# issue 15: what makes the grown capacity learn (GrowthStage keys of that change)
ROWS.update({
    "re-warmup ratio 3": {"stage": {"rewarmup_ratio": 3.0}, "note": "copy-copy, new entries re-warm to 3x"},
    "fresh bias correction": {"stage": {"bias_correction": "fresh"},
                              "note": "copy-copy, new entries' Adam bias correction counts from the growth"},
    "symmetry target 0.5": {"stage": {"symmetry_target": 0.5},
                            "note": "copy-copy, new-entry LR doubled (up to 8x) until the copies' cosine < 0.5"},
    "symmetry target 0.8": {"stage": {"symmetry_target": 0.8},
                            "note": "copy-copy, new-entry LR doubled (up to 8x) until the copies' cosine < 0.8"},
    "symmetry 0.5 + fresh": {"stage": {"symmetry_target": 0.5, "bias_correction": "fresh"}},
    "random-random + fresh": {"stage": {"init": "random-random", "bias_correction": "fresh"}},
    "re-warmup ratio 10": {"stage": {"rewarmup_ratio": 10.0}, "note": "copy-copy, new entries re-warm to 10x"},
    "symmetry 0.5 boost 16": {"stage": {"symmetry_target": 0.5, "symmetry_max_boost": 16.0}},
    "symmetry 0.5 boost 4": {"stage": {"symmetry_target": 0.5, "symmetry_max_boost": 4.0}},
    "symmetry 0.5 boost 2": {"stage": {"symmetry_target": 0.5, "symmetry_max_boost": 2.0}},
    "random-random + ratio 10": {"stage": {"init": "random-random", "rewarmup_ratio": 10.0}},
    "random-zero + ratio 10": {"stage": {"init": "random-zero", "rewarmup_ratio": 10.0},
                               "note": "new channels random, their outgoing weights zero"},
    "random-zero": {"stage": {"init": "random-zero"}, "note": "the paper's re-warmup (1.3x) with random-zero init"},
    "random-zero + ratio 2": {"stage": {"init": "random-zero", "rewarmup_ratio": 2.0}},
    "random-zero + ratio 3": {"stage": {"init": "random-zero", "rewarmup_ratio": 3.0},
                              "note": "new channels random, their outgoing weights zero, re-warmed to 3x"},
    "recommended recipe": {"stage": {}, "set": {"growth.recipe": "recommended"},
                           "note": "the CLI's default recipe under cosine (growth.recipe: recommended)"},
    "wsd recipe": {"stage": {}, "set": {"growth.recipe": "wsd"},
                   "note": "the CLI's default recipe under WSD (growth.recipe: wsd; the same runs as 'random-zero')"},
})
# issue 21: depth growth (GrowthStage n_layer, depth_init, depth_order); the paper's recipe otherwise. With the
# layer count doubled (4 -> 8) "interleave" and "middle" place the copies alike (no extra copies to centre), so
# their runs share one identity (resolved_hash) and train once.
DEPTH_ROWS = ["depth stack copy-zero", "depth stack copy", "depth stack random-zero", "depth interleave copy-zero",
              "depth middle copy-zero", "depth stack copy-zero recommended"]
for _order in ("stack", "interleave", "middle"):
    for _init in ("copy-zero", "copy", "random-zero"):
        ROWS[f"depth {_order} {_init}"] = {
            "stage": {"depth_order": _order, "depth_init": _init},
            "note": f"new blocks placed by {_order!r}, started as {_init!r} (paper's recipe otherwise)"}
        if _init != "random-zero":  # the symmetry loop needs copies
            ROWS[f"depth {_order} {_init} recommended"] = {
                "stage": {"depth_order": _order, "depth_init": _init}, "set": {"growth.recipe": "recommended"},
                "note": f"{_order} {_init} under growth.recipe: recommended (the symmetry loop)"}
# the cosine default (growth.recipe: auto = random-zero-3x) on a stage that also grows widths (depth+width): its
# width keys (random-zero channels, re-warmed to 3x); the depth keys are the stage's own
ROWS["depth stack copy-zero random-zero-3x"] = {
    "stage": {"depth_order": "stack", "depth_init": "copy-zero"}, "set": {"growth.recipe": "random-zero-3x"},
    "note": "stack copy-zero under growth.recipe: random-zero-3x (the cosine default since issue 32)"}
DEPTH_ROWS += [r for r in ROWS if r.startswith("depth ") and r not in DEPTH_ROWS]
SCRATCH_ROWS = ["scratch small", "scratch large (iso-token)", "scratch large (iso-FLOPs)"]
# issue 30: the experts axis. "upcycle-*": the size's dense (LLaMAMLP) small model becomes an LLaMAMoE of E=4
# experts, top-2, each expert the MLP's inner size, at 25% / 5% of the run (sparse upcycling); "experts-2x": an
# E=4, K=2 MoE small model grows to E=8 experts (K kept, or K=4 in the same stage) at 25%. The rows set
# expert_init; the comparisons are the grown MoE from scratch and (upcycle) the dense small model continued, each
# on the growth row's FLOPs (6 x active parameters x tokens).
UPCYCLE_ROWS = ["upcycle copy", "upcycle drop-upcycle", "upcycle random"]
for _init in ("copy", "drop-upcycle", "random"):
    ROWS[f"upcycle {_init}"] = {"stage": {"expert_init": _init},
                                "note": f"dense MLP -> LLaMAMoE, experts started as {_init!r}"}
EXPERTS_2X_ROWS = ["experts 2x n_expert", "experts 2x n_expert + K"]
ROWS["experts 2x n_expert"] = {"stage": {}, "note": "n_expert 4 -> 8, top-2 kept, new experts copy the old"}
ROWS["experts 2x n_expert + K"] = {"stage": {"n_expert_per_token": 4},
                                   "note": "n_expert 4 -> 8 and top-2 -> top-4 (function kept), new experts copy"}
DENSE_ISO = "scratch small (iso-FLOPs)"
ROWS[DENSE_ISO] = {"model": "small", "iso_compute": "SPARKLING",
                   "note": "the dense small model continued on the growth row's FLOPs, its own schedule"}
MOE_K4_ISO = "scratch large K=4 (iso-FLOPs)"
ROWS[MOE_K4_ISO] = {"model": "large", "model_config": {"n_expert_per_token": 4},
                    "iso_compute": "experts 2x n_expert + K",
                    "note": "the E=8, K=4 MoE from scratch on that row's FLOPs, its own schedule"}
EXPERT_ROWS = [*UPCYCLE_ROWS, *EXPERTS_2X_ROWS, DENSE_ISO, MOE_K4_ISO]

REFERENCE = "SPARKLING"
DEPTH_REFERENCE = "depth stack copy-zero"
ISO_FLOPS = "scratch large (iso-FLOPs)"  # the question "does growth pay": each growth row against this one
TWO_STAGE_ROWS = ["scratch small", "scratch large (iso-token)", "scratch large (iso-FLOPs)", "naive growth",
                  "SPARKLING", "SPARKLING random-random", "recommended recipe"]
DEPTH_AXES = ["depth", "depth-5", "depth-50", "depth+width", "depth-4x-5", "late-shallow"]
# issue 32: the operating points behind the large published depth savings. Both start from a 2-layer model (the
# size's widths) and grow it 4x to 8 layers in one stage: "depth-4x-5" early (5% of the run, G_stack's factor 4),
# "late-shallow" late (80% of the run; under WSD with a short decay, e.g. --set train.lr_decay_fraction=0.1, the
# growth falls in the stable phase, as zero/one-layer progressive training grows).
AXIS_SMALL = {"depth-4x-5": {"n_layer": 2}, "late-shallow": {"n_layer": 2}}
AXIS_DEPTH_FACTOR = {"depth-4x-5": 4, "late-shallow": 4}
AXIS_TIMING = {"depth-4x-5": 5, "late-shallow": 80}
# issue 22: the hidden axis' growth with the attention heads grown by the same ratio (same head_size), so the
# attention is as wide as the new hidden size; a width axis (SPARKLING is its reference)
HEADS_AXES = ["hidden+heads"]
MOE_SIZE = {"n_expert": 4, "n_expert_per_token": 2}
"""The MoE of the experts axes: E=4 experts, top-2, each of the size's MLP inner size (``moe_intermediate_size``)."""
UPCYCLE_AXES = {"upcycle-25": 25, "upcycle-5": 5, "upcycle-e8-25": 25}
"""Dense -> MoE (:data:`MOE_SIZE`, or the axis' :data:`UPCYCLE_MOE`) at this share (%) of the run."""
UPCYCLE_MOE = {"upcycle-e8-25": {"n_expert": 8, "n_expert_per_token": 2}}
"""Upcycle axes into another MoE than :data:`MOE_SIZE` (E=8, top-2: the same active parameters as E=4, top-2)."""
EXPERTS_AXES = {"experts-2x": 25}
"""An MoE small model (:data:`MOE_SIZE`) to twice the experts at this share (%) of the run."""
EXPERT_AXES = [*UPCYCLE_AXES, *EXPERTS_AXES]
AXES = ["inner", "hidden", "joint", "two-stage", "joint-5", "joint-25", "joint-75", *DEPTH_AXES, *HEADS_AXES,
        *EXPERT_AXES]


def reference(axis: str) -> str:
    """The row an axis' differences (and its iso-FLOPs scratch row) are taken against."""
    if axis in UPCYCLE_AXES:
        return UPCYCLE_ROWS[0]
    if axis in EXPERTS_AXES:
        return EXPERTS_2X_ROWS[0]
    return DEPTH_REFERENCE if axis in DEPTH_AXES else REFERENCE


def comparisons(axis: str, row: str) -> list[str]:
    """The from-scratch rows a growth row of ``axis`` is compared with, each on that row's FLOPs, first the one the
    map's cells are taken against (the grown shape): on the upcycle axes the MoE from scratch and the dense small
    model continued; ``experts 2x n_expert + K`` against the E=8, K=4 MoE; every other row the iso-FLOPs scratch."""
    if axis in UPCYCLE_AXES:
        return [ISO_FLOPS, DENSE_ISO]
    if axis in EXPERTS_AXES and ROWS[row].get("stage", {}).get("n_expert_per_token"):
        return [MOE_K4_ISO]
    return [ISO_FLOPS]


def axis_rows(axis: str, rows: list[str]) -> list[str]:
    """The rows of ``rows`` that apply to ``axis``: depth rows on the depth axes only, the width recipes off them."""
    if axis == "two-stage":
        return [r for r in rows if r in TWO_STAGE_ROWS]
    if axis in DEPTH_AXES:
        return [r for r in rows if r in DEPTH_ROWS or r in SCRATCH_ROWS]
    if axis in UPCYCLE_AXES:
        return [r for r in rows if r in UPCYCLE_ROWS or r in SCRATCH_ROWS or r == DENSE_ISO]
    if axis in EXPERTS_AXES:
        return [r for r in rows if r in EXPERTS_2X_ROWS or r in SCRATCH_ROWS or r == MOE_K4_ISO]
    return [r for r in rows if r not in DEPTH_ROWS and r not in EXPERT_ROWS]


def depth_target(size: dict, axis: str = "depth") -> int:
    """The layer count of a depth axis: ``size['large']['n_layer']`` if set, else twice the small model's (the 4x
    axes of :data:`AXIS_DEPTH_FACTOR`: that factor times their own small model's, :data:`AXIS_SMALL`)."""
    if axis in AXIS_DEPTH_FACTOR:
        return AXIS_DEPTH_FACTOR[axis] * AXIS_SMALL[axis]["n_layer"]
    return size["large"].get("n_layer") or 2 * size["small"]["n_layer"]


def heads_target(size: dict) -> dict[str, int]:
    """The heads of the ``hidden+heads`` axis: ``n_head`` times the hidden growth ratio (same ``head_size``, so
    ``n_head * head_size`` grows with ``n_embd``), and ``n_query_groups`` with it (MHA stays MHA, GQA keeps its heads
    per group; MQA keeps its one group). ``size['large']['n_head']`` / ``['n_query_groups']`` override."""
    small, large = size["small"], size["large"]
    ratio, rest = divmod(large["n_embd"], small["n_embd"])
    if rest or ratio < 1:
        raise ValueError(f"hidden+heads needs an integer n_embd ratio, not {small['n_embd']} -> {large['n_embd']}")
    n_head = large.get("n_head") or small["n_head"] * ratio
    groups = small["n_query_groups"]
    n_query_groups = large.get("n_query_groups") or (groups if groups == 1 else groups * n_head // small["n_head"])
    return {"n_head": n_head, "n_query_groups": n_query_groups}


def axis_stages(axis: str, size: dict, steps: int) -> list[dict[str, Any]]:
    """The growth stages of an axis (widths, ``at_step``, re-warmup length) before a row's recipe is merged in."""
    small, large = size["small"], size["large"]
    rw = size["rewarmup_steps"]
    half = steps // 2
    if axis == "inner":
        return [{"at_step": half, "intermediate_size": large["intermediate_size"], "rewarmup_steps": rw}]
    if axis == "hidden":
        return [{"at_step": half, "n_embd": large["n_embd"], "rewarmup_steps": rw}]
    if axis == "hidden+heads":  # the hidden axis' stage with n_head (and n_query_groups) grown by the same ratio
        return [{"at_step": half, "n_embd": large["n_embd"], **heads_target(size), "rewarmup_steps": rw}]
    if axis == "joint":
        return [{"at_step": half, "n_embd": large["n_embd"], "intermediate_size": large["intermediate_size"],
                 "rewarmup_steps": rw}]
    if axis in ("joint-5", "joint-25", "joint-75"):  # joint 2x at 5% / 25% / 75% of the run (in no size's axes)
        return [{"at_step": steps * int(axis.split("-")[1]) // 100, "n_embd": large["n_embd"],
                 "intermediate_size": large["intermediate_size"], "rewarmup_steps": rw}]
    if axis == "two-stage":  # 1.5x at a third, 2x at two thirds (both axes each time)
        mid = {k: (small[k] + large[k]) // 2 for k in ("n_embd", "intermediate_size")}
        return [{"at_step": steps // 3, **mid, "rewarmup_steps": rw},
                {"at_step": 2 * steps // 3, "n_embd": large["n_embd"],
                 "intermediate_size": large["intermediate_size"], "rewarmup_steps": rw}]
    if axis in ("depth", "depth-5", "depth-50"):  # n_layer 2x at the size's widths, at 25% (default), 5% or 50%
        pct = 25 if axis == "depth" else int(axis.split("-")[1])
        return [{"at_step": steps * pct // 100, "n_layer": depth_target(size), "rewarmup_steps": rw}]
    if axis in AXIS_TIMING:  # 2 -> 8 layers in one stage
        return [{"at_step": steps * AXIS_TIMING[axis] // 100, "n_layer": depth_target(size, axis),
                 "rewarmup_steps": rw}]
    if axis == "depth+width":  # n_layer 2x and the joint width 2x in one stage, at 25%
        return [{"at_step": steps // 4, "n_layer": depth_target(size), "n_embd": large["n_embd"],
                 "intermediate_size": large["intermediate_size"], "rewarmup_steps": rw}]
    if axis in UPCYCLE_AXES:  # dense -> MoE (moe_intermediate_size: the MLP's inner size, the stage's default)
        return [{"at_step": steps * UPCYCLE_AXES[axis] // 100, "mlp_class_name": "LLaMAMoE",
                 **UPCYCLE_MOE.get(axis, MOE_SIZE), "rewarmup_steps": rw}]
    if axis in EXPERTS_AXES:  # E -> 2E (a row may grow n_expert_per_token with it)
        return [{"at_step": steps * EXPERTS_AXES[axis] // 100, "n_expert": 2 * MOE_SIZE["n_expert"],
                 "rewarmup_steps": rw}]
    raise ValueError(f"unknown axis {axis!r}")


def axis_small(axis: str, size: dict) -> dict[str, Any]:
    """The model keys an axis changes in the size's small model (:data:`AXIS_SMALL`; the experts-2x axis starts
    from an MoE of :data:`MOE_SIZE`, experts of the size's MLP inner size)."""
    if axis in EXPERTS_AXES:
        return {"mlp_class_name": "LLaMAMoE", **MOE_SIZE, "moe_intermediate_size": size["small"]["intermediate_size"]}
    return dict(AXIS_SMALL.get(axis, {}))


def large_model(axis: str, size: dict) -> dict[str, Any]:
    """The grown shape of an axis (what its "scratch large" rows train from the first step)."""
    if axis == "inner":
        return {"intermediate_size": size["large"]["intermediate_size"]}
    if axis == "hidden":
        return {"n_embd": size["large"]["n_embd"]}
    if axis == "hidden+heads":
        return {"n_embd": size["large"]["n_embd"], **heads_target(size)}
    if axis in ("depth", "depth-5", "depth-50", *AXIS_TIMING):
        return {"n_layer": depth_target(size, axis)}
    if axis in UPCYCLE_AXES:
        return {"mlp_class_name": "LLaMAMoE", **UPCYCLE_MOE.get(axis, MOE_SIZE),
                "moe_intermediate_size": size["small"]["intermediate_size"]}
    if axis in EXPERTS_AXES:
        return {**axis_small(axis, size), "n_expert": 2 * MOE_SIZE["n_expert"]}
    widths = {k: v for k, v in size["large"].items() if k not in ("n_layer", "n_head", "n_query_groups")}
    if axis == "depth+width":
        return {**widths, "n_layer": depth_target(size)}
    return widths


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


def build_config(size: dict, axis: str, row: dict, seed: int, steps: int | None = None) -> dict:
    """The full ``sparkling pretrain`` configuration of one row of one axis for one seed (no ``out_dir``)."""
    config = copy.deepcopy(size["config"])
    model = {"name": "repro", **_MODEL, **size["small"], **axis_small(axis, size)}
    if row.get("model") == "large":
        model.update(large_model(axis, size))
    model.update(row.get("model_config", {}))
    config["model_config"] = model
    config["seed"] = seed
    total = config["train"]["max_steps"]
    if "stage" in row:
        # recipe paper: a row is exactly its keys on top of GrowthStage's defaults (the CLI's default recipe would
        # add the symmetry loop to every copy-copy row); the "recommended" row sets growth.recipe itself
        config["growth"] = {"seed": seed, "recipe": "paper",
                            "stages": [{**s, **row["stage"]} for s in axis_stages(axis, size, total)]}
    if steps is not None:
        config["train"]["max_steps"] = steps
    for key, value in row.get("set", {}).items():
        set_dotted(config, key, value)
    return config


def check_config(config: dict) -> tuple[dict | None, str | None]:
    """Let the installed package parse and resolve ``config``: ``(compute, None)`` or ``(None, its message)``.

    ``compute`` holds the parameters per phase and the FLOPs (``estimate_compute``) of the run as configured.
    """
    from lightning_sparkling.growth.compute import estimate_compute
    from lightning_sparkling.pretrain.cli import parse

    path = Path(os.environ.get("TMPDIR", "/tmp")) / f"repro_check_{os.getpid()}.yaml"
    path.write_text(yaml.safe_dump({**config, "out_dir": "/tmp/repro_unused"}, sort_keys=False))
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            _, run, dumped = parse(["--config", str(path)])
    except SystemExit:
        lines = [ln for ln in err.getvalue().splitlines() if "error" in ln.lower()] or err.getvalue().splitlines()
        why = (lines[-1] if lines else "refused").strip()
        return None, re.sub(r" \(in /\S+\)$", "", why)
    except Exception as exc:  # noqa: BLE001 - any refusal is reported, never fatal for the grid
        return None, f"{type(exc).__name__}: {exc}"
    finally:
        path.unlink(missing_ok=True)
    est = estimate_compute(run.model_config, run.stages, total_steps=run.steps, tokens_per_step=run.tokens_per_step,
                           tie_embeddings=run.train.tie_embeddings)
    return {"steps": run.steps, "tokens_per_step": run.tokens_per_step, "eval_interval": run.eval.interval,
            "active_params": list(est.active_params),
            "total_params": list(est.total_params), "phase_steps": list(est.phase_steps), "flops": est.flops,
            "growth_steps": [s.at_step for s in run.stages],
            "resolved_hash": resolved_hash(dumped, run.stages)}, None


def resolved_hash(dumped: str, stages: list) -> str:
    """A hash of what the package makes of a config: identical runs hash alike, however their stages were written.

    ``dumped`` is the parsed config as the CLI saves it (stages as written, ``growth.recipe``); they are replaced by
    the resolved stages (recipe applied, every ``GrowthStage`` default filled in), so e.g. "ablation: RMS only" and
    "naive growth" (copy-copy is the default ``init``) or "recommended recipe" and "symmetry target 0.5" train once.
    """
    config = yaml.safe_load(dumped)
    config.pop("out_dir", None)
    if isinstance(config.get("growth"), dict):
        config["growth"].pop("recipe", None)
        config["growth"]["stages"] = [stage_identity(s.to_dict(), (config.get("model_config") or {}).get("n_layer"))
                                      for s in stages]
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


_DEPTH_KEYS = ("n_layer", "depth_init", "depth_order")
_UNSET_LATER_KEYS = ("n_head", "n_query_groups", "model_name", "model_config")  # heads / named-target growth


def stage_identity(stage: dict, n_layer: int | None) -> dict:
    """A resolved stage's dict as it enters a run's identity.

    A stage that does not grow depth drops the depth keys, and unset (``None``) heads / named-target keys are
    dropped too, so the width runs hash as they did before those ``GrowthStage`` fields existed; a depth stage whose ``depth_order`` places the copies like another (``middle`` and ``interleave`` when
    the layer count is a multiple of the old one) names the first of them.
    """
    stage = {k: v for k, v in stage.items() if not (k in _UNSET_LATER_KEYS and v is None)}
    if stage.get("n_layer") is None:
        for key in _DEPTH_KEYS:
            stage.pop(key, None)
        return stage
    if n_layer and stage.get("depth_order") == "middle":
        from lightning_sparkling.growth.depth import depth_source_map

        if n_layer < stage["n_layer"] and depth_source_map(n_layer, stage["n_layer"], "middle") == \
                depth_source_map(n_layer, stage["n_layer"], "interleave"):
            stage["depth_order"] = "interleave"
    return stage


def cumulative_flops(compute: dict, step: int) -> float:
    """Training FLOPs after ``step`` optimizer steps (``6 N D`` per phase)."""
    done, total = 0, 0.0
    for n, k in zip(compute["active_params"], compute["phase_steps"]):
        take = max(0, min(k, step - done))
        total += 6.0 * n * compute["tokens_per_step"] * take
        done += k
    return total


# ------------------------------------------------------------------------------------------------------------ plan
def plan_grid(size_name: str, size: dict, axes: list[str], rows: list[str], seeds: list[int],
              out: Path) -> tuple[list, list]:
    """Every (axis, row, seed) cell with its config, run dir and compute; and the refused rows."""
    cells, refused, by_hash = [], [], {}
    for axis in axes:
        names = axis_rows(axis, rows)
        # rows others depend on (iso_compute) first
        names.sort(key=lambda r: 1 if ROWS[r].get("iso_compute") else 0)
        computes: dict[str, dict] = {}
        for name in names:
            row = ROWS[name]
            steps = None
            if row.get("iso_compute"):
                # on the depth axes the growth rows' FLOPs are the reference's (the axis' reference row); every
                # growth row of an axis has the same parameters per phase, so any of them stands in when the
                # reference row is not in the grid (e.g. only the best row of a first grid, or a scan's row)
                target = reference(axis) if row["iso_compute"] == REFERENCE else row["iso_compute"]
                ref = computes.get(target)
                if ref is None and target == reference(axis):
                    ref = next((computes[r] for r in names if r in computes and "stage" in ROWS[r]), None)
                if ref is None:
                    refused.append({"axis": axis, "row": name, "why": f"needs row {target!r}"})
                    continue
                probe, why = check_config(build_config(size, axis, row, seeds[0]))
                if probe is None:
                    refused.append({"axis": axis, "row": name, "why": why})
                    continue
                per_step = 6.0 * probe["active_params"][-1] * probe["tokens_per_step"]
                steps = max(1, round(ref["flops"] / per_step))
            for seed in seeds:
                config = build_config(size, axis, row, seed, steps)
                compute, why = check_config(config)
                if compute is None:
                    refused.append({"axis": axis, "row": name, "why": why})
                    break
                computes.setdefault(name, compute)
                key = compute["resolved_hash"]
                run_dir = by_hash.setdefault(key, out / size_name / axis / slug(name) / f"seed{seed}")
                cells.append({"axis": axis, "row": name, "seed": seed, "config": config, "hash": key,
                              "run_dir": str(run_dir), "compute": compute, "note": row.get("note", "")})
    return cells, refused


# ------------------------------------------------------------------------------------------------------------ run
def is_done(run_dir: Path, config: dict) -> bool:
    summary, saved = run_dir / "summary.json", run_dir / "config.yaml"
    if not (summary.is_file() and saved.is_file()):
        return False
    try:
        ok = json.loads(summary.read_text()).get("status", "completed") == "completed"
        previous = yaml.safe_load(saved.read_text())
        if isinstance(previous.get("growth"), dict):  # runs from before growth.recipe existed grew by the paper's
            previous["growth"].setdefault("recipe", "paper")
        return ok and previous == {**config, "out_dir": str(run_dir)}
    except (OSError, ValueError, yaml.YAMLError):
        return False


def run_grid(cells: list[dict], jobs: int, log=print) -> None:
    """Train every distinct run (``jobs`` subprocesses at a time); skip runs already finished."""
    todo, seen = [], set()
    for cell in cells:
        if cell["run_dir"] in seen:
            continue
        seen.add(cell["run_dir"])
        if not is_done(Path(cell["run_dir"]), cell["config"]):
            todo.append(cell)
    todo.sort(key=lambda c: c["seed"])  # every row of seed 1 first: a stopped grid is still paired
    log(f"{len(seen)} distinct runs, {len(seen) - len(todo)} already done, {len(todo)} to train ({jobs} at a time)")
    running: list[tuple[subprocess.Popen, dict, float, Any]] = []
    t_grid = time.perf_counter()
    import signal

    def _terminate(signum, frame):  # `kill` of the grid stops its own training subprocesses too
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        _run_loop(todo, running, jobs, seen, log, t_grid)
    except KeyboardInterrupt:
        for proc, cell, _, logf in running:
            proc.terminate()
            proc.wait()
            logf.close()
            log(f"stopped: {cell['axis']} | {cell['row']} seed {cell['seed']} (unfinished, trained again next time)")
        raise SystemExit(130)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run_loop(todo: list, running: list, jobs: int, seen: set, log, t_grid: float) -> None:
    done = 0
    while todo or running:
        while todo and len(running) < jobs:
            cell = todo.pop(0)
            run_dir = Path(cell["run_dir"])
            if run_dir.exists():  # an unfinished or stale run: start it again from scratch
                import shutil

                shutil.rmtree(run_dir)
            run_dir.mkdir(parents=True)
            (run_dir / "config.yaml").write_text(yaml.safe_dump({**cell["config"], "out_dir": str(run_dir)},
                                                                sort_keys=False))
            logf = open(run_dir / "run.log", "w")  # noqa: SIM115 - open while the subprocess runs
            env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
            proc = subprocess.Popen([sys.executable, "-m", "lightning_sparkling.pretrain.cli", "pretrain", "--config",
                                     str(run_dir / "config.yaml")], stdout=logf, stderr=subprocess.STDOUT, env=env)
            running.append((proc, cell, time.perf_counter(), logf))
        time.sleep(2)
        for item in list(running):
            proc, cell, t0, logf = item
            if proc.poll() is None:
                continue
            running.remove(item)
            logf.close()
            done += 1
            status = "ok" if proc.returncode == 0 else f"FAILED (exit {proc.returncode}, see {cell['run_dir']}/run.log)"
            log(f"[{done}/{len(seen)}] {cell['axis']:>9} | {cell['row']:<32} seed {cell['seed']}: {status}, "
                f"{time.perf_counter() - t0:.0f} s (grid {(time.perf_counter() - t_grid) / 60:.1f} min)")


def read_symmetry(run_dir: Path) -> dict[str, float]:
    """The last logged ``symmetry/stage_k/<axis>`` values (mean cosine of copies to their sources) of a run."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "logs"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag.removeprefix("symmetry/"): acc.Scalars(tag)[-1].value
            for tag in acc.Tags().get("scalars", []) if tag.startswith("symmetry/")}


def read_curve(run_dir: Path, compute: dict) -> list[dict]:
    """``[{step, tokens, flops, val_loss}]`` from the run's TensorBoard events."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "logs"), size_guidance={"scalars": 0})
    acc.Reload()
    if "val_loss" not in acc.Tags().get("scalars", []):
        return []
    # Lightning logs a validation run inside the training loop at the step before the one that triggered it
    # (after 250 optimizer steps: TensorBoard step 249); a final validation after the fit at max_steps itself
    interval, steps = compute.get("eval_interval") or compute["steps"], compute["steps"]
    points = {}
    for ev in acc.Scalars("val_loss"):
        s = ev.step
        if s != steps and ((s + 1) % interval == 0 or s + 1 == steps):
            s += 1
        points[s] = ev.value  # a repeated step (final validation) keeps the last value
    tps = compute["tokens_per_step"]
    return [{"step": s, "tokens": s * tps, "flops": cumulative_flops(compute, s), "val_loss": v}
            for s, v in sorted(points.items())]


# ------------------------------------------------------------------------------------------------------------ stats
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def mean_sd(values: list[float]) -> tuple[float, float | None]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def paired_diff(seeds: dict, ref: dict) -> dict | None:
    """The per-seed differences ``seeds[s] - ref[s]`` over the seeds both have: ``{n, mean, sd, ci95 (half-width of
    the 95% t-interval), per_seed, wins (seeds where the row ended above ref)}``, or ``None`` with no common seed."""
    paired = [seeds[s] - ref[s] for s in seeds if s in ref]
    if not paired:
        return None
    m, sd = mean_sd(paired)
    half = _T975.get(len(paired) - 1, 1.96) * sd / math.sqrt(len(paired)) if sd is not None else None
    return {"n": len(paired), "mean": m, "sd": sd, "ci95": half, "per_seed": paired,
            "wins": sum(d > 0 for d in paired)}


def collect(cells: list[dict]) -> dict:
    """Per axis and row: per-seed final val loss, curves, mean/sd, and the paired difference to SPARKLING."""
    table: dict[str, dict[str, dict]] = {}
    for cell in cells:
        run_dir = Path(cell["run_dir"])
        entry = table.setdefault(cell["axis"], {}).setdefault(cell["row"], {
            "note": cell["note"], "compute": cell["compute"], "seeds": {}, "curves": {}, "failed": [], "not_run": []})
        summary_path = run_dir / "summary.json"
        if not summary_path.is_file():
            entry["not_run"].append(cell["seed"])
            continue
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
        if summary.get("status", "missing") != "completed" or summary.get("val_loss") is None:
            entry["failed"].append(cell["seed"])
            continue
        entry["seeds"][cell["seed"]] = summary["val_loss"]
        entry["curves"][cell["seed"]] = read_curve(run_dir, cell["compute"])
        entry.setdefault("symmetry", {})[cell["seed"]] = read_symmetry(run_dir)
        entry.setdefault("wall_s", []).append(summary.get("wall_clock_seconds"))
        entry["run_dir"] = entry.get("run_dir") or str(run_dir.parent)
    for axis, rows in table.items():
        for entry in rows.values():
            vals = list(entry["seeds"].values())
            if vals:
                entry["mean"], entry["sd"] = mean_sd(vals)
            for key, name in (("diff", reference(axis)), ("diff_iso_flops", ISO_FLOPS)):
                ref = rows.get(name, {}).get("seeds", {})
                if entry["seeds"] is not ref:
                    diff = paired_diff(entry["seeds"], ref)
                    if diff:
                        entry[key] = diff
            sym = [v for per_seed in entry.get("symmetry", {}).values() for v in per_seed.values()]
            by_axis: dict[str, list[float]] = {}
            for per_seed in entry.get("symmetry", {}).values():
                for tag, v in per_seed.items():
                    by_axis.setdefault(tag.split("/")[-1], []).append(v)
            if sym:
                entry["symmetry_end"] = {axis: sum(v) / len(v) for axis, v in by_axis.items()}
    return table


# ------------------------------------------------------------------------------------------------------------ report
def fmt(x: float | None, p: int = 3) -> str:
    return "-" if x is None else f"{x:.{p}f}"


def markdown(size_name: str, table: dict, refused: list[dict], seeds: list[int], wall: float | None) -> str:
    lines = [f"### `--size {size_name}`: final validation loss, {len(seeds)} seeds ({', '.join(map(str, seeds))})", ""]
    runs = {e.get("run_dir"): sum(w for w in e.get("wall_s", []) if w) for rows in table.values()
            for e in rows.values()}
    spent = f"sum of the runs' wall-clock (summary.json): {sum(runs.values()) / 60:.1f} min"
    lines.append(f"Grid wall-clock of this invocation: {wall / 60:.1f} min; {spent}." if wall is not None
                 else f"{spent[0].upper()}{spent[1:]}.")
    lines.append("")
    for axis, rows in table.items():
        ref_name = reference(axis)
        large = next((e for n, e in rows.items() if n.startswith("scratch large (iso-token)")), None)
        ref_flops = large["compute"]["flops"] if large else None
        tokens = None
        if large:
            c = large["compute"]
            tokens = c["steps"] * c["tokens_per_step"]
            ratio = tokens / c["total_params"][-1]
            lines.append(f"**{axis}**: {c['steps']} steps x {c['tokens_per_step']} tokens = {tokens:,} tokens; grown "
                         f"shape {c['total_params'][-1]:,} parameters ({ratio:.3g} tokens per parameter; the paper: "
                         f"~100 per active parameter).")
        elif any(n.startswith("scratch large") for n in rows):
            c = next(e for n, e in rows.items() if n.startswith("scratch large"))["compute"]
            lines.append(f"**{axis}**: {c['tokens_per_step']} tokens per step; grown shape {c['total_params'][-1]:,} "
                         "parameters (no iso-token row in this grid)")
        else:
            lines.append(f"**{axis}** (no iso-token row in this grid)")
        lines.append("")
        lines.append("| row | parameters | steps | FLOPs (x iso-token scratch) | val loss mean ± sd | "
                     f"Δ vs {ref_name} (paired mean ± sd, 95% CI) | row worse in | Δ vs iso-FLOPs scratch "
                     "(paired mean ± sd) | copies' cosine at the end | per seed |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|")
        for name, e in sorted(rows.items(), key=lambda kv: list(ROWS).index(kv[0])):
            c = e["compute"]
            params = " -> ".join(f"{p / 1e3:.0f}k" for p in c["total_params"])
            rel = f"{c['flops']:.3g} ({c['flops'] / ref_flops:.2f})" if ref_flops else f"{c['flops']:.3g}"
            loss = f"{fmt(e.get('mean'))} ± {fmt(e.get('sd'))} (n={len(e['seeds'])})" if e["seeds"] else "not run"
            d = e.get("diff")
            diff = "—" if name == ref_name else ("-" if not d else
                                                   f"{d['mean']:+.3f} ± {fmt(d['sd'])} (± {fmt(d['ci95'])})")
            wins = "" if name == ref_name or not d else f"{d['wins']}/{d['n']}"
            per = ", ".join(f"{v:.3f}" for _, v in sorted(e["seeds"].items()))
            if e["failed"]:
                per += f" (failed: seeds {e['failed']})"
            if e.get("not_run"):
                per += f" (not run: seeds {e['not_run']})"
            di = e.get("diff_iso_flops")
            iso = "—" if name == ISO_FLOPS else ("-" if not di else f"{di['mean']:+.3f} ± {fmt(di['sd'])} "
                                                                     f"({di['wins']}/{di['n']} above)")
            sym = ", ".join(f"{axis} {v:.2f}" for axis, v in sorted(e.get("symmetry_end", {}).items())) or "-"
            lines.append(f"| {name} | {params} | {c['steps']} | {rel} | {loss} | {diff} | {wins} | {iso} | {sym} "
                         f"| {per} |")
        lines.append("")
    if refused:
        lines.append("Rows not available in this version (the installed package refused their keys):")
        lines.append("")
        seen = set()
        for r in refused:
            if (r["row"], r["why"]) in seen:
                continue
            seen.add((r["row"], r["why"]))
            lines.append(f"- {r['row']} ({r['axis']}): {r['why']}")
        lines.append("")
    return "\n".join(lines)


def published_path(path: Path | str) -> str:
    """``path`` relative to the repository when it lies inside it (what the committed JSON records), else as is."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(HERE.parent))
    except ValueError:
        return str(path)


def _plot_axis(axes, axis: str, rows: dict, colors) -> None:
    """Mean validation loss over seeds of every row of one axis, against tokens (``axes[0]``) and FLOPs."""
    ymax = None
    for index, (name, e) in enumerate(rows.items()):
        curves = [c for c in e["curves"].values() if c]
        if not curves:
            continue
        n = min(len(c) for c in curves)
        xs_t = [curves[0][i]["tokens"] for i in range(n)]
        xs_f = [curves[0][i]["flops"] for i in range(n)]
        ys = [statistics.fmean(c[i]["val_loss"] for c in curves) for i in range(n)]
        style = "-" if "stage" in ROWS[name] else "--"
        label = f"{name} ({fmt(e.get('mean'))})"
        color = colors[index % len(colors)]
        axes[0].plot(xs_t, ys, style, marker=".", color=color, label=label)
        axes[1].plot(xs_f, ys, style, marker=".", color=color, label=label)
        ymax = max(ymax or 0, ys[0])  # the first evaluation: a growth spike above it is clipped
        if name == reference(axis) or (name == ISO_FLOPS and not any(n == reference(axis) for n in rows)):
            c = e["compute"] if name != ISO_FLOPS else next(
                (x["compute"] for n, x in rows.items() if "stage" in ROWS[n]), e["compute"])
            for s in c["growth_steps"]:
                axes[0].axvline(s * c["tokens_per_step"], color="gray", ls=":", lw=1)
                axes[1].axvline(cumulative_flops(c, s), color="gray", ls=":", lw=1)
    for ax, xl in zip(axes, ("tokens", "training FLOPs (6 N D)")):
        ax.set_xlabel(xl)
        ax.set_ylabel("validation loss (mean over seeds)")
        ax.grid(alpha=0.3)
        if ymax:
            ax.set_ylim(top=ymax)
    if axes[1].get_legend_handles_labels()[0]:
        axes[1].legend(fontsize=7)


def plot(size_name: str, table: dict, results: Path, tag: str | None = None) -> list[str]:
    """One PNG per axis (``reproduce_<size>_<axis>.png``), or with ``tag`` one PNG of every axis, a row of two
    panels each (``reproduce_<size>_<tag>.png``). Returns the paths as :func:`published_path` writes them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = plt.get_cmap("tab20").colors  # one color per row (the default cycle repeats after 10)
    note = "dotted: growth; y clipped at the first evaluation"
    figures = []
    if tag and table:
        fig, grid = plt.subplots(len(table), 2, figsize=(13, 5 * len(table)), squeeze=False)
        for panels, (axis, rows) in zip(grid, table.items()):
            _plot_axis(panels, axis, rows, colors)
            panels[0].set_title(f"axis {axis}")
            panels[1].set_title(f"axis {axis}")
        fig.suptitle(f"reproduce.py --size {size_name}, axes {', '.join(table)} ({note})")
        figures.append((fig, results / f"reproduce_{size_name}_{slug(tag)}.png"))
    else:
        for axis, rows in table.items():
            fig, panels = plt.subplots(1, 2, figsize=(13, 5))
            _plot_axis(panels, axis, rows, colors)
            fig.suptitle(f"reproduce.py --size {size_name}, axis {axis} ({note})")
            figures.append((fig, results / f"reproduce_{size_name}_{slug(axis)}.png"))
    files = []
    for fig, path in figures:
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(published_path(path))
    return files


# ------------------------------------------------------------------------------------------------------------ scan
# issue 23, "where growth pays": a map of cells, each one growth row against the grown shape from scratch on the same
# FLOPs with the same LR schedule, over token ratio (train.max_steps multipliers), schedule, growth timing and axis.
SCAN_SCHEDULES = ["cosine", "wsd"]
SCAN_RATIOS = [1, 4, 8]
SCAN_AXES = {"joint-25": "recommended recipe", "joint": "recommended recipe", "joint-75": "recommended recipe",
             "depth-5": DEPTH_REFERENCE, "depth": DEPTH_REFERENCE, "depth-50": DEPTH_REFERENCE,
             "depth-4x-5": DEPTH_REFERENCE, "late-shallow": DEPTH_REFERENCE,
             **{axis: reference(axis) for axis in EXPERT_AXES}}
"""The scan's timings of each axis and the row each is measured with (``--scan-rows`` replaces it)."""
SCAN_DEFAULT_AXES = ["joint-25", "joint", "joint-75", "depth-5", "depth", "depth-50"]
SCAN_RECIPES = {"SPARKLING": "paper", "recommended recipe": "recommended", "random-zero + ratio 10": "random-zero",
                "random-zero": "wsd", DEPTH_REFERENCE: "paper", **{r: "paper" for r in UPCYCLE_ROWS + EXPERTS_2X_ROWS}}
"""The map's ``recipe`` (a ``growth.recipe``) of a row. The row "random-zero" (random-zero init, the paper's 1.3x
re-warmup) is the recipe ``wsd``, not the recipe ``random-zero`` (10x re-warmup: the row "random-zero + ratio 10").
A stage that grows only n_layer gets no symmetry loop under ``recommended``, so the depth row is ``paper``."""


def map_axis(axis: str, row: str | None = None) -> str:
    """The map's axis of a reproduce.py axis: the timing suffix dropped (``joint-25`` -> ``joint``); the 4x depth
    axes are ``depth`` (as the package classifies their stage); the experts axes ``upcycle``, ``experts`` or, for a
    ``row`` that grows ``n_expert_per_token`` too, ``experts+topk``."""
    if axis in EXPERT_AXES:  # as growth.measured.classify_axis names an experts stage
        if axis in UPCYCLE_AXES:
            return "upcycle"
        return "experts+topk" if row and ROWS[row].get("stage", {}).get("n_expert_per_token") else "experts"
    return "depth" if axis in AXIS_TIMING else re.sub(r"-\d+$", "", axis)


def map_init(axis: str, row: str) -> str | None:
    """The ``init`` of a map cell: the row's ``expert_init`` on the experts axes (``copy`` unless it sets one),
    ``None`` on the others (their cells have no ``init``)."""
    if axis not in EXPERT_AXES:
        return None
    return ROWS[row].get("stage", {}).get("expert_init", "copy")


def map_recipe(row: str) -> str | None:
    """The map's ``recipe`` of a row: :data:`SCAN_RECIPES`, else the ``growth.recipe`` the row is exactly (its
    ``growth.recipe`` with no stage keys of its own, or stage keys equal to a named recipe's under the paper's);
    ``None`` for a row that is no named recipe (its cells are reported, not exported to the map)."""
    if row in SCAN_RECIPES:
        return SCAN_RECIPES[row]
    stage, recipe = ROWS[row].get("stage"), ROWS[row].get("set", {}).get("growth.recipe", "paper")
    if stage == {}:
        return recipe
    try:
        from lightning_sparkling.growth.stage import RECIPES
    except ImportError:
        return None
    return next((name for name, keys in RECIPES.items() if recipe == "paper" and keys and keys == stage), None)


def default_decay_fraction() -> float:
    """``train.lr_decay_fraction``'s default in the installed package (0.2 where it cannot be read)."""
    try:
        from lightning_sparkling.pretrain.config import TrainArgs

        return float(TrainArgs.lr_decay_fraction)
    except (ImportError, AttributeError, TypeError, ValueError):
        return 0.2


def scan_size(size: dict, ratio: int, schedule: str) -> dict:
    """``size`` with ``train.max_steps`` times ``ratio`` and, for ``wsd``, ``train.lr_schedule: wsd`` on every run of
    the cell (scratch included). ``cosine`` leaves the key out, so those runs are the grid's own configurations."""
    out = copy.deepcopy(size)
    train = out["config"]["train"]
    train["max_steps"] = int(train["max_steps"]) * ratio
    if schedule == "wsd":
        train["lr_schedule"] = "wsd"
    elif schedule != "cosine":
        raise ValueError(f"unknown schedule {schedule!r}; choose from {SCAN_SCHEDULES}")
    return out


def scan_cells(size: dict, ratios: list[int], schedules: list[str], axes: list[str],
               rows: list[str] | None = None) -> tuple[list[dict], list[dict]]:
    """The scan's cells, ``(cells, skipped)``: one cell per ratio, schedule, axis and row (the axis' row of
    :data:`SCAN_AXES`, or the ``rows`` that apply to the axis; ``"<axis>:<row>"`` applies to that axis only). Under
    ``wsd`` a timing whose growth is not inside the stable phase (``at_step / steps >= 1 - lr_decay_fraction``) is
    skipped, with the reason."""
    cells, skipped = [], []
    for ratio in ratios:
        for schedule in schedules:
            sized = scan_size(size, ratio, schedule)
            train = sized["config"]["train"]
            steps = train["max_steps"]
            decay = float(train.get("lr_decay_fraction") or default_decay_fraction())
            for axis in axes:
                names = ([r for r in (row_of(r, axis) for r in rows) if r and r in axis_rows(axis, [r])] if rows
                         else [SCAN_AXES.get(axis) or "recommended recipe"])
                names = [r for r in names if "stage" in ROWS[r]]
                if not names:
                    skipped.append({"ratio": ratio, "schedule": schedule, "axis": axis,
                                    "why": f"none of the rows {rows} grows on this axis"})
                    continue
                at = axis_stages(axis, sized, steps)[0]["at_step"]
                growth_at = at / steps
                if schedule == "wsd" and growth_at >= 1 - decay - 1e-9:
                    skipped.append({"ratio": ratio, "schedule": schedule, "axis": axis,
                                    "why": f"growth at {growth_at:.0%} (step {at}) is not before the WSD decay "
                                           f"(the last {decay:g} of the run)"})
                    continue
                for row in names:
                    cells.append({"ratio": ratio, "schedule": schedule, "axis": axis, "row": row, "steps": steps,
                                  "growth_step": at, "growth_at": growth_at, "sub": f"x{ratio}-{schedule}"})
    return cells, skipped


def row_of(spec: str, axis: str) -> str | None:
    """The row of a ``--scan-rows`` entry on ``axis``: ``"<row>"`` on every axis, ``"<axis>:<row>"`` on that one."""
    scope, sep, row = spec.partition(":")
    if sep and scope in AXES:
        return row if scope == axis else None
    return spec


def plan_scan(size_name: str, size: dict, cells: list[dict], seeds: list[int], out: Path,
              budgets: tuple[float, ...] = ()) -> tuple[list, list]:
    """Plan every run of the scan: per ratio and schedule one :func:`plan_grid` of its axes, the cells' rows and their
    comparisons (:func:`comparisons`: the iso-FLOPs scratch; on the experts axes the others too), in
    ``out/x<ratio>-<schedule>/`` (one subfolder per cell below it: ``<size>/<axis>/``), and the grown shape from
    scratch at each of ``budgets`` times the iso-FLOPs scratch's steps (its own schedule; the curve the speed-up at
    equal loss is read from). Returns the runs (each with its cell's ``sub``) and the refused rows."""
    runs, refused = [], []
    groups: dict[tuple[int, str], list[dict]] = {}
    for cell in cells:
        groups.setdefault((cell["ratio"], cell["schedule"]), []).append(cell)
    for (ratio, schedule), group in groups.items():
        axes = list(dict.fromkeys(c["axis"] for c in group))
        versus = {(c["axis"], v) for c in group for v in comparisons(c["axis"], c["row"])}  # ISO_FLOPS, mostly
        rows = list(dict.fromkeys([*(c["row"] for c in group), *(v for _, v in sorted(versus))]))
        planned, why = plan_grid(size_name, scan_size(size, ratio, schedule), axes, rows, seeds,
                                 out / group[0]["sub"])
        wanted = {(c["axis"], c["row"]) for c in group} | versus
        runs += [{**r, "sub": group[0]["sub"]} for r in planned if (r["axis"], r["row"]) in wanted]
        refused += [{**r, "sub": group[0]["sub"]} for r in why]
        sized = scan_size(size, ratio, schedule)
        for iso in [r for r in planned if r["row"] == ISO_FLOPS]:
            for b in budgets:
                steps = max(1, round(b * iso["compute"]["steps"]))
                config = build_config(sized, iso["axis"], ROWS[ISO_FLOPS], iso["seed"], steps)
                compute, why_b = check_config(config)
                if compute is None:
                    refused.append({"axis": iso["axis"], "row": budget_row(b), "why": why_b, "sub": group[0]["sub"]})
                    continue
                run_dir = out / group[0]["sub"] / size_name / iso["axis"] / slug(budget_row(b)) / f"seed{iso['seed']}"
                runs.append({"axis": iso["axis"], "row": budget_row(b), "seed": iso["seed"], "config": config,
                             "hash": compute["resolved_hash"], "run_dir": str(run_dir), "compute": compute,
                             "note": f"the grown shape from scratch on {b:g}x the iso-FLOPs budget",
                             "sub": group[0]["sub"], "budget": b})
    return runs, refused


def budget_row(b: float) -> str:
    """The name of the scratch row trained on ``b`` times the iso-FLOPs scratch's steps (``--budgets``)."""
    return f"scratch large (x{b:g} FLOPs)"


def scratch_flops_at(points: list[tuple[float, float]], loss: float) -> tuple[float | None, str]:
    """The compute at which the scratch curve reaches ``loss``, interpolated in log-FLOPs, never extrapolated.

    ``points``: ``(flops, final val loss)`` of the grown shape trained from scratch at several budgets (each its own
    run and schedule). Returns ``(flops, "")``, or ``(None, "above")`` when ``loss`` is below every budget's final
    loss (scratch needs more than the largest budget), ``(None, "below")`` when even the smallest budget ends below
    ``loss``. The first crossing from the smallest budget up counts (a non-monotone curve is read conservatively).
    """
    pts = sorted(points)
    if not pts:
        return None, "none"
    if pts[0][1] <= loss:
        return None, "below"
    for (f0, l0), (f1, l1) in zip(pts, pts[1:]):
        if l1 <= loss < l0 or (l1 <= loss <= l0 and l1 < l0):
            t = (l0 - loss) / (l0 - l1)
            return math.exp(math.log(f0) + t * (math.log(f1) - math.log(f0))), ""
    return None, "above"


def first_reach_fraction(curve: list[dict], loss: float, total_flops: float) -> float | None:
    """G_stack's form: the share of its own run's FLOPs at which a curve first reaches ``loss`` (linear between
    evaluations); ``None`` if it never does."""
    prev = None
    for point in curve:
        if point["val_loss"] <= loss:
            if prev is None or prev["val_loss"] == point["val_loss"]:
                return point["flops"] / total_flops
            t = (prev["val_loss"] - loss) / (prev["val_loss"] - point["val_loss"])
            return (prev["flops"] + t * (point["flops"] - prev["flops"])) / total_flops
        prev = point
    return None


def read_scalars(run_dir: Path, prefix: str) -> dict[str, dict[int, float]]:
    """``{tag: {step: value}}`` of a run's TensorBoard scalars whose tag starts with ``prefix``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(Path(run_dir) / "logs"), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: {ev.step: ev.value for ev in acc.Scalars(tag)}
            for tag in acc.Tags().get("scalars", []) if tag.startswith(prefix)}


def rms_health(growth_dir: Path, scratch_dir: Path, growth_step: int) -> dict[str, float | None]:
    """Signal health after a growth: the peak over the steps after ``growth_step`` of the growth run's
    ``rms/final_hidden`` and of its largest ``rms/residual/block_*`` over the same-shape scratch run's at the same
    step (runs logged with ``rms_monitor``); the peak of ``rms/final_hidden`` over its value at the growth; and the
    new entries' peak LR over the old entries' at the same step (``growth/lr_new/stage_0`` over the group's ``lr-*``).
    ``None`` where a run did not log the tag."""
    g, s = read_scalars(growth_dir, "rms/"), read_scalars(scratch_dir, "rms/")
    out: dict[str, float | None] = {"final_hidden_vs_scratch": None, "residual_vs_scratch": None,
                                    "final_hidden_vs_growth": None, "lr_new_vs_old": None}
    fh_g, fh_s = g.get("rms/final_hidden", {}), s.get("rms/final_hidden", {})
    common = [t for t in fh_g if t > growth_step and t in fh_s and fh_s[t] > 0]
    if common:
        out["final_hidden_vs_scratch"] = max(fh_g[t] / fh_s[t] for t in common)
    at = [t for t in fh_g if t <= growth_step]
    if at and fh_g[max(at)] > 0:
        out["final_hidden_vs_growth"] = max((v for t, v in fh_g.items() if t > growth_step), default=0.0) \
            / fh_g[max(at)]
    ratios = []
    for tag, series in g.items():
        if tag.startswith("rms/residual/") and tag in s:
            ratios += [series[t] / s[tag][t] for t in series if t > growth_step and t in s[tag] and s[tag][t] > 0]
    if ratios:
        out["residual_vs_scratch"] = max(ratios)
    lrs = read_scalars(growth_dir, "growth/lr_new/stage_0").get("growth/lr_new/stage_0", {})
    base = next(iter(v for k, v in read_scalars(growth_dir, "lr-").items()), {})
    paired = [lrs[t] / base[t] for t in lrs if t > growth_step and t in base and base[t] > 0]
    if paired:
        out["lr_new_vs_old"] = max(paired)
    return out


def scan_lines(cells: list[dict], runs: list[dict]) -> list[dict]:
    """One line per cell: the paired Δ of the final validation loss against the same-schedule iso-FLOPs scratch
    (mean, sd, seeds, seeds above scratch), tokens per grown (final active) parameter, growth_at, both rows' means."""
    lines = []
    by_sub: dict[str, list[dict]] = {}
    for run in runs:
        by_sub.setdefault(run["sub"], []).append(run)
    tables = {sub: collect(group) for sub, group in by_sub.items()}
    dirs = {(r["sub"], r["axis"], r["row"], r["seed"]): r["run_dir"] for r in runs}
    for cell in cells:
        rows = tables.get(cell["sub"], {}).get(cell["axis"], {})
        versus = comparisons(cell["axis"], cell["row"])
        grown, scratch = rows.get(cell["row"]), rows.get(versus[0])
        line = {k: cell[k] for k in ("ratio", "schedule", "axis", "row", "steps", "growth_step", "growth_at", "sub")}
        line.update(map_axis=map_axis(cell["axis"], cell["row"]), recipe=map_recipe(cell["row"]), versus=versus[0],
                    init=map_init(cell["axis"], cell["row"]))
        if grown is None:
            lines.append({**line, "status": "refused or not planned"})
            continue
        c = grown["compute"]
        tokens = c["steps"] * c["tokens_per_step"]
        d = paired_diff(grown["seeds"], scratch["seeds"]) if scratch else None
        line["comparisons"] = {
            name: {**(paired_diff(grown["seeds"], rows[name]["seeds"]) or {}), "steps": rows[name]["compute"]["steps"],
                   "mean_loss": rows[name].get("mean"), "seeds_loss": rows[name]["seeds"]}
            for name in versus if name in rows}
        if cell["axis"] in EXPERT_AXES:
            line["experts"] = {seed: expert_diagnostics(Path(dirs[(cell["sub"], cell["axis"], cell["row"], seed)]))
                               for seed in grown["seeds"]}
            line["scratch_load"] = {seed: expert_load(Path(dirs[(cell["sub"], cell["axis"], versus[0], seed)]))
                                    for seed in (scratch["seeds"] if scratch else {})}
        line.update(tokens=tokens, grown_active_params=c["active_params"][-1],
                    tokens_per_param=tokens / c["active_params"][-1], scratch_steps=scratch["compute"]["steps"]
                    if scratch else None, growth_mean=grown.get("mean"), growth_seeds=grown["seeds"],
                    scratch_mean=scratch.get("mean") if scratch else None,
                    scratch_seeds=scratch["seeds"] if scratch else {},
                    delta=d["mean"] if d else None, sd=d["sd"] if d else None, ci95=d["ci95"] if d else None,
                    seeds=d["n"] if d else 0, seeds_above=d["wins"] if d else 0,
                    per_seed=d["per_seed"] if d else [],
                    wall_s=sum(w for e in (grown, scratch or {}) for w in e.get("wall_s", []) if w),
                    status="measured" if d and d["n"] >= 2 else ("1 seed" if d else "not run"))
        line.update(equal_loss(cell, rows, grown, scratch, dirs))
        lines.append(line)
    return lines


def expert_load(run_dir: Path, batches: int = 4) -> dict[str, list[float]]:
    """The routing of a finished MoE run: per MoE block (``"block_<i>"``), the fraction of tokens each expert got
    among its top-K (sums to K; uniform is ``K / n_expert``, at most 1) on the first ``batches`` validation batches of
    the run's own data, from its ``final/`` checkpoint. ``{}`` for a run without ``final/`` or MoE blocks."""
    import torch
    from litgpt import GPT, Config

    from lightning_sparkling.pretrain.cli import parse
    from lightning_sparkling.pretrain.run import build_datamodule

    final = Path(run_dir) / "final"
    if not (final / "lit_model.pth").is_file():
        return {}
    config = Config(**yaml.safe_load((final / "model_config.yaml").read_text()))
    model = GPT(config)
    model.load_state_dict(torch.load(final / "lit_model.pth", map_location="cpu", weights_only=True))
    model.eval()
    counts: dict[str, torch.Tensor] = {}
    tokens: dict[str, int] = {}
    hooks = []
    for i, block in enumerate(model.transformer.h):
        gate = getattr(block.mlp, "gate", None)
        if gate is None or not isinstance(gate, torch.nn.Linear):  # dense blocks; the grouped router is not read
            continue

        def count(module, inputs, logits, name=f"block_{i}"):  # logits: (B*T, n_expert)
            picked = torch.topk(logits, config.n_expert_per_token).indices.flatten()  # (B*T*K,)
            counts[name] = counts.get(name, 0) + torch.bincount(picked, minlength=config.n_expert)
            tokens[name] = tokens.get(name, 0) + logits.shape[0]

        hooks.append(gate.register_forward_hook(count))
    if not hooks:
        return {}
    with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
        _, run, _ = parse(["--config", str(Path(run_dir) / "config.yaml")])
        data = build_datamodule(run)
        data.setup("validate")
    with torch.no_grad():
        for k, batch in enumerate(data.val_dataloader()):
            if k == batches:
                break
            model(batch[:, :-1])
    for h in hooks:
        h.remove()
    return {name: [float(x) for x in (c / tokens[name])] for name, c in counts.items()}


def expert_diagnostics(run_dir: Path) -> dict[str, Any]:
    """What an experts growth run recorded: the copies' last ``symmetry/stage_k/experts`` cosine, the growth's
    seconds, peak memory and loss right after it (``summary.json``'s ``growth_events``), and the experts' load after
    training (:func:`expert_load`: per block the fraction of tokens per expert, its min and max over blocks)."""
    summary = json.loads((Path(run_dir) / "summary.json").read_text())
    event = (summary.get("growth_events") or [{}])[0]
    load = expert_load(run_dir)
    shares = [v for per_block in load.values() for v in per_block]
    return {"symmetry": {k: v for k, v in read_symmetry(run_dir).items() if k.endswith("/experts")},
            "growth_seconds": event.get("seconds"), "peak_memory_mb": event.get("peak_memory_mb"),
            "loss_after": event.get("loss_after"), "load": load,
            "load_min": min(shares) if shares else None, "load_max": max(shares) if shares else None}


def equal_loss(cell: dict, rows: dict, grown: dict, scratch: dict | None, dirs: dict) -> dict:
    """The cell's savings counted as compute to reach the same loss, per seed and as mean ± sd.

    - ``speedup``: the compute the grown shape trained from scratch needs to reach the growth run's final val loss
      (interpolated in log-FLOPs between the scratch budgets of the same seed, never extrapolated) over the growth
      run's compute. Past the largest budget the seed says ``> <max>x``, below the smallest ``< <min>x``; the mean is
      given only when every seed's value was interpolated.
    - ``reach_fraction`` (G_stack's form): the share of its own run at which the growth run first reaches the
      iso-FLOPs scratch's final loss (``None``: never).
    - ``health``: :func:`rms_health` per seed (runs logged with ``rms_monitor``), and the worst over seeds.
    """
    budget_rows = {n: e for n, e in rows.items() if n == ISO_FLOPS or n.startswith("scratch large (x")}
    if len(budget_rows) < 2 or comparisons(cell["axis"], cell["row"])[0] != ISO_FLOPS:  # budgets: ISO_FLOPS' shape
        return {}
    g_flops = grown["compute"]["flops"]
    per_seed, labels, fractions, health = {}, {}, {}, {}
    lo = min(e["compute"]["flops"] for e in budget_rows.values()) / g_flops
    hi = max(e["compute"]["flops"] for e in budget_rows.values()) / g_flops
    for seed, loss in grown["seeds"].items():
        points = [(e["compute"]["flops"], e["seeds"][seed]) for e in budget_rows.values() if seed in e["seeds"]]
        flops, why = scratch_flops_at(points, loss)
        if flops is not None:
            per_seed[seed] = flops / g_flops
            labels[seed] = f"{flops / g_flops:.2f}x"
        else:
            labels[seed] = {"above": f"> {hi:.2f}x", "below": f"< {lo:.2f}x"}.get(why, "-")
        if scratch and seed in scratch["seeds"] and grown["curves"].get(seed):
            fractions[seed] = first_reach_fraction(grown["curves"][seed], scratch["seeds"][seed], g_flops)
        g_dir, s_dir = dirs.get((cell["sub"], cell["axis"], cell["row"], seed)), \
            dirs.get((cell["sub"], cell["axis"], ISO_FLOPS, seed))
        if g_dir and s_dir:
            health[seed] = rms_health(Path(g_dir), Path(s_dir), cell["growth_step"])
    out: dict[str, Any] = {"speedup_per_seed": labels, "reach_fraction_per_seed": fractions,
                           "budgets": sorted(e["compute"]["flops"] / g_flops for e in budget_rows.values()),
                           "health_per_seed": health}
    if per_seed and len(per_seed) == len(grown["seeds"]):
        out["speedup"], out["speedup_sd"] = mean_sd(list(per_seed.values()))
    reached = [f for f in fractions.values() if f is not None]
    if fractions and len(reached) == len(fractions):
        out["reach_fraction"], out["reach_fraction_sd"] = mean_sd(reached)
    for key in ("final_hidden_vs_scratch", "residual_vs_scratch", "final_hidden_vs_growth", "lr_new_vs_old"):
        vals = [h[key] for h in health.values() if h.get(key) is not None]
        if vals:
            out.setdefault("health", {})[key] = max(vals)
    return out


def scan_where(size_name: str, ratio: int, axis: str | None = None) -> str:
    """The ``where`` of a scan cell in the map: its section of docs/BENCHMARKS.md and run length (the experts axes
    have a section of their own)."""
    run = f"{size_name}{'' if ratio == 1 else f' x{ratio}'}"
    if axis in EXPERT_AXES:
        return f"Experts: dense -> MoE and MoE -> more experts ({run})"
    return f"Where growth pays: the scan ({run})"


def export_cells(lines: list[dict], size_name: str) -> list[dict]:
    """The measured lines (2 seeds or more) as cells of lightning_sparkling/pretrain/measured.json."""
    out = []
    for line in lines:
        if line.get("seeds", 0) < 2 or line.get("sd") is None or line["recipe"] is None:
            continue
        out.append({"axis": line["map_axis"], "recipe": line["recipe"], "schedule": line["schedule"],
                    "growth_at": round(line["growth_at"], 3), "tokens_per_param": round(line["tokens_per_param"], 1),
                    "delta": round(line["delta"], 3), "sd": round(line["sd"], 3), "seeds": line["seeds"],
                    "seeds_above": line["seeds_above"], "where": scan_where(size_name, line["ratio"], line["axis"])})
        dense = (line.get("comparisons") or {}).get(DENSE_ISO, {})
        if dense.get("n", 0) >= 2 and dense.get("sd") is not None:  # an upcycle: what staying dense would have given
            out[-1].update(start_delta=round(dense["mean"], 3), start_sd=round(dense["sd"], 3),
                           start_seeds_above=dense["wins"])
        if line.get("speedup") is not None and line.get("speedup_sd") is not None:
            out[-1].update(speedup=round(line["speedup"], 2), speedup_sd=round(line["speedup_sd"], 2))
        if line.get("init") is not None:  # an experts cell: its expert_init (the map matches a run's on it)
            out[-1]["init"] = line["init"]
    return out


def format_cell(cell: dict) -> str:
    """One cell as a line of measured.json (``"delta": -0.020``: three decimals, as the map writes them)."""
    return ("{" + f'"axis": {json.dumps(cell["axis"])}, "recipe": {json.dumps(cell["recipe"])}, '
            f'"schedule": {json.dumps(cell["schedule"])}, "growth_at": {cell["growth_at"]!r}, '
            f'"tokens_per_param": {cell["tokens_per_param"]:.1f}, "delta": {cell["delta"]:.3f}, '
            f'"sd": {cell["sd"]:.3f}, "seeds": {cell["seeds"]}, "seeds_above": {cell["seeds_above"]}, '
            + (f'"speedup": {cell["speedup"]:.2f}, "speedup_sd": {cell["speedup_sd"]:.2f}, ' if "speedup" in cell
               else "")
            + (f'"init": {json.dumps(cell["init"])}, ' if cell.get("init") is not None else "")
            + f'"where": {json.dumps(cell["where"], ensure_ascii=False)}'
            + (f', "start_delta": {cell["start_delta"]:.3f}, "start_sd": {cell["start_sd"]:.3f}, '
               f'"start_seeds_above": {cell["start_seeds_above"]}' if cell.get("start_delta") is not None else "")
            + "".join(f', "{k}": {json.dumps(cell[k])}' for k in _SIZE_KEYS if cell.get(k) is not None)
            + "}")


_SIZE_KEYS = ("params", "active_params", "embedding_share", "device", "precision", "corpus")
"""The size fields of a cell (issue 38; ``lightning_sparkling.pretrain.measured_size.SIZE_KEYS``)."""


def format_export(cells: list[dict]) -> str:
    """The cells as a JSON list, one measured.json line each (paste the lines into the map's ``cells``)."""
    if not cells:
        return "[]\n"
    return "[\n" + ",\n".join(f"    {format_cell(c)}" for c in cells) + "\n]\n"


def _min_max(per_seed: dict[Any, dict]) -> str:
    """``'0.08-0.96'``: the smallest and largest expert fraction over every block and seed of ``{seed: load}``."""
    shares = [v for load in per_seed.values() for block in load.values() for v in block]
    return f"{min(shares):.2f}-{max(shares):.2f}" if shares else "-"


def experts_markdown(lines: list[dict]) -> list[str]:
    """The experts axes' table: per row the paired Δ against each comparison (mean ± sd and per seed), the experts'
    load after training (min-max fraction of tokens per expert over blocks and seeds; uniform ``K / n_expert``), the
    copies' last cosine, and the growth's seconds, peak memory and loss right after it (mean over seeds)."""
    rows = [ln for ln in lines if ln.get("experts") is not None]
    if not rows:
        return []
    out = ["Experts axes (issue 30): Δ = final validation loss of the growth row minus the comparison's, each "
           "comparison trained from scratch on the growth row's FLOPs (6 x active parameters x tokens) with its own "
           "schedule, paired by seed. Load: the smallest and largest fraction of tokens one expert got among their "
           "top-K (every MoE block, every seed; the final checkpoint on 4 validation batches; uniform = K/E), the "
           "growth row's and the comparison MoE's. Cosine: the copies' last `symmetry/stage_0/experts`.", "",
           "| axis | row | growth at | tokens / active param | comparison (steps) | Δ (paired mean ± sd) | seeds above | "
           "per-seed Δ | load after (growth) | load (MoE scratch) | copies' cosine | growth s | growth peak MB | "
           "loss after growth |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for ln in rows:
        diag = list(ln["experts"].values())

        def avg(key: str, p: int) -> str:
            vals = [d[key] for d in diag if d.get(key) is not None]
            return fmt(statistics.fmean(vals), p) if vals else "-"

        cos = [v for d in diag for v in d.get("symmetry", {}).values()]
        cosine = f"{statistics.fmean(cos):.2f}" if cos else "- (no copies)"
        for k, (name, d) in enumerate(ln["comparisons"].items()):
            delta = f"{d['mean']:+.3f} ± {fmt(d.get('sd'))}" if d.get("n") else "not run"
            per = ", ".join(f"{v:+.3f}" for v in d.get("per_seed", [])) or "-"
            above = f"{d['wins']}/{d['n']}" if d.get("n") else "-"
            head = (f"| {ln['axis']} | {ln['row']} | {ln['growth_at']:.0%} | {ln['tokens_per_param']:.1f} "
                    if k == 0 else "| | | | ")
            tail = (f"| {_min_max({s: e['load'] for s, e in ln['experts'].items()})} | "
                    f"{_min_max(ln.get('scratch_load', {}))} | {cosine} | {avg('growth_seconds', 2)} | "
                    f"{avg('peak_memory_mb', 0)} | {avg('loss_after', 3)} |" if k == 0 else "| | | | | | |")
            out.append(f"{head}| {name} ({d['steps']}) | {delta} | {above} | {per} {tail}")
    return out + [""]


def scan_markdown(size_name: str, lines: list[dict], skipped: list[dict], refused: list[dict], seeds: list[int],
                  wall: float | None) -> str:
    out = [f"### `--size {size_name} --scan`: growth against the same-schedule iso-FLOPs scratch, seeds "
           f"{', '.join(map(str, seeds))}", ""]
    spent = sum(line.get("wall_s") or 0 for line in lines)
    out.append((f"Scan wall-clock of this invocation: {wall / 60:.1f} min; " if wall is not None else "")
               + f"sum of the runs' wall-clock (summary.json, shared scratch counted per cell): {spent / 60:.1f} min.")
    out += ["", "Δ: final validation loss of the growth row minus that of the grown shape trained from scratch on the "
            "same FLOPs with the same LR schedule, paired by seed (negative: growth paid); seeds above: seeds where "
            "growth ended above scratch.", ""]
    out.append("| steps (x) | tokens / grown param | schedule | axis | row (recipe) | growth at | Δ vs iso-FLOPs scratch "
               "(paired mean ± sd) | seeds above | growth loss | scratch loss (steps) | per-seed Δ |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for ln in lines:
        if "tokens" not in ln:
            out.append(f"| {ln['steps']} (x{ln['ratio']}) | - | {ln['schedule']} | {ln['axis']} | {ln['row']} "
                       f"({ln['recipe'] or '-'}) | {ln['growth_at']:.0%} | {ln['status']} | | | | |")
            continue
        delta = "-" if ln["delta"] is None else f"{ln['delta']:+.3f} ± {fmt(ln['sd'])}"
        above = f"{ln['seeds_above']}/{ln['seeds']}" if ln["seeds"] else "-"
        per = ", ".join(f"{v:+.3f}" for v in ln["per_seed"]) or "-"
        out.append(f"| {ln['steps']} (x{ln['ratio']}) | {ln['tokens_per_param']:.1f} | {ln['schedule']} | "
                   f"{ln['axis']} | {ln['row']} ({ln['recipe'] or 'no growth.recipe: not exported'}) | "
                   f"{ln['growth_at']:.0%} | {delta} | {above} | "
                   f"{fmt(ln['growth_mean'])} | {fmt(ln['scratch_mean'])} ({ln['scratch_steps']}) | {per} |")
    out.append("")
    out += experts_markdown(lines)
    eq = [ln for ln in lines if ln.get("speedup_per_seed")]
    if eq:
        out += ["Compute to reach the same loss: the grown shape trained from scratch at several budgets (x the growth "
                "run's FLOPs, each its own run and schedule); speed-up = the scratch compute that reaches the growth "
                "run's final val loss (interpolated in log-FLOPs, never extrapolated) / the growth run's compute. "
                "Reached at: the share of the growth run at which it first reaches the iso-FLOPs scratch's final "
                "loss (G_stack's form). RMS health (worst seed): peak after growth of `rms/final_hidden` and of the "
                "largest `rms/residual/block_*` over the same-shape scratch run's at the same step, "
                "`rms/final_hidden`'s peak over its value at the growth, and the new entries' peak LR over the old "
                "entries'.", "",
                "| tokens / grown param | schedule | axis | row (recipe) | growth at | scratch budgets (x) | "
                "speed-up at equal loss (mean ± sd) | per seed | reached scratch's final loss at | "
                "final hidden / scratch | residual / scratch | final hidden / at growth | LR new / old |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for ln in eq:
            sp = (f"{ln['speedup']:.2f}x ± {fmt(ln.get('speedup_sd'), 2)}" if ln.get("speedup") is not None
                  else "censored")
            per = ", ".join(v for _, v in sorted(ln["speedup_per_seed"].items()))
            frac = ", ".join("never" if f is None else f"{f:.0%}" for _, f in sorted(ln["reach_fraction_per_seed"].items()))
            h = ln.get("health", {})
            hs = [fmt(h.get(k), 2) for k in ("final_hidden_vs_scratch", "residual_vs_scratch",
                                            "final_hidden_vs_growth", "lr_new_vs_old")]
            out.append(f"| {ln['tokens_per_param']:.1f} | {ln['schedule']} | {ln['axis']} | {ln['row']} "
                       f"({ln['recipe'] or '-'}) | {ln['growth_at']:.0%} | "
                       f"{', '.join(f'{b:.2f}' for b in ln['budgets'])} | {sp} | {per} | {frac} | {' | '.join(hs)} |")
        out.append("")
    for sk in skipped:
        out.append(f"- skipped: x{sk['ratio']} {sk['schedule']} {sk['axis']}: {sk['why']}")
    seen = set()
    for r in refused:
        if (r["sub"], r["axis"], r["row"]) not in seen:
            seen.add((r["sub"], r["axis"], r["row"]))
            out.append(f"- not available: {r['sub']} {r['axis']} | {r['row']}: {r['why']}")
    return "\n".join(out).rstrip() + "\n"


def run_scan(args, parser, size_name: str, size: dict, seeds: list[int], out: Path, results: Path) -> int:
    """``--scan``: plan (``--dry-run``: list), train what is not finished, then the table and the map's cells."""
    t0 = time.perf_counter()
    try:
        ratios = [int(r) for r in args.scan_ratios.split(",")]
    except ValueError:
        parser.error(f"--scan-ratios takes integer train.max_steps multipliers, e.g. 1,4,8 (not {args.scan_ratios!r})")
    schedules = args.scan_schedules.split(",")
    axes = args.scan_axes.split(",")
    rows = [r.strip() for r in args.scan_rows.split(",")] if args.scan_rows else None
    for bad, known, what in ((set(schedules) - set(SCAN_SCHEDULES), SCAN_SCHEDULES, "schedules"),
                             (set(axes) - set(AXES), AXES, "axes"),
                             ({r for r in rows or [] if r not in ROWS and not (r.partition(":")[0] in AXES
                                                                               and r.partition(":")[2] in ROWS)},
                              list(ROWS), "rows")):
        if bad:
            parser.error(f"unknown scan {what} {sorted(bad)}; choose from {known}")
    if any(r < 1 for r in ratios):
        parser.error("--scan-ratios must be >= 1")
    if "lr_schedule" in size["config"]["train"]:
        parser.error("--scan sets train.lr_schedule per cell (--scan-schedules), not with --set")
    try:
        budgets = tuple(float(b) for b in args.budgets.split(",") if b.strip())
    except ValueError:
        parser.error(f"--budgets takes multipliers of the iso-FLOPs scratch's steps, e.g. 0.7,1.4,2 "
                     f"(not {args.budgets!r})")
    if any(b <= 0 or b == 1 for b in budgets):
        parser.error(f"--budgets: each multiplier must be > 0 and not 1 (the iso-FLOPs scratch is 1), not {budgets}")
    cells, skipped = scan_cells(size, ratios, schedules, axes, rows)
    runs, refused = plan_scan(size_name, size, cells, seeds, out, budgets)
    lines = scan_lines(cells, runs)
    distinct = {r["run_dir"]: r for r in runs}
    done = sum(is_done(Path(d), r["config"]) for d, r in distinct.items())
    print(f"scan {size_name}: ratios {ratios}, schedules {schedules}, axes {axes}, seeds {seeds}: {len(cells)} cells, "
          f"{len(distinct)} distinct runs ({done} already done, {len(distinct) - done} to train) in {out}")
    for ln in lines:
        ratio = f"{ln['tokens_per_param']:.1f} tokens per grown parameter" if "tokens_per_param" in ln else "refused"
        versus = comparisons(ln["axis"], ln["row"])
        n_runs = len({r["run_dir"] for r in runs if r["sub"] == ln["sub"]
                      and r["axis"] == ln["axis"] and r["row"] in (ln["row"], *versus)})
        print(f"  x{ln['ratio']} ({ln['steps']} steps, {ratio}) | {ln['schedule']:<6} | {ln['axis']:<8} | "
              f"{ln['row']} vs {' and '.join(versus)} | growth at {ln['growth_at']:.0%} | {n_runs} runs")
    for sk in skipped:
        print(f"  skipped: x{sk['ratio']} {sk['schedule']} {sk['axis']}: {sk['why']}")
    for r in refused:
        print(f"  not available: {r['sub']} {r['axis']} | {r['row']}: {r['why']}")
    if args.dry_run:
        return 0
    wall = None
    if not args.report_only:
        run_grid(runs, args.jobs)
        wall = time.perf_counter() - t0
        lines = scan_lines(cells, runs)
    md = scan_markdown(size_name, lines, skipped, refused, seeds, wall)
    exported = export_cells(lines, size_name)
    stem = f"reproduce_{size_name}_scan" + (f"_{slug(args.tag)}" if args.tag else "")
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{stem}.md").write_text(md)
    payload = {"size": size_name, "size_config": size, "scan": {"ratios": ratios, "schedules": schedules,
                                                                  "axes": axes, "rows": rows},
               "seeds": seeds, "set": args.set, "out": str(out), "wall_clock_seconds": wall, "skipped": skipped,
               "refused": refused, "lines": lines, "measured_cells": exported,
               "command": " ".join([Path(sys.argv[0]).name] + (args.argv if args.argv is not None else sys.argv[1:]))}
    (results / f"{stem}.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
    print(md)
    print("measured.json cells (2 seeds or more):")
    print(format_export(exported), end="")
    if args.scan_export:
        Path(args.scan_export).write_text(format_export(exported))
        print(f"wrote {len(exported)} cell(s) to {args.scan_export}")
    print(f"wrote {results / f'{stem}.json'} and .md")
    return 0


# ------------------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="cpu", help="model/data/length preset (default cpu)")
    parser.add_argument("--quick", action="store_true", help="same as --size quick")
    parser.add_argument("--seeds", type=int, default=3, help="number of seeds, 1..N (default 3)")
    parser.add_argument("--axes", default=None, help=f"comma list of {','.join(AXES)} (default: the size's; "
                                                     "joint-5 / joint-25 / joint-75 grow at 5%% / 25%% / 75%%; "
                                                     "depth: n_layer 2x at 25%%, depth-5 / depth-50 at 5%% / 50%%, "
                                                     "depth+width: n_layer and the joint width 2x at 25%%; "
                                                     "hidden+heads: n_embd and n_head 2x at 50%%)")
    parser.add_argument("--rows", default=None, help="comma list of row names (default: the size's); see --list")
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (1 thread each; default 1)")
    parser.add_argument("--out", default="/tmp/repro", help="where runs go (default /tmp/repro)")
    parser.add_argument("--results", default=str(RESULTS), help="where JSON, tables and PNGs go")
    parser.add_argument("--tag", default=None,
                        help="name the outputs reproduce_<size>_<tag>.{json,md,png} (one PNG of every axis), so a "
                             "grid's results do not overwrite the size's own files")
    parser.add_argument("--dry-run", action="store_true", help="plan and check every run, train nothing")
    parser.add_argument("--report-only", action="store_true", help="only rebuild the tables from finished runs")
    parser.add_argument("--list", action="store_true", help="print the rows and their overrides")
    parser.add_argument("--no-reference", action="store_true",
                        help=f"do not add the {REFERENCE!r} row (e.g. while another grid in the same --out trains it; "
                             "rebuild the table with it later with --report-only)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a key of the size's config for every run, e.g. --set train.max_steps=6000 "
                             "(growth stays at half the steps; repeatable; values are YAML)")
    scan = parser.add_argument_group("the scan (issue 23): where growth pays, one command")
    scan.add_argument("--scan", action="store_true",
                      help="run the map: per token ratio, schedule and growth timing, the axis' row against the "
                           "grown shape from scratch on the same FLOPs with the same schedule; writes "
                           "reproduce_<size>_scan[_<tag>].{json,md} and the map's cells")
    scan.add_argument("--scan-ratios", default=",".join(map(str, SCAN_RATIOS)),
                      help="train.max_steps multipliers of the size (default 1,4,8: at --size quick about 2.8, 11 "
                           "and 23 training tokens per grown parameter on the joint axis)")
    scan.add_argument("--scan-schedules", default=",".join(SCAN_SCHEDULES),
                      help="cosine and/or wsd (train.lr_schedule: wsd on every run of the cell, scratch included; "
                           "only timings before the decay phase)")
    scan.add_argument("--scan-axes", default=",".join(SCAN_DEFAULT_AXES),
                      help=f"growth timings and axes (default {','.join(SCAN_DEFAULT_AXES)}; also "
                           f"{','.join(a for a in SCAN_AXES if a not in SCAN_DEFAULT_AXES)}); joint axes with "
                           f"'recommended recipe', depth axes with {DEPTH_REFERENCE!r}")
    scan.add_argument("--scan-rows", default=None,
                      help="comma list of growth rows instead of each axis' default (each on the axes it applies "
                           "to; AXIS:ROW on that axis only, e.g. 'joint:SPARKLING')")
    scan.add_argument("--budgets", default="",
                      help="also train the grown shape from scratch at these multiples of the iso-FLOPs scratch's "
                           "steps (e.g. 0.7,1.4,2), and report the speed-up at equal loss (scratch compute to reach "
                           "the growth run's final loss / growth compute) and the share of the growth run at which "
                           "it reaches scratch's final loss; the map's cells gain speedup / speedup_sd")
    scan.add_argument("--scan-export", default=None, metavar="PATH",
                      help="write the measured cells (2+ seeds) as a JSON list in measured.json's format")
    args = parser.parse_args(argv)
    args.argv = argv
    size_name = "quick" if args.quick else args.size
    size = resolve_size(size_name)
    if args.list:
        for name, row in ROWS.items():
            print(f"{name:<34} {json.dumps({k: v for k, v in row.items() if k != 'note'}, default=str)}")
        return 0
    axes = args.axes.split(",") if args.axes else size["axes"]
    if [a for a in axes if a not in AXES]:
        parser.error(f"unknown axes {[a for a in axes if a not in AXES]}; choose from {AXES}")
    rows = [r.strip() for r in args.rows.split(",")] if args.rows else (size["rows"] or list(ROWS))
    if not args.rows and set(axes) & set(DEPTH_AXES):  # the size's rows are width rows: add the depth grid's
        rows = list(dict.fromkeys([*rows, *SCRATCH_ROWS[0:1], ISO_FLOPS, *DEPTH_ROWS[:6]]))
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; see --list")
    for ref_row in dict.fromkeys(reference(a) for a in axes):
        if ref_row not in rows and not args.no_reference:
            rows.append(ref_row)
    seeds = list(range(1, args.seeds + 1))
    out, results = Path(args.out), Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for item in args.set:
        key, _, value = item.partition("=")
        set_dotted(size["config"], key, yaml.safe_load(value))
    if args.scan and args.out == parser.get_default("out"):
        out = out / "scan"
    if args.set and args.out == parser.get_default("out"):
        out = out / ("set-" + hashlib.sha256(" ".join(args.set).encode()).hexdigest()[:8])
    if args.scan:
        return run_scan(args, parser, size_name, size, seeds, out, results)
    cells, refused = plan_grid(size_name, size, axes, rows, seeds, out)
    distinct = len({c["run_dir"] for c in cells})
    print(f"size {size_name}: axes {axes}, {len(rows)} rows, seeds {seeds}: {len(cells)} cells, {distinct} distinct "
          f"runs; {len({(r['axis'], r['row']) for r in refused})} row(s) refused")
    for r in refused:
        print(f"  not available: {r['axis']} | {r['row']}: {r['why']}")
    if args.dry_run:
        for c in cells:
            print(f"  {c['axis']:>9} | {c['row']:<32} seed {c['seed']}: {c['compute']['steps']} steps, "
                  f"params {c['compute']['total_params']}, FLOPs {c['compute']['flops']:.3g} -> {c['run_dir']}")
        return 0
    wall = None
    if not args.report_only:
        run_grid(cells, args.jobs)
        wall = time.perf_counter() - t0
    table = collect(cells)
    md = markdown(size_name, table, refused, seeds, wall)
    pngs = plot(size_name, table, results, args.tag)
    stem = f"reproduce_{size_name}" + (f"_{slug(args.tag)}" if args.tag else "")
    (results / f"{stem}.md").write_text(md + "\n")
    payload = {"size": size_name, "size_config": size, "axes": axes, "rows": {r: ROWS[r] for r in rows},
               "seeds": seeds, "set": args.set, "wall_clock_seconds": wall, "refused": refused, "table": table,
               "pngs": pngs,
               "command": " ".join([Path(sys.argv[0]).name] + (argv if argv is not None else sys.argv[1:]))}
    (results / f"{stem}.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
    print(md)
    print(f"wrote {results / f'{stem}.json'}, .md and {len(pngs)} PNG(s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
