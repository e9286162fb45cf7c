"""``sparkling pretrain``: running a resolved configuration (:func:`pretrain`), one call per phase
(:func:`_pretrain`): announce the run, build the data module (:func:`build_datamodule`) and the module
(:func:`build_module`), the callbacks, logger and ``Trainer`` (:mod:`~lightning_sparkling.pretrain.training.trainer`),
fit (:func:`_fit`: Ctrl-C and failures captured), settle the outcome (:func:`_settle_fit`) and write the summary
(:mod:`~lightning_sparkling.pretrain.training.summary`). The run's plan (stages planned, phases, compute, advice) is
computed once (:func:`~lightning_sparkling.pretrain.advice.run_plan.plan_run`) and read by the announcement, the
growth callback and the summary.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning_sparkling.pretrain.config import litgpt_compat
from lightning_sparkling.pretrain.data import litgpt_data
from lightning_sparkling.pretrain.config.resolve import ResolvedRun
from lightning_sparkling.pretrain.formatting import _fmt_flops, _info, _model_line
from lightning_sparkling.pretrain.advice.run_plan import RunPlan, plan_run
from lightning_sparkling.pretrain.config.resume import find_resume_checkpoint
from lightning_sparkling.pretrain.training.summary import _run_summary, _write_outputs
from lightning_sparkling.pretrain.training.trainer import _build_callbacks, _build_trainer, _RunCallbacks

__all__ = ["build_datamodule", "build_module", "pretrain"]


def pretrain(run: ResolvedRun, *, hparams_yaml: str = "", print_summary: bool = True,
             argv: Sequence[str] | None = None, run_plan: RunPlan | None = None) -> dict[str, Any]:
    """Run a resolved configuration: build the data module, the
    :class:`~lightning_sparkling.pretrain.training.module.LitGPTPretrainModule`, the callbacks and the ``Trainer``, fit
    (resuming when asked), validate at the end, export the litgpt ``final/`` dir, and print and write the summary.

    A Ctrl-C (or an exception in a training step) during the fit saves the Lightning checkpoint of the last
    completed optimizer step (single-process runs), writes ``summary.json`` with ``"status": "interrupted"`` (or
    ``"failed"``), the checkpoint and the command that resumes from it, and prints them.

    Args:
        run: the resolved configuration.
        hparams_yaml: the configuration as YAML (written next to every litgpt checkpoint).
        print_summary: print the end-of-run table.
        argv: the arguments after ``sparkling pretrain``, for the resume command (``None``: the command given uses
            ``--config out_dir/hparams.yaml``, ``hparams_yaml`` written there on an interruption).
        run_plan: the run's plan when the caller has it; ``None``: planned here, once
            (:func:`~lightning_sparkling.pretrain.advice.run_plan.plan_run`, the package's measured map).

    Returns:
        the summary (also written to ``out_dir/summary.json``); ``summary["status"]`` is ``"interrupted"`` after a
        Ctrl-C.

    Raises:
        Exception: what a training step raised, after the checkpoint and the summary are written.
    """
    import torch

    threads = torch.get_num_threads()
    try:
        return _pretrain(run, run_plan if run_plan is not None else plan_run(run), hparams_yaml=hparams_yaml,
                         print_summary=print_summary, argv=argv)
    finally:
        torch.set_num_threads(threads)


def _pretrain(run: ResolvedRun, run_plan: RunPlan, *, hparams_yaml: str, print_summary: bool,
              argv: Sequence[str] | None) -> dict[str, Any]:
    """The body of :func:`pretrain`, one call per phase: announce the run, build the data module and the module,
    the callbacks (the growth callback gets ``run_plan``'s stage plans), the logger and the Trainer, fit, settle the
    outcome, write the summary (the compute of what ran, from ``run_plan``)."""
    import lightning as L
    import torch

    start, started = time.perf_counter(), time.time()
    run.out_dir.mkdir(parents=True, exist_ok=True)
    _announce_run(run, run_plan)
    if run.num_threads is not None:
        torch.set_num_threads(run.num_threads)
    L.seed_everything(run.seed, verbose=False)
    datamodule = build_datamodule(run)
    module = build_module(run)
    callbacks = _build_callbacks(run, datamodule, hparams_yaml, plans=run_plan.plans)
    logger = litgpt_compat.make_logger(run)
    trainer = _build_trainer(run, callbacks.all, logger)
    failure = _fit(trainer, module, datamodule, run, callbacks.on_interrupt)
    status, resume_from = _settle_fit(trainer, module, datamodule, run, callbacks, failure, started)
    summary = _run_summary(run, run_plan, trainer, module, callbacks, status, start)
    _write_outputs(run, trainer, summary, failure, resume_from, callbacks.on_interrupt, hparams_yaml, argv,
                   print_summary)
    if failure is not None and status == "failed":
        raise failure
    return summary


def _announce_run(run: ResolvedRun, run_plan: RunPlan) -> None:
    """Log what the run is about to do: its notes, the model, steps and tokens, parameters and FLOPs of the growth
    plan (with the regime warning), the growth stages, and where the weights come from (all of the plan from
    ``run_plan``)."""
    for note in run.notes:
        _info(note)
    _info(f"model: {_model_line(run.model_config)}")
    _info(f"{run.steps:,} steps x {run.tokens_per_step:,} tokens/step = {run.total_tokens:,} tokens; "
          f"micro_batch_size {run.micro_batch_size} x {run.world_size} device(s) x {run.accumulate} accumulation; "
          f"strategy {run.strategy}, precision {run.precision}, optimizer {run.optimizer_name} (lr {run.lr:g})"
          + ((", compiled" + (" per block" if run.compile_scope == "blocks" else "")) if run.compile else "")
          + (", activation checkpointing" if run.activation_checkpointing else ""))
    planned = run_plan.compute
    active = (f" (active {' -> '.join(f'{p:,}' for p in planned.active_params)})"
              if list(planned.active_params) != list(planned.total_params) else "")
    _info(f"parameters {' -> '.join(f'{p:,}' for p in planned.total_params)}{active}; training FLOPs (6 N D) "
          f"{_fmt_flops(planned.flops)}, {planned.flops_saved:.1%} fewer than the final width from scratch")
    if (advice := run_plan.advice) is not None:
        _info(advice.message() if advice.pays else f"warning: {advice.message()}")
    for k, (s, changes) in enumerate(zip(run.stages, run_plan.sizes)):
        _info(f"growth stage {k}: at step {s.at_step}: "
              + ", ".join(f"{a} {o} -> {n}" for a, (o, n) in changes.items()))
    if run.resume_path is not None:
        _info(f"resuming from {run.resume_path}")
    elif run.initial_checkpoint_dir is not None:
        _info(f"starting from the weights of {run.initial_checkpoint_dir}")


# ------------------------------------------------------------------------------------------------------------ build
def build_datamodule(run: ResolvedRun):
    """The data module of ``run`` (nothing is read or trained until ``prepare_data``). With ``eval.max_iters`` it
    validates on ``max_iters`` batches per rank of windows spread over the whole validation split (a fixed, seeded
    sample: the same windows at every evaluation and on resume), not on the split's first batches."""
    from lightning_sparkling.pretrain.data.datamodule import TextCorpusDataModule

    if run.litgpt_data:  # data.class_path: a litgpt data module, connect()-ed as litgpt pretrain does
        return litgpt_data.build_litgpt_datamodule(run)
    d = run.data
    val_windows = run.eval.max_iters * run.micro_batch_size * run.world_size if run.eval.max_iters else None
    kwargs: dict[str, Any]
    kwargs = dict(seq_len=run.seq_len, batch_size=run.micro_batch_size, source=d.source, data_dir=d.data_dir,
                  include_tests=d.include_tests, vocab_size=d.vocab_size, val_percent=d.val_percent,
                  seed=run.seed if d.seed is None else d.seed, cache_dir=d.cache_dir, max_files=d.max_files,
                  max_bytes=d.max_bytes, num_workers=d.num_workers, tokenizer_dir=run.tokenizer_dir,
                  val_windows=val_windows)
    return TextCorpusDataModule(**kwargs)


def build_module(run: ResolvedRun):
    """The :class:`~lightning_sparkling.pretrain.training.module.LitGPTPretrainModule` of ``run``, holding the weights
    of ``initial_checkpoint_dir`` when one is given (litgpt's init otherwise)."""
    from lightning_sparkling.pretrain.training.module import LitGPTPretrainModule

    assert run.train.tie_embeddings is not None and run.train.lr_decay_shape is not None  # resolve() sets both
    module = LitGPTPretrainModule(
        run.model_config, run.optimizer, max_steps=run.steps, lr_warmup_steps=run.train.lr_warmup_steps,
        lr_warmup_fraction=run.train.lr_warmup_fraction, min_lr=run.train.min_lr, max_norm=run.train.max_norm,
        tie_embeddings=run.train.tie_embeddings, seed=run.seed,
        accumulate_grad_batches=run.accumulate if run.uses_muon else 1, lr_schedule=run.train.lr_schedule,
        lr_decay_fraction=run.train.lr_decay_fraction, lr_decay_shape=run.train.lr_decay_shape,
        compile=run.compile, compile_scope=run.compile_scope, activation_checkpointing=run.activation_checkpointing,
    )
    if run.initial_weights is not None:
        litgpt_compat.load_initial_weights(module.model, run.initial_weights)
    return module


# ------------------------------------------------------------------------------------------------------------ fit
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
    except Exception as err:
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


def _restore_sigint() -> None:
    """Lightning ignores SIGINT while it shuts down after a Ctrl-C and leaves it so: give Ctrl-C back."""
    import threading

    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
