"""``TokenThroughputMonitor``: Lightning's ``ThroughputMonitor`` (what litgpt's pretrain logs: tokens/s, FLOPs/s and,
where the device's peak is known, MFU) for batches of token ids, whose FLOPs follow a growth; and
:func:`measured_flops_per_batch`, the FLOPs of one micro-batch counted as ``litgpt pretrain`` counts them.

The FLOPs of a batch are read from the module's ``flops_per_batch`` at every micro-batch (``LitGPTPretrainModule``
counts it with :func:`measured_flops_per_batch` whenever its model or batch shape changes), so the FLOPs/s and MFU
of a window that spans a growth count each batch with the FLOPs of the model that ran it. Place the monitor before
the growth callback: a growth happens in ``on_train_batch_end`` of its step, and the batch of that step ran the model
from before it.
"""

from __future__ import annotations

import types
from typing import Any

import torch
from lightning.fabric.utilities.throughput import measure_flops
from lightning.pytorch.callbacks import ThroughputMonitor
from lightning.pytorch.trainer.states import RunningStage
from lightning.pytorch.utilities.rank_zero import rank_zero_only
from typing_extensions import override

__all__ = ["TokenThroughputMonitor", "measured_flops_per_batch"]


def measured_flops_per_batch(config: Any, micro_batch_size: int, seq_len: int | None = None) -> int:
    """Training FLOPs (forward + backward) of one micro-batch of ``GPT(config)``, counted as ``litgpt pretrain``
    counts them for its MFU: Lightning's :func:`~lightning.fabric.utilities.throughput.measure_flops` (PyTorch's
    ``FlopCounterMode``) on a copy of the model built on the meta device (shapes only: no memory, no compute; 0.1 s
    at the CPU sizes we train, about 1 s at 1B parameters and 2048 tokens), fed ``micro_batch_size`` sequences of
    ``seq_len`` tokens, its logits' ``chunked_cross_entropy`` backpropagated. Every matmul is counted, attention's
    score and value products included; the token-embedding lookup, norms and activations are not. Built from
    ``config`` alone, so a sharded (FSDP2 DTensor, FSDP1), DDP-wrapped or compiled model is counted at its global size.

    litgpt's MoE block routes tokens with ``torch.where``, whose output shape depends on the data, so it cannot run on
    the meta device (litgpt's own count fails on an MoE model). Here each ``LLaMAMoE`` block of the meta copy routes
    evenly instead: the router on every token, ``n_expert_per_token`` rows per token split evenly over the experts,
    the shared experts on every token. A matmul's FLOPs are linear in its rows, so this is what any routing costs
    (checked against the real routing on the CPU).

    Args:
        config: the litgpt ``Config`` of the model.
        micro_batch_size: sequences per micro-batch (per device).
        seq_len: tokens per sequence (the model's input length); default ``config.block_size``, as litgpt's pretrain.

    Example::

        >>> from litgpt import Config
        >>> cfg = Config(n_embd=32, n_head=4, n_layer=2, block_size=16, vocab_size=64, padded_vocab_size=64,
        ...              mlp_class_name="LLaMAMLP", intermediate_size=64, norm_class_name="RMSNorm", bias=False)
        >>> measured_flops_per_batch(cfg, 2)   # 6 N D: 6 * 24,736 params * 2 * 16 tokens = 4,749,312
        4718592
    """
    from litgpt import GPT
    from litgpt.model import LLaMAMoE
    from litgpt.utils import chunked_cross_entropy

    with torch.device("meta"), torch.enable_grad():  # meta tensors: no memory, no kernel, no random numbers drawn
        model = GPT(config)
        for module in model.modules():
            if isinstance(module, LLaMAMoE):
                module.forward = types.MethodType(_balanced_moe_forward, module)
        x = torch.randint(0, 1, (int(micro_batch_size), int(seq_len or model.max_seq_length)))
        return int(measure_flops(model, lambda: model(x), lambda y: chunked_cross_entropy(y, x, chunk_size=0)))


def _balanced_moe_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    """``LLaMAMoE.forward`` with data-independent routing, for counting FLOPs on the meta device: the router runs on
    every token, the ``B * T * n_expert_per_token`` routed rows are split evenly over the experts, the shared experts
    run on every token."""
    B, T, C = x.size()
    flat = x.reshape(-1, C)
    router = self.gate(flat)  # (B * T, n_expert), or (probs, indices) from a grouped router
    y = (router[0] if isinstance(router, tuple) else router).sum()  # the router's backward is counted too
    rows, n = flat.shape[0] * self.config.n_expert_per_token, len(self.experts)
    routed = flat.repeat(self.config.n_expert_per_token, 1)
    for expert, part in zip(self.experts, torch.split(routed, _even(rows, n))):
        y = y + expert(part).sum()
    out = flat * y
    if self.config.n_shared_expert:
        out = out + self.shared_experts(flat)
    return out.view(B, T, C)


def _even(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` sizes that differ by at most one."""
    return [total // parts + (i < total % parts) for i in range(parts)]


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
    @override
    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, *args: Any) -> None:
        flops = getattr(pl_module, "flops_per_batch", None)
        self.last_flops_per_batch = None if flops is None else float(flops)
        super().on_train_batch_end(trainer, pl_module, outputs, batch, *args)

    @override
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
