"""``grow_model``: apply a :class:`~lightning_sparkling.growth.plan.GrowthPlan` to a litgpt ``GPT`` in place.

Data flow: ``plan_growth`` (shapes, copy maps, alphas) -> :func:`grow_tensors` (new tensors, pure, the model is
untouched) -> :func:`swap_in` (new ``Parameter``\\ s on the same module objects, module attributes and ``config``
updated; undone if anything fails) -> a structural check against ``GPT(grown_config)``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from lightning_sparkling.growth.axes import plan_axes
from lightning_sparkling.growth.operators import TensorStats, expand_dim, relayout_dim
from lightning_sparkling.growth.plan import (
    ChannelChange,
    GrowthError,
    GrowthPlan,
    TensorPlan,
    build_meta_gpt,
    checked_plan,
)
from lightning_sparkling.growth.stage import GrowthStage
from lightning_sparkling.growth.types import UndoLog  # defined there (an axis' restructure writes through it)


#: prefixes that wrappers insert into parameter and module names: FSDP1, activation checkpointing, torch.compile
WRAPPER_PREFIXES = ("_fsdp_wrapped_module.", "_checkpoint_wrapped_module.", "_orig_mod.")


def clean_name(name: str) -> str:
    """A parameter (or module) name without FSDP1, activation-checkpointing and ``torch.compile`` wrapper prefixes:
    the plain GPT's name.

    Example::

        >>> clean_name("transformer.h.0._fsdp_wrapped_module._checkpoint_wrapped_module.attn.qkv.weight")
        'transformer.h.0.attn.qkv.weight'
    """
    for prefix in WRAPPER_PREFIXES:
        name = name.replace(prefix, "")
    return name


@dataclass
class GrowthResult:
    """What a growth did; what the optimizer patch and the re-warmup need.

    Attributes:
        plan: the plan that was applied (grown config, axes with copy maps and alphas, per-tensor specs).
        old_params / new_params: ``{name: Parameter}`` for every parameter that was replaced, by its name in the
            grown model (``model.named_parameters()``; a block moved by a depth growth has a new name): the
            optimizer patch maps ``old_params[n] -> new_params[n]``.
        added: ``{name: (source Parameter, new Parameter)}`` for every parameter of a new block (depth growth):
            the optimizer patch adds it to its source's param group, with state grown from the source's.
        order: the grown model's parameters in module order (where a depth growth's new parameters go in a group).
        seconds: wall-clock time of the growth.
    """

    plan: GrowthPlan
    old_params: dict[str, nn.Parameter] = field(repr=False)
    new_params: dict[str, nn.Parameter] = field(repr=False)
    added: dict[str, tuple[nn.Parameter, nn.Parameter]] = field(default_factory=dict, repr=False)
    order: tuple[nn.Parameter, ...] = field(default=(), repr=False)
    seconds: float = 0.0
    _swap: UndoLog | None = field(default=None, repr=False)

    def rollback(self) -> None:
        """Put the pre-growth parameters, module attributes and config back (used when a later step of a growth,
        e.g. the optimizer patch or the loss check, fails)."""
        if self._swap is None:
            raise RuntimeError("this growth cannot be rolled back (already rolled back or not applied)")
        self._swap.undo()
        self._swap = None

    @property
    def old_config(self):
        return self.plan.old_config

    @property
    def new_config(self):
        return self.plan.new_config

    @property
    def alpha(self) -> dict[str, float]:
        """Scale applied to each grown parameter (``alpha`` for fan-in weights, 1 for fan-out)."""
        return {name: self.plan.tensors[name].scale for name in self.new_params if name in self.plan.tensors}

    @property
    def new_entries(self) -> dict[str, list[tuple[slice, ...]]]:
        """``{name: disjoint slices of the entries that are new}`` for every grown parameter (the whole tensor for
        a new block's)."""
        names = [*self.new_params, *self.added]
        regions = {name: self.plan.tensors[name].new_region() for name in names if name in self.plan.tensors}
        return {name: pieces for name, pieces in regions.items() if pieces}

    @property
    def sources(self) -> dict[str, torch.Tensor]:
        """Copy index map per channel dimension: new channel ``old + j`` of that width copies channel ``src[j]``."""
        return {name: change.src for name, change in self.plan.channels.items()}


def grow_tensor(
    t: torch.Tensor,
    spec: TensorPlan,
    channels: Mapping[str, ChannelChange],
    *,
    generator: torch.Generator | None = None,
    mode: str | None = None,
    scale: float | None = None,
    stats: TensorStats | None = None,
    perturb: float = 0.0,
    perturb_generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Grow one tensor by its :class:`TensorPlan`: new slices dimension by dimension, then the scale.

    Weights (``mode=None``) with a copied fan-in dimension also take the stage's fan-in ``split`` (the channel
    dimension's per-channel share multipliers, on top of the scale) and its ``perturb`` (``+delta`` on each source column,
    ``-delta`` on its copy, per entry, standard deviation ``perturb`` times the RMS of those columns).

    Args:
        t: the tensor as it is (shape ``spec.old_shape``).
        spec: its plan.
        channels: the plan's channel dimensions (:attr:`GrowthPlan.channels`: copy maps, split
            multipliers).
        generator: for ``random`` slices.
        mode: override every dimension's init (optimizer state uses ``zero`` or ``copy``; no split, no perturb).
        scale: override ``spec.scale``.
        stats: distribution for ``random`` slices (defaults to ``t``'s own, taken before growing).
        perturb: relative standard deviation of the symmetric perturbation of copied fan-in columns (0: none).
        perturb_generator: CPU generator of the perturbation.

    Returns:
        A new tensor of shape ``spec.new_shape``, same dtype and device.
    """
    if tuple(t.shape) != spec.old_shape:
        raise GrowthError(f"tensor {spec.name!r} has shape {tuple(t.shape)}, the plan expects {spec.old_shape}")
    sourceless = spec.fresh and not spec.dims and spec.old_shape != spec.new_shape  # e.g. a new router: no entry
    if spec.fresh and (mode == "zero" or (mode is None and spec.block_init != "copy") or (sourceless and mode)):
        return _fresh_tensor(t, spec, spec.block_init if mode is None else "zero", generator)
    factor = spec.scale if scale is None else scale
    if _fills_in_place(t, spec, channels, mode, factor, scale, perturb):
        return _grow_in_place(t, spec, channels, mode, factor)
    stats = stats or (TensorStats.of(t) if any(d.mode == "random" for d in spec.dims) and mode is None else None)
    out = t.detach()
    for d in spec.dims:
        change = channels[d.channel]
        if change.layout is not None:
            out = relayout_dim(out, d.dim, change.layout, change.fresh, mode or d.mode, generator=generator,
                               stats=stats)
        else:
            out = expand_dim(out, d.dim, change.src, mode or d.mode, generator=generator, stats=stats)
    copied_fan_in = [d for d in spec.dims if d.role == "fan_in" and d.mode == "copy"] if mode is None else []
    shares = fan_in_shares(spec, channels) if copied_fan_in else None
    if shares is not None or (perturb and copied_fan_in):
        compute = torch.promote_types(t.dtype, torch.float32)
        x = out.to(compute)
        x = x * (shares * factor).to(device=x.device, dtype=compute) if shares is not None else x * factor
        if perturb:
            x = _perturb_copies(x, copied_fan_in, channels, perturb, perturb_generator)
        out = x.to(t.dtype)
    elif factor != 1.0:
        compute = torch.promote_types(t.dtype, torch.float32)  # at least float32; float64 stays float64
        if spec.unit_offset and scale is None:  # Gemma RMSNorm: the effective weight is 1 + w
            out = ((1.0 + out.to(compute)) * factor - 1.0).to(t.dtype)
        else:
            out = (out.to(compute) * factor).to(t.dtype)
    if out is t or out.untyped_storage().data_ptr() == t.untyped_storage().data_ptr():
        out = out.detach().clone()  # never share storage with the pre-growth tensor (a new block's plain copy)
    return out


def _fills_in_place(t: torch.Tensor, spec: TensorPlan, channels: Mapping[str, ChannelChange], mode: str | None,
                    factor: float, scale: float | None, perturb: float) -> bool:
    """Whether :func:`_grow_in_place` gives ``grow_tensor``'s tensor bit for bit: every grown dim appended (no
    layout), by copy or zeros (no random draw), no uneven ``split`` or ``perturb`` on copied fan-in columns, and a
    scale that is 1 or applied in the tensor's own dtype (float32 / float64: ``x * factor`` computes there)."""
    modes = [mode or d.mode for d in spec.dims]
    if any(m not in ("copy", "zero") for m in modes) or any(channels[d.channel].layout is not None for d in spec.dims):
        return False
    copied_fan_in = mode is None and any(d.role == "fan_in" and d.mode == "copy" for d in spec.dims)
    if copied_fan_in and (perturb or fan_in_shares(spec, channels) is not None):
        return False
    if factor == 1.0:
        return True
    return t.dtype in (torch.float32, torch.float64) and not (spec.unit_offset and scale is None)


def _grow_in_place(t: torch.Tensor, spec: TensorPlan, channels: Mapping[str, ChannelChange], mode: str | None,
                   factor: float) -> torch.Tensor:
    """``grow_tensor`` of appended copy / zero dims, written once into one tensor of the new shape: the old block
    (times ``factor``) first, then each grown dim's new slices gathered from the part already filled (last dim
    first, so that dim 0's new rows are one contiguous block, gathered in place). No concatenation and no
    intermediate tensor of a grown shape (only the new slices of a strided block, gathered then copied): an entry is ``factor * t`` at its copy map's source index along every dim (0 where a dim's new
    slice is zero), whatever the order the dims are filled in, as with ``expand_dim`` one dim after the other."""
    out = torch.empty(spec.new_shape, dtype=t.dtype, device=t.device)  # (*new_shape)
    filled = [slice(0, n) for n in spec.old_shape]  # the part of `out` written so far
    old = out[tuple(filled)]
    if factor == 1.0:
        old.copy_(t.detach())
    else:
        torch.mul(t.detach(), factor, out=old)  # the same kernel as (t * factor): bit-identical
    for d in sorted(spec.dims, key=lambda d: d.dim, reverse=True):
        change = channels[d.channel]
        new = out[tuple(filled[:d.dim] + [slice(change.old, change.new)] + filled[d.dim + 1:])]
        if (mode or d.mode) == "zero":
            new.zero_()
        elif new.is_contiguous():  # whole rows: gathered in place
            torch.index_select(out[tuple(filled)], d.dim, change.src.to(t.device), out=new)
        else:  # a strided block: gathering into it is slower than gathering the new slices and copying them in
            new.copy_(out[tuple(filled)].index_select(d.dim, change.src.to(t.device)))
        filled[d.dim] = slice(0, change.new)
    return out


def _fresh_tensor(t: torch.Tensor, spec: TensorPlan, how: str, generator: torch.Generator | None) -> torch.Tensor:
    """A new block's tensor that does not copy its source: zeros, ones, or normal(0, ``spec.init_std``) drawn on
    the CPU from ``generator`` (device and rank independent)."""
    if how == "zero":
        return torch.zeros(spec.new_shape, dtype=t.dtype, device=t.device)
    if how == "one":
        return torch.ones(spec.new_shape, dtype=t.dtype, device=t.device)
    if how != "normal" or generator is None:
        raise GrowthError(f"tensor {spec.name!r}: unknown new-block init {how!r} (or no generator)")
    sample = torch.empty(spec.new_shape, dtype=torch.float32).normal_(0.0, spec.init_std, generator=generator)
    return sample.to(device=t.device, dtype=t.dtype)


def grow_tensors(plan: GrowthPlan, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Grow every planned tensor whose source is found in ``tensors`` (pre-growth names; pure: inputs are not
    modified). The result is keyed by the grown model's names: under a depth growth one source gives its kept
    block's tensor and every new block's copy of it; a tensor that only moves comes back as the input itself.

    ``tensors`` may hold a subset (e.g. one layer at a time under FSDP); the result does not depend on which
    subset or order, since each tensor has its own seeded generator.
    """
    out = {}
    perturb = float(plan.stage.perturb)
    for name, spec in plan.tensors.items():
        t = tensors.get(spec.source_name)
        if t is None:
            continue
        if not spec.dims and spec.scale == 1.0 and not spec.fresh:
            out[name] = t  # a kept block's tensor under its new position's name
            continue
        out[name] = grow_tensor(t, spec, plan.channels, generator=plan.tensor_generator(name), perturb=perturb,
                                perturb_generator=plan.perturb_generator(name) if perturb else None)
    for axis in plan_axes(plan):  # every axis the stage grows: post-processing (e.g. drop-upcycle's re-drawn channels)
        out = axis.finish_tensors(plan, out)
    return out


def fan_in_shares(spec: TensorPlan, channels: Mapping[str, ChannelChange]) -> torch.Tensor | None:
    """The per-entry multipliers an uneven ``split`` puts on a tensor's copied fan-in columns (float64, shaped to
    broadcast over the grown tensor), or ``None`` when its fan-in shares are even."""
    factor = None
    for d in spec.dims:
        split = channels[d.channel].split
        if d.role != "fan_in" or d.mode != "copy" or split is None:
            continue
        shape = [1] * len(spec.new_shape)
        shape[d.dim] = split.numel()
        factor = split.view(shape) if factor is None else factor * split.view(shape)
    return factor


def _perturb_copies(x: torch.Tensor, dims: list, channels: Mapping[str, ChannelChange], relative: float,
                    generator: torch.Generator | None) -> torch.Tensor:
    """``+delta`` on each source's fan-in column, ``-delta`` on its copy's (paper appendix "Comparison to Prior
    Function-Preserving Symmetry-Breaking Heuristics", "Perturb"): a group's sum is unchanged, so the layer's
    output is too wherever a copy's input equals its source's (copy-copy)."""
    if generator is None:
        raise ValueError("perturb needs a generator")
    for d in dims:
        change = channels[d.channel]
        n_new = change.new - change.old
        src = change.src.to(x.device)
        members = torch.cat([torch.unique(src), torch.arange(change.old, change.new, device=x.device)])
        rms = x.index_select(d.dim, members).pow(2).mean().sqrt()
        shape = list(x.shape)
        shape[d.dim] = n_new
        delta = torch.randn(shape, generator=generator, dtype=torch.float32)  # drawn on CPU: device independent
        delta = delta.to(device=x.device, dtype=x.dtype) * (relative * rms)
        x = x.index_add(d.dim, src, delta)
        x.narrow(d.dim, change.old, n_new).sub_(delta)
    return x


def _is_tied(model: nn.Module) -> bool:
    return model.lm_head.weight is model.transformer.wte.weight


def check_plain_gpt(model: nn.Module, plan: GrowthPlan | None = None) -> None:
    """Refuse anything that is not a plain litgpt ``GPT`` of its own ``config`` (same modules and shapes); the
    expected shapes are ``plan``'s (built once when planned) where it is a plan for a model of that config."""
    from litgpt.model import GPT

    if not isinstance(model, GPT):
        raise GrowthError(f"grow_model needs a litgpt.GPT, got {type(model).__name__}")
    if plan is not None and plan.old_config == model.config:
        expected = plan.old_shapes()
    else:
        expected = {n: tuple(t.shape) for n, t in build_meta_gpt(model.config).state_dict(keep_vars=True).items()}
    actual = {n: tuple(t.shape) for n, t in model.state_dict(keep_vars=True).items()}
    if expected != actual:
        diff = sorted(set(expected.items()) ^ set(actual.items()))[:5]
        raise GrowthError(f"the model is not a plain GPT of its config (tensors differ, e.g. {diff}); cannot grow it")
    if any(getattr(b.attn, "kv_cache", None) is not None for b in model.transformer.h):
        raise GrowthError("the model has a KV cache set (inference mode); call model.clear_kv_cache() before growing")


def _sync_module_attributes(swap: UndoLog, module: nn.Module) -> None:
    """Make size attributes agree with the (new) parameter shapes."""
    if isinstance(module, nn.Linear):
        swap.set(module, "out_features", module.weight.shape[0])
        swap.set(module, "in_features", module.weight.shape[1])
    elif isinstance(module, nn.Embedding):
        swap.set(module, "embedding_dim", module.weight.shape[1])
    elif isinstance(module, nn.LayerNorm) and module.weight is not None:
        swap.set(module, "normalized_shape", (module.weight.shape[0],))
    elif hasattr(module, "intermediate_size"):  # litgpt MLPs
        fc = module.fc if hasattr(module, "fc") else module.fc_1
        swap.set(module, "intermediate_size", fc.weight.shape[0])


def rope_cache_of(config, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """litgpt's RoPE cache ``(cos, sin)`` of ``config`` for ``seq_len`` positions, on the CPU: what
    ``GPT.rope_cache`` computes (it reads only ``config`` and ``max_seq_length``).

    Example::

        >>> from litgpt import Config
        >>> cos, sin = rope_cache_of(Config(n_embd=32, n_head=4, block_size=8, rotary_percentage=1.0), 8)
        >>> tuple(cos.shape)
        (8, 8)
    """
    from types import SimpleNamespace

    from litgpt.model import GPT

    return GPT.rope_cache(SimpleNamespace(config=config, max_seq_length=seq_len), device=torch.device("cpu"))


def grown_max_seq_length(max_seq_length: int, old_config, new_config) -> int:
    """``GPT.max_seq_length`` after a growth to ``new_config``: a target's other ``block_size`` carries a model at
    its full length (``GPT(config)``'s, the default) to the new one, and caps a shorter length set by the user at
    it (litgpt's setter refuses a length past ``block_size``).

    Example::

        >>> from litgpt import Config
        >>> old, longer, shorter = (Config(n_embd=8, n_head=2, block_size=n) for n in (16, 32, 8))
        >>> [grown_max_seq_length(n, old, new) for n, new in ((16, longer), (12, longer), (12, shorter))]
        [32, 12, 8]
    """
    if new_config.block_size == old_config.block_size:
        return max_seq_length
    if max_seq_length == old_config.block_size:
        return new_config.block_size
    return min(max_seq_length, new_config.block_size)


def derived_buffers(gpt: nn.Module, old_config, old_seq_len: int | None = None) -> dict[str, torch.Tensor]:
    """The config-derived buffers of ``gpt`` (its config the grown one) that ``old_config`` derived otherwise:
    ``{"cos": ..., "sin": ...}`` (litgpt's RoPE cache, ``GPT.max_seq_length``'s setter builds it) recomputed from
    ``gpt.config`` at ``gpt.max_seq_length`` on the buffers' device and dtype, when an axis changed a field it
    depends on (``rope_base``, ``rope_n_elem``, ``rope_adjustments``, ...) or the length changed (``old_seq_len``,
    the length before the growth: a target's other ``block_size``); ``{}`` when the cache of both is the same, so an
    unchanged cache is never recomputed (bit for bit what it was). litgpt's ``mask_cache`` and KV caches exist only
    for inference, which growth refuses (:func:`check_plain_gpt`).
    """
    if "cos" not in gpt._buffers or "sin" not in gpt._buffers:
        return {}
    seq_len = gpt.max_seq_length
    old = rope_cache_of(old_config, seq_len if old_seq_len is None else old_seq_len)
    new = rope_cache_of(gpt.config, seq_len)
    if all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(old, new)):
        return {}
    return {name: value.to(device=gpt._buffers[name].device, dtype=gpt._buffers[name].dtype)
            for name, value in zip(("cos", "sin"), new)}


def _structure(model: nn.Module) -> list[tuple[str, str, str]]:
    """Module names, classes and sizes (``extra_repr``). Unset optional submodules (``None`` entries, e.g. the
    KV cache after ``clear_kv_cache()``) are not part of the structure."""
    return [(name, type(m).__name__, m.extra_repr()) for name, m in model.named_modules()]


def swap_in(model: nn.Module, plan: GrowthPlan, grown: Mapping[str, torch.Tensor]) -> UndoLog:
    """Put the grown tensors into ``model`` (same module objects, new ``Parameter``\\ s), switch every
    ``config`` reference to the grown ``Config`` and rebuild the buffers derived from it (:func:`derived_buffers`). All-or-nothing: on any error the model is restored and the
    error re-raised. Returns the undo log (``.undo()`` restores the model).
    """
    swap = UndoLog()
    try:
        modules = dict(model.named_modules())
        replaced: dict[int, nn.Parameter] = {}  # id(old Parameter) -> new one: tied weights stay one Parameter
        touched: set[str] = set()
        fresh = {name: value for name, value in grown.items() if name in plan.tensors and plan.tensors[name].fresh}
        for name, value in grown.items():
            if name in fresh:
                continue
            spec = plan.tensors.get(name)
            module_name, attr = (spec.source_name if spec is not None else name).rsplit(".", 1)
            module = modules[module_name]
            old = module._parameters.get(attr)
            if old is None:
                raise GrowthError(f"{name!r} is not a parameter of the model")
            if value is old:
                continue  # a kept block's tensor that only moves: the same Parameter
            new = replaced.get(id(old))
            if new is None:
                new = replaced[id(old)] = nn.Parameter(value, requires_grad=old.requires_grad)
            swap.set(module, attr, new)
            touched.add(module_name)
            touched.add(module_name.rsplit(".", 1)[0] if "." in module_name else "")
        for module_name in touched:
            _sync_module_attributes(swap, modules[module_name])
        # the model's own config object: equal to plan.old_config, not always the same object (a plan computed
        # once, on an equal config: a dry run, or another process' model)
        old_config = model.config
        for module in modules.values():
            if module.__dict__.get("config") is old_config:
                swap.set(module, "config", plan.new_config)
        for axis in plan_axes(plan):  # every axis the stage grows: new modules (growth/axes: new blocks, experts)
            axis.restructure(swap, model, plan, fresh)
        reference = build_meta_gpt(plan.new_config)
        # parameter-free norms (e.g. OLMo's non-affine LayerNorm) have no tensor to infer their size from
        for name, ref in reference.named_modules():
            module = modules.get(name)
            if isinstance(module, nn.LayerNorm) and module.weight is None and isinstance(ref, nn.LayerNorm):
                swap.set(module, "normalized_shape", ref.normalized_shape)
        if _structure(model) != _structure(reference):
            raise GrowthError("the grown model's module structure differs from GPT(grown config)")
        length = model.max_seq_length
        if "_max_seq_length" in model.__dict__:  # litgpt's GPT; a target's block_size moves it (GPT(config)'s)
            swap.set(model, "_max_seq_length", grown_max_seq_length(length, old_config, plan.new_config))
        for name, value in derived_buffers(model, old_config, length).items():  # a config change, not a shape
            swap.set(model, name, value)
        return swap
    except BaseException:
        swap.undo()
        raise


def result_params(plan: GrowthPlan, old_named: Mapping[str, nn.Parameter], new_named: Mapping[str, nn.Parameter]
                  ) -> tuple[dict, dict, dict]:
    """``(old_params, new_params, added)`` of a :class:`GrowthResult` from the model's parameters before and after
    (``old_named`` by pre-growth names, ``new_named`` by grown names)."""
    old_params, new_params, added = {}, {}, {}
    for name, param in new_named.items():
        spec = plan.tensors.get(name)
        source = old_named.get(spec.source_name if spec is not None else name)
        if spec is not None and spec.fresh:
            added[name] = (source, param)
        elif source is not None and source is not param:
            old_params[name], new_params[name] = source, param
    return old_params, new_params, added


def grow_model(model: nn.Module, stage: GrowthStage, *, seed: int = 0, stage_index: int = 0,
               plan: GrowthPlan | None = None) -> GrowthResult:
    """Grow a litgpt ``GPT`` in place by ``stage``: widen it (hidden, MLP inner and/or MoE expert inner size)
    and/or deepen it (``n_layer``).

    The model keeps its module objects (a depth growth puts the kept blocks, possibly at new positions, and new
    ``Block`` modules in a new ``transformer.h``); the grown parameters are new ``nn.Parameter`` objects (same
    dtype, device and ``requires_grad``), and ``model.config`` becomes the grown litgpt ``Config`` so that
    ``GPT(model.config).load_state_dict(model.state_dict(), strict=True)`` works. Heads, head size and RoPE do
    not change. Either the whole growth happens or the model is left exactly as it was.

    Args:
        model: a plain litgpt ``GPT`` (tied ``lm_head``/``wte`` and ``scale_embeddings`` are handled).
        stage: what to grow and how.
        seed: growth seed; with ``stage_index`` it fixes every copy map and random draw (rank-independent).
        stage_index: the stage's position in a multi-stage schedule.
        plan: the plan of these arguments on this model, computed earlier (a dry run over the stages); ``None``
            plans here (:func:`~lightning_sparkling.growth.plan.plan_growth`).

    Returns:
        A :class:`GrowthResult` (plan, replaced/new parameters, new-entry slices, copy maps, alpha).

    Raises:
        GrowthError: before touching the model, for a model or stage that cannot be grown, or a ``plan`` that is
            not the plan of these arguments on this model.

    Example::

        >>> from litgpt import GPT, Config
        >>> cfg = Config(n_embd=32, n_head=4, n_layer=1, intermediate_size=64, vocab_size=64,
        ...              mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm", bias=False)
        >>> model = GPT(cfg)
        >>> x = torch.randint(0, 64, (1, 8))
        >>> before = model(x)
        >>> result = grow_model(model, GrowthStage(0, n_embd=64, intermediate_size=128))
        >>> model.config.n_embd, torch.allclose(model(x), before, atol=1e-5)
        (64, True)
    """
    start = time.perf_counter()
    check_plain_gpt(model, plan)
    tied = _is_tied(model)
    plan = checked_plan(plan, model.config, stage, seed=seed, stage_index=stage_index, tied_embeddings=tied)
    current = dict(model.named_parameters(remove_duplicate=False))
    sources = {spec.source_name: current[spec.source_name] for spec in plan.tensors.values()
               if spec.source_name in current}
    # tied: grow the shared tensor once, under the embedding's name
    if tied and "lm_head.weight" in sources:
        sources.pop("lm_head.weight")
    with torch.no_grad():
        grown = grow_tensors(plan, sources)
    if tied and "transformer.wte.weight" in grown:
        grown["lm_head.weight"] = grown["transformer.wte.weight"]
    old_named = dict(model.named_parameters())
    swap = swap_in(model, plan, grown)
    new_named = dict(model.named_parameters())
    old_params, new_params, added = result_params(plan, old_named, new_named)
    return GrowthResult(plan=plan, old_params=old_params, new_params=new_params, added=added,
                        order=tuple(new_named.values()), seconds=time.perf_counter() - start, _swap=swap)
