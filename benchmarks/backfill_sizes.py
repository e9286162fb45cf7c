"""Issue 38: give every cell of the measured map the size it was measured at, computed from the ``reproduce.py``
configuration its runs trained (``params``, ``active_params``, ``embedding_share``, ``device``, ``precision``,
``corpus``), and (issue 54) its block family (``arch``) and its schedule's ``ceiling``; nothing is typed in but which
size and axis a cell's section names.

    python benchmarks/backfill_sizes.py            # rewrite lightning_sparkling/pretrain/advice/measured.json in place
    python benchmarks/backfill_sizes.py --check    # exit 1 when a cell's stored size differs from the computed one

A cell's size preset is the one its ``where`` names (``(cpu ...)``, ``cpu size``, ``(mini ...)``, else ``quick``: the
``x4`` / ``x8`` token ratios train the same model longer); its grown shape is the reproduce axis of its map axis and
timing (:func:`reproduce_axis`). The one cell trained on a GPU says so in ``where`` (``on one H100``): its device is
the GPU the session recorded in docs/BENCHMARKS.md ("One NVIDIA H100 80GB HBM3").
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
MAP = HERE.parent / "lightning_sparkling" / "pretrain" / "advice" / "measured.json"
H100 = "NVIDIA H100 80GB HBM3"


@functools.cache
def _parsed(config_json: str) -> Any:
    """The resolved run of a ``reproduce.py`` configuration (as JSON), parsed once: many cells share a grown shape."""
    from lightning_sparkling.pretrain.cli import parse

    path = Path("/tmp") / f"backfill_{abs(hash(config_json))}.yaml"
    path.write_text(config_json)
    return parse(["--config", str(path)], "plan")[1]


def run_of(config: dict[str, Any]) -> Any:
    """The resolved run of ``config`` (its ``out_dir`` never written)."""
    return _parsed(json.dumps({**config, "out_dir": "/tmp/backfill_unused"}, sort_keys=True))


LADDER = "Evidence that transfers ("
"""The ``where`` of a ``depth_ladder.py`` cell (issue 54): ``Evidence that transfers (<shape>, <candidate>)``."""


def ladder_run(cell: dict[str, Any]) -> Any:
    """The growth run of a ``depth_ladder.py`` cell (its shape and candidate, as its ``where`` names them), or
    ``None`` for a ``reproduce.py`` cell."""
    if not cell["where"].startswith(LADDER):
        return None
    import depth_ladder

    shape, candidate = cell["where"][len(LADDER):].rstrip(")").split(", ")
    return depth_ladder.candidate_run(shape, candidate)


def size_name(where: str) -> str:
    """The ``reproduce.py`` size preset a cell's section names."""
    for name in ("cpu-1m", "mini"):
        if f"({name}" in where:
            return name
    return "cpu" if "(cpu" in where or "cpu size" in where else "quick"


def reproduce_axis(axis: str, growth_at: float) -> tuple[str, str]:
    """``(reproduce axis, from-scratch row)`` whose grown shape is the map cell's."""
    if axis == "depth":
        return ("late-shallow" if growth_at >= 0.8 else "depth"), "scratch large (iso-token)"
    if axis == "upcycle":
        return "upcycle-25", "scratch large (iso-token)"
    if axis == "experts":
        return "experts-2x", "scratch large (iso-token)"
    if axis == "experts+topk":
        return "experts-2x", "scratch large K=4 (iso-FLOPs)"
    return axis, "scratch large (iso-token)"


def computed_size(cell: dict[str, Any]) -> dict[str, Any]:
    """The size fields of ``cell`` from the configuration of its grown shape's scratch run."""
    import reproduce as repro

    from lightning_sparkling.pretrain.advice.measured_size import cell_size
    from lightning_sparkling.pretrain.advice.run_plan import plan_run

    ladder = ladder_run(cell)
    if ladder is not None:  # the grown model of the ladder's growth run, on the ladder's corpus
        return cell_size(plan_run(ladder, advise=False).final_config, device="cpu", precision=ladder.precision,
                         corpus=ladder.data.source, tie_embeddings=ladder.train.tie_embeddings)
    size = repro.resolve_size(size_name(cell["where"]))
    axis, row = reproduce_axis(cell["axis"], cell["growth_at"])
    config = repro.build_config(size, axis, repro.ROWS[row], seed=1)
    run = run_of(config)
    gpu = "on one H100" in cell["where"]
    return cell_size(run.model_config, device=H100 if gpu else "cpu", precision=config["precision"],
                     corpus=config["data"]["source"], tie_embeddings=run.train.tie_embeddings)


def computed_schedule(cell: dict[str, Any]) -> dict[str, Any]:
    """The schedule fields of ``cell`` (issue 54): ``arch`` (the grown model's block family) and ``ceiling`` (the
    speed-up of the cell's schedule if the grown run matched scratch token for token, 6 N D per phase), and for a
    two-stage cell its ``stages``, from its ``reproduce.py`` growth run."""
    import dataclasses

    import reproduce as repro

    from lightning_sparkling.growth.compute import estimate_compute
    from lightning_sparkling.growth.stage import GrowthStage
    from lightning_sparkling.pretrain.advice.run_plan import plan_run
    from lightning_sparkling.pretrain.measure.command import schedule_record
    from lightning_sparkling.pretrain.advice.measured import MeasuredCell
    from lightning_sparkling.pretrain.advice.measured_axes import block_family
    from lightning_sparkling.pretrain.advice.target import toward

    size = repro.resolve_size(size_name(cell["where"]))
    out: dict[str, Any] = {}
    if cell["axis"] == "two-stage" and not cell.get("stages"):
        growth = run_of(repro.build_config(size, "two-stage", repro.ROWS["SPARKLING"], seed=1))
        out["stages"] = schedule_record(plan_run(growth, advise=False))["stages"]
    ladder = ladder_run(cell)
    if ladder is not None:
        grown = plan_run(ladder, advise=False).final_config
    else:
        axis, row = reproduce_axis(cell["axis"], cell["growth_at"])
        grown = run_of(repro.build_config(size, axis, repro.ROWS[row], seed=1)).model_config
    measured = MeasuredCell.from_json({**cell, **out})
    way = toward(grown, measured, steps=1000)
    stages = [GrowthStage.from_keys(**{**s, "recipe": "paper"}).resolved(1000) for s in way.stages]
    est = estimate_compute(dataclasses.replace(grown, **way.start), stages, total_steps=1000, tokens_per_step=1)
    return {**out, "arch": block_family(grown), "ceiling": round(est.ceiling, 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only, write nothing")
    parser.add_argument("--map", type=Path, default=MAP, help=f"the map to fill (default {MAP})")
    args = parser.parse_args(argv)
    data = json.loads(args.map.read_text(encoding="utf-8"))
    differ = 0
    for cell in data["cells"]:
        size = {**computed_size(cell), **computed_schedule(cell)}
        if any(cell.get(k) != v for k, v in size.items()):
            differ += 1
        cell.update(size)
    if args.check:
        print(f"{differ} of {len(data['cells'])} cells differ from their computed size")
        return 1 if differ else 0
    import reproduce as repro

    lines = ",\n".join("    " + repro.format_cell(cell) for cell in data["cells"])
    about = json.dumps(data["about"], ensure_ascii=False)
    args.map.write_text(f'{{\n  "about": {about},\n  "cells": [\n{lines}\n  ]\n}}\n', encoding="utf-8")
    print(f"{len(data['cells'])} cells in {args.map}, {differ} given their size")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
