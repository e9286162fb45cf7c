"""``sparkling plan --suggest``: the measured best growth for a run's schedule and token ratio, as a ``growth:`` block
to paste (:func:`suggest`).

Every cell of the measured map (:mod:`~lightning_sparkling.pretrain.measured`) whose growth is a size factor on the
run's own model (:data:`CATEGORY_FACTORS`: ``depth`` grows ``n_layer`` 2x, ``joint`` the hidden and MLP sizes 2x, ...;
a cell's ``factors`` where it names them, e.g. the late-shallow ``n_layer`` 4x) becomes a candidate: the run's model
grown by those factors at the cell's timing under the cell's recipe. A candidate *fits* when the cell was measured
under the run's ``train.lr_schedule``, at a token ratio within :data:`~lightning_sparkling.pretrain.measured.NEAR_RATIO`
of the run's with that growth (training tokens per final active parameter), growth paid there, and the block resolves
as a configuration of the run. The best fit (largest speed-up at equal loss, then lowest Δ) is printed with the cell's
size, token ratio and seeds and how far it is from the run; with no fit, the report says so and prints no block.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lightning_sparkling.pretrain.errors import ConfigError

__all__ = ["CATEGORY_FACTORS", "Suggestion", "suggest"]

CATEGORY_FACTORS: dict[str, dict[str, int]] = {
    "depth": {"n_layer": 2},
    "joint": {"n_embd": 2, "intermediate_size": 2},
    "hidden": {"n_embd": 2},
    "inner": {"intermediate_size": 2},
    "depth+width": {"n_layer": 2, "n_embd": 2, "intermediate_size": 2},
}
"""The growth each map category measured (the map's runs grew 2x), as factors on the run's model's sizes; an MoE
model grows ``moe_intermediate_size`` where a dense one grows ``intermediate_size``."""


@dataclass(frozen=True)
class Suggestion:
    """What ``--suggest`` found: ``growth`` the block to paste (``None``: no cell fits), ``cell`` its evidence (or the
    nearest cell of the run's schedule when none fits), ``tokens_per_param`` the run's training tokens per final
    active parameter with that growth, ``params`` the grown model's parameters (total, as the map's cells count
    them), ``schedule`` the run's, ``rejected`` fitting cells whose block the run refused (and why)."""

    growth: dict[str, Any] | None
    cell: Any
    tokens_per_param: float
    params: int
    schedule: str
    rejected: list[str] = field(default_factory=list)

    def evidence(self) -> str:
        """The cell and how far it is from the run: token ratio, timing, model size and seeds."""
        from lightning_sparkling.pretrain.measured import FAR_SIZE
        from lightning_sparkling.pretrain.measured_size import format_params

        cell = self.cell
        gap = cell.tokens_per_param / self.tokens_per_param
        ratio = (f"measured at {cell.tokens_per_param:g} tokens per parameter against this run's "
                 f"{self.tokens_per_param:.3g} with this growth ({max(gap, 1 / gap):.2f}x apart)")
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
        return f"{cell.describe()}; {ratio}; {size}; {cell.seeds} seeds{far}"

    def message(self) -> str:
        """The report ``sparkling plan --suggest`` prints: the block (YAML) and its evidence, or why there is none."""
        import yaml

        if self.growth is None:
            nearest = f" The nearest cell of this schedule: {self.evidence()}." if self.cell is not None else ""
            return (f"no measured growth fits this run: no cell of the map under train.lr_schedule {self.schedule} "
                    f"was measured near its token ratio and paid there.{nearest} To know whether growth pays "
                    "here, measure it: sparkling measure --config RUN.yaml")
        block = yaml.safe_dump({"growth": self.growth}, sort_keys=False, default_flow_style=False).rstrip()
        return (f"measured best growth for this run (train.lr_schedule {self.schedule}, "
                f"{self.tokens_per_param:.3g} training tokens per final active parameter with it): paste into the "
                f"config:\n\n{block}\n\nevidence: {self.evidence()}")


def _factors(cell: Any, config: Any) -> dict[str, int] | None:
    factors = dict(getattr(cell, "factors", None) or CATEGORY_FACTORS.get(cell.category) or {})
    if not factors or (cell.init is not None and not cell.stages):  # an experts cell: no size factor to apply
        return None
    if config.mlp_class_name == "LLaMAMoE" and "intermediate_size" in factors:
        factors["moe_intermediate_size"] = factors.pop("intermediate_size")
    return factors


def _grown(run: Any, sizes: dict[str, int], cache: dict) -> tuple[str, tuple[int, int]] | None:
    """``(map category, (active, total) parameters)`` of ``run``'s model grown to ``sizes`` (``None``: refused),
    planned once per set of sizes (``cache``)."""
    from lightning_sparkling.growth.compute import count_params
    from lightning_sparkling.growth.plan import GrowthError, plan_growth
    from lightning_sparkling.growth.stage import GrowthStage
    from lightning_sparkling.pretrain.measured import classify_category

    key = tuple(sorted(sizes.items()))
    if key not in cache:
        try:
            stage = GrowthStage(0, recipe="paper", **sizes)
            grown = plan_growth(run.model_config, stage, tied_embeddings=run.train.tie_embeddings).new_config
            cache[key] = classify_category([stage]), count_params(grown, tie_embeddings=run.train.tie_embeddings)
        except (ValueError, GrowthError):
            cache[key] = None
    return cache[key]


def _candidate(cell: Any, run: Any, cache: dict) -> tuple[dict[str, Any], int, int] | None:
    """The growth block of ``cell`` on ``run``'s model and the grown model's active and total parameters (``None``:
    the cell's growth does not apply to this model)."""
    factors = _factors(cell, run.model_config)
    if factors is None:
        return None
    sizes = {key: getattr(run.model_config, key) * factor for key, factor in factors.items()}
    grown = _grown(run, sizes, cache)
    if grown is None or grown[0] != cell.category:
        return None
    block = {"recipe": cell.recipe, "stages": _stages(cell, run, sizes)}
    return block, *grown[1]


def _stages(cell: Any, run: Any, final: dict[str, int]) -> list[dict[str, Any]]:
    """The ``growth.stages`` of ``cell`` on ``run``'s model: one stage at the cell's timing to the ``final`` sizes,
    or a multi-stage cell's schedule (each entry's factors on the sizes before it, its own keys kept), each with a
    re-warmup that fits before the next growth (at most 250 steps)."""
    entries = cell.stages or ({"at_fraction": cell.growth_at, "factors": cell.factors or {}},)
    fractions = [e["at_fraction"] for e in entries] + [1.0]
    sizes = {key: getattr(run.model_config, key) for key in final}
    stages = []
    for k, entry in enumerate(entries):
        if cell.stages:
            sizes = {key: value * entry["factors"].get(key, 1) for key, value in sizes.items()}
        keys = {key: value for key, value in entry.items() if key not in ("at_fraction", "factors")}
        window = math.floor((fractions[k + 1] - fractions[k]) * run.steps) - 1
        stages.append({"at_fraction": entry["at_fraction"], **(sizes if cell.stages else final), **keys,
                       "rewarmup_steps": max(0, min(250, window // 2))})
    return stages


def _resolves(ns: Any, growth: dict[str, Any]) -> str | None:
    """``None`` when the run's configuration with ``growth`` resolves, else the refusal."""
    from lightning_sparkling.pretrain.config import resolve

    candidate = copy.deepcopy(ns)
    seed = getattr(getattr(ns, "growth", None), "seed", 0)
    try:
        candidate.growth = {**growth, "seed": seed}
        candidate.resume = False
        resolve(candidate)
    except (ConfigError, ValueError) as err:
        return str(err)
    return None


def _rank(cell: Any) -> tuple[float, float]:
    return (cell.speedup if cell.speedup is not None else 1.0, -cell.delta)


def suggest(ns: Any, run: Any, cells: Sequence[Any] | None = None) -> Suggestion:
    """The measured best growth for ``run`` (its parsed namespace ``ns``, to check the block resolves).

    Args:
        ns: the parsed configuration (``parse(...)[0]``).
        run: the resolved run (its model, steps, tokens, schedule).
        cells: the map (default: the package's, :func:`~lightning_sparkling.pretrain.measured.load_map`; ``plan
            --map FILE`` adds a ``measure.json``'s).

    Example::

        sparkling plan --config examples/depth_2x.yaml --suggest
    """
    from lightning_sparkling.growth.compute import count_params
    from lightning_sparkling.pretrain.measured import NEAR_RATIO, load_map

    cells = load_map() if cells is None else cells
    schedule = run.train.lr_schedule
    fits, nearest, rejected, cache = [], None, [], {}
    for cell in cells:
        if cell.schedule != schedule:
            continue
        found = _candidate(cell, run, cache)
        if found is None:
            continue
        block, active, params = found
        ratio = run.total_tokens / active
        gap = abs(math.log(cell.tokens_per_param / ratio))
        if nearest is None or gap < nearest[0]:
            nearest = (gap, cell, ratio, params)
        if gap <= math.log(NEAR_RATIO) + 1e-9 and cell.pays:
            fits.append((cell, block, ratio, params))
    for cell, block, ratio, params in sorted(fits, key=lambda fit: _rank(fit[0]), reverse=True):
        refusal = _resolves(ns, block)
        if refusal is None:
            return Suggestion(block, cell, ratio, params, schedule, rejected)
        rejected.append(f"{cell.key()}: {refusal}")
    if nearest is None:
        active, params = count_params(run.model_config, tie_embeddings=run.train.tie_embeddings)
        return Suggestion(None, None, run.total_tokens / active, params, schedule, rejected)
    _, cell, ratio, params = nearest
    return Suggestion(None, cell, ratio, params, schedule, rejected)
