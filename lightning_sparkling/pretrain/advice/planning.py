"""``sparkling plan``: what the growth stages of a resolved run do, without training (:func:`plan`: per stage the
sizes, alpha per channel dimension, the tensors touched, parameters before and after, the new entries' LR; the run's
FLOPs against a from-scratch run of the final size; what the project's measured map says about the run), all read from
the run's one plan (:func:`~lightning_sparkling.pretrain.advice.run_plan.plan_run`), and the report printed
(:func:`_print_plan`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from typing import Any

from lightning_sparkling.pretrain.advice.run_plan import RunPlan, plan_run
from lightning_sparkling.pretrain.config.resolve import ResolvedRun
from lightning_sparkling.pretrain.formatting import _console, _fmt_flops, _model_line

__all__ = ["plan", "run_recipe"]


def plan(run: ResolvedRun, *, print_report: bool = True, cells: Sequence[Any] | None = None,
         run_plan: RunPlan | None = None) -> dict[str, Any]:
    """What the growth stages of ``run`` do, without training: per stage the widths, alpha per channel dimension, the
    tensors touched (grouped by kind), parameters before/after; and the run's FLOPs against a from-scratch run of the
    final width (:func:`~lightning_sparkling.growth.compute.estimate_compute`'s accounting).

    Args:
        run: the resolved run.
        print_report: print the report.
        cells: the measured map the advice reads (default: the package's; ``--map FILE`` adds a ``measure.json``'s).
        run_plan: the run's plan when the caller has it (``cells`` is then its own); ``None``: planned here, once
            (:func:`~lightning_sparkling.pretrain.advice.run_plan.plan_run`).

    Returns:
        a dict: ``stages`` (list of per-stage dicts: ``sizes`` every size key the stage changes, ``widths`` the widths
        among them, ``channels`` every channel dimension it grows (``n_embd``, ``attn_q``, ``n_expert``, ...), each
        ``[old, new]``; ``alpha`` per channel dimension; ...), ``flops``, ``flops_from_scratch``, ``flops_saved``,
        ``active_params``, ``total_params``, ``phase_steps``, ``steps``, ``tokens_per_step``, ``total_tokens``,
        ``gstack`` (what G_stack's fitted timing rule gives for the run: ``tokens``, ``step``, ``n_params``,
        ``flops``; ``None`` without growth stages).
    """
    run_plan = plan_run(run, cells=cells) if run_plan is None else run_plan
    est = run_plan.compute
    stages_out = [_stage_report(run_plan, k) for k in range(len(run.stages))]
    report = {
        "steps": run.steps, "tokens_per_step": run.tokens_per_step, "total_tokens": run.total_tokens,
        "stages": stages_out, "phase_steps": list(est.phase_steps), "active_params": list(est.active_params),
        "total_params": list(est.total_params), "flops": est.flops, "flops_from_scratch": est.flops_from_scratch,
        "flops_saved": est.flops_saved, "final_config": dataclasses.asdict(run_plan.final_config),
    }
    report["tokens_per_param"] = run_plan.tokens_per_param
    report["progressive"] = _progressive_line(run) if run.growth.progressive is not None else None
    deepens = any(s["depth"] is not None for s in stages_out)  # G_stack's rule is about stacking blocks
    report["gstack"] = _gstack_timing(run, est) if deepens else None
    advice = run_plan.advice
    report["regime_advice"] = advice.message() if advice is not None else None
    report["regime_warning"] = run_plan.warning
    if print_report:
        _print_plan(run, report)
    return report


def _progressive_line(run: ResolvedRun) -> str:
    """What ``growth.progressive`` expanded into: each size's sequence, the growth steps, the stages.

    Example: ``n_layer 1 -> 2 -> 4 -> 8 at steps 40, 60, 75 (40.0%, 60.0%, 75.0% of the run): 3 growths, expanded
    into growth.stages[0..2] below``."""
    from lightning_sparkling.growth.progressive import progressive_sizes

    sizes = ", ".join(f"{key} {' -> '.join(str(v) for v in values)}"
                      for key, values in progressive_sizes(run.growth.progressive).items())
    steps = ", ".join(f"{s.at_step:,}" for s in run.stages)
    shares = ", ".join(f"{s.at_step / run.steps:.1%}" for s in run.stages)
    n = len(run.stages)
    return (f"{sizes} at steps {steps} ({shares} of the run): {n} growth{'s' if n != 1 else ''}, expanded into "
            f"growth.stages[0..{n - 1}] below")


def _gstack_timing(run: ResolvedRun, est: Any) -> dict[str, Any]:
    """What G_stack's fitted timing rule gives for ``run``
    (:func:`~lightning_sparkling.growth.compute.gstack_growth_tokens`): ``N`` the grown model's active parameters,
    ``C = 6 N D`` the FLOPs of training it from scratch on the run's ``D`` tokens, ``tokens`` the growth timing ``d``
    and ``step = ceil(d / tokens_per_step)`` (at or past ``steps``: after the run ends)."""
    from lightning_sparkling.growth.compute import gstack_growth_tokens

    n_params, flops = est.active_params[-1], est.flops_from_scratch
    tokens = gstack_growth_tokens(n_params, flops)
    step = math.ceil(tokens / run.tokens_per_step)
    return {"n_params": n_params, "flops": flops, "tokens": tokens, "step": step, "fraction": step / run.steps,
            "in_run": step < run.steps}


def _stage_report(run_plan: RunPlan, k: int) -> dict[str, Any]:
    """What stage ``k`` of the run does to the model of the phase before it (its plan, sizes and parameter counts of
    ``run_plan``): one entry of ``plan()["stages"]``."""
    from lightning_sparkling.growth.axes import describe_changes, function_words, keeps_function, registered_axes
    from lightning_sparkling.growth.stage import WIDTH_SIZE_KEYS, grows_channels

    run, stage, gp, est = run_plan.run, run_plan.run.stages[k], run_plan.plans[k], run_plan.compute
    report = {
        "stage": k, "at_step": stage.at_step, "at_tokens": stage.at_step * run.tokens_per_step,
        "at_fraction": stage.at_step / run.steps,
        "widths": {name: [change.old, change.new] for name, change in gp.channels.items() if name in WIDTH_SIZE_KEYS},
        "channels": {name: [change.old, change.new] for name, change in gp.channels.items()},
        "sizes": {size: list(pair) for size, pair in run_plan.sizes[k].items()},
        "into": gp.new_config.name if stage.model_name or stage.model_config else None,
        **{key: value for axis in registered_axes() for key, value in axis.report(gp, stage).items()},  # depth, heads
        "alpha": gp.alphas(), "grows_channels": grows_channels(stage.to_dict()), "init": stage.init,
        "rms_preserving": stage.rms_preserving,
        "optimizer_state": stage.optimizer_state, "rewarmup_ratio": stage.rewarmup_ratio,
        "rewarmup_steps": stage.rewarmup_steps,
        "rewarmup_window": _rewarmup_window(stage, run.steps) if gp.rewarms else None,
        "new_entries": gp.adds_entries,  # False: a config-field growth (rope_base): no init, state or re-warmup
        **_baseline_options(stage, run.steps),
        "params_before": est.total_params[k], "params_after": est.total_params[k + 1],
        "active_params_before": est.active_params[k], "active_params_after": est.active_params[k + 1],
        "tensors": len(gp.tensors), "tensor_groups": _tensor_groups(gp),
        "axes": describe_changes(gp),  # plug-in axes (growth/axes): one line each
        "function": function_words(keeps_function(gp)),  # the axes' claims: None where none claims
    }
    return report


def _tensor_groups(gp: Any) -> dict[str, dict[str, Any]]:
    """The tensors a growth plan changes, grouped by name with block / expert indices as ``*``: count, shapes, how
    they grow and their fan-in scales."""
    groups: dict[str, dict[str, Any]] = {}
    for name, tp in gp.tensors.items():
        g = groups.setdefault(_group_name(name), {"count": 0, "old_shape": tp.old_shape,
                                                  "new_shape": tp.new_shape, "growth": _describe_dims(tp),
                                                  "scales": set()})
        g["count"] += 1
        g["scales"].add(round(float(tp.scale), 6))
    for g in groups.values():
        g["scale"] = sorted(g.pop("scales"))
    return groups


def _group_name(name: str) -> str:
    return re.sub(r"\.\d+(?=\.|$)", ".*", name)


def _describe_dims(tensor_plan) -> str:
    """How a tensor grows: ``fan-out n_embd (copy), fan-in n_embd (zero)``; a new module's tensor (a new block,
    expert or router) says so first, with how it starts: ``new (copy of ...), fan-out n_embd (copy)`` /
    ``new (normal)``."""
    parts = []
    if tensor_plan.fresh:
        shaped = tensor_plan.old_shape == tensor_plan.new_shape or tensor_plan.dims
        start = (f"copy of {_group_name(tensor_plan.source_name)}" if tensor_plan.block_init == "copy" and shaped
                 else tensor_plan.block_init)
        parts.append(f"new ({start})")
    for d in tensor_plan.dims:
        parts.append(f"{d.role.replace('_', '-')} {d.channel} ({d.mode})")
    return ", ".join(parts)


def _baseline_options(stage, steps: int) -> dict[str, Any]:
    """The paper's comparison-baseline keys of a stage (defaults: SPARKLING's recipe), and where the schedule
    after the growth ends (``decay_end``: earlier than ``steps`` with ``decay_speedup``)."""
    from lightning_sparkling.growth.stage import decay_end

    return {"split": stage.split, "split_ratio": stage.split_ratio, "perturb": stage.perturb,
            "rewarmup_scope": stage.rewarmup_scope, "decay_speedup": stage.decay_speedup,
            "decay_end": decay_end(stage, steps), "bias_correction": stage.bias_correction,
            "symmetry_target": stage.symmetry_target, "symmetry_interval": stage.symmetry_interval,
            "symmetry_max_boost": stage.symmetry_max_boost, "symmetry_release": stage.symmetry_release}


def _describe_baselines(s: dict[str, Any]) -> str:
    split = s["split"] + (f" ({s['split_ratio']:.4g} : {1 - s['split_ratio']:.4g})" if s["split"] == "uneven" else "")
    decay = (f"decay_speedup {s['decay_speedup']:g} (the decay ends at step {s['decay_end']:,})"
             if s["decay_speedup"] else "decay_speedup 0")
    symmetry = (f"symmetry_target {s['symmetry_target']:g} (new-entry LR doubled every {s['symmetry_interval']} "
                f"steps, up to {s['symmetry_max_boost']:g}x, while the copies' cosine is above it; then "
                f"{s['symmetry_release']})"
                if s["symmetry_target"] is not None else "symmetry_target off")
    return (f"baselines (paper appendix): split {split}, perturb {s['perturb']:g}, rewarmup_scope "
            f"{s['rewarmup_scope']}, {decay}; lock breakers: bias_correction {s['bias_correction']}, {symmetry}")


def _rewarmup_window(stage, max_steps: int) -> dict[str, Any] | None:
    """Where stage's new-entry LR re-warmup lies in the run: ``{start, warmup_end, peak_ratio, tail_steps, end}``
    (linear from the LR at growth to ``peak_ratio`` times it over the optimizer steps taken at ``start ..
    warmup_end - 1``, then ``tail_steps`` of cosine to ``min_lr`` at ``end = max_steps``), ``None`` without one."""
    from lightning_sparkling.growth.stage import rewarmup_window

    window = rewarmup_window(stage, max_steps)
    if window is None:
        return None
    warmup_end, tail, _ = window
    return {"start": stage.at_step, "warmup_end": warmup_end, "peak_ratio": stage.rewarmup_ratio,
            "tail_steps": tail, "end": warmup_end + tail}  # max_steps, or the faster decay's end (decay_speedup)


# ------------------------------------------------------------------------------------------------------------ recipe
def run_recipe(stages: Sequence[Any]) -> str:
    """The recipe a run's stages follow, as the measured map names it: the ``key`` of
    :func:`~lightning_sparkling.growth.recipes.recipe_name` (``paper`` when every stage keeps the paper's value of
    every recipe key, what a depth-only stage gets from any recipe but ``random-zero``; else another recipe of
    :data:`~lightning_sparkling.growth.stage.RECIPES` when every stage has that recipe's keys; else ``paper``)."""
    from lightning_sparkling.growth.recipes import recipe_name

    return recipe_name(stages).key


# ------------------------------------------------------------------------------------------------------------ print
def _print_plan(run: ResolvedRun, report: dict[str, Any]) -> None:
    console = _console()
    for note in run.notes:  # as `sparkling pretrain` prints them (the recipe growth.recipe: auto chose, ...)
        warning = note.startswith("warning: ")
        console.print(f"[yellow]warning:[/yellow] {note.removeprefix('warning: ')}" if warning else f"note: {note}")
    console.print(f"[bold]model[/bold]: {_model_line(run.model_config)}")
    console.print(f"[bold]run[/bold]: {run.steps:,} steps x {run.tokens_per_step:,} tokens/step "
                  f"(global_batch_size {run.train.global_batch_size} x seq_len {run.seq_len}) = "
                  f"{run.total_tokens:,} tokens; vocabulary {run.data_vocab_size} "
                  f"({'tokenizer_dir' if run.tokenizer_dir else 'data.vocab_size / model_config'}, no tokenizer "
                  "trained for the plan)")
    if report.get("progressive"):
        console.print(f"[bold]growth.progressive[/bold]: {report['progressive']}")
    if not report["stages"]:
        console.print("no growth stages (growth.stages is empty): plain pretraining")
    for s in report["stages"]:
        _print_stage(console, run, s)
    _print_compute(console, report)


def _print_stage(console: Any, run: ResolvedRun, s: dict[str, Any]) -> None:
    """The lines and the tensor table of one stage of the report."""
    sizes = ", ".join(f"{a} {o} -> {n}" for a, (o, n) in s["sizes"].items())
    alphas = ", ".join(f"{a} {v:.4f}" for a, v in s["alpha"].items())
    into = f" (into {s['into']})" if s["into"] else ""
    console.print()
    console.print(f"[bold]stage {s['stage']}[/bold] at step {s['at_step']:,} ({s['at_tokens']:,} tokens, "
                  f"{s['at_fraction']:.1%} of the run){into}: {sizes}")
    if s["depth"] is not None:
        d = s["depth"]
        what = {"copy": "it copies", "copy-zero": "it copies, output projections zeroed",
                "random-zero": "it stands in for: litgpt's init, output projections zeroed"}[d["init"]]
        order = f"depth_map {d['source']}" if d["order"] == "map" else f"depth_order {d['order']}"
        console.print(f"  depth: {order}, depth_init {d['init']}: {d['map']} (position in the "
                      f"grown model <- the old block {what})")
        if d.get("scaling", "none") != "none":
            console.print(f"  depth_scaling {d['scaling']}: every block's output projections x"
                          f"{d['branch_factor']:.4g} (depth-muP's 1/sqrt(n_layer) branch multiplier; not function "
                          "preserving)")
    if s["heads"] is not None:
        how = ("new head <- old head it copies, by position" if s.get("heads_copied", True) else
               f"init {s['init']}: new heads start random, no source to copy")
        console.print(f"  heads: {s['heads']} ({how})")
    for name, line in s.get("axes", {}).items():
        console.print(f"  {name}: {line}")
    if s.get("function"):
        console.print(f"  logits: {s['function']}")
    if not s["new_entries"]:  # e.g. a config-field axis (rope_base): nothing the recipe's keys act on
        console.print("  no new entries (the growth sets litgpt.Config fields only): no init, new-entry optimizer "
                      "state or re-warmup applies")
    else:
        # init and rms_preserving act on new width channels and heads only: a stage that adds only blocks does not
        # list them
        width = (f"init {s['init']}, rms_preserving {s['rms_preserving']}, " if s["grows_channels"] else "")
        console.print(f"  {width}optimizer_state {s['optimizer_state']}, rewarmup ratio {s['rewarmup_ratio']} over "
                      f"{s['rewarmup_steps']} steps")
        console.print(_new_entry_lr_line(run, s["rewarmup_window"]))
        console.print(f"  {_describe_baselines(s)}")
    if alphas:
        console.print(f"  alpha (fan-in scale): {alphas}")
    console.print(f"  parameters {s['params_before']:,} -> {s['params_after']:,} (active "
                  f"{s['active_params_before']:,} -> {s['active_params_after']:,})")
    if s["tensors"]:
        console.print(_tensor_table(s))


def _new_entry_lr_line(run: ResolvedRun, w: dict[str, Any] | None) -> str:
    """The plan's line on a stage's new-entry LR (its re-warmup window ``w``)."""
    if w is None:
        return "  new-entry LR: no re-warmup (rewarmup_ratio null): the new entries follow the baseline schedule"
    from lightning_sparkling.pretrain.config.stages import lr_decay_start

    if lr_decay_start(run.train, run.steps) is not None:  # a stable phase: the re-warmup holds, then its decay
        return (f"  new-entry LR: linear re-warmup over steps {w['start']:,}..{w['warmup_end']:,} (to "
                f"{w['peak_ratio']:g}x the LR at growth), held to the WSD decay at step "
                f"{lr_decay_start(run.train, run.steps):,}, then {run.train.lr_decay_shape} decay to min_lr "
                f"with the baseline (ends at step {w['end']:,})")
    return (f"  new-entry LR: linear re-warmup over steps {w['start']:,}..{w['warmup_end']:,} (to "
            f"{w['peak_ratio']:g}x the LR at growth), then cosine to min_lr over {w['tail_steps']:,} "
            f"steps (ends at step {w['end']:,})")


def _tensor_table(s: dict[str, Any]) -> Any:
    """The rich table of the tensors one stage changes."""
    from rich.table import Table

    table = Table(title=f"stage {s['stage']}: {s['tensors']} tensors change", title_justify="left")
    for col in ("tensor (* = every block / expert)", "count", "shape", "growth", "scale"):
        table.add_column(col, justify="right" if col == "count" else "left")
    for name, g in s["tensor_groups"].items():
        scale = ", ".join(f"{v:g}" for v in g["scale"])
        new_module = g["growth"].startswith("new (") and not g["growth"].startswith("new (copy")
        shape = (f"new {tuple(g['new_shape'])}" if new_module and tuple(g["old_shape"]) != tuple(g["new_shape"])
                 else f"{tuple(g['old_shape'])} -> {tuple(g['new_shape'])}")
        table.add_row(name, str(g["count"]), shape, g["growth"], scale)
    return table


def _gstack_line(g: dict[str, Any], steps: int) -> str:
    """The plan's line on G_stack's timing rule (a depth growth only), labelled as that paper's fit: the timing once,
    as a share of the run (or a multiple of it, past its end)."""
    where = (f"after {g['fraction']:.1%} of this run (step {g['step']:,})" if g["in_run"] else
             f"after {g['fraction']:,.3g}x this run's tokens, past its end ({steps:,} steps)")
    return (f"G_stack's growth timing (the fit of Du et al. 2024, arXiv 2405.15319: log10 d = 0.88 log10 N + "
            f"163.27 / log10 C - 5.74, N = {g['n_params']:,} parameters of the grown model, C = 6 N D = "
            f"{g['flops']:.3g} FLOPs): grow {where}. Fitted on that paper's runs (up to 7B parameters after a 4x "
            "stack), not measured here")


def _count(value: float) -> str:
    """``12,345`` below 10^15, ``1.78e+16`` above (where the digits stop meaning anything)."""
    return f"{value:,.0f}" if value < 1e15 else f"{value:.3g}"


def _print_compute(console: Any, report: dict[str, Any]) -> None:
    """The compute table, the FLOPs line and the regime advice (or warning) of the report."""
    from rich.table import Table

    table = Table(title="compute (6 N_active D per phase)", title_justify="left")
    for col in ("phase", "steps", "active params", "total params"):
        table.add_column(col, justify="right")
    for k, (steps, active, total) in enumerate(zip(report["phase_steps"], report["active_params"],
                                                   report["total_params"])):
        table.add_row("start" if k == 0 else f"after stage {k - 1}", f"{steps:,}", f"{active:,}", f"{total:,}")
    console.print()
    console.print(table)
    console.print(f"FLOPs: progressive {_fmt_flops(report['flops'])}, from scratch at the final width "
                  f"{_fmt_flops(report['flops_from_scratch'])}, saved {report['flops_saved']:.2%} "
                  f"(flops_saved={report['flops_saved']:.6f})")
    if report["gstack"] is not None:
        console.print(_gstack_line(report["gstack"], report["steps"]))
    if report["regime_warning"]:
        console.print(f"[yellow]warning:[/yellow] {report['regime_warning']}")
    elif report["regime_advice"]:
        console.print(report["regime_advice"])
