"""The ``sparkling`` command line.

- ``sparkling pretrain --config FILE.yaml [--section.key value ...]``: pretrain a litgpt model on Lightning's
  ``Trainer`` and grow its width mid-run (SPARKLING); leaves litgpt checkpoint dirs (``out_dir/step-XXXXXXXX/``,
  ``out_dir/final/``), Lightning checkpoints for ``resume`` (``out_dir/checkpoints/``), TensorBoard logs
  (``out_dir/logs/``) and ``out_dir/summary.json``.
- ``sparkling plan --config FILE.yaml``: what the growth stages of that config do (widths, tensors, alpha,
  parameters, FLOPs saved), without training and without building a tokenizer.
- ``sparkling plot LOGDIR... --out FILE.png [--x step|tokens|flops]``: the dashboard figure
  (:mod:`lightning_sparkling.plotting`).

The configuration schema and its checks are in :mod:`lightning_sparkling.config`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import shlex
import signal
import sys
import time
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning_sparkling.pretrain.config import (ConfigError, ResolvedRun, check_keys, check_out_dir,
                                                 pretrain_arguments, resolve)

__all__ = ["build_parser", "main", "parse", "plan", "pretrain"]

USAGE = """usage: sparkling {pretrain,plan,plot} ...

  sparkling pretrain --config FILE.yaml [--train.max_steps 100 ...]   pretrain and grow (SPARKLING)
  sparkling plan     --config FILE.yaml                               show what the growth stages do
  sparkling plot     LOGDIR... --out FILE.png [--x step|tokens|flops] dashboard figure of runs

`sparkling pretrain --help` lists every configuration key; `--print_config` prints the resolved configuration.
"""


# ------------------------------------------------------------------------------------------------------------ parsing
def build_parser(command: str = "pretrain"):
    """The jsonargparse parser of ``sparkling pretrain`` / ``sparkling plan`` (same keys: a plan reads the config
    a run would use)."""
    from jsonargparse import ActionConfigFile, ArgumentParser, set_docstring_parse_options

    class _Parser(ArgumentParser):
        """Errors as one ``error:`` line under the short usage line (jsonargparse's own messages span lines)."""

        def error(self, message: str, ex: Exception | None = None):
            return super().error(_one_line_error(str(message)), ex)

    set_docstring_parse_options(attribute_docstrings=True)
    description = {
        "pretrain": "Pretrain a litgpt model on Lightning's Trainer, growing its width mid-run (SPARKLING).",
        "plan": "Show what the growth stages of a pretrain config do, without training (and without training a "
                "tokenizer: the vocabulary size comes from data.vocab_size, model_config.vocab_size or "
                "tokenizer_dir/tokenizer.json).",
    }[command]
    parser = _Parser(prog=f"sparkling {command}", description=description, exit_on_error=True,
                     usage=f"sparkling {command} --config FILE.yaml [--section.key VALUE ...]   "
                           f"(`sparkling {command} --help` lists every key)")
    parser.add_argument("--config", action=ActionConfigFile, help="a YAML file with the keys below")
    parser.add_function_arguments(pretrain_arguments, as_positional=False)
    return parser


def _one_line_error(message: str) -> str:
    """A parser error as one line that starts with the key: jsonargparse's ``Parser key "train.max_steps": Does not
    validate against any of the Union subtypes ... Given value: abc`` becomes ``train.max_steps: 'abc' is not a
    valid value: expected null or int``.

    Example::

        >>> _one_line_error('Parser key "config":\\n  File does not exist: x.yaml')
        'config: File does not exist: x.yaml'
    """
    message = " ".join(message.split())
    match = re.match(r'Parser key "([^"]+)":\s*(.*)', message)
    if match is None:
        return message
    key, rest = match.groups()
    value = re.search(r"(?:Given|Got) value: (.*)$", rest)
    types = re.findall(r"<class '([\w.]+)'>", rest.split("Errors:")[0])
    if value is not None and types:
        names = [{"NoneType": "null"}.get(t, t.rsplit(".", 1)[-1]) for t in dict.fromkeys(types)]
        rest = f"{value.group(1).strip()!r} is not a valid value: expected {' or '.join(names)}"
    return f"{key}: {rest}"


def parse(argv: Sequence[str], command: str = "pretrain") -> tuple[Any, ResolvedRun, str]:
    """Parse and check ``argv`` (the arguments after ``sparkling <command>``).

    Returns:
        ``(namespace, resolved run, the configuration as YAML)``.

    Raises:
        SystemExit: (code 2, message on stderr naming the key) for unknown keys, wrong types and impossible values.
    """
    parser = build_parser(command)
    argv, optimizer = _take_optimizer_mapping(_rewrite_optimizer_args(list(argv)))
    try:
        for path in _config_files(argv):
            check_keys(_read_yaml(path))
    except ConfigError as err:
        parser.error(f"{err} (in {path})")
    ns = parser.parse_args(argv)
    if optimizer is not None:  # `--optimizer '{class_path: ..., init_args: ...}'` replaces the whole optimizer
        ns.optimizer = optimizer
    try:
        run = resolve(ns)
        if command == "pretrain":  # plan writes nothing: its out_dir may be a path of another machine
            check_out_dir(run.out_dir)
    except ConfigError as err:
        parser.error(str(err))
    ns.optimizer = run.optimizer  # normalized: `--optimizer.lr` overrides moved into init_args
    dumped = parser.dump(ns, skip_none=False, skip_validation=True)
    return ns, run, dumped


def _rewrite_optimizer_args(argv: list[str]) -> list[str]:
    """``--optimizer.init_args.lr X`` -> ``--optimizer.lr X`` (jsonargparse cannot descend into the free-form
    optimizer dict; :func:`~lightning_sparkling.config.normalize_optimizer` moves such keys into ``init_args``)."""
    return [a.replace("--optimizer.init_args.", "--optimizer.", 1) if a.startswith("--optimizer.init_args.") else a
            for a in argv]


def _take_optimizer_mapping(argv: list[str]) -> tuple[list[str], dict | None]:
    """Take ``--optimizer '{class_path: ..., init_args: {...}}'`` (a YAML mapping) out of ``argv``: it replaces the
    whole optimizer, as ``--growth.stages`` replaces the list. jsonargparse would try to merge it into a config
    file's optimizer mapping and fail with a traceback. The last one given wins; a name (``--optimizer AdamW``)
    stays in ``argv``."""
    import yaml

    rest, given = [], None
    i = 0
    while i < len(argv):
        arg, value, width = argv[i], None, 1
        if arg == "--optimizer" and i + 1 < len(argv):
            value, width = argv[i + 1], 2
        elif arg.startswith("--optimizer="):
            value = arg.split("=", 1)[1]
        try:
            parsed = yaml.safe_load(value) if value is not None else None
        except yaml.YAMLError:
            parsed = None
        if isinstance(parsed, dict):
            given = parsed
        else:
            rest.extend(argv[i:i + width])
        i += width
    return rest, given


def _config_files(argv: list[str]) -> list[str]:
    files = []
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            files.append(argv[i + 1])
        elif arg.startswith("--config="):
            files.append(arg.split("=", 1)[1])
    return files


def _read_yaml(path: str) -> Any:
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.safe_load(fh)
    except OSError:
        return None  # jsonargparse reports a missing file itself
    except yaml.YAMLError as err:
        raise ConfigError("config", f"{path} is not valid YAML: {err}") from err


# ------------------------------------------------------------------------------------------------------------ plan
def _group_name(name: str) -> str:
    return re.sub(r"\.\d+(?=\.|$)", ".*", name)


def _describe_dims(tensor_plan) -> str:
    parts = []
    for d in tensor_plan.dims:
        parts.append(f"{d.role.replace('_', '-')} {d.axis} ({d.mode})")
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


def _depth_report(gp, stage) -> dict[str, Any] | None:
    """The depth change of a stage's plan: order, init, and which old block each new block copies."""
    from lightning_sparkling.growth.depth import describe_depth

    if gp.depth is None:
        return None
    return {"order": stage.depth_order, "init": stage.depth_init, "map": describe_depth(gp.depth),
            "source": list(gp.depth.source)}


def plan(run: ResolvedRun, *, print_report: bool = True) -> dict[str, Any]:
    """What the growth stages of ``run`` do, without training: per stage the widths, alpha per axis, the tensors
    touched (grouped by kind), parameters before/after; and the run's FLOPs against a from-scratch run of the final
    width (:func:`~lightning_sparkling.compute.estimate_compute`).

    Returns:
        a dict: ``stages`` (list of per-stage dicts), ``flops``, ``flops_from_scratch``, ``flops_saved``,
        ``active_params``, ``total_params``, ``phase_steps``, ``steps``, ``tokens_per_step``, ``total_tokens``.
    """
    from lightning_sparkling.growth.compute import count_params, estimate_compute
    from lightning_sparkling.growth.heads import describe_heads
    from lightning_sparkling.growth.plan import plan_growth, size_changes

    tied = run.train.tie_embeddings
    config = run.model_config
    stages_out = []
    for k, stage in enumerate(run.stages):
        gp = plan_growth(config, stage, seed=run.growth.seed, stage_index=k, tied_embeddings=tied)
        before, after = count_params(config, tie_embeddings=tied), count_params(gp.new_config, tie_embeddings=tied)
        groups: dict[str, dict[str, Any]] = {}
        for name, tp in gp.tensors.items():
            g = groups.setdefault(_group_name(name), {"count": 0, "old_shape": tp.old_shape,
                                                      "new_shape": tp.new_shape, "growth": _describe_dims(tp),
                                                      "scales": set()})
            g["count"] += 1
            g["scales"].add(round(float(tp.scale), 6))
        for g in groups.values():
            g["scale"] = sorted(g.pop("scales"))
        stages_out.append({
            "stage": k, "at_step": stage.at_step, "at_tokens": stage.at_step * run.tokens_per_step,
            "widths": {axis: [ax.old, ax.new] for axis, ax in gp.axes.items()},
            "sizes": {axis: list(pair) for axis, pair in size_changes(config, gp.new_config).items()},
            "into": gp.new_config.name if stage.model_name or stage.model_config else None,
            "depth": _depth_report(gp, stage), "heads": describe_heads(gp.heads) if gp.heads is not None else None,
            "alpha": gp.alphas(), "init": stage.init, "rms_preserving": stage.rms_preserving,
            "optimizer_state": stage.optimizer_state, "rewarmup_ratio": stage.rewarmup_ratio,
            "rewarmup_steps": stage.rewarmup_steps, "rewarmup_window": _rewarmup_window(stage, run.steps),
            **_baseline_options(stage, run.steps),
            "params_before": before[1], "params_after": after[1],
            "active_params_before": before[0], "active_params_after": after[0],
            "tensors": len(gp.tensors), "tensor_groups": groups,
        })
        config = gp.new_config
    est = estimate_compute(run.model_config, run.stages, total_steps=run.steps, tokens_per_step=run.tokens_per_step,
                           tie_embeddings=tied)
    report = {
        "steps": run.steps, "tokens_per_step": run.tokens_per_step, "total_tokens": run.total_tokens,
        "stages": stages_out, "phase_steps": list(est.phase_steps), "active_params": list(est.active_params),
        "total_params": list(est.total_params), "flops": est.flops, "flops_from_scratch": est.flops_from_scratch,
        "flops_saved": est.flops_saved, "final_config": dataclasses.asdict(config),
    }
    report["tokens_per_param"] = run.total_tokens / est.active_params[-1]
    advice = regime_advice(run, est.active_params)
    report["regime_advice"] = advice.message() if advice is not None else None
    report["regime_warning"] = advice.message() if advice is not None and not advice.pays else None
    if print_report:
        _print_plan(run, report)
    return report


def _is_recipe(stage: Any, recipe: str) -> bool:
    from lightning_sparkling.growth.stage import RECIPES

    return all(getattr(stage, key) == value for key, value in RECIPES[recipe].items())


def run_recipe(stages: Sequence[Any]) -> str:
    """The recipe a run's stages follow, as the measured map names it: ``recommended`` or ``random-zero`` when
    every stage has that recipe's keys, else ``paper`` (the paper's keys, or a stage's own)."""
    for recipe in ("recommended", "random-zero"):
        if stages and all(_is_recipe(s, recipe) for s in stages):
            return recipe
    return "paper"


def regime_advice(run: ResolvedRun, active_params: Sequence[int]):
    """What the project's measured map (:mod:`lightning_sparkling.growth.measured`) says about ``run``: the
    comparison nearest to its axis, recipe, schedule, timing and token ratio, or that none is near
    (:class:`~lightning_sparkling.growth.measured.Advice`); ``None`` without growth stages."""
    from lightning_sparkling.growth.measured import advise
    from lightning_sparkling.growth.plan import size_changes, stage_config

    if not run.stages:
        return None
    configs = [run.model_config]
    for stage in run.stages:
        configs.append(stage_config(configs[-1], stage))
    sizes = [list(size_changes(a, b)) for a, b in zip(configs[:-1], configs[1:])]
    return advise(run.stages, total_steps=run.steps, tokens_per_param=run.total_tokens / active_params[-1],
                  recipe=run_recipe(run.stages), schedule=run.train.lr_schedule, sizes=sizes)


def regime_warning(run: ResolvedRun, active_params: Sequence[int]) -> str | None:
    """The warning of :func:`regime_advice` when the run is not where growth was measured to pay (nothing measured
    near it, or the nearest comparison ended above scratch), else ``None``."""
    advice = regime_advice(run, active_params)
    return None if advice is None or advice.pays else advice.message()


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


def _console():
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 130, file=sys.stdout)


def _fmt_int(n: float) -> str:
    n = float(n)
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return f"{n:.0f}"


def _fmt_flops(n: float) -> str:
    return f"{float(n):.3e}"


def _model_line(config) -> str:
    moe = (f", {config.n_expert} experts (top-{config.n_expert_per_token}), moe_intermediate_size "
           f"{config.moe_intermediate_size}" if config.mlp_class_name == "LLaMAMoE" else "")
    return (f"{config.mlp_class_name}, n_layer {config.n_layer}, n_embd {config.n_embd}, n_head {config.n_head} "
            f"(head_size {config.head_size}, n_query_groups {config.n_query_groups}), intermediate_size "
            f"{config.intermediate_size}{moe}, vocab {config.padded_vocab_size}, block_size {config.block_size}")


def _print_plan(run: ResolvedRun, report: dict[str, Any]) -> None:
    from rich.table import Table

    console = _console()
    console.print(f"[bold]model[/bold]: {_model_line(run.model_config)}")
    console.print(f"[bold]run[/bold]: {run.steps:,} steps x {run.tokens_per_step:,} tokens/step "
                  f"(global_batch_size {run.train.global_batch_size} x seq_len {run.seq_len}) = "
                  f"{run.total_tokens:,} tokens; vocabulary {run.data_vocab_size} "
                  f"({'tokenizer_dir' if run.tokenizer_dir else 'data.vocab_size / model_config'}, no tokenizer "
                  "trained for the plan)")
    if not report["stages"]:
        console.print("no growth stages (growth.stages is empty): plain pretraining")
    for s in report["stages"]:
        sizes = ", ".join(f"{a} {o} -> {n}" for a, (o, n) in s["sizes"].items())
        alphas = ", ".join(f"{a} {v:.4f}" for a, v in s["alpha"].items())
        into = f" (into {s['into']})" if s["into"] else ""
        console.print()
        console.print(f"[bold]stage {s['stage']}[/bold] at step {s['at_step']:,} ({s['at_tokens']:,} tokens){into}: "
                      f"{sizes}")
        if s["depth"] is not None:
            d = s["depth"]
            what = {"copy": "it copies", "copy-zero": "it copies, output projections zeroed",
                    "random-zero": "it stands in for: litgpt's init, output projections zeroed"}[d["init"]]
            console.print(f"  depth: depth_order {d['order']}, depth_init {d['init']}: {d['map']} (position in the "
                          f"grown model <- the old block {what})")
        if s["heads"] is not None:
            console.print(f"  heads: {s['heads']} (new head <- old head it copies, by position)")
        console.print(f"  init {s['init']}, rms_preserving {s['rms_preserving']}, optimizer_state "
                      f"{s['optimizer_state']}, rewarmup ratio {s['rewarmup_ratio']} over {s['rewarmup_steps']} steps")
        w = s["rewarmup_window"]
        if w is None:
            console.print("  new-entry LR: no re-warmup (rewarmup_ratio null): the new entries follow the baseline "
                          "schedule")
        elif run.train.lr_schedule == "wsd":  # the re-warmup holds its peak, then follows the baseline's decay
            from lightning_sparkling.pretrain.config import lr_decay_start

            console.print(f"  new-entry LR: linear re-warmup over steps {w['start']:,}..{w['warmup_end']:,} (to "
                          f"{w['peak_ratio']:g}x the LR at growth), held to the WSD decay at step "
                          f"{lr_decay_start(run.train, run.steps):,}, then {run.train.lr_decay_shape} decay to min_lr "
                          f"with the baseline (ends at step {w['end']:,})")
        else:
            console.print(f"  new-entry LR: linear re-warmup over steps {w['start']:,}..{w['warmup_end']:,} (to "
                          f"{w['peak_ratio']:g}x the LR at growth), then cosine to min_lr over {w['tail_steps']:,} "
                          f"steps (ends at step {w['end']:,})")
        console.print(f"  {_describe_baselines(s)}")
        if alphas:
            console.print(f"  alpha (fan-in scale): {alphas}")
        console.print(f"  parameters {s['params_before']:,} -> {s['params_after']:,} (active "
                      f"{s['active_params_before']:,} -> {s['active_params_after']:,})")
        table = Table(title=f"stage {s['stage']}: {s['tensors']} tensors change", title_justify="left")
        for col in ("tensor (* = every block / expert)", "count", "shape", "growth", "scale"):
            table.add_column(col, justify="right" if col == "count" else "left")
        for name, g in s["tensor_groups"].items():
            scale = ", ".join(f"{v:g}" for v in g["scale"])
            table.add_row(name, str(g["count"]), f"{tuple(g['old_shape'])} -> {tuple(g['new_shape'])}", g["growth"],
                          scale)
        console.print(table)
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
    if report["regime_warning"]:
        console.print(f"[yellow]warning:[/yellow] {report['regime_warning']}")
    elif report["regime_advice"]:
        console.print(report["regime_advice"])


# ------------------------------------------------------------------------------------------------------------ data
def build_datamodule(run: ResolvedRun):
    """The data module of ``run`` (nothing is read or trained until ``prepare_data``). With ``eval.max_iters`` it
    validates on ``max_iters`` batches per rank of windows spread over the whole validation split (a fixed, seeded
    sample: the same windows at every evaluation and on resume), not on the split's first batches."""
    from lightning_sparkling.pretrain.data import TextCorpusDataModule

    if run.litgpt_data:  # data.class_path: a litgpt data module, connect()-ed as litgpt pretrain does
        from lightning_sparkling.pretrain.litgpt_compat import build_litgpt_datamodule

        return build_litgpt_datamodule(run)
    d = run.data
    val_windows = run.eval.max_iters * run.micro_batch_size * run.world_size if run.eval.max_iters else None
    kwargs = dict(seq_len=run.seq_len, batch_size=run.micro_batch_size, source=d.source, data_dir=d.data_dir,
                  include_tests=d.include_tests, vocab_size=d.vocab_size, val_percent=d.val_percent,
                  seed=run.seed if d.seed is None else d.seed, cache_dir=d.cache_dir, max_files=d.max_files,
                  max_bytes=d.max_bytes, num_workers=d.num_workers, tokenizer_dir=run.tokenizer_dir,
                  val_windows=val_windows)
    return TextCorpusDataModule(**kwargs)


def build_module(run: ResolvedRun):
    """The :class:`~lightning_sparkling.module.LitGPTPretrainModule` of ``run``, holding the weights of
    ``initial_checkpoint_dir`` when one is given (litgpt's init otherwise)."""
    from lightning_sparkling.pretrain.module import LitGPTPretrainModule

    module = LitGPTPretrainModule(
        run.model_config, run.optimizer, max_steps=run.steps, lr_warmup_steps=run.train.lr_warmup_steps,
        lr_warmup_fraction=run.train.lr_warmup_fraction, min_lr=run.train.min_lr, max_norm=run.train.max_norm,
        tie_embeddings=run.train.tie_embeddings, seed=run.seed,
        accumulate_grad_batches=run.accumulate if run.uses_muon else 1, lr_schedule=run.train.lr_schedule,
        lr_decay_fraction=run.train.lr_decay_fraction, lr_decay_shape=run.train.lr_decay_shape,
    )
    if run.initial_weights is not None:
        from lightning_sparkling.pretrain.litgpt_compat import load_initial_weights

        load_initial_weights(module.model, run.initial_weights)
    return module


# ------------------------------------------------------------------------------------------------------------ callbacks
@functools.cache
def _callbacks_module() -> types.SimpleNamespace:
    """Callbacks of a CLI run (defined lazily: importing Lightning is slow and ``plan`` does not need it):
    ``TokenCounter``, ``LitGPTExport``, ``RunTracker``, ``StepProgressBar``, ``InterruptCheckpoint``."""
    import copy

    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.callbacks import RichProgressBar

    from lightning_sparkling.pretrain.module import active_parameter_count

    class TokenCounter(pl.Callback):
        """Logs ``tokens`` (cumulative tokens seen) and ``flops`` (cumulative training FLOPs, ``6 * active params *
        tokens`` of the model that took each step, so it follows growth) every ``log_interval`` optimizer steps,
        plus ``throughput/tokens_per_sec``. Checkpointed, so a resumed run continues the counts."""

        def __init__(self, tokens_per_step: int, log_interval: int) -> None:
            self.tokens_per_step = int(tokens_per_step)
            self.log_interval = int(log_interval)
            self.flops = 0.0
            self.step = 0
            self._active: int | None = None
            self._key: tuple | None = None
            self._clock: tuple[float, int] | None = None
            self.train_losses: dict[int, list[float]] = {}

        def state_dict(self) -> dict[str, Any]:
            return {"flops": self.flops, "step": self.step}

        def load_state_dict(self, state_dict: dict[str, Any]) -> None:
            self.flops = float(state_dict["flops"])
            self.step = int(state_dict["step"])

        def _active_params(self, pl_module) -> int:
            model = pl_module.model
            key = (id(model), id(model.config))
            if key != self._key:
                self._active, self._key = active_parameter_count(model), key
            return self._active

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            if trainer.global_step == self.step:  # the model of this step (growth happens between steps)
                self._step_active = self._active_params(pl_module)
            if self._clock is None:
                self._clock = (time.perf_counter(), trainer.global_step)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            loss = trainer.callback_metrics.get("train_loss")
            if loss is not None:
                self.train_losses.setdefault(self.step, []).append(float(loss))
            step = trainer.global_step
            if step == self.step:
                return
            self.flops += 6.0 * getattr(self, "_step_active", self._active_params(pl_module)) * \
                self.tokens_per_step * (step - self.step)
            self.step = step
            if step % self.log_interval == 0 and trainer.logger is not None:
                metrics = {"tokens": float(step * self.tokens_per_step), "flops": self.flops}
                now = time.perf_counter()
                t0, s0 = self._clock
                if step > s0 and now > t0:
                    metrics["throughput/tokens_per_sec"] = (step - s0) * self.tokens_per_step / (now - t0)
                self._clock = (now, step)
                trainer.logger.log_metrics(metrics, step=step)

        def step_loss(self, step: int) -> float | None:
            losses = self.train_losses.get(step)
            return sum(losses) / len(losses) if losses else None

    class LitGPTExport(pl.Callback):
        """Writes litgpt checkpoint dirs: ``out_dir/step-XXXXXXXX/`` every ``save_interval`` steps and
        ``out_dir/final/`` at the end, each with ``lit_model.pth`` (a plain ``litgpt.GPT`` state_dict of the config
        of that moment), ``model_config.yaml`` (litgpt's ``save_config``), the tokenizer files and
        ``hyperparameters.yaml``. Runs after the growth callback, so the dir of a growth step holds the grown
        model (as Lightning's ``.ckpt`` of that step does)."""

        def __init__(self, out_dir: Path, save_interval: int | None, tokenizer_dir_fn, hparams_yaml: str) -> None:
            self.out_dir = Path(out_dir)
            self.save_interval = save_interval
            self.tokenizer_dir_fn = tokenizer_dir_fn
            self.hparams_yaml = hparams_yaml
            self._last_saved: int | None = None
            self.written: list[Path] = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            step = trainer.global_step
            if (self.save_interval and step > 0 and step % self.save_interval == 0 and step != self._last_saved):
                self._last_saved = step
                self.export(trainer, pl_module, self.out_dir / f"step-{step:08d}")

        def on_train_end(self, trainer, pl_module) -> None:
            self.export(trainer, pl_module, self.out_dir / "final")

        def export(self, trainer, pl_module, folder: Path) -> None:
            from litgpt.utils import copy_config_files, save_config

            from torch.distributed.fsdp import FullyShardedDataParallel

            from lightning_sparkling.parallel.fsdp2 import is_sharded

            model = pl_module.model
            if is_sharded(model) or isinstance(model, FullyShardedDataParallel):  # FSDP2/FSDP1: every rank gathers
                from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

                state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
            else:
                state = {k: v.detach().to("cpu") for k, v in model.state_dict().items()} if trainer.is_global_zero \
                    else {}
            if trainer.is_global_zero:
                folder.mkdir(parents=True, exist_ok=True)
                from lightning_sparkling.pretrain.checkpointing import atomic_save

                atomic_save(state, folder / "lit_model.pth")  # a kill mid-export leaves no half-written weights
                tokenizer_dir = self.tokenizer_dir_fn()
                if tokenizer_dir is not None:  # (a litgpt data module of pre-tokenized data may have none)
                    copy_config_files(Path(tokenizer_dir), folder)
                save_config(model.config, folder)  # after the copy: a tokenizer_dir may hold another model_config
                (folder / "hyperparameters.yaml").write_text(self.hparams_yaml)
                self.written.append(folder)
            trainer.strategy.barrier("sparkling-export")

    class RunTracker(pl.Callback):
        """Remembers the step of the last validation, and the fit's wall-clock."""

        def __init__(self) -> None:
            self.last_val_step: int | None = None
            self.fit_seconds = 0.0
            self._t0: float | None = None

        def on_validation_end(self, trainer, pl_module) -> None:
            if not trainer.sanity_checking:
                self.last_val_step = trainer.global_step

        def on_train_start(self, trainer, pl_module) -> None:
            self._t0 = time.perf_counter()

        def on_train_end(self, trainer, pl_module) -> None:
            if self._t0 is not None:
                self.fit_seconds = time.perf_counter() - self._t0

    class StepProgressBar(RichProgressBar):
        """Lightning's rich bar, counting optimizer steps against ``max_steps`` (with the tokens seen and the loss)
        instead of the micro-batches of one data epoch (``Epoch 0/-2``, and ``300/149`` after a resume): one bar
        for the whole run, at ``trainer.global_step`` from the first batch on, resumed runs included."""

        def __init__(self, tokens_per_step: int) -> None:
            super().__init__()
            self.tokens_per_step = int(tokens_per_step)

        @property
        def total_train_batches(self) -> int | float:
            steps = self.trainer.max_steps
            return steps if steps is not None and steps > 0 else float("inf")

        def _get_train_description(self, current_epoch: int) -> str:
            return f"{'step':{len(self.validation_description)}}"

        def on_train_epoch_start(self, trainer, pl_module) -> None:
            if self.train_progress_bar_id is None:  # later data epochs continue the same bar
                super().on_train_epoch_start(trainer, pl_module)
                self._update(self.train_progress_bar_id, trainer.global_step)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if not self.is_disabled and self.train_progress_bar_id is None:
                self._initialize_train_progress_bar_id()
            self._update(self.train_progress_bar_id, trainer.global_step)
            self._update_metrics(trainer, pl_module)
            self.refresh()

        def get_metrics(self, trainer, pl_module) -> dict[str, Any]:
            items = super().get_metrics(trainer, pl_module)
            items.pop("v_num", None)
            items["tokens"] = _fmt_int(trainer.global_step * self.tokens_per_step)
            return items

    class InterruptCheckpoint(pl.Callback):
        """On Ctrl-C or an exception during ``fit``, saves ``dirpath/step-XXXXXXXX.ckpt``: the Lightning checkpoint of
        the last completed optimizer step, exactly what ``ModelCheckpoint`` would have written at that step (the loop
        and data positions are taken at that step's end, so micro-batches of an unfinished accumulation are not
        counted and a resume continues as an uninterrupted run would). Lightning's ``OnExceptionCheckpoint`` saves
        the state of the interrupted moment instead, mid-accumulation included, and deletes its file when a later
        fit ends.

        Put it first in the callback list: its ``on_train_batch_end`` then records each step before any other
        callback (e.g. a growth) acts on it. Single-process runs only: in a multi-process run the ranks may be
        stopped at different places, and the newest periodic checkpoint is the resume point.

        A Ctrl-C that arrives inside a training step (from its first micro-batch until the next batch or
        validation starts) is held until then: the optimizer step and every callback acting on it finish, so the
        checkpoint holds weights, optimizer and loop of one and the same step. Without that, a Ctrl-C between
        ``optimizer.step()`` and the end of the batch would save step N+1's weights with step N's loop, and a
        resume would train one batch twice. A second Ctrl-C stops at once; no checkpoint is saved of that moment
        (it could be half a step), and the newest periodic one is named instead.

        Attributes:
            exception: what stopped the fit (``KeyboardInterrupt`` for Ctrl-C), or ``None``.
            path: the checkpoint to resume from (this one, or one of the step it is at), or ``None``.
            step: the optimizer steps that checkpoint holds.
        """

        def __init__(self, dirpath: Path) -> None:
            self.dirpath = Path(dirpath)
            self.exception: BaseException | None = None
            self.path: Path | None = None
            self.step: int | None = None
            self._start_step: int | None = None
            self._boundary: tuple[int, dict[str, Any], dict[str, Any] | None] | None = None
            self._saving = False
            self._in_step = False  # from a batch's start until the next batch or validation starts
            self._sigint_pending = False  # a Ctrl-C held until the step ends
            self._mid_step = False  # the fit was stopped inside a step (a second Ctrl-C): no consistent state
            self._previous_sigint: Any = None
            self._handler_installed = False

        def _on_sigint(self, signum: int, frame: Any) -> None:
            if self._in_step and not self._sigint_pending:
                self._sigint_pending = True
                return
            self._mid_step = self._in_step
            raise KeyboardInterrupt

        def _raise_if_pending(self) -> None:
            if self._sigint_pending:
                self._sigint_pending = False
                raise KeyboardInterrupt

        def _restore_handler(self) -> None:
            if self._handler_installed:
                # None: the previous handler was not set from Python; the default is the closest to it
                signal.signal(signal.SIGINT, self._previous_sigint if self._previous_sigint is not None
                              else signal.default_int_handler)
                self._handler_installed = False

        def on_train_start(self, trainer, pl_module) -> None:
            import threading

            self._start_step = trainer.global_step
            if trainer.world_size == 1 and threading.current_thread() is threading.main_thread():
                self._previous_sigint = signal.signal(signal.SIGINT, self._on_sigint)
                self._handler_installed = True

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            self._in_step = False
            self._raise_if_pending()
            self._in_step = True

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            step = trainer.global_step
            if step != self._start_step and (self._boundary is None or self._boundary[0] != step):
                datamodule = trainer.datamodule
                self._boundary = (step, copy.deepcopy(trainer.fit_loop.state_dict()),
                                  copy.deepcopy(datamodule.state_dict()) if datamodule is not None else None)

        def on_validation_start(self, trainer, pl_module) -> None:
            if trainer.sanity_checking:
                return
            self._in_step = False
            self._raise_if_pending()

        def on_train_end(self, trainer, pl_module) -> None:
            self._in_step = False
            self._restore_handler()
            self._raise_if_pending()

        def teardown(self, trainer, pl_module, stage: str) -> None:
            self._restore_handler()

        def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
            self.exception = exception
            self._restore_handler()
            if self._boundary is None or trainer.world_size > 1:
                return
            if self._mid_step or trainer.global_step != self._boundary[0]:
                _info(f"stopped inside step {trainer.global_step + 1}: no checkpoint of this moment is consistent")
                return
            step = self._boundary[0]
            path = self.dirpath / f"step-{step:08d}.ckpt"
            if not path.exists():  # (else ModelCheckpoint wrote this step already)
                self._saving = True
                try:
                    trainer.save_checkpoint(path, weights_only=False)
                except Exception as err:  # noqa: BLE001 - report, keep the original error
                    _info(f"could not save a checkpoint of step {step} ({type(err).__name__}: {err})")
                    return
                finally:
                    self._saving = False
            self.path, self.step = path, step

        def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
            if not self._saving:
                return
            _, loops, data_state = self._boundary
            checkpoint["loops"]["fit_loop"] = loops
            datamodule = trainer.datamodule
            if data_state is not None and datamodule.__class__.__qualname__ in checkpoint:
                checkpoint[datamodule.__class__.__qualname__] = data_state

    return types.SimpleNamespace(TokenCounter=TokenCounter, LitGPTExport=LitGPTExport, RunTracker=RunTracker,
                                 StepProgressBar=StepProgressBar, InterruptCheckpoint=InterruptCheckpoint)


# ------------------------------------------------------------------------------------------------------------ pretrain
def _strategy(run: ResolvedRun):
    """The Lightning strategy of ``run``: its name, or for ``fsdp2`` / ``fsdp`` a strategy whose sharded checkpoint
    directories are written atomically (:mod:`~lightning_sparkling.pretrain.checkpointing`)."""
    from lightning_sparkling.pretrain.checkpointing import AtomicFSDPStrategy, AtomicModelParallelStrategy

    if run.strategy == "fsdp2":
        return AtomicModelParallelStrategy(data_parallel_size=run.world_size, tensor_parallel_size=1)
    if run.strategy == "fsdp":  # FSDP1: the module's configure_model wraps each block, then the GPT (wrap_gpt)
        return AtomicFSDPStrategy(use_orig_params=True, state_dict_type="sharded")
    return run.strategy


def _info(message: str) -> None:
    from lightning.pytorch.utilities.rank_zero import rank_zero_info

    rank_zero_info(f"[sparkling] {message}")


def pretrain(run: ResolvedRun, *, hparams_yaml: str = "", print_summary: bool = True,
             argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run a resolved configuration: build the data module, the :class:`~lightning_sparkling.module.
    LitGPTPretrainModule`, the callbacks and the ``Trainer``, fit (resuming when asked), validate at the end, export
    the litgpt ``final/`` dir, and print and write the summary.

    A Ctrl-C (or an exception in a training step) during the fit saves the Lightning checkpoint of the last
    completed optimizer step (single-process runs), writes ``summary.json`` with ``"status": "interrupted"`` (or
    ``"failed"``), the checkpoint and the command that resumes from it, and prints them.

    Args:
        run: the resolved configuration.
        hparams_yaml: the configuration as YAML (written next to every litgpt checkpoint).
        print_summary: print the end-of-run table.
        argv: the arguments after ``sparkling pretrain``, for the resume command (``None``: the command given uses
            ``--config out_dir/hparams.yaml``, ``hparams_yaml`` written there on an interruption).

    Returns:
        the summary (also written to ``out_dir/summary.json``); ``summary["status"]`` is ``"interrupted"`` after a
        Ctrl-C.

    Raises:
        Exception: what a training step raised, after the checkpoint and the summary are written.
    """
    import torch

    threads = torch.get_num_threads()
    try:
        return _pretrain(run, hparams_yaml=hparams_yaml, print_summary=print_summary, argv=argv)
    finally:
        torch.set_num_threads(threads)


def resume_command(argv: Sequence[str] | None, checkpoint: Path | str) -> str:
    """The shell command that resumes a ``sparkling pretrain`` run from ``checkpoint``: the same arguments (``argv``,
    those after ``sparkling pretrain``) with ``--resume`` replaced.

    Example::

        >>> resume_command(["--config", "my run.yaml", "--resume", "auto"], "out/checkpoints/step-00000170.ckpt")
        "sparkling pretrain --config 'my run.yaml' --resume out/checkpoints/step-00000170.ckpt"
    """
    args, skip = [], False
    for arg in argv or []:
        if skip:
            skip = False
            continue
        if arg == "--resume":
            skip = True
            continue
        if arg.startswith("--resume="):
            continue
        args.append(arg)
    return shlex.join(["sparkling", "pretrain", *args, "--resume", str(checkpoint)])


def _pretrain(run: ResolvedRun, *, hparams_yaml: str, print_summary: bool,
              argv: Sequence[str] | None) -> dict[str, Any]:
    """The body of :func:`pretrain`, one call per phase: announce the run, build the data module and the module,
    the callbacks, the logger and the Trainer, fit, settle the outcome, write the summary."""
    import lightning as L
    import torch

    from lightning_sparkling.pretrain import litgpt_compat

    start, started = time.perf_counter(), time.time()
    run.out_dir.mkdir(parents=True, exist_ok=True)
    _announce_run(run)
    if run.num_threads is not None:
        torch.set_num_threads(run.num_threads)
    L.seed_everything(run.seed, verbose=False)
    datamodule = build_datamodule(run)
    module = build_module(run)
    callbacks = _build_callbacks(run, datamodule, hparams_yaml)
    logger = litgpt_compat.make_logger(run)
    trainer = _build_trainer(run, callbacks.all, logger)
    failure = _fit(trainer, module, datamodule, run, callbacks.on_interrupt)
    status, resume_from = _settle_fit(trainer, module, datamodule, run, callbacks, failure, started)
    summary = _run_summary(run, trainer, module, callbacks, status, start)
    _write_outputs(run, trainer, summary, failure, resume_from, callbacks.on_interrupt, hparams_yaml, argv,
                   print_summary)
    if failure is not None and status == "failed":
        raise failure
    return summary


def _announce_run(run: ResolvedRun) -> None:
    """Log what the run is about to do: its notes, the model, steps and tokens, parameters and FLOPs of the growth
    plan (with the regime warning), the growth stages, and where the weights come from."""
    from lightning_sparkling.growth.compute import estimate_compute
    from lightning_sparkling.growth.plan import size_changes

    for note in run.notes:
        _info(note)
    _info(f"model: {_model_line(run.model_config)}")
    _info(f"{run.steps:,} steps x {run.tokens_per_step:,} tokens/step = {run.total_tokens:,} tokens; "
          f"micro_batch_size {run.micro_batch_size} x {run.world_size} device(s) x {run.accumulate} accumulation; "
          f"strategy {run.strategy}, precision {run.precision}, optimizer {run.optimizer_name} (lr {run.lr:g})")
    planned = estimate_compute(run.model_config, run.stages, total_steps=run.steps, tokens_per_step=run.tokens_per_step,
                               tie_embeddings=run.train.tie_embeddings)
    active = (f" (active {' -> '.join(f'{p:,}' for p in planned.active_params)})"
              if list(planned.active_params) != list(planned.total_params) else "")
    _info(f"parameters {' -> '.join(f'{p:,}' for p in planned.total_params)}{active}; training FLOPs (6 N D) "
          f"{_fmt_flops(planned.flops)}, {planned.flops_saved:.1%} fewer than the final width from scratch")
    if (advice := regime_advice(run, planned.active_params)) is not None:
        _info(advice.message() if advice.pays else f"warning: {advice.message()}")
    for k, s in enumerate(run.stages):
        changes = size_changes(planned.configs[k], planned.configs[k + 1])
        _info(f"growth stage {k}: at step {s.at_step}: " + ", ".join(f"{a} {o} -> {n}" for a, (o, n) in changes.items()))
    if run.resume_path is not None:
        _info(f"resuming from {run.resume_path}")
    elif run.initial_checkpoint_dir is not None:
        _info(f"starting from the weights of {run.initial_checkpoint_dir}")


@dataclasses.dataclass
class _RunCallbacks:
    """The callbacks of a CLI run: ``all`` in Trainer order, and those the run reads back after the fit.

    Attributes:
        all: every callback, in the order the Trainer runs them (``on_interrupt`` first).
        on_interrupt: the ``InterruptCheckpoint`` (the checkpoint written on Ctrl-C or a failed step).
        token_counter: the ``TokenCounter`` (tokens, FLOPs and per-step losses).
        tracker: the ``RunTracker`` (last validated step, fit time).
        growth: the ``WidthGrowthCallback``, ``None`` without growth stages.
    """

    all: list[Any]
    on_interrupt: Any
    token_counter: Any
    tracker: Any
    growth: Any | None


def _build_callbacks(run: ResolvedRun, datamodule: Any, hparams_yaml: str) -> _RunCallbacks:
    """The callbacks of ``run``: interrupt checkpoint, growth, activation RMS monitor, sample generation, token
    counter, litgpt export, run tracker, LR monitor, periodic Lightning checkpoints and the progress bar.

    Args:
        run: the resolved configuration.
        datamodule: the run's data module (its ``tokenizer_dir``, once prepared, goes next to exported checkpoints).
        hparams_yaml: the configuration as YAML (written next to every litgpt checkpoint).
    """
    from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint

    from lightning_sparkling.callbacks.growth import WidthGrowthCallback
    from lightning_sparkling.callbacks.rms_monitor import ActivationRMSMonitor
    from lightning_sparkling.pretrain import litgpt_compat

    cb = _callbacks_module()
    out_dir = run.out_dir
    token_counter = cb.TokenCounter(run.tokens_per_step, run.train.log_interval)
    tracker = cb.RunTracker()
    on_interrupt = cb.InterruptCheckpoint(out_dir / "checkpoints")
    callbacks: list[Any] = [on_interrupt]  # first: it records each step before another callback acts on it
    growth = None
    if run.stages:
        growth = WidthGrowthCallback(run.stages, min_lr=run.growth.min_lr, seed=run.growth.seed)
        callbacks.append(growth)
    if run.rms_monitor is not None:
        callbacks.append(ActivationRMSMonitor(every_n_steps=run.rms_monitor.every_n_steps,
                                              per_linear=run.rms_monitor.per_linear))
    tokenizer_dir = lambda: getattr(datamodule, "tokenizer_dir", None) or run.tokenizer_dir  # noqa: E731
    if run.eval.max_new_tokens:
        callbacks.append(litgpt_compat.SampleGeneration(tokenizer_dir(), run.eval.max_new_tokens,
                                                        run.eval.evaluate_example))
    exporter = cb.LitGPTExport(out_dir, run.train.save_interval, tokenizer_dir, hparams_yaml)
    keep = run.train.keep_last_checkpoints
    checkpoint = ModelCheckpoint(
        dirpath=out_dir / "checkpoints", filename="step-{step:08d}", auto_insert_metric_name=False,
        every_n_train_steps=run.train.save_interval or 0, save_top_k=-1 if keep is None else keep,
        monitor=None if keep is None else "step", mode="max", save_last=False, save_on_train_epoch_end=False,
        enable_version_counter=False,
    )
    callbacks += [token_counter, exporter, tracker, LearningRateMonitor(logging_interval="step"), checkpoint,
                  cb.StepProgressBar(run.tokens_per_step)]
    return _RunCallbacks(all=callbacks, on_interrupt=on_interrupt, token_counter=token_counter, tracker=tracker,
                         growth=growth)


def _build_trainer(run: ResolvedRun, callbacks: list[Any], logger: Any):
    """The ``lightning.Trainer`` of ``run``: devices, strategy, precision, steps, accumulation (the module's own
    under Muon), logging and validation intervals, ``max_time``; checkpoints written atomically
    (:class:`~lightning_sparkling.pretrain.checkpointing.AtomicCheckpointIO`)."""
    import lightning as L

    from lightning_sparkling.pretrain.checkpointing import AtomicCheckpointIO

    interval = run.eval.interval if run.eval.interval else run.steps + 1
    return L.Trainer(
        accelerator=run.accelerator, devices=run.num_devices, num_nodes=run.num_nodes, strategy=_strategy(run),
        precision=run.precision, max_steps=run.steps, accumulate_grad_batches=1 if run.uses_muon else run.accumulate,
        log_every_n_steps=run.train.log_interval, val_check_interval=interval * run.accumulate,
        check_val_every_n_epoch=None, limit_val_batches=run.eval.max_iters if run.eval.max_iters else 1.0,
        num_sanity_val_steps=0, logger=logger, callbacks=callbacks, default_root_dir=str(run.out_dir),
        enable_model_summary=False,  # it printed "Total FLOPs: 0": parameters and FLOPs are in the lines above
        max_time=None if run.train.max_time is None else {"seconds": float(run.train.max_time)},
        plugins=[AtomicCheckpointIO()],
    )


def _fit(trainer: Any, module: Any, datamodule: Any, run: ResolvedRun, on_interrupt: Any) -> BaseException | None:
    """Validate first when asked (fresh runs only), then fit (from ``run.resume_path`` when resuming).

    Returns:
        ``None`` when the fit returned; the ``KeyboardInterrupt`` of a Ctrl-C or the exception a training step
        raised otherwise (Ctrl-C is given back to the process either way).
    """
    if run.eval.initial_validation and run.resume_path is None:
        trainer.validate(module, datamodule=datamodule, verbose=False)
        # trainer.validate runs under inference_mode, leaving the metric's state as inference tensors that fit's
        # validation (under no_grad) cannot update in place: start it afresh
        module.val_loss.reset()
    failure: BaseException | None = None
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=str(run.resume_path) if run.resume_path else None)
    except SystemExit as err:  # Lightning's answer to Ctrl-C: on_exception hooks, teardown, sys.exit(1)
        if not isinstance(on_interrupt.exception, KeyboardInterrupt):
            raise
        failure = on_interrupt.exception
        err.__suppress_context__ = True
    except Exception as err:  # noqa: BLE001 - re-raised by _pretrain, after the checkpoint and summary
        failure = err
    finally:
        _restore_sigint()
    return failure


def _settle_fit(trainer: Any, module: Any, datamodule: Any, run: ResolvedRun, callbacks: _RunCallbacks,
                failure: BaseException | None, started: float) -> tuple[str, Path | None]:
    """The outcome of the fit: ``(status, resume_from)``. After a failure, the checkpoint to resume from (the
    interrupt checkpoint, else the newest periodic one of this run, else the one this run resumed from). After a
    completed fit, save the Lightning checkpoint of the last step and run the final validation when asked.

    Args:
        started: ``time.time()`` at the start of the run (older checkpoints are not this run's).
    """
    from lightning_sparkling.pretrain.config import find_resume_checkpoint

    out_dir = run.out_dir
    step = trainer.global_step
    status = "completed"
    resume_from: Path | None = None
    if failure is not None:
        status = "interrupted" if isinstance(failure, KeyboardInterrupt) else "failed"
        newest = find_resume_checkpoint(out_dir)  # a periodic one of this run (multi-process runs save none on exit)
        newest = newest if newest is not None and newest.stat().st_mtime >= started else None
        resume_from = callbacks.on_interrupt.path or newest or run.resume_path
    elif not trainer.interrupted:
        # Lightning's `.ckpt` of the last step (ModelCheckpoint saves only every save_interval): `resume` continues here
        last = out_dir / "checkpoints" / f"step-{step:08d}.ckpt"
        if not last.exists():
            trainer.save_checkpoint(last, weights_only=False)
        if run.eval.final_validation and callbacks.tracker.last_val_step != step:
            trainer.validate(module, datamodule=datamodule, verbose=False)
    return status, resume_from


def _run_summary(run: ResolvedRun, trainer: Any, module: Any, callbacks: _RunCallbacks, status: str,
                 start: float) -> dict[str, Any]:
    """The summary of the run (``summary.json`` without the failure keys): steps, tokens, FLOPs of the growth
    stages applied (``growth[k]["sizes"]``: every size the stage set, a named config's included), parameters, final
    sizes, losses, times, and where it started and ended.

    Args:
        start: ``time.perf_counter()`` at the start of the run.
    """
    from lightning_sparkling.growth.compute import estimate_compute
    from lightning_sparkling.growth.plan import size_changes
    from lightning_sparkling.growth.stage import SIZE_AXES

    out_dir = run.out_dir
    step = trainer.global_step
    token_counter, tracker, growth = callbacks.token_counter, callbacks.tracker, callbacks.growth
    applied = []
    if growth is not None:
        records = growth.state_dict()["records"]
        applied = [s for s, _ in zip(run.stages, records)]
    est = estimate_compute(run.model_config, applied, total_steps=max(step, applied[-1].at_step if applied else 0, 1),
                           tokens_per_step=run.tokens_per_step, tie_embeddings=run.train.tie_embeddings)
    metrics = trainer.callback_metrics

    def metric(name: str) -> float | None:
        value = metrics.get(name)
        return float(value) if value is not None else None

    last_losses = [v for s in range(max(0, step - 10), step) if (v := token_counter.step_loss(s)) is not None]
    fit_seconds = tracker.fit_seconds or (time.perf_counter() - tracker._t0 if tracker._t0 is not None else 0.0)
    return {
        "status": status, "out_dir": str(out_dir), "steps": step, "max_steps": run.steps,
        "tokens": step * run.tokens_per_step, "tokens_per_step": run.tokens_per_step,
        "flops": est.flops, "flops_from_scratch": est.flops_from_scratch, "flops_saved": est.flops_saved,
        "flops_logged": token_counter.flops,
        "active_params": list(est.active_params), "total_params": list(est.total_params),
        "phase_steps": list(est.phase_steps),
        "final_model_config": {k: getattr(module.model.config, k) for k in SIZE_AXES},
        "growth": [{"stage": k, "at_step": s.at_step, "widths": s.widths,
                    "sizes": {a: n for a, (_, n) in size_changes(est.configs[k], est.configs[k + 1]).items()}}
                   for k, s in enumerate(applied)],
        "growth_events": list(growth.summaries) if growth is not None else [],
        "train_loss": token_counter.step_loss(step - 1) if token_counter.step_loss(step - 1) is not None
        else metric("train_loss"),
        "train_loss_last10": sum(last_losses) / len(last_losses) if last_losses else None,
        "val_loss": metric("val_loss"), "val_ppl": metric("val_ppl"),
        "wall_clock_seconds": time.perf_counter() - start, "fit_seconds": fit_seconds,
        "resumed_from": str(run.resume_path) if run.resume_path else None,
        "initial_checkpoint_dir": str(run.initial_checkpoint_dir) if run.initial_checkpoint_dir else None,
        "final_dir": str(out_dir / "final") if status == "completed" else None,
        "interrupted": status != "completed" or bool(trainer.interrupted),
    }


def _write_outputs(run: ResolvedRun, trainer: Any, summary: dict[str, Any], failure: BaseException | None,
                   resume_from: Path | None, on_interrupt: Any, hparams_yaml: str, argv: Sequence[str] | None,
                   print_summary: bool) -> None:
    """Complete ``summary`` after a failure (error, checkpoint, resume command; ``out_dir/hparams.yaml`` when the
    command had no arguments to repeat), then on rank zero write ``out_dir/summary.json`` and print the table and
    the resume hint."""
    out_dir = run.out_dir
    if failure is not None and argv is None and resume_from is not None and trainer.is_global_zero:
        (out_dir / "hparams.yaml").write_text(hparams_yaml)
        argv = ["--config", str(out_dir / "hparams.yaml")]
    if failure is not None:
        status = summary["status"]
        summary["error"] = f"{type(failure).__name__}: {failure}" if status == "failed" else "KeyboardInterrupt"
        summary["checkpoint"] = str(resume_from) if resume_from is not None else None
        summary["checkpoint_step"] = on_interrupt.step if resume_from == on_interrupt.path else None
        summary["resume_command"] = resume_command(argv, resume_from) if resume_from is not None else None
    if trainer.is_global_zero:
        from lightning_sparkling.pretrain.checkpointing import atomic_save

        text = json.dumps(summary, indent=2, default=_json_default) + "\n"
        atomic_save(text, out_dir / "summary.json", write=lambda t, file: file.write(t.encode()))  # never half written
        if print_summary:
            print_summary_table(summary)
        if failure is not None:
            _print_resume_hint(summary)


def _restore_sigint() -> None:
    """Lightning ignores SIGINT while it shuts down after a Ctrl-C and leaves it so: give Ctrl-C back."""
    import threading

    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _print_resume_hint(summary: dict[str, Any]) -> None:
    what = "interrupted (Ctrl-C)" if summary["status"] == "interrupted" else f"failed ({summary['error']})"
    lines = [f"sparkling pretrain {what} after {summary['steps']:,} of {summary['max_steps']:,} steps; "
             f"summary: {summary['out_dir']}/summary.json"]
    if summary["resume_command"]:
        at = summary["checkpoint_step"]
        lines.append(f"checkpoint{f' of step {at:,}' if at is not None else ''}: {summary['checkpoint']}")
        lines.append(f"resume with: {summary['resume_command']}")
    else:
        lines.append("no checkpoint was written (no optimizer step finished): run the same command again")
    print("\n".join(lines), file=sys.stderr, flush=True)


def _json_default(value: Any) -> Any:
    if isinstance(value, set):
        return sorted(value)
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def print_summary_table(summary: dict[str, Any]) -> None:
    """The end-of-run table (rich)."""
    from rich.table import Table

    def loss(v: float | None) -> str:
        return "-" if v is None else f"{v:.4f}"

    table = Table(title="sparkling pretrain: summary", title_justify="left")
    table.add_column("", style="bold")
    table.add_column("value")
    growth = "; ".join(f"stage {g['stage']} at step {g['at_step']}: "
                       + ", ".join(f"{a} -> {n}" for a, n in g.get("sizes", g["widths"]).items())
                       for g in summary["growth"])
    rows = [
        ("steps", f"{summary['steps']:,}"),
        ("tokens", f"{summary['tokens']:,} ({_fmt_int(summary['tokens'])})"),
        ("growth", growth or "none"),
        ("parameters", " -> ".join(f"{p:,}" for p in summary["total_params"])),
        ("training FLOPs", _fmt_flops(summary["flops"])),
        ("from scratch (final width)", _fmt_flops(summary["flops_from_scratch"])),
        ("FLOPs saved", f"{summary['flops_saved']:.1%}"),
        ("final train loss", f"{loss(summary['train_loss'])} (last 10 steps: {loss(summary['train_loss_last10'])})"),
        ("final val loss / ppl", f"{loss(summary['val_loss'])} / "
                                 f"{'-' if summary['val_ppl'] is None else format(summary['val_ppl'], '.2f')}"),
        ("wall-clock", f"{summary['wall_clock_seconds']:.1f} s (fit {summary['fit_seconds']:.1f} s)"),
        ("litgpt checkpoint", summary["final_dir"] or "- (the run did not finish: no final/)"),
    ]
    if summary.get("status", "completed") != "completed":
        rows.insert(0, ("status", f"{summary['status']} after {summary['steps']:,} of {summary['max_steps']:,} steps"))
    for k, v in rows:
        table.add_row(k, v)
    _console().print(table)


# ------------------------------------------------------------------------------------------------------------ main
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sparkling`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    if argv[0] in ("-V", "--version"):
        from lightning_sparkling import __version__

        print(f"lightning-sparkling {__version__}")
        return 0
    command, rest = argv[0], argv[1:]
    if command == "plot":
        from lightning_sparkling.dashboards.plotting import main_plot

        return int(main_plot(rest) or 0)
    if command not in ("pretrain", "plan"):
        print(f"sparkling: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    _, run, dumped = parse(rest, command)
    if command == "plan":
        plan(run)
        return 0
    try:
        summary = pretrain(run, hparams_yaml=dumped, argv=rest)
    except KeyboardInterrupt:  # outside the fit (data preparation, final validation, export): nothing to save
        print("sparkling pretrain: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    finally:
        _shutdown_distributed()
    return 130 if summary.get("status") == "interrupted" else 0


def _shutdown_distributed() -> None:
    """Destroy the process groups while the interpreter is fully alive: gloo worker threads still holding tensors
    at interpreter exit can abort a finished multi-process run (exit code -6, pytorch/pytorch#179291)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
