"""Growth axes as plug-ins: one module per kind of size a stage can grow, read through one protocol.

A stage's sizes fall into *axes* (plug-ins), each a module of this package that registers itself with
:func:`~lightning_sparkling.growth.axes.registry.register_axis`:

==========  ===========================================  ==================================================
axis        sizes (``litgpt.Config``)                    kind
==========  ===========================================  ==================================================
``width``   ``n_embd``, ``intermediate_size``,           channels: new rows / columns of existing tensors
            ``moe_intermediate_size``
``heads``   ``n_head``, ``n_query_groups``               channels: new heads laid out in litgpt's fused ``qkv``
``depth``   ``n_layer``                                  structural: new blocks (G_stack, MIDAS)
``experts`` ``n_expert``, ``n_expert_per_token``         structural: new experts; dense -> MoE
==========  ===========================================  ==================================================

An axis owns its :class:`~lightning_sparkling.growth.stage.GrowthStage` keys and checks them
(:meth:`GrowthAxis.check_stage`): a built-in axis' keys are fields of the stage, a user's axis declares its own in
``stage_keys`` (a frozen dataclass, held in ``GrowthStage.extra``). It refuses
a model it cannot grow, gives the grown ``litgpt.Config`` fields, gives the channel dimensions it grows
(:class:`~lightning_sparkling.growth.types.ChannelChange`\\ s: :meth:`GrowthAxis.dimensions`), plans the tensors it adds
or moves (:meth:`GrowthAxis.plan`) and, when it adds or replaces modules (a *structural* change: depth adds blocks,
experts add experts or turn an MLP into a mixture of experts), rebuilds those modules in
:func:`~lightning_sparkling.growth.surgery.swap_in` and renames what it moves (:meth:`GrowthAxis.carry`). It
describes itself for ``sparkling plan``, the growth log and the summary (:meth:`GrowthAxis.details`,
:meth:`GrowthAxis.describe`, :meth:`GrowthAxis.report`) and gives the copies the symmetry diagnostics watch
(:meth:`GrowthAxis.copy_pairs`). The measured map's names for what a stage grows are the results' vocabulary, not an
axis': :mod:`lightning_sparkling.pretrain.advice.measured_axes`.

The plan (:func:`~lightning_sparkling.growth.plan.plan_growth`), the surgery, the optimizer patch, every parallel
backend, the callbacks, the summary and :mod:`~lightning_sparkling.pretrain.advice.measured` call the registered axes
without naming any of them. The tensors on a growing channel dimension are planned from one table of litgpt's
layout (:func:`~lightning_sparkling.growth.axes.channels.channel_tensors`: which tensor reads or writes which
channels); a tensor of a new module is planned like a new block's (``block_init``, ``source``), so the optimizer
patch, the re-warmup of new entries and resume carry it with no axis-specific code. Adding an axis is its module
and one :func:`register_axis` call (``docs/ARCHITECTURE.md``, "Growth axes as plug-ins").

The modules: :mod:`.base` (the protocol and its defaults), :mod:`.registry` (the registry and the helpers that read
it), :mod:`.channels` (litgpt's channel layout), and one module per built-in axis: :mod:`.width`, :mod:`.heads`,
:mod:`.depth`, :mod:`.experts` (imported here in that order, which is the order plans apply them).
"""

from __future__ import annotations

from lightning_sparkling.growth.axes.base import BaseAxis, GrowthAxis
from lightning_sparkling.growth.axes.registry import (
    active_axes,
    axis_key,
    axis_of_size,
    check_axis,
    checked_model,
    checked_stage,
    describe_changes,
    function_words,
    growth_log_lines,
    keeps_function,
    plan_axes,
    register_axis,
    registered_axes,
    size_details,
    size_pairs,
    structural_sizes,
    unregister_axis,
    reserve_stage_keys,
)
from lightning_sparkling.growth.axes.width import WIDTH, WIDTH_SIZE_KEYS  # noqa: I001 (the registration order)
from lightning_sparkling.growth.axes.heads import HEAD_SIZE_KEYS, HEADS
from lightning_sparkling.growth.axes.depth import DEPTH, DEPTH_SIZE_KEY
from lightning_sparkling.growth.axes.experts import EXPERTS
from lightning_sparkling.growth.types import AxisPlan, PlanContext  # importable from here as before

SIZE_KEYS: tuple[str, ...] = (*WIDTH_SIZE_KEYS, *HEAD_SIZE_KEYS, DEPTH_SIZE_KEY)
"""The size keys of a stage's width, heads and depth (``GrowthStage.sizes``); every registered axis' sizes, the
experts' (``n_expert``, ...) and a user's axis' among them, are :func:`~.registry.axis_of_size`'s keys."""

BUILT_IN_AXES: tuple[GrowthAxis, ...] = (WIDTH, HEADS, DEPTH, EXPERTS)
"""The four axes the package registers itself; any other registered axis is a user's plug-in (:func:`plugin_sizes`)."""

__all__ = ["BUILT_IN_AXES", "DEPTH", "EXPERTS", "HEADS", "SIZE_KEYS", "WIDTH", "AxisPlan", "BaseAxis", "GrowthAxis",
           "PlanContext", "active_axes", "axis_key", "axis_of_size", "check_axis", "checked_model", "checked_stage",
           "describe_changes", "function_words", "growth_log_lines", "keeps_function", "plan_axes", "plugin_sizes",
           "register_axis", "registered_axes", "size_details", "size_pairs", "structural_sizes", "unregister_axis",
           "reserve_stage_keys"]


def plugin_sizes() -> dict[str, str]:
    """``{litgpt.Config size: the plug-in axis that changes it}`` for the axes a user registered
    (:func:`register_axis`), not the four built-in ones (:data:`BUILT_IN_AXES`: width, heads, depth, experts).

    Example::

        >>> plugin_sizes()  # only the built-in axes are registered
        {}
    """
    return {size: axis.name for axis in registered_axes() if not any(axis is own for own in BUILT_IN_AXES)
            for size in axis.sizes}
