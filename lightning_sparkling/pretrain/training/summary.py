"""The end of a ``sparkling pretrain`` run: its summary (:func:`_run_summary`: steps, tokens, FLOPs, growth stages
applied, parameters, losses, times), written to ``out_dir/summary.json`` and printed as a table
(:func:`_write_outputs`, :func:`print_summary_table`), and after a Ctrl-C or a failure the checkpoint and the command
that resumes from it (:func:`resume_command`, :func:`_print_resume_hint`).
"""

from __future__ import annotations

import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightning_sparkling.pretrain.config.resolve import ResolvedRun
from lightning_sparkling.pretrain.formatting import _console, _fmt_flops, _fmt_int

if TYPE_CHECKING:
    from lightning_sparkling.pretrain.advice.run_plan import RunPlan
    from lightning_sparkling.pretrain.training.trainer import _RunCallbacks

__all__ = ["print_summary_table", "resume_command"]


def _run_summary(run: ResolvedRun, run_plan: RunPlan, trainer: Any, module: Any, callbacks: _RunCallbacks, status: str,
                 start: float) -> dict[str, Any]:
    """The summary of the run (``summary.json`` without the failure keys): steps, tokens, FLOPs of the growth
    stages applied (``growth[k]["sizes"]``: every size the stage set, a named config's included), parameters, final
    sizes, losses, times, and where it started and ended. The FLOPs, parameters and sizes are ``run_plan``'s, as far
    as the run went (:meth:`~lightning_sparkling.pretrain.advice.run_plan.RunPlan.compute_until`).

    Args:
        start: ``time.perf_counter()`` at the start of the run.
    """
    from lightning_sparkling.growth.stage import SIZE_KEYS

    out_dir = run.out_dir
    step = trainer.global_step
    token_counter, tracker, growth = callbacks.token_counter, callbacks.tracker, callbacks.growth
    applied = len(growth.state_dict()["records"]) if growth is not None else 0
    est = run_plan.compute_until(step, applied)
    fit_seconds = tracker.fit_seconds or (time.perf_counter() - tracker._t0 if tracker._t0 is not None else 0.0)
    return {
        "status": status, "out_dir": str(out_dir), "steps": step, "max_steps": run.steps,
        "tokens": step * run.tokens_per_step, "tokens_per_step": run.tokens_per_step,
        "flops": est.flops, "flops_from_scratch": est.flops_from_scratch, "flops_saved": est.flops_saved,
        "flops_logged": token_counter.flops,
        "active_params": list(est.active_params), "total_params": list(est.total_params),
        "phase_steps": list(est.phase_steps),
        "final_model_config": {k: getattr(module.model.config, k) for k in SIZE_KEYS},
        "growth": _growth_summary(run.stages[:applied], run_plan.sizes),
        "growth_events": list(growth.summaries) if growth is not None else [],
        **_losses(token_counter, trainer.callback_metrics, step),
        "wall_clock_seconds": time.perf_counter() - start, "fit_seconds": fit_seconds,
        "steady_seconds": tracker.steady_seconds(est.phase_steps),
        "resumed_from": str(run.resume_path) if run.resume_path else None,
        "initial_checkpoint_dir": str(run.initial_checkpoint_dir) if run.initial_checkpoint_dir else None,
        "final_dir": str(out_dir / "final") if status == "completed" else None,
        "interrupted": status != "completed" or bool(trainer.interrupted),
    }


def _growth_summary(applied: Sequence[Any], sizes: Sequence[dict[str, tuple[int, int]]]) -> list[dict[str, Any]]:
    """``summary["growth"]``: each applied stage's step, widths and every size it set (``sizes``: each stage's size
    changes, the run plan's)."""
    return [{"stage": k, "at_step": s.at_step, "widths": s.widths, "sizes": {a: n for a, (_, n) in sizes[k].items()}}
            for k, s in enumerate(applied)]


def _losses(token_counter: Any, metrics: Any, step: int) -> dict[str, float | None]:
    """``train_loss`` (of the last step), ``train_loss_last10`` (mean of the last 10 steps), ``val_loss`` and
    ``val_ppl`` (the last validation's) of the summary."""

    def metric(name: str) -> float | None:
        value = metrics.get(name)
        return float(value) if value is not None else None

    last_losses = [v for s in range(max(0, step - 10), step) if (v := token_counter.step_loss(s)) is not None]
    return {
        "train_loss": token_counter.step_loss(step - 1) if token_counter.step_loss(step - 1) is not None
        else metric("train_loss"),
        "train_loss_last10": sum(last_losses) / len(last_losses) if last_losses else None,
        "val_loss": metric("val_loss"), "val_ppl": metric("val_ppl"),
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
        from lightning_sparkling.pretrain.model.checkpointing import atomic_save

        text = json.dumps(summary, indent=2, default=_json_default) + "\n"
        atomic_save(text, out_dir / "summary.json", write=lambda t, file: file.write(t.encode()))  # never half written
        if print_summary:
            print_summary_table(summary)
        if failure is not None:
            _print_resume_hint(summary)


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
        covers = f" (covers the {summary['steps']:,} of {summary['max_steps']:,} steps run)"
        rows = [(k, v + covers if k in ("training FLOPs", "FLOPs saved", "final val loss / ppl") else v)
                for k, v in rows]
        rows.insert(0, ("status", f"{summary['status']} after {summary['steps']:,} of {summary['max_steps']:,} steps"))
    for k, v in rows:
        table.add_row(k, v)
    _console().print(table)
