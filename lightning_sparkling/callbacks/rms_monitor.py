"""``ActivationRMSMonitor``: per-block activation RMS of a litgpt ``GPT`` in TensorBoard.

The SPARKLING paper (section 3.1) argues that width growth must keep two things unchanged: the RMS gain of every
linear layer, ``r = RMS(y) / RMS(x)`` (Eq. 3), and, in a pre-norm block ``h <- h + f(Norm(h))``, the residual ratio
``RMS(f(Norm(h))) / RMS(h)`` that sets how strongly each branch writes into the residual stream. This callback logs
exactly those numbers, so a run's dashboard shows whether a growth step left the activations in their regime.

Tags (``i`` is the block index, two digits; ``RMS(h) = sqrt(mean(h**2))`` over *all* elements of ``h``: batch,
tokens and features; computed in float32 whatever the activation dtype):

========================================  ==============================================================
``rms/residual/block_{i:02d}``            RMS of the block input ``x`` (the residual stream entering block ``i``)
``rms/attn_ratio/block_{i:02d}``          RMS(attention branch, after ``post_attention_norm``) / RMS(``x``)
``rms/mlp_ratio/block_{i:02d}``           RMS(MLP branch, after ``post_mlp_norm``) / RMS(MLP's residual input):
                                          ``x + attn_out`` for sequential residual (LLaMA, GPT-2, ...),
                                          ``x`` for ``parallel_residual`` (GPT-NeoX, Pythia, ...)
``rms/final_hidden``                      RMS of the *input* of ``transformer.ln_f``: the residual stream after
                                          the last block, before the final norm (whose output RMS is ~1 by design
                                          and would say nothing)
``rms/gain/block_{i:02d}/{name}``         only with ``per_linear=True``: RMS(y) / RMS(x) of every ``nn.Linear`` in
                                          block ``i`` (``name`` relative to the block, e.g. ``attn.qkv``,
                                          ``mlp.fc_1``, ``mlp.experts.3.proj``)
========================================  ==============================================================

How it works:

* Hooks exist only during logging steps. In ``on_train_batch_start`` of an optimizer step ``s`` with
  ``s % every_n_steps == 0`` the monitor finds the single ``litgpt.model.GPT`` inside the LightningModule and
  registers one forward pre-hook on it. When that forward starts, this hook registers a forward pre-hook on every
  block and on ``ln_f``, and forward hooks on each block's ``post_attention_norm`` and ``post_mlp_norm``
  (``nn.Identity`` when disabled, still hookable), on the modules the ``GPT`` has *at that moment*. All are removed
  in ``on_before_backward`` (so activation-checkpoint recomputation does not fire them) and, at the latest, in
  ``on_train_batch_end``. Between logging steps the model carries no hooks and the monitor costs nothing. Because
  the hooks are registered afresh each logging step, they follow a model that growth has widened in place or
  whose blocks were rebuilt, whatever the order of the callbacks.
* Gradient accumulation: only the *first* micro-batch of optimizer step ``s`` is measured (one forward is a
  sample of the activation statistics; measuring every micro-batch would multiply the cost for no new insight).
* The value is logged at TensorBoard step ``s`` = ``trainer.global_step`` *before* that step's optimizer update,
  the same step Lightning uses for a ``train_loss`` logged in the ``training_step`` of that batch.
* Hooks compute the RMS values on the fly (no activation is kept beyond the forward), as 0-d tensors; one
  ``torch.stack`` and one host transfer per logging step. A hook that did not fire (a block skipped by the
  module's code, a custom block without ``post_*_norm``) leaves its tags out for that step; nothing crashes.
  Non-reentrant activation checkpointing (``checkpoint_wrapper``,
  :func:`~lightning_sparkling.parallel.checkpoint_blocks`) is fine. The first call of a hooked module in a forward
  wins.
* A compiled model (``model.compile()``, ``torch.compile``, :func:`~lightning_sparkling.parallel.compile_gpt`):
  compiled code does not run hooks registered after it was compiled, so on a logging step the measured forward runs
  eagerly (``torch.compiler.set_stance("force_eager")`` from ``on_train_batch_start`` to ``on_before_backward``:
  that micro-batch's forward and its backward), with the same hooks, on the same micro-batch: the same tags and
  values as on an eager model. Every other step runs the compiled code, untouched and never recompiled. The cost
  is the eager step's extra time once every ``every_n_steps`` steps (docs/BENCHMARKS.md measures it).
* Multi-process: every rank measures its own micro-batch; the values are averaged over ranks with a torchmetrics
  :class:`~torchmetrics.Metric` (a vector of sums and a vector of counts: two small ``all_gather`` per logging
  step, which every rank reaches since logging steps are decided by ``global_step``; a tag is averaged over the
  ranks where it fired) and rank zero writes them with ``logger.log_metrics(..., step=s)`` to every logger
  of the trainer.
* ``on_fit_start`` (rank zero) writes a TensorBoard custom-scalars layout
  (see :mod:`lightning_sparkling.dashboards.tb_layout`) that overlays all blocks per quantity, for every
  ``TensorBoardLogger`` of the trainer.

Depth growth (a block count that changes mid-run, e.g. ``GrowthStage(n_layer=...)``):

* Tags are **position based**: ``block_{i:02d}`` is whatever block sits at position ``i`` of
  ``model.transformer.h`` at the logging step. Blocks added by a growth get their tags from the first logging step
  at or after the growth on (``block_02``, ``block_03`` after ``2 -> 4``; never before: no value, no NaN filler).
  A kept block that a growth *moves* (``depth_order="interleave"`` or ``"middle"``) continues under its new
  position's tag, and its old position's series continues with the block now there: after ``2 -> 4``
  interleave, ``block_01`` is old block 0's new copy and old block 1 logs as ``block_02`` (see
  :func:`~lightning_sparkling.growth.depth_maps.describe_depth`, logged by the growth callback, for who moved where).
  With ``depth_order="stack"`` kept blocks keep their positions, so their series run on unbroken.
* The monitor checks the block count on every training batch (a ``len`` of ``transformer.h``; no hook, no sync)
  and, when it differs from the count the layout was last written for, rewrites the custom-scalars layout (rank
  zero) at that step, so the per-block charts (``per_linear=True``: one gain chart per block) cover the new
  blocks; TensorBoard shows the last layout of an event directory. The overlays of the other charts are tag
  regexes that match any block anyway. A fit resumed from a grown checkpoint writes the grown layout at fit start
  (the growth callback regrows the model when the checkpoint loads), or at the first batch under strategies that
  load the checkpoint after ``on_fit_start``.

Callback order: the monitor resolves the ``GPT`` object itself in ``on_train_batch_start``. A callback that
replaces the whole ``GPT`` object (not its blocks or parameters) in its own ``on_train_batch_start`` must come
before the monitor in ``callbacks=[...]``, else that one step logs nothing. :func:`~lightning_sparkling.grow_model`
keeps every module object, so the growth callback can come in either order.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn as nn
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from lightning.pytorch.utilities.rank_zero import rank_zero_only, rank_zero_warn
from litgpt.model import GPT
from torch import Tensor
from torchmetrics import Metric
from typing_extensions import override

from lightning_sparkling.growth.surgery import clean_name
from lightning_sparkling.parallel.compile import is_compiled

__all__ = ["ActivationRMSMonitor", "RMSProbe", "compute_rms", "find_gpt", "rms", "rms_tags"]


# --------------------------------------------------------------------------------------------------------------------
# tags and helpers
# --------------------------------------------------------------------------------------------------------------------


def residual_tag(i: int) -> str:
    return f"rms/residual/block_{i:02d}"


def attn_ratio_tag(i: int) -> str:
    return f"rms/attn_ratio/block_{i:02d}"


def mlp_ratio_tag(i: int) -> str:
    return f"rms/mlp_ratio/block_{i:02d}"


def gain_tag(i: int, name: str) -> str:
    return f"rms/gain/block_{i:02d}/{name}"


FINAL_HIDDEN_TAG = "rms/final_hidden"


def rms(h: Tensor) -> Tensor:
    """``sqrt(mean(h**2))`` over all elements of ``h``, in float32, as a 0-d tensor on ``h``'s device (no grad)."""
    h = h.detach()
    if h.numel() == 0:
        return torch.full((), float("nan"), dtype=torch.float32, device=h.device)
    return torch.linalg.vector_norm(h, dtype=torch.float32) / math.sqrt(h.numel())


def find_gpt(module: nn.Module) -> GPT:
    """The single ``litgpt.model.GPT`` inside ``module`` (``module`` itself included).

    Raises:
        MisconfigurationException: when there is no ``GPT`` or more than one.
    """
    found = [m for m in module.modules() if isinstance(m, GPT)]
    if not found:
        raise MisconfigurationException(
            f"ActivationRMSMonitor needs a `litgpt.model.GPT` inside the LightningModule; none found in "
            f"{type(module).__name__}."
        )
    if len(found) > 1:
        raise MisconfigurationException(
            f"ActivationRMSMonitor needs exactly one `litgpt.model.GPT` inside the LightningModule; found "
            f"{len(found)} in {type(module).__name__}."
        )
    return found[0]


def _block_linears(block: nn.Module) -> list[tuple[str, nn.Linear]]:
    return [(clean_name(name), m) for name, m in block.named_modules() if isinstance(m, nn.Linear)]


def rms_tags(model: GPT, per_linear: bool = False) -> list[str]:
    """Every tag the monitor can log for ``model``, in a fixed order (the same on every rank)."""
    tags: list[str] = []
    for i, block in enumerate(model.transformer.h):
        tags += [residual_tag(i), attn_ratio_tag(i), mlp_ratio_tag(i)]
        if per_linear:
            tags += [gain_tag(i, name) for name, _ in _block_linears(block)]
    tags.append(FINAL_HIDDEN_TAG)
    return tags


def _first_tensor(args: tuple, kwargs: dict[str, Any], key: str) -> Tensor | None:
    x = args[0] if args else kwargs.get(key)
    return x if isinstance(x, Tensor) else None


# --------------------------------------------------------------------------------------------------------------------
# the probe: hooks for one forward
# --------------------------------------------------------------------------------------------------------------------


class RMSProbe:
    """Hooks on one litgpt ``GPT`` that measure one forward pass.

    Usage::

        probe = RMSProbe(model, per_linear=False).attach()
        model(idx)
        probe.detach()
        values = probe.results()  # {tag: 0-d float32 tensor}

    ``attach`` hooks the modules the model has *now*; ``detach`` removes every hook it registered (idempotent).
    """

    def __init__(self, model: GPT, per_linear: bool = False) -> None:
        if not isinstance(model, GPT):
            raise TypeError(f"RMSProbe needs a litgpt.model.GPT, got {type(model).__name__}")
        self.model = model
        self.per_linear = per_linear
        self.tags = rms_tags(model, per_linear)
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        self._x: dict[int, Tensor] = {}  # block inputs, held only until the attention branch has fired
        self._res: dict[int, Tensor] = {}
        self._attn: dict[int, Tensor] = {}
        self._mid: dict[int, Tensor] = {}  # RMS of the MLP's residual input
        self._mlp: dict[int, Tensor] = {}
        self._gain: dict[str, Tensor] = {}
        self._final: Tensor | None = None
        self._modules_attached = False

    # -- hooks ---------------------------------------------------------------------------------------------------
    def _block_pre_hook(self, i: int) -> Callable:
        def hook(module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
            if i in self._res:
                return
            x = _first_tensor(args, kwargs, "x")
            if x is None:
                return
            with torch.no_grad():
                self._res[i] = rms(x)
            self._x[i] = x.detach()

        return hook

    def _attn_hook(self, i: int, parallel: bool) -> Callable:
        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            if i in self._attn or not isinstance(output, Tensor):
                return
            x = self._x.pop(i, None)
            with torch.no_grad():
                self._attn[i] = rms(output)
                if parallel:
                    if i in self._res:
                        self._mid[i] = self._res[i]
                elif x is not None and x.shape == output.shape:
                    self._mid[i] = rms(output.detach() + x)  # the tensor norm_2 sees, same dtype and order

        return hook

    def _mlp_hook(self, i: int) -> Callable:
        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            if i in self._mlp or not isinstance(output, Tensor):
                return
            with torch.no_grad():
                self._mlp[i] = rms(output)

        return hook

    def _final_pre_hook(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        if self._final is not None:
            return
        x = _first_tensor(args, kwargs, "x")
        if x is not None:
            with torch.no_grad():
                self._final = rms(x)

    def _linear_hook(self, tag: str) -> Callable:
        def hook(module: nn.Module, args: tuple, output: Any) -> None:
            if tag in self._gain or not args or not isinstance(args[0], Tensor) or not isinstance(output, Tensor):
                return
            with torch.no_grad():
                self._gain[tag] = rms(output) / rms(args[0])

        return hook

    # -- lifecycle -----------------------------------------------------------------------------------------------
    def attach(self, lazy: bool = False) -> RMSProbe:
        """Register the hooks (after removing any this probe still holds).

        ``lazy=True`` registers only a forward pre-hook on the ``GPT`` itself, which hooks the blocks, ``ln_f`` and
        linears when the forward starts: whatever modules the model has *then* are measured, even if something
        replaced them between ``attach`` and the forward.
        """
        self.detach()
        if lazy:
            self._handles.append(self.model.register_forward_pre_hook(self._root_pre_hook))
        else:
            self._attach_modules()
        return self

    def _root_pre_hook(self, module: nn.Module, args: tuple) -> None:
        if not self._modules_attached:
            self._attach_modules()

    def _attach_modules(self) -> None:
        self.tags = rms_tags(self.model, self.per_linear)
        parallel = bool(self.model.config.parallel_residual)
        add = self._handles.append
        for i, block in enumerate(self.model.transformer.h):
            add(block.register_forward_pre_hook(self._block_pre_hook(i), with_kwargs=True))
            # litgpt Blocks always have both (nn.Identity when disabled); a custom block without them: no ratios
            post_attn, post_mlp = getattr(block, "post_attention_norm", None), getattr(block, "post_mlp_norm", None)
            if isinstance(post_attn, nn.Module):
                add(post_attn.register_forward_hook(self._attn_hook(i, parallel)))
            if isinstance(post_mlp, nn.Module):
                add(post_mlp.register_forward_hook(self._mlp_hook(i)))
            if self.per_linear:
                for name, linear in _block_linears(block):
                    add(linear.register_forward_hook(self._linear_hook(gain_tag(i, name))))
        add(self.model.transformer.ln_f.register_forward_pre_hook(self._final_pre_hook, with_kwargs=True))
        self._modules_attached = True

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._x.clear()
        self._modules_attached = False

    @property
    def attached(self) -> bool:
        return bool(self._handles)

    def results(self) -> dict[str, Tensor]:
        """``{tag: 0-d float32 tensor}`` for every tag whose hooks fired, in :func:`rms_tags` order."""
        out: dict[str, Tensor] = {}
        for i in range(len(self.model.transformer.h)):
            res = self._res.get(i)
            if res is not None:
                out[residual_tag(i)] = res
                if i in self._attn:
                    out[attn_ratio_tag(i)] = self._attn[i] / res
            if i in self._mlp and i in self._mid:
                out[mlp_ratio_tag(i)] = self._mlp[i] / self._mid[i]
            if self.per_linear:
                prefix = gain_tag(i, "")
                out.update({t: v for t, v in self._gain.items() if t.startswith(prefix)})
        if self._final is not None:
            out[FINAL_HIDDEN_TAG] = self._final
        return out


def compute_rms(model: GPT, idx: Tensor, per_linear: bool = False, **forward_kwargs: Any) -> dict[str, float]:
    """Run ``model(idx)`` once under ``torch.no_grad()`` with the monitor's hooks and return ``{tag: value}``.

    The same measurement the callback logs, for one batch, without a trainer (hooks are removed afterwards).
    """
    probe = RMSProbe(model, per_linear=per_linear).attach()
    try:
        with torch.no_grad():
            model(idx, **forward_kwargs)
    finally:
        probe.detach()
    values = probe.results()
    if not values:
        return {}
    flat = torch.stack(list(values.values())).tolist()
    return dict(zip(values.keys(), flat))


# --------------------------------------------------------------------------------------------------------------------
# cross-rank mean
# --------------------------------------------------------------------------------------------------------------------


class _TagMean(Metric):
    """Mean of a fixed-length vector of values over updates and ranks; entries absent on a rank do not count.

    (``torchmetrics.aggregation.MeanMetric`` reduces a vector to one scalar; this keeps one mean per tag with a
    single all-gather per sync.)
    """

    full_state_update = False
    total: Tensor
    count: Tensor

    def __init__(self, size: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("total", default=torch.zeros(size, dtype=torch.float32), dist_reduce_fx="sum")
        self.add_state("count", default=torch.zeros(size, dtype=torch.float32), dist_reduce_fx="sum")

    def update(self, values: Tensor, present: Tensor) -> None:
        values = values.to(self.total)
        self.total += torch.where(present, values, torch.zeros_like(values))
        self.count += present.to(self.count)

    def compute(self) -> Tensor:
        """``stack([mean, count])``; the mean is NaN where no rank measured the tag (count 0)."""
        return torch.stack([self.total / self.count, self.count])


# --------------------------------------------------------------------------------------------------------------------
# the callback
# --------------------------------------------------------------------------------------------------------------------


class ActivationRMSMonitor(Callback):
    r"""Log per-block activation RMS of the litgpt ``GPT`` inside the LightningModule to the trainer's loggers.

    Args:
        every_n_steps: measure the first micro-batch of every optimizer step ``s`` with ``s % every_n_steps == 0``
            (``s = trainer.global_step`` before the update) and log at step ``s``.
        per_linear: also log ``rms/gain/block_{i:02d}/{name}`` = RMS(y)/RMS(x) for every ``nn.Linear`` of every
            block (paper Eq. 3). One extra hook per linear on logging steps.
        write_layout: write the TensorBoard custom-scalars layout in ``on_fit_start`` and again whenever the
            block count changes (rank zero, TensorBoard loggers only).

    Raises:
        MisconfigurationException: ``every_n_steps < 1``; the trainer has no logger; the LightningModule holds no
            ``litgpt.model.GPT`` or several.

    Example::

        from lightning.pytorch.loggers import TensorBoardLogger
        from lightning_sparkling import ActivationRMSMonitor

        trainer = L.Trainer(logger=TensorBoardLogger("runs"), callbacks=[ActivationRMSMonitor(every_n_steps=50)])

    After a logging step, :attr:`last_values` holds the ``{tag: float}`` that was logged and :attr:`last_step` its
    step.
    """

    def __init__(self, every_n_steps: int = 50, per_linear: bool = False, write_layout: bool = True) -> None:
        if not isinstance(every_n_steps, int) or isinstance(every_n_steps, bool) or every_n_steps < 1:
            raise MisconfigurationException(
                f"ActivationRMSMonitor: every_n_steps must be an int >= 1, got {every_n_steps!r}"
            )
        self.every_n_steps = every_n_steps
        self.per_linear = per_linear
        self.write_layout = write_layout
        self.last_values: dict[str, float] = {}
        self.last_step: int | None = None
        self._probe: RMSProbe | None = None
        self._probe_step: int | None = None
        self._metric: _TagMean | None = None
        self._metric_key: tuple | None = None
        self._warned_nothing = False
        self._gpt: GPT | None = None
        self._gpt_name: str | None = None  # its path in the LightningModule (get_submodule)
        self._layout_blocks: int | None = None  # the block count the layout was last written for
        self._eager = contextlib.ExitStack()  # a compiled model's eager stance during a measured forward

    # -- setup ---------------------------------------------------------------------------------------------------
    @override
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.loggers:
            raise MisconfigurationException(
                "Cannot use `ActivationRMSMonitor` callback with `Trainer` that has no logger."
            )
        model = find_gpt(pl_module)
        self._gpt = model
        self._gpt_name = next((n for n, m in pl_module.named_modules() if m is model), None)
        self._layout_blocks = None
        self._check_depth(trainer, pl_module)

    def _check_depth(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """(Re)write the layout when the model's block count differs from the one it was written for. The GPT is
        looked up again: a growth under FSDP2 or FSDP1 puts a new GPT in the module."""
        if not self.write_layout or self._gpt is None:
            return
        n_blocks = len(self._current_gpt(pl_module).transformer.h)
        if n_blocks == self._layout_blocks:
            return
        step = None if self._layout_blocks is None else trainer.global_step  # the first one: as before, no step
        self._layout_blocks = n_blocks
        self._write_layout(trainer, n_blocks, step)

    def _current_gpt(self, pl_module: pl.LightningModule) -> GPT:
        """The GPT in the module now, without walking every module each step: the cached one while its module
        attribute still holds it (a backend that grows by building a new GPT replaces that attribute)."""
        name = self._gpt_name
        if name is not None:
            with contextlib.suppress(AttributeError):
                if pl_module.get_submodule(name) is self._gpt:
                    return self._gpt
        self._gpt = find_gpt(pl_module)
        self._gpt_name = next((n for n, m in pl_module.named_modules() if m is self._gpt), None)
        return self._gpt

    @rank_zero_only
    def _write_layout(self, trainer: pl.Trainer, n_blocks: int, step: int | None = None) -> None:
        from lightning.pytorch.loggers import TensorBoardLogger

        from lightning_sparkling.dashboards.tb_layout import write_layout

        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                write_layout(logger, n_blocks=n_blocks, per_linear=self.per_linear, step=step)

    # -- measurement ---------------------------------------------------------------------------------------------
    def _is_logging_step(self, step: int) -> bool:
        return step % self.every_n_steps == 0 and step != self.last_step and step != self._probe_step

    @override
    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._check_depth(trainer, pl_module)  # a growth (or a resume's regrowth) since the last batch
        step = trainer.global_step
        if not self._is_logging_step(step):
            return
        self._detach()
        self._gpt = find_gpt(pl_module)
        self._probe = RMSProbe(self._gpt, per_linear=self.per_linear).attach(lazy=True)
        self._probe_step = step
        if is_compiled(pl_module):  # hooks run in eager code only: this forward (and its backward) runs eagerly
            self._eager.enter_context(torch.compiler.set_stance("force_eager"))

    @override
    def on_before_backward(self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: Tensor) -> None:
        if self._probe is not None:
            self._probe.detach()
        self._eager.close()  # the backward of an eager forward is eager anyway; later micro-batches compiled

    @override
    def on_train_batch_end(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # a growth in an earlier callback's on_train_batch_end: layout at its step
        self._check_depth(trainer, pl_module)
        probe, step = self._probe, self._probe_step
        if probe is None or step is None:
            return
        probe.detach()
        self._eager.close()
        self._probe = None
        self._probe_step = None
        values = probe.results()
        self.last_step = step
        if not values and not self._warned_nothing:
            self._warned_nothing = True
            rank_zero_warn(
                f"ActivationRMSMonitor: no hook fired during the forward of step {step}, nothing is logged (the "
                "GPT was not called by the training step?); call "
                "`lightning_sparkling.callbacks.rms_monitor.compute_rms` on a batch yourself."
            )
        self.last_values = self._reduce(probe.tags, values, pl_module.device)
        if self.last_values:
            for logger in trainer.loggers:
                logger.log_metrics(self.last_values, step=step)

    def _reduce(self, tags: list[str], values: dict[str, Tensor], device: torch.device) -> dict[str, float]:
        """Average ``values`` over ranks (torchmetrics sync); ``{tag: float}`` for tags measured on some rank."""
        key = (tuple(tags), str(device))
        if self._metric is None or self._metric_key != key:
            self._metric = _TagMean(len(tags)).to(device)
            self._metric_key = key
        metric = self._metric
        vec = torch.full((len(tags),), float("nan"), dtype=torch.float32, device=device)
        present = torch.zeros(len(tags), dtype=torch.bool, device=device)
        if values:
            index = {t: k for k, t in enumerate(tags)}
            pos = torch.tensor([index[t] for t in values], device=device)
            vec[pos] = torch.stack([v.to(device=device, dtype=torch.float32) for v in values.values()])
            present[pos] = True
        metric.update(vec, present)
        mean, count = metric.compute()  # synced over ranks (no-op in a single process)
        metric.reset()
        keep = (count > 0).tolist()
        return {t: v for t, v, k in zip(tags, mean.tolist(), keep) if k}

    # -- cleanup -------------------------------------------------------------------------------------------------
    def _detach(self) -> None:
        self._eager.close()
        if self._probe is not None:
            self._probe.detach()
        self._probe = None
        self._probe_step = None

    @override
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._detach()

    @override
    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._detach()

    @override
    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._detach()

    @override
    def on_exception(self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException) -> None:
        self._detach()

    @override
    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._detach()
        self._gpt = None
