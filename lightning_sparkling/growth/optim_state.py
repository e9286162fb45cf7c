"""Optimizer side of a growth: patch parameter references and per-element state, and drive the learning rate of
new entries.

Two pieces, both independent of Lightning:

- :func:`plan_optimizer_patch` / :class:`OptimizerPatch`: swap every grown ``Parameter`` in the optimizer's param
  groups for its grown successor and grow its per-element state by the recipe (paper 4.2.1):
  ``asymmetric`` ``S' = [S, 0]``; ``copy`` new entries copy their source's state; ``drop`` everything zero;
  ``asymmetric-scaled`` like asymmetric with fan-in first moments scaled by ``alpha`` and second moments by
  ``alpha^2``; ``scaled`` like copy, with every entry's state (old and new) scaled that way (the symmetric
  "Scaled Optimizer States" baseline, paper appendix "Comparison to Prior Dynamics-Based Strategies"). Scalar
  state (``step``) is kept. Computed first, applied in one go, undoable. The swaps, a depth growth's new blocks and
  the regrouping are :func:`plan_param_moves`, which the sharded backends' planners call with their own state.
- :class:`RewarmupRescale`: per-element learning rate for new entries of fused tensors. Right before
  ``optimizer.step()`` it saves the new entries; right after, it rescales their update by
  ``lr_new / lr_group``: ``p_new <- before + (lr_new / lr_group) * (after - before)``. Exact for optimizers whose
  update is linear in the learning rate (SGD with or without momentum, Adam, AdamW with decoupled weight decay,
  Muon): the update is computed with the same gradients and state, only its step size differs. Old entries are
  never touched, so the user's schedule drives them exactly as before.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import cast

import torch
import torch.nn as nn

from lightning_sparkling.growth.plan import ChannelChange, GrowthError, TensorPlan
from lightning_sparkling.growth.surgery import GrowthResult, fan_in_shares, grow_tensor

FIRST_MOMENT_KEYS = ("exp_avg", "momentum_buffer")
SECOND_MOMENT_KEYS = ("exp_avg_sq", "max_exp_avg_sq")
#: optimizers whose per-element state is known: every tensor of the parameter's shape is a moment, the rest scalars
SUPPORTED_OPTIMIZERS = ("SGD", "Adam", "AdamW", "Muon")


def check_optimizer_supported(optimizer: torch.optim.Optimizer) -> None:
    """Refuse optimizers whose per-element state layout is unknown (before any training step).

    Raises:
        GrowthError: naming the optimizer class and the supported ones.
    """
    name = type(optimizer).__name__
    if not any(cls.__name__ in SUPPORTED_OPTIMIZERS for cls in type(optimizer).__mro__):
        raise GrowthError(
            f"optimizer {name} is not supported by GrowthCallback: its per-element state layout is unknown, so "
            f"growth cannot patch it. Supported: {', '.join(SUPPORTED_OPTIMIZERS)} (torch.optim)"
        )


def grow_state(
    key: str, value: object, spec: TensorPlan, channels: Mapping[str, ChannelChange], recipe: str, optimizer_name: str
) -> object:
    """Grow one optimizer-state entry of a grown parameter by ``recipe`` (a plain, full tensor)."""
    if not isinstance(value, torch.Tensor) or value.ndim == 0 or tuple(value.shape) == ():
        return value  # scalars (step) and None (SGD without momentum) are kept
    if tuple(value.shape) != spec.old_shape:
        raise GrowthError(
            f"{optimizer_name} state {key!r} of {spec.name!r} has shape {tuple(value.shape)}, not the parameter's "
            f"{spec.old_shape}: this per-element layout is unknown, growth cannot patch it"
        )
    if recipe == "copy":
        return grow_tensor(value, spec, channels, mode="copy", scale=1.0)
    if recipe == "scaled":
        grown = grow_tensor(value, spec, channels, mode="copy", scale=1.0)
    else:
        grown = grow_tensor(value, spec, channels, mode="zero", scale=1.0)
    if recipe == "drop":
        return torch.zeros_like(grown)
    if recipe in ("asymmetric-scaled", "scaled"):
        # scaled like the weights: alpha (and, with an uneven split, each copied fan-in column's share)
        shares = fan_in_shares(spec, channels)
        if spec.scale == 1.0 and shares is None:
            return grown
        if key in SECOND_MOMENT_KEYS:
            power = 2
        elif key in FIRST_MOMENT_KEYS:
            power = 1
        else:
            raise GrowthError(
                f"optimizer_state={recipe!r} does not know how {optimizer_name} state {key!r} scales; "
                "use 'asymmetric' or 'copy'"
            )
        if shares is None:
            grown = (grown.float() * spec.scale**power).to(grown.dtype)
        else:
            factor = (shares * spec.scale) ** power
            grown = (grown.double() * factor.to(grown.device)).to(grown.dtype)
    return grown


def moves_only(spec: TensorPlan) -> bool:
    """Whether a planned tensor keeps its values and only changes name (a kept block moved by a depth growth): its
    optimizer state is carried over as is, whatever the recipe (as on one device, where it stays the same
    ``Parameter``)."""
    return not spec.dims and spec.scale == 1.0 and not spec.fresh


@dataclass
class OptimizerPatch:
    """A computed (not yet applied) patch of one optimizer. ``apply()`` then, if needed, ``undo()``."""

    optimizer: torch.optim.Optimizer
    # group, idx, old, new
    replacements: list[tuple[int, int, nn.Parameter, nn.Parameter]] = field(default_factory=list)
    additions: list[tuple[int, nn.Parameter]] = field(default_factory=list)  # group, new block's parameter
    new_state: dict[nn.Parameter, dict] = field(default_factory=dict)
    regrouped: dict[int, list[nn.Parameter]] = field(default_factory=dict)  # group -> its params after a depth growth
    _old_state: dict[nn.Parameter, dict] = field(default_factory=dict)
    _old_lists: dict[int, list[nn.Parameter]] = field(default_factory=dict)

    def apply(self) -> None:
        for g, i, old, new in self.replacements:
            self.optimizer.param_groups[g]["params"][i] = new
            if old in self.optimizer.state:
                self._old_state[old] = self.optimizer.state.pop(old)
            if new in self.new_state:
                self.optimizer.state[new] = self.new_state[new]
        for g, params in self.regrouped.items():
            self._old_lists[g] = self.optimizer.param_groups[g]["params"]
            self.optimizer.param_groups[g]["params"] = list(params)
        for _, new in self.additions:
            if new in self.new_state:
                self.optimizer.state[new] = self.new_state[new]

    def undo(self) -> None:
        for g, params in self._old_lists.items():
            self.optimizer.param_groups[g]["params"] = params
        self._old_lists.clear()
        for _, new in self.additions:
            self.optimizer.state.pop(new, None)
        for g, i, old, new in self.replacements:
            self.optimizer.param_groups[g]["params"][i] = old
            self.optimizer.state.pop(new, None)
            if old in self._old_state:
                self.optimizer.state[old] = self._old_state[old]
        self._old_state.clear()


def plan_optimizer_patch(
    optimizer: torch.optim.Optimizer,
    result: GrowthResult,
    recipe: str,
    *,
    to_full: Callable[[torch.Tensor], torch.Tensor] = lambda t: t,
    like_param: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = lambda t, p: t,
) -> OptimizerPatch:
    """Compute the patch of ``optimizer`` for a growth (nothing is modified).

    Every parameter in ``result.old_params`` found in the optimizer is swapped for its successor. Every
    parameter of a new block (``result.added``) joins the param group of its source, in the same optimizer, with
    the source's state grown by ``recipe`` (``asymmetric``: zero moments, the source's ``step``; ``copy``: the
    source's state); such a group is put in the grown model's parameter order (what ``configure_optimizers``
    builds on the grown model at a resume, when it filters ``model.parameters()`` into groups). Per-element state of a
    grown parameter is grown by ``recipe`` one tensor at a time: ``to_full`` gathers it first and ``like_param`` lays
    the result out like the new parameter (both identity on
    one device; gather / re-shard under FSDP2). State of a replaced but unchanged parameter is carried over as is.

    Args:
        optimizer: a torch optimizer holding (some of) the model's parameters.
        result: the growth (maps old -> new parameters and gives each parameter's plan).
        recipe: ``asymmetric``, ``copy``, ``drop``, ``asymmetric-scaled`` or ``scaled``.

    Raises:
        GrowthError: for an unsupported optimizer or a state entry whose layout is unknown.
    """
    check_optimizer_supported(optimizer)

    def grown_state(old: nn.Parameter, name: str, new: nn.Parameter) -> dict | None:
        state = optimizer.state.get(old)
        if not state:
            return None
        spec = result.plan.tensors.get(name)
        if spec is None or moves_only(spec):
            return dict(state)  # unchanged values (a sharded backend's new parameter, or a block that only moved)
        return {
            key: like_param(cast(torch.Tensor, grow_state(key, to_full(value), spec, result.plan.channels, recipe,
                                                          type(optimizer).__name__)), new)  # a tensor's
            if isinstance(value, torch.Tensor) and value.ndim > 0 else value
            for key, value in state.items()
        }

    return plan_param_moves(optimizer, result, grown_state)


#: ``(old parameter, or a new block parameter's source; grown name; new parameter) -> the new parameter's state``
#: (``None``: no state) for :func:`plan_param_moves`
StateOf = Callable[[nn.Parameter, str, nn.Parameter], "dict | None"]


def plan_param_moves(optimizer: torch.optim.Optimizer, result: GrowthResult, state_of: StateOf) -> OptimizerPatch:
    """The steps every optimizer patch shares, whatever the strategy (one device, FSDP2, FSDP1): each parameter of
    ``result.old_params`` the optimizer holds is swapped for its successor; each new block's parameter
    (``result.added``) joins the param group of its source, and such a group is listed in the grown model's
    parameter order (``result.order``: what the module's own ``configure_optimizers`` builds on the grown model
    at a resume, and optimizer state loads by position). ``state_of`` gives each new parameter's state, in that
    order (replacements by param group, then ``result.added``: the same on every rank, so it may gather); a new
    block's scalar state (Adam's ``step``) is cloned, since torch updates it in place once per parameter
    (per-element state is the strategy's to build: grown afresh, or filled in later under FSDP1).

    Args:
        optimizer: a torch optimizer holding (some of) the model's parameters.
        result: the growth (old -> new parameters, new blocks' parameters and their sources).
        state_of: ``(old or source parameter, grown name, new parameter) -> state`` (``None``: none).
    """
    name_of = {id(p): n for n, p in result.old_params.items()}
    group_of = {id(p): g for g, group in enumerate(optimizer.param_groups) for p in group["params"]}
    patch = OptimizerPatch(optimizer)
    for g, group in enumerate(optimizer.param_groups):
        for i, p in enumerate(group["params"]):
            name = name_of.get(id(p))
            if name is None:
                continue
            new = result.new_params[name]
            patch.replacements.append((g, i, p, new))
            state = state_of(p, name, new)
            if state is not None:
                patch.new_state[new] = state
    for name, (source, new) in result.added.items():
        source_group = group_of.get(id(source))
        if source_group is None:
            continue  # the source is not trained by this optimizer
        patch.additions.append((source_group, new))
        if source_group not in patch.regrouped:
            patch.regrouped[source_group] = [result.new_params.get(name_of.get(id(p), ""), p)
                                             for p in optimizer.param_groups[source_group]["params"]]
        patch.regrouped[source_group].append(new)
        state = state_of(source, name, new)
        if state is not None:
            patch.new_state[new] = {key: value.clone() if isinstance(value, torch.Tensor) and value.ndim == 0
                                    else value for key, value in state.items()}
    rank = {id(p): i for i, p in enumerate(result.order)}
    for params in patch.regrouped.values():
        params.sort(key=lambda p: rank.get(id(p), len(rank)))
    return patch


@dataclass
class NewEntryRegion:
    """The new entries of one stage in one parameter and how to find their learning rate.

    ``pieces`` are ``(tensor, index)`` pairs: the tensor whose entries the optimizer updates in place (the
    parameter's data, or this rank's shard of a DTensor parameter) and a tuple of slices into it, or a callable
    giving the view (FSDP1's :class:`~lightning_sparkling.parallel.fsdp1.FlatPiece`, evaluated at each step because
    FSDP1 re-points the parameter's 1-D shard view); disjoint.
    """

    param: nn.Parameter
    pieces: list[tuple[torch.Tensor, tuple[slice, ...] | Callable[[torch.Tensor], torch.Tensor]]]
    lr_fn: Callable[[], float]  # the new entries' learning rate for the step about to be taken

    def views(self) -> list[torch.Tensor]:
        """The new entries as views of the tensors the optimizer updates (writes go to the parameter)."""
        return [index(tensor.data) if callable(index) else tensor[index] for tensor, index in self.pieces]


class RewarmupRescale:
    """Drive new entries' learning rate inside fused tensors by rescaling their update after each step.

    One instance per optimizer. ``regions`` maps each param group index to the new-entry regions of its
    parameters. Hooks are torch's ``register_step_pre_hook`` / ``register_step_post_hook``, so every way of
    calling ``optimizer.step()`` (Lightning's automatic and manual optimization, precision plugins) is covered;
    a step skipped by a gradient scaler is skipped here too.

    The cost per step is one copy of the new entries before the step (into buffers kept between steps, so memory
    holds the new entries once more) and one in-place ``lerp`` after it, each one fused ``torch._foreach_*`` call
    over every new-entry slice (per distinct rate ratio); each distinct ``lr_fn`` is called once per step.

    Args:
        optimizer: the optimizer whose steps are rescaled.
        regions: ``{group_index: [NewEntryRegion, ...]}``.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, regions: Mapping[int, Iterable[NewEntryRegion]]) -> None:
        self.optimizer = optimizer
        self.regions = {g: list(r) for g, r in regions.items() if r}
        self._saved: list[tuple[float, tuple[list[torch.Tensor], list[torch.Tensor]]]] = []  # ratio, (views, before)
        self._buffers: dict[int, list[torch.Tensor]] = {}  # reused every step: no allocation per step
        self._view_cache: dict[int, list[torch.Tensor]] = {}
        self._warned = False
        self._handles = [optimizer.register_step_pre_hook(self._pre), optimizer.register_step_post_hook(self._post)]

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        self._saved = []
        self._buffers = {}
        self._view_cache = {}

    def _views(self, region: NewEntryRegion) -> list[torch.Tensor]:
        """The region's views, made once per region when every piece is a slice (the tensors are the parameters'
        own, replaced only by a growth or a rebuild, which installs new hooks); callable pieces (FSDP1) each step."""
        views = self._view_cache.get(id(region))
        if views is None:
            views = region.views()
            if not any(callable(index) for _, index in region.pieces):
                self._view_cache[id(region)] = views
        return views

    @torch.no_grad()
    def _pre(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        self._saved = []
        rates: dict[int, float] = {}  # one call per learning-rate function and step, however many regions share it
        by_ratio: dict[float, tuple[list[torch.Tensor], list[torch.Tensor]]] = {}
        for g, regions in self.regions.items():
            lr_group = float(optimizer.param_groups[g]["lr"])
            for region in regions:
                # No look at ``region.param.grad`` here: under Lightning's automatic optimization the closure (zero
                # grad, forward, backward) runs *inside* ``optimizer.step`` after this hook, so ``.grad`` is stale or
                # None at this point (accumulation 1, first step after a resume or a rebuild). A parameter the
                # optimizer then skips keeps its values, and the rescale of a zero update is a no-op.
                lr_new = rates.get(id(region.lr_fn))
                if lr_new is None:
                    lr_new = rates[id(region.lr_fn)] = float(region.lr_fn())
                if lr_new == lr_group:
                    continue
                if lr_group == 0.0:
                    if not self._warned:
                        warnings.warn(
                            "the baseline learning rate is 0 for this step, so the update-rescale cannot give new "
                            f"entries their re-warmup rate ({lr_new:.3g}); they take no step either",
                            stacklevel=2,
                        )
                        self._warned = True
                    continue
                views = self._views(region)
                buffers = self._buffers.get(id(region))
                if buffers is None:
                    buffers = self._buffers[id(region)] = [torch.empty_like(v) for v in views]
                saved_views, saved = by_ratio.setdefault(lr_new / lr_group, ([], []))
                saved_views += views
                saved += buffers
        if by_ratio:  # one fused copy of every new-entry slice of this step
            torch._foreach_copy_([b for _, bs in by_ratio.values() for b in bs],
                                 [v for vs, _ in by_ratio.values() for v in vs])
        self._saved = list(by_ratio.items())

    @torch.no_grad()
    def _post(self, optimizer: torch.optim.Optimizer, args: object, kwargs: object) -> None:
        for ratio, (views, before) in self._saved:
            full = [(v, b) for v, b in zip(views, before) if b.dtype in (torch.float32, torch.float64)]
            if full:
                # after + (1 - ratio)(before - after) == before + ratio (after - before), in place: one fused pass
                torch._foreach_lerp_([v for v, _ in full], [b for _, b in full], 1.0 - ratio)
            for view, start in zip(views, before):
                if start.dtype not in (torch.float32, torch.float64):  # low precision: in float32, round once
                    view.copy_(start.float().lerp_(view.float(), ratio))
        self._saved = []
