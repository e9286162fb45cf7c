"""``GrowthStage``: one width growth event, validated when it is built."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from fractions import Fraction
from typing import Any

from lightning_sparkling.growth.axes import HEAD_AXES, SIZE_AXES, WIDTH_AXES, registered_axes
from lightning_sparkling.growth.depth import DEPTH_INITS, DEPTH_ORDERS
from lightning_sparkling.growth.errors import StageError, _stage_error, check_choice  # importable from here as before
from lightning_sparkling.growth.scaling import SPLITS, parse_init
from lightning_sparkling.growth.schedules import SCHEDULES

OPTIMIZER_STATES: tuple[str, ...] = ("asymmetric", "copy", "drop", "asymmetric-scaled", "scaled")
REWARMUP_SCOPES: tuple[str, ...] = ("new", "all")
BIAS_CORRECTIONS: tuple[str, ...] = ("shared", "fresh")
SYMMETRY_RELEASES: tuple[str, ...] = ("hold", "schedule")
DEFAULT_SPLIT_RATIO = 1 / 3


@dataclass(frozen=True)
class GrowthStage:
    """One growth: at ``at_step`` widen some of ``n_embd``, ``intermediate_size``, ``moe_intermediate_size``
    and/or deepen the model to ``n_layer`` blocks (one plan, one growth event when a stage sets several).

    The defaults are the SPARKLING recipe: copy-copy init, RMS-preserving fan-in scale, asymmetric optimizer
    state (old entries keep theirs, new entries start at zero) and an asymmetric learning-rate re-warmup of the
    new entries (from the LR at growth to ``rewarmup_ratio`` times it over ``rewarmup_steps``, then cosine).

    Args:
        at_step: grow after this many optimizer steps, before step ``at_step + 1``'s first micro-batch.
        at_fraction: instead of ``at_step``, grow after this fraction of the run, in ``(0, 1)``: ``at_step`` becomes
            ``ceil(at_fraction * max_steps)`` (:func:`fraction_step`) once the trainer's ``max_steps`` is known
            (the callback's ``setup``, :func:`resolve_timing`). Give exactly one of ``at_step`` and ``at_fraction``.
        n_embd: new hidden (residual stream) size. Heads, head size and RoPE are unchanged.
        intermediate_size: new dense MLP inner size.
        moe_intermediate_size: new MoE expert inner size (every expert, shared experts scaled alike).
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

    The keys below grow the depth (G_stack, MIDAS); a new block's tensors are new entries like new width, so the
    re-warmup, ``optimizer_state``, ``bias_correction`` and the symmetry loop apply to them.

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

    The keys below grow the attention heads, or grow into a named litgpt config.

    Args:
        n_head: new number of query heads, of the same ``head_size`` (new heads copy heads of their key/value group
            under a copied ``init`` fan-out side, or start random with zeroed ``attn.proj`` fan-in columns under
            ``random-zero``; see :mod:`~lightning_sparkling.growth.heads`).
        n_query_groups: new number of key/value groups (default: unchanged when ``n_head / n_query_groups`` stays
            whole, i.e. new heads join the existing groups; an MHA model grown by ``n_head`` alone stays MHA). New
            groups copy source groups.
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

    The keys below grow the experts (:mod:`~lightning_sparkling.growth.axes.experts`: what keeps the function and
    what changes it); a new expert's tensors and a router's new rows are new entries like new width, so the re-warmup
    and ``optimizer_state`` apply to them. Widths, heads and depth may grow in the same stage (a new expert then copies
    its source widened; dense -> MoE widens the MLP into expert 0; a new block gets its experts as its MLP starts).

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
    n_embd: int | None = None
    intermediate_size: int | None = None
    moe_intermediate_size: int | None = None
    init: str = "copy-copy"
    rms_preserving: bool = True
    optimizer_state: str = "asymmetric"
    rewarmup_ratio: float | None = 1.3
    rewarmup_steps: int = 250
    n_layer: int | None = None
    depth_init: str = "copy-zero"
    depth_order: str = "stack"
    n_head: int | None = None
    n_query_groups: int | None = None
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
    depth_map: tuple[int, ...] | None = None
    n_expert: int | None = None
    n_expert_per_token: int | None = None
    mlp_class_name: str | None = None
    expert_init: str = "copy"
    expert_reinit_fraction: float = 0.5
    router_init: str = "random"
    first_k_dense_replace: int | None = None

    def __post_init__(self) -> None:
        self._check_timing()
        if self.depth_map is not None:
            self._check_depth_map()
        if self.model_name is not None or self.model_config is not None:
            self._check_target()
        elif not self.sizes and not self.grows_experts:
            raise StageError(
                None,
                f"GrowthStage(at_step={self.at_step}) grows nothing: give at least one of {', '.join(SIZE_AXES)}, "
                "n_expert, model_name or model_config"
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
        self._check_baselines(fan_in)
        self._check_lock_breakers(fan_out, fan_in)
        for axis in registered_axes():  # each axis' own keys (e.g. the experts')
            axis.check_stage(self)

    def _check_timing(self) -> None:
        if (self.at_step is None) == (self.at_fraction is None):
            raise StageError("at_step",
                             f"GrowthStage(at_step={self.at_step!r}, at_fraction={self.at_fraction!r}): give exactly "
                             "one of at_step (optimizer steps) and at_fraction (a fraction of max_steps)")
        if self.at_step is not None and (isinstance(self.at_step, bool) or not isinstance(self.at_step, int)
                                         or self.at_step < 0):
            raise StageError("at_step", f"GrowthStage(at_step={self.at_step!r}): at_step must be an integer >= 0")
        f = self.at_fraction
        if f is not None and (isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f < 1):
            raise StageError("at_fraction",
                             f"GrowthStage(at_fraction={f!r}): must be a number in (0, 1), the fraction of "
                             "max_steps after which to grow (e.g. 0.25), or use at_step")

    def _check_depth_map(self) -> None:
        given = self.depth_map
        if isinstance(given, (str, bytes)) or not isinstance(given, Sequence) or not given or any(
                isinstance(i, bool) or not isinstance(i, int) or i < 0 for i in given):
            raise StageError("depth_map",
                             f"GrowthStage(depth_map={given!r}): must be a non-empty list of old-block indices "
                             "(integers >= 0), one per block of the grown model, e.g. [0, 1, 0, 1]")
        depth_map = tuple(given)
        object.__setattr__(self, "depth_map", depth_map)  # a list from YAML / JSON: a tuple, so stages compare
        seen = 0
        for j, i in enumerate(depth_map):
            if i > seen:
                raise StageError("depth_map",
                    f"GrowthStage(depth_map={list(depth_map)}): position {j} holds old block {i} before old block "
                    f"{seen} first appears; the first occurrence of each old block must come in order 0, 1, 2, ... "
                    "(it is the old block itself, later ones are its copies, and old blocks keep their order), e.g. "
                    "[0, 1, 0, 1] (stack) or [0, 0, 1, 1] (interleave)")
            seen += i == seen
        if self.depth_order != "stack":
            raise StageError("depth_map",
                             f"GrowthStage(depth_map={list(depth_map)}, depth_order={self.depth_order!r}): give one "
                             "of them; the map says where every block goes (drop depth_order)")
        if self.model_name is not None or self.model_config is not None:
            return  # the target sets n_layer; the map's length is checked against it when planned
        if self.n_layer is None:
            object.__setattr__(self, "n_layer", len(depth_map))
        elif self.n_layer != len(depth_map):
            raise StageError("n_layer",
                             f"GrowthStage(depth_map={list(depth_map)}, n_layer={self.n_layer!r}): the map has "
                             f"{len(depth_map)} entries, one per block of the grown model; give n_layer="
                             f"{len(depth_map)} or leave n_layer out")

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

    def _check_target(self) -> None:
        if self.model_name is not None and self.model_config is not None:
            raise StageError("model_name",
                             "GrowthStage(model_name=..., model_config=...): give one of them, not both")
        if self.sizes:
            raise StageError(None,
                             f"GrowthStage(model_name/model_config with {', '.join(self.sizes)}): the target config "
                             "sets every size; drop the size keys or the target")
        if self.model_name is not None and not (isinstance(self.model_name, str) and self.model_name):
            raise StageError("model_name",
                             f"GrowthStage(model_name={self.model_name!r}): must be a litgpt config name")
        if self.model_config is not None and not isinstance(self.model_config, dict):
            raise StageError("model_config",
                             f"GrowthStage(model_config={self.model_config!r}): must be a dict of litgpt Config fields")

    def _check_baselines(self, fan_in: str) -> None:
        def number(value: object) -> bool:
            return not isinstance(value, bool) and isinstance(value, (int, float))

        check_choice("split", self.split, SPLITS)
        if not number(self.split_ratio) or not 0 < self.split_ratio < 1:
            raise StageError("split_ratio",
                             f"GrowthStage(split_ratio={self.split_ratio!r}): must be a number in (0, 1), the "
                             "source's part r of r : 1 - r (1/3: the paper's 1:2)")
        if self.split != "uneven" and self.split_ratio != DEFAULT_SPLIT_RATIO:
            raise StageError("split",
                             f"GrowthStage(split_ratio={self.split_ratio!r}): only used with split='uneven' (split "
                             f"is {self.split!r})")
        if not number(self.perturb) or not (math.isfinite(self.perturb) and self.perturb >= 0):
            raise StageError("perturb",
                             f"GrowthStage(perturb={self.perturb!r}): must be a finite number >= 0 (the standard "
                             "deviation of the +/- perturbation relative to the RMS of the shares; 0: off)")
        if self.n_head is not None or self.n_query_groups is not None:
            for key, active in (("split", self.split != "even"), ("perturb", self.perturb > 0)):
                if active:
                    raise StageError(key,
                                     f"GrowthStage({key}={getattr(self, key)!r}): not supported with a heads growth "
                                     "(n_head / n_query_groups); use the default even split and no perturb")
        if fan_in != "copy":
            for key, active in (("split", self.split != "even"), ("perturb", self.perturb > 0)):
                if active:
                    raise StageError(
                        key,
                        f"GrowthStage({key}={getattr(self, key)!r}): divides or perturbs the fan-in shares of a "
                        f"copied channel, but the init pair {self.init!r} does not copy the fan-in side; use a pair "
                        "ending in '-copy' (copy-copy, random-copy, zero-copy)")
        check_choice("rewarmup_scope", self.rewarmup_scope, REWARMUP_SCOPES)
        if self.rewarmup_scope == "all" and self.rewarmup_ratio is None:
            raise StageError("rewarmup_scope",
                             "GrowthStage(rewarmup_scope='all'): every parameter follows this stage's re-warmup, "
                             "but rewarmup_ratio is None (no re-warmup); give a rewarmup_ratio or use 'new'")
        if not number(self.decay_speedup) or not 0 <= self.decay_speedup < 1:
            raise StageError("decay_speedup",
                             f"GrowthStage(decay_speedup={self.decay_speedup!r}): must be a number in [0, 1) (the "
                             "fraction by which the remaining decay is shortened; the paper uses 0.25 and 0.5)")

    def _check_lock_breakers(self, fan_out: str, fan_in: str) -> None:
        check_choice("bias_correction", self.bias_correction, BIAS_CORRECTIONS)
        if self.bias_correction == "fresh" and self.rewarmup_ratio is None:
            raise StageError("bias_correction",
                             "GrowthStage(bias_correction='fresh'): the correction scales the new entries' LR, but "
                             "rewarmup_ratio is None (no new-entry LR); set rewarmup_ratio (1.0 for the correction "
                             "alone)")
        if isinstance(self.symmetry_interval, bool) or not isinstance(self.symmetry_interval, int) \
                or self.symmetry_interval < 1:
            raise StageError("symmetry_interval",
                             f"GrowthStage(symmetry_interval={self.symmetry_interval!r}): must be an integer >= 1 "
                             "(optimizer steps between two symmetry checks)")
        boost = self.symmetry_max_boost
        if isinstance(boost, bool) or not isinstance(boost, (int, float)) or not (math.isfinite(boost) and boost >= 1):
            raise StageError("symmetry_max_boost",
                             f"GrowthStage(symmetry_max_boost={boost!r}): must be a finite number >= 1 (the largest "
                             "multiplier of the new entries' LR)")
        check_choice("symmetry_release", self.symmetry_release, SYMMETRY_RELEASES)
        target = self.symmetry_target
        if target is None:
            return
        if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 < target < 1:
            raise StageError("symmetry_target",
                             f"GrowthStage(symmetry_target={target!r}): must be a number in (0, 1), the mean cosine "
                             "of copies to their sources below which the LR boost ends (e.g. 0.5), or None")
        if not self.copies:
            what = f"the init pair {self.init!r}" if set(self.sizes) - {"n_layer"} else ""
            if self.n_layer is not None:
                what += (" and " if what else "") + f"depth_init={self.depth_init!r}"
            raise StageError("depth_init" if self.n_layer is not None else "symmetry_target",
                             f"GrowthStage(symmetry_target={target}): {what} copies nothing, so there is no symmetry "
                             "to break; use a copied init (a pair with a copied side, depth_init 'copy' or "
                             "'copy-zero') or drop symmetry_target")
        if self.rewarmup_ratio is None:
            raise StageError("symmetry_target",
                             f"GrowthStage(symmetry_target={target}): the boost scales the new entries' LR, but "
                             "rewarmup_ratio is None (no new-entry LR); set rewarmup_ratio")
        if self.rewarmup_scope == "all":
            raise StageError("rewarmup_scope",
                             f"GrowthStage(symmetry_target={target}): the boost scales the new entries' LR, but "
                             "with rewarmup_scope='all' every entry follows one LR; use rewarmup_scope='new'")

    @property
    def grows_experts(self) -> bool:
        """Whether the stage sets an experts key (``n_expert``, ``n_expert_per_token``, ``mlp_class_name`` or
        ``first_k_dense_replace``): :mod:`~lightning_sparkling.growth.axes.experts` plans it."""
        return any(getattr(self, key) is not None
                   for key in ("n_expert", "n_expert_per_token", "mlp_class_name", "first_k_dense_replace"))

    @property
    def changes_baseline(self) -> bool:
        """Whether the stage changes the LR of old entries too (``rewarmup_scope='all'`` or ``decay_speedup``)."""
        return self.rewarmup_scope == "all" or self.decay_speedup > 0

    @property
    def widths(self) -> dict[str, int]:
        """The widths this stage sets, ``{axis: new size}``, in the order of :data:`WIDTH_AXES`."""
        return {axis: getattr(self, axis) for axis in WIDTH_AXES if getattr(self, axis) is not None}

    @property
    def sizes(self) -> dict[str, int]:
        """Every size this stage sets, ``{axis: new size}``: :attr:`widths`, then ``n_layer``.

        Example::

            >>> GrowthStage(500, n_layer=12, n_embd=1024).sizes
            {'n_embd': 1024, 'n_layer': 12}
        """
        return {axis: getattr(self, axis) for axis in SIZE_AXES if getattr(self, axis) is not None}

    @property
    def copies(self) -> bool:
        """Whether some new entries start as copies of old ones (a copied side of ``init`` on a width this stage
        grows, or a copied ``depth_init``): the copies whose likeness ``symmetry/`` measures."""
        width_copies = bool(self.widths or self.n_head or self.n_query_groups or self.model_name or self.model_config
                            ) and "copy" in (self.fan_out_init, self.fan_in_init)
        expert_copies = self.grows_experts and self.expert_init != "random"
        return width_copies or expert_copies or (self.n_layer is not None and self.depth_init.startswith("copy"))

    @property
    def fan_out_init(self) -> str:
        return parse_init(self.init)[0]

    @property
    def fan_in_init(self) -> str:
        return parse_init(self.init)[1]

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (for checkpoints and logs); ``GrowthStage(**stage.to_dict())`` rebuilds it."""
        return asdict(self)

    @classmethod
    def from_recipe(cls, recipe: str, at_step: int | None = None, **keys: Any) -> GrowthStage:
        """A stage of a named recipe (:data:`RECIPES`): the recipe's keys, then ``keys`` on top.

        ``GrowthStage(...)`` alone is the paper's recipe (``recipe='paper'``); ``'recommended'`` is the one our
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
            >>> GrowthStage.from_recipe("paper", 500, n_embd=1024) == GrowthStage(500, n_embd=1024)
            True
        """
        return cls(at_step, **apply_recipe(recipe, keys))


RECIPES: dict[str, dict[str, Any]] = {
    # GrowthStage's own defaults: the SPARKLING recipe as published (copy-copy, RMS-preserving scale, asymmetric
    # state, new entries re-warmed to 1.3x over rewarmup_steps).
    "paper": {},
    # What the seeded comparisons of docs/BENCHMARKS.md ("Making growth pay") found best over the token ratios
    # measured: the paper's function-preserving copy-copy growth plus the closed loop on the symmetry lock (the new
    # entries' LR is doubled every 10 steps, up to 8x, while the copies' cosine to their sources is above 0.5, then
    # held).
    "recommended": {"symmetry_target": 0.5, "symmetry_max_boost": 8.0, "symmetry_release": "hold"},
    # New channels with no source (random fan-out, zero fan-in: they write nothing at first) and a 10x re-warmup:
    # the best at the smallest token ratio measured (2.8 per parameter), behind "recommended" at 11 and 17.
    "random-zero": {"init": "random-zero", "rewarmup_ratio": 10.0},
    # For warmup-stable-decay schedules: sourceless new channels with the paper's own 1.3x re-warmup, no loop. Under
    # WSD the new entries' re-warmed LR is held at the stable peak until the decay, so the 8x / 10x multipliers of
    # "recommended" / "random-zero" ended above scratch there; this one ended below it (docs/BENCHMARKS.md, "Where
    # growth pays: the scan"). Depth-only stages are unchanged by it (their new blocks follow ``depth_init``).
    "wsd": {"init": "random-zero", "rewarmup_ratio": 1.3},
    # The default under a cosine schedule: sourceless new channels (random fan-out, zero fan-in) re-warmed to 3x, no
    # loop. At 2.8 tokens per parameter it ended furthest below same-FLOPs scratch of every recipe measured, with the
    # largest speed-up at equal loss, and it keeps the activation RMS near scratch's, where "recommended"'s loop (8x,
    # never released while the copies stay alike) drove the final hidden RMS to ~5x scratch's (docs/BENCHMARKS.md,
    # "Compute to reach the same loss, and signal health").
    "random-zero-3x": {"init": "random-zero", "rewarmup_ratio": 3.0},
}
"""Named recipes: :class:`GrowthStage` keys a stage gets unless it sets them itself (:func:`apply_recipe`)."""

SCHEDULE_RECIPES: dict[str, str] = {name: kind.recipe for name, kind in SCHEDULES.items()}
"""The recipe the seeded comparisons found best under each LR schedule (docs/BENCHMARKS.md, "Where growth pays"):
what ``growth.recipe: auto``, the CLI's default, resolves to; read from the schedule registry
(:data:`~lightning_sparkling.growth.schedules.SCHEDULES`). A schedule not in it gets ``SCHEDULE_RECIPES["cosine"]``
(the CLI refuses such a schedule by its own key first)."""

_SYMMETRY_KEYS = ("symmetry_target", "symmetry_interval", "symmetry_max_boost", "symmetry_release")


def grows_channels(keys: dict[str, Any]) -> bool:
    """Whether a stage of ``keys`` (:class:`GrowthStage` keys) adds width channels or heads, the entries its ``init``
    pair and a recipe's symmetry loop act on: a width, a head count, or a named target (``model_name`` /
    ``model_config``); a stage that only adds blocks (``n_layer``) does not.

    Example::

        >>> grows_channels({"n_embd": 128}), grows_channels({"n_layer": 12}), grows_channels({"model_name": "x"})
        (True, False, True)
    """
    return any(keys.get(axis) is not None for axis in (*WIDTH_AXES, *HEAD_AXES, "model_name", "model_config"))


def apply_recipe(recipe: str, keys: dict[str, Any]) -> dict[str, Any]:
    """``keys`` (a stage's own :class:`GrowthStage` keys) completed by the recipe ``recipe``: a key the stage sets
    wins. The symmetry loop of a recipe is left out of a stage it cannot apply to (an ``init`` with no copied side,
    ``rewarmup_ratio=None``, or ``rewarmup_scope='all'``, where every entry follows one LR): there is no new-entry
    LR to boost or no lock to break there, and the stage said so itself. A stage that grows only ``n_layer`` does
    not get the loop either: copied blocks under the loop lost most of the gain of a depth growth in the seeded
    comparison (docs/BENCHMARKS.md, "Depth growth"); set ``symmetry_target`` on the stage to have it anyway. Nor
    does it get the recipe's ``init``, which acts on new width channels only (new blocks follow ``depth_init``).

    Raises:
        ValueError: for an unknown recipe, naming the known ones.

    Example::

        >>> apply_recipe("random-zero", {"n_embd": 128, "init": "copy-copy"})
        {'n_embd': 128, 'init': 'copy-copy', 'rewarmup_ratio': 10.0}
        >>> apply_recipe("recommended", {"n_embd": 128, "init": "random-random"})
        {'n_embd': 128, 'init': 'random-random'}
        >>> apply_recipe("recommended", {"n_layer": 12})
        {'n_layer': 12}
        >>> apply_recipe("wsd", {"n_layer": 12})
        {'n_layer': 12, 'rewarmup_ratio': 1.3}
        >>> apply_recipe("random-zero-3x", {"n_layer": 12})
        {'n_layer': 12}
    """
    if recipe not in RECIPES:
        raise StageError("recipe",
                         f"recipe={recipe!r}: choose one of {', '.join(RECIPES)}")
    extra = {k: v for k, v in RECIPES[recipe].items() if k not in keys}
    init = keys.get("init", extra.get("init", "copy-copy"))
    # the loop's keys go to stages whose width copies it unlocks (widths, heads, a named target); copied blocks
    # alone do not get it: measured, it cost a depth growth most of its gain (docs/BENCHMARKS.md, depth growth)
    widths = grows_channels(keys)
    copies = widths and isinstance(init, str) and "copy" in init.split("-")
    no_rewarmup = "rewarmup_ratio" in keys and keys["rewarmup_ratio"] is None
    if not copies or no_rewarmup or keys.get("rewarmup_scope") == "all":
        extra = {k: v for k, v in extra.items() if k not in _SYMMETRY_KEYS}
    if not widths:  # an init pair acts on new width channels only; new blocks follow depth_init
        extra.pop("init", None)
        if recipe in WIDTH_ONLY_RECIPES:
            extra = {}
    return {**keys, **extra}


WIDTH_ONLY_RECIPES = frozenset({"random-zero-3x"})
"""Recipes measured on width growth only: a stage that grows only ``n_layer`` keeps the paper's keys under them (the
depth cells of the measured map were taken with those), so the default recipe changes nothing for depth growth."""


def fraction_step(fraction: float, max_steps: int) -> int:
    """The growth step of ``at_fraction=fraction`` in a run of ``max_steps`` optimizer steps: ``ceil(fraction *
    max_steps)``, the first step by which at least that fraction of the run has trained (as ``at_tokens`` rounds up),
    the product taken on the decimal value written (``0.07 * 100`` is 7, not the float's 7.000000000000001).

    Example::

        >>> fraction_step(0.07, 100), fraction_step(0.25, 30), fraction_step(1 / 3, 300)
        (7, 8, 100)
    """
    return math.ceil(Fraction(repr(float(fraction))) * max_steps)


def resolve_timing(stages: Sequence[GrowthStage], max_steps: int | None) -> list[GrowthStage]:
    """``stages`` with every ``at_fraction`` turned into its ``at_step`` (:meth:`GrowthStage.resolved`), then
    checked to grow in strictly increasing step order (:func:`check_stage_order`).

    Raises:
        ValueError: for an ``at_fraction`` without ``max_steps``, or stages out of order once resolved.

    Example::

        >>> [s.at_step for s in resolve_timing([GrowthStage(10, n_embd=64), GrowthStage(at_fraction=0.5,
        ...                                     n_embd=128)], 100)]
        [10, 50]
    """
    resolved = [s.resolved(max_steps) for s in stages]
    check_stage_order(resolved, given=stages)
    return resolved


def check_stage_order(stages: Sequence[GrowthStage], *, given: Sequence[GrowthStage] | None = None) -> None:
    """Refuse stages not in strictly increasing ``at_step`` order (stages still holding an ``at_fraction`` are
    skipped: their order is checked once resolved). ``given``: the stages as the user wrote them, for the message.

    Raises:
        ValueError: naming every stage's step (and fraction).
    """
    steps = [s.at_step for s in stages if s.at_step is not None]
    if any(b <= a for a, b in zip(steps, steps[1:])):
        written = [f"{s.at_step} (at_fraction={g.at_fraction})" if g.at_fraction is not None else str(s.at_step)
                   for s, g in zip(stages, given or stages)]
        raise ValueError(f"stages must be in strictly increasing at_step order, got at_step=[{', '.join(written)}]")


def decay_end(stage: GrowthStage, max_steps: int, growth_step: int | None = None) -> int:
    """The step at which the schedule after a growth reaches its final LR: ``max_steps``, or with
    ``decay_speedup = s`` the earlier ``t_e + max(1, round((1 - s) (max_steps - t_e)))`` (``t_e``: the growth step,
    ``stage.at_step`` unless given).

    Example::

        >>> decay_end(GrowthStage(100, n_embd=128, decay_speedup=0.25), 300)
        250
    """
    t_e = stage.at_step if growth_step is None else growth_step
    if not stage.decay_speedup or max_steps <= t_e:
        return max_steps
    return t_e + max(1, round((1 - stage.decay_speedup) * (max_steps - t_e)))


def check_stage_sequence(stages: GrowthStage | list[GrowthStage] | tuple[GrowthStage, ...]) -> None:
    """Refuse ``rewarmup_scope='all'`` or ``decay_speedup`` on a stage that is not the last one.

    Both redefine the learning rate of every old entry for the rest of the run; a later stage would then need a
    baseline of its own (which LR is "the LR at growth", which end its re-warmup decays to). The paper uses them in
    single-expansion comparisons only.

    Raises:
        ValueError: naming the stage and the key.
    """
    stages = [stages] if isinstance(stages, GrowthStage) else list(stages)
    for k, stage in enumerate(stages[:-1]):
        if stage.changes_baseline:
            key = "rewarmup_scope" if stage.rewarmup_scope == "all" else "decay_speedup"
            raise StageError(
                key,
                f"GrowthStage(at_step={stage.at_step}) {key}={getattr(stage, key)!r}: changes the learning rate of "
                f"every parameter for the rest of the run, so only the last stage may set it (stage {k} of "
                f"{len(stages)} sets it)", stage=k)


def rewarmup_window(stage: GrowthStage, max_steps: int) -> tuple[int, int, int] | None:
    """Where a stage's new-entry re-warmup lies in a run of ``max_steps`` optimizer steps.

    Returns ``(warmup_end, tail_steps, steps_left)``: the linear re-warmup covers the optimizer steps taken at
    ``global_step`` ``at_step .. warmup_end - 1``, the cosine tail then runs ``tail_steps`` steps down to ``min_lr``
    at ``max_steps`` (at :func:`decay_end` with ``decay_speedup``); ``steps_left`` = that end ``- at_step``.
    ``None`` when the stage has no re-warmup.

    Example::

        >>> rewarmup_window(GrowthStage(100, n_embd=128, rewarmup_steps=20), 300)
        (120, 180, 200)
    """
    if stage.rewarmup_ratio is None:
        return None
    end = decay_end(stage, max_steps)
    steps_left = end - stage.at_step
    warmup_end = stage.at_step + stage.rewarmup_steps
    return warmup_end, end - warmup_end, steps_left


def check_rewarmup_fits(stages: GrowthStage | list[GrowthStage] | tuple[GrowthStage, ...], max_steps: int,
                        *, names: list[str] | None = None) -> None:
    """Refuse a stage whose re-warmup cannot finish inside the run.

    The new entries of a stage re-warm linearly for ``rewarmup_steps`` steps, then decay by cosine to ``min_lr``
    at ``max_steps``. When ``at_step + rewarmup_steps >= max_steps`` the LR is still climbing (or at its peak)
    at the last step while the old entries have decayed to ``min_lr``: the run ends on a half-done schedule.

    Args:
        stages: the growth stages, in order.
        max_steps: the run's last optimizer step.
        names: how to call each stage in the message (default ``GrowthStage(at_step=...)``), e.g. the config key.

    Raises:
        ValueError: naming the stage, its re-warmup, the steps left and the fix.

    Example::

        >>> check_rewarmup_fits([GrowthStage(100, n_embd=128)], max_steps=300)
        Traceback (most recent call last):
        ...
        lightning_sparkling.growth.stage.StageError: GrowthStage(at_step=100): rewarmup_steps=250 does not fit ...
    """
    stages = [stages] if isinstance(stages, GrowthStage) else list(stages)
    for k, stage in enumerate(stages):
        window = rewarmup_window(stage, max_steps)
        if window is None:
            continue
        warmup_end, tail, left = window
        if tail >= 1:
            continue
        name = names[k] if names else f"GrowthStage(at_step={stage.at_step})"
        # e.g. a tenth of the steps left; with 1 step left only 0 (no ramp) fits, and there is nothing to suggest
        example = f" (e.g. {max(1, left // 10)}, a tenth of the steps left)" if left >= 2 else ""
        faster = f", decay_speedup={stage.decay_speedup}" if stage.decay_speedup else ""
        raise StageError(
            "rewarmup_steps",
            f"{name}: rewarmup_steps={stage.rewarmup_steps} does not fit in the {left} steps left after the growth "
            f"(at_step={stage.at_step}, max_steps={max_steps}{faster}): the new entries' LR would still be rising at "
            f"the last step instead of decaying to min_lr. Set rewarmup_steps to at most {max(0, left - 1)}{example}, "
            f"grow earlier, or raise max_steps",
            stage=k,
        )
