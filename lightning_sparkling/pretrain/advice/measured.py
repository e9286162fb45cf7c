"""What the project measured: the seeded comparisons of ``benchmarks/reproduce.py`` as data, and the advice a run
gets from them.

``measured.json`` (beside this module) holds one cell per published comparison (docs/BENCHMARKS.md): the map
category of what grew (``joint``, ``depth``, ``upcycle``, ...; the file's key ``"axis"``,
:attr:`MeasuredCell.category` in code), the recipe, the LR schedule, when the first growth came (share of the run), the
training tokens per final active parameter, and the paired Δ of final validation loss against the grown shape trained
from scratch on the same FLOPs
(mean, sd, seeds, seeds above scratch) and, where measured, the speed-up at equal loss (``speedup``, ``speedup_sd``:
scratch compute / growth compute at the growth run's final loss, mean and sd over the seeds; optional, a cell without
them loads as before). An experts cell (category ``upcycle``: dense -> MoE; ``experts``: MoE -> more experts;
``experts+topk``: with a larger top-K) also names its ``init`` (the stage's ``expert_init``), and a run is matched
only with cells of its own ``init``; every other cell has none. :func:`advise` finds the cell nearest to a run and
says what it measured, or that nothing near the run was measured; no ratio is typed into code.

Example::

    >>> from lightning_sparkling.growth.stage import GrowthStage
    >>> advice = advise([GrowthStage(500, n_embd=64, intermediate_size=256)], total_steps=1000,
    ...                 tokens_per_param=17.0, recipe="paper")
    >>> advice.pays, advice.cell.delta
    (False, 0.252)
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, cast
from pathlib import Path

from lightning_sparkling.growth.axes import active_axes, axis_of_size, structural_sizes
from lightning_sparkling.growth.stage import GrowthStage
from lightning_sparkling.pretrain.advice.measured_axes import cell_label
from lightning_sparkling.pretrain.advice.measured_size import format_params
from lightning_sparkling.pretrain.advice.recipe_words import RecipeName
from lightning_sparkling.pretrain.advice.verdict import PAID, TIE, verdict, worse

MAP_PATH = Path(__file__).with_name("measured.json")
NEAR_RATIO = 1.6
"""A measured cell is near a run when their tokens per parameter differ by at most this factor ..."""
NEAR_TIMING = 0.15
"""... and their first growths by at most this share of the run."""
FAR_SIZE = 10.0
"""A cell measured on a model this many times smaller (or larger) than the run's says nothing on its own: the advice
states the gap and the size trend and points to ``sparkling measure`` instead of "growth paid there"."""
MEASURE_HINT = "measure it on this config: sparkling measure --config RUN.yaml"
FILE_KEY = "axis"
"""The key of a cell's :attr:`MeasuredCell.category` in ``measured.json`` and ``measure.json`` (the files keep it)."""


@dataclass(frozen=True)
class MeasuredCell:
    """One seeded comparison: ``delta`` (mean ± ``sd`` over ``seeds``, ``seeds_above`` of them above scratch) of the
    final validation loss of ``recipe`` growing what the map category ``category`` names (``joint``, ``depth``,
    ``upcycle``, ...: :func:`classify_category`) at ``growth_at`` of a ``schedule`` run of ``tokens_per_param``,
    against same-FLOPs scratch. ``where``: its section of docs/BENCHMARKS.md. ``init``: an experts cell's
    ``expert_init`` (``copy``, ``drop-upcycle``, ``random``), ``None`` in the other categories.
    ``start_delta`` (± ``start_sd``, ``start_seeds_above`` seeds above): where measured, the same run against the
    model it grew *from* continued on the same FLOPs (an ``upcycle`` cell: the dense model). Growth pays only where
    it ends at or below both: a dense -> MoE run that beats the MoE from scratch but not the dense model it started
    from does not save the user compute.

    A file's cell (``measured.json``) names its category ``"axis"``: read one with :meth:`from_json`, write one with
    :meth:`to_json`."""

    category: str
    recipe: str
    schedule: str
    growth_at: float
    tokens_per_param: float
    delta: float
    sd: float
    seeds: int
    seeds_above: int
    where: str
    speedup: float | None = None
    speedup_sd: float | None = None
    init: str | None = None
    start_delta: float | None = None
    start_sd: float | None = None
    start_seeds_above: int | None = None
    params: int | None = None
    active_params: int | None = None
    embedding_share: float | None = None
    device: str | None = None
    precision: str | None = None
    corpus: str | None = None
    factors: dict[str, int] | None = None
    """What grew, as factors on the sizes of the model it grew from (``{"n_layer": 4}``), where the category's usual
    2x (:data:`~lightning_sparkling.pretrain.advice.target.CATEGORY_FACTORS`) is not it; ``plan --suggest`` reads it."""
    stages: tuple[dict, ...] | None = None
    """A multi-stage growth, one entry per growth: its ``at_fraction``, its ``factors`` on the sizes that growth starts
    from, and any other stage key it set (``depth_init``); ``growth_at`` is the first entry's and ``factors`` their
    product. ``plan --suggest`` pastes the whole schedule."""
    arch: str | None = None
    """The block family of the measured model (:func:`~lightning_sparkling.pretrain.advice.measured_axes.block_family`:
    ``llama``, ``neox``, ...); ``plan`` says when a run's differs."""
    ceiling: float | None = None
    """The speed-up the cell's schedule reaches if the grown run matched scratch token for token: scratch's FLOPs over
    the same steps / the growth run's (``6 N D`` per phase, as :attr:`speedup` counts them)."""

    def __post_init__(self) -> None:
        if self.stages is not None:
            stages = tuple(dict(entry) for entry in self.stages)
            if not stages or any(not isinstance(e.get("factors"), dict) or not 0 < e.get("at_fraction", 0) < 1
                                 for e in stages):
                raise ValueError(f"measured cell {self.key()}: stages={self.stages!r}: give one entry per growth, "
                                 "each with an at_fraction in (0, 1) and its factors")
            object.__setattr__(self, "stages", stages)
        for name in ("params", "active_params"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
                raise ValueError(f"measured cell {self.key()}: {name}={value!r}: must be a positive integer (the "
                                 "grown model's parameter count)")
        start = (self.start_delta, self.start_sd, self.start_seeds_above)
        if any(v is None for v in start) and any(v is not None for v in start):
            raise ValueError(f"measured cell {self.key()}: start_delta={self.start_delta!r}, "
                             f"start_sd={self.start_sd!r}, start_seeds_above={self.start_seeds_above!r}: give all "
                             "three (the comparison with the model it grew from continued on the same FLOPs) or none")
        if self.ceiling is not None and (isinstance(self.ceiling, bool) or not isinstance(self.ceiling, (int, float))
                                         or not math.isfinite(self.ceiling) or self.ceiling < 1):
            raise ValueError(f"measured cell {self.key()}: ceiling={self.ceiling!r}: must be a number >= 1 (scratch "
                             "FLOPs over the same steps / the growth run's)")
        if (self.speedup is None) != (self.speedup_sd is None):
            raise ValueError(f"measured cell {self.key()}: speedup={self.speedup!r}, speedup_sd={self.speedup_sd!r}: "
                             "give both (mean and sd over the seeds) or neither")
        if self.speedup is None:
            return
        for name, value, ok, what in (
                ("speedup", self.speedup, lambda v: v > 0,
                 "> 0 (scratch compute / growth compute at the growth run's final loss)"),
                ("speedup_sd", self.speedup_sd, lambda v: v >= 0, ">= 0 (the sd over the seeds)")):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or not ok(value):
                raise ValueError(f"measured cell {self.key()}: {name}={value!r}: must be a finite number {what}")

    @classmethod
    def from_json(cls, cell: dict) -> MeasuredCell:
        """The cell of one entry of a map file's ``cells`` (its ``"axis"`` is :attr:`category`).

        Example::

            >>> cell = {"axis": "depth", "recipe": "paper", "schedule": "wsd", "growth_at": 0.8,
            ...         "tokens_per_param": 20.0, "delta": 0.01, "sd": 0.0, "seeds": 1, "seeds_above": 1, "where": "x"}
            >>> MeasuredCell.from_json(cell).category
            'depth'
        """
        data = dict(cell)
        if FILE_KEY in data:
            data["category"] = data.pop(FILE_KEY)
        return cls(**data)

    def to_json(self) -> dict:
        """This cell as an entry of a map file's ``cells`` (``"axis"`` first, as the files have it)."""
        data = dataclasses.asdict(self)
        return {FILE_KEY: data.pop("category"), **data}

    def key(self) -> str:
        """The cell's setting, ``'depth/paper/cosine@5%/31'`` (``'upcycle[copy]/paper/...'`` for an experts cell), for
        messages."""
        category = self.category if self.init is None else f"{self.category}[{self.init}]"
        when = "+".join(f"{t:.0%}" for t in self.timings)
        return f"{category}/{self.recipe}/{self.schedule}@{when}/{self.tokens_per_param:g}"

    @property
    def timings(self) -> tuple[float, ...]:
        """When each growth came, as shares of the run: a multi-stage cell's every ``at_fraction``, else
        ``(growth_at,)``."""
        return tuple(e["at_fraction"] for e in self.stages) if self.stages else (self.growth_at,)

    @property
    def ceiling_fraction(self) -> float | None:
        """The measured speed-up as a share of :attr:`ceiling` (above 1: the grown run beat scratch trained on the same
        steps), or ``None`` without both."""
        if self.speedup is None or self.ceiling is None:
            return None
        return self.speedup / self.ceiling

    def describe_speedup(self) -> str | None:
        """``'speed-up at equal loss 1.35x ± 0.08 (3 seeds)'`` (scratch compute / growth compute at the growth run's
        final loss, mean ± sd over the seeds), or ``None`` when the cell has none."""
        if self.speedup is None:
            return None
        return f"speed-up at equal loss {self.speedup:.2f}x ± {self.speedup_sd:.2f} ({self.seeds} seeds)"

    def describe_size(self) -> str | None:
        """``'0.59M parameters (embedding and head 44%), cpu, 32-true'``, or ``None`` for a cell without a size."""
        if self.params is None:
            return None
        share = f" (embedding and head {self.embedding_share:.0%})" if self.embedding_share is not None else ""
        where = ", ".join(v for v in (self.device, self.precision) if v)
        return f"{format_params(self.params)} parameters{share}{', ' + where if where else ''}"

    @property
    def verdict(self) -> str:
        """What the seeds say (:func:`~lightning_sparkling.pretrain.advice.verdict.verdict`): ``paid`` (every seed below
        scratch, or the mean Δ more than its sd below zero), ``cost`` (the mirror image) or ``no measurable
        difference``; against the model it grew from too where that was measured (the worse of the two)."""
        own = verdict(self.delta, self.sd, self.seeds, self.seeds_above)
        if self.start_delta is None:
            return own
        assert self.start_sd is not None and self.start_seeds_above is not None  # measured with start_delta
        return worse(own, verdict(self.start_delta, self.start_sd, self.seeds, self.start_seeds_above))

    @property
    def pays(self) -> bool:
        """Whether growth paid (:attr:`verdict`): below scratch beyond the seeds' spread, and not above the model it
        grew from continued on the same FLOPs where that was measured."""
        return self.verdict == PAID

    def describe_start(self) -> str | None:
        """``'Δ +0.058 ± 0.012 against the model it grew from continued on the same FLOPs, above it in 3/3 seeds'``,
        or ``None`` when that was not measured."""
        if self.start_delta is None:
            return None
        return (f"Δ {self.start_delta:+.3f} ± {self.start_sd:.3f} against the model it grew from continued on the "
                f"same FLOPs, above it in {self.start_seeds_above}/{self.seeds} seeds")

    def describe(self) -> str:
        """``'joint, recommended, cosine, growth at 50%, 2.8 tokens per parameter: Δ -0.020 ± 0.018 (above
        scratch in 0/3 seeds)'``, led by the speed-up at equal loss where the cell has one (``'...: speed-up at
        equal loss 1.35x ± 0.08 (3 seeds), Δ ...'``)."""
        speedup = self.describe_speedup()
        category = self.category if self.init is None else f"{self.category} ({_init_key(self.category)} {self.init})"
        when = (f"growth at {self.growth_at:.0%}" if len(self.timings) == 1 else
                f"growths at {', '.join(f'{t:.0%}' for t in self.timings)}")
        arch = f", {self.arch} blocks" if self.arch is not None and self.arch != "llama" else ""
        return (f"{category}{arch}, {self.recipe}, {self.schedule}, {when}, "
                f"{self.tokens_per_param:g} tokens per parameter: {speedup + ', ' if speedup else ''}"
                f"Δ {self.delta:+.3f} ± {self.sd:.3f} val loss "
                f"(above scratch in {self.seeds_above}/{self.seeds} seeds"
                f"{'; ' + (self.describe_start() or '') if self.start_delta is not None else ''}"
                f"; docs/BENCHMARKS.md, {self.where})")


DEMO_TOKENS_PER_PARAM = 1.0
"""Below this many training tokens per final active parameter a run is a demo: the map's smallest setting is 1.7."""


@dataclass(frozen=True)
class Advice:
    """What the map says about a run: ``category`` the run's map category (:func:`classify_category`), ``recipe`` the
    map's name of its recipe (the ``key`` of :func:`~lightning_sparkling.growth.recipes.recipe_facts`, matched with
    the cells'), ``label`` and ``recipe_note`` what the advice calls it and why (``None``: ``recipe``, no note),
    ``cell`` the nearest measured comparison of the run's category, recipe and schedule (``None``: none of them
    measured), ``near`` whether it is within :data:`NEAR_RATIO` and :data:`NEAR_TIMING` of the run, ``pays``
    whether it is near and ended at or below scratch on average, ``better`` the comparison of another recipe near the
    run (same category and schedule) that paid and ended lower than ``cell`` (``None``: none did); ``init`` the run's
    ``expert_init`` in an experts category (``None`` elsewhere)."""

    category: str
    recipe: str
    schedule: str
    growth_at: float
    tokens_per_param: float
    cell: MeasuredCell | None
    near: bool
    better: MeasuredCell | None = None
    init: str | None = None
    params: int | None = None
    trend: str | None = None
    label: str | None = None
    recipe_note: str | None = None
    timings: tuple[float, ...] | None = None
    arch: str | None = None
    ceiling: float | None = None

    @property
    def size_gap(self) -> float | None:
        """How many times larger the run's model is than the nearest cell's (below 1: smaller), or ``None`` when
        either size is unknown."""
        if self.cell is None or self.cell.params is None or not self.params:
            return None
        return self.params / self.cell.params

    @property
    def far_in_size(self) -> bool:
        """Whether the nearest cell was measured at a model :data:`FAR_SIZE` times smaller or larger than the run's."""
        gap = self.size_gap
        return gap is not None and max(gap, 1 / gap) > FAR_SIZE

    @property
    def pays(self) -> bool:
        """Whether growth paid in a cell near the run in token ratio, timing and size."""
        return self.near and self.cell is not None and self.cell.pays and not self.far_in_size

    def describe_gap(self) -> str | None:
        """``'measured at 0.59M parameters, 187x smaller than this run's 110M'`` (``None`` without both sizes)."""
        gap = self.size_gap
        if gap is None:
            return None
        assert self.cell is not None and self.params is not None  # a size gap needs both
        where = self.cell.describe_size()
        if 0.9 <= gap <= 1.1:
            return f"measured at {where}, the size of this run's {format_params(self.params)}"
        relation = f"{gap:.3g}x smaller" if gap > 1 else f"{1 / gap:.3g}x larger"
        return f"measured at {where}, {relation} than this run's {format_params(self.params)}"

    def message(self) -> str:
        """What ``sparkling plan`` / ``pretrain`` print: the run, what was measured nearest (and its verdict), a
        recipe that was measured better near it, the schedule's ceiling at the cell's size and the run's, and a note
        when the cell's block family is not the run's."""
        text = self._nearest_message()
        if self.better is not None:
            text += f". Measured better near this run: growth.recipe {self.better.recipe} ({self.better.describe()})"
        return ". ".join([text, *filter(None, (self.ceiling_line(), self.family_note()))])

    def ceiling_line(self) -> str | None:
        """``"this schedule's ceiling (...): 1.50x at the cell's 0.20M, 1.75x at this run's 1.38M; measured 1.29x =
        86% of it"``, or ``None`` for a demo or without a ceiling to state."""
        if self.demo or (self.ceiling is None and (self.cell is None or self.cell.ceiling is None)):
            return None
        at = []
        if self.cell is not None and self.cell.ceiling is not None and self.near:
            size = f" {format_params(self.cell.params)}" if self.cell.params else ""
            at.append(f"{self.cell.ceiling:.2f}x at the cell's{size}")
        if self.ceiling is not None:
            size = f" {format_params(self.params)}" if self.params else ""
            at.append(f"{self.ceiling:.2f}x at this run's{size}")
        text = ("this schedule's ceiling (its saving if the grown run matched scratch token for token, from the "
                f"phases' 6 N D): {', '.join(at)}")
        fraction = self.cell.ceiling_fraction if self.cell is not None and self.near else None
        if fraction is not None and self.cell is not None:
            text += f"; measured {self.cell.speedup:.2f}x = {fraction:.0%} of its ceiling"
            if fraction > 1:
                text += " (above it: the grown run ended below scratch trained on the same steps)"
        return text

    def family_note(self) -> str | None:
        """A note when the cited cell was measured on another block family than the run's (``None``: the same, or
        either unknown)."""
        if self.cell is None or self.cell.arch is None or self.arch is None or self.cell.arch == self.arch:
            return None
        return (f"note: the cell was measured on {self.cell.arch} blocks and this run has {self.arch} blocks: a "
                "saving measured on one block family did not always hold on another (docs/BENCHMARKS.md, \"Evidence "
                "that transfers\"); measure it on this family before counting on it")

    @property
    def demo(self) -> bool:
        """Whether the run is shorter than :data:`DEMO_TOKENS_PER_PARAM` training tokens per parameter: a demo (e.g.
        the quickstart), far below every setting the map measured; its advice says so in one line. A run measured
        near its own setting (``sparkling measure``, read with ``plan --map``) is no demo to the map."""
        return 0 < self.tokens_per_param < DEMO_TOKENS_PER_PARAM and not self.near

    def _nearest_message(self) -> str:
        if self.demo:
            return (f"this run is a demo ({self.tokens_per_param:.2f} training tokens per final active parameter, "
                    f"below the {DEMO_TOKENS_PER_PARAM:g} of every measured setting): its FLOPs saved are arithmetic, "
                    "not a measured saving")
        category = self.category if self.init is None else f"{self.category}, {_init_key(self.category)} {self.init}"
        note = f"; {self.recipe_note}" if self.recipe_note else ""
        run = (f"this run ({category}, growth.recipe {self.label or self.recipe}, {self.schedule} schedule, first "
               f"growth at {self.growth_at:.0%}, {self.tokens_per_param:.2f} training tokens per final active "
               f"parameter{note})")
        if self.cell is None:
            return (f"nothing was measured for {run}: no seeded comparison of this growth category, recipe and "
                    f"schedule against same-FLOPs scratch. Before counting on the FLOPs saved, {MEASURE_HINT}")
        gap = self.describe_gap()
        if not self.near:
            return (f"nothing near {run} was measured; the nearest comparison, {self.cell.describe()}"
                    f"{', ' + gap if gap else ''}, is too far from it to say. Before counting on the FLOPs saved, "
                    f"{MEASURE_HINT}")
        if self.far_in_size:
            trend = (f" The size trend of this growth category: {self.trend}." if self.trend else
                     " No size trend was measured in this growth category (its speed-ups come from one model size).")
            return (f"the evidence nearest to {run} is far from it in size: {self.cell.describe()}, {gap}; too far "
                    f"to say whether growth pays at this size.{trend} To know, {MEASURE_HINT}")
        if self.pays:
            return f"measured nearest to {run}: {self.cell.describe()}{', ' + gap if gap else ''}: growth paid there"
        if self.cell.verdict == TIE:
            return (f"no measurable difference near {run}: {self.cell.describe()}{'; ' + gap if gap else ''}: "
                    "growth neither paid nor cost beyond its seeds' spread, so no saving was measured. Before "
                    f"counting on the FLOPs saved, {MEASURE_HINT}")
        above = ("above the grown shape trained from scratch on the same FLOPs" if self.cell.delta > 0 else
                 "above the model it grew from continued on the same FLOPs")
        return (f"growth cost near {run}: {self.cell.describe()}, {above}"
                f"{'; ' + gap if gap else ''}. Before counting on the FLOPs saved, {MEASURE_HINT}")


@lru_cache(maxsize=1)
def load_map(path: Path = MAP_PATH) -> tuple[MeasuredCell, ...]:
    """The measured cells of ``path`` (default: the package's ``measured.json``)."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return tuple(MeasuredCell.from_json(cell) for cell in data["cells"])


def classify_category(stages: Sequence[GrowthStage], sizes: Sequence[Sequence[str]] | None = None) -> str:
    """The map category of what ``stages`` grow: ``depth`` (one stage, or several that each grow only ``n_layer``:
    a depth schedule, matched with the cells of as many growths), ``two-stage`` (several width stages),
    ``depth+width``,
    ``joint`` (n_embd and an MLP size), ``hidden``, ``hidden+heads``, ``inner``, ``heads``, ``upcycle`` (dense ->
    MoE: a stage that sets ``mlp_class_name``), ``experts+topk`` (more experts and a new ``n_expert_per_token``),
    ``experts``, those joined with the other axes of a stage that also grows them (``upcycle+depth+width``), or the
    name of a registered axis that no labeller names (``none`` for no axis at all):
    :func:`~lightning_sparkling.pretrain.advice.measured_axes.cell_label` names it (experts first, then depth, heads,
    width). ``sizes``: each stage's changed sizes, where they are not its keys (a named target).

    Example::

        >>> classify_category([GrowthStage(10, n_embd=64, intermediate_size=256)])
        'joint'
        >>> classify_category([GrowthStage(10, n_layer=8)])
        'depth'
        >>> classify_category([GrowthStage(10, n_expert=8)])
        'experts'
        >>> classify_category([GrowthStage(10, mlp_class_name="LLaMAMoE", n_expert=4, n_expert_per_token=2)])
        'upcycle'
    """
    grown = [set(s) for s in sizes] if sizes is not None else [set(stage.sizes) for stage in stages]
    if len(grown) > 1:  # several stages: a depth schedule, "two-stage" when none adds modules (depth, experts)
        if all(g == {"n_layer"} for g in grown):
            return "depth"  # matched with the cells of as many growths (nearest's timings)
        return "two-stage" if all(g and not g & structural_sizes() for g in grown) else "several stages"
    (keys,) = grown
    owners = axis_of_size()
    axes = {owners[k].name for k in keys if k in owners}
    if sizes is None:  # a registered axis grows by its own keys, sizes or not
        axes |= {axis.name for axis in active_axes(stages[0])}
    return cell_label(keys, stages[0], axes)  # experts alone, depth, heads, width: the first that names the cell


def nearest(cells: Sequence[MeasuredCell], *, category: str, recipe: str, schedule: str, growth_at: float,
            tokens_per_param: float, init: str | None = None, params: int | None = None,
            timings: Sequence[float] | None = None, arch: str | None = None) -> tuple[MeasuredCell | None, bool]:
    """The cell of the map category ``category``, ``recipe``, ``schedule`` and ``init`` (an experts stage's
    ``expert_init``, a depth run's ``depth_init`` where not ``copy-zero``; ``None`` elsewhere) with as many growths as
    the run (``timings``: when each came, shares of the run; default ``(growth_at,)``), nearest in token ratio and
    model size (the Euclidean distance of their logs; size counts where both the run's ``params`` and the cell's are
    known), then timing, and whether it is near in token ratio and every growth's timing (:data:`NEAR_RATIO`,
    :data:`NEAR_TIMING`; how far it is in size the advice says itself, :data:`FAR_SIZE`).

    A multi-stage schedule (``stages`` in a cell) is matched only by a run with as many growths, and a one-growth
    cell only by a one-growth run: ``sparkling measure`` of a pasted ``--suggest`` block, ``plan`` of it and the cell
    ``--suggest`` cited are one match. Where cells of the run's block family (``arch``, or cells that did not record
    theirs) exist among them, only those are weighed: a saving measured on the run's own blocks is the nearer
    evidence."""
    timings = tuple(timings) if timings is not None else (growth_at,)
    same = [c for c in cells if (c.category, c.recipe, c.schedule, c.init) == (category, recipe, schedule, init)
            and c.tokens_per_param > 0 and len(c.timings) == len(timings)]
    own = [c for c in same if arch is not None and c.arch in (arch, None)]  # None: a cell that did not record it
    same = own or same
    if not same or tokens_per_param <= 0:
        return None, False

    def size_gap(c: MeasuredCell) -> float:
        return abs(math.log(c.params / params)) if params and c.params else 0.0

    def timing_gap(c: MeasuredCell) -> float:
        return max(abs(a - b) for a, b in zip(c.timings, timings))

    def distance(c: MeasuredCell) -> tuple[float, float]:
        return math.hypot(math.log(c.tokens_per_param / tokens_per_param), size_gap(c)), timing_gap(c)

    best = min(same, key=distance)
    ratio_gap = abs(math.log(best.tokens_per_param / tokens_per_param))
    return best, ratio_gap <= math.log(NEAR_RATIO) + 1e-9 and timing_gap(best) <= NEAR_TIMING + 1e-9


def size_trend(cells: Sequence[MeasuredCell], *, category: str, schedule: str, init: str | None = None) -> str | None:
    """What the map's speed-ups of the category ``category`` under ``schedule`` show against model size:
    ``'1.16x at 0.13M (2.8 tokens/param), 1.23x at 0.37M (2.8)'``, smallest model first (the best recipe per size and
    token ratio), or ``None`` when fewer than two sizes were measured."""
    best: dict[tuple[int, float], MeasuredCell] = {}
    for c in cells:
        if (c.category, c.schedule, c.init) != (category, schedule, init) or c.speedup is None or c.params is None:
            continue
        key = (c.params, c.tokens_per_param)
        if key not in best or c.speedup > cast(float, best[key].speedup):  # kept cells have one
            best[key] = c
    if len({params for params, _ in best}) < 2:
        return None
    return ", ".join(f"{c.speedup:.2f}x at {format_params(cast(int, c.params))} ({c.tokens_per_param:g} tokens/param)"
                     for _, c in sorted(best.items()))


def better_recipe(cells: Sequence[MeasuredCell], *, category: str, recipe: str, schedule: str, growth_at: float,
                  tokens_per_param: float, than: MeasuredCell | None, init: str | None = None,
                  timings: Sequence[float] | None = None) -> MeasuredCell | None:
    """The lowest-Δ cell of a recipe other than ``recipe``, of ``category`` and ``schedule``, near the run, that ended
    below scratch on average and in most seeds, and below ``than`` (the run's own nearest cell, if near) by more than
    the larger of the two sds (a gap inside the seeds' spread is no reason to switch), or ``None``.

    Example::

        >>> cells = load_map()
        >>> better_recipe(cells, category="joint", recipe="recommended", schedule="wsd", growth_at=0.5,
        ...               tokens_per_param=2.8, than=None).recipe
        'wsd'
    """
    best = None
    for other in sorted({c.recipe for c in cells} - {recipe}):  # sorted: a tie goes to the same recipe every run
        cell, near = nearest(cells, category=category, recipe=other, schedule=schedule, growth_at=growth_at,
                             tokens_per_param=tokens_per_param, init=init, timings=timings)
        if (not near or cell is None or cell.delta >= 0 or not cell.pays or 2 * cell.seeds_above >= cell.seeds
                or (than is not None and than.delta - cell.delta <= max(cell.sd, than.sd))):
            continue
        if best is None or cell.delta < best.delta:
            best = cell
    return best


def _init_key(category: str) -> str:
    """The stage key a cell's ``init`` is the value of: ``depth_init`` for a depth cell, else ``expert_init``."""
    return "depth_init" if category == "depth" else "expert_init"


def run_init(stages: Sequence[GrowthStage], category: str) -> str | None:
    """The ``init`` a run is matched on: a one-stage experts run's ``expert_init``; a depth run whose every stage
    starts its new blocks otherwise than ``copy-zero`` (the map's plain depth cells) its ``depth_init``
    (``copy``: G_stack's full copy); ``None`` elsewhere.

    Example::

        >>> from lightning_sparkling.growth.stage import GrowthStage
        >>> run_init([GrowthStage(10, n_layer=8, depth_init="copy")], "depth")
        'copy'
        >>> run_init([GrowthStage(10, n_layer=8)], "depth") is None
        True
    """
    if len(stages) == 1 and stages[0].grows_experts:
        return stages[0].expert_init
    inits = {s.depth_init for s in stages if s.n_layer is not None or s.depth_map is not None}
    if category == "depth" and len(inits) == 1 and inits != {"copy-zero"}:
        return next(iter(inits))
    return None


def advise(stages: Sequence[GrowthStage], *, total_steps: int, tokens_per_param: float, recipe: str | RecipeName,
           schedule: str = "cosine", sizes: Sequence[Sequence[str]] | None = None,
           cells: Sequence[MeasuredCell] | None = None, params: int | None = None, arch: str | None = None,
           ceiling: float | None = None) -> Advice:
    """What the map says about a run growing by ``stages`` over ``total_steps``, with ``tokens_per_param`` training
    tokens per final active parameter, under ``recipe`` and ``schedule`` (``cells``: default :func:`load_map`), for a
    grown model of ``params`` parameters (``None``: size unknown, not weighed). A one-stage experts run is matched
    with the cells of its ``expert_init`` only; a run with several growths with the cells of as many (their
    ``stages``). ``arch``: the run's block family (a note when the cell's differs); ``ceiling``: its schedule's
    ceiling (printed beside the cell's).

    ``recipe``: the map's name of the run's recipe, or its
    :class:`~lightning_sparkling.pretrain.advice.recipe_words.RecipeName`
    (:func:`~lightning_sparkling.pretrain.advice.recipe_words.recipe_name` of the stages: its ``key`` is matched, its
    ``label`` and ``note`` are what the advice prints)."""
    name = recipe if isinstance(recipe, RecipeName) else RecipeName(recipe, recipe)
    recipe = name.key
    category = classify_category(stages, sizes)
    timings = tuple(cast(int, s.resolved(total_steps).at_step) / total_steps for s in stages)
    growth_at = timings[0] if timings else 0.0
    cells = load_map() if cells is None else cells
    init = run_init(stages, category)
    where: dict[str, Any]
    where = dict(category=category, schedule=schedule, growth_at=growth_at, tokens_per_param=tokens_per_param,
                 init=init, timings=timings)
    cell, near = nearest(cells, recipe=recipe, params=params, arch=arch, **where)
    better = better_recipe(cells, recipe=recipe, than=cell if near else None, **where)
    trend = size_trend(cells, category=category, schedule=schedule, init=init)
    advice = Advice(recipe=recipe, cell=cell, near=near, better=better, params=params, trend=trend,
                    label=name.label if name.label != recipe else None, recipe_note=name.note, arch=arch,
                    ceiling=ceiling, **where)
    if better is not None and advice.far_in_size:  # a recipe "measured better" that far away is no advice either
        advice = dataclasses.replace(advice, better=None)
    return advice
