"""The scan's results as text: the cells in the measured map's format (format_cell, export_cells) and the markdown
of the scan and the experts axes."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any


from .grid import build_config
from .rows import DENSE_ISO, EXPERT_AXES, ROWS, comparisons
from .tables import fmt


def scan_where(size_name: str, ratio: int, axis: str | None = None) -> str:
    """The ``where`` of a scan cell in the map: its section of docs/BENCHMARKS.md and run length (the experts axes
    have a section of their own)."""
    run = f"{size_name}{'' if ratio == 1 else f' x{ratio}'}"
    if axis in EXPERT_AXES:
        return f"Experts: dense -> MoE and MoE -> more experts ({run})"
    return f"Where growth pays: the scan ({run})"


def export_cells(lines: list[dict], size_name: str, size: dict | None = None) -> list[dict]:
    """The measured lines (2 seeds or more) as cells of lightning_sparkling/pretrain/advice/measured.json; with the size
    preset the runs trained (``size``, ``--set`` applied), each cell also records its grown model's size
    (:func:`cell_size_of`)."""
    out = []
    for line in lines:
        if line.get("seeds", 0) < 2 or line.get("sd") is None or line["recipe"] is None:
            continue
        out.append({"axis": line["map_axis"], "recipe": line["recipe"], "schedule": line["schedule"],
                    "growth_at": round(line["growth_at"], 3), "tokens_per_param": round(line["tokens_per_param"], 1),
                    "delta": round(line["delta"], 3), "sd": round(line["sd"], 3), "seeds": line["seeds"],
                    "seeds_above": line["seeds_above"], "where": scan_where(size_name, line["ratio"], line["axis"])})
        dense = (line.get("comparisons") or {}).get(DENSE_ISO, {})
        if dense.get("n", 0) >= 2 and dense.get("sd") is not None:  # an upcycle: what staying dense would have given
            out[-1].update(start_delta=round(dense["mean"], 3), start_sd=round(dense["sd"], 3),
                           start_seeds_above=dense["wins"])
        if line.get("speedup") is not None and line.get("speedup_sd") is not None:
            out[-1].update(speedup=round(line["speedup"], 2), speedup_sd=round(line["speedup_sd"], 2))
        if line.get("init") is not None:  # an experts cell: its expert_init (the map matches a run's on it)
            out[-1]["init"] = line["init"]
        if size is not None:
            out[-1].update(cell_size_of(size, line["axis"], comparisons(line["axis"], line["row"])[0]))
    return out


def cell_size_of(size: dict, axis: str, scratch_row: str) -> dict[str, Any]:
    """The size fields of a cell (``params``, ``active_params``, ``embedding_share``, ``device``, ``precision``,
    ``corpus``), computed from the config of its grown shape's scratch row, as the package parses it."""
    import tempfile

    from lightning_sparkling.pretrain.cli import parse
    from lightning_sparkling.pretrain.advice.measured_size import cell_size

    config = build_config(size, axis, ROWS[scratch_row], seed=1)
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        json.dump({**config, "out_dir": "/tmp/cell_size_unused"}, f)
    try:
        _, run, _ = parse(["--config", f.name], "plan")
    finally:
        Path(f.name).unlink(missing_ok=True)
    device = "cpu"
    if str(config.get("accelerator")) in ("gpu", "cuda"):
        import torch

        device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else str(config["accelerator"])
    return cell_size(run.model_config, device=device, precision=str(config["precision"]),
                     corpus=str(config["data"]["source"]), tie_embeddings=run.train.tie_embeddings)


def format_cell(cell: dict) -> str:
    """One cell as a line of measured.json (``"delta": -0.020``: three decimals, as the map writes them)."""
    return ("{" + f'"axis": {json.dumps(cell["axis"])}, "recipe": {json.dumps(cell["recipe"])}, '
            f'"schedule": {json.dumps(cell["schedule"])}, "growth_at": {cell["growth_at"]!r}, '
            f'"tokens_per_param": {cell["tokens_per_param"]:.1f}, "delta": {cell["delta"]:.3f}, '
            f'"sd": {cell["sd"]:.3f}, "seeds": {cell["seeds"]}, "seeds_above": {cell["seeds_above"]}, '
            + (f'"speedup": {cell["speedup"]:.2f}, "speedup_sd": {cell["speedup_sd"]:.2f}, ' if "speedup" in cell
               else "")
            + (f'"init": {json.dumps(cell["init"])}, ' if cell.get("init") is not None else "")
            + f'"where": {json.dumps(cell["where"], ensure_ascii=False)}'
            + (f', "start_delta": {cell["start_delta"]:.3f}, "start_sd": {cell["start_sd"]:.3f}, '
               f'"start_seeds_above": {cell["start_seeds_above"]}' if cell.get("start_delta") is not None else "")
            + "".join(f', "{k}": {json.dumps(cell[k])}' for k in ("factors", "stages") if cell.get(k) is not None)
            + "".join(f', "{k}": {json.dumps(cell[k])}' for k in _SIZE_KEYS if cell.get(k) is not None)
            + "".join(f', "{k}": {json.dumps(cell[k])}' for k in ("arch", "ceiling") if cell.get(k) is not None)
            + "}")


_SIZE_KEYS = ("params", "active_params", "embedding_share", "device", "precision", "corpus")
"""The size fields of a cell (issue 38; ``lightning_sparkling.pretrain.advice.measured_size.SIZE_KEYS``)."""


def format_export(cells: list[dict]) -> str:
    """The cells as a JSON list, one measured.json line each (paste the lines into the map's ``cells``)."""
    if not cells:
        return "[]\n"
    return "[\n" + ",\n".join(f"    {format_cell(c)}" for c in cells) + "\n]\n"


def _min_max(per_seed: dict[Any, dict]) -> str:
    """``'0.08-0.96'``: the smallest and largest expert fraction over every block and seed of ``{seed: load}``."""
    shares = [v for load in per_seed.values() for block in load.values() for v in block]
    return f"{min(shares):.2f}-{max(shares):.2f}" if shares else "-"


def experts_markdown(lines: list[dict]) -> list[str]:
    """The experts axes' table: per row the paired Δ against each comparison (mean ± sd and per seed), the experts'
    load after training (min-max fraction of tokens per expert over blocks and seeds; uniform ``K / n_expert``), the
    copies' last cosine, and the growth's seconds, peak memory and loss right after it (mean over seeds)."""
    rows = [ln for ln in lines if ln.get("experts") is not None]
    if not rows:
        return []
    out = ["Experts axes (issue 30): Δ = final validation loss of the growth row minus the comparison's, each "
           "comparison trained from scratch on the growth row's FLOPs (6 x active parameters x tokens) with its own "
           "schedule, paired by seed. Load: the smallest and largest fraction of tokens one expert got among their "
           "top-K (every MoE block, every seed; the final checkpoint on 4 validation batches; uniform = K/E), the "
           "growth row's and the comparison MoE's. Cosine: the copies' last `symmetry/stage_0/experts`.", "",
           "| axis | row | growth at | tokens / active param | comparison (steps) | Δ (paired mean ± sd) | "
           "seeds above | per-seed Δ | load after (growth) | load (MoE scratch) | copies' cosine | growth s | "
           "growth peak MB | loss after growth |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for ln in rows:
        diag = list(ln["experts"].values())

        def avg(key: str, p: int, diag: list[dict] = diag) -> str:
            vals = [d[key] for d in diag if d.get(key) is not None]
            return fmt(statistics.fmean(vals), p) if vals else "-"

        cos = [v for d in diag for v in d.get("symmetry", {}).values()]
        cosine = f"{statistics.fmean(cos):.2f}" if cos else "- (no copies)"
        for k, (name, d) in enumerate(ln["comparisons"].items()):
            delta = f"{d['mean']:+.3f} ± {fmt(d.get('sd'))}" if d.get("n") else "not run"
            per = ", ".join(f"{v:+.3f}" for v in d.get("per_seed", [])) or "-"
            above = f"{d['wins']}/{d['n']}" if d.get("n") else "-"
            head = (f"| {ln['axis']} | {ln['row']} | {ln['growth_at']:.0%} | {ln['tokens_per_param']:.1f} "
                    if k == 0 else "| | | | ")
            tail = (f"| {_min_max({s: e['load'] for s, e in ln['experts'].items()})} | "
                    f"{_min_max(ln.get('scratch_load', {}))} | {cosine} | {avg('growth_seconds', 2)} | "
                    f"{avg('peak_memory_mb', 0)} | {avg('loss_after', 3)} |" if k == 0 else "| | | | | | |")
            out.append(f"{head}| {name} ({d['steps']}) | {delta} | {above} | {per} {tail}")
    return out + [""]


def scan_markdown(size_name: str, lines: list[dict], skipped: list[dict], refused: list[dict], seeds: list[int],
                  wall: float | None) -> str:
    out = [f"### `--size {size_name} --scan`: growth against the same-schedule iso-FLOPs scratch, seeds "
           f"{', '.join(map(str, seeds))}", ""]
    spent = sum(line.get("wall_s") or 0 for line in lines)
    out.append((f"Scan wall-clock of this invocation: {wall / 60:.1f} min; " if wall is not None else "")
               + f"sum of the runs' wall-clock (summary.json, shared scratch counted per cell): {spent / 60:.1f} min.")
    out += ["", "Δ: final validation loss of the growth row minus that of the grown shape trained from scratch on the "
            "same FLOPs with the same LR schedule, paired by seed (negative: growth paid); seeds above: seeds where "
            "growth ended above scratch.", ""]
    out.append("| steps (x) | tokens / grown param | schedule | axis | row (recipe) | growth at | Δ vs iso-FLOPs "
               "scratch (paired mean ± sd) | seeds above | growth loss | scratch loss (steps) | per-seed Δ |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for ln in lines:
        if "tokens" not in ln:
            out.append(f"| {ln['steps']} (x{ln['ratio']}) | - | {ln['schedule']} | {ln['axis']} | {ln['row']} "
                       f"({ln['recipe'] or '-'}) | {ln['growth_at']:.0%} | {ln['status']} | | | | |")
            continue
        delta = "-" if ln["delta"] is None else f"{ln['delta']:+.3f} ± {fmt(ln['sd'])}"
        above = f"{ln['seeds_above']}/{ln['seeds']}" if ln["seeds"] else "-"
        per = ", ".join(f"{v:+.3f}" for v in ln["per_seed"]) or "-"
        out.append(f"| {ln['steps']} (x{ln['ratio']}) | {ln['tokens_per_param']:.1f} | {ln['schedule']} | "
                   f"{ln['axis']} | {ln['row']} ({ln['recipe'] or 'no growth.recipe: not exported'}) | "
                   f"{ln['growth_at']:.0%} | {delta} | {above} | "
                   f"{fmt(ln['growth_mean'])} | {fmt(ln['scratch_mean'])} ({ln['scratch_steps']}) | {per} |")
    out.append("")
    out += experts_markdown(lines)
    eq = [ln for ln in lines if ln.get("speedup_per_seed")]
    if eq:
        out += ["Compute to reach the same loss: the grown shape trained from scratch at several budgets (x the growth "
                "run's FLOPs, each its own run and schedule); speed-up = the scratch compute that reaches the growth "
                "run's final val loss (interpolated in log-FLOPs, never extrapolated) / the growth run's compute. "
                "Reached at: the share of the growth run at which it first reaches the iso-FLOPs scratch's final "
                "loss (G_stack's form). RMS health (worst seed): peak after growth of `rms/final_hidden` and of the "
                "largest `rms/residual/block_*` over the same-shape scratch run's at the same step, "
                "`rms/final_hidden`'s peak over its value at the growth, and the new entries' peak LR over the old "
                "entries'.", "",
                "| tokens / grown param | schedule | axis | row (recipe) | growth at | scratch budgets (x) | "
                "speed-up at equal loss (mean ± sd) | per seed | reached scratch's final loss at | "
                "final hidden / scratch | residual / scratch | final hidden / at growth | LR new / old |",
                "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for ln in eq:
            sp = (f"{ln['speedup']:.2f}x ± {fmt(ln.get('speedup_sd'), 2)}" if ln.get("speedup") is not None
                  else "censored")
            per = ", ".join(v for _, v in sorted(ln["speedup_per_seed"].items()))
            frac = ", ".join("never" if f is None else f"{f:.0%}"
                             for _, f in sorted(ln["reach_fraction_per_seed"].items()))
            h = ln.get("health", {})
            hs = [fmt(h.get(k), 2) for k in ("final_hidden_vs_scratch", "residual_vs_scratch",
                                            "final_hidden_vs_growth", "lr_new_vs_old")]
            out.append(f"| {ln['tokens_per_param']:.1f} | {ln['schedule']} | {ln['axis']} | {ln['row']} "
                       f"({ln['recipe'] or '-'}) | {ln['growth_at']:.0%} | "
                       f"{', '.join(f'{b:.2f}' for b in ln['budgets'])} | {sp} | {per} | {frac} | {' | '.join(hs)} |")
        out.append("")
    for sk in skipped:
        out.append(f"- skipped: x{sk['ratio']} {sk['schedule']} {sk['axis']}: {sk['why']}")
    seen = set()
    for r in refused:
        if (r["sub"], r["axis"], r["row"]) not in seen:
            seen.add((r["sub"], r["axis"], r["row"]))
            out.append(f"- not available: {r['sub']} {r['axis']} | {r['row']}: {r['why']}")
    return "\n".join(out).rstrip() + "\n"
