"""The rows (recipes and scratch comparisons) and the axes (what grows, when): which row applies to which axis, the
stages and grown shape of each axis."""

from __future__ import annotations

from typing import Any




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
