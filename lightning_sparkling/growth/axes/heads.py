"""The heads axis: ``n_head`` and ``n_query_groups`` at a fixed ``head_size`` (new query heads and key/value
groups copy old ones, laid out anew in litgpt's fused ``qkv``; the layout itself is
:mod:`~lightning_sparkling.growth.head_layout`).

Its channel dimensions: ``attn_q`` (the query channels: ``attn.proj``'s fan-in, OLMo-2's ``norm_q``), ``attn_kv``
(key/value channels: OLMo-2's ``norm_k``) and ``attn_qkv`` (the fused ``qkv`` rows), each an
:class:`~lightning_sparkling.growth.plan.ChannelChange` whose old channels move (``layout`` / ``fresh``).
"""

from __future__ import annotations

from typing import Any

import torch

from lightning_sparkling.growth.axes.base import BaseAxis
from lightning_sparkling.growth.axes.registry import register_axis
from lightning_sparkling.growth.axes.width import check_larger, check_positive_sizes, copy_copy_keeps
from lightning_sparkling.growth.errors import GrowthError
from lightning_sparkling.growth.head_layout import describe_heads, head_layout, qkv_layout
from lightning_sparkling.growth.scaling import fan_in_scale, make_generator
from lightning_sparkling.growth.types import ChannelChange

HEAD_SIZE_KEYS: tuple[str, ...] = ("n_head", "n_query_groups")
"""The heads axis' size keys."""


def head_counts(config, stage) -> tuple[int, int] | None:
    """``(n_head, n_query_groups)`` after the stage, or ``None`` when it keeps the heads (an MHA model grown by
    ``n_head`` alone stays MHA)."""
    if stage.n_head is None and stage.n_query_groups is None:
        return None
    new_head = stage.n_head or config.n_head
    default_groups = new_head if config.n_query_groups == config.n_head else config.n_query_groups
    return new_head, stage.n_query_groups or default_groups


class HeadsAxis(BaseAxis):
    """The heads plug-in (:class:`~lightning_sparkling.growth.axes.GrowthAxis`)."""

    name = "heads"
    sizes = HEAD_SIZE_KEYS

    def copies(self, stage) -> bool:
        """A copied side of ``init`` on new heads."""
        return bool(stage.n_head or stage.n_query_groups) and "copy" in (stage.fan_out_init, stage.fan_in_init)

    def check_stage(self, stage) -> None:
        """Refuse a head count that is not a positive integer."""
        check_positive_sizes(stage, self.sizes, "a width")

    def check_model(self, config, stage) -> None:
        """Refuse head counts that do not grow (``n_query_groups`` may repeat the model's own with ``n_head``: new
        heads join the existing groups)."""
        pinned = stage.n_head is not None and stage.n_query_groups == config.n_query_groups
        check_larger(config, stage, tuple(s for s in self.sizes if not (pinned and s == "n_query_groups")))

    def config_values(self, config, stage) -> dict[str, Any]:
        counts = head_counts(config, stage)
        assert counts is not None  # called for an active axis: the stage sets n_head or n_query_groups
        new_head, new_groups = counts
        return {"n_head": new_head, "n_query_groups": new_groups}

    def dimensions(self, config, stage, *, seed: int, stage_index: int):
        """The :class:`~lightning_sparkling.growth.head_layout.HeadLayout` (the change recorded) and the ``attn_q``,
        ``attn_qkv`` (and, with new groups, ``attn_kv``) dimensions."""
        counts = head_counts(config, stage)
        assert counts is not None  # called for an active axis: the stage sets n_head or n_query_groups
        new_head, new_groups = counts
        H, G, hs = config.n_head, config.n_query_groups, config.head_size
        try:
            layout = head_layout(H, G, new_head, new_groups,
                                 make_generator(seed, "stage", stage_index, "axis", "heads"))
        except ValueError as err:
            raise GrowthError(f"GrowthStage(at_step={stage.at_step}): {err}",
                              key="n_head" if stage.n_head is not None else "n_query_groups") from err
        q, q_fresh = qkv_layout(layout, H, G, hs)
        q_channels, kv_channels = new_head * hs, new_groups * hs

        def channel(name: str, old: int, layout_: torch.Tensor, fresh: torch.Tensor,
                    alpha: float = 1.0) -> ChannelChange:
            return ChannelChange(name=name, old=old, new=int(layout_.numel()), alpha=alpha, src=layout_[fresh],
                                 layout=layout_, fresh=fresh)

        alpha = fan_in_scale(H * hs, q_channels, init=stage.init, rms_preserving=stage.rms_preserving) \
            if q_channels > H * hs else 1.0
        channels = {"attn_q": channel("attn_q", H * hs, q[:q_channels], q_fresh[:q_channels], alpha),
                    "attn_qkv": channel("attn_qkv", (H + 2 * G) * hs, q, q_fresh)}
        if new_groups > G:
            channels["attn_kv"] = channel("attn_kv", G * hs, q[q_channels:q_channels + kv_channels] - H * hs,
                                          q_fresh[q_channels:q_channels + kv_channels])
        return layout, channels

    def keeps_function(self, plan, model=None) -> bool | None:
        """New query heads: as a width (:func:`~lightning_sparkling.growth.axes.width.copy_copy_keeps` on the query
        channels), and only at whole ratios of the groups and of the heads per group (2 heads in 1 group -> 6 in 2
        copies head 0 twice as often as head 1); new key/value groups alone: kept when they copy their source's rows
        (``fan_out_init`` copy)."""
        q = plan.channels["attn_q"]
        if q.new > q.old:
            old, new = plan.old_config, plan.new_config
            whole = (new.n_query_groups % old.n_query_groups == 0
                     and (new.n_head // new.n_query_groups) % (old.n_head // old.n_query_groups) == 0)
            keeps = copy_copy_keeps(plan.stage, [(q.old, q.new)])
            return False if keeps and not whole else keeps
        return plan.stage.fan_out_init == "copy"

    def details(self, plan) -> dict[str, str]:
        """E.g. ``{"n_head": "alpha=0.7071: new q 2<-0, 3<-1"}`` for each head count that changed."""
        copied = plan.stage.fan_out_init == "copy"  # otherwise new heads start random (no source)
        detail = f"alpha={plan.channels['attn_q'].alpha:.4f}: {describe_heads(plan.changes[self.name], copied=copied)}"
        return dict.fromkeys(self.sizes, detail)

    def report(self, plan, stage) -> dict[str, Any]:
        layout = plan.changes.get(self.name)
        copied = stage.fan_out_init == "copy"
        return {"heads": describe_heads(layout, copied=copied) if layout is not None else None,
                "heads_copied": copied if layout is not None else None}


# mypy reads the protocol's symmetry_key as settable; BaseAxis' is a read-only property
HEADS = register_axis(HeadsAxis())  # type: ignore[arg-type]
"""The registered heads axis."""
