"""A depth-aware rule for a depth growth: depth-muP's residual-branch multiplier, folded into a plain litgpt model's
weights (``GrowthStage(depth_scaling=...)``). Pure functions of integers, names and tensor plans; the depth axis
(:mod:`~lightning_sparkling.growth.axes.depth`) applies them to its plan.

Depth-muP (Yang, Yu, Zhu and Hayou, "Tensor Programs VI: Feature Learning in Infinite-Depth Neural Networks",
arXiv 2310.02244; Bordelon, Noci, Li, Hanin and Pehlevan, "Depthwise Hyperparameter Transfer in Residual Networks",
arXiv 2309.16620) multiplies every residual branch of an ``L``-block network by ``1 / sqrt(L)``: the blocks' sum
stays of order one as ``L`` grows, and the learning rate tuned at one depth transfers to another. A litgpt ``GPT``
has no branch multiplier, but a branch's output is linear in its output projection (attention ``proj``, MLP ``proj``,
every expert's and the shared experts' ``proj``, with their biases), so the multiplier can live in those weights.

=================  ==============================================================================================
``depth_scaling``  at a growth ``L -> L'``
=================  ==============================================================================================
``none``           (default) nothing: every block keeps its weights
``sqrt``           every block's branch multiplier goes from ``1 / sqrt(L)`` to ``1 / sqrt(L')``: the output
                   projections of *all* blocks, kept and new, are multiplied by ``sqrt(L / L')``
=================  ==============================================================================================

What holds for ``sqrt``: the grown model computes exactly what the model before the growth computes with every
block's output projections multiplied by ``sqrt(L / L')`` (a new block ``copy-zero`` / ``random-zero`` adds nothing,
a ``copy`` block adds its scaled copy). It is *not* function preserving: each old block writes ``sqrt(L / L')`` of
what it wrote (0.71 at 4 -> 8, 0.35 at 1 -> 8) against an unchanged embedding, so the loss moves at the growth. The
optimizer state is not touched (``optimizer_state`` as usual). A stage that grows no depth is left as it is.
Refused on models with post-branch norms
(``post_attention_norm`` / ``post_mlp_norm``, where the branch output is normalized after its projection) and
together with an experts growth in the same stage.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping

from lightning_sparkling.growth.types import TensorPlan

__all__ = ["DEPTH_SCALINGS", "branch_factor", "check_depth_scaling", "is_branch_output", "scale_branch_outputs"]

DEPTH_SCALINGS: tuple[str, ...] = ("none", "sqrt")
"""The values of ``GrowthStage(depth_scaling=...)``."""
_BRANCH_OUTPUT = re.compile(
    r"^transformer\.h\.\d+\.(attn\.proj|mlp\.proj|mlp\.experts\.\d+\.proj|mlp\.shared_experts\.proj)\.(weight|bias)$")


def branch_factor(old: int, new: int, rule: str) -> float:
    """The factor on every block's output projections at a growth from ``old`` to ``new`` blocks by ``rule``.

    Example::

        >>> branch_factor(4, 8, "sqrt"), branch_factor(2, 8, "sqrt"), branch_factor(4, 8, "none")
        (0.7071067811865476, 0.5, 1.0)
    """
    if rule == "none":
        return 1.0
    if rule == "sqrt":
        return math.sqrt(old / new)
    raise ValueError(f"depth_scaling={rule!r}: choose one of {', '.join(DEPTH_SCALINGS)}")


def check_depth_scaling(stage) -> None:
    """Refuse a bad ``depth_scaling`` of a :class:`~lightning_sparkling.growth.stage.GrowthStage` (no model needed).

    Raises:
        StageError: keyed ``depth_scaling``, for an unknown rule, or a rule on a stage that also grows experts. On
            a stage that grows no depth the rule does nothing, as ``depth_init`` (so a progressive schedule may share
            it between its depth and width growths).
    """
    from lightning_sparkling.growth.errors import StageError, check_choice

    rule = getattr(stage, "depth_scaling", "none")
    check_choice("depth_scaling", rule, DEPTH_SCALINGS)
    if rule == "none":
        return
    if any(getattr(stage, key, None) is not None for key in ("n_expert", "n_expert_per_token", "mlp_class_name")):
        raise StageError(f"GrowthStage(depth_scaling={rule!r}) with an experts growth in the same "
                         "stage: grow the experts in a stage of their own",
                         key="depth_scaling")


def is_branch_output(name: str) -> bool:
    """Whether ``name`` (a grown model's tensor) writes a block's branch into the residual stream.

    Example::

        >>> is_branch_output("transformer.h.3.mlp.proj.weight"), is_branch_output("transformer.h.3.mlp.fc_1.weight")
        (True, False)
    """
    return _BRANCH_OUTPUT.match(name) is not None


def scale_branch_outputs(tensors: Mapping[str, TensorPlan], grown_shapes: Mapping[str, tuple[int, ...]],
                         factor: float) -> dict[str, TensorPlan]:
    """``tensors`` (a depth plan's, by grown name) with every block's output projection multiplied by ``factor``:
    a planned tensor's ``scale`` times ``factor``, and an unplanned one (a kept block that neither moves nor grows,
    of shape ``grown_shapes[name]``) planned as that scale alone.

    Args:
        tensors: the plan's tensors, ``{grown name: TensorPlan}``.
        grown_shapes: every tensor of the grown model's blocks, ``{grown name: shape}``; a name missing from
            ``tensors`` is one that keeps its name and shape.
        factor: the factor (:func:`branch_factor`).

    Example::

        >>> plans = scale_branch_outputs({}, {"transformer.h.0.attn.proj.weight": (4, 4),
        ...                                   "transformer.h.0.attn.qkv.weight": (12, 4)}, 0.5)
        >>> [(name, plan.scale) for name, plan in plans.items()]
        [('transformer.h.0.attn.proj.weight', 0.5)]
    """
    out = dict(tensors)
    if factor == 1.0:
        return out
    for name, shape in grown_shapes.items():
        if not is_branch_output(name):
            continue
        spec = out.get(name)
        if spec is None:
            out[name] = TensorPlan(name, tuple(shape), tuple(shape), (), scale=factor)
        else:
            out[name] = dataclasses.replace(spec, scale=spec.scale * factor)
    return out
