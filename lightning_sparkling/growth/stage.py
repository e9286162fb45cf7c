"""``GrowthStage``: one growth event (widths, heads, depth, experts, or several at once), validated when it is
built. Its fields are its own timing and recipe keys and every registered axis' stage keys (:func:`_assemble`); the
checks of its own keys are :mod:`~lightning_sparkling.growth.stage_checks`, the named recipes
:mod:`~lightning_sparkling.growth.recipes`, the timing and schedule rules :mod:`~lightning_sparkling.growth.timing`
(all importable from here as before).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from lightning_sparkling.growth.axes import (
    HEAD_SIZE_KEYS,
    SIZE_KEYS,
    WIDTH_SIZE_KEYS,
    GrowthAxis,
    registered_axes,
    watch_registry,
)
from lightning_sparkling.growth.depth_maps import DEPTH_INITS, DEPTH_ORDERS
from lightning_sparkling.growth.errors import StageError, _stage_error, check_choice  # noqa: F401 (old names)
from lightning_sparkling.growth.recipes import (  # noqa: F401 (_SYMMETRY_KEYS: an old name of this module)
    _SYMMETRY_KEYS,
    recipe_keys,
    RECIPES,
    SCHEDULE_RECIPES,
    WIDTH_ONLY_RECIPES,
    apply_recipe,
    grows_channels,
)
from lightning_sparkling.growth.scaling import parse_init
from lightning_sparkling.growth.stage_checks import (
    BIAS_CORRECTIONS,
    DEFAULT_SPLIT_RATIO,
    OPTIMIZER_STATES,
    REWARMUP_SCOPES,
    SYMMETRY_RELEASES,
    check_baselines,
    check_depth_map,
    check_lock_breakers,
    check_target,
    check_timing,
)
from lightning_sparkling.growth.timing import (
    check_rewarmup_fits,
    check_stage_order,
    check_stage_sequence,
    decay_end,
    fraction_step,
    resolve_timing,
    rewarmup_window,
)

__all__ = ["BIAS_CORRECTIONS", "DEFAULT_SPLIT_RATIO", "DEPTH_INITS", "DEPTH_ORDERS", "HEAD_SIZE_KEYS",
           "OPTIMIZER_STATES", "RECIPES", "REWARMUP_SCOPES", "SCHEDULE_RECIPES", "SIZE_KEYS", "SYMMETRY_RELEASES",
           "WIDTH_ONLY_RECIPES", "WIDTH_SIZE_KEYS", "GrowthStage", "StageError", "apply_recipe", "check_choice",
           "check_rewarmup_fits", "check_stage_order", "check_stage_sequence", "decay_end", "fraction_step", "grows_channels",
           "resolve_timing", "rewarmup_window"]


@dataclass(frozen=True)
class GrowthStage:
    """One growth: at ``at_step`` grow the sizes of one or more axes (the widths ``n_embd``, ``intermediate_size``,
    ``moe_intermediate_size``; the heads; the depth ``n_layer``; the experts), one plan and one growth event however
    many a stage sets.

    The fields are ``at_step``, each registered axis' own keys, then the timing and recipe keys below; the axes'
    keys are assembled from their ``stage_keys`` blocks (:func:`~lightning_sparkling.growth.axes.register_axis`):
    the width's (:class:`~lightning_sparkling.growth.axes.width.WidthKeys`), the heads'
    (:class:`~lightning_sparkling.growth.axes.heads.HeadsKeys`), the depth's
    (:class:`~lightning_sparkling.growth.axes.depth.DepthKeys`) and the experts'
    (:class:`~lightning_sparkling.growth.axes.experts.ExpertsKeys`), each documented there. Give every key but
    ``at_step`` by name.

    ``recipe`` (default ``auto``) fills the keys a stage does not set. ``auto`` is the recipe ``sparkling pretrain``
    picks for the run's schedule (``random-zero-3x`` under cosine, ``wsd`` under WSD), resolved by
    :class:`~lightning_sparkling.callbacks.GrowthCallback` from the module's scheduler
    (:mod:`~lightning_sparkling.growth.recipes`); ``recipe='paper'`` (or :meth:`from_recipe`) gives the paper's.
    The field defaults are the SPARKLING recipe as published (``paper``): copy-copy init, RMS-preserving fan-in
    scale, asymmetric optimizer state (old entries keep theirs, new entries start at zero) and an asymmetric
    learning-rate re-warmup of the new entries (from the LR at growth to ``rewarmup_ratio`` times it over
    ``rewarmup_steps``, then cosine). An ``auto`` stage holds them until resolved, so :func:`grow_model` and
    ``plan_growth`` called on it directly grow by the paper's keys.

    Args:
        at_step: grow after this many optimizer steps, before step ``at_step + 1``'s first micro-batch.
        at_fraction: instead of ``at_step``, grow after this fraction of the run, in ``(0, 1)``: ``at_step`` becomes
            ``ceil(at_fraction * max_steps)`` (:func:`fraction_step`) once the trainer's ``max_steps`` is known
            (the callback's ``setup``, :func:`resolve_timing`). Give exactly one of ``at_step`` and ``at_fraction``.
        init: ``"<fan_out>-<fan_in>"``, each side ``copy | random | zero`` (``zero-zero`` is refused: its new
            channels would never receive a gradient).
        rms_preserving: apply the fan-in scale ``alpha`` (``False``: naive growth, ``alpha = 1``).
        optimizer_state: ``asymmetric`` (default; paper 4.2.1: ``S' = [S, 0]``), ``copy``, ``drop``,
            ``asymmetric-scaled`` (asymmetric, and fan-in states scaled like the weights: the paper's "Asymmetric
            Reset + Scaled Opt.", 4.2.1) or ``scaled`` (new entries *copy* their source's state and every grown
            tensor's state is scaled like its weights, old and new entries alike: the symmetric "Scaled Optimizer
            States" baseline of Shen et al., appendix "Comparison to Prior Dynamics-Based Strategies"). Scaling
            multiplies first moments (``exp_avg``, ``momentum_buffer``) by the weight's factor (``alpha``, times
            the ``split`` share) and second moments by its square. ``asymmetric-scaled`` starts new entries at
            zero state, so it breaks the copy symmetry; ``scaled`` does not.
        rewarmup_ratio: peak of the new entries' re-warmup relative to the LR at growth; ``None`` turns the
            re-warmup off (new entries follow the baseline schedule exactly).
        rewarmup_steps: length of the linear re-warmup, in optimizer steps.

    The keys below grow into a named litgpt config.

    Args:
        model_name: grow into this litgpt config (``Config.from_name``): every size that differs from the model's
            (``n_embd``, ``n_head``, ``n_query_groups``, ``intermediate_size``, ``moe_intermediate_size``,
            ``n_layer``) is derived when the stage is planned; ``name`` and ``block_size`` are taken from it; any
            other difference (``head_size``, vocabulary, norm or MLP class, rotary settings, bias, a smaller size)
            is refused naming the field and both values.
        model_config: the same with a config given by its fields (a dict of ``litgpt.Config`` keys).

    The keys below are the paper's comparison baselines (appendix "Comparison to Prior Function-Preserving
    Symmetry-Breaking Heuristics" and "Comparison to Prior Dynamics-Based Strategies"); their defaults leave the
    SPARKLING recipe unchanged.

    Args:
        split: how a copied channel's fan-in share is divided between its source and its copies (fan-in side
            ``copy`` only). ``even`` (default): every member of a group (a source and its copies) keeps
            ``alpha`` times the old column. ``uneven``: "Uneven Splitting" with a fixed ratio, the source's and
            each copy's shares in proportion ``split_ratio : 1 - split_ratio`` (``1/3``: the paper's 1:2).
            ``random``: a ratio drawn per source channel from ``[0.1, 0.5]`` (the paper's randomized ``r:(1-r)``),
            from the growth's seeded generator. The shares of a group always sum to what the even split gives, so
            with copy-copy the grown model computes exactly what the even split computes (function preserving at
            integer ratios), while source and copies now differ in scale and train apart.
        split_ratio: the source's part ``r`` of ``r : 1 - r`` for ``split='uneven'``, in ``(0, 1)``.
        perturb: symmetric perturbation of the copied fan-in shares (fan-in side ``copy`` only; the paper's
            "Perturb" heuristic): for each copy, ``delta`` (drawn per entry, standard deviation ``perturb`` times
            the RMS of the shares of that tensor's copied groups) is added to its source's column and subtracted
            from its own. The group's sum, hence the function under copy-copy, is unchanged; the copies differ.
            ``0`` (default): off.
        rewarmup_scope: ``new`` (default: only this stage's new entries re-warm, the paper's asymmetric re-warmup)
            or ``all``: every parameter (old and new entries, ungrown tensors, earlier stages' new entries) follows
            this stage's re-warmup from the growth on (the paper's "Re-warmup All"). Needs ``rewarmup_ratio``.
        decay_speedup: fraction ``s`` in ``[0, 1)``: after the growth the baseline schedule's remaining decay runs
            in ``(1 - s)`` of the remaining steps, then holds its final LR (the paper's "same peak LR, 25%-50%
            faster decay" baseline after LEMON); the new entries' re-warmup ends at that same earlier step. ``0``
            (default): off.

    The keys below make the grown capacity learn where the paper's recipe leaves the copies locked to their sources
    (see ``docs/BENCHMARKS.md``, "Making growth pay"); their defaults leave the SPARKLING recipe unchanged.

    Args:
        bias_correction: ``shared`` (default: new entries share their tensor's Adam ``step``, so their zeroed
            moments are bias-corrected as if mature and their first update is ``0.45x`` a fresh optimizer's at
            ``betas=(0.9, 0.95)``) or ``fresh``: new entries' updates are scaled by
            :func:`~lightning_sparkling.growth.schedules.fresh_bias_factor`, so they move as under an optimizer that
            started at the growth. Works through the new-entry LR, so it needs ``rewarmup_ratio`` (``1.0`` for the
            correction alone) and an optimizer with ``betas`` (Adam, AdamW).
        symmetry_target: close the loop on the symmetry lock: every ``symmetry_interval`` steps after the growth
            the callback measures how alike the copies still are to their sources (the mean cosine of
            ``symmetry/stage_k``, the largest over the stage's axes); while it is above ``symmetry_target`` the new
            entries' LR multiplier (the *boost*, on top of the re-warmup schedule) is doubled, up to
            ``symmetry_max_boost``. Once the cosine falls below the target the loop stops and
            ``symmetry_release`` says what the boost does. ``None`` (default): off. Needs a copied side in
            ``init`` and ``rewarmup_ratio``.
        symmetry_interval: optimizer steps between two symmetry checks (``symmetry_target`` only).
        symmetry_max_boost: the largest boost (``symmetry_target`` only), ``>= 1``.
        symmetry_release: ``hold`` (default): the boost the loop reached stays for the rest of the run (the
            re-warmup's cosine decay still brings the new entries to ``min_lr``); ``schedule``: the boost drops to
            1 and the new entries follow the re-warmup schedule. Measured: dropping the boost undoes most of its
            gain (``docs/BENCHMARKS.md``, "Making growth pay").

    Args:
        recipe: ``auto`` (default) or a name of :data:`RECIPES` (``paper``, ``recommended``, ``random-zero``,
            ``random-zero-3x``, ``wsd``): the keys the stage gets unless it sets them (a key it sets wins).

    ``rewarmup_scope='all'`` and ``decay_speedup`` redefine the schedule of the rest of the run, so only the last
    stage of a run may set them (:func:`check_stage_sequence`).

    Raises:
        ValueError: naming the setting, for none or both of ``at_step`` / ``at_fraction``, a negative ``at_step``, an
            ``at_fraction`` outside ``(0, 1)``, a ``depth_map`` that is not a list of indices whose first occurrences
            come in order (or whose length is not ``n_layer``, or given with a ``depth_order``), no size, a non-positive
            size, an unknown ``init`` or ``optimizer_state``, a non-positive ``rewarmup_ratio`` or a negative
            ``rewarmup_steps``, an unknown ``split`` or ``rewarmup_scope``, a ``split_ratio`` outside ``(0, 1)``, a
            negative ``perturb``, a ``decay_speedup`` outside ``[0, 1)``, ``split``/``perturb`` without a copied fan-in
            side, ``rewarmup_scope='all'`` without a re-warmup.

    Example::

        >>> stage = GrowthStage(500, n_embd=1024, intermediate_size=4096)
        >>> stage.widths
        {'n_embd': 1024, 'intermediate_size': 4096}
    """

    at_step: int | None = None
    init: str = "copy-copy"
    rms_preserving: bool = True
    optimizer_state: str = "asymmetric"
    rewarmup_ratio: float | None = 1.3
    rewarmup_steps: int = 250
    model_name: str | None = None
    model_config: dict[str, Any] | None = None
    split: str = "even"
    split_ratio: float = DEFAULT_SPLIT_RATIO
    perturb: float = 0.0
    rewarmup_scope: str = "new"
    decay_speedup: float = 0.0
    bias_correction: str = "shared"
    symmetry_target: float | None = None
    symmetry_interval: int = 10
    symmetry_max_boost: float = 8.0
    symmetry_release: str = "hold"
    at_fraction: float | None = None
    recipe: str = "auto"

    def __post_init__(self) -> None:
        for key, value in recipe_keys(self).items():  # a named recipe fills the keys the stage did not set
            object.__setattr__(self, key, value)
        check_timing(self)
        if self.depth_map is not None:
            check_depth_map(self)
        if self.model_name is not None or self.model_config is not None:
            check_target(self)
        elif not any(axis.active(self) for axis in registered_axes()):
            keys = ", ".join(key for axis in registered_axes() for key in axis.sizes)
            raise StageError(
                None,
                f"GrowthStage(at_step={self.at_step}) grows nothing: give at least one of {keys}, model_name or "
                "model_config"
            )
        for axis, size in self.sizes.items():
            if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
                what = "a layer count" if axis == "n_layer" else "a width"
                raise StageError(axis,
                                 f"GrowthStage({axis}={size!r}): {what} must be a positive integer")
        check_choice("depth_init", self.depth_init, DEPTH_INITS)
        check_choice("depth_order", self.depth_order, DEPTH_ORDERS)
        try:
            fan_out, fan_in = parse_init(self.init)
        except ValueError as err:
            raise StageError("init", str(err)) from None
        if fan_out == fan_in == "zero":
            raise StageError(
                "init",
                "GrowthStage(init='zero-zero'): with both sides zero the new channels get a zero gradient forever "
                "and never train; use e.g. 'zero-copy' or 'copy-copy'"
            )
        if not isinstance(self.rms_preserving, bool):
            raise StageError("rms_preserving",
                             f"GrowthStage(rms_preserving={self.rms_preserving!r}): must be True or False")
        check_choice("optimizer_state", self.optimizer_state, OPTIMIZER_STATES)
        if self.rewarmup_ratio is not None:
            if isinstance(self.rewarmup_ratio, bool) or not isinstance(self.rewarmup_ratio, (int, float)):
                raise StageError("rewarmup_ratio",
                                 f"GrowthStage(rewarmup_ratio={self.rewarmup_ratio!r}): must be a number > 0 or None")
            if not self.rewarmup_ratio > 0:
                raise StageError(
                    "rewarmup_ratio",
                    f"GrowthStage(rewarmup_ratio={self.rewarmup_ratio}): must be > 0 (the paper uses 1.3); "
                    "None turns the re-warmup off"
                )
        if isinstance(self.rewarmup_steps, bool) or not isinstance(self.rewarmup_steps, int) or self.rewarmup_steps < 0:
            raise StageError("rewarmup_steps",
                             f"GrowthStage(rewarmup_steps={self.rewarmup_steps!r}): must be an integer >= 0")
        check_baselines(self, fan_in)
        check_lock_breakers(self, fan_out, fan_in)
        for axis in registered_axes():  # each axis' own keys (e.g. the experts')
            axis.check_stage(self)


    def resolved(self, max_steps: int | None) -> GrowthStage:
        """This stage with its step known: an ``at_fraction`` stage becomes the ``at_step`` stage of a run of
        ``max_steps`` optimizer steps (:func:`fraction_step`); an ``at_step`` stage is returned as it is.

        Raises:
            ValueError: for an ``at_fraction`` stage without a ``max_steps`` (``None`` or negative: an unbounded run).

        Example::

            >>> GrowthStage(at_fraction=0.05, n_layer=8).resolved(1000).at_step
            50
        """
        if self.at_fraction is None:
            return self
        if max_steps is None or isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps <= 0:
            raise ValueError(f"GrowthStage(at_fraction={self.at_fraction}): a fraction of the run needs the run's "
                             f"length, but max_steps is {max_steps!r}; set Trainer(max_steps=...) or give at_step")
        stage = replace(self, at_step=fraction_step(self.at_fraction, max_steps), at_fraction=None)
        object.__setattr__(stage, "_given", self.given_keys - {"at_fraction"} | {"at_step"})  # still resolvable
        return stage

    @property
    def grows_experts(self) -> bool:
        """Whether the stage sets an experts key (``n_expert``, ``n_expert_per_token``, ``mlp_class_name`` or
        ``first_k_dense_replace``): :mod:`~lightning_sparkling.growth.axes.experts` plans it."""
        return _axis("experts").active(self)

    @property
    def changes_baseline(self) -> bool:
        """Whether the stage changes the LR of old entries too (``rewarmup_scope='all'`` or ``decay_speedup``)."""
        return self.rewarmup_scope == "all" or self.decay_speedup > 0

    @property
    def widths(self) -> dict[str, int]:
        """The widths this stage sets, ``{size key: new size}``, in the order of :data:`WIDTH_SIZE_KEYS`."""
        return {size: getattr(self, size) for size in WIDTH_SIZE_KEYS if getattr(self, size) is not None}

    @property
    def sizes(self) -> dict[str, int]:
        """Every size this stage sets, ``{size key: new size}``: :attr:`widths`, then ``n_layer``.

        Example::

            >>> GrowthStage(500, n_layer=12, n_embd=1024).sizes
            {'n_embd': 1024, 'n_layer': 12}
        """
        return {size: getattr(self, size) for size in SIZE_KEYS if getattr(self, size) is not None}

    @property
    def copies(self) -> bool:
        """Whether some new entries start as copies of old ones (a copied side of ``init`` on a width or heads this
        stage grows, a copied ``depth_init``, copied experts: each axis' ``copies``): the copies whose likeness
        ``symmetry/`` measures."""
        target = self.model_name is not None or self.model_config is not None
        if target and "copy" in (self.fan_out_init, self.fan_in_init):  # a named target's widths and heads
            return True
        return any(axis.copies(self) for axis in registered_axes())

    @property
    def fan_out_init(self) -> str:
        return parse_init(self.init)[0]

    @property
    def fan_in_init(self) -> str:
        return parse_init(self.init)[1]

    @property
    def given_keys(self) -> frozenset[str]:
        """The fields the stage was built with (by name or position); the others hold defaults, which a recipe
        fills (:mod:`~lightning_sparkling.growth.recipes`). A stage rebuilt from all its fields
        (``GrowthStage(**stage.to_dict())``) gave them all."""
        return getattr(self, "_given", frozenset(f.name for f in fields(self)))

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (for checkpoints and logs); ``GrowthStage(**stage.to_dict())`` rebuilds it."""
        return asdict(self)

    @classmethod
    def from_recipe(cls, recipe: str, at_step: int | None = None, **keys: Any) -> GrowthStage:
        """A stage of a named recipe (:data:`RECIPES`): the recipe's keys, then ``keys`` on top; the same as
        ``GrowthStage(at_step, recipe=recipe, **keys)``.

        ``GrowthStage(...)`` alone is ``recipe='auto'``: the recipe ``sparkling pretrain`` picks for the run's
        schedule, resolved by the callback (:mod:`~lightning_sparkling.growth.recipes`). ``'paper'`` is SPARKLING
        as published (the field defaults); ``'recommended'`` is the one our
        seeded comparisons chose (``docs/BENCHMARKS.md``, "Making growth pay"): the paper's plus the closed loop on
        the symmetry lock; ``'random-zero'`` grows sourceless channels re-warmed to 10x; ``'wsd'`` (for
        warmup-stable-decay schedules) grows sourceless channels re-warmed to the paper's 1.3x;
        ``'random-zero-3x'`` (the CLI's default under a cosine schedule) grows them re-warmed to 3x.

        Example::

            >>> GrowthStage.from_recipe("recommended", 500, n_embd=1024).symmetry_target
            0.5
            >>> stage = GrowthStage.from_recipe("random-zero", 500, n_embd=1024)
            >>> stage.init, stage.rewarmup_ratio
            ('random-zero', 10.0)
            >>> GrowthStage.from_recipe("wsd", 500, n_embd=1024).init
            'random-zero'
            >>> GrowthStage.from_recipe("paper", 500, n_embd=1024) == GrowthStage(500, n_embd=1024, recipe="paper")
            True
            >>> GrowthStage.from_recipe("paper", 500, n_embd=1024).init
            'copy-copy'
        """
        return cls(at_step, recipe=recipe, **keys)


def _record_given_keys(init: Any) -> Any:
    """``GrowthStage.__init__`` that first records which fields the caller gave (:attr:`GrowthStage.given_keys`)."""
    names = [f.name for f in fields(GrowthStage) if f.init]

    @functools.wraps(init)
    def __init__(self: GrowthStage, *args: Any, **kwargs: Any) -> None:
        object.__setattr__(self, "_given", frozenset(names[: len(args)]) | frozenset(kwargs))
        init(self, *args, **kwargs)

    return __init__



def _axis(name: str) -> GrowthAxis:
    return next(axis for axis in registered_axes() if axis.name == name)


_OWN_FIELDS = {f.name: f for f in dataclasses.fields(GrowthStage)}
"""The stage's own fields (timing and recipe), in order; the axes' keys come after ``at_step``."""
_GENERATED = ("__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__", "__match_args__",
              "__getstate__", "__setstate__")


def _assemble() -> None:
    """Give :class:`GrowthStage` its fields: ``at_step``, each registered axis' ``stage_keys`` in registry order,
    then its own timing and recipe keys, and its ``__init__`` that records the keys given
    (:func:`_record_given_keys`); run again by the registry whenever an axis is added or removed, on the same
    class object (so every ``from ... import GrowthStage`` sees the new keys).

    Raises:
        ValueError: for an axis' stage key that another axis or the stage itself already has.
    """
    keys: dict[str, dataclasses.Field] = {}
    for axis in registered_axes():
        for key in dataclasses.fields(axis.stage_keys) if axis.stage_keys is not None else ():
            if key.name in keys or key.name in _OWN_FIELDS:
                raise ValueError(f"axis {axis.name!r}: stage key {key.name!r} is already a GrowthStage key; "
                                 "give the axis a key of its own")
            keys[key.name] = key
    assembled = {"at_step": _OWN_FIELDS["at_step"], **keys,
                 **{name: f for name, f in _OWN_FIELDS.items() if name != "at_step"}}
    for name in _GENERATED:
        if name in vars(GrowthStage):
            delattr(GrowthStage, name)
    for name in set(GrowthStage.__dataclass_fields__) - set(assembled):  # an unregistered axis' keys
        if name in vars(GrowthStage):
            delattr(GrowthStage, name)
    GrowthStage.__annotations__ = {name: f.type for name, f in assembled.items()}
    for name, f in assembled.items():
        setattr(GrowthStage, name, dataclasses.field(default=f.default, default_factory=f.default_factory))
    dataclass(frozen=True)(GrowthStage)
    GrowthStage.__init__ = _record_given_keys(GrowthStage.__init__)  # type: ignore[method-assign]


_assemble()
watch_registry(_assemble)
