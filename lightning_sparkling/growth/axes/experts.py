"""The experts axis: grow the experts of a litgpt ``LLaMAMoE`` (MoE -> more experts) or turn every ``LLaMAMLP``
into a ``LLaMAMoE`` of copies of it (dense -> MoE, sparse upcycling).

=========================  ===================================================================================
stage keys                 what happens
=========================  ===================================================================================
``n_expert=E``             on a ``LLaMAMoE`` model: new expert ``E_old + i`` copies expert ``i % E_old`` of the
(``n_expert_per_token=K``) same block (``expert_init``), its router row the source's row (a ``GroupedTopkRouter``
                           keeps its experts per group: ``n_expert_groups`` grows with ``E``, its
                           ``e_score_correction_bias`` entries are copied, ``n_topk_groups`` grows with ``K``)
``mlp_class_name=          on a ``LLaMAMLP`` model: every block's MLP becomes expert 0 of a ``LLaMAMoE`` (the same
"LLaMAMoE"``, ``n_expert``, module and parameters), experts ``1..E-1`` copy it (``expert_init``), the router starts
``n_expert_per_token``     as ``router_init`` (``moe_intermediate_size`` = the MLP's ``intermediate_size``)
``first_k_dense_replace=k`` dense -> MoE only: blocks ``0..k-1`` keep their ``LLaMAMLP`` (the same module,
(with the above)           Parameters and optimizer state), blocks ``k..`` upcycle; the grown config carries
                           litgpt's ``first_k_dense_replace=k`` (``0 <= k < n_layer``; on MoE -> more experts the
                           key may only repeat the model's own value)
=========================  ===================================================================================

``expert_init``: ``copy``; ``drop-upcycle`` (Nakamura et al., ICLR 2025: a copy with ``expert_reinit_fraction`` of
its inner channels re-drawn from the weight's mean and std); ``random`` (litgpt's init; router rows from its own).

What keeps the function (litgpt's ``LLaMAMoE.forward``: an ``nn.Linear`` router takes the top ``K`` logits and
soft-maxes *over those K*, so the K weights always sum to one; a ``GroupedTopkRouter`` takes sigmoid scores and
divides by their sum only with ``norm_topk_prob``; ``routed_scaling_factor`` multiplies either):

- dense -> MoE with ``copy``: exact whatever the router (random or zero), since identical experts weighted by K
  weights that sum to one give the MLP's output (the new config's ``routed_scaling_factor`` is 1.0: a dense
  config's own is inert, and carried it would scale every expert's output).
- MoE -> ``m`` times the experts *and* ``m`` times ``n_expert_per_token``, ``copy``: exact (each picked expert's
  ``m - 1`` copies tie its logit; the softmax over the top ``mK`` gives each ``1/m`` of its weight). A
  ``GroupedTopkRouter``: see :func:`experts_keep_function`. Where two old experts' router rows already tie (a
  frozen router after an earlier copy), the tie-break picks between different experts: "function changes".
- ``n_expert`` alone (K kept, K > 1): a token's top K now holds copies of its best expert instead of its K best,
  which changes the function; K = 1 stays exact (a grouped router: see :func:`experts_keep_function`).
  ``drop-upcycle`` and ``random`` change it too. ``sparkling plan`` and the growth log print the loss after the
  growth; the growth log reads the grouped router's corrections from the grown model.

``router_init="zero"`` with ``expert_init="copy"`` is refused: the copies would never part (zero router gradient).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

from lightning_sparkling.growth.axes.base import BaseAxis
from lightning_sparkling.growth.axes.registry import function_words, plan_axes, register_axis
from lightning_sparkling.growth.depth_maps import litgpt_init_std
from lightning_sparkling.growth.errors import GrowthError, StageError, check_choice
from lightning_sparkling.growth.scaling import make_generator
from lightning_sparkling.growth.types import AxisPlan, ChannelChange, DimGrowth, PlanContext, TensorPlan

if TYPE_CHECKING:
    from litgpt import GPT

MOE_CLASS = "LLaMAMoE"
EXPERT_INITS: tuple[str, ...] = ("copy", "drop-upcycle", "random")
ROUTER_INITS: tuple[str, ...] = ("random", "zero")
EXPERT_CHANNEL = "n_expert"
"""The channel dimension of the experts (dimension 0 of a router's weight, one entry per expert): a channel's name,
not an axis."""
DEFAULT_REINIT_FRACTION = 0.5
_EXPERT_TENSOR = re.compile(r"^transformer\.h\.(\d+)\.mlp\.experts\.(\d+)\.(fc_1|fc_2|proj)\.(weight|bias)$")


DENSE_KEY = "first_k_dense_replace"


def _positive_int(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value > 0


class ExpertsKeyError(StageError, GrowthError):
    """An experts key the *model* refuses (e.g. ``first_k_dense_replace`` past the model's last block): a
    :class:`~lightning_sparkling.growth.errors.GrowthError`, as every refusal of :func:`plan_growth`, that names its
    key like a :class:`~lightning_sparkling.growth.errors.StageError` (``err.key``)."""

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across processes, keeping both classes
        return _experts_key_error, (str(self), self.key, self.stage)


def _experts_key_error(message: str, key: str | None, stage: int | None) -> ExpertsKeyError:
    return ExpertsKeyError(message, key=key, stage=stage)


def check_expert_keys(stage) -> None:
    """Refuse bad experts keys of a :class:`~lightning_sparkling.growth.stage.GrowthStage` (no model needed).

    Raises:
        ValueError: naming the key, its value and the fix.

    Example::

        >>> from lightning_sparkling.growth.stage import GrowthStage
        >>> GrowthStage(10, n_expert=4, n_expert_per_token=8)  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        ...
        StageError: GrowthStage(n_expert_per_token=8): more experts per token than experts (n_expert=4); ...
    """
    grows = stage.grows_experts
    if stage.mlp_class_name is not None and stage.mlp_class_name != MOE_CLASS:
        raise StageError(f"GrowthStage(mlp_class_name={stage.mlp_class_name!r}): litgpt's mixture of experts is "
                         f"{MOE_CLASS!r} (an nn.Linear top-k router, or a GroupedTopkRouter with n_expert_groups); use "
                         f"mlp_class_name={MOE_CLASS!r} to turn every LLaMAMLP into experts",
                         key="mlp_class_name")
    for key in ("n_expert", "n_expert_per_token"):
        value = getattr(stage, key)
        if value is not None and not _positive_int(value):
            raise StageError(f"GrowthStage({key}={value!r}): must be a positive integer", key=key)
    if stage.mlp_class_name is not None and (stage.n_expert is None or stage.n_expert_per_token is None):
        raise StageError(f"GrowthStage(mlp_class_name={stage.mlp_class_name!r}): dense -> MoE needs the number of "
                         f"experts and of experts per token; give n_expert and n_expert_per_token (e.g. 4 and 2)",
                         key="mlp_class_name")
    _check_dense_key(stage)
    if grows and stage.n_expert is None:
        raise StageError(f"GrowthStage(n_expert_per_token={stage.n_expert_per_token}): adds no experts; give n_expert "
                         "too (doubling both keeps the function)", key="n_expert_per_token")
    if stage.n_expert is not None and stage.n_expert_per_token is not None \
            and stage.n_expert_per_token > stage.n_expert:
        raise StageError(f"GrowthStage(n_expert_per_token={stage.n_expert_per_token}): more experts per token than "
                         f"experts (n_expert={stage.n_expert}); use at most {stage.n_expert}",
                         key="n_expert_per_token")
    check_choice("expert_init", stage.expert_init, EXPERT_INITS)
    check_choice("router_init", stage.router_init, ROUTER_INITS)
    fraction = stage.expert_reinit_fraction
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 <= fraction <= 1:
        raise StageError(f"GrowthStage(expert_reinit_fraction={fraction!r}): must be a number in [0, 1], the part of "
                         "each new expert's inner channels drop-upcycle re-draws (0.5: Drop-Upcycling's)",
                         key="expert_reinit_fraction")
    if fraction != DEFAULT_REINIT_FRACTION and stage.expert_init != "drop-upcycle":
        raise StageError(f"GrowthStage(expert_reinit_fraction={fraction!r}): only used with "
                         f"expert_init='drop-upcycle' (expert_init is {stage.expert_init!r})",
                         key="expert_reinit_fraction")
    if not grows:
        for key, default in (("expert_init", "copy"), ("router_init", "random")):
            if getattr(stage, key) != default:
                raise StageError(f"GrowthStage({key}={getattr(stage, key)!r}): only used when the stage grows the "
                                 "experts; give n_expert (and mlp_class_name='LLaMAMoE' on a dense model)",
                                 key=key)
        return
    if stage.router_init != "random" and stage.mlp_class_name is None:
        raise StageError(f"GrowthStage(router_init={stage.router_init!r}): only used by dense -> MoE "
                         "(mlp_class_name='LLaMAMoE'); on MoE -> more experts the new router rows follow expert_init",
                         key="router_init")
    if stage.router_init == "zero" and stage.expert_init == "copy":
        raise StageError("GrowthStage(router_init='zero', expert_init='copy'): every token would go to the first "
                         "n_expert_per_token experts and the copies would never part (their router gradient is zero "
                         "while they are equal); use router_init='random' or expert_init='drop-upcycle'",
                         key="router_init")
    others = [k for k in ("model_name", "model_config") if getattr(stage, k)]
    if others:
        raise StageError(f"GrowthStage(n_expert={stage.n_expert}) with {', '.join(others)}: a named target sets the "
                         "experts itself (an MoE target with more experts); drop n_expert, or the target",
                         key="n_expert")


def _check_dense_key(stage) -> None:
    """Refuse a ``first_k_dense_replace`` that is not an integer >= 0, or that comes without experts to grow (what
    the model allows, ``k < n_layer`` or its own value, :meth:`ExpertsAxis.config_values` checks)."""
    k = stage.first_k_dense_replace
    if k is None:
        return
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise StageError(f"GrowthStage({DENSE_KEY}={k!r}): must be an integer >= 0, the number of first "
                         "blocks that keep their dense MLP at dense -> MoE (e.g. 1)",
                         key=DENSE_KEY)
    if stage.n_expert is None:
        raise StageError(f"GrowthStage({DENSE_KEY}={k}): only used when the stage turns the MLPs into "
                         "experts; give it with mlp_class_name='LLaMAMoE', n_expert and n_expert_per_token "
                         "(dense -> MoE), or drop it", key=DENSE_KEY)


@dataclass(frozen=True)
class ExpertsChange:
    """The experts of one stage.

    Attributes:
        upcycle: dense -> MoE (the MLP of every block in ``blocks`` becomes expert 0 of a new ``LLaMAMoE``; the
            blocks before ``blocks[0]`` keep their ``LLaMAMLP``, ``first_k_dense_replace``).
        old / new: experts per MoE block before (``1`` for an upcycled MLP) and after.
        old_k / new_k: experts per token before (``1`` for an MLP) and after.
        blocks: the blocks whose experts grow.
        source: for each new expert ``old + i``, the expert it starts from (``i % old``).
        init: ``expert_init``. reinit_fraction: drop-upcycle's fraction. router_init: dense -> MoE's router start.
    """

    upcycle: bool
    old: int
    new: int
    old_k: int
    new_k: int
    blocks: tuple[int, ...]
    source: tuple[int, ...]
    init: str
    reinit_fraction: float
    router_init: str

    @property
    def exact(self) -> bool:
        """Whether the growth keeps the function (see the module docstring): dense -> MoE, top-1 kept, or ``m``
        times the experts with ``m`` times the experts per token for a whole ``m`` (every old expert then has
        ``m - 1`` copies; 4 -> 6 experts, top-2 -> top-3 copies experts 0 and 1 only, which changes the function).
        The grouped router's ``norm_topk_prob`` is checked by :meth:`ExpertsAxis.describe`.

        Example::

            >>> def change(new, new_k):
            ...     return ExpertsChange(False, 4, new, 2, new_k, (0,), tuple(range(new - 4)), "copy", 0.0, "random")
            >>> change(12, 6).exact, change(6, 3).exact, change(8, 2).exact
            (True, False, False)
        """
        if self.init != "copy":
            return False
        if self.upcycle or self.new_k == self.old_k == 1:
            return True
        copies, rest = divmod(self.new, self.old)
        return rest == 0 and self.new_k == self.old_k * copies


def experts_keep_function(change: ExpertsChange, config, min_bias: float | None) -> bool | None:
    """Whether the experts growth ``change`` of a model of ``config`` keeps the function: :attr:`ExpertsChange.exact`
    and, for a ``GroupedTopkRouter``, what its top-k does with the copies.

    The grouped router masks the experts of the groups it does not keep to 0.0 before its top K: a masked expert is
    picked (by ``torch.topk``'s tie-break, which a grown model breaks otherwise) when fewer than K kept experts score
    above 0.0, never if every ``e_score_correction_bias >= 0`` and K <= the kept groups' experts. Then:

    - ``m`` times the experts and K (``m`` times the groups and the top groups): exact with ``norm_topk_prob``
      (without it each copy keeps its source's full weight: ``m`` times the routed output);
    - K = 1 kept (the top groups kept): the new top groups hold copies of the old top ``n_topk_groups / m`` only, so
      the best expert stays among them only for ``n_topk_groups == 1`` or ``n_topk_scores_per_group == 1`` (a group's
      score its best expert's), and only if every correction is ``>= 0`` (the grown model masks groups).

    Args:
        change: the stage's experts change. config: the model's config before the growth.
        min_bias: the smallest ``e_score_correction_bias`` entry of the model (``None``: not known).

    Returns:
        ``True`` (kept), ``False`` (changes), or ``None`` where it is kept exactly when every correction is ``>= 0``
        and ``min_bias`` is ``None``.
    """
    if not change.exact:
        return False
    if change.upcycle or not config.n_expert_groups:
        return True
    groups, top, per_group = config.n_expert_groups, config.n_topk_groups, config.n_expert // config.n_expert_groups
    if change.new_k == change.old_k == 1:
        if top != 1 and config.n_topk_scores_per_group != 1:
            return False
        needs_bias = True
    else:
        if not config.norm_topk_prob or (change.old_k > top * per_group and top < groups):
            return False
        needs_bias = top < groups
    if not needs_bias:
        return True
    return None if min_bias is None else min_bias >= 0


def min_score_correction(model: nn.Module) -> float | None:
    """The smallest ``e_score_correction_bias`` entry of ``model``'s grouped routers (``None``: it has none)."""
    values = [b.min().item() for name, b in model.named_buffers()
              if name.endswith("mlp.gate.e_score_correction_bias") and b.numel()]
    return min(values) if values else None


def _moe_blocks(n_layer: int, first_k_dense_replace: int | None) -> tuple[int, ...]:
    """The blocks whose MLP is (or becomes) a ``LLaMAMoE``: litgpt keeps the first ``first_k_dense_replace`` dense."""
    return tuple(range(first_k_dense_replace or 0, n_layer))


class ExpertsAxis(BaseAxis):
    """The experts plug-in (:class:`~lightning_sparkling.growth.axes.GrowthAxis`)."""

    name = "experts"
    sizes: tuple[str, ...] = ("n_expert", "n_expert_per_token")
    structural = True

    def active(self, stage) -> bool:
        """Whether the stage sets an experts key (``n_expert``, ``n_expert_per_token``, ``mlp_class_name`` or
        ``first_k_dense_replace``)."""
        return any(getattr(stage, key) is not None
                   for key in ("n_expert", "n_expert_per_token", "mlp_class_name", "first_k_dense_replace"))

    def copies(self, stage) -> bool:
        """New experts copy old ones unless ``expert_init='random'``."""
        return self.active(stage) and stage.expert_init != "random"

    def check_stage(self, stage) -> None:
        check_expert_keys(stage)

    def check_model(self, config, stage) -> None:
        """Refuse a model these experts cannot grow (see :meth:`config_values`)."""
        self.config_values(config, stage)

    def config_values(self, config, stage) -> dict[str, Any]:
        """The grown config's experts fields.

        Raises:
            GrowthError: naming the value and the fix: ``n_expert`` on a model without experts (and no
                ``mlp_class_name='LLaMAMoE'``), dense -> MoE of an MLP that is not a ``LLaMAMLP`` or of a model that
                already has experts, fewer experts or experts per token, ``K > E``, a grouped router whose groups
                cannot keep their size; an :class:`ExpertsKeyError` (also a ``StageError``) for a
                ``first_k_dense_replace`` of ``n_layer`` or more, or, on MoE -> more experts, other than the model's.
        """
        is_moe = config.mlp_class_name == MOE_CLASS
        E, K = stage.n_expert, stage.n_expert_per_token
        if stage.mlp_class_name is not None:
            if is_moe:
                raise GrowthError(f"GrowthStage(mlp_class_name={stage.mlp_class_name!r}): the model is already a "
                                  f"{MOE_CLASS} with n_expert={config.n_expert}; drop mlp_class_name to add experts",
                                  key="mlp_class_name")
            if config.mlp_class_name != "LLaMAMLP":
                raise GrowthError(f"GrowthStage(mlp_class_name={stage.mlp_class_name!r}): litgpt's {MOE_CLASS} "
                                  f"experts are LLaMAMLPs (gated SiLU), so a {config.mlp_class_name} cannot be copied "
                                  "into them; upcycle a model with mlp_class_name='LLaMAMLP'", key="mlp_class_name")
            k = stage.first_k_dense_replace or 0
            n_layer = stage.n_layer or config.n_layer  # the grown model's blocks
            if k >= n_layer:
                raise ExpertsKeyError(f"GrowthStage({DENSE_KEY}={k}): the model has n_layer="
                                      f"{n_layer} blocks and at least one must get experts, so at most "
                                      f"{n_layer - 1} keep their dense MLP; use {DENSE_KEY} <= {n_layer - 1}",
                                      key=DENSE_KEY)
            inner = stage.intermediate_size or config.intermediate_size  # the MLP's, grown in the same stage
            # routed_scaling_factor 1: the dense config's own is inert (no router), carried it would scale every
            # expert's output and the upcycled MoE would not compute the MLP
            return {"mlp_class_name": MOE_CLASS, "n_expert": E, "n_expert_per_token": K,
                    "moe_intermediate_size": inner, DENSE_KEY: k or None, "routed_scaling_factor": 1.0}
        if not is_moe:
            raise GrowthError(f"GrowthStage(n_expert={E}): this model has no experts (mlp_class_name="
                              f"{config.mlp_class_name!r}); add mlp_class_name='LLaMAMoE' and n_expert_per_token to "
                              "turn every MLP into experts (dense -> MoE)", key="n_expert")
        own = config.first_k_dense_replace or 0
        if stage.first_k_dense_replace is not None and stage.first_k_dense_replace != own:
            raise ExpertsKeyError(f"GrowthStage({DENSE_KEY}={stage.first_k_dense_replace}): this MoE model "
                                  f"has {DENSE_KEY}={own} (its experts start at block {own}) and a growth of the "
                                  f"experts keeps which blocks are dense; drop {DENSE_KEY} or give {own}",
                                  key=DENSE_KEY)
        E_old, K_old = config.n_expert, config.n_expert_per_token
        K = K_old if K is None else K
        if E_old >= E:
            what = "fewer experts than" if E_old > E else "as many experts as"
            raise GrowthError(f"GrowthStage(n_expert={E}): {what} the model (n_expert={E_old}); a growth adds "
                              f"experts: use n_expert > {E_old} (e.g. {2 * E_old})", key="n_expert")
        if K_old > K:
            raise GrowthError(f"GrowthStage(n_expert_per_token={K}): fewer than the model's {K_old}; keep "
                              f"n_expert_per_token >= {K_old} (doubling it with n_expert keeps the function)",
                              key="n_expert_per_token")
        if K > E:
            raise GrowthError(f"GrowthStage(n_expert_per_token={K}): more than n_expert={E}; use at most {E}",
            key="n_expert_per_token")
        values: dict[str, Any] = {"n_expert": E, "n_expert_per_token": K}
        if config.n_expert_groups and stage.n_layer is not None:
            raise GrowthError(f"GrowthStage(n_expert={E}, n_layer={stage.n_layer}): a GroupedTopkRouter's score "
                              "corrections (a buffer) cannot be both copied to new blocks and grown to more experts in "
                              "one stage; grow the experts and the depth in stages of their own", key="n_expert")
        if config.n_expert_groups:
            per_group = E_old // config.n_expert_groups
            if E % per_group:
                raise GrowthError(f"GrowthStage(n_expert={E}): the GroupedTopkRouter keeps {per_group} experts per "
                                  f"group (n_expert_groups={config.n_expert_groups}), so n_expert must be a multiple "
                                  f"of {per_group}; use e.g. {2 * E_old}", key="n_expert")
            values["n_expert_groups"] = E // per_group
            top = config.n_topk_groups
            if K % K_old == 0 and top * (K // K_old) <= values["n_expert_groups"]:
                top *= K // K_old
            values["n_topk_groups"] = top
        return values

    def change(self, config, stage, new_config=None) -> ExpertsChange:
        """The :class:`ExpertsChange` of ``stage`` on a model of ``config`` (checked first); ``blocks`` are positions
        in the grown model (``new_config``: its block count and dense first blocks, where a depth growth in the same
        stage changes them)."""
        values = self.config_values(config, stage)
        upcycle = stage.mlp_class_name is not None
        old = 1 if upcycle else config.n_expert
        old_k = 1 if upcycle else config.n_expert_per_token
        new = values["n_expert"]
        return ExpertsChange(upcycle=upcycle, old=old, new=new, old_k=old_k, new_k=values["n_expert_per_token"],
                             blocks=_moe_blocks(new_config.n_layer, new_config.first_k_dense_replace)
                             if new_config is not None else
                             _moe_blocks(config.n_layer, values.get(DENSE_KEY, config.first_k_dense_replace)),
                             source=tuple(i % old for i in range(new - old)), init=stage.expert_init,
                             reinit_fraction=float(stage.expert_reinit_fraction), router_init=stage.router_init)

    def plan(self, ctx: PlanContext) -> AxisPlan:
        """Per-tensor plans: new experts are new modules (``block_init`` ``copy`` or ``normal``, ``source`` the expert
        they start from), like a new block's tensors; the router grows rows on the ``n_expert`` axis (MoE -> more
        experts) or is new (dense -> MoE: planned against the MLP's ``fc_1``, which only lends dtype and device);
        dense -> MoE moves the MLP's tensors to expert 0.

        Axes planned before compose: a moved or copied tensor takes the plan ``ctx.tensors`` holds for it, so a new
        expert copies its source *widened* and the router keeps its widened columns; under a depth growth in the same
        stage the experts are planned per block of the grown model, and a new block's experts start as its own MLP
        does (``depth_init``: e.g. copied with the output projection zeroed), whatever ``expert_init``."""
        config, old_model = ctx.config, ctx.old_model
        change = self.change(config, ctx.stage, ctx.new_config)
        std = litgpt_init_std(ctx.new_config.n_embd)
        new_init = "normal" if change.init == "random" else "copy"
        tensors: dict[str, TensorPlan] = dict(ctx.tensors)
        channels: dict[str, ChannelChange] = {}
        shapes = ctx.old_shapes

        def planned(name: str) -> TensorPlan:  # the plan so far of a grown-model tensor, or an unchanged one
            return ctx.tensors.get(name) or TensorPlan(name, shapes[name], shapes[name], ())

        def new_expert(p: str, rest: str, e: int, base: TensorPlan) -> None:
            name = f"{p}.mlp.experts.{e}.{rest}"
            if base.fresh:  # in a new block: as that block's own tensor starts (depth_init)
                tensors[name] = dataclasses.replace(base, name=name)
                return
            how = new_init if rest.endswith("weight") or new_init == "copy" else "zero"
            tensors[name] = dataclasses.replace(base, name=name, source=base.source_name, block_init=how,
                                                init_std=std if how == "normal" else 0.0)

        template = old_model.transformer.h[-1].mlp  # an MLP (dense -> MoE) or a mixture of experts, as every block's
        for j in change.blocks:
            p = f"transformer.h.{j}"
            if change.upcycle:
                rests = [n for n, _ in template.named_parameters()]
                for rest in rests:  # the MLP itself becomes expert 0 (as planned so far: widened, moved, new)
                    base = tensors.pop(f"{p}.mlp.{rest}", None) or planned(f"{p}.mlp.{rest}")
                    tensors[f"{p}.mlp.experts.0.{rest}"] = dataclasses.replace(
                        base, name=f"{p}.mlp.experts.0.{rest}", source=base.source_name)
                for e in range(1, change.new):
                    for rest in rests:
                        new_expert(p, rest, e, tensors[f"{p}.mlp.experts.0.{rest}"])
                fc_1 = tensors[f"{p}.mlp.experts.0.fc_1.weight"].source_name
                tensors[f"{p}.mlp.gate.weight"] = TensorPlan(
                    f"{p}.mlp.gate.weight", shapes[fc_1], (change.new, ctx.new_config.n_embd), (), source=fc_1,
                    block_init="normal" if change.router_init == "random" else "zero",
                    init_std=std if change.router_init == "random" else 0.0)
            else:
                rests = [n for n, _ in template.experts[0].named_parameters()]
                for i, src in enumerate(change.source):
                    for rest in rests:
                        new_expert(p, rest, change.old + i, planned(f"{p}.mlp.experts.{src}.{rest}"))
                gate = f"{p}.mlp.gate.weight"
                mode = "random" if change.init == "random" else "copy"
                grown = planned(gate)  # its n_embd columns, where the hidden size grows too
                tensors[gate] = dataclasses.replace(
                    grown, new_shape=(change.new, *grown.new_shape[1:]),
                    dims=tuple(sorted((DimGrowth(0, EXPERT_CHANNEL, "fan_out", mode), *grown.dims),
                                      key=lambda d: d.dim)))
                bias = f"{p}.mlp.gate.e_score_correction_bias"  # a buffer: restructure() copies its entries
                if bias in shapes:
                    tensors[bias] = TensorPlan(bias, shapes[bias], (change.new,),
                                               (DimGrowth(0, EXPERT_CHANNEL, "fan_out", "copy"),))
        if not change.upcycle:
            channels[EXPERT_CHANNEL] = ChannelChange(name=EXPERT_CHANNEL, old=change.old, new=change.new, alpha=1.0,
                                                  src=torch.tensor(change.source, dtype=torch.long))
        return AxisPlan(change=change, tensors=tensors, channels=channels, replace=True)

    def finish_tensors(self, plan, grown: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Drop-upcycle: in each new expert, re-draw ``expert_reinit_fraction`` of the inner channels (the same
        channels in ``fc_1`` / ``fc_2`` rows and ``proj`` columns, chosen per block and expert from the growth's
        seed) from normal(mean, std) of the weight; biases of those channels become zero."""
        change: ExpertsChange = plan.changes[self.name]
        if change.init != "drop-upcycle" or change.reinit_fraction == 0:
            return grown
        out = dict(grown)
        for name, t in grown.items():
            spec = plan.tensors.get(name)
            found = _EXPERT_TENSOR.match(name)
            if spec is None or not spec.fresh or found is None:
                continue
            block, expert, layer, kind = int(found[1]), int(found[2]), found[3], found[4]
            if expert < change.old or (layer == "proj" and kind == "bias"):  # expert 0 of a new block is its MLP
                continue
            dim = 1 if layer == "proj" else 0
            inner = t.shape[dim]
            count = round(change.reinit_fraction * inner)
            chooser = plan_generator(plan, "drop-upcycle", block, expert)
            channels = torch.randperm(inner, generator=chooser)[:count].sort().values  # (count,)
            if kind == "bias":
                out[name] = t.index_fill(0, channels.to(t.device), 0.0)
                continue
            t32 = t.detach().float()
            mean, std = t32.mean().item(), (t32.std().item() if t32.numel() > 1 else 0.0)
            shape = list(t.shape)
            shape[dim] = count
            draw = torch.empty(shape, dtype=torch.float32).normal_(mean, std, generator=plan.tensor_generator(name))
            out[name] = t.index_copy(dim, channels.to(t.device), draw.to(device=t.device, dtype=t.dtype))
        return out

    def restructure(self, swap, model: GPT, plan, fresh: Mapping[str, torch.Tensor]) -> None:
        """Put the new experts (and, dense -> MoE, the new ``LLaMAMoE`` around the MLP) into ``model``."""
        from litgpt.model import LLaMAMLP, LLaMAMoE

        change: ExpertsChange = plan.changes[self.name]
        config = plan.new_config

        def fill(module: nn.Module, prefix: str, like: Mapping[str, nn.Parameter]) -> None:
            for rest, param in list(module.named_parameters()):
                owner, _, attr = rest.rpartition(".")
                target = module.get_submodule(owner) if owner else module
                source = like.get(where_now(plan, plan.tensors[f"{prefix}.{rest}"].source_name))
                grad = source.requires_grad if source is not None else param.requires_grad
                target._parameters[attr] = nn.Parameter(fresh[f"{prefix}.{rest}"], requires_grad=grad)

        params = dict(model.named_parameters())  # after the axes before this one (a depth growth moved blocks)
        for i in change.blocks:
            p = f"transformer.h.{i}"
            block = model.transformer.h[i]
            if isinstance(block.mlp, LLaMAMoE) and len(block.mlp.experts) == change.new:
                continue  # a new block of a depth growth in this stage: built with its experts
            if change.upcycle:
                with torch.device("meta"):
                    moe = LLaMAMoE(config)
                moe.experts[0] = block.mlp
                for e in range(1, change.new):
                    fill(moe.experts[e], f"{p}.mlp.experts.{e}", params)
                fill(moe.gate, f"{p}.mlp.gate", params)
                swap.set(block, "mlp", moe)
                continue
            mlp = block.mlp
            added = []
            for e in range(change.old, change.new):
                with torch.device("meta"):
                    expert = LLaMAMLP(config, intermediate_size=config.moe_intermediate_size)
                fill(expert, f"{p}.mlp.experts.{e}", params)
                added.append(expert)
            swap.set(mlp, "experts", nn.ModuleList([*mlp.experts, *added]))
            bias = getattr(mlp.gate, "e_score_correction_bias", None)
            if bias is not None:  # GroupedTopkRouter: the copies' score corrections are their sources'
                src = torch.tensor(change.source, dtype=torch.long, device=bias.device)
                swap.set(mlp.gate, "e_score_correction_bias", torch.cat([bias, bias[src]]))

    def copy_pairs(self, plan) -> tuple[tuple[str, str], ...]:
        """``(source, copy)`` weight matrices of every new expert that starts from an old one, by grown-model name
        (what ``symmetry/stage_k/experts`` compares; empty under ``random``)."""
        return tuple((plan.carry(spec.source_name), name) for name, spec in plan.tensors.items()
                     if spec.fresh and spec.block_init == "copy" and len(spec.new_shape) >= 2
                     and _EXPERT_TENSOR.match(name))

    def describe(self, plan, model: nn.Module | None = None) -> str:
        """E.g. ``"experts 4 -> 8, top-2 -> top-4, copy (new 4<-0, 5<-1, 6<-2, 7<-3): function kept"`` (whether it
        is kept: :meth:`keeps_function` on ``model``, where given)."""
        change: ExpertsChange = plan.changes[self.name]
        old = "dense MLP" if change.upcycle else f"{change.old}"
        init = change.init + (f" {change.reinit_fraction:g}" if change.init == "drop-upcycle" else "")
        copies = ", ".join(f"{change.old + i}<-{s}" for i, s in enumerate(change.source))
        kept = self.keeps_function(plan, model)
        router = f", router {change.router_init}" if change.upcycle else ""
        factor = plan.old_config.routed_scaling_factor
        if change.upcycle and factor != 1.0:  # set to 1 by config_values: say so
            router += f", routed_scaling_factor {factor:g} -> 1 (inert on the dense MLP)"
        if change.upcycle and change.blocks[0]:
            k = change.blocks[0]
            router += ", block 0 kept dense" if k == 1 else f", blocks 0-{k - 1} kept dense"
        return (f"{old} -> {change.new} experts, top-{change.old_k} -> top-{change.new_k}, {init}{router} "
                f"(new {copies}): " + (function_words(kept) or
                                       "function kept while every e_score_correction_bias >= 0, else it changes"))

    def keeps_function(self, plan, model: nn.Module | None = None) -> bool | None:
        """Whether the growth keeps the function (:func:`experts_keep_function`; the grouped router's corrections read
        from ``model``, ``None`` without it); ``False`` where two old router rows of ``model`` tie (see the module)."""
        change: ExpertsChange = plan.changes[self.name]
        if model is not None and not change.upcycle and _old_router_rows_tie(model, change):
            return False
        return experts_keep_function(change, plan.old_config, None if model is None else min_score_correction(model))


def _old_router_rows_tie(model: nn.Module, change: ExpertsChange) -> bool:
    """Whether two of the ``change.old`` experts' router rows of an MoE block of ``model`` are equal."""
    gates = [m.get_parameter("gate.weight") for m in model.modules() if hasattr(m, "gate") and hasattr(m, "experts")]
    # whole rows only: a sharded router (DTensor, FSDP1 views) is not read
    rows = [w[: change.old].detach().float().cpu() for w in gates
            if type(w) in (torch.Tensor, nn.Parameter) and w.dim() == 2 and w.shape[0] >= change.old]
    return any(torch.unique(r, dim=0).shape[0] < r.shape[0] for r in rows)


def where_now(plan, name: str) -> str:
    """The name that pre-growth tensor ``name`` has when the experts axis restructures the model: moved by the axes
    that restructure before it (a depth growth in the same stage puts a kept block at its new position), not yet
    by its own moves (a dense MLP into expert 0)."""
    for axis in plan_axes(plan):
        if axis is EXPERTS:
            break
        moved = axis.carry(plan, name)
        if moved is not NotImplemented:
            return name if moved is None else moved
    return name


def plan_generator(plan, *keys: object) -> torch.Generator:
    """A generator of ``plan``'s growth seed and stage for ``keys`` (rank and order independent)."""
    return make_generator(plan.seed, "stage", plan.stage_index, *keys)


# mypy reads the protocol's symmetry_key as settable; BaseAxis' is a read-only property
EXPERTS = register_axis(ExpertsAxis())  # type: ignore[arg-type]
"""The registered experts axis."""
