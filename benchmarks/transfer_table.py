"""Issue 54's table: the 20+ tokens-per-parameter depth schedules by size, embedding share and block family, each
with its ceiling and the measured fraction of it, read from what ``depth_ladder.py --report-only`` wrote.

    python benchmarks/transfer_table.py          # results/transfer.{md,json}

The ceiling is the speed-up the schedule would reach if the grown run matched scratch token for token: the
full-length scratch run's FLOPs over the growth run's (6 N D, as the map counts); the fraction is each seed's
speed-up at equal loss over it (above 100%: the grown run beat the same-steps scratch run). A seed whose growth run
ended below every rung of its ladder has no speed-up (``above``), nor a fraction.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
RESULTS = HERE / "results"

#: (shape, the results file's tag, candidates) in the table's order: size, then share, then family
ROWS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("mini-sp", "_mini-sp", ("stages-248-copy",)),
    ("quick-sp", "_quick-sp", ("stages-248-copy", "stages-248")),
    ("quick", "", ("stages-248-copy", "stages-248")),
    ("cpu-1m-sp", "_cpu-1m-sp", ("stages-248-copy",)),
    ("lowemb-sp", "_lowemb-sp", ("stages-248-copy",)),
    ("lowemb12-sp", "_lowemb12-sp", ("stages-248-copy",)),
    ("neox-sp", "_neox-sp", ("stages-248-copy", "stages-248")),
)


def _mean_sd(values: list[float]) -> tuple[float, float | None]:
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def _shape_size(shape: str, candidate: str) -> dict[str, Any]:
    """The grown model's parameters, embedding share and block family (the map's size fields)."""
    import depth_ladder

    from lightning_sparkling.pretrain.advice.measured_axes import block_family
    from lightning_sparkling.pretrain.advice.measured_size import cell_size
    from lightning_sparkling.pretrain.advice.run_plan import plan_run

    final = plan_run(depth_ladder.candidate_run(shape, candidate), advise=False).final_config
    size = cell_size(final, device="cpu", precision="32-true", corpus=depth_ladder.SHAPES[shape].source)
    return {"params": size["params"], "embedding_share": size["embedding_share"], "arch": block_family(final),
            "corpus": size["corpus"]}


def rows() -> list[dict[str, Any]]:
    out = []
    for shape, tag, candidates in ROWS:
        path = RESULTS / f"depth_ladder{tag}.json"
        if not path.exists():
            continue
        reported = {r["candidate"]: r for r in json.loads(path.read_text())}
        for candidate in candidates:
            r = reported.get(candidate)
            if r is None:
                continue
            ceiling = 1 / r["flops_vs_full"]
            fractions = [s["speedup"] / ceiling for s in r["per_seed"] if s["speedup"]]
            out.append({"shape": shape, "candidate": candidate, **_shape_size(shape, candidate),
                        "seeds": r["seeds"], "ceiling": ceiling, "speedup": r["speedup"],
                        "per_seed": [s["speedup"] or s["outside"] for s in r["per_seed"]],
                        "fraction": _mean_sd(fractions) if len(fractions) == r["seeds"] else None,
                        "per_seed_fraction": [s["speedup"] / ceiling if s["speedup"] else s["outside"]
                                              for s in r["per_seed"]],
                        "delta": r["delta"], "seeds_above": sum(s["delta"] > 0 for s in r["per_seed"]),
                        "residual_ratio": r["residual_ratio"], "hidden_ratio": r["hidden_ratio"]})
    return out


def _sd(sd: float | None, fmt: str) -> str:
    """`` ± sd`` over seeds, nothing for one seed (no spread to give)."""
    return "" if sd is None else " ± " + fmt.format(sd)


def table(rs: list[dict[str, Any]]) -> str:
    lines = ["| shape | family | grown model | embedding + head | corpus | schedule | seeds | ceiling | speed-up at "
             "equal loss | per seed | fraction of the ceiling | Δ at equal FLOPs | seeds above | residual / hidden "
             "RMS vs scratch |", "|" + "---|" * 14]
    for r in rs:
        sp = "-" if r["speedup"] is None else f"{r['speedup'][0]:.2f}x" + _sd(r["speedup"][1], "{:.2f}")
        per = ", ".join(f"{s:.2f}x" if isinstance(s, float) else s for s in r["per_seed"])
        fr = "-" if r["fraction"] is None else f"{100 * r['fraction'][0]:.0f}%" + _sd(
            None if r["fraction"][1] is None else 100 * r["fraction"][1], "{:.0f}")
        if r["fraction"] is None:
            fr = ", ".join(f"{100 * f:.0f}%" if isinstance(f, float) else f for f in r["per_seed_fraction"])
        dl = f"{r['delta'][0]:+.3f}" + _sd(r["delta"][1], "{:.3f}")
        init = "copy" if r["candidate"].endswith("-copy") else "copy-zero"
        lines.append(f"| `{r['shape']}` | {r['arch']} | {r['params'] / 1e6:.2f}M | {100 * r['embedding_share']:.1f}% | "
                     f"{r['corpus']} | 2 -> 4 -> 8, `{init}` | {r['seeds']} | {r['ceiling']:.2f}x | {sp} | {per} | "
                     f"{fr} | {dl} | {r['seeds_above']}/{r['seeds']} | {r['residual_ratio']:.2f} / "
                     f"{r['hidden_ratio']:.2f} |")
    return "\n".join(lines)


def final_losses() -> str:
    """Every finished run's final val loss by shape (``depth_ladder.py``'s ``<tag>_runs.json``), seeds in order."""
    lines = []
    for shape, tag, candidates in ROWS:
        path = RESULTS / f"depth_ladder{tag}_runs.json"
        if not path.exists():
            continue
        by_run: dict[str, list[str]] = {}
        for r in json.loads(path.read_text()):
            name, seed = r["run"].replace("scratch/", "scratch ").rsplit("/seed", 1)
            if not (name in candidates or name.startswith("scratch")):
                continue
            by_run.setdefault(name, []).append(f"{r['val_loss']:.4f} (s{seed})")
        order = sorted(by_run, key=lambda n: (n.startswith("scratch"), n))
        lines.append(f"- `{shape}`: " + "; ".join(f"{n} {', '.join(v)}" for n, v in ((n, by_run[n]) for n in order)))
    return "\n".join(lines)


def main() -> int:
    rs = rows()
    text = table(rs) + "\n\nFinal val loss of every run:\n\n" + final_losses()
    print(text)
    (RESULTS / "transfer.md").write_text(text + "\n")
    (RESULTS / "transfer.json").write_text(json.dumps(rs, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
