"""``GrowthStage``: one width growth event, validated when it is built."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from lightning_sparkling.scaling import parse_init

WIDTH_AXES: tuple[str, ...] = ("n_embd", "intermediate_size", "moe_intermediate_size")
OPTIMIZER_STATES: tuple[str, ...] = ("asymmetric", "copy", "drop", "asymmetric-scaled")


@dataclass(frozen=True)
class GrowthStage:
    """One growth: at ``at_step`` widen some of ``n_embd``, ``intermediate_size``, ``moe_intermediate_size``.

    The defaults are the SPARKLING recipe: copy-copy init, RMS-preserving fan-in scale, asymmetric optimizer
    state (old entries keep theirs, new entries start at zero) and an asymmetric learning-rate re-warmup of the
    new entries (from the LR at growth to ``rewarmup_ratio`` times it over ``rewarmup_steps``, then cosine).

    Args:
        at_step: grow after this many optimizer steps, before step ``at_step + 1``'s first micro-batch.
        n_embd: new hidden (residual stream) size. Heads, head size and RoPE are unchanged.
        intermediate_size: new dense MLP inner size.
        moe_intermediate_size: new MoE expert inner size (every expert, shared experts scaled alike).
        init: ``"<fan_out>-<fan_in>"``, each side ``copy | random | zero`` (``zero-zero`` is refused: its new
            channels would never receive a gradient).
        rms_preserving: apply the fan-in scale ``alpha`` (``False``: naive growth, ``alpha = 1``).
        optimizer_state: ``asymmetric`` (default), ``copy``, ``drop`` or ``asymmetric-scaled``.
        rewarmup_ratio: peak of the new entries' re-warmup relative to the LR at growth; ``None`` turns the
            re-warmup off (new entries follow the baseline schedule exactly).
        rewarmup_steps: length of the linear re-warmup, in optimizer steps.

    Raises:
        ValueError: naming the setting, for a negative ``at_step``, no size, a non-positive size, an unknown
            ``init`` or ``optimizer_state``, a non-positive ``rewarmup_ratio`` or a negative ``rewarmup_steps``.

    Example::

        >>> stage = GrowthStage(500, n_embd=1024, intermediate_size=4096)
        >>> stage.widths
        {'n_embd': 1024, 'intermediate_size': 4096}
    """

    at_step: int
    n_embd: int | None = None
    intermediate_size: int | None = None
    moe_intermediate_size: int | None = None
    init: str = "copy-copy"
    rms_preserving: bool = True
    optimizer_state: str = "asymmetric"
    rewarmup_ratio: float | None = 1.3
    rewarmup_steps: int = 250

    def __post_init__(self) -> None:
        if isinstance(self.at_step, bool) or not isinstance(self.at_step, int) or self.at_step < 0:
            raise ValueError(f"GrowthStage(at_step={self.at_step!r}): at_step must be an integer >= 0")
        if not self.widths:
            raise ValueError(
                f"GrowthStage(at_step={self.at_step}) grows nothing: give at least one of {', '.join(WIDTH_AXES)}"
            )
        for axis, size in self.widths.items():
            if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
                raise ValueError(f"GrowthStage({axis}={size!r}): a width must be a positive integer")
        fan_out, fan_in = parse_init(self.init)
        if fan_out == fan_in == "zero":
            raise ValueError(
                "GrowthStage(init='zero-zero'): with both sides zero the new channels get a zero gradient forever "
                "and never train; use e.g. 'zero-copy' or 'copy-copy'"
            )
        if not isinstance(self.rms_preserving, bool):
            raise ValueError(f"GrowthStage(rms_preserving={self.rms_preserving!r}): must be True or False")
        if self.optimizer_state not in OPTIMIZER_STATES:
            raise ValueError(
                f"GrowthStage(optimizer_state={self.optimizer_state!r}): choose one of {', '.join(OPTIMIZER_STATES)}"
            )
        if self.rewarmup_ratio is not None:
            if isinstance(self.rewarmup_ratio, bool) or not isinstance(self.rewarmup_ratio, (int, float)):
                raise ValueError(f"GrowthStage(rewarmup_ratio={self.rewarmup_ratio!r}): must be a number > 0 or None")
            if not self.rewarmup_ratio > 0:
                raise ValueError(
                    f"GrowthStage(rewarmup_ratio={self.rewarmup_ratio}): must be > 0 (the paper uses 1.3); "
                    "None turns the re-warmup off"
                )
        if isinstance(self.rewarmup_steps, bool) or not isinstance(self.rewarmup_steps, int) or self.rewarmup_steps < 0:
            raise ValueError(f"GrowthStage(rewarmup_steps={self.rewarmup_steps!r}): must be an integer >= 0")

    @property
    def widths(self) -> dict[str, int]:
        """The widths this stage sets, ``{axis: new size}``, in the order of :data:`WIDTH_AXES`."""
        return {axis: getattr(self, axis) for axis in WIDTH_AXES if getattr(self, axis) is not None}

    @property
    def fan_out_init(self) -> str:
        return parse_init(self.init)[0]

    @property
    def fan_in_init(self) -> str:
        return parse_init(self.init)[1]

    def to_dict(self) -> dict[str, Any]:
        """Plain-data form (for checkpoints and logs); ``GrowthStage(**stage.to_dict())`` rebuilds it."""
        return asdict(self)


def rewarmup_window(stage: GrowthStage, max_steps: int) -> tuple[int, int, int] | None:
    """Where a stage's new-entry re-warmup lies in a run of ``max_steps`` optimizer steps.

    Returns ``(warmup_end, tail_steps, steps_left)``: the linear re-warmup covers the optimizer steps taken at
    ``global_step`` ``at_step .. warmup_end - 1``, the cosine tail then runs ``tail_steps`` steps down to ``min_lr``
    at ``max_steps``; ``steps_left = max_steps - at_step``. ``None`` when the stage has no re-warmup.

    Example::

        >>> rewarmup_window(GrowthStage(100, n_embd=128, rewarmup_steps=20), 300)
        (120, 180, 200)
    """
    if stage.rewarmup_ratio is None:
        return None
    steps_left = max_steps - stage.at_step
    warmup_end = stage.at_step + stage.rewarmup_steps
    return warmup_end, max_steps - warmup_end, steps_left


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
        ValueError: GrowthStage(at_step=100): rewarmup_steps=250 does not fit in the 200 steps left after the growth ...
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
        suggestion = max(1, left // 10)
        raise ValueError(
            f"{name}: rewarmup_steps={stage.rewarmup_steps} does not fit in the {left} steps left after the growth "
            f"(at_step={stage.at_step}, max_steps={max_steps}): the new entries' LR would still be rising at the "
            f"last step instead of decaying to min_lr. Set rewarmup_steps to at most {left - 1} (e.g. {suggestion}, "
            f"a tenth of the steps left), grow earlier, or raise max_steps"
        )
