"""The grid's statistics and tables: per-row mean ± sd over seeds, paired differences against the reference, the
markdown tables and the plots."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path


from lightning_sparkling.pretrain.measure.measure_stats import mean_sd  # the engine's statistics


from .sizes import HERE, slug
from .rows import ISO_FLOPS, ROWS, reference
from .grid import cumulative_flops, read_curve, read_symmetry


# ------------------------------------------------------------------------------------------------------------ stats
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


def paired_diff(seeds: dict, ref: dict) -> dict | None:
    """The per-seed differences ``seeds[s] - ref[s]`` over the seeds both have: ``{n, mean, sd, ci95 (half-width of
    the 95% t-interval), per_seed, wins (seeds where the row ended above ref)}``, or ``None`` with no common seed."""
    paired = [seeds[s] - ref[s] for s in seeds if s in ref]
    if not paired:
        return None
    m, sd = mean_sd(paired)
    half = _T975.get(len(paired) - 1, 1.96) * sd / math.sqrt(len(paired)) if sd is not None else None
    return {"n": len(paired), "mean": m, "sd": sd, "ci95": half, "per_seed": paired,
            "wins": sum(d > 0 for d in paired)}


def collect(cells: list[dict]) -> dict:
    """Per axis and row: per-seed final val loss, curves, mean/sd, and the paired difference to SPARKLING."""
    table: dict[str, dict[str, dict]] = {}
    for cell in cells:
        run_dir = Path(cell["run_dir"])
        entry = table.setdefault(cell["axis"], {}).setdefault(cell["row"], {
            "note": cell["note"], "compute": cell["compute"], "seeds": {}, "curves": {}, "failed": [], "not_run": []})
        summary_path = run_dir / "summary.json"
        if not summary_path.is_file():
            entry["not_run"].append(cell["seed"])
            continue
        summary = json.loads(summary_path.read_text()) if summary_path.is_file() else {}
        if summary.get("status", "missing") != "completed" or summary.get("val_loss") is None:
            entry["failed"].append(cell["seed"])
            continue
        entry["seeds"][cell["seed"]] = summary["val_loss"]
        entry["curves"][cell["seed"]] = read_curve(run_dir, cell["compute"])
        entry.setdefault("symmetry", {})[cell["seed"]] = read_symmetry(run_dir)
        entry.setdefault("wall_s", []).append(summary.get("wall_clock_seconds"))
        entry["run_dir"] = entry.get("run_dir") or str(run_dir.parent)
    for axis, rows in table.items():
        for entry in rows.values():
            vals = list(entry["seeds"].values())
            if vals:
                entry["mean"], entry["sd"] = mean_sd(vals)
            for key, name in (("diff", reference(axis)), ("diff_iso_flops", ISO_FLOPS)):
                ref = rows.get(name, {}).get("seeds", {})
                if entry["seeds"] is not ref:
                    diff = paired_diff(entry["seeds"], ref)
                    if diff:
                        entry[key] = diff
            sym = [v for per_seed in entry.get("symmetry", {}).values() for v in per_seed.values()]
            by_axis: dict[str, list[float]] = {}
            for per_seed in entry.get("symmetry", {}).values():
                for tag, v in per_seed.items():
                    by_axis.setdefault(tag.split("/")[-1], []).append(v)
            if sym:
                entry["symmetry_end"] = {axis: sum(v) / len(v) for axis, v in by_axis.items()}
    return table


# ------------------------------------------------------------------------------------------------------------ report
def fmt(x: float | None, p: int = 3) -> str:
    return "-" if x is None else f"{x:.{p}f}"


def markdown(size_name: str, table: dict, refused: list[dict], seeds: list[int], wall: float | None) -> str:
    lines = [f"### `--size {size_name}`: final validation loss, {len(seeds)} seeds ({', '.join(map(str, seeds))})", ""]
    runs = {e.get("run_dir"): sum(w for w in e.get("wall_s", []) if w) for rows in table.values()
            for e in rows.values()}
    spent = f"sum of the runs' wall-clock (summary.json): {sum(runs.values()) / 60:.1f} min"
    lines.append(f"Grid wall-clock of this invocation: {wall / 60:.1f} min; {spent}." if wall is not None
                 else f"{spent[0].upper()}{spent[1:]}.")
    lines.append("")
    for axis, rows in table.items():
        ref_name = reference(axis)
        large = next((e for n, e in rows.items() if n.startswith("scratch large (iso-token)")), None)
        ref_flops = large["compute"]["flops"] if large else None
        tokens = None
        if large:
            c = large["compute"]
            tokens = c["steps"] * c["tokens_per_step"]
            ratio = tokens / c["total_params"][-1]
            lines.append(f"**{axis}**: {c['steps']} steps x {c['tokens_per_step']} tokens = {tokens:,} tokens; grown "
                         f"shape {c['total_params'][-1]:,} parameters ({ratio:.3g} tokens per parameter; the paper: "
                         f"~100 per active parameter).")
        elif any(n.startswith("scratch large") for n in rows):
            c = next(e for n, e in rows.items() if n.startswith("scratch large"))["compute"]
            lines.append(f"**{axis}**: {c['tokens_per_step']} tokens per step; grown shape {c['total_params'][-1]:,} "
                         "parameters (no iso-token row in this grid)")
        else:
            lines.append(f"**{axis}** (no iso-token row in this grid)")
        lines.append("")
        lines.append("| row | parameters | steps | FLOPs (x iso-token scratch) | val loss mean ± sd | "
                     f"Δ vs {ref_name} (paired mean ± sd, 95% CI) | row worse in | Δ vs iso-FLOPs scratch "
                     "(paired mean ± sd) | copies' cosine at the end | per seed |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|")
        for name, e in sorted(rows.items(), key=lambda kv: list(ROWS).index(kv[0])):
            c = e["compute"]
            params = " -> ".join(f"{p / 1e3:.0f}k" for p in c["total_params"])
            rel = f"{c['flops']:.3g} ({c['flops'] / ref_flops:.2f})" if ref_flops else f"{c['flops']:.3g}"
            loss = f"{fmt(e.get('mean'))} ± {fmt(e.get('sd'))} (n={len(e['seeds'])})" if e["seeds"] else "not run"
            d = e.get("diff")
            diff = "—" if name == ref_name else ("-" if not d else
                                                   f"{d['mean']:+.3f} ± {fmt(d['sd'])} (± {fmt(d['ci95'])})")
            wins = "" if name == ref_name or not d else f"{d['wins']}/{d['n']}"
            per = ", ".join(f"{v:.3f}" for _, v in sorted(e["seeds"].items()))
            if e["failed"]:
                per += f" (failed: seeds {e['failed']})"
            if e.get("not_run"):
                per += f" (not run: seeds {e['not_run']})"
            di = e.get("diff_iso_flops")
            iso = "—" if name == ISO_FLOPS else ("-" if not di else f"{di['mean']:+.3f} ± {fmt(di['sd'])} "
                                                                     f"({di['wins']}/{di['n']} above)")
            sym = ", ".join(f"{axis} {v:.2f}" for axis, v in sorted(e.get("symmetry_end", {}).items())) or "-"
            lines.append(f"| {name} | {params} | {c['steps']} | {rel} | {loss} | {diff} | {wins} | {iso} | {sym} "
                         f"| {per} |")
        lines.append("")
    if refused:
        lines.append("Rows not available in this version (the installed package refused their keys):")
        lines.append("")
        seen = set()
        for r in refused:
            if (r["row"], r["why"]) in seen:
                continue
            seen.add((r["row"], r["why"]))
            lines.append(f"- {r['row']} ({r['axis']}): {r['why']}")
        lines.append("")
    return "\n".join(lines)


def published_path(path: Path | str) -> str:
    """``path`` relative to the repository when it lies inside it (what the committed JSON records), else as is."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(HERE.parent))
    except ValueError:
        return str(path)


def _plot_axis(axes, axis: str, rows: dict, colors) -> None:
    """Mean validation loss over seeds of every row of one axis, against tokens (``axes[0]``) and FLOPs."""
    ymax = None
    for index, (name, e) in enumerate(rows.items()):
        curves = [c for c in e["curves"].values() if c]
        if not curves:
            continue
        n = min(len(c) for c in curves)
        xs_t = [curves[0][i]["tokens"] for i in range(n)]
        xs_f = [curves[0][i]["flops"] for i in range(n)]
        ys = [statistics.fmean(c[i]["val_loss"] for c in curves) for i in range(n)]
        style = "-" if "stage" in ROWS[name] else "--"
        label = f"{name} ({fmt(e.get('mean'))})"
        color = colors[index % len(colors)]
        axes[0].plot(xs_t, ys, style, marker=".", color=color, label=label)
        axes[1].plot(xs_f, ys, style, marker=".", color=color, label=label)
        ymax = max(ymax or 0, ys[0])  # the first evaluation: a growth spike above it is clipped
        if name == reference(axis) or (name == ISO_FLOPS and not any(n == reference(axis) for n in rows)):
            c = e["compute"] if name != ISO_FLOPS else next(
                (x["compute"] for n, x in rows.items() if "stage" in ROWS[n]), e["compute"])
            for s in c["growth_steps"]:
                axes[0].axvline(s * c["tokens_per_step"], color="gray", ls=":", lw=1)
                axes[1].axvline(cumulative_flops(c, s), color="gray", ls=":", lw=1)
    for ax, xl in zip(axes, ("tokens", "training FLOPs (6 N D)")):
        ax.set_xlabel(xl)
        ax.set_ylabel("validation loss (mean over seeds)")
        ax.grid(alpha=0.3)
        if ymax:
            ax.set_ylim(top=ymax)
    if axes[1].get_legend_handles_labels()[0]:
        axes[1].legend(fontsize=7)


def plot(size_name: str, table: dict, results: Path, tag: str | None = None) -> list[str]:
    """One PNG per axis (``reproduce_<size>_<axis>.png``), or with ``tag`` one PNG of every axis, a row of two
    panels each (``reproduce_<size>_<tag>.png``). Returns the paths as :func:`published_path` writes them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = plt.get_cmap("tab20").colors  # one color per row (the default cycle repeats after 10)
    note = "dotted: growth; y clipped at the first evaluation"
    figures = []
    if tag and table:
        fig, grid = plt.subplots(len(table), 2, figsize=(13, 5 * len(table)), squeeze=False)
        for panels, (axis, rows) in zip(grid, table.items()):
            _plot_axis(panels, axis, rows, colors)
            panels[0].set_title(f"axis {axis}")
            panels[1].set_title(f"axis {axis}")
        fig.suptitle(f"reproduce.py --size {size_name}, axes {', '.join(table)} ({note})")
        figures.append((fig, results / f"reproduce_{size_name}_{slug(tag)}.png"))
    else:
        for axis, rows in table.items():
            fig, panels = plt.subplots(1, 2, figsize=(13, 5))
            _plot_axis(panels, axis, rows, colors)
            fig.suptitle(f"reproduce.py --size {size_name}, axis {axis} ({note})")
            figures.append((fig, results / f"reproduce_{size_name}_{slug(axis)}.png"))
    files = []
    for fig, path in figures:
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        files.append(published_path(path))
    return files
