"""Growth schedules and the model they end at: a measured cell's schedule toward a *target* model (the model a run
starts at and the stages that end exactly at the target: :func:`toward`, what ``sparkling plan --suggest`` prints),
and a run's schedule as a cell records it (:func:`run_schedule`, what ``sparkling measure`` writes).

A cell's growth is factors on sizes (``{"n_layer": 4}``; a multi-stage cell, each stage's factors on the sizes before
it), or an experts change (dense -> MoE, more experts). :func:`toward` divides the factors out of the target's sizes,
last stage first; a size a factor does not divide is rounded, and the rounding is said, never silent; a factor that
leaves less than one of a size does not fit.

Example::

    >>> from litgpt import Config
    >>> from lightning_sparkling.pretrain.advice.measured import load_map
    >>> target = Config(n_layer=8, n_embd=32, n_head=2, head_size=16, intermediate_size=128, vocab_size=1024,
    ...                 padded_vocab_size=1024, mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm", bias=False)
    >>> cell = next(c for c in load_map() if c.stages and c.init == "copy")
    >>> way = toward(target, cell, steps=4000)
    >>> way.start, [(s["at_fraction"], s["n_layer"], s["depth_init"]) for s in way.stages], way.rounded
    ({'n_layer': 2}, [(0.5, 4, 'copy'), (0.75, 8, 'copy')], [])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CATEGORY_FACTORS", "NoFit", "Toward", "cell_entries", "run_schedule", "toward"]

CATEGORY_FACTORS: dict[str, dict[str, int]] = {
    "depth": {"n_layer": 2},
    "joint": {"n_embd": 2, "intermediate_size": 2},
    "hidden": {"n_embd": 2},
    "inner": {"intermediate_size": 2},
    "depth+width": {"n_layer": 2, "n_embd": 2, "intermediate_size": 2},
    "hidden+heads": {"n_embd": 2, "n_head": 2, "n_query_groups": 2},
}
"""The growth each map category measured where a cell names no ``factors`` (the map's runs grew 2x), as factors on
the sizes of the model it grew from; an MoE model grows ``moe_intermediate_size`` where a dense one grows
``intermediate_size``."""

EXPERTS_CATEGORIES = ("upcycle", "experts", "experts+topk")
MAX_REWARMUP = 250
"""The longest re-warmup a suggested stage gets (the recipe's default); shorter where the next growth comes first."""


class NoFit(ValueError):
    """A cell's schedule cannot end at the target model (the message says which size and why)."""


@dataclass(frozen=True)
class Toward:
    """A cell's schedule toward a target: ``start`` the sizes of the model to start at that differ from the target's
    (``model_config`` keys), ``stages`` the ``growth.stages`` entries (``at_fraction``, the sizes after the stage,
    the cell's own keys, ``rewarmup_steps``), ``rounded`` a line per size a factor did not divide."""

    start: dict[str, Any]
    stages: list[dict[str, Any]]
    rounded: list[str] = field(default_factory=list)


def cell_entries(cell: Any) -> list[dict[str, Any]]:
    """The growths of a size-factor cell, one entry each: ``at_fraction``, ``factors`` (on the sizes before it) and
    the cell's own stage keys (``depth_init``). A one-growth cell without ``factors`` grew its category's 2x
    (:data:`CATEGORY_FACTORS`).

    Raises:
        NoFit: for a cell with no size factors (an experts cell).
    """
    if cell.stages:
        return [dict(entry) for entry in cell.stages]
    factors = cell.factors or CATEGORY_FACTORS.get(cell.category)
    if not factors:
        raise NoFit(f"the {cell.category} cell grows no size by a factor")
    entry: dict[str, Any] = {"at_fraction": cell.growth_at, "factors": dict(factors)}
    if cell.category == "depth" and cell.init is not None:
        entry["depth_init"] = cell.init
    return [entry]


def _divide(size: str, value: int, factor: float, rounded: list[str]) -> int:
    """``value / factor`` as a whole size; a rounding appended to ``rounded``; :class:`NoFit` below 1 or not
    smaller."""
    exact = value / factor
    whole = max(1, math.floor(exact + 0.5))
    if abs(exact - whole) > 1e-3:  # a recorded factor has 4 decimals (4/3 is 1.3333)
        rounded.append(f"{size} {value} / {factor:g} = {exact:g} -> {whole}")
    if exact < 1 or whole >= value:
        raise NoFit(f"its {factor:g}x growth of {size} does not fit {size} {value} (the model before it would have "
                    f"{exact:g})")
    return whole


def _rewarmup(fractions: Sequence[float], k: int, steps: int) -> int:
    """Half the steps to the next growth (or the end), at most :data:`MAX_REWARMUP`."""
    window = math.floor((fractions[k + 1] - fractions[k]) * steps) - 1
    return max(0, min(MAX_REWARMUP, window // 2))


def toward(target: Any, cell: Any, *, steps: int) -> Toward:
    """The schedule of ``cell`` that ends at ``target`` (a litgpt ``Config``) in a run of ``steps`` steps.

    Raises:
        NoFit: the cell's growth does not apply to the target (a size its factors leave below one, an experts cell on
            a dense target, ...).
    """
    if cell.category in EXPERTS_CATEGORIES:
        return _toward_experts(target, cell, steps)
    entries = cell_entries(cell)
    moe = target.mlp_class_name == "LLaMAMoE"
    sizes = {}
    for entry in entries:
        for key in entry["factors"]:
            key = "moe_intermediate_size" if moe and key == "intermediate_size" else key
            sizes[key] = getattr(target, key)
    after: list[dict[str, int]] = []
    rounded: list[str] = []
    for entry in reversed(entries):  # the last growth ends at the target; divide its factors out, then the one before
        after.insert(0, dict(sizes))
        for key, factor in entry["factors"].items():
            key = "moe_intermediate_size" if moe and key == "intermediate_size" else key
            sizes[key] = _divide(key, sizes[key], factor, rounded)
    start = {key: value for key, value in sizes.items() if value != getattr(target, key)}
    fractions = [e["at_fraction"] for e in entries] + [1.0]
    stages = []
    for k, (entry, grown) in enumerate(zip(entries, after)):
        before = sizes if k == 0 else after[k - 1]
        keys = {key: value for key, value in entry.items() if key not in ("at_fraction", "factors")}
        changed = {key: value for key, value in grown.items() if value != before[key]}
        stages.append({"at_fraction": entry["at_fraction"], **changed, **keys,
                       "rewarmup_steps": _rewarmup(fractions, k, steps)})
    return Toward(start, stages, rounded)


def _toward_experts(target: Any, cell: Any, steps: int) -> Toward:
    """An experts cell's schedule: dense -> the target's MoE (``upcycle``), or half the target's experts (and top-K,
    ``experts+topk``) -> all of them."""
    if target.mlp_class_name != "LLaMAMoE":
        raise NoFit(f"the {cell.category} cell grows a mixture of experts and this run's model is dense "
                    f"({target.mlp_class_name})")
    rewarmup = _rewarmup([cell.growth_at, 1.0], 0, steps)
    stage: dict[str, Any] = {"at_fraction": cell.growth_at, "n_expert": target.n_expert,
                             "expert_init": cell.init or "copy", "rewarmup_steps": rewarmup}
    rounded: list[str] = []
    if cell.category == "upcycle":
        start = {"mlp_class_name": "LLaMAMLP", "intermediate_size": target.moe_intermediate_size, "n_expert": 0,
                 "n_expert_per_token": 0}
        stage = {"at_fraction": cell.growth_at, "mlp_class_name": "LLaMAMoE", "n_expert": target.n_expert,
                 "n_expert_per_token": target.n_expert_per_token, **{k: v for k, v in stage.items()
                                                                     if k not in ("at_fraction", "n_expert")}}
        return Toward(start, [stage], rounded)
    start = {"n_expert": _divide("n_expert", target.n_expert, 2, rounded)}
    if cell.category == "experts+topk":
        start["n_expert_per_token"] = _divide("n_expert_per_token", target.n_expert_per_token, 2, rounded)
        stage["n_expert_per_token"] = target.n_expert_per_token
    return Toward(start, [stage], rounded)


def run_schedule(configs: Sequence[Any], stages: Sequence[Any], total_steps: int) -> dict[str, Any]:
    """How a run grew, as a cell records it: ``factors`` (each size's final over its first value, where whole) and,
    for several growths, ``stages`` (each growth's ``at_fraction``, its ``factors`` on the sizes before it, and its
    ``depth_init`` where that is not ``copy-zero``), from the run's phase ``configs`` (before growth, after each
    stage) and resolved ``stages``.

    Example::

        >>> from litgpt import Config
        >>> from lightning_sparkling.growth.stage import GrowthStage
        >>> c = lambda n: Config(n_layer=n, n_embd=32, n_head=2, intermediate_size=64, vocab_size=64,
        ...                      padded_vocab_size=64, mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm")
        >>> stages = [GrowthStage(50, n_layer=4, depth_init="copy"), GrowthStage(75, n_layer=8, depth_init="copy")]
        >>> run_schedule([c(2), c(4), c(8)], stages, 100)["stages"]
        [{'at_fraction': 0.5, 'factors': {'n_layer': 2}, 'depth_init': 'copy'}, \
{'at_fraction': 0.75, 'factors': {'n_layer': 2}, 'depth_init': 'copy'}]
    """
    from lightning_sparkling.growth.plan import size_changes

    def factors(a: Any, b: Any) -> dict[str, int | float]:
        out = {}
        for key, (old, new) in size_changes(a, b).items():
            if not old:  # a size the model did not have (experts of a dense model): no factor
                continue
            ratio = new / old
            out[key] = round(ratio) if abs(ratio - round(ratio)) < 1e-9 else round(ratio, 4)
        return out

    record: dict[str, Any] = {}
    whole = factors(configs[0], configs[-1])
    if whole:
        record["factors"] = whole
    if len(stages) > 1:
        entries = []
        for stage, a, b in zip(stages, configs[:-1], configs[1:]):
            entry: dict[str, Any] = {"at_fraction": round(stage.at_step / total_steps, 4), "factors": factors(a, b)}
            if (stage.n_layer is not None or stage.depth_map is not None) and stage.depth_init != "copy-zero":
                entry["depth_init"] = stage.depth_init
            entries.append(entry)
        record["stages"] = entries
    return record
