"""The Lightning callbacks of a ``sparkling pretrain`` run (built by
:func:`~lightning_sparkling.pretrain.training.trainer._build_callbacks`): the tokens and FLOPs counter
(:class:`TokenCounter`), the litgpt checkpoint dirs (:class:`LitGPTExport`), the fit's clock and last validation
(:class:`RunTracker`), the checkpoint of a Ctrl-C
or a failed step (:class:`InterruptCheckpoint`) and the sample generated after each evaluation
(:class:`SampleGeneration`, litgpt's ``eval.max_new_tokens``).

This module imports Lightning, which is slow: the CLI imports it only once a run starts (``sparkling plan`` never
does), through :func:`~lightning_sparkling.pretrain.training.trainer._callbacks_module`.
"""

from __future__ import annotations

import copy
import signal
import statistics
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import ModelCheckpoint
from typing_extensions import override

from lightning_sparkling.growth.compute import active_parameter_count
from lightning_sparkling.pretrain.formatting import _info

__all__ = ["DIR_NOT_EMPTY", "InterruptCheckpoint", "LitGPTExport", "RunCheckpoint", "RunTracker", "SampleGeneration",
           "TokenCounter"]

DIR_NOT_EMPTY = r"Checkpoint directory .* exists and is not empty"
"""The warning ``ModelCheckpoint.setup`` gives for a directory that holds files (:class:`RunCheckpoint`)."""


class TokenCounter(pl.Callback):
    """Logs ``tokens`` (cumulative tokens seen) and ``flops`` (cumulative training FLOPs, the paper's ``6 * active
    params * tokens`` of the model that took each step, so it follows growth) every ``log_interval`` optimizer steps.
    Checkpointed, so a resumed run continues the counts. Tokens/s is ``TokenThroughputMonitor``'s
    ``train/device/items_per_sec``."""

    def __init__(self, tokens_per_step: int, log_interval: int) -> None:
        self.tokens_per_step = int(tokens_per_step)
        self.log_interval = int(log_interval)
        self.flops = 0.0
        self.step = 0
        self._active: int | None = None
        self._key: tuple | None = None
        self.train_losses: dict[int, list[float]] = {}

    @override
    def state_dict(self) -> dict[str, Any]:
        return {"flops": self.flops, "step": self.step}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.flops = float(state_dict["flops"])
        self.step = int(state_dict["step"])

    def _active_params(self, pl_module) -> int:
        model = pl_module.model
        key = (id(model), id(model.config))
        if key != self._key or self._active is None:
            self._active, self._key = active_parameter_count(model), key
        return self._active

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:  # the model of this step (growth happens between steps)
            self._step_active = self._active_params(pl_module)

    @override
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

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if (self.save_interval and step > 0 and step % self.save_interval == 0 and step != self._last_saved):
            self._last_saved = step
            self.export(trainer, pl_module, self.out_dir / f"step-{step:08d}")

    @override
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
            from lightning_sparkling.pretrain.model.checkpointing import atomic_save

            atomic_save(state, folder / "lit_model.pth")  # a kill mid-export leaves no half-written weights
            tokenizer_dir = self.tokenizer_dir_fn()
            if tokenizer_dir is not None:  # (a litgpt data module of pre-tokenized data may have none)
                copy_config_files(Path(tokenizer_dir), folder)
            save_config(model.config, folder)  # after the copy: a tokenizer_dir may hold another model_config
            (folder / "hyperparameters.yaml").write_text(self.hparams_yaml)
            self.written.append(folder)
        trainer.strategy.barrier("sparkling-export")


class RunTracker(pl.Callback):
    """Remembers the step of the last validation, the fit's wall-clock, and each optimizer step's wall-clock per
    model phase (``steady_seconds``: the median step time of each phase times its steps, so that evaluations,
    checkpoints, the growth itself, compilation and passing spikes of load do not count; a time to compare runs by,
    where the fit's seconds also count what ran beside them)."""

    def __init__(self) -> None:
        self.last_val_step: int | None = None
        self.fit_seconds = 0.0
        self._t0: float | None = None
        self._last: tuple[int, float] | None = None  # (global step, time) of the last step's end
        self.phase_step_seconds: dict[int, list[float]] = {}  # the model config's id -> step times

    @override
    def on_validation_end(self, trainer, pl_module) -> None:
        if not trainer.sanity_checking:
            self.last_val_step = trainer.global_step
            self._last = None  # the next step's time would include the validation

    @override
    def on_train_start(self, trainer, pl_module) -> None:
        self._t0 = time.perf_counter()
        self._last = None

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        now, step = time.perf_counter(), trainer.global_step
        if self._last is not None and step == self._last[0] + 1:
            # a growth builds a new litgpt Config: its identity marks the phase, without a pass over the parameters
            phase = id(getattr(getattr(pl_module, "model", None), "config", pl_module))
            self.phase_step_seconds.setdefault(phase, []).append(now - self._last[1])
        if self._last is None or step != self._last[0]:
            self._last = (step, now)

    @override
    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        self._last = None  # the next step's time would include the save

    @override
    def on_train_end(self, trainer, pl_module) -> None:
        if self._t0 is not None:
            self.fit_seconds = time.perf_counter() - self._t0

    def steady_seconds(self, steps_per_phase: Sequence[int]) -> float | None:
        """Seconds of ``steps_per_phase`` optimizer steps (one count per model phase, in order) at each phase's
        median step time, or ``None`` when a phase has no timed step.

        Example::

            >>> tracker = RunTracker()
            >>> tracker.phase_step_seconds = {100: [0.1, 0.1, 0.9], 400: [0.3, 0.3]}
            >>> round(tracker.steady_seconds([10, 5]), 6)
            2.5
        """
        medians = [statistics.median(v) for v in self.phase_step_seconds.values()]
        if len(medians) != len(steps_per_phase) or not medians:
            return None
        return sum(m * n for m, n in zip(medians, steps_per_phase))


class RunCheckpoint(ModelCheckpoint):
    """Lightning's ``ModelCheckpoint`` for a run that may resume from its own checkpoint directory.

    Lightning warns "Checkpoint directory ... exists and is not empty" whenever a fit starts with files there; a
    resumed run starts from one of those files, so the directory is meant to hold them. With ``resuming=True`` that
    check is not made; a fresh run over an earlier run's checkpoints still gets Lightning's warning.

    Args:
        resuming: whether this fit resumes from a checkpoint (of this directory, as ``resume: auto`` finds them).
        *args, **kwargs: ``ModelCheckpoint``'s.
    """

    def __init__(self, *args: Any, resuming: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.resuming = resuming

    @override
    @override
    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        with warnings.catch_warnings():
            if self.resuming:  # the directory holds the checkpoint this fit resumes from: no warning
                warnings.filterwarnings("ignore", message=DIR_NOT_EMPTY)
            super().setup(trainer, pl_module, stage)


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

    @override
    def on_train_start(self, trainer, pl_module) -> None:
        import threading

        self._start_step = trainer.global_step
        if trainer.world_size == 1 and threading.current_thread() is threading.main_thread():
            self._previous_sigint = signal.signal(signal.SIGINT, self._on_sigint)
            self._handler_installed = True

    @override
    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._in_step = False
        self._raise_if_pending()
        self._in_step = True

    @override
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        if step != self._start_step and (self._boundary is None or self._boundary[0] != step):
            datamodule = trainer.datamodule
            self._boundary = (step, copy.deepcopy(trainer.fit_loop.state_dict()),
                              copy.deepcopy(datamodule.state_dict()) if datamodule is not None else None)

    @override
    def on_validation_start(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        self._in_step = False
        self._raise_if_pending()

    @override
    def on_train_end(self, trainer, pl_module) -> None:
        self._in_step = False
        self._restore_handler()
        self._raise_if_pending()

    @override
    def teardown(self, trainer, pl_module, stage: str) -> None:
        self._restore_handler()

    @override
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
            except Exception as err:
                _info(f"could not save a checkpoint of step {step} ({type(err).__name__}: {err})")
                return
            finally:
                self._saving = False
        self.path, self.step = path, step

    @override
    def on_save_checkpoint(self, trainer, pl_module, checkpoint: dict[str, Any]) -> None:
        if not self._saving:
            return
        assert self._boundary is not None  # _saving: a boundary was taken
        _, loops, data_state = self._boundary
        checkpoint["loops"]["fit_loop"] = loops
        datamodule = trainer.datamodule
        if data_state is not None and datamodule.__class__.__qualname__ in checkpoint:
            checkpoint[datamodule.__class__.__qualname__] = data_state


class SampleGeneration(pl.Callback):
    """After each evaluation, greedily continue a validation prompt by ``max_new_tokens`` tokens (litgpt's
    ``eval.max_new_tokens`` / ``eval.evaluate_example``), print the text and log it (TensorBoard ``text`` tag
    ``sample``). The prompt is the first half (at most 32 tokens) of the chosen validation sequence: ``first``,
    ``random`` (seeded by the step: no global RNG is used, so resumed runs stay exact) or an index into the
    sequences of that evaluation. Greedy decoding runs on every rank (an FSDP-sharded forward needs them all)
    and gives the same text everywhere; rank zero prints it.

    Attributes:
        samples: ``(step, prompt text, generated text)`` of each evaluation.
    """

    def __init__(self, tokenizer_dir: Path, max_new_tokens: int, evaluate_example: str | int = "first") -> None:
        self.tokenizer_dir = Path(tokenizer_dir)
        self.max_new_tokens = int(max_new_tokens)
        self.evaluate_example = evaluate_example
        self.samples: list[tuple[int, str, str]] = []
        self._rows: list[Any] = []
        self._tokenizer: Any = None  # a litgpt Tokenizer, loaded at the first sample

    @override
    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        self._rows = []

    @override
    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        import torch

        if isinstance(batch, torch.Tensor) and batch.ndim == 2:
            self._rows.extend(batch.detach().to("cpu").unbind(0))

    def _pick(self, step: int):
        import torch

        rows = self._rows
        if not rows:
            return None
        choice = self.evaluate_example
        if choice == "first":
            return rows[0]
        if choice == "random":
            g = torch.Generator().manual_seed(step)
            return rows[int(torch.randint(len(rows), (1,), generator=g))]
        return rows[int(choice) % len(rows)]

    @override
    def on_validation_end(self, trainer, pl_module) -> None:
        if trainer.sanity_checking:
            return
        row = self._pick(trainer.global_step)
        if row is None:
            return
        if self._tokenizer is None:
            from litgpt.tokenizer import Tokenizer

            self._tokenizer = Tokenizer(self.tokenizer_dir)
        ids = row[: max(1, min(32, row.numel() // 2))].long().to(pl_module.device)
        prompt_len = ids.numel()
        ids = self._continue(pl_module.model, ids).to("cpu")
        prompt, text = self._tokenizer.decode(ids[:prompt_len]), self._tokenizer.decode(ids[prompt_len:])
        step = trainer.global_step
        self.samples.append((step, prompt, text))
        if trainer.is_global_zero:
            self._publish(trainer, step, prompt, text)

    def _continue(self, model: Any, ids: Any) -> Any:
        """``ids`` followed by ``max_new_tokens`` greedy tokens of ``model`` (in eval mode, its mode restored)."""
        import torch

        block = int(model.config.block_size)
        was_training = model.training
        model.eval()
        from lightning_sparkling.parallel.compile import eager

        with torch.no_grad(), eager():  # a compiled model: no graph per prompt length
            for _ in range(self.max_new_tokens):
                logits = model(ids[-block:].unsqueeze(0))
                ids = torch.cat([ids, logits[0, -1].float().argmax().reshape(1)])
        model.train(was_training)
        return ids

    @staticmethod
    def _publish(trainer: Any, step: int, prompt: str, text: str) -> None:
        """Print the sample and log it to every logger that takes text (TensorBoard's ``sample`` tag)."""
        from lightning.pytorch.utilities.rank_zero import rank_zero_info

        rank_zero_info(f"[sparkling] sample at step {step}: {prompt!r} -> {text!r}")
        for logger in trainer.loggers:
            experiment = getattr(logger, "experiment", None)
            if experiment is not None and hasattr(experiment, "add_text"):
                experiment.add_text("sample", f"**{prompt}**{text}", global_step=step)
