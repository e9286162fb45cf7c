"""``python benchmarks/reproduce.py``: the options, the grid or the scan run, the results written."""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path

import yaml

from .sizes import RESULTS, SIZES, resolve_size, set_dotted, slug
from .rows import (AXES, DEPTH_AXES, DEPTH_REFERENCE, DEPTH_ROWS, ISO_FLOPS, REFERENCE, ROWS, SCRATCH_ROWS, comparisons,
                   reference)
from .grid import is_done, plan_grid, run_grid
from .tables import collect, markdown, plot
from .scan import SCAN_AXES, SCAN_DEFAULT_AXES, SCAN_RATIOS, SCAN_SCHEDULES, plan_scan, scan_cells, scan_lines
from .export import export_cells, format_export, scan_markdown


def run_scan(args, parser, size_name: str, size: dict, seeds: list[int], out: Path, results: Path) -> int:
    """``--scan``: plan (``--dry-run``: list), train what is not finished, then the table and the map's cells."""
    t0 = time.perf_counter()
    try:
        ratios = [int(r) for r in args.scan_ratios.split(",")]
    except ValueError:
        parser.error(f"--scan-ratios takes integer train.max_steps multipliers, e.g. 1,4,8 (not {args.scan_ratios!r})")
    schedules = args.scan_schedules.split(",")
    axes = args.scan_axes.split(",")
    rows = [r.strip() for r in args.scan_rows.split(",")] if args.scan_rows else None
    for bad, known, what in ((set(schedules) - set(SCAN_SCHEDULES), SCAN_SCHEDULES, "schedules"),
                             (set(axes) - set(AXES), AXES, "axes"),
                             ({r for r in rows or [] if r not in ROWS and not (r.partition(":")[0] in AXES
                                                                               and r.partition(":")[2] in ROWS)},
                              list(ROWS), "rows")):
        if bad:
            parser.error(f"unknown scan {what} {sorted(bad)}; choose from {known}")
    if any(r < 1 for r in ratios):
        parser.error("--scan-ratios must be >= 1")
    if "lr_schedule" in size["config"]["train"]:
        parser.error("--scan sets train.lr_schedule per cell (--scan-schedules), not with --set")
    try:
        budgets = tuple(float(b) for b in args.budgets.split(",") if b.strip())
    except ValueError:
        parser.error(f"--budgets takes multipliers of the iso-FLOPs scratch's steps, e.g. 0.7,1.4,2 "
                     f"(not {args.budgets!r})")
    if any(b <= 0 or b == 1 for b in budgets):
        parser.error(f"--budgets: each multiplier must be > 0 and not 1 (the iso-FLOPs scratch is 1), not {budgets}")
    cells, skipped = scan_cells(size, ratios, schedules, axes, rows)
    runs, refused = plan_scan(size_name, size, cells, seeds, out, budgets)
    lines = scan_lines(cells, runs)
    distinct: dict = {}
    for r in runs:  # the first cell of a run dir is the one run_grid trains and saves
        distinct.setdefault(r["run_dir"], r)
    done = sum(is_done(Path(d), r["config"]) for d, r in distinct.items())
    print(f"scan {size_name}: ratios {ratios}, schedules {schedules}, axes {axes}, seeds {seeds}: {len(cells)} cells, "
          f"{len(distinct)} distinct runs ({done} already done, {len(distinct) - done} to train) in {out}")
    for ln in lines:
        ratio = f"{ln['tokens_per_param']:.1f} tokens per grown parameter" if "tokens_per_param" in ln else "refused"
        versus = comparisons(ln["axis"], ln["row"])
        n_runs = len({r["run_dir"] for r in runs if r["sub"] == ln["sub"]
                      and r["axis"] == ln["axis"] and r["row"] in (ln["row"], *versus)})
        print(f"  x{ln['ratio']} ({ln['steps']} steps, {ratio}) | {ln['schedule']:<6} | {ln['axis']:<8} | "
              f"{ln['row']} vs {' and '.join(versus)} | growth at {ln['growth_at']:.0%} | {n_runs} runs")
    for sk in skipped:
        print(f"  skipped: x{sk['ratio']} {sk['schedule']} {sk['axis']}: {sk['why']}")
    for r in refused:
        print(f"  not available: {r['sub']} {r['axis']} | {r['row']}: {r['why']}")
    if args.dry_run:
        return 0
    wall = None
    if not args.report_only:
        run_grid(runs, args.jobs)
        wall = time.perf_counter() - t0
        lines = scan_lines(cells, runs)
    md = scan_markdown(size_name, lines, skipped, refused, seeds, wall)
    exported = export_cells(lines, size_name, size)
    stem = f"reproduce_{size_name}_scan" + (f"_{slug(args.tag)}" if args.tag else "")
    results.mkdir(parents=True, exist_ok=True)
    (results / f"{stem}.md").write_text(md)
    payload = {"size": size_name, "size_config": size, "scan": {"ratios": ratios, "schedules": schedules,
                                                                  "axes": axes, "rows": rows},
               "seeds": seeds, "set": args.set, "out": str(out), "wall_clock_seconds": wall, "skipped": skipped,
               "refused": refused, "lines": lines, "measured_cells": exported,
               "command": " ".join([Path(sys.argv[0]).name] + (args.argv if args.argv is not None else sys.argv[1:]))}
    (results / f"{stem}.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
    print(md)
    print("measured.json cells (2 seeds or more):")
    print(format_export(exported), end="")
    if args.scan_export:
        Path(args.scan_export).write_text(format_export(exported))
        print(f"wrote {len(exported)} cell(s) to {args.scan_export}")
    print(f"wrote {results / f'{stem}.json'} and .md")
    return 0


# ------------------------------------------------------------------------------------------------------------ main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=sys.modules[__package__].__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", choices=sorted(SIZES), default="cpu", help="model/data/length preset (default cpu)")
    parser.add_argument("--quick", action="store_true", help="same as --size quick")
    parser.add_argument("--seeds", type=int, default=3, help="number of seeds, 1..N (default 3)")
    parser.add_argument("--axes", default=None, help=f"comma list of {','.join(AXES)} (default: the size's; "
                                                     "joint-5 / joint-25 / joint-75 grow at 5%% / 25%% / 75%%; "
                                                     "depth: n_layer 2x at 25%%, depth-5 / depth-50 at 5%% / 50%%, "
                                                     "depth+width: n_layer and the joint width 2x at 25%%; "
                                                     "hidden+heads: n_embd and n_head 2x at 50%%)")
    parser.add_argument("--rows", default=None, help="comma list of row names (default: the size's); see --list")
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (1 thread each; default 1)")
    parser.add_argument("--out", default="/tmp/repro", help="where runs go (default /tmp/repro)")
    parser.add_argument("--results", default=str(RESULTS), help="where JSON, tables and PNGs go")
    parser.add_argument("--tag", default=None,
                        help="name the outputs reproduce_<size>_<tag>.{json,md,png} (one PNG of every axis), so a "
                             "grid's results do not overwrite the size's own files")
    parser.add_argument("--dry-run", action="store_true", help="plan and check every run, train nothing")
    parser.add_argument("--report-only", action="store_true", help="only rebuild the tables from finished runs")
    parser.add_argument("--list", action="store_true", help="print the rows and their overrides")
    parser.add_argument("--no-reference", action="store_true",
                        help=f"do not add the {REFERENCE!r} row (e.g. while another grid in the same --out trains it; "
                             "rebuild the table with it later with --report-only)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override a key of the size's config for every run, e.g. --set train.max_steps=6000 "
                             "(growth stays at half the steps; repeatable; values are YAML)")
    scan = parser.add_argument_group("the scan (issue 23): where growth pays, one command")
    scan.add_argument("--scan", action="store_true",
                      help="run the map: per token ratio, schedule and growth timing, the axis' row against the "
                           "grown shape from scratch on the same FLOPs with the same schedule; writes "
                           "reproduce_<size>_scan[_<tag>].{json,md} and the map's cells")
    scan.add_argument("--scan-ratios", default=",".join(map(str, SCAN_RATIOS)),
                      help="train.max_steps multipliers of the size (default 1,4,8: at --size quick about 2.8, 11 "
                           "and 23 training tokens per grown parameter on the joint axis)")
    scan.add_argument("--scan-schedules", default=",".join(SCAN_SCHEDULES),
                      help="cosine and/or wsd (train.lr_schedule: wsd on every run of the cell, scratch included; "
                           "only timings before the decay phase)")
    scan.add_argument("--scan-axes", default=",".join(SCAN_DEFAULT_AXES),
                      help=f"growth timings and axes (default {','.join(SCAN_DEFAULT_AXES)}; also "
                           f"{','.join(a for a in SCAN_AXES if a not in SCAN_DEFAULT_AXES)}); joint axes with "
                           f"'recommended recipe', depth axes with {DEPTH_REFERENCE!r}")
    scan.add_argument("--scan-rows", default=None,
                      help="comma list of growth rows instead of each axis' default (each on the axes it applies "
                           "to; AXIS:ROW on that axis only, e.g. 'joint:SPARKLING')")
    scan.add_argument("--budgets", default="",
                      help="also train the grown shape from scratch at these multiples of the iso-FLOPs scratch's "
                           "steps (e.g. 0.7,1.4,2), and report the speed-up at equal loss (scratch compute to reach "
                           "the growth run's final loss / growth compute) and the share of the growth run at which "
                           "it reaches scratch's final loss; the map's cells gain speedup / speedup_sd")
    scan.add_argument("--scan-export", default=None, metavar="PATH",
                      help="write the measured cells (2+ seeds) as a JSON list in measured.json's format")
    args = parser.parse_args(argv)
    args.argv = argv
    size_name = "quick" if args.quick else args.size
    size = resolve_size(size_name)
    if args.list:
        for name, row in ROWS.items():
            print(f"{name:<34} {json.dumps({k: v for k, v in row.items() if k != 'note'}, default=str)}")
        return 0
    axes = args.axes.split(",") if args.axes else size["axes"]
    if [a for a in axes if a not in AXES]:
        parser.error(f"unknown axes {[a for a in axes if a not in AXES]}; choose from {AXES}")
    rows = [r.strip() for r in args.rows.split(",")] if args.rows else (size["rows"] or list(ROWS))
    if not args.rows and set(axes) & set(DEPTH_AXES):  # the size's rows are width rows: add the depth grid's
        rows = list(dict.fromkeys([*rows, *SCRATCH_ROWS[0:1], ISO_FLOPS, *DEPTH_ROWS[:6]]))
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; see --list")
    for ref_row in dict.fromkeys(reference(a) for a in axes):
        if ref_row not in rows and not args.no_reference:
            rows.append(ref_row)
    seeds = list(range(1, args.seeds + 1))
    out, results = Path(args.out), Path(args.results)
    results.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for item in args.set:
        key, _, value = item.partition("=")
        set_dotted(size["config"], key, yaml.safe_load(value))
    if args.scan and args.out == parser.get_default("out"):
        out = out / "scan"
    if args.set and args.out == parser.get_default("out"):
        out = out / ("set-" + hashlib.sha256(" ".join(args.set).encode()).hexdigest()[:8])
    if args.scan:
        return run_scan(args, parser, size_name, size, seeds, out, results)
    cells, refused = plan_grid(size_name, size, axes, rows, seeds, out)
    distinct = len({c["run_dir"] for c in cells})
    print(f"size {size_name}: axes {axes}, {len(rows)} rows, seeds {seeds}: {len(cells)} cells, {distinct} distinct "
          f"runs; {len({(r['axis'], r['row']) for r in refused})} row(s) refused")
    for r in refused:
        print(f"  not available: {r['axis']} | {r['row']}: {r['why']}")
    if args.dry_run:
        for c in cells:
            print(f"  {c['axis']:>9} | {c['row']:<32} seed {c['seed']}: {c['compute']['steps']} steps, "
                  f"params {c['compute']['total_params']}, FLOPs {c['compute']['flops']:.3g} -> {c['run_dir']}")
        return 0
    wall = None
    if not args.report_only:
        run_grid(cells, args.jobs)
        wall = time.perf_counter() - t0
    table = collect(cells)
    md = markdown(size_name, table, refused, seeds, wall)
    pngs = plot(size_name, table, results, args.tag)
    stem = f"reproduce_{size_name}" + (f"_{slug(args.tag)}" if args.tag else "")
    (results / f"{stem}.md").write_text(md + "\n")
    payload = {"size": size_name, "size_config": size, "axes": axes, "rows": {r: ROWS[r] for r in rows},
               "seeds": seeds, "set": args.set, "wall_clock_seconds": wall, "refused": refused, "table": table,
               "pngs": pngs,
               "command": " ".join([Path(sys.argv[0]).name] + (argv if argv is not None else sys.argv[1:]))}
    (results / f"{stem}.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
    print(md)
    print(f"wrote {results / f'{stem}.json'}, .md and {len(pngs)} PNG(s)")
    return 0
