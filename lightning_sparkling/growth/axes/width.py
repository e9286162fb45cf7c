"""The width axis: ``n_embd`` (the hidden size), ``intermediate_size`` (dense MLPs) and ``moe_intermediate_size``
(every expert, and the shared experts with it), the paper's width growth (sections 3-4).

Each width that grows is one :class:`~lightning_sparkling.growth.plan.ChannelChange`: new channel ``old + j`` copies
channel ``src[j]`` (a seeded random map), the readers of the width take the fan-in scale ``alpha`` (RMS-preserving,
:func:`~lightning_sparkling.growth.scaling.fan_in_scale`), and an uneven ``split`` puts per-channel shares on the
copied fan-in columns. Which tensors read or write each width is litgpt's channel layout
(:func:`~lightning_sparkling.growth.axes.channels.channel_tensors`).
"""

from __future__ import annotations

from typing import Any

from lightning_sparkling.growth.axes.base import BaseAxis
from lightning_sparkling.growth.axes.channels import SHARED_EXPERT_CHANNEL
from lightning_sparkling.growth.errors import GrowthError, StageError
from lightning_sparkling.growth.axes.registry import register_axis
from lightning_sparkling.growth.scaling import copy_source_index, fan_in_scale, make_generator, split_shares
from lightning_sparkling.growth.types import ChannelChange

WIDTH_SIZE_KEYS: tuple[str, ...] = ("n_embd", "intermediate_size", "moe_intermediate_size")
"""The width axis' size keys, in the order ``GrowthStage.widths`` lists them."""


def check_positive_sizes(stage, sizes: tuple[str, ...], what: str) -> None:
    """Refuse a size of ``sizes`` that ``stage`` sets to other than a positive integer (no model needed).

    Raises:
        StageError: keyed by the size, naming its value and ``what`` it is.
    """
    for size in sizes:
        value = getattr(stage, size)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise StageError(f"GrowthStage({size}={value!r}): {what} must be a positive integer", key=size)


def check_larger(config, stage, sizes: tuple[str, ...]) -> None:
    """Refuse a stage whose ``sizes`` (of this model) do not all grow.

    Raises:
        GrowthError: naming the size, both values and the rule, keyed by the size.
    """
    for size in sizes:
        new = getattr(stage, size)
        if new is None:
            continue
        old = getattr(config, size)
        if new <= old:
            what = "shrinks" if new < old else "does not change"
            raise GrowthError(
                f"GrowthStage(at_step={stage.at_step}) {size}={new} {what} the model ({size} is {old}): "
                "a stage must make every size it names larger", key=size
            )


def copy_copy_keeps(stage, sizes: list[tuple[int, int]]) -> bool | None:
    """Whether channels grown ``old -> new`` (each of ``sizes``) by ``stage``'s ``init`` keep the function:
    ``copy-copy`` with ``rms_preserving`` at whole ratios (paper Eq. 9-12: ``alpha * k = 1``); ``None`` for
    ``rms_preserving=False`` with a zero side (``alpha = 1`` and zero new entries: may keep it); else ``False``.

    Example::

        >>> from lightning_sparkling.growth.stage import GrowthStage
        >>> stage = GrowthStage(0, n_embd=64)
        >>> copy_copy_keeps(stage, [(32, 64)]), copy_copy_keeps(stage, [(32, 48)])
        (True, False)
    """
    if stage.init == "copy-copy" and stage.rms_preserving and all(new % old == 0 for old, new in sizes):
        return True
    if not stage.rms_preserving and "zero" in (stage.fan_out_init, stage.fan_in_init):
        return None
    return False


class WidthAxis(BaseAxis):
    """The width plug-in (:class:`~lightning_sparkling.growth.axes.GrowthAxis`)."""

    name = "width"
    sizes = WIDTH_SIZE_KEYS

    def active(self, stage) -> bool:
        return bool(stage.widths)

    def copies(self, stage) -> bool:
        """A copied side of ``init`` on a width the stage grows."""
        return bool(stage.widths) and "copy" in (stage.fan_out_init, stage.fan_in_init)

    def check_stage(self, stage) -> None:
        """Refuse a width that is not a positive integer."""
        check_positive_sizes(stage, self.sizes, "a width")

    def check_model(self, config, stage) -> None:
        """Refuse an MLP width the model lacks, or a width that does not grow."""
        is_moe = config.mlp_class_name == "LLaMAMoE"
        has_dense = not is_moe or bool(config.first_k_dense_replace)
        if stage.moe_intermediate_size is not None and not is_moe:
            raise GrowthError(
                f"moe_intermediate_size={stage.moe_intermediate_size}: this model has no experts "
                f"(mlp_class_name={config.mlp_class_name!r}); grow intermediate_size instead",
                key="moe_intermediate_size"
            )
        if stage.intermediate_size is not None and not has_dense:
            raise GrowthError(
                f"intermediate_size={stage.intermediate_size}: every MLP of this model is a LLaMAMoE of experts "
                "(no dense blocks); grow moe_intermediate_size instead", key="intermediate_size"
            )
        check_larger(config, stage, self.sizes)

    def config_values(self, config, stage) -> dict[str, Any]:
        return dict(stage.widths)

    def dimensions(self, config, stage, *, seed: int, stage_index: int):
        """One :class:`~lightning_sparkling.growth.plan.ChannelChange` per width that grows (the shared experts' inner
        size with the experts'); the change recorded is that dict."""
        old_widths = {"n_embd": config.n_embd, "intermediate_size": config.intermediate_size,
                      "moe_intermediate_size": config.moe_intermediate_size}
        changes = {}
        targets = dict(stage.widths)
        if "moe_intermediate_size" in targets and config.n_shared_expert:
            old_widths[SHARED_EXPERT_CHANNEL] = config.moe_intermediate_size * config.n_shared_expert
            targets[SHARED_EXPERT_CHANNEL] = stage.moe_intermediate_size * config.n_shared_expert
        for name, new in targets.items():
            old = old_widths[name]
            src = copy_source_index(old, new, make_generator(seed, "stage", stage_index, "axis", name))
            alpha = fan_in_scale(old, new, init=stage.init, rms_preserving=stage.rms_preserving)
            split = split_shares(old, new, src, stage.split, ratio=stage.split_ratio,
                                 generator=make_generator(seed, "stage", stage_index, "axis", name, "split"))
            changes[name] = ChannelChange(name=name, old=old, new=new, alpha=alpha, src=src, split=split)
        return changes, changes

    def keeps_function(self, plan, model=None) -> bool | None:
        """Kept at ``copy-copy`` with the RMS-preserving ``alpha`` at whole ratios (``alpha * k = 1``; any
        ``split`` or ``perturb`` keeps a group's sum); no claim for a naive growth with a zero side (zero new
        inputs or outputs may keep it); else changes."""
        return copy_copy_keeps(plan.stage, [(c.old, c.new) for c in plan.changes[self.name].values()])

    def details(self, plan) -> dict[str, str]:
        """E.g. ``{"n_embd": "alpha=0.7071"}``."""
        return {name: f"alpha={plan.channels[name].alpha:.4f}" for name in plan.changes[self.name] if name in self.sizes}


WIDTH = register_axis(WidthAxis())
"""The registered width axis."""
