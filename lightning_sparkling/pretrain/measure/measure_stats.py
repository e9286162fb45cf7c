"""The statistics of a measured comparison: the speed-up at equal loss (scratch compute to reach the growth run's
final loss over the growth run's compute) and the paired Δ at equal FLOPs, per seed and as mean ± sd.

``sparkling measure`` and ``benchmarks/reproduce.py`` read their runs with these functions, so a cell means the same
whichever wrote it.

Example::

    >>> points = [(0.7e12, 4.10), (1.0e12, 4.00), (1.4e12, 3.90), (2.0e12, 3.80)]
    >>> flops, why = scratch_flops_at(points, 3.90)
    >>> round(flops / 1e12, 3), why
    (1.4, '')
    >>> scratch_flops_at(points, 3.5)
    (None, 'above')
    >>> mean_sd([1.2, 1.3])
    (1.25, 0.07071067811865482)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any


def mean_sd(values: Sequence[float]) -> tuple[float, float | None]:
    """The mean and the sample standard deviation (``None`` for one value)."""
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def scratch_flops_at(points: Sequence[tuple[float, float]], loss: float) -> tuple[float | None, str]:
    """The compute at which the scratch curve reaches ``loss``, interpolated in log-FLOPs, never extrapolated.

    Args:
        points: ``(flops, final val loss)`` of the grown shape trained from scratch at several budgets (each its own
            run and schedule).
        loss: the loss to reach (the growth run's final val loss).

    Returns:
        ``(flops, "")``, or ``(None, "above")`` when ``loss`` is below every budget's final loss (scratch needs more
        than the largest budget), ``(None, "below")`` when even the smallest budget ends below ``loss``. The first
        crossing from the smallest budget up counts (a non-monotone curve is read conservatively).
    """
    pts = sorted(points)
    if not pts:
        return None, "none"
    if pts[0][1] <= loss:
        return None, "below"
    for (f0, l0), (f1, l1) in zip(pts, pts[1:]):
        if l1 <= loss < l0 or (l1 <= loss <= l0 and l1 < l0):
            t = (l0 - loss) / (l0 - l1)
            return math.exp(math.log(f0) + t * (math.log(f1) - math.log(f0))), ""
    return None, "above"


def compare(growth: Mapping[int, dict[str, float]], scratch: Mapping[float, Mapping[int, dict[str, float]]]
            ) -> dict[str, Any]:
    """Growth against the grown shape from scratch at several budgets, per seed and over the seeds.

    Args:
        growth: per seed, the growth run's ``{"loss", "flops", "seconds"}`` (final val loss, training FLOPs, wall
            seconds of the fit).
        scratch: per budget (a multiple of the growth run's FLOPs; ``1.0`` must be there), per seed, the same.

    Returns:
        ``delta`` / ``sd`` (paired Δ of final val loss at equal FLOPs, mean and sd; ``sd`` 0.0 for one seed),
        ``seeds``, ``seeds_above``, ``speedup`` / ``speedup_sd`` (scratch FLOPs to the growth run's final loss over
        the growth run's, interpolated between budgets; ``None`` unless every seed interpolates), ``wall_speedup``
        / ``wall_speedup_sd`` (the same in wall-clock time, each scratch budget's seconds per FLOP interpolated
        alike), and ``per_seed`` (each seed's values, ``"> 2.00x"`` / ``"< 0.70x"`` outside the budgets).
    """
    if 1.0 not in scratch:
        raise ValueError(f"compare needs the scratch budget 1.0 (equal FLOPs), got budgets {sorted(scratch)}")
    per_seed: dict[int, dict[str, Any]] = {}
    deltas, speedups, walls = [], [], []
    lo, hi = min(scratch), max(scratch)
    for seed, g in sorted(growth.items()):
        runs = {b: s[seed] for b, s in scratch.items() if seed in s}
        if 1.0 not in runs:
            continue
        entry: dict[str, Any] = {"delta": g["loss"] - runs[1.0]["loss"]}
        deltas.append(entry["delta"])
        flops, why = scratch_flops_at([(r["flops"], r["loss"]) for r in runs.values()], g["loss"])
        if flops is None:
            entry["speedup"] = {"above": f"> {hi:.2f}x", "below": f"< {lo:.2f}x"}.get(why, "-")
        else:
            entry["speedup"] = flops / g["flops"]
            speedups.append(entry["speedup"])
            seconds = _seconds_at(runs, flops)
            if seconds is not None and g.get("seconds"):
                entry["wall_speedup"] = seconds / g["seconds"]
                walls.append(entry["wall_speedup"])
        per_seed[seed] = entry
    if not deltas:
        raise ValueError("compare: no seed has both a growth run and a scratch run at budget 1.0")
    delta, sd = mean_sd(deltas)
    out: dict[str, Any] = {"delta": delta, "sd": sd or 0.0, "seeds": len(deltas),
                           "seeds_above": sum(d > 0 for d in deltas), "speedup": None, "speedup_sd": None,
                           "wall_speedup": None, "wall_speedup_sd": None, "per_seed": per_seed}
    if len(speedups) == len(deltas):
        out["speedup"], sd = mean_sd(speedups)
        out["speedup_sd"] = sd or 0.0
    if walls and len(walls) == len(deltas):
        out["wall_speedup"], sd = mean_sd(walls)
        out["wall_speedup_sd"] = sd or 0.0
    return out


def _seconds_at(runs: Mapping[float, dict[str, float]], flops: float) -> float | None:
    """Wall seconds scratch takes for ``flops``: the seconds per FLOP of the budgets around it, interpolated in
    log-FLOPs (``None`` when a budget has no time)."""
    pts = sorted((r["flops"], r.get("seconds")) for r in runs.values())
    if any(s is None or s <= 0 for _, s in pts):
        return None
    for (f0, s0), (f1, s1) in zip(pts, pts[1:]):
        if f0 <= flops <= f1:
            assert s0 is not None and s1 is not None  # refused above
            t = 0.0 if f1 == f0 else (math.log(flops) - math.log(f0)) / (math.log(f1) - math.log(f0))
            return flops * math.exp(math.log(s0 / f0) + t * (math.log(s1 / f1) - math.log(s0 / f0)))
    return None
