"""``TokenThroughputMonitor``: Lightning's ``ThroughputMonitor`` (what litgpt's pretrain logs: tokens/s, FLOPs/s and,
where the device's peak is known, MFU) for batches of token ids, whose FLOPs follow a growth.

The FLOPs of a batch are read from the module's ``flops_per_batch`` at every micro-batch (``LitGPTPretrainModule``
refreshes it whenever its model changes), so the FLOPs/s and MFU of a window that spans a growth count each batch
with the FLOPs of the model that ran it. Place the monitor before the growth callback: a growth happens in
``on_train_batch_end`` of its step, and the batch of that step ran the model from before it.
"""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.trainer.states import RunningStage
from lightning.pytorch.utilities.rank_zero import rank_zero_only

__all__ = ["TokenThroughputMonitor"]


def _sequences(batch: Any) -> int:
    return int(batch.shape[0])


def _tokens(batch: Any) -> int:
    """Model input tokens of a ``(B, T + 1)`` batch of token ids: ``B * T``."""
    return int(batch.shape[0]) * (int(batch.shape[1]) - 1)


class TokenThroughputMonitor(ThroughputMonitor):
    """Logs Lightning's throughput metrics for ``(B, T + 1)`` batches of token ids, under ``train/``:
    ``train/time`` (seconds since the fit started, validation excluded), ``train/lengths`` (input tokens seen),
    ``train/device/items_per_sec`` (tokens/s over the window), ``train/device/flops_per_sec``, ``train/device/mfu``
    (only where Lightning knows the device's peak FLOP/s for the run's precision: CUDA GPUs, TPUs), and
    ``train/flops_per_batch``: the module's ``flops_per_batch`` of the last micro-batch, which changes at a growth.
    Logged every ``log_every_n_steps`` optimizer steps, on rank 0; validation is not (its time is taken out of
    ``train/time``).

    Args:
        window_size: micro-batches over which the rates are averaged (Lightning's default is 100; litgpt logs
            over 5 logging intervals).
        **kwargs: the other arguments of :class:`~lightning.fabric.utilities.throughput.Throughput`.

    Example::

        >>> monitor = TokenThroughputMonitor(window_size=4)
        >>> monitor.length_fn(torch.zeros(2, 17, dtype=torch.long)), monitor.batch_size_fn(torch.zeros(2, 17))
        (32, 2)
    """

    def __init__(self, window_size: int = 5, **kwargs: Any) -> None:
        if window_size < 2:
            raise ValueError(f"window_size={window_size} must be >= 2 (a rate needs two times)")
        super().__init__(batch_size_fn=_sequences, length_fn=_tokens, window_size=window_size, **kwargs)
        self.last_flops_per_batch: float | None = None

    @rank_zero_only
    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, *args: Any) -> None:
        flops = getattr(pl_module, "flops_per_batch", None)
        self.last_flops_per_batch = None if flops is None else float(flops)
        super().on_train_batch_end(trainer, pl_module, outputs, batch, *args)

    def _compute(self, trainer: Any, iter_num: int | None = None) -> None:
        """Lightning's training metrics, with ``train/flops_per_batch`` in the same ``log_metrics`` call (one logger
        write per logged step, as Lightning's own). Validation is timed (Lightning takes its time out of the
        training clock) but not logged: Lightning would log it at validation-batch indices, not training steps."""
        stage = trainer.state.stage
        if stage != RunningStage.TRAINING or not trainer._logger_connector.should_update_logs:
            return
        throughput = self._throughputs[stage]
        metrics = {f"{stage.value}{throughput.separator}{k}": v for k, v in throughput.compute().items()}
        if self.last_flops_per_batch is not None:
            metrics[f"train{throughput.separator}flops_per_batch"] = self.last_flops_per_batch
        trainer._logger_connector.log_metrics(metrics, step=iter_num)
