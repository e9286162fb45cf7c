"""From a litgpt ``Config`` and a :class:`GrowthStage` to a :class:`GrowthPlan`: the grown ``Config`` and, for every
tensor of the ``GPT`` that changes, which dimension grows, on which width axis, fan-in or fan-out, with which init
and which scale. No model tensors are touched here (the structure comes from a ``GPT`` built on the meta device).

Width axes and who reads or writes them (DESIGN.md section 1):

=========================  ==========================================  ===========================================
axis                       fan-out (writers: new rows / coords)        fan-in (readers: new columns, scaled alpha)
=========================  ==========================================  ===========================================
``n_embd``                 ``wte`` columns, ``attn.proj``, MLP/expert  ``attn.qkv``, MLP ``fc*``, expert ``fc_*``,
                           ``proj``; norms (``norm_1/2``, post-norms,   router ``gate``, ``lm_head``
                           ``ln_f``) copy or draw new coordinates
``intermediate_size``      dense ``mlp.fc_1``/``fc_2``/``fc``           dense ``mlp.proj``
``moe_intermediate_size``  every expert's ``fc_1``/``fc_2``             every expert's ``proj``
``shared_expert_size``     shared experts' ``fc_1``/``fc_2``            shared experts' ``proj``
=========================  ==========================================  ===========================================

``shared_expert_size`` is ``moe_intermediate_size * n_shared_expert``: it grows with the expert size.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from lightning_sparkling.growth.axes import active_axes, plugin_sizes
from lightning_sparkling.growth.depth import (
    DEPTH_AXIS,
    DepthChange,
    block_name,
    depth_change,
    depth_config_values,
    fresh_block_init,
    litgpt_init_std,
    split_block_name,
)
from lightning_sparkling.growth.errors import GrowthError  # defined there; importable from here as before
from lightning_sparkling.growth.heads import HeadLayout, head_layout, qkv_layout
from lightning_sparkling.growth.operators import runs
from lightning_sparkling.growth.scaling import copy_source_index, fan_in_scale, make_generator, split_shares
from lightning_sparkling.growth.stage import SIZE_AXES, GrowthStage

SUPPORTED_MLPS = ("GptNeoxMLP", "LLaMAMLP", "GemmaMLP", "LLaMAMoE")
SUPPORTED_NORMS = ("RMSNorm", "LayerNorm")
SHARED_EXPERT_AXIS = "shared_expert_size"


@dataclass(frozen=True)
class AxisChange:
    """One width that grows in a stage.

    Attributes:
        name: ``n_embd``, ``intermediate_size``, ``moe_intermediate_size`` or ``shared_expert_size``.
        old: width before. new: width after.
        alpha: the fan-in scale for the readers of this width.
        src: copy index map, shape ``(new - old,)``: new channel ``old + j`` copies ``src[j]``. Shared by every
            tensor on this width.
        split: ``None`` (even split), or the per-channel multipliers of the even fan-in share, shape ``(new,)``
            (:func:`~lightning_sparkling.growth.scaling.split_shares`), applied on top of ``alpha`` to every copied fan-in
            dimension of this width.
        layout / fresh: for an axis whose old channels move (attention heads in litgpt's fused layout), the old
            channel each new channel takes and which new channels are new entries, shape ``(new,)``; ``None`` for an
            appended axis (old channels stay at ``0..old-1``, new ones follow and copy ``src``).
    """

    name: str
    old: int
    new: int
    alpha: float
    src: torch.Tensor = field(repr=False)
    split: torch.Tensor | None = field(default=None, repr=False)
    layout: torch.Tensor | None = field(default=None, repr=False)
    fresh: torch.Tensor | None = field(default=None, repr=False)

    def copy_positions(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(new, source)``: the positions of the new channels in the grown tensor and of the channel each copies
        (for the symmetry metric, which reads grown tensors)."""
        if self.layout is None:
            return torch.arange(self.old, self.new), self.src
        kept = torch.full((self.old,), -1, dtype=torch.long)
        kept[self.layout[~self.fresh]] = (~self.fresh).nonzero().flatten()
        new = self.fresh.nonzero().flatten()
        return new, kept[self.layout[new]]

    def kept_positions(self) -> torch.Tensor:
        """For every old channel, its position in the grown tensor."""
        if self.layout is None:
            return torch.arange(self.old)
        kept = torch.full((self.old,), -1, dtype=torch.long)
        kept[self.layout[~self.fresh]] = (~self.fresh).nonzero().flatten()
        return kept


@dataclass(frozen=True)
class DimGrowth:
    """One growing dimension of a tensor: ``dim`` grows along ``axis`` as ``role`` with init ``mode``.

    ``new_runs`` / ``old_runs``: on an axis laid out anew (heads), the ``(start, stop)`` runs of new and of old
    entries along ``dim`` of the grown tensor; ``None`` on an appended axis (old ``0..old``, new ``old..new``)."""

    dim: int
    axis: str
    role: str  # "fan_out" | "fan_in"
    mode: str  # "copy" | "random" | "zero"
    new_runs: tuple[tuple[int, int], ...] | None = None
    old_runs: tuple[tuple[int, int], ...] | None = None


@dataclass(frozen=True)
class TensorPlan:
    """How one tensor (a ``state_dict`` entry of the GPT) grows.

    The dimensions in ``dims`` are applied in order (rows before columns), then the whole tensor is multiplied by
    ``scale`` (``alpha`` for fan-in weights, compensation factors for ``scale_embeddings`` / tied embeddings).
    ``unit_offset`` marks a Gemma-style ``RMSNorm`` whose effective weight is ``1 + w``: ``scale`` then applies
    to ``1 + w``.

    Under a depth growth ``name`` is the tensor's name in the grown model and ``source`` the pre-growth tensor it
    derives from (``""``: the same name). A tensor of a *new* block has a ``block_init`` (``copy``: its source's
    values, grown by ``dims`` and ``scale``; ``zero``, ``one``, or ``normal`` with standard deviation ``init_std``)
    and is new as a whole.
    """

    name: str
    old_shape: tuple[int, ...]
    new_shape: tuple[int, ...]
    dims: tuple[DimGrowth, ...]
    scale: float = 1.0
    unit_offset: bool = False
    source: str = ""
    block_init: str | None = None
    init_std: float = 0.0

    @property
    def source_name(self) -> str:
        """The pre-growth tensor this one derives from."""
        return self.source or self.name

    @property
    def fresh(self) -> bool:
        """Whether the tensor belongs to a new block (every entry is new)."""
        return self.block_init is not None

    def new_region(self) -> list[tuple[slice, ...]]:
        """Disjoint rectangular pieces covering the entries that did not exist before the growth.

        For a weight grown on rows and columns this is ``[rows_new, 0:cols_new]`` and ``[0:rows_old, cols_new]``.
        Every slice is an explicit ``start:stop`` range of the grown shape (never an open ``:``), so a region stays
        exactly these entries when a later stage grows the same tensor again: entries a later stage adds belong
        to that stage alone.

        Example::

            >>> plan = TensorPlan("w", (2, 3), (4, 5), (DimGrowth(0, "a", "fan_out", "copy"),
            ...                                        DimGrowth(1, "b", "fan_in", "copy")))
            >>> plan.new_region()
            [(slice(2, 4, None), slice(0, 5, None)), (slice(0, 2, None), slice(3, 5, None))]
        """
        if self.fresh:
            return [tuple(slice(0, size) for size in self.new_shape)]
        new_runs, old_runs = {}, {}
        for d in self.dims:
            new_runs[d.dim] = d.new_runs if d.new_runs is not None else ((self.old_shape[d.dim], self.new_shape[d.dim]),)
            old_runs[d.dim] = d.old_runs if d.old_runs is not None else ((0, self.old_shape[d.dim]),)
        pieces = []
        grown = sorted(new_runs)
        for k, dim in enumerate(grown):
            choices = [[slice(0, size)] for size in self.new_shape]
            for earlier in grown[:k]:
                choices[earlier] = [slice(a, b) for a, b in old_runs[earlier]]
            choices[dim] = [slice(a, b) for a, b in new_runs[dim]]
            pieces += [tuple(index) for index in itertools.product(*choices)]
        return pieces


@dataclass
class GrowthPlan:
    """Everything a growth does, decided before any tensor is touched.

    Attributes:
        stage: the stage. stage_index: its position in the callback's list (part of every random seed).
        old_config / new_config: litgpt ``Config`` before and after.
        axes: the widths that grow, by name.
        tensors: ``{state_dict name: TensorPlan}`` for every tensor that changes, by its name in the grown model;
            tensors not listed keep their values (and names). A tied ``lm_head.weight`` / ``transformer.wte.weight``
            appears under both names. Under a depth growth every tensor of a block that moves or is new is listed.
        tied_embeddings: the plan is for a model whose ``lm_head`` and ``wte`` share one weight.
        seed: the growth seed.
        depth: the depth change, or ``None`` when the stage keeps ``n_layer``.
        changes: the plug-in axes' changes (:mod:`~lightning_sparkling.growth.axes`), by axis name.
    """

    stage: GrowthStage
    stage_index: int
    old_config: object
    new_config: object
    axes: dict[str, AxisChange]
    tensors: dict[str, TensorPlan]
    tied_embeddings: bool
    seed: int
    depth: DepthChange | None = None
    heads: HeadLayout | None = None
    changes: dict[str, object] = field(default_factory=dict)
    #: ``{state_dict name: shape}`` of ``GPT(old_config)``, read by plan_growth and kept for the growth's check
    _old_shapes: dict[str, tuple[int, ...]] | None = field(default=None, repr=False, compare=False)
    #: the stage as given to plan_growth (``stage`` is it resolved: a ``model_name`` target's sizes set)
    _given_stage: GrowthStage | None = field(default=None, repr=False, compare=False)

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
        rows, ``attn.proj`` columns); appended axes keep their explicit slices."""
        new = self.carry(name)
        spec = self.tensors.get(new) if new is not None else None
        moved = [d for d in spec.dims if self.axes[d.axis].layout is not None] if spec is not None else []
        if not moved or spec.fresh:
            return new, pieces
        out = []
        for piece in pieces:
            choices = [[s] for s in piece]
            for d in moved:
                positions = self.axes[d.axis].kept_positions()[piece[d.dim]]
                choices[d.dim] = [slice(a, b) for a, b in _runs_of(positions)]
            out += [tuple(index) for index in itertools.product(*choices)]
        return new, out

    def carry(self, name: str) -> str | None:
        """The grown model's name of a pre-growth tensor ``name`` (a kept block may move); ``None`` for names that
        are not in the model.

        Example::

            >>> from litgpt import Config
            >>> cfg = Config(n_embd=16, n_head=2, n_layer=2, vocab_size=32, block_size=8)
            >>> plan = plan_growth(cfg, GrowthStage(0, n_layer=4, depth_order="interleave"))
            >>> plan.carry("transformer.h.1.attn.qkv.weight")
            'transformer.h.2.attn.qkv.weight'
        """
        found = split_block_name(name)
        if self.depth is None or found is None:
            return _moved_names(self.tensors).get(name, name)
        index, rest = found
        position = self.depth.kept_position.get(index)
        return None if position is None else block_name(position, rest)

    def alphas(self) -> dict[str, float]:
        """Fan-in scale per growing axis, e.g. ``{"n_embd": 0.5, "intermediate_size": 0.5}``."""
        return {name: axis.alpha for name, axis in self.axes.items()}

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
    that differs between ``config`` and the target (its other keys kept; the target stays named in
    ``model_name`` / ``model_config`` so that the grown config takes its ``name`` and ``block_size``). Other stages
    come back unchanged.

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
        if key not in SIZE_AXES and key not in plugin_sizes():  # plug-in sizes: e.g. an MoE target's n_expert
            raise GrowthError(f"GrowthStage({what}): the target's {key}={new!r} differs from the model's {key}={old!r}; "
                              "only sizes (n_embd, n_head, n_query_groups, intermediate_size, moe_intermediate_size, "
                              f"n_layer, n_expert, n_expert_per_token) can grow; grow into a config with {key}={old!r}")
        if new is None or old is None or new < old:
            raise GrowthError(f"GrowthStage({what}): the target's {key}={new} is smaller than the model's {key}={old}; "
                              "a growth can only make sizes larger")
        sizes[key] = new
    old_k, new_k = config.first_k_dense_replace or 0, target.first_k_dense_replace or 0
    if old_k != new_k and "n_layer" not in sizes:  # only a depth growth re-derives which blocks are dense
        raise GrowthError(f"GrowthStage({what}): the target's first_k_dense_replace={new_k} differs from the model's "
                          f"first_k_dense_replace={old_k}; a growth of this model keeps which blocks are dense, so the "
                          f"checkpoint would not be the target's config; grow into a config with "
                          f"first_k_dense_replace={old_k}")
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
            key = "depth_map" if key == DEPTH_AXIS and stage.depth_map is not None else None
        raise GrowthError(f"{err} (the target sets {', '.join(f'{k}={v}' for k, v in sizes.items())})",
                          key=key) from err
    object.__setattr__(out, "model_name", stage.model_name)
    object.__setattr__(out, "model_config", stage.model_config)
    return out


def build_meta_gpt(config) -> nn.Module:
    """A litgpt ``GPT(config)`` on the meta device: structure and shapes, no memory."""
    from litgpt.model import GPT

    with torch.device("meta"):
        return GPT(config)


def grown_config(config, widths: dict[str, int], *, depth_order: str = "stack", depth_init: str = "copy-zero",
                 target=None, depth_map: tuple[int, ...] | None = None, extra: dict | None = None):
    """A **new** litgpt ``Config`` with ``widths`` applied, pinning what ``__post_init__`` would re-derive.

    ``head_size``, ``n_head``, ``n_query_groups`` and ``intermediate_size`` are passed explicitly so that growing
    ``n_embd`` leaves heads, head size and RoPE (``rope_n_elem = rotary_percentage * head_size``) unchanged.
    ``widths`` may hold ``n_layer``: the per-block lists then follow each block's source under ``depth_order``, or
    ``depth_map`` (:func:`~lightning_sparkling.growth.depth.depth_config_values`), and ``n_head`` /
    ``n_query_groups`` (an MHA
    model grown by ``n_head`` alone stays MHA). ``target``: a litgpt ``Config`` whose ``name``, ``hf_config`` and
    ``block_size`` the grown config takes (a ``model_name`` stage). ``extra``: further fields, set as given (the
    plug-in axes' :func:`axis_config_values`).

    Example::

        >>> from litgpt import Config
        >>> small = Config(n_embd=64, n_head=4, n_layer=1, intermediate_size=128, vocab_size=100)
        >>> big = grown_config(small, {"n_embd": 128})
        >>> (big.n_embd, big.head_size, big.n_head, big.intermediate_size)
        (128, 16, 4, 128)
    """
    from litgpt import Config

    values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    values.update(
        head_size=config.head_size,
        n_head=config.n_head,
        n_query_groups=config.n_query_groups,
        intermediate_size=config.intermediate_size,
    )
    values.update({k: v for k, v in widths.items() if k != DEPTH_AXIS})
    if "n_head" in widths and "n_query_groups" not in widths and config.n_query_groups == config.n_head:
        values["n_query_groups"] = widths["n_head"]  # an MHA model grown by n_head stays MHA
    if target is not None:
        values.update({key: getattr(target, key) for key in _FREE_FIELDS})
    values.update(extra or {})
    if widths.get(DEPTH_AXIS) is not None:
        try:
            values.update(depth_config_values(config, depth_change(config.n_layer, widths[DEPTH_AXIS], depth_order,
                                                                   depth_init, depth_map)))
        except ValueError as err:  # a StageError names its key (depth_map, depth_order, n_layer)
            raise GrowthError(str(err), key=getattr(err, "key", None)) from err
    return Config(**values)


def stage_config(config, stage: GrowthStage):
    """The litgpt ``Config`` after ``stage`` grows a model of ``config`` (a ``model_name`` / ``model_config`` stage
    resolved first), without planning any tensor.

    Example::

        >>> from litgpt import Config
        >>> stage_config(Config.from_name("pythia-14m"), GrowthStage(10, model_name="pythia-31m")).name
        'pythia-31m'
    """
    stage = resolve_stage(config, stage)
    return grown_config(config, stage.sizes, depth_order=stage.depth_order, depth_init=stage.depth_init,
                        target=target_config(stage), depth_map=stage.depth_map,
                        extra=axis_config_values(config, stage))


def axis_config_values(config, stage: GrowthStage) -> dict:
    """The ``litgpt.Config`` fields the stage's plug-in axes set (:mod:`~lightning_sparkling.growth.axes`)."""
    values: dict = {}
    for axis in active_axes(stage):
        values.update(axis.config_values(config, stage))
    return values


def size_changes(old_config, new_config) -> dict[str, tuple[int, int]]:
    """``{size: (old, new)}`` of every size in :data:`SIZE_AXES` and of the plug-in axes
    (:func:`~lightning_sparkling.growth.axes.plugin_sizes`, e.g. ``n_expert``) that differs between two litgpt
    configs: what a stage changed, whichever keys set it (explicit sizes or a ``model_name``; an MHA model's
    ``n_query_groups`` follows its ``n_head``). A size the old config does not have (``moe_intermediate_size`` of a
    dense model that becomes a mixture of experts) is not a change of that size and is left out.

    Example::

        >>> from litgpt import Config
        >>> size_changes(Config.from_name("pythia-70m"), Config.from_name("pythia-160m"))
        {'n_embd': (512, 768), 'intermediate_size': (2048, 3072), 'n_head': (8, 12), 'n_query_groups': (8, 12), \
'n_layer': (6, 12)}
    """
    return {axis: (getattr(old_config, axis), getattr(new_config, axis)) for axis in (*SIZE_AXES, *plugin_sizes())
            if getattr(old_config, axis) != getattr(new_config, axis) and getattr(old_config, axis) is not None}


def _check_model_kind(config, stage: GrowthStage) -> None:
    if getattr(config, "latent_attention", None):
        raise GrowthError(
            "multi-head latent attention (config.latent_attention) is not supported: its low-rank projections "
            "have no exact width growth here; use CausalSelfAttention models"
        )
    if config.mlp_class_name not in SUPPORTED_MLPS:
        raise GrowthError(f"config.mlp_class_name={config.mlp_class_name!r} is not supported: use one of {SUPPORTED_MLPS}")
    if config.norm_class_name not in SUPPORTED_NORMS:
        raise GrowthError(
            f"config.norm_class_name={config.norm_class_name!r} is not supported: use one of {SUPPORTED_NORMS}"
        )
    is_moe = config.mlp_class_name == "LLaMAMoE"
    has_dense = not is_moe or bool(config.first_k_dense_replace)
    if stage.moe_intermediate_size is not None and not is_moe:
        raise GrowthError(
            f"moe_intermediate_size={stage.moe_intermediate_size}: this model has no experts "
            f"(mlp_class_name={config.mlp_class_name!r}); grow intermediate_size instead", key="moe_intermediate_size"
        )
    if stage.intermediate_size is not None and not has_dense:
        raise GrowthError(
            f"intermediate_size={stage.intermediate_size}: every MLP of this model is a LLaMAMoE of experts "
            "(no dense blocks); grow moe_intermediate_size instead", key="intermediate_size"
        )
    current = {"n_embd": config.n_embd, "intermediate_size": config.intermediate_size,
               "moe_intermediate_size": config.moe_intermediate_size, DEPTH_AXIS: config.n_layer,
               "n_head": config.n_head, "n_query_groups": config.n_query_groups}
    for axis, new in stage.sizes.items():
        if axis == "n_query_groups" and new == current[axis] and stage.n_head is not None:
            continue  # pinned to the model's own value: new heads join the existing groups
        old = current[axis]
        if new <= old:
            what = "shrinks" if new < old else "does not change"
            raise GrowthError(
                f"GrowthStage(at_step={stage.at_step}) {axis}={new} {what} the model ({axis} is {old}): "
                "a stage must make every size it names larger", key=axis
            )


def _head_counts(config, stage: GrowthStage) -> tuple[int, int] | None:
    """``(n_head, n_query_groups)`` after the stage, or ``None`` when it keeps the heads."""
    if stage.n_head is None and stage.n_query_groups is None:
        return None
    new_head = stage.n_head or config.n_head
    default_groups = new_head if config.n_query_groups == config.n_head else config.n_query_groups
    return new_head, stage.n_query_groups or default_groups


def _head_axes(config, stage: GrowthStage, *, seed: int, stage_index: int) -> tuple[HeadLayout, dict[str, AxisChange]]:
    """The layout of a heads growth and its axes: ``attn_q`` (the query channels: ``attn.proj`` fan-in, OLMo-2's
    ``norm_q``), ``attn_kv`` (key/value channels: OLMo-2's ``norm_k``) and ``attn_qkv`` (the fused ``qkv`` rows)."""
    new_head, new_groups = _head_counts(config, stage)
    H, G, hs = config.n_head, config.n_query_groups, config.head_size
    try:
        layout = head_layout(H, G, new_head, new_groups, make_generator(seed, "stage", stage_index, "axis", "heads"))
    except ValueError as err:
        raise GrowthError(f"GrowthStage(at_step={stage.at_step}): {err}",
                          key="n_head" if stage.n_head is not None else "n_query_groups") from err
    q, q_fresh = qkv_layout(layout, H, G, hs)
    q_channels, kv_channels = new_head * hs, new_groups * hs

    def axis(name: str, old: int, layout_: torch.Tensor, fresh: torch.Tensor, alpha: float = 1.0) -> AxisChange:
        return AxisChange(name=name, old=old, new=int(layout_.numel()), alpha=alpha, src=layout_[fresh],
                          layout=layout_, fresh=fresh)

    alpha = fan_in_scale(H * hs, q_channels, init=stage.init, rms_preserving=stage.rms_preserving) \
        if q_channels > H * hs else 1.0
    axes = {"attn_q": axis("attn_q", H * hs, q[:q_channels], q_fresh[:q_channels], alpha),
            "attn_qkv": axis("attn_qkv", (H + 2 * G) * hs, q, q_fresh)}
    if new_groups > G:
        axes["attn_kv"] = axis("attn_kv", G * hs, q[q_channels:q_channels + kv_channels] - H * hs,
                               q_fresh[q_channels:q_channels + kv_channels])
    return layout, axes


def _axis_changes(config, stage: GrowthStage, *, seed: int, stage_index: int) -> dict[str, AxisChange]:
    old_widths = {"n_embd": config.n_embd, "intermediate_size": config.intermediate_size,
                  "moe_intermediate_size": config.moe_intermediate_size}
    changes = {}
    targets = dict(stage.widths)
    if "moe_intermediate_size" in targets and config.n_shared_expert:
        old_widths[SHARED_EXPERT_AXIS] = config.moe_intermediate_size * config.n_shared_expert
        targets[SHARED_EXPERT_AXIS] = stage.moe_intermediate_size * config.n_shared_expert
    for name, new in targets.items():
        old = old_widths[name]
        src = copy_source_index(old, new, make_generator(seed, "stage", stage_index, "axis", name))
        alpha = fan_in_scale(old, new, init=stage.init, rms_preserving=stage.rms_preserving)
        split = split_shares(old, new, src, stage.split, ratio=stage.split_ratio,
                             generator=make_generator(seed, "stage", stage_index, "axis", name, "split"))
        changes[name] = AxisChange(name=name, old=old, new=new, alpha=alpha, src=src, split=split)
    return changes


def plan_growth(config, stage: GrowthStage, *, seed: int = 0, stage_index: int = 0,
                tied_embeddings: bool = False) -> GrowthPlan:
    """Plan growing a litgpt ``GPT(config)`` by ``stage``.

    Args:
        config: the litgpt ``Config`` of the model as it is now.
        stage: the growth.
        seed: growth seed; ``(seed, stage_index)`` fixes every copy map and random draw.
        stage_index: position of the stage in a multi-stage schedule.
        tied_embeddings: the model's ``lm_head.weight`` is its ``transformer.wte.weight``.

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
    given, stage = stage, resolve_stage(config, stage)
    _check_model_kind(config, stage)
    plugins = active_axes(stage)
    for plugin in plugins:
        plugin.check_model(config, stage)
    axes = _axis_changes(config, stage, seed=seed, stage_index=stage_index)
    heads = None
    if _head_counts(config, stage) is not None:
        heads, head_axes = _head_axes(config, stage, seed=seed, stage_index=stage_index)
        axes.update(head_axes)
    try:
        new_config = grown_config(config, stage.sizes, depth_order=stage.depth_order, depth_init=stage.depth_init,
                                  target=target_config(stage), depth_map=stage.depth_map,
                                  extra=axis_config_values(config, stage))
    except AssertionError as err:  # litgpt's Config checks its fields with asserts
        raise GrowthError(f"GrowthStage(at_step={stage.at_step}): litgpt refuses the grown config ({err!r})") from err
    old_model = build_meta_gpt(config)
    fan_out, fan_in = stage.fan_out_init, stage.fan_in_init
    tensors: dict[str, TensorPlan] = {}
    old_shapes = _shapes(old_model)
    E = axes.get("n_embd")

    def add(name: str, dims: list[DimGrowth], scale: float = 1.0, unit_offset: bool = False) -> None:
        dims = [d if axes[d.axis].layout is None else dataclasses.replace(
            d, new_runs=runs(axes[d.axis].fresh), old_runs=runs(~axes[d.axis].fresh)) for d in dims if d.axis in axes]
        if not dims and scale == 1.0:
            return
        shape = list(old_shapes[name])
        for d in dims:
            shape[d.dim] = axes[d.axis].new
        tensors[name] = TensorPlan(name, old_shapes[name], tuple(shape), tuple(sorted(dims, key=lambda d: d.dim)),
                                   scale, unit_offset)

    def norm_mode() -> str:
        # A zero norm weight on coordinates whose input is also zero blocks every gradient path into them, so a
        # zero fan-out copies norm weights (paper 3.2.4: copy or random both keep RMS(z)).
        return "random" if fan_out == "random" else "copy"

    def add_norm(prefix: str, module: nn.Module, scale: float = 1.0) -> None:
        unit_offset = bool(getattr(module, "add_unit_offset", False))
        if getattr(module, "weight", None) is not None:
            add(f"{prefix}.weight", [DimGrowth(0, "n_embd", "fan_out", norm_mode())], scale, unit_offset)
        if getattr(module, "bias", None) is not None:
            add(f"{prefix}.bias", [DimGrowth(0, "n_embd", "fan_out", fan_out)], scale)

    def alpha_of(axis: str) -> float:
        return axes[axis].alpha if axis in axes else 1.0

    def add_linear_fan_in(prefix: str, axis: str) -> None:  # readers of `axis`: new columns, bias unchanged
        add(f"{prefix}.weight", [DimGrowth(1, axis, "fan_in", fan_in)], alpha_of(axis))

    def add_mlp(prefix: str, mlp: nn.Module, inner: str) -> None:
        cls = type(mlp).__name__
        if cls == "GptNeoxMLP":
            writers = {"fc": fan_out}
        elif cls in ("LLaMAMLP", "GemmaMLP"):
            # zero on a gated MLP zeroes the up projection (fc_2) and copies the gate (fc_1): act(gate) * 0 keeps
            # the new channels silent at growth, while zeroing both would leave them with a zero gradient forever.
            writers = {"fc_1": "copy" if fan_out == "zero" else fan_out, "fc_2": fan_out}
        else:
            raise GrowthError(f"{prefix} is a {cls}; supported MLPs are {SUPPORTED_MLPS}")
        for fc, mode in writers.items():
            add(f"{prefix}.{fc}.weight",
                [DimGrowth(0, inner, "fan_out", mode), DimGrowth(1, "n_embd", "fan_in", fan_in)], alpha_of("n_embd"))
            if getattr(mlp, fc).bias is not None:
                add(f"{prefix}.{fc}.bias", [DimGrowth(0, inner, "fan_out", mode)])
        add(f"{prefix}.proj.weight",
            [DimGrowth(0, "n_embd", "fan_out", fan_out), DimGrowth(1, inner, "fan_in", fan_in)], alpha_of(inner))
        if mlp.proj.bias is not None:
            add(f"{prefix}.proj.bias", [DimGrowth(0, "n_embd", "fan_out", fan_out)])

    # embeddings, final norm, output head
    embed_scale = math.sqrt(E.old / E.new) if (E and config.scale_embeddings) else 1.0
    add("transformer.wte.weight", [DimGrowth(1, "n_embd", "fan_out", fan_out)], embed_scale)
    if tied_embeddings:
        if E:
            ln_f = old_model.transformer.ln_f
            if getattr(ln_f, "weight", None) is None:
                raise GrowthError(
                    "tied embeddings with a parameter-free final norm (ln_f) cannot be grown exactly: the lm_head "
                    "fan-in scale is folded into ln_f's weight; untie the embeddings"
                )
            # One tensor is both the embedding (fan-out, its new columns follow the fan-out side) and lm_head
            # (fan-in). lm_head therefore reads copies of its own copied columns: its alpha is that of the pair
            # (fan_out, fan_out), and it is folded into ln_f, whose output only lm_head reads (the paper
            # multiplies the logits by it).
            lm_alpha = fan_in_scale(E.old, E.new, init=f"{fan_out}-{fan_out}", rms_preserving=stage.rms_preserving)
            add_norm("transformer.ln_f", ln_f, scale=lm_alpha / embed_scale)
        tensors_alias = tensors.get("transformer.wte.weight")
        if tensors_alias is not None:
            tensors["lm_head.weight"] = dataclasses.replace(tensors_alias, name="lm_head.weight")
    else:
        add_norm("transformer.ln_f", old_model.transformer.ln_f)
        add_linear_fan_in("lm_head", "n_embd")

    for i, block in enumerate(old_model.transformer.h):
        p = f"transformer.h.{i}"
        for norm in ("norm_1", "norm_2", "post_attention_norm", "post_mlp_norm"):
            module = getattr(block, norm)
            if module is not None and not isinstance(module, nn.Identity):
                add_norm(f"{p}.{norm}", module)
        # the fused qkv rows (laid out anew when heads grow) read n_embd; attn.proj reads the query channels
        add(f"{p}.attn.qkv.weight", [DimGrowth(0, "attn_qkv", "fan_out", fan_out),
                                     DimGrowth(1, "n_embd", "fan_in", fan_in)], alpha_of("n_embd"))
        if block.attn.qkv.bias is not None:
            add(f"{p}.attn.qkv.bias", [DimGrowth(0, "attn_qkv", "fan_out", fan_out)])
        add(f"{p}.attn.proj.weight", [DimGrowth(0, "n_embd", "fan_out", fan_out),
                                      DimGrowth(1, "attn_q", "fan_in", fan_in)], alpha_of("attn_q"))
        if config.norm_qk and config.norm_qk_type == "olmo2":  # norms over the whole query / key projection
            for norm, axis in (("norm_q", "attn_q"), ("norm_k", "attn_kv")):
                module = getattr(block.attn, norm)
                if getattr(module, "weight", None) is not None:
                    add(f"{p}.attn.{norm}.weight", [DimGrowth(0, axis, "fan_out", norm_mode())])
                if getattr(module, "bias", None) is not None:
                    add(f"{p}.attn.{norm}.bias", [DimGrowth(0, axis, "fan_out", fan_out)])
        if block.attn.proj.bias is not None:
            add(f"{p}.attn.proj.bias", [DimGrowth(0, "n_embd", "fan_out", fan_out)])
        mlp = block.mlp
        if type(mlp).__name__ == "LLaMAMoE":
            add_linear_fan_in(f"{p}.mlp.gate", "n_embd")  # nn.Linear or GroupedTopkRouter: (n_expert, n_embd)
            for e in range(len(mlp.experts)):
                add_mlp(f"{p}.mlp.experts.{e}", mlp.experts[e], "moe_intermediate_size")
            if getattr(mlp, "shared_experts", None) is not None:
                add_mlp(f"{p}.mlp.shared_experts", mlp.shared_experts, SHARED_EXPERT_AXIS)
        else:
            add_mlp(f"{p}.mlp", mlp, "intermediate_size")

    depth = None
    if stage.n_layer is not None:
        depth = depth_change(config.n_layer, stage.n_layer, stage.depth_order, stage.depth_init, stage.depth_map)
        tensors = _place_blocks(tensors, old_shapes, depth, litgpt_init_std(new_config.n_embd))
    changes = {}
    for plugin in plugins:  # plug-in axes (growth/axes): their tensors, dimensions and own record of the change
        contribution = plugin.plan(config, new_config, stage, old_model, seed=seed, stage_index=stage_index)
        tensors.update(contribution.tensors)
        axes.update(contribution.axes)
        changes[plugin.name] = contribution.change
    _check_against_grown(new_config, tensors, old_shapes, depth)
    return GrowthPlan(stage=stage, stage_index=stage_index, old_config=config, new_config=new_config, axes=axes,
                      tensors=tensors, tied_embeddings=tied_embeddings, seed=seed, depth=depth, heads=heads,
                      changes=changes, _old_shapes=old_shapes, _given_stage=given)


def _place_blocks(width: dict[str, TensorPlan], old_shapes: dict[str, tuple[int, ...]], depth: DepthChange,
                  init_std: float) -> dict[str, TensorPlan]:
    """The per-tensor plans of a stage with a depth change: ``width`` (the width plans, by pre-growth name) for
    tensors outside the blocks; for every block tensor of the grown model, its source's width plan (or an unchanged
    one) under its new name, with ``block_init`` set for a new block's tensors. Blocks that neither move nor grow
    are left out, as for a width growth."""
    tensors = {name: spec for name, spec in width.items() if split_block_name(name) is None}
    by_block: dict[int, list[str]] = {}
    for name in old_shapes:
        found = split_block_name(name)
        if found is not None:
            by_block.setdefault(found[0], []).append(found[1])
    for position, (index, fresh) in enumerate(zip(depth.source, depth.fresh)):
        for rest in by_block[index]:
            old = block_name(index, rest)
            new = block_name(position, rest)
            spec = width.get(old) or TensorPlan(old, old_shapes[old], old_shapes[old], ())
            if fresh:
                how = fresh_block_init(rest, len(spec.new_shape), depth.init)
                tensors[new] = dataclasses.replace(spec, name=new, source=old, block_init=how,
                                                   init_std=init_std if how == "normal" else 0.0)
            elif new != old or old in width:
                tensors[new] = dataclasses.replace(spec, name=new, source=old if new != old else "")
    return tensors


def _shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """``{state_dict name: shape}`` of a (meta) model."""
    return {name: tuple(t.shape) for name, t in model.state_dict(keep_vars=True).items()}


def _check_against_grown(new_config, tensors: dict[str, TensorPlan], old_shapes: dict[str, tuple[int, ...]],
                         depth: DepthChange | None) -> None:
    """Every tensor of ``GPT(new_config)`` must be either planned with its exact shape or unchanged."""
    new_shapes = _shapes(build_meta_gpt(new_config))
    moved = _moved_names(tensors) if depth is None else {}
    known = set(tensors) | {name for name in old_shapes
                            if (depth is None or split_block_name(name) is None) and name not in moved}
    if depth is not None:  # a block kept in place and not grown is not planned
        known |= {name for name in old_shapes if (found := split_block_name(name)) is not None
                  and found[0] < depth.new and depth.source[found[0]] == found[0] and not depth.fresh[found[0]]}
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
                          f"{plan.tied_embeddings}) is not the plan of GrowthStage(at_step={stage.at_step}) at position "
                          f"{stage_index} with seed {seed} on this model (tied_embeddings={tied_embeddings}"
                          f"{', another config' if plan.old_config != config else ''}); plan it on the model as it is "
                          "now (plan_growth(model.config, stage, ...)) or leave plan=None")
    return plan
