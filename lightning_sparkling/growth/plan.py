"""From a litgpt ``Config`` and a :class:`GrowthStage` to a :class:`GrowthPlan`: the grown ``Config`` and, for every
tensor of the ``GPT`` that changes, which dimension grows, on which channel axis, fan-in or fan-out, with which init
and which scale, or which new module it belongs to and what it starts from. No model tensors are touched here (the
structure comes from a ``GPT`` built on the meta device).

The sizes a stage grows are the registered axes' (:mod:`~lightning_sparkling.growth.axes`: width, heads, depth,
experts). :func:`plan_growth` runs them in three phases: each active axis' channel dimensions
(:class:`ChannelChange`), the tensors on those dimensions (litgpt's channel layout,
:func:`~lightning_sparkling.growth.axes.channels.channel_tensors`), then each axis' own tensor plans (depth re-keys
every block tensor to its new position, experts add new experts). Nothing here names an axis.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

from lightning_sparkling.growth.axes import PlanContext, active_axes, axis_key, axis_of_size, checked_model, plan_axes
from lightning_sparkling.growth.axes.channels import SHARED_EXPERT_CHANNEL, SUPPORTED_MLPS, channel_tensors
from lightning_sparkling.growth.errors import GrowthError  # defined there; importable from here as before
from lightning_sparkling.growth.operators import runs
from lightning_sparkling.growth.recipes import AUTO, resolve_recipe
from lightning_sparkling.growth.scaling import make_generator
from lightning_sparkling.growth.stage import GrowthStage
from lightning_sparkling.growth.types import ChannelChange, DimGrowth, TensorPlan  # importable from here as before

if TYPE_CHECKING:
    from litgpt import GPT, Config

__all__ = ["SHARED_EXPERT_CHANNEL", "SUPPORTED_MLPS", "SUPPORTED_NORMS", "ChannelChange", "DimGrowth", "GrowthError",
           "GrowthPlan", "TensorPlan", "build_meta_gpt", "checked_plan", "grown_config", "plan_growth",
           "resolve_stage", "size_changes", "stage_config", "target_config"]

SUPPORTED_NORMS = ("RMSNorm", "LayerNorm")


@dataclass
class GrowthPlan:
    """Everything a growth does, decided before any tensor is touched.

    Attributes:
        stage: the stage. stage_index: its position in the callback's list (part of every random seed).
        old_config / new_config: litgpt ``Config`` before and after.
        channels: the channel dimensions that grow (:class:`ChannelChange`), by name.
        tensors: ``{state_dict name: TensorPlan}`` for every tensor that changes, by its name in the grown model;
            tensors not listed keep their values (and names). A tied ``lm_head.weight`` / ``transformer.wte.weight``
            appears under both names. Under a depth growth every tensor of a block that moves or is new is listed.
        tied_embeddings: the plan is for a model whose ``lm_head`` and ``wte`` share one weight.
        seed: the growth seed.
        changes: each axis' record of its change (:mod:`~lightning_sparkling.growth.axes`), by axis name: the
            widths' ``{name: ChannelChange}``, the heads' ``HeadLayout``, the ``DepthChange``, the ``ExpertsChange``;
            an axis that records nothing (a config-field axis such as ``rope_base``) has no entry.
        active_axes: the names of the axes the stage grows (active in it), in registry order: every hook of these runs
            (:func:`~lightning_sparkling.growth.axes.plan_axes`), whether or not they recorded a change.
    """

    stage: GrowthStage
    stage_index: int
    old_config: Config
    new_config: Config
    channels: dict[str, ChannelChange]
    tensors: dict[str, TensorPlan]
    tied_embeddings: bool
    seed: int
    changes: dict[str, object] = field(default_factory=dict)
    active_axes: tuple[str, ...] = ()
    #: ``{state_dict name: shape}`` of ``GPT(old_config)``, read by plan_growth and kept for the growth's check
    _old_shapes: dict[str, tuple[int, ...]] | None = field(default=None, repr=False, compare=False)
    #: the stage as given to plan_growth (``stage`` is it resolved: a ``model_name`` target's sizes set)
    _given_stage: GrowthStage | None = field(default=None, repr=False, compare=False)
    #: ``{pre-growth name: grown name}`` of tensors moved outside a renaming axis (:func:`_moved_names`), cached
    _moved: dict[str, str] | None = field(default=None, repr=False, compare=False)

    def old_shapes(self) -> dict[str, tuple[int, ...]]:
        """``{state_dict name: shape}`` of ``GPT(old_config)``: what the model to grow must hold."""
        if self._old_shapes is None:
            self._old_shapes = _shapes(build_meta_gpt(self.old_config))
        return self._old_shapes

    def fits(self, config, stage: GrowthStage, *, seed: int, stage_index: int, tied_embeddings: bool) -> bool:
        """Whether this is the plan :func:`plan_growth` gives for these arguments: the same stage, position, seed
        and tying, on a model of a config equal to :attr:`old_config` (a plan computed once, e.g. by a dry run over
        the stages, is used at growth time only where it fits)."""
        return (stage in (self.stage, self._given_stage) and self.stage_index == stage_index and self.seed == seed
                and self.tied_embeddings == tied_embeddings and self.old_config == config)

    def carry_region(self, name: str, pieces: list[tuple[slice, ...]]) -> tuple[str | None, list[tuple[slice, ...]]]:
        """An earlier stage's new-entry ``pieces`` of pre-growth tensor ``name`` in the grown model: its new name
        (:meth:`carry`) and the pieces re-indexed where this growth moves old entries (heads in the fused ``qkv``
        rows, ``attn.proj`` columns); appended channel dimensions keep their explicit slices."""
        new = self.carry(name)
        spec = self.tensors.get(new) if new is not None else None
        moved = [d for d in spec.dims if self.channels[d.channel].layout is not None] if spec is not None else []
        if spec is None or not moved or spec.fresh:
            return new, pieces
        out = []
        for piece in pieces:
            choices = [[s] for s in piece]
            for d in moved:
                positions = self.channels[d.channel].kept_positions()[piece[d.dim]]
                choices[d.dim] = [slice(a, b) for a, b in _runs_of(positions)]
            out += [tuple(index) for index in itertools.product(*choices)]
        return new, out

    def carry(self, name: str) -> str | None:
        """The grown model's name of a pre-growth tensor ``name`` (a kept block may move; a dense MLP that becomes
        expert 0 moves); ``None`` for names that are not in the model.

        Example::

            >>> from litgpt import Config
            >>> cfg = Config(n_embd=16, n_head=2, n_layer=2, vocab_size=32, block_size=8)
            >>> plan = plan_growth(cfg, GrowthStage(0, n_layer=4, depth_order="interleave"))
            >>> plan.carry("transformer.h.1.attn.qkv.weight")
            'transformer.h.2.attn.qkv.weight'
        """
        if self._moved is None:
            self._moved = _moved_names(self.tensors)
        if name in self._moved:  # an explicit move (a dense MLP to expert 0, wherever its block went)
            return self._moved[name]
        for axis in plan_axes(self):
            moved = axis.carry(self, name)
            if moved is not NotImplemented:
                return moved
        return name

    @property
    def moves_entries(self) -> bool:
        """Whether pre-growth entries change name or position (a structural axis, or channels laid out anew), so
        that what an earlier stage recorded by name and index must be carried forward (:meth:`carry_region`)."""
        return (any(axis.structural for axis in plan_axes(self))
                or any(change.layout is not None for change in self.channels.values()))

    @property
    def adds_entries(self) -> bool:
        """Whether the growth adds entries (new rows or columns, new blocks, experts or heads): what the init pair,
        the optimizer state of new entries and their re-warmup act on. A growth that only sets ``litgpt.Config``
        fields (a ``rope_base`` axis) or only moves entries adds none.

        Example::

            >>> from litgpt import Config
            >>> cfg = Config(n_embd=16, n_head=2, n_layer=2, vocab_size=32, block_size=8)
            >>> plan_growth(cfg, GrowthStage(0, n_layer=4)).adds_entries
            True
        """
        return any(spec.new_region() for spec in self.tensors.values())

    @property
    def rewarms(self) -> bool:
        """Whether the stage's re-warmup applies: ``rewarmup_ratio`` set, and new entries to re-warm
        (:attr:`adds_entries`) or ``rewarmup_scope='all'`` (every entry follows it). A stage without one needs no
        ``rewarmup_*`` keys that fit the run, and gets no ``growth/lr_new/stage_k`` tag."""
        stage = self.stage
        return stage.rewarmup_ratio is not None and (stage.rewarmup_scope == "all" or self.adds_entries)

    @property
    def depth(self):
        """The :class:`~lightning_sparkling.growth.depth_maps.DepthChange` of the stage, or ``None`` when it keeps
        ``n_layer`` (``changes["depth"]``)."""
        return self.changes.get("depth")

    @property
    def heads(self):
        """The :class:`~lightning_sparkling.growth.head_layout.HeadLayout` of the stage, or ``None`` when it keeps the
        heads (``changes["heads"]``)."""
        return self.changes.get("heads")

    @property
    def recipe(self) -> str:
        """The recipe the plan grows by: the stage's, or ``paper`` for an ``auto`` stage planned without a schedule
        (its fields hold the paper's values until the run's schedule resolves it)."""
        return "paper" if self.stage.recipe == AUTO else self.stage.recipe

    def alphas(self) -> dict[str, float]:
        """Fan-in scale per growing axis, e.g. ``{"n_embd": 0.5, "intermediate_size": 0.5}``."""
        return {name: change.alpha for name, change in self.channels.items()}

    def tensor_generator(self, name: str) -> torch.Generator:
        """The generator for ``random`` draws of tensor ``name`` (independent of growth order and rank)."""
        return make_generator(self.seed, "stage", self.stage_index, "tensor", name)

    def perturb_generator(self, name: str) -> torch.Generator:
        """The generator of tensor ``name``'s ``perturb`` draws (its own stream: ``random`` inits are unchanged)."""
        return make_generator(self.seed, "stage", self.stage_index, "tensor", name, "perturb")


def _moved_names(tensors: dict[str, TensorPlan]) -> dict[str, str]:
    """``{pre-growth name: grown name}`` of the tensors a growth moves without a depth change (a dense MLP that
    becomes expert 0 of a mixture of experts)."""
    return {spec.source: name for name, spec in tensors.items() if spec.source and spec.source != name
            and not spec.fresh and spec.source not in tensors}


def _runs_of(positions: torch.Tensor) -> list[tuple[int, int]]:
    """Sorted positions as ``(start, stop)`` runs."""
    mask = torch.zeros(int(positions.max()) + 1 if positions.numel() else 0, dtype=torch.bool)
    mask[positions] = True
    return list(runs(mask))


def target_config(stage: GrowthStage):
    """The litgpt ``Config`` a stage grows into (``model_name`` / ``model_config``), or ``None``.

    Raises:
        GrowthError: for an unknown config name or fields litgpt refuses.
    """
    from litgpt import Config

    try:
        if stage.model_name is not None:
            return Config.from_name(stage.model_name)
        if stage.model_config is not None:
            return Config(**stage.model_config)
    except (ValueError, TypeError, AssertionError) as err:
        what = f"model_name={stage.model_name!r}" if stage.model_name else f"model_config={stage.model_config!r}"
        raise GrowthError(f"GrowthStage({what}): not a litgpt config ({err})") from err
    return None


#: fields of a litgpt Config that hold no parameters: taken from the target of a ``model_name`` stage
_FREE_FIELDS = ("name", "hf_config", "block_size")
#: per-block lists, re-derived from the source blocks by a depth growth
_PER_BLOCK_FIELDS = ("sliding_window_indices", "rope_indices", "first_k_dense_replace")
#: fields derived from others by ``Config.__post_init__``
_DERIVED_FIELDS = ("rope_n_elem",)


def resolve_stage(config, stage: GrowthStage) -> GrowthStage:
    """``stage`` with its sizes explicit: a ``model_name`` / ``model_config`` stage becomes the stage of every size
    that differs between ``config`` and the target (its other keys kept; the target stays named in ``model_name`` /
    ``model_config`` so that the grown config takes its ``name`` and ``block_size``). Other stages come back unchanged.

    Raises:
        GrowthError: naming the field and both values, for a difference that is not a size (``head_size``,
            vocabulary, norm or MLP class, rotary settings, bias, ...) or a size that would shrink, and when the target
            is the model's shape.

    Example::

        >>> from litgpt import Config
        >>> stage = resolve_stage(Config.from_name("pythia-14m"), GrowthStage(10, model_name="pythia-31m"))
        >>> stage.sizes
        {'n_embd': 256, 'intermediate_size': 1024, 'n_head': 8, 'n_query_groups': 8}
    """
    target = target_config(stage)
    if target is None:
        return stage
    what = f"model_name={stage.model_name!r}" if stage.model_name else "model_config"
    sizes = {}
    for f in dataclasses.fields(config):
        key = f.name
        old, new = getattr(config, key), getattr(target, key)
        if key in _FREE_FIELDS or key in _PER_BLOCK_FIELDS or key in _DERIVED_FIELDS or old == new:
            continue
        if key not in axis_of_size():  # every registered axis' sizes: e.g. an MoE target's n_expert
            raise GrowthError(f"GrowthStage({what}): the target's {key}={new!r} differs from the model's "
                              f"{key}={old!r}; only sizes (n_embd, n_head, n_query_groups, intermediate_size, "
                              "moe_intermediate_size, n_layer, n_expert, n_expert_per_token) can grow; grow into a "
                              f"config with {key}={old!r}")
        if new is None or old is None or new < old:
            raise GrowthError(f"GrowthStage({what}): the target's {key}={new} is smaller than the model's {key}={old}; "
                              "a growth can only make sizes larger")
        sizes[key] = new
    if not sizes:
        raise GrowthError(f"GrowthStage({what}): the target has the model's shape; there is nothing to grow")
    return _with_sizes(stage, sizes)


def _with_sizes(stage: GrowthStage, sizes: dict[str, int]) -> GrowthStage:
    """A stage with ``sizes`` set and its target kept (GrowthStage refuses both on construction, so the target is
    set on the frozen instance afterwards)."""
    keys = {**dataclasses.asdict(stage), **sizes, "model_name": None, "model_config": None}
    try:
        out = GrowthStage(**keys)
    except ValueError as err:  # e.g. a depth_map whose length is not the target's n_layer
        # the key is the stage's own (a size the target sets is not a stage key): its depth_map against the target's
        # n_layer, or a key the stage sets besides its target
        key = getattr(err, "key", None)
        if key in sizes:
            key = axis_of_size()[key].target_key(key, stage) if key in axis_of_size() else None
        raise GrowthError(f"{err} (the target sets {', '.join(f'{k}={v}' for k, v in sizes.items())})",
                          key=key) from err
    object.__setattr__(out, "model_name", stage.model_name)
    object.__setattr__(out, "model_config", stage.model_config)
    return out


def build_meta_gpt(config) -> GPT:
    """A litgpt ``GPT(config)`` on the meta device: structure and shapes, no memory."""
    from litgpt.model import GPT

    with torch.device("meta"):
        return GPT(config)


def grown_config(config, stage_keys: Mapping[str, Any], *, target=None, extra: dict | None = None):
    """A **new** litgpt ``Config`` grown by ``stage_keys``, pinning what ``__post_init__`` would re-derive.

    ``head_size``, ``n_head``, ``n_query_groups`` and ``intermediate_size`` are passed explicitly so that growing
    ``n_embd`` leaves heads, head size and RoPE (``rope_n_elem = rotary_percentage * head_size``) unchanged.

    Args:
        config: the litgpt ``Config`` to grow.
        stage_keys: :class:`~lightning_sparkling.growth.stage.GrowthStage` keys: any size of any registered axis
            (``n_embd``, ``n_layer``, ``n_head``, ``n_expert``, ...) and the axes' options (``depth_order``,
            ``depth_map``, ...). Each axis sets its fields
            (:meth:`~lightning_sparkling.growth.axes.GrowthAxis.config_values`: the per-block lists follow each
            block's source under ``depth_order`` or ``depth_map``; an MHA model grown by ``n_head`` alone stays MHA).
        target: a litgpt ``Config`` whose ``name``, ``hf_config`` and ``block_size`` the grown config takes (a
            ``model_name`` stage).
        extra: further fields, set as given.

    Example::

        >>> from litgpt import Config
        >>> small = Config(n_embd=64, n_head=4, n_layer=1, intermediate_size=128, vocab_size=100)
        >>> big = grown_config(small, {"n_embd": 128})
        >>> (big.n_embd, big.head_size, big.n_head, big.intermediate_size)
        (128, 16, 4, 128)
        >>> grown_config(small, {"n_layer": 3, "depth_order": "interleave"}).n_layer
        3
    """
    # from_keys: a registered axis' own keys (rope_base) go to the stage's extra, the others are fields
    values = {} if not stage_keys else axis_config_values(config, GrowthStage.from_keys(0, **stage_keys,
                                                                                         recipe="paper"))
    return _config_with(config, {**values, **(extra or {})}, target)


def _config_with(config, values: dict, target=None):
    """A new litgpt ``Config``: ``config`` with the head layout and MLP size pinned, ``target``'s free fields and
    ``values`` set."""
    from litgpt import Config

    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    fields.update(head_size=config.head_size, n_head=config.n_head, n_query_groups=config.n_query_groups,
                  intermediate_size=config.intermediate_size)
    if target is not None:
        fields.update({key: getattr(target, key) for key in _FREE_FIELDS})
    fields.update(values)
    return Config(**fields)


def _check_target_blocks(config, new_config, stage: GrowthStage) -> None:
    """Refuse a named target whose per-block fields (which blocks use a sliding window or the local RoPE base, how
    many first blocks are dense) are not what the growth gives the grown config: the model's own lists, or, when the
    block count grows, each block its source's. Grown silently, the checkpoint would not be the target's config.

    Raises:
        GrowthError: naming the field, both values and the fix.
    """
    target = target_config(stage)
    if target is None:
        return
    what = f"model_name={stage.model_name!r}" if stage.model_name else "model_config"
    for key in _PER_BLOCK_FIELDS:
        grown, wanted = getattr(new_config, key, None), getattr(target, key, None)
        if key == "first_k_dense_replace":
            grown, wanted = grown or 0, wanted or 0
        if grown != wanted:
            how = ("each new block takes its source block's" if new_config.n_layer != config.n_layer
                   else "the model's own, kept")
            raise GrowthError(f"GrowthStage({what}): the target's {key}={wanted!r} is not what this growth gives the "
                              f"grown model ({key}={grown!r}: {how}); grow into a config with {key}={grown!r} "
                              "(model_config), or change the model's before growing")


def stage_config(config, stage: GrowthStage):
    """The litgpt ``Config`` after ``stage`` grows a model of ``config`` (a ``model_name`` / ``model_config`` stage
    resolved first), without planning any tensor.

    Example::

        >>> from litgpt import Config
        >>> stage_config(Config.from_name("pythia-14m"), GrowthStage(10, model_name="pythia-31m")).name
        'pythia-31m'
    """
    stage = resolve_stage(config, stage)
    new_config = _config_with(config, axis_config_values(config, stage), target_config(stage))
    _check_target_blocks(config, new_config, stage)
    return new_config


def axis_config_values(config, stage: GrowthStage) -> dict:
    """The ``litgpt.Config`` fields the stage's axes set (:mod:`~lightning_sparkling.growth.axes`), in registry
    order."""
    values: dict = {}
    for axis_values in _values_by_axis(config, stage).values():
        values.update(axis_values)
    return values


def _values_by_axis(config, stage: GrowthStage) -> dict[str, dict[str, Any]]:
    """``{axis name: the litgpt.Config fields it sets}`` of the stage's active axes, in registry order.

    Raises:
        GrowthError: for an axis whose ``config_values`` is not a mapping of ``litgpt.Config`` fields.
    """
    fields = {f.name for f in dataclasses.fields(config)}
    out: dict[str, dict[str, Any]] = {}
    for axis in active_axes(stage):
        values = axis.config_values(config, stage)
        if not isinstance(values, Mapping) or set(values) - fields:
            wrong = sorted(set(values) - fields) if isinstance(values, Mapping) else values
            raise GrowthError(f"the {axis.name!r} axis' config_values gave {wrong!r}: it must return a dict of "
                              "litgpt.Config fields, the fields the growth sets (e.g. {'rope_base': 40000})",
                              key=axis_key(axis, stage))
        out[axis.name] = dict(values)
    return out


def _check_axes_grow(config, stage: GrowthStage, values: dict[str, dict[str, Any]], grows: set[str]) -> None:
    """Refuse a stage with an active axis whose growth changes nothing: no ``litgpt.Config`` field set to a new value
    (``values``, by axis) and no tensor or channel dimension planned (``grows``: the axes that planned some). Such an
    axis, e.g. one that forgot ``config_values``, would be a silent no-op: its size reported grown, the model unchanged.

    Raises:
        GrowthError: naming the axis, its key and the fix, keyed by the axis' key.
    """
    for axis in active_axes(stage):
        if axis.name in grows:
            continue
        changed = {k: v for k, v in values.get(axis.name, {}).items() if getattr(config, k) != v}
        if changed:
            continue
        key = axis_key(axis, stage)
        given = f" ({key}={stage.get(key)!r})" if key is not None else ""
        same = values.get(axis.name)
        why = (f"its config_values sets {', '.join(f'{k}={v!r}' for k, v in same.items())}, the model's own value"
               if same else "its config_values returns no litgpt.Config field")
        size = axis.sizes[0] if axis.sizes else "<a litgpt.Config field>"
        read = f"stage.get({key or size!r})"
        raise GrowthError(f"GrowthStage(at_step={stage.at_step}): the {axis.name!r} axis is active{given}, but its "
                          f"growth changes nothing: {why}, and neither its dimensions nor its plan grows a tensor; "
                          + (f"give {key} a value other than the model's" if same else
                             f"return the fields the growth sets from config_values (e.g. {{{size!r}: {read}}}), "
                             "or grow tensors by dimensions / plan"), key=key)


def size_changes(old_config, new_config) -> dict[str, tuple[int, int]]:
    """``{size: (old, new)}`` of every registered axis' size (``n_embd``, the experts' ``n_expert``, a user's
    axis' ``rope_base``: :func:`~lightning_sparkling.growth.axes.axis_of_size`) that differs between two litgpt
    configs: what a stage changed, whichever keys set it (explicit sizes or a ``model_name``; an MHA model's
    ``n_query_groups`` follows its ``n_head``). A size the old config does not have (``moe_intermediate_size`` of a
    dense model that becomes a mixture of experts) is not a change of that size and is left out.

    Example::

        >>> from litgpt import Config
        >>> size_changes(Config.from_name("pythia-70m"), Config.from_name("pythia-160m"))
        {'n_embd': (512, 768), 'intermediate_size': (2048, 3072), 'n_head': (8, 12), 'n_query_groups': (8, 12), \
'n_layer': (6, 12)}
    """
    return {size: (getattr(old_config, size), getattr(new_config, size)) for size in axis_of_size()
            if getattr(old_config, size) != getattr(new_config, size) and getattr(old_config, size) is not None}


def _check_model_kind(config, stage: GrowthStage) -> None:
    """Refuse a model kind no growth handles exactly, then what each of the stage's axes refuses of this model."""
    if getattr(config, "latent_attention", None):
        raise GrowthError(
            "multi-head latent attention (config.latent_attention) is not supported: its low-rank projections "
            "have no exact width growth here; use CausalSelfAttention models"
        )
    if config.mlp_class_name not in SUPPORTED_MLPS:
        raise GrowthError(f"config.mlp_class_name={config.mlp_class_name!r} is not supported: use one of "
                          f"{SUPPORTED_MLPS}")
    if config.norm_class_name not in SUPPORTED_NORMS:
        raise GrowthError(
            f"config.norm_class_name={config.norm_class_name!r} is not supported: use one of {SUPPORTED_NORMS}"
        )
    for axis in active_axes(stage):
        checked_model(axis, config, stage)  # a plain ValueError / TypeError of a user's axis: a GrowthError of its key


def plan_growth(config, stage: GrowthStage, *, seed: int = 0, stage_index: int = 0,
                tied_embeddings: bool = False, schedule: str | None = None) -> GrowthPlan:
    """Plan growing a litgpt ``GPT(config)`` by ``stage``.

    A ``recipe='auto'`` stage is resolved explicitly: by ``schedule`` when given (the recipe measured best under
    it, as :class:`~lightning_sparkling.callbacks.GrowthCallback` does at fit start), else as a standalone growth,
    which has no schedule: by the values the stage holds, the paper's (``GrowthPlan.recipe`` says which; ``repr``
    of the stage marks the keys ``auto`` would still set, :attr:`GrowthStage.unresolved_keys`).

    Args:
        config: the litgpt ``Config`` of the model as it is now.
        stage: the growth.
        seed: growth seed; ``(seed, stage_index)`` fixes every copy map and random draw.
        stage_index: position of the stage in a multi-stage schedule.
        tied_embeddings: the model's ``lm_head.weight`` is its ``transformer.wte.weight``.
        schedule: a registered schedule's name (``cosine``, ``wsd``) resolving an ``auto`` stage (``None``: the
            stage as it is).

    Raises:
        GrowthError: for a model kind that cannot be grown exactly (latent attention, unknown MLP/norm classes,
            tied embeddings with a parameter-free final norm) or a stage that does not fit the model (shrinking,
            a width the model lacks).

    Example::

        >>> from litgpt import Config
        >>> cfg = Config(n_embd=64, n_head=4, n_layer=2, intermediate_size=128, vocab_size=100,
        ...              mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm", bias=False)
        >>> plan = plan_growth(cfg, GrowthStage(10, intermediate_size=256))
        >>> plan.tensors["transformer.h.0.mlp.proj.weight"].new_shape
        (64, 256)
    """
    if schedule is not None:
        stage = resolve_recipe(stage, schedule)
    given, stage = stage, resolve_stage(config, stage)
    _check_model_kind(config, stage)
    axes_of_stage = active_axes(stage)
    channels: dict[str, ChannelChange] = {}
    changes: dict[str, object] = {}
    grows: set[str] = set()  # the axes that plan a channel dimension or a tensor
    for axis in axes_of_stage:  # phase 1: the channel dimensions each axis grows
        change, dims = axis.dimensions(config, stage, seed=seed, stage_index=stage_index)
        channels.update(dims)
        if dims:
            grows.add(axis.name)
        if change is not None:
            changes[axis.name] = change
    values = _values_by_axis(config, stage)
    try:
        new_config = _config_with(config, {k: v for own in values.values() for k, v in own.items()},
                                  target_config(stage))
    except AssertionError as err:  # litgpt's Config checks its fields with asserts
        raise GrowthError(f"GrowthStage(at_step={stage.at_step}): litgpt refuses the grown config ({err!r})") from err
    _check_target_blocks(config, new_config, stage)
    old_model = build_meta_gpt(config)
    old_shapes = _shapes(old_model)
    ctx = PlanContext(config=config, new_config=new_config, stage=stage, old_model=old_model, old_shapes=old_shapes,
                      channels=channels, tensors={}, seed=seed, stage_index=stage_index,
                      tied_embeddings=tied_embeddings)
    ctx.tensors = channel_tensors(ctx)  # phase 2: every tensor on a growing channel dimension
    for axis in axes_of_stage:  # phase 3: each axis' own tensors (new blocks, new experts)
        contribution = axis.plan(ctx)
        if contribution is None:
            continue
        ctx.tensors = contribution.tensors if contribution.replace else {**ctx.tensors, **contribution.tensors}
        channels.update(contribution.channels)
        if contribution.tensors or contribution.channels:
            grows.add(axis.name)
        if contribution.change is not None:
            changes[axis.name] = contribution.change
    _check_axes_grow(config, stage, values, grows)
    plan = GrowthPlan(stage=stage, stage_index=stage_index, old_config=config, new_config=new_config, channels=channels,
                      tensors=ctx.tensors, tied_embeddings=tied_embeddings, seed=seed, changes=changes,
                      active_axes=tuple(axis.name for axis in axes_of_stage), _old_shapes=old_shapes,
                      _given_stage=given)
    _check_against_grown(plan)
    return plan


def _shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """``{state_dict name: shape}`` of a (meta) model."""
    return {name: tuple(t.shape) for name, t in model.state_dict(keep_vars=True).items()}


def _check_against_grown(plan: GrowthPlan) -> None:
    """Every tensor of ``GPT(new_config)`` must be either planned with its exact shape or an old tensor that keeps its
    name (:meth:`GrowthPlan.carry`) and shape."""
    new_shapes = _shapes(build_meta_gpt(plan.new_config))
    tensors, old_shapes = plan.tensors, plan.old_shapes()
    known = set(tensors) | {name for name in old_shapes if plan.carry(name) == name}
    if set(new_shapes) != known:
        raise GrowthError(f"growth would change the set of tensors: {sorted(set(new_shapes) ^ known)[:8]}")
    for name, new_shape in new_shapes.items():
        planned = tensors[name].new_shape if name in tensors else old_shapes[name]
        if planned != new_shape:
            raise GrowthError(
                f"cannot grow tensor {name!r}: GPT(grown config) has shape {new_shape} but the growth rules give "
                f"{planned}; this module kind is not supported"
            )


def checked_plan(plan: GrowthPlan | None, config, stage: GrowthStage, *, seed: int, stage_index: int,
                 tied_embeddings: bool) -> GrowthPlan:
    """The plan of ``stage`` on a model of ``config``: ``plan`` (computed earlier, e.g. by a dry run over the
    stages) when given, else :func:`plan_growth`'s.

    Raises:
        GrowthError: for a ``plan`` that is not the plan of these arguments (another model config, stage, seed,
            position or tying): a stale plan is never applied.
    """
    if plan is None:
        return plan_growth(config, stage, seed=seed, stage_index=stage_index, tied_embeddings=tied_embeddings)
    if not plan.fits(config, stage, seed=seed, stage_index=stage_index, tied_embeddings=tied_embeddings):
        raise GrowthError(f"the given plan (stage {plan.stage_index}, seed {plan.seed}, tied_embeddings="
                          f"{plan.tied_embeddings}) is not the plan of GrowthStage(at_step={stage.at_step}) at "
                          f"position {stage_index} with seed {seed} on this model (tied_embeddings={tied_embeddings}"
                          f"{', another config' if plan.old_config != config else ''}); plan it on the model as it is "
                          "now (plan_growth(model.config, stage, ...)) or leave plan=None")
    return plan
