"""``GrowthStage``: one growth event (widths, heads, depth, experts, or several at once), validated when it is
built. A plain frozen dataclass: its fields are every built-in stage key (``at_step``, each built-in axis' keys, the
timing and recipe keys) and ``extra``, the keys of axes a user registers (:func:`stage_key_fields` lists them all,
for the CLI and the docs). Each axis checks its own keys (``GrowthAxis.check_stage``); the checks of the stage's own
keys are :mod:`~lightning_sparkling.growth.stage_checks`, the named recipes :mod:`~lightning_sparkling.growth.recipes`,
the timing and schedule rules :mod:`~lightning_sparkling.growth.timing` (all importable from here).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import KW_ONLY, asdict, dataclass, field, fields, replace
from typing import Any

from lightning_sparkling.growth.axes import (
    HEAD_SIZE_KEYS,
    SIZE_KEYS,
    WIDTH_SIZE_KEYS,
    GrowthAxis,
    checked_stage,
    registered_axes,
    reserve_stage_keys,
)
from lightning_sparkling.growth.axes.experts import DEFAULT_REINIT_FRACTION
from lightning_sparkling.growth.depth_maps import DEPTH_INITS, DEPTH_ORDERS
from lightning_sparkling.growth.errors import StageError, check_choice
from lightning_sparkling.growth.recipes import (
    AUTO,
    RECIPE_DEFAULT,
    RECIPE_KEYS,
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
    _checked_extra,
    _default,
    check_baselines,
    check_keywords,
    check_lock_breakers,
    plugin_key_fields,
    check_target,
    check_timing,
)
from lightning_sparkling.growth.stage_keys import FILLED, FrozenKeys, fill_recipe_keys, paper_default, set_signatures
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
           "check_rewarmup_fits", "check_stage_order", "check_stage_sequence", "decay_end", "fraction_step",
           "grows_channels", "plugin_key_fields", "resolve_timing", "rewarmup_window", "stage_key_fields"]


@dataclass(frozen=True)
class GrowthStage:
    """One growth: at ``at_step`` grow the sizes of one or more axes (the widths ``n_embd``, ``intermediate_size``,
    ``moe_intermediate_size``; the heads; the depth ``n_layer``; the experts), one plan and one growth event however
    many a stage sets.

    The fields are ``at_step``, then every other key by name: each built-in axis' keys (the axis checks them:
    ``GrowthAxis.check_stage``), then the stage's own timing and recipe keys, then :attr:`extra`, the keys of the
    axes a user registers (``register_axis``; read with :meth:`get`, built flat with :meth:`from_keys`).

    The width axis' keys (:mod:`~lightning_sparkling.growth.axes.width`).

    Args:
        n_embd: new hidden (residual stream) size. Heads, head size and RoPE are unchanged.
        intermediate_size: new dense MLP inner size.
        moe_intermediate_size: new MoE expert inner size (every expert, shared experts scaled alike).

    The heads axis' keys, at a fixed ``head_size`` (:mod:`~lightning_sparkling.growth.axes.heads`).

    Args:
        n_head: new number of query heads, of the same ``head_size`` (new heads copy heads of their key/value group
            under a copied ``init`` fan-out side, or start random with zeroed ``attn.proj`` fan-in columns under
            ``random-zero``; see :mod:`~lightning_sparkling.growth.head_layout`).
        n_query_groups: new number of key/value groups (default: unchanged when ``n_head / n_query_groups`` stays
            whole, i.e. new heads join the existing groups; an MHA model grown by ``n_head`` alone stays MHA). New
            groups copy source groups.

    The depth axis' keys (G_stack, MIDAS: :mod:`~lightning_sparkling.growth.axes.depth`); a new block's tensors are
    new entries like new width, so the re-warmup, ``optimizer_state``, ``bias_correction`` and the symmetry loop
    apply to them.

    Args:
        n_layer: new number of blocks (larger than the model's).
        depth_init: how a new block starts. ``copy-zero`` (default; function preserving): the source block's
            weights with its output projections (attention ``proj``, MLP / every expert's ``proj``, their biases and
            a LayerNorm post-norm's bias) zeroed, so the block adds nothing to the residual stream at first and the
            grown model computes the same logits. ``copy``: the source block's weights as they are (G_stack; not
            function preserving). ``random-zero``: litgpt's init (normal(0, 0.02) linears, unit norms, zero biases)
            with the output projections zeroed (function preserving, no source).
        depth_order: where the new blocks go and which old block each copies. ``stack`` (default, G_stack): the
            stack repeated on top, new block ``L + i`` copies block ``i % L``. ``interleave``: every block followed
            by its copies (``N // L - 1`` each; the ``N % L`` extra copies go to blocks spread evenly over the
            depth). ``middle`` (MIDAS): like ``interleave``, but the ``N % L`` extra copies go to the middle blocks,
            so ``n_layer < 2 L`` duplicates a centred window of blocks in place. ``sparkling plan`` prints the map.
        depth_map: instead of ``depth_order``, the grown model's blocks by the old block each comes from (prts's
            layer map): one old-block index per grown block, so ``len(depth_map)`` is the new ``n_layer`` (set
            ``n_layer`` to it or leave it out). The first occurrence of each old block is that block itself, later
            ones are new blocks copying it (by ``depth_init``): at 4 -> 8, ``[0, 1, 2, 3, 0, 1, 2, 3]`` is ``stack``
            and ``[0, 0, 1, 1, 2, 2, 3, 3]`` is ``interleave``. Accepted: integers ``>= 0`` whose first occurrences
            come in order ``0, 1, 2, ...`` (old blocks keep their order, so ``copy-zero`` keeps the function); the
            model's ``L`` blocks must each appear (indices ``0 .. L - 1``, checked when the stage is planned) and at
            least one more block.
        depth_scaling: a depth-aware rule (:mod:`~lightning_sparkling.growth.depth_scaling`). ``none`` (default):
            nothing. ``sqrt`` (depth-muP's ``1 / sqrt(L)`` residual-branch multiplier, folded into the weights):
            at ``L -> L'`` blocks the output projections of every block, kept and new, are multiplied by
            ``sqrt(L / L')``. Not function preserving (the old blocks write less against the same embedding);
            refused with post-branch norms and with an experts growth in the same stage; nothing on a stage that
            grows no depth.

    The experts axis' keys (:mod:`~lightning_sparkling.growth.axes.experts`); a new expert's tensors and a router's
    new rows are new entries like new width, so the re-warmup and ``optimizer_state`` apply to them. Widths, heads
    and depth may grow in the same stage (a new expert then copies its source widened; dense -> MoE widens the MLP
    into expert 0; a new block gets its experts as its MLP starts).

    Args:
        n_expert: new number of routed experts per MoE block. On a ``LLaMAMoE`` model new expert ``E_old + i`` starts
            from expert ``i % E_old``, its router row from that expert's row.
        n_expert_per_token: new top-``K`` (default: the model's). ``n_expert`` and ``n_expert_per_token`` grown by
            the same factor with ``expert_init='copy'`` keep the function exactly.
        mlp_class_name: ``"LLaMAMoE"`` on a ``LLaMAMLP`` model: dense -> MoE (sparse upcycling); every block's MLP
            becomes ``n_expert`` experts of its inner size that copy it (exact under ``copy``, whatever the router).
        expert_init: ``copy`` (default), ``drop-upcycle`` (a copy whose ``expert_reinit_fraction`` of inner channels
            are re-drawn from the weight's own mean and std) or ``random`` (litgpt's init).
        expert_reinit_fraction: drop-upcycle's fraction of re-drawn inner channels, in ``[0, 1]`` (default 0.5).
        router_init: dense -> MoE's new router: ``random`` (default, litgpt's init) or ``zero`` (needs
            ``expert_init='drop-upcycle'``: equal copies under a zero router never part).
        first_k_dense_replace: dense -> MoE only: the first ``k`` blocks keep their ``LLaMAMLP`` (the same module,
            Parameters and optimizer state; litgpt's ``first_k_dense_replace``, which the grown config carries), the
            others upcycle; ``0 <= k < n_layer``. On MoE -> more experts it may only repeat the model's own value.

    ``recipe`` (default ``auto``) fills the keys a stage does not set. ``auto`` is the recipe ``sparkling pretrain``
    picks for the run's schedule (``random-zero-3x`` under cosine, ``wsd`` under WSD), resolved by
    :class:`~lightning_sparkling.callbacks.GrowthCallback` from the module's scheduler
    (:mod:`~lightning_sparkling.growth.recipes`); ``recipe='paper'`` (or :meth:`from_recipe`) gives the paper's.
    The field defaults are the SPARKLING recipe as published (``paper``): copy-copy init, RMS-preserving fan-in
    scale, asymmetric optimizer state (old entries keep theirs, new entries start at zero) and an asymmetric
    learning-rate re-warmup of the new entries (from the LR at growth to ``rewarmup_ratio`` times it over
    ``rewarmup_steps``, then cosine). A key a recipe may fill defaults to ``<recipe>``
    (:data:`~lightning_sparkling.growth.recipes.RECIPE_DEFAULT`): the recipe's value, else the paper's
    (:data:`~lightning_sparkling.growth.recipes.PAPER_KEYS`). An ``auto`` stage holds the paper's until resolved,
    so :func:`grow_model` and ``plan_growth`` called on it directly grow by the paper's keys.

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
    _: KW_ONLY  # every key but at_step by name
    # the width axis' keys (growth/axes/width.py checks them)
    n_embd: int | None = None
    intermediate_size: int | None = None
    moe_intermediate_size: int | None = None
    # the heads axis' keys (growth/axes/heads.py)
    n_head: int | None = None
    n_query_groups: int | None = None
    # the depth axis' keys (growth/axes/depth.py)
    n_layer: int | None = None
    depth_init: str = "copy-zero"
    depth_order: str = "stack"
    depth_map: tuple[int, ...] | None = None
    depth_scaling: str = "none"
    # the experts axis' keys (growth/axes/experts.py)
    n_expert: int | None = None
    n_expert_per_token: int | None = None
    mlp_class_name: str | None = None
    expert_init: str = "copy"
    expert_reinit_fraction: float = DEFAULT_REINIT_FRACTION
    router_init: str = "random"
    first_k_dense_replace: int | None = None
    # the stage's own keys: the recipe of the new entries, a named target, the baselines, the lock breakers, timing
    init: str = RECIPE_DEFAULT  # a recipe key: RECIPE_DEFAULT until the recipe (or the paper's value) fills it
    rms_preserving: bool = True
    optimizer_state: str = "asymmetric"
    rewarmup_ratio: float | None = RECIPE_DEFAULT
    rewarmup_steps: int = 250
    model_name: str | None = None
    model_config: dict[str, Any] | None = None
    split: str = "even"
    split_ratio: float = DEFAULT_SPLIT_RATIO
    perturb: float = 0.0
    rewarmup_scope: str = "new"
    decay_speedup: float = 0.0
    bias_correction: str = "shared"
    symmetry_target: float | None = RECIPE_DEFAULT
    symmetry_interval: int = 10
    symmetry_max_boost: float = RECIPE_DEFAULT
    symmetry_release: str = RECIPE_DEFAULT
    at_fraction: float | None = None
    recipe: str = "auto"
    # the keys of axes a user registers (their stage_keys), by name; only those set to other than their default
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)  # held read-only (FrozenKeys)
    # the recipe keys the stage left to its recipe, with the values filled in: a copy (dataclasses.replace,
    # to_dict) passes them back, so a key still holding its filled value stays the recipe's (fill_recipe_keys)
    _filled: Mapping[str, Any] = field(default_factory=FrozenKeys, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "extra", _checked_extra(self.extra))
        fill_recipe_keys(self)
        check_timing(self)
        for axis in registered_axes():  # each axis' own keys (depth: its map gives n_layer; positive sizes)
            checked_stage(axis, self)  # a plain ValueError / TypeError of a user's axis: a StageError of its key
        if self.model_name is not None or self.model_config is not None:
            check_target(self)
        elif not any(axis.active(self) for axis in registered_axes()):
            keys = ", ".join(key for axis in registered_axes() for key in axis.sizes)
            raise StageError(
                f"GrowthStage(at_step={self.at_step}) grows nothing: give at least one of {keys}, model_name or "
                "model_config"
            )
        try:
            fan_out, fan_in = parse_init(self.init)
        except ValueError as err:
            raise StageError(str(err), key="init") from None
        if fan_out == fan_in == "zero":
            raise StageError(
                "GrowthStage(init='zero-zero'): with both sides zero the new channels get a zero gradient forever "
                "and never train; use e.g. 'zero-copy' or 'copy-copy'", key="init"
            )
        if not isinstance(self.rms_preserving, bool):
            raise StageError(f"GrowthStage(rms_preserving={self.rms_preserving!r}): must be True or False",
                             key="rms_preserving")
        check_choice("optimizer_state", self.optimizer_state, OPTIMIZER_STATES)
        if self.rewarmup_ratio is not None:
            if isinstance(self.rewarmup_ratio, bool) or not isinstance(self.rewarmup_ratio, (int, float)):
                raise StageError(f"GrowthStage(rewarmup_ratio={self.rewarmup_ratio!r}): must be a number > 0 or None",
                                 key="rewarmup_ratio")
            if not self.rewarmup_ratio > 0:
                raise StageError(
                    f"GrowthStage(rewarmup_ratio={self.rewarmup_ratio}): must be > 0 (the paper uses 1.3); "
                    "None turns the re-warmup off", key="rewarmup_ratio"
                )
        if isinstance(self.rewarmup_steps, bool) or not isinstance(self.rewarmup_steps, int) or self.rewarmup_steps < 0:
            raise StageError(f"GrowthStage(rewarmup_steps={self.rewarmup_steps!r}): must be an integer >= 0",
                             key="rewarmup_steps")
        check_baselines(self, fan_in)
        check_lock_breakers(self, fan_out, fan_in)

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
        return replace(self, at_step=fraction_step(self.at_fraction, max_steps), at_fraction=None)

    @property
    def grows_experts(self) -> bool:
        """Whether the stage sets an experts key (``n_expert``, ``n_expert_per_token``, ``mlp_class_name`` or
        ``first_k_dense_replace``): :mod:`~lightning_sparkling.growth.axes.experts` plans it."""
        return _axis("experts").active(self)

    def get(self, key: str) -> Any:
        """The value of stage key ``key``: a field, or a registered axis' own key (in :attr:`extra` when the stage
        set it, else that axis' default).

        Raises:
            AttributeError: for a key that is neither a field nor a registered axis' key.

        Example::

            >>> GrowthStage(500, n_embd=1024).get("n_embd")
            1024
        """
        if key in _FIELD_NAMES:
            return getattr(self, key)
        plugin = plugin_key_fields()
        if key not in plugin:
            raise AttributeError(f"GrowthStage has no stage key {key!r}: not a field, nor a registered axis' key")
        return self.extra.get(key, _default(plugin[key]))

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
        """Every size this stage sets, ``{size key: new size}``, of every registered axis in registry order (the
        widths, the heads, ``n_layer``, the experts' ``n_expert`` / ``n_expert_per_token``, then a registered axis'
        own sizes).

        Example::

            >>> GrowthStage(500, n_layer=12, n_embd=1024).sizes
            {'n_embd': 1024, 'n_layer': 12}
            >>> GrowthStage(500, n_expert=8, n_expert_per_token=2).sizes
            {'n_expert': 8, 'n_expert_per_token': 2}
        """
        keys = _FIELD_NAMES | set(plugin_key_fields())
        sizes = {size: self.get(size) for axis in registered_axes() for size in axis.sizes if size in keys}
        return {size: value for size, value in sizes.items() if value is not None}

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
        """The keys the stage sets: each recipe key (:data:`RECIPE_KEYS`) it was given, by name or in a YAML mapping,
        and every other field not at its default. A recipe fills the recipe keys it was not given
        (:mod:`~lightning_sparkling.growth.recipes`); ``dataclasses.replace``, ``copy``, pickling and
        ``GrowthStage(**stage.to_dict())`` keep them so (a key replaced by the value the recipe gave it stays the
        recipe's).

        Example::

            >>> sorted(GrowthStage(500, n_embd=1024, init="copy-copy").given_keys)
            ['at_step', 'init', 'n_embd']
        """
        return frozenset(f.name for f in fields(self) if f.name in _FIELD_NAMES and f.name not in self._filled
                         and (f.name in RECIPE_KEYS or getattr(self, f.name) != _default(f)))

    @property
    def unresolved_keys(self) -> tuple[str, ...]:
        """The keys whose value is not known yet: those ``recipe='auto'`` would set, under one of the registered
        schedules (:data:`SCHEDULE_RECIPES`), to another value than the field holds now; ``()`` for a named recipe,
        or when every schedule's recipe leaves this stage as it is. ``auto`` is resolved by
        :class:`~lightning_sparkling.callbacks.GrowthCallback` (``on_fit_start``, from the module's scheduler) or by
        :func:`~lightning_sparkling.growth.recipes.resolve_recipe`.

        Example::

            >>> GrowthStage(500, n_embd=1024).unresolved_keys
            ('init', 'rewarmup_ratio')
            >>> GrowthStage(500, n_embd=1024, recipe="paper").unresolved_keys
            ()
            >>> GrowthStage(500, n_layer=8).unresolved_keys
            ()
        """
        if self.recipe != AUTO:
            return ()
        given = {key: getattr(self, key) for key in self.given_keys if key in _FIELD_NAMES and key != "recipe"}
        changed: set[str] = set()
        for recipe in dict.fromkeys(SCHEDULE_RECIPES.values()):
            changed |= {k for k, v in apply_recipe(recipe, given).items() if k not in given and getattr(self, k) != v}
        return tuple(f.name for f in fields(self) if f.name in changed)

    def __repr__(self) -> str:
        """Every key with the value a growth will use; an ``auto`` stage's :attr:`unresolved_keys` print as
        ``<auto>``, and its ``recipe`` says what resolves them.

        Example::

            >>> GrowthStage(500, n_layer=8, recipe="paper")  # doctest: +ELLIPSIS
            GrowthStage(at_step=500, ..., n_layer=8, depth_init='copy-zero', ..., recipe='paper', extra={})
            >>> GrowthStage(500, n_embd=1024)  # doctest: +ELLIPSIS
            GrowthStage(at_step=500, n_embd=1024, ..., init=<auto>, ..., rewarmup_ratio=<auto>, ..., recipe='auto' ...)
        """
        unresolved = self.unresolved_keys
        parts = []
        for f in (f for f in fields(self) if f.repr):
            value = "<auto>" if f.name in unresolved else repr(getattr(self, f.name))
            if f.name == "recipe" and unresolved:
                choices = ", ".join(f"{recipe} under {schedule}" for schedule, recipe in SCHEDULE_RECIPES.items())
                value += (f" (unresolved: {', '.join(unresolved)} follow the run's schedule, {choices}; resolved by "
                          "GrowthCallback at fit start, or resolve_recipe(stage, schedule))")
            parts.append(f"{f.name}={value}")
        return f"{type(self).__name__}({', '.join(parts)})"

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (for checkpoints and logs); ``GrowthStage(**stage.to_dict())`` rebuilds it (a registered
        axis' keys under ``"extra"``; ``"_filled"``: the recipe keys the stage left to its recipe, still its)."""
        return {**asdict(self), "extra": dict(self.extra), "_filled": dict(self._filled)}

    @classmethod
    def from_recipe(cls, recipe: str, at_step: int | None = None, **keys: Any) -> GrowthStage:
        """A stage of a named recipe (:data:`RECIPES`): the recipe's keys, then ``keys`` on top; the same as
        ``GrowthStage(at_step, recipe=recipe, **keys)``.

        ``GrowthStage(...)`` alone is ``recipe='auto'``: the recipe ``sparkling pretrain`` picks for the run's
        schedule, resolved by the callback (:mod:`~lightning_sparkling.growth.recipes`). ``'paper'`` is SPARKLING
        as published (the field defaults, PAPER_KEYS); ``'recommended'`` is the one our
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
        return cls(at_step, recipe=recipe, **_split_keys(keys))

    @classmethod
    def from_keys(cls, at_step: int | None = None, **keys: Any) -> GrowthStage:
        """A stage of flat keys, a registered axis' own keys among them (the CLI's ``growth.stages`` entries): those
        go to :attr:`extra`, the others are fields; the same as ``GrowthStage(at_step, **fields, extra={...})``.

        Raises:
            TypeError: for a key that is neither a field nor a registered axis' key.

        Example::

            >>> GrowthStage.from_keys(500, n_embd=1024) == GrowthStage(500, n_embd=1024)
            True
        """
        return cls(at_step, **_split_keys(keys))


_FIELD_NAMES = frozenset(f.name for f in fields(GrowthStage) if f.name != FILLED)  # the stage keys and extra
reserve_stage_keys(_FIELD_NAMES | {FILLED})  # no axis' stage_keys may shadow a field
set_signatures(GrowthStage)  # jsonargparse reads __init__'s: a YAML mapping passes only the keys it sets


check_keywords(GrowthStage)  # a misspelt keyword: a TypeError that names the close key


def _axis(name: str) -> GrowthAxis:
    return next(axis for axis in registered_axes() if axis.name == name)


def stage_key_fields() -> tuple[dataclasses.Field, ...]:
    """Every stage key as a dataclass ``Field`` (name, type, default): :class:`GrowthStage`'s fields but ``extra``
    (a recipe key with the paper's value as its default), then the registered axes' own keys
    (:func:`plugin_key_fields`), flat: what the CLI's ``growth.stages`` entries hold.

    Example::

        >>> [f.name for f in stage_key_fields()][:3]
        ['at_step', 'n_embd', 'intermediate_size']
    """
    own = (paper_default(f) for f in fields(GrowthStage) if f.name not in ("extra", FILLED))
    return (*own, *plugin_key_fields().values())


def _split_keys(keys: Mapping[str, Any]) -> dict[str, Any]:
    """Flat stage keys as ``GrowthStage`` keywords: a registered axis' own keys under ``extra``."""
    plugin = plugin_key_fields()
    own = {k: v for k, v in keys.items() if k not in plugin}
    extra = {**own.pop("extra", {}), **{k: v for k, v in keys.items() if k in plugin}}
    return {**own, "extra": extra} if extra else own
