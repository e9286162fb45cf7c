"""Building the Lightning ``Trainer`` of a ``sparkling pretrain`` run: its strategy (:func:`_strategy`: sharded
checkpoints written atomically), its callbacks in the order they must run (:func:`_build_callbacks`, returning the
:class:`_RunCallbacks` the run reads back after the fit) and the ``Trainer`` itself (:func:`_build_trainer`).

Nothing here imports Lightning at import time: the callback classes
(:mod:`~lightning_sparkling.pretrain.training.run_callbacks`) come through :func:`_callbacks_module`.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import types
import warnings
from collections.abc import Sequence
from typing import Any

from lightning_sparkling.pretrain.config.resolve import ResolvedRun


@functools.cache
def _callbacks_module() -> types.SimpleNamespace:
    """The callback classes of a CLI run, imported on first use (importing Lightning is slow and ``plan`` does not
    need it): ``TokenCounter``, ``LitGPTExport``, ``RunTracker``, ``StepProgressBar``, ``InterruptCheckpoint``,
    ``SampleGeneration``, ``RunCheckpoint`` (:mod:`~lightning_sparkling.pretrain.training.run_callbacks`),
    ``OldEntryLRMonitor`` (:mod:`~lightning_sparkling.pretrain.training.lightning_private`)."""
    from lightning_sparkling.pretrain.training import lightning_private as lp
    from lightning_sparkling.pretrain.training import run_callbacks as cb

    return types.SimpleNamespace(TokenCounter=cb.TokenCounter, LitGPTExport=cb.LitGPTExport, RunTracker=cb.RunTracker,
                                 StepProgressBar=lp.StepProgressBar, InterruptCheckpoint=cb.InterruptCheckpoint,
                                 SampleGeneration=cb.SampleGeneration, RunCheckpoint=cb.RunCheckpoint,
                                 OldEntryLRMonitor=lp.OldEntryLRMonitor)


#: Lightning's info lines a CLI run does not print: the device lines (the run's own announcement names the
#: accelerator) and its LitLogger / litmodels advertisements.
LIGHTNING_NOISE: tuple[str, ...] = ("GPU available: ", "TPU available: ", "\N{ELECTRIC LIGHT BULB} Tip: ")


class _DropLightningNoise(logging.Filter):
    """Drops the messages of :data:`LIGHTNING_NOISE` from Lightning's ``rank_zero_info`` logger; every other message
    of that logger (``Trainer.fit`` stopped, restored checkpoints, ...) passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(LIGHTNING_NOISE)


def quiet_lightning() -> None:
    """Filter the third-party noise of a CLI run at its source, narrowly: the :data:`LIGHTNING_NOISE` lines of
    ``lightning.pytorch.utilities.rank_zero`` (a filter on that logger, not its level) and the ``FutureWarning`` that
    ``lightning.pytorch.utilities._pytree`` triggers in torch's ``LeafSpec`` (by message and module). Idempotent;
    only the CLI calls it, a user's own Trainer is left as it is."""
    log = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    if not any(isinstance(f, _DropLightningNoise) for f in log.filters):
        log.addFilter(_DropLightningNoise())
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated",
                            category=FutureWarning, module=r"lightning\.pytorch\.utilities\._pytree")


def _strategy(run: ResolvedRun):
    """The Lightning strategy of ``run``: the one its growth backend makes (the registry's entry for the CLI value:
    :meth:`~lightning_sparkling.parallel.base.BaseBackend.make_strategy`; ``auto`` is Lightning's own), with its sharded
    checkpoint directories written atomically
    (:func:`~lightning_sparkling.pretrain.model.checkpointing.atomic_strategy`).

    Example::

        run.strategy, run.world_size = "fsdp2", 2
        _strategy(run)  # AtomicModelParallelStrategy(data_parallel_size=2, tensor_parallel_size=1)
    """
    from lightning_sparkling.parallel.registry import backend_class, cli_backend
    from lightning_sparkling.pretrain.model.checkpointing import atomic_strategy

    entry = cli_backend(run.strategy)
    if entry is None:  # auto
        return run.strategy
    return atomic_strategy(backend_class(entry).make_strategy(run.world_size))


@dataclasses.dataclass
class _RunCallbacks:
    """The callbacks of a CLI run: ``all`` in Trainer order, and those the run reads back after the fit.

    Attributes:
        all: every callback, in the order the Trainer runs them (``on_interrupt`` first).
        on_interrupt: the ``InterruptCheckpoint`` (the checkpoint written on Ctrl-C or a failed step).
        token_counter: the ``TokenCounter`` (tokens, FLOPs and per-step losses).
        tracker: the ``RunTracker`` (last validated step, fit time).
        growth: the ``GrowthCallback``, ``None`` without growth stages.
    """

    all: list[Any]
    on_interrupt: Any
    token_counter: Any
    tracker: Any
    growth: Any | None


def _build_callbacks(run: ResolvedRun, datamodule: Any, hparams_yaml: str,
                     plans: Sequence[Any] | None = None) -> _RunCallbacks:
    """The callbacks of ``run``: interrupt checkpoint, throughput and MFU (before the growth, which changes the FLOPs
    of the batches after it), growth, activation RMS monitor, sample generation, token counter, litgpt export, run
    tracker, LR monitor, periodic Lightning checkpoints and the progress bar.

    Args:
        run: the resolved configuration.
        datamodule: the run's data module (its ``tokenizer_dir``, once prepared, goes next to exported checkpoints).
        hparams_yaml: the configuration as YAML (written next to every litgpt checkpoint).
        plans: each stage's ``GrowthPlan`` (the run plan's,
            :attr:`~lightning_sparkling.pretrain.advice.run_plan.RunPlan.plans`): the growth callback applies them
            where they fit the model instead of planning the stages again; ``None``: it plans them.
    """
    from lightning_sparkling.callbacks.growth import GrowthCallback
    from lightning_sparkling.callbacks.rms_monitor import ActivationRMSMonitor
    from lightning_sparkling.callbacks.throughput import TokenThroughputMonitor

    cb = _callbacks_module()
    out_dir = run.out_dir
    token_counter = cb.TokenCounter(run.tokens_per_step, run.train.log_interval)
    tracker = cb.RunTracker()
    on_interrupt = cb.InterruptCheckpoint(out_dir / "checkpoints")
    callbacks: list[Any] = [on_interrupt]  # first: it records each step before another callback acts on it
    callbacks.append(TokenThroughputMonitor(window_size=max(2, 5 * run.accumulate)))
    growth = None
    if run.stages:
        growth = GrowthCallback(run.stages, min_lr=run.growth.min_lr, seed=run.growth.seed, plans=plans)
        callbacks.append(growth)
    if run.rms_monitor is not None:
        callbacks.append(ActivationRMSMonitor(every_n_steps=run.rms_monitor.every_n_steps,
                                              per_linear=run.rms_monitor.per_linear))
    tokenizer_dir = lambda: getattr(datamodule, "tokenizer_dir", None) or run.tokenizer_dir
    if run.eval.max_new_tokens:
        callbacks.append(cb.SampleGeneration(tokenizer_dir(), run.eval.max_new_tokens, run.eval.evaluate_example))
    exporter = cb.LitGPTExport(out_dir, run.train.save_interval, tokenizer_dir, hparams_yaml)
    keep = run.train.keep_last_checkpoints
    checkpoint = cb.RunCheckpoint(
        dirpath=out_dir / "checkpoints", filename="step-{step:08d}", auto_insert_metric_name=False,
        every_n_train_steps=run.train.save_interval or 0, save_top_k=-1 if keep is None else keep,
        monitor=None if keep is None else "step", mode="max", save_last=False, save_on_train_epoch_end=False,
        enable_version_counter=False, resuming=run.resume_path is not None,
    )
    callbacks += [token_counter, exporter, tracker, cb.OldEntryLRMonitor(logging_interval="step"), checkpoint,
                  cb.StepProgressBar(run.tokens_per_step)]
    return _RunCallbacks(all=callbacks, on_interrupt=on_interrupt, token_counter=token_counter, tracker=tracker,
                         growth=growth)


def _build_trainer(run: ResolvedRun, callbacks: list[Any], logger: Any):
    """The ``lightning.Trainer`` of ``run``: devices, strategy, precision, steps, accumulation (the module's own
    under Muon), logging and validation intervals, ``max_time``; checkpoints written atomically
    (:class:`~lightning_sparkling.pretrain.model.checkpointing.AtomicCheckpointIO`)."""
    import lightning as L

    from lightning_sparkling.pretrain.model.checkpointing import AtomicCheckpointIO

    quiet_lightning()
    interval = run.eval.interval if run.eval.interval else run.steps + 1
    return L.Trainer(
        accelerator=run.accelerator, devices=run.num_devices, num_nodes=run.num_nodes, strategy=_strategy(run),
        # precision: one of PRECISIONS (checked by resolve); max_time: Lightning builds timedelta(**it), floats too
        precision=run.precision,  # type: ignore[arg-type]
        max_steps=run.steps, accumulate_grad_batches=1 if run.uses_muon else run.accumulate,
        log_every_n_steps=run.train.log_interval, val_check_interval=interval * run.accumulate,
        check_val_every_n_epoch=None, limit_val_batches=run.eval.max_iters if run.eval.max_iters else 1.0,
        num_sanity_val_steps=0, logger=logger, callbacks=callbacks, default_root_dir=str(run.out_dir),
        enable_model_summary=False,  # it printed "Total FLOPs: 0": parameters and FLOPs are in the lines above
        max_time=None if run.train.max_time is None else {"seconds": float(run.train.max_time)},  # type: ignore[dict-item]
        plugins=[AtomicCheckpointIO()],
    )
