"""``sparkling plan --suggest``: where to start and how to grow so that a run ends at the model its config names, on
the config's own token budget, as measured best (:func:`suggest`).

The config names the model the user means to train: its ``model_name`` / ``model_config`` when ``growth`` grows
nothing, else the model its growth ends at (the *target*). Every cell of the measured map
(:mod:`~lightning_sparkling.pretrain.advice.measured`) under the run's ``train.lr_schedule`` whose schedule applies to
the target becomes a candidate: the start model (the cell's factors divided out of the target's sizes,
:func:`~lightning_sparkling.pretrain.advice.target.toward`) and the stages that end at the target. A candidate *fits*
when the cell was measured within :data:`~lightning_sparkling.pretrain.advice.measured.NEAR_RATIO` of the run's training
tokens per final active parameter, growth paid there (:mod:`~lightning_sparkling.pretrain.advice.verdict`), no cell
of its category and recipe measured nearer the run's size failed to pay (evidence at the run's size outweighs a saving
farther away), and the pasted block checks out: the run then resolves, ends at exactly the target, trains the
config's tokens, and ``sparkling plan`` of it cites this same cell. The best fit (largest speed-up at equal loss,
then lowest Δ) is printed: the start model's ``model_config`` keys and the ``growth:`` block, which model it starts
and ends at, and the evidence; with no fit, the report says so, with the nearest cell and its verdict, and prints
no block. Never a block that ends at another model than the config's.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lightning_sparkling.pretrain.advice.run_plan import RunPlan, plan_run
from lightning_sparkling.pretrain.advice.target import NoFit, toward
from lightning_sparkling.pretrain.errors import ConfigError

__all__ = ["Suggestion", "suggest"]


@dataclass(frozen=True)
class Suggestion:
    """What ``--suggest`` found: ``growth`` the block to paste and ``start`` the start model's ``model_config`` keys
    (``None``: no cell fits), ``cell`` its evidence (or the nearest cell of the run's schedule when none fits),
    ``tokens_per_param`` the run's training tokens per final active parameter, ``params`` the target's parameters
    (total, as the map's cells count them) and ``start_params`` the start model's, ``schedule`` the run's,
    ``rounded`` the sizes the cell's factors did not divide, ``notes`` the pasted run's ceiling and family lines,
    ``rejected`` fitting cells whose block the run refused (and why), ``target`` the target model's name and
    layers, ``overruled`` the cells that paid but were measured farther from the run's size than ``cell``, which did
    not pay (:func:`_nearer_without_saving`)."""

    growth: dict[str, Any] | None
    cell: Any
    tokens_per_param: float
    params: int
    schedule: str
    start: dict[str, Any] | None = None
    start_params: int | None = None
    rounded: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    target: str = "this run's model"
    overruled: list[Any] = field(default_factory=list)

    def evidence(self) -> str:
        """The cell, its verdict and how far it is from the run: token ratio, timing, model size and seeds."""
        from lightning_sparkling.pretrain.advice.measured import FAR_SIZE
        from lightning_sparkling.pretrain.advice.measured_size import format_params
        from lightning_sparkling.pretrain.advice.verdict import phrase

        cell = self.cell
        gap = cell.tokens_per_param / self.tokens_per_param
        ratio = (f"measured at {cell.tokens_per_param:g} tokens per parameter against this run's "
                 f"{self.tokens_per_param:.3g} ({max(gap, 1 / gap):.2f}x apart)")
        if cell.params:
            size_gap = self.params / cell.params
            relation = (f"{size_gap:.3g}x smaller than" if size_gap > 1.1 else
                        f"{1 / size_gap:.3g}x larger than" if size_gap < 0.9 else "the size of")
            size = f"on {cell.describe_size()}, {relation} this run's {format_params(self.params)}"
        else:
            size = "model size not recorded"
        far = ""
        if cell.params and max(self.params / cell.params, cell.params / self.params) > FAR_SIZE:
            far = (f". That is over {FAR_SIZE:g}x apart in size: the map cannot say whether it pays at this size; "
                   "measure it before counting on it (sparkling measure --config RUN.yaml)")
        return f"{cell.describe()}: {phrase(cell.verdict)}; {ratio}; {size}; {cell.seeds} seeds{far}"

    def message(self) -> str:
        """The report ``sparkling plan --suggest`` prints: the start model's keys and the block (YAML), which model it
        starts and ends at, and its evidence; or why there is none."""
        import yaml

        from lightning_sparkling.pretrain.advice.measured_size import format_params

        if self.growth is None and self.overruled:
            best = self.overruled[:3]  # the best first (the run's block family, then the largest speed-up)
            paid = "; ".join(f"{c.key()} {_saving(c)} at {format_params(c.params)}" for c in best)
            more = f" and {len(self.overruled) - len(best)} more" if len(self.overruled) > len(best) else ""
            return (f"no measured growth fits this run: growth of this kind paid only on models farther from its "
                    f"size than one where it did not. Nearest this run's size: {self.evidence()}. Paid farther "
                    f"away: {paid}{more}. A saving measured at other sizes is not shown to carry to this one; to "
                    "know whether growth pays here, measure it: sparkling measure --config RUN.yaml")
        if self.growth is None:
            nearest = f" The nearest cell of this schedule: {self.evidence()}." if self.cell is not None else ""
            return (f"no measured growth fits this run: no cell of the map under train.lr_schedule {self.schedule} "
                    f"was measured near its token ratio, paid there and ends at its model.{nearest} To know whether "
                    "growth pays here, measure it: sparkling measure --config RUN.yaml")
        assert self.start is not None and self.start_params is not None  # set with growth
        block = yaml.safe_dump({"model_config": self.start, "growth": self.growth}, sort_keys=False,
                               default_flow_style=False).rstrip()
        rounded = (f"\nrounded: {'; '.join(self.rounded)} (the cell's factors do not divide these sizes; the stages "
                   "still end at your model)" if self.rounded else "")
        notes = "".join(f"\n{note}" for note in self.notes)
        return (f"measured best growth toward this run's model (train.lr_schedule {self.schedule}, "
                f"{self.tokens_per_param:.3g} training tokens per final active parameter): start smaller and grow "
                "into it. Merge model_config's keys into your config (they set the model the run starts at) and "
                f"paste growth:\n\n{block}\n\n"
                f"starts at {format_params(self.start_params)} parameters ({_start_line(self.start)}) and ends at "
                f"{self.target}, {format_params(self.params)} parameters ({self.params:,}), on the config's "
                f"{self.tokens_per_param:.3g} tokens per parameter{rounded}\n"
                f"evidence: {self.evidence()}{notes}")


def _saving(cell: Any) -> str:
    """``'1.29x'`` (the speed-up at equal loss) or ``'Δ -0.040'`` where the cell has none."""
    return f"{cell.speedup:.2f}x" if cell.speedup is not None else f"Δ {cell.delta:+.3f}"


def _nearer_without_saving(cell: Any, near: Sequence[Any], params: int, arch: str) -> Any | None:
    """The cell of ``near`` (the map's cells near the run's token ratio, under its schedule) of ``cell``'s category
    and recipe that was measured nearest the run's size, where that is nearer than ``cell`` and growth did not pay
    there; else ``None``. Its timing and init may differ: a depth schedule that paid at 0.20M with ``copy-zero`` is no
    better evidence for a 1M run than the same schedule with ``copy`` (ahead wherever both were measured) that did
    not pay at 1.38M. A recipe may not: ``paper`` costing where ``random-zero-3x`` paid says nothing of the latter.

    Evidence at the run's size outweighs a saving measured farther away: depth 2 -> 4 -> 8 paid at 0.20M but showed no
    measurable difference at 1.38M, so a 1M run is not told to grow on the 0.20M cell's word. Cells of the run's
    block family are weighed first, as ``plan`` weighs them
    (:func:`~lightning_sparkling.pretrain.advice.measured.nearest`).

    Example::

        >>> from types import SimpleNamespace as Cell
        >>> small = Cell(category="depth", recipe="paper", arch="llama", params=200_000, verdict="paid")
        >>> large = Cell(category="depth", recipe="paper", arch="llama", params=1_400_000,
        ...              verdict="no measurable difference")
        >>> _nearer_without_saving(small, [small, large], 1_000_000, "llama") is large
        True
        >>> _nearer_without_saving(small, [small], 1_000_000, "llama") is None
        True
        >>> paid = Cell(category="depth", recipe="paper", arch="llama", params=1_400_000, verdict="paid")
        >>> _nearer_without_saving(small, [small, paid], 1_000_000, "llama") is None  # a nearer saving is no veto
        True
        >>> other = Cell(category="depth", recipe="recommended", arch="llama", params=1_400_000, verdict="cost")
        >>> _nearer_without_saving(small, [small, other], 1_000_000, "llama") is None  # nor another recipe's loss
        True
    """
    from lightning_sparkling.pretrain.advice.verdict import PAID

    if not cell.params or not params:
        return None
    pool = [c for c in near if (c.category, c.recipe) == (cell.category, cell.recipe) and c.params]
    pool = [c for c in pool if c.arch in (arch, None)] or pool

    def size_gap(c: Any) -> float:
        return abs(math.log(c.params / params))

    nearest = min(pool, key=size_gap, default=None)
    if nearest is None or nearest.verdict == PAID or size_gap(nearest) >= size_gap(cell):
        return None
    return nearest


def _start_line(start: dict[str, Any]) -> str:
    return ", ".join(f"{key} {value}" for key, value in start.items())


def _start_model_config(ns: Any, run: Any, target: Any, start: dict[str, Any]) -> dict[str, Any]:
    """The ``model_config`` keys that make the config's model the start model: ``start``'s sizes, plus any field
    litgpt would otherwise re-derive from them (``head_size``, ``intermediate_size``, ``rope_n_elem`` of a named
    config), pinned to the target's."""
    from lightning_sparkling.pretrain.model.model_config import model_config_from, model_name_to_look_up

    want = dataclasses.replace(target, **start)
    keys = dict(start)
    for _ in range(3):  # each pass pins what the last one re-derived
        base = {**(getattr(ns, "model_config", None) or {}), **keys}
        name = model_name_to_look_up(getattr(ns, "model_name", None), base, [])  # litgpt's reading, as the run's
        built = model_config_from(name, base, vocab_size=run.data_vocab_size, seq_len=run.seq_len)
        differ = {f.name: getattr(want, f.name) for f in dataclasses.fields(want)
                  if f.name != "name" and getattr(built, f.name) != getattr(want, f.name)}
        if not differ:
            return keys
        keys.update(differ)
    raise NoFit(f"the start model cannot be set by model_config keys: {sorted(differ)} differ")


def _pasted(ns: Any, model_config: dict[str, Any], growth: dict[str, Any]) -> Any:
    """The configuration namespace with the suggestion pasted."""
    candidate = copy.deepcopy(ns)
    candidate.model_config = {**(getattr(ns, "model_config", None) or {}), **model_config}
    seed = getattr(getattr(ns, "growth", None), "seed", 0)
    candidate.growth = {**growth, "seed": seed}
    candidate.resume = False
    return candidate


def _check(ns: Any, run: Any, target: Any, cell: Any, start: dict[str, Any], growth: dict[str, Any],
           cells: Sequence[Any]) -> RunPlan:
    """The pasted run's plan (:func:`~lightning_sparkling.pretrain.advice.run_plan.plan_run`: its advice is what
    ``plan`` prints for it), once checked: it resolves, ends at exactly ``target``, trains the config's tokens and is
    advised with ``cell`` itself.

    Raises:
        NoFit: naming what failed.
    """
    from lightning_sparkling.pretrain.config.resolve import resolve

    try:
        # its plan, compute and advice, once; a dry run as the plan it is pasted into (no data on disk needed)
        pasted = plan_run(resolve(_pasted(ns, start, growth), dry_run=True), cells=cells)
    except (ConfigError, ValueError) as err:
        raise NoFit(str(err)) from None
    final = pasted.final_config
    differ = [f.name for f in dataclasses.fields(final) if getattr(final, f.name) != getattr(target, f.name)]
    if differ:
        raise NoFit(f"the pasted block ends at another model ({', '.join(differ)} differ)")
    if pasted.run.total_tokens != run.total_tokens:
        raise NoFit(f"the pasted block trains {pasted.run.total_tokens:,} tokens, the config {run.total_tokens:,}")
    advice = pasted.advice
    if advice is None or advice.cell != cell:
        cited = advice.cell.key() if advice is not None and advice.cell is not None else "no cell"
        raise NoFit(f"sparkling plan of the pasted block would cite {cited}, not this cell")
    return pasted


def _rank(cell: Any, arch: str) -> tuple[bool, float, float]:
    """Cells of the run's block family first, then the largest speed-up, then the lowest Δ."""
    return (cell.arch in (arch, None), cell.speedup if cell.speedup is not None else 1.0, -cell.delta)


def suggest(ns: Any, run: Any, cells: Sequence[Any] | None = None) -> Suggestion:
    """The measured best way to train ``run``'s model by growing into it (its parsed namespace ``ns``, to paste and
    check the block).

    Args:
        ns: the parsed configuration (``parse(...)[0]``).
        run: the resolved run (its model, growth, steps, tokens, schedule).
        cells: the map (default: the package's, :func:`~lightning_sparkling.pretrain.advice.measured.load_map`; ``plan
            --map FILE`` adds a ``measure.json``'s).

    Example::

        sparkling plan --config examples/depth_2x.yaml --suggest
    """
    from lightning_sparkling.pretrain.advice.measured import NEAR_RATIO, load_map
    from lightning_sparkling.pretrain.advice.measured_axes import block_family

    cells = load_map() if cells is None else cells
    schedule = run.train.lr_schedule
    run_plan = plan_run(run, advise=False)  # the model the config means to train: what its growth ends at
    target, params = run_plan.final_config, run_plan.compute.total_params[-1]
    ratio = run_plan.tokens_per_param
    name = f"{target.name or 'your model'} ({target.n_layer} layers)"
    fits, near, nearest, rejected, overruled = [], [], None, [], []
    for cell in cells:
        if cell.schedule != schedule:
            continue
        try:
            way = toward(target, cell, steps=run.steps)
        except NoFit:
            continue
        gap = abs(math.log(cell.tokens_per_param / ratio))
        if nearest is None or gap < nearest[0]:
            nearest = (gap, cell)
        if gap <= math.log(NEAR_RATIO) + 1e-9:
            near.append(cell)
            if cell.pays:
                fits.append((cell, way))
    arch = block_family(target)
    for cell, way in sorted(fits, key=lambda fit: _rank(fit[0], arch), reverse=True):
        nearer = _nearer_without_saving(cell, near, params, arch)
        if nearer is not None:
            rejected.append(f"{cell.key()}: {nearer.key()}, nearer this run's size, did not pay")
            overruled.append((cell, nearer))
            continue
        growth = {"recipe": cell.recipe, "stages": way.stages}
        try:
            start = _start_model_config(ns, run, target, way.start)
            pasted = _check(ns, run, target, cell, start, growth, cells)
        except NoFit as err:
            rejected.append(f"{cell.key()}: {err}")
            continue
        start_params, advice = pasted.compute.total_params[0], pasted.advice
        assert advice is not None  # a checked growth has advice
        notes = [line for line in (advice.ceiling_line(), advice.family_note()) if line]
        return Suggestion(growth, cell, ratio, params, schedule, start=start, start_params=start_params,
                          rounded=way.rounded, notes=notes, rejected=rejected, target=name)
    if overruled:  # the evidence nearest the run's size, and what paid farther away
        return Suggestion(None, overruled[0][1], ratio, params, schedule, rejected=rejected, target=name,
                          overruled=[cell for cell, _ in overruled])
    return Suggestion(None, nearest[1] if nearest else None, ratio, params, schedule, rejected=rejected,
                      target=name)
