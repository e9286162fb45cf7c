"""``LitGPTPretrainModule``: a LightningModule that pretrains a plain ``litgpt.GPT`` (at ``self.model``), with litgpt's
weight init, an optimizer from a litgpt-style spec (AdamW, Muon + AdamW, or any ``torch.optim`` class), the paper's
warmup-cosine schedule (:class:`~lightning_sparkling.growth.schedules.WarmupCosineLambda`), and checkpoints that carry
the model config of their moment (so a checkpoint of a grown model loads into a freshly built small module).

The GPT itself (:func:`~lightning_sparkling.pretrain.model.gpt.build_gpt`,
:func:`~lightning_sparkling.pretrain.model.gpt.init_gpt_weights`; sharded by
:func:`~lightning_sparkling.parallel.shard_gpt` / :func:`~lightning_sparkling.parallel.wrap_gpt`) is built in
:mod:`~lightning_sparkling.pretrain.model.gpt`, the optimizers and their LR schedules
(:func:`~lightning_sparkling.pretrain.model.optim.resolve_optimizer`) in
:mod:`~lightning_sparkling.pretrain.model.optim`.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import lightning as L
import torch
import torch.nn as nn
from lightning.pytorch.utilities.rank_zero import rank_zero_warn
from lightning.pytorch.utilities.types import OptimizerLRScheduler
from litgpt import GPT, Config
from litgpt.utils import chunked_cross_entropy
from torchmetrics import MeanMetric
from typing_extensions import override

from lightning_sparkling.callbacks.clipping import clip_gradients
from lightning_sparkling.callbacks.throughput import measured_flops_per_batch
from lightning_sparkling.growth.schedules import WarmupStableDecay, build_schedule, schedule_kind
from lightning_sparkling.parallel.activation_checkpointing import checkpoint_blocks
from lightning_sparkling.parallel.compile import compile_gpt
from lightning_sparkling.pretrain.model.gpt import _as_config, _rebuilt_gpt, build_gpt
from lightning_sparkling.pretrain.model.optim import (build_optimizers, clip_global_norm, is_muon, min_lr_ratio_of,
                                                      schedule_configs, lr_schedule_steps, resolve_optimizer)

__all__ = ["LitGPTPretrainModule"]


def _noop_closure() -> None:
    return None


def _check_module_args(max_steps: int | None, lr_warmup_steps: int | None, lr_warmup_fraction: float | None,
                       min_lr: float | None, max_norm: float | None, accumulate_grad_batches: int) -> None:
    """Raise ``ValueError`` for :class:`LitGPTPretrainModule` arguments out of range or given together."""
    if max_steps is not None and max_steps < 1:
        raise ValueError(f"max_steps={max_steps} must be >= 1")
    if lr_warmup_steps is not None and lr_warmup_fraction is not None:
        raise ValueError("give lr_warmup_steps or lr_warmup_fraction, not both "
                         f"(got {lr_warmup_steps} and {lr_warmup_fraction})")
    if lr_warmup_steps is not None and lr_warmup_steps < 0:
        raise ValueError(f"lr_warmup_steps={lr_warmup_steps} must be >= 0")
    if lr_warmup_steps is not None and max_steps is not None and lr_warmup_steps > max_steps:
        raise ValueError(f"lr_warmup_steps={lr_warmup_steps} is larger than max_steps={max_steps}")
    if lr_warmup_fraction is not None and not 0 <= lr_warmup_fraction <= 1:
        raise ValueError(f"lr_warmup_fraction={lr_warmup_fraction} must be in [0, 1]")
    if min_lr is not None and min_lr < 0:
        raise ValueError(f"min_lr={min_lr} must be >= 0")
    if max_norm is not None and max_norm < 0:
        raise ValueError(f"max_norm={max_norm} must be >= 0")
    if accumulate_grad_batches < 1:
        raise ValueError(f"accumulate_grad_batches={accumulate_grad_batches} must be >= 1")


def _as_list(value: Any) -> list:
    """``value`` as a list: ``[]`` for ``None``, itself for a list, else ``[value]``."""
    return [] if value is None else value if isinstance(value, list) else [value]


# ---------------------------------------------------------------------------------------------------------- loss
def _next_token_loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of ``model`` on token ids ``batch`` ``(B, T + 1)`` (inputs ``[:, :-1]``,
    targets ``[:, 1:]``; integer dtypes of any width)."""
    if not isinstance(batch, torch.Tensor) or batch.ndim != 2 or batch.shape[1] < 2:
        shape = tuple(batch.shape) if isinstance(batch, torch.Tensor) else type(batch).__name__
        raise ValueError(f"expected a batch of token ids shaped (B, T + 1), got {shape}")
    batch = batch.long()  # litdata's token streams are int32
    input_ids, targets = batch[:, :-1], batch[:, 1:]
    logits = model(input_ids)
    return chunked_cross_entropy(logits, targets, chunk_size=0)


def _check_runtime_supported(entry: Any, strategy: Any, compile: bool, activation_checkpointing: bool) -> None:
    """Refuse (``ValueError``) ``compile`` / ``activation_checkpointing`` under a strategy whose growth backend's
    registry entry (``entry``) says they do not work there, naming the strategies that support them."""
    from lightning_sparkling.parallel.registry import registered_backends

    refused = [key for key, on in (("compile", compile), ("activation_checkpointing", activation_checkpointing))
               if on and not entry.supports(key)]
    if refused:
        others = [e.usage for e in registered_backends() if all(e.supports(key) for key in refused)]
        raise ValueError(f"{' and '.join(refused)} {'is' if len(refused) == 1 else 'are'} not supported under "
                         f"{type(strategy).__name__} (backend {entry.name}) yet: use {', '.join(others)}, or turn "
                         f"{'it' if len(refused) == 1 else 'them'} off")


#: ``compile_scope`` values: the whole GPT as one graph (the default), each block compiled
COMPILE_SCOPES = ("whole", "blocks")


# ---------------------------------------------------------------------------------------------------------- module
class LitGPTPretrainModule(L.LightningModule):
    """Pretrains a ``litgpt.GPT`` on batches of token ids ``(B, T + 1)`` (inputs ``[:, :-1]``, targets ``[:, 1:]``).

    - The model is a plain ``litgpt.GPT`` at ``self.model``, built in ``__init__`` with litgpt's init
      (:func:`build_gpt`); :meth:`configure_model` builds it only if it is ``None`` and, under
      ``ModelParallelStrategy`` (``self.device_mesh`` set), FSDP2-shards it with
      :func:`~lightning_sparkling.parallel.shard_gpt`, under ``FSDPStrategy`` FSDP1-wraps it with
      :func:`~lightning_sparkling.parallel.wrap_gpt` (what the strategy's growth backend's ``prepare_model`` does;
      idempotent: a growth callback may call it again after swapping ``self.model``).
    - Optimizer from a litgpt-style spec, weight decay on every parameter (litgpt and the paper). With
      ``torch.optim.Muon``: Muon for the 2-D weights of the transformer blocks, AdamW (``muon_adamw``) for
      everything else (embeddings, ``lm_head``, norms, biases), as two optimizers under manual optimization.
    - Schedule: ``LambdaLR(opt, WarmupCosineLambda(warmup, max_steps, min_lr / lr))`` stepped every optimizer step
      (one per optimizer with Muon, same multiplier); ``lr_schedule="wsd"``: ``WSDLambda(warmup, max_steps,
      min_lr / lr, lr_decay_fraction, lr_decay_shape)`` instead.
    - Logs ``train_loss`` (every step, progress bar), ``val_loss`` and ``val_ppl`` (token-weighted mean over the
      validation set, torchmetrics ``MeanMetric``, synced across ranks).
    - Gradient clipping by global norm ``max_norm``: the module does it itself in both modes (automatic:
      :meth:`configure_gradient_clipping` uses ``max_norm`` unless the Trainer sets its own ``gradient_clip_val``;
      manual/Muon: one global norm over both optimizers, where Lightning forbids ``Trainer(gradient_clip_val=...)``).
      :attr:`gradient_clip_val` is the value that is safe to pass to the Trainer.
    - Checkpoints store ``checkpoint["model_config"] = asdict(self.model.config)``; on load, a different config
      rebuilds ``self.model`` before the weights load (a grown checkpoint loads into a fresh small module).
    - ``flops_per_batch`` (read by ``ThroughputMonitor`` for FLOP/s and MFU): the training FLOPs of one micro-batch
      as litgpt counts them (``measure_flops`` on a meta-device copy of the current config), counted again by the
      first training step after the model, its config or the batch shape changed (so it follows growth; a count
      takes 0.1 s at our CPU sizes, about 1 s at 1B parameters, once per shape), or by :meth:`update_flops_per_batch`.

    Args:
        model_config: ``litgpt.Config``, a dict of its fields, or a litgpt model name.
        optimizer: ``"AdamW"``, ``"torch.optim.Muon"``, or ``{"class_path": ..., "init_args": {...}}`` (litgpt's
            format). The peak LR is the optimizer's ``lr``.
        max_steps: optimizer steps of the run (``T`` of the schedule). ``None``: the Trainer's ``max_steps``.
        lr_warmup_steps: warmup optimizer steps. Exclusive with ``lr_warmup_fraction``.
        lr_warmup_fraction: warmup as a fraction of ``max_steps`` (rounded up). Neither given: 0.03 (the paper).
        min_lr: final LR (of the main optimizer; the Muon run's AdamW part uses the same ratio). ``None``:
            ``0.01 * lr`` (the paper).
        max_norm: clip gradients to this global norm (``None`` or 0: no clipping).
        lr_schedule: ``"cosine"`` (the paper's warmup-cosine) or ``"wsd"`` (warmup-stable-decay,
            :class:`~lightning_sparkling.growth.schedules.WSDLambda`).
        lr_decay_fraction: ``"wsd"``: the share of the run spent decaying, in ``(0, 1]``.
        lr_decay_shape: ``"wsd"``: ``"linear"``, ``"cosine"`` or ``"sqrt"`` (``1 - sqrt``) decay.
        tie_embeddings: tie ``wte`` to ``lm_head`` (litgpt's ``train.tie_embeddings``).
        seed: weight-init seed (same weights on every rank).
        accumulate_grad_batches: micro-batches per optimizer step under manual optimization (Muon), where
            ``Trainer(accumulate_grad_batches=...)`` is not allowed. Under automatic optimization use the Trainer's
            setting (this must then be 1 or equal to it).
        compile: ``torch.compile`` the GPT in :meth:`configure_model` (``True``: litgpt's defaults, inductor; a dict:
            ``torch.compile`` keyword arguments, e.g. ``{"backend": "aot_eager"}``), as ``compile_scope`` says; not
            under FSDP1 yet (refused in :meth:`configure_model`). A growth drops the model's compiled graphs and the
            next step compiles the grown shapes (:func:`~lightning_sparkling.parallel.compile.recompile_after_growth`).
        compile_scope: ``"whole"``: the whole GPT as one graph (``litgpt pretrain``'s ``torch.compile(model)``; a
            growth recompiles all of it); ``"blocks"``: each block's forward compiled, the blocks sharing one graph
            (torchtitan's way; a width growth recompiles one block's graph, a depth growth nothing; on CPU its steady
            step is 6-11% slower, docs/BENCHMARKS.md). FSDP2 compiles per block either way.
        activation_checkpointing: recompute every block's activations in the backward
            (:func:`~lightning_sparkling.parallel.checkpoint_blocks`); a growth's new blocks are checkpointed too. Not
            under FSDP1 yet.
        muon_adamw: AdamW ``init_args`` for the non-matrix parameters when the optimizer is Muon (default: Muon's
            ``lr`` and ``weight_decay``, ``betas=(0.9, 0.95)``, ``eps=1e-8``). Muon's default ``adjust_lr_fn``
            scales its step by ``sqrt(max(1, rows/cols))`` and wants a larger LR than AdamW (e.g. 0.02): either pass
            ``adjust_lr_fn="match_rms_adamw"`` to Muon so one LR suits both, or give the AdamW LR here.

    Example::

        >>> import lightning as L
        >>> cfg = dict(n_embd=32, n_head=4, n_layer=2, block_size=16, vocab_size=64, padded_vocab_size=64,
        ...            mlp_class_name="LLaMAMLP", intermediate_size=64, norm_class_name="RMSNorm", bias=False)
        >>> module = LitGPTPretrainModule(cfg, {"class_path": "torch.optim.AdamW",
        ...                               "init_args": {"lr": 1e-3, "weight_decay": 0.1, "betas": [0.9, 0.95]}},
        ...                               max_steps=3, lr_warmup_steps=1)
        >>> data = torch.utils.data.DataLoader(torch.randint(0, 64, (8, 17)), batch_size=4)
        >>> trainer = L.Trainer(max_steps=3, accelerator="cpu", logger=False, enable_checkpointing=False,
        ...                     enable_progress_bar=False, enable_model_summary=False)
        >>> trainer.fit(module, data)
        >>> trainer.global_step, type(module.model).__name__
        (3, 'GPT')
    """

    def __init__(self, model_config: Config | dict | str, optimizer: str | dict = "AdamW", *,
                 max_steps: int | None = None, lr_warmup_steps: int | None = None,
                 lr_warmup_fraction: float | None = None, min_lr: float | None = None,
                 max_norm: float | None = 1.0, tie_embeddings: bool = False, seed: int = 42,
                 accumulate_grad_batches: int = 1, muon_adamw: dict | None = None, lr_schedule: str = "cosine",
                 lr_decay_fraction: float = 0.2, lr_decay_shape: str = "linear", compile: bool | dict = False,
                 compile_scope: str = "whole", activation_checkpointing: bool = False) -> None:
        super().__init__()
        config = _as_config(model_config)
        optimizer_cls, _ = resolve_optimizer(optimizer)  # validates the spec early
        _check_module_args(max_steps, lr_warmup_steps, lr_warmup_fraction, min_lr, max_norm, accumulate_grad_batches)
        self.uses_muon = is_muon(optimizer_cls)
        if muon_adamw is not None and not self.uses_muon:
            raise ValueError("muon_adamw is only used with optimizer Muon")

        self.save_hyperparameters(ignore=["model_config"])
        self.hparams["model_config"] = asdict(config)  # plain data: YAML-friendly, and load_from_checkpoint rebuilds

        self.optimizer_spec = optimizer
        self.max_steps = max_steps
        self.lr_warmup_steps = lr_warmup_steps
        self.lr_warmup_fraction = lr_warmup_fraction
        self.min_lr = min_lr
        self.max_norm = max_norm
        self.tie_embeddings = tie_embeddings
        self.seed = seed
        self.accumulate_grad_batches = int(accumulate_grad_batches)
        self.muon_adamw = dict(muon_adamw or {})
        schedule_kind(lr_schedule)  # a registered name
        WarmupStableDecay(0, 1, decay_fraction=lr_decay_fraction, decay_shape=lr_decay_shape)  # validates both
        self.lr_schedule, self.lr_decay_fraction, self.lr_decay_shape = lr_schedule, lr_decay_fraction, lr_decay_shape
        self.automatic_optimization = not self.uses_muon
        if not isinstance(compile, (bool, dict)):
            raise ValueError(f"compile={compile!r} must be true, false or a dict of torch.compile arguments")
        self.compile_options: dict | None = (dict(compile) if isinstance(compile, dict) else {}) if compile else None
        if compile_scope not in COMPILE_SCOPES:
            raise ValueError(f"compile_scope={compile_scope!r} must be one of {', '.join(COMPILE_SCOPES)}")
        self.compile_scope = compile_scope
        self.activation_checkpointing = bool(activation_checkpointing)

        self._initial_config = config
        self.model: GPT = build_gpt(config, seed=seed, tie_embeddings=tie_embeddings)  # a user's None: configure_model
        self.val_loss = MeanMetric()
        self.flops_per_batch: int | None = None
        self._flops_key: tuple | None = None
        self._stepped = False  # whether the current batch took an optimizer step

    # ------------------------------------------------------------------ model
    @override
    def configure_model(self) -> None:
        """Build ``self.model`` if it is ``None`` (never twice), then prepare it for the growth backend of the
        Trainer's strategy (:func:`~lightning_sparkling.parallel.backend_class_for`, its settings unchecked: a
        strategy trained without growth works too): ``prepare_model`` FSDP2-shards it over ``self.device_mesh``
        under ``ModelParallelStrategy``, FSDP1-wraps it under ``FSDPStrategy``
        (:func:`~lightning_sparkling.parallel.wrap_gpt`), leaves it as it is on one device and under DDP. A
        strategy no backend accepts leaves it as it is. Already-sharded modules are left alone, so calling it again
        is safe. ``compile`` and ``activation_checkpointing`` come first (per block where the backend says so), and
        are refused where its registry entry says they do not work."""
        if self.model is None:
            self.model = build_gpt(self._initial_config, seed=self.seed, tie_embeddings=self.tie_embeddings)
        self._prepare_model()

    def _prepare_model(self) -> None:
        """:meth:`configure_model` on ``self.model`` as it is (also after a checkpoint rebuilt it)."""
        from lightning_sparkling.parallel.registry import backend_class, backend_entry_for

        strategy = self.trainer.strategy if self._trainer is not None else None
        entry = None if strategy is None else backend_entry_for(strategy)
        backend = None if entry is None else backend_class(entry)
        if entry is not None:
            _check_runtime_supported(entry, strategy, self.compile_options is not None, self.activation_checkpointing)
        must = backend is not None and backend.compile_per_block  # sharded blocks: fully_shard's hooks stay outside
        self._apply_runtime(per_block=must or self.compile_scope == "blocks")
        if backend is not None:
            self.model = backend.prepare_model(self, self.model)

    def _apply_runtime(self, per_block: bool) -> None:
        """Activation checkpointing, then ``torch.compile`` (torchtitan's order: both before sharding); both skip
        what they already did."""
        if self.activation_checkpointing:
            checkpoint_blocks(self.model)
        if self.compile_options is not None:
            compile_gpt(self.model, per_block=per_block, **self.compile_options)

    @override
    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, T, padded_vocab_size)`` for token ids ``(B, T)``."""
        return self.model(idx)

    def _lm_loss(self, batch: torch.Tensor) -> torch.Tensor:
        return _next_token_loss(self.model, batch)

    # ------------------------------------------------------------------ FLOPs
    def update_flops_per_batch(self, micro_batch_size: int, seq_len: int) -> int:
        """Set and return ``flops_per_batch``: the training FLOPs (forward + backward) of one micro-batch of the model
        as it is now, counted as ``litgpt pretrain`` counts them for its MFU (Lightning's ``measure_flops`` on a
        meta-device ``GPT(self.model.config)``,
        :func:`~lightning_sparkling.callbacks.throughput.measured_flops_per_batch`). Not the paper's ``6 N D``
        (:func:`~lightning_sparkling.growth.compute.estimate_compute` and the ``flops`` tag keep that): the
        embedding lookup costs no matmul, attention's score and value products do.

        Args:
            micro_batch_size: sequences per micro-batch (per device).
            seq_len: tokens per sequence (the model input length, i.e. window length - 1).

        Example::

            >>> module = LitGPTPretrainModule(dict(n_embd=32, n_head=4, n_layer=2, block_size=16, vocab_size=64,
            ...     padded_vocab_size=64, mlp_class_name="LLaMAMLP", intermediate_size=64,
            ...     norm_class_name="RMSNorm", bias=False), max_steps=1)
            >>> module.update_flops_per_batch(2, 16)
            4718592
        """
        self.flops_per_batch = measured_flops_per_batch(self.model.config, int(micro_batch_size), int(seq_len))
        self._flops_key = (id(self.model), id(self.model.config), int(micro_batch_size), int(seq_len))
        return self.flops_per_batch

    def _refresh_flops(self, batch: torch.Tensor) -> None:
        key = (id(self.model), id(self.model.config), int(batch.shape[0]), int(batch.shape[1]) - 1)
        if key != self._flops_key:
            self.update_flops_per_batch(key[2], key[3])

    # ------------------------------------------------------------------ steps
    @override
    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        """Next-token cross-entropy on ``batch`` (``(B, T + 1)`` token ids); logs ``train_loss`` (the last
        micro-batch's, once per optimizer step). Under manual optimization (Muon) it also does the backward, and every
        ``accumulate_grad_batches`` micro-batches clips, steps both optimizers and both schedulers."""
        self._refresh_flops(batch)
        loss = self._lm_loss(batch)
        self._stepped = self.automatic_optimization or self._manual_step(loss, batch_idx)
        self._log_train_loss(loss)
        return loss

    def _log_train_loss(self, loss: torch.Tensor) -> None:
        """Log ``train_loss``: every micro-batch when each one is an optimizer step (or Lightning accumulates), else
        once per optimizer step, at the end of the accumulation window."""
        if self.automatic_optimization or self.accumulate_grad_batches == 1:
            self.log("train_loss", loss.detach(), on_step=True, on_epoch=False, prog_bar=True)
        elif self._stepped:
            # manual accumulation: Lightning would write the logged value at every micro-batch (stale ones too), so
            # the loggers get it here, once per optimizer step, at the step Lightning uses under automatic optimization
            self.log("train_loss", loss.detach(), on_step=True, on_epoch=False, prog_bar=True, logger=False)
            # log_every_n_steps: set by Lightning's logger connector, not declared on the Trainer class
            step, every = self.trainer.global_step, self.trainer.log_every_n_steps  # type: ignore[attr-defined]
            if every and step % every == 0:
                for logger in self.loggers:
                    logger.log_metrics({"train_loss": float(loss)}, step=step - 1)

    @override
    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Under manual optimization with ``accumulate_grad_batches > 1``, make Lightning's logging step count
        optimizer steps, as it does under automatic optimization (it counts batches there, since it cannot see
        the accumulation): metrics logged during optimizer step ``k`` (1-based) land at ``k - 1``, like
        ``train_loss`` of AdamW runs, so curves of both optimizers and the growth callback's tags share one x axis.
        """
        if self.automatic_optimization or self.accumulate_grad_batches == 1:
            return
        step = self.trainer.global_step  # optimizer steps taken, this batch's included
        # Lightning logs this batch's metrics at `_batches_that_stepped`, then adds 1 (checkpointed with the loop)
        self.trainer.fit_loop.epoch_loop._batches_that_stepped = step - 1 if self._stepped else step

    def _manual_step(self, loss: torch.Tensor, batch_idx: int) -> bool:
        """Backward, and the optimizer step at the end of an accumulation window; whether it stepped."""
        accumulate = self.accumulate_grad_batches
        self.manual_backward(loss / accumulate)
        if (batch_idx + 1) % accumulate != 0 and not self.trainer.is_last_batch:
            return False
        optimizers = _as_list(self.optimizers())
        schedulers = _as_list(self.lr_schedulers())
        clip_global_norm(optimizers, self.max_norm)
        # Only the first step goes through Lightning's optimizer wrapper: each wrapper step counts one
        # `trainer.global_step`, and one optimizer step of this module is one global step.
        optimizers[0].step()
        for opt in optimizers[1:]:
            self.trainer.strategy.optimizer_step(opt.optimizer, closure=_noop_closure, model=self)
        for opt in optimizers:
            opt.zero_grad(set_to_none=True)
        for scheduler in schedulers:
            scheduler.step()
        return True

    @override
    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        """Accumulates the token-weighted validation loss (logged at the end of validation)."""
        loss = self._lm_loss(batch)
        self.val_loss.update(loss.detach().float(), weight=batch[:, 1:].numel())
        return loss

    @override
    def on_validation_epoch_end(self) -> None:
        """Logs ``val_loss`` (mean next-token cross-entropy over the validation set) and ``val_ppl = exp(val_loss)``.
        """
        if self.val_loss.update_count == 0:
            return
        loss = self.val_loss.compute()
        self.val_loss.reset()
        # already reduced over ranks by torchmetrics; sync_dist only silences Lightning's epoch-level DDP warning
        self.log("val_loss", loss, prog_bar=True, sync_dist=True)
        self.log("val_ppl", torch.exp(loss), sync_dist=True)

    # ------------------------------------------------------------------ optimizers
    def schedule_steps(self) -> tuple[int, int]:
        """``(warmup_steps, total_steps)`` of the LR schedule (total from ``max_steps`` or the Trainer's)."""
        trainer_steps = self._trainer.max_steps if self._trainer is not None else -1
        return lr_schedule_steps(self.max_steps, trainer_steps, self.lr_warmup_steps, self.lr_warmup_fraction)

    @override
    def configure_optimizers(self) -> OptimizerLRScheduler:
        """The optimizer(s) and step-interval ``LambdaLR(WarmupCosineLambda)`` (or ``WSDLambda``) scheduler(s)."""
        warmup, total = self.schedule_steps()
        optimizers = build_optimizers(self.model, self.optimizer_spec, self.uses_muon, self.muon_adamw)
        min_lr_ratio = min_lr_ratio_of(self.min_lr, float(optimizers[0].param_groups[0]["lr"]))
        configs = schedule_configs(optimizers, lambda: build_schedule(
            self.lr_schedule, warmup, total, min_lr_ratio, decay_fraction=self.lr_decay_fraction,
            decay_shape=self.lr_decay_shape))
        return configs[0] if len(configs) == 1 else configs

    @property
    def gradient_clip_val(self) -> float | None:
        """The value that may be passed as ``Trainer(gradient_clip_val=...)``: ``max_norm`` under automatic
        optimization, ``None`` under manual optimization (Muon), where Lightning forbids it and the module clips
        itself. Passing nothing is fine too: the module clips with ``max_norm`` in both modes."""
        return (self.max_norm or None) if self.automatic_optimization else None

    @override
    def configure_gradient_clipping(self, optimizer: torch.optim.Optimizer, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        """Clip by global norm: the Trainer's ``gradient_clip_val`` when set, else ``max_norm``; fused AdamW under
        mixed precision included, where Lightning's own clipping refuses it
        (:func:`~lightning_sparkling.callbacks.clipping.clip_gradients`: no scaler, clipped directly; a scaler,
        unscaled first)."""
        if gradient_clip_val is None:
            if not self.max_norm:
                return
            gradient_clip_val, gradient_clip_algorithm = self.max_norm, "norm"
        clip_gradients(self, optimizer, gradient_clip_val, gradient_clip_algorithm)

    @override
    def on_fit_start(self) -> None:
        """Checks the Trainer settings that must agree with the module's."""
        trainer = self.trainer
        if self.automatic_optimization and self.accumulate_grad_batches not in (1, trainer.accumulate_grad_batches):
            raise ValueError(f"accumulate_grad_batches={self.accumulate_grad_batches} is only used with Muon (manual "
                             f"optimization): with {resolve_optimizer(self.optimizer_spec)[0].__name__} set "
                             f"Trainer(accumulate_grad_batches={self.accumulate_grad_batches}) instead "
                             f"(it is {trainer.accumulate_grad_batches})")
        if not self.automatic_optimization and str(trainer.precision) in ("16-mixed", "16"):
            raise ValueError("precision='16-mixed' (gradient scaling) is not supported with the Muon optimizer: "
                             "use 'bf16-mixed', 'bf16-true' or '32-true'")
        if self.max_steps is not None and trainer.max_steps not in (-1, None, self.max_steps):
            rank_zero_warn(f"LitGPTPretrainModule(max_steps={self.max_steps}) differs from "
                           f"Trainer(max_steps={trainer.max_steps}): the LR schedule ends at {self.max_steps}")

    # ------------------------------------------------------------------ checkpoints
    @override
    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Stores ``checkpoint["model_config"] = asdict(self.model.config)`` (the config of this moment)."""
        checkpoint["model_config"] = asdict(self.model.config)

    @override
    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """If the checkpoint's ``model_config`` differs from the current model's, rebuild ``self.model`` with it
        (same device and dtype, tied and sharded like the module's own) before the weights load."""
        saved = checkpoint.get("model_config")
        if saved is None:
            return
        config = _as_config(dict(saved))
        if self.model is not None and config == self.model.config:
            return
        self._rebuild_model(config)

    def _rebuild_model(self, config: Config) -> None:
        self.model = _rebuilt_gpt(self.model, config, seed=self.seed, tie_embeddings=self.tie_embeddings)
        self._flops_key = None
        self._prepare_model()
