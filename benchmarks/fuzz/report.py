"""Known cases, shrinking, a seed range's report (counts and failures), merging and the CLI."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

from fuzz.checks import CaseResult, Failure, run_program
from fuzz.programs import Program, draw_program

# ------------------------------------------------------------------------------------------------ known cases
KNOWN = {
    "grouped-router-bias": "grouped-router experts x m claim 'function kept' with a signed e_score_correction_bias",
    "target-block_size": "a target with another block_size leaves max_seq_length and the RoPE cache at the old one",
    "depth+experts-requires_grad": "depth and experts in one stage give new experts the wrong requires_grad",
    "dense->moe-routed_scaling_factor": "dense -> MoE with routed_scaling_factor != 1 claims 'function kept'",
}


def known_case(program: Program, stages: list[dict[str, Any]], failure: Failure) -> str | None:
    """Which of the :data:`KNOWN` wrong growths a failure is, by its stage's keys (``None``: a new finding)."""
    keys = stages[failure.stage_index] if 0 <= failure.stage_index < len(stages) else {}
    target = keys.get("model_config") or {}
    if failure.kind == "reload" and target and target.get("block_size") != program.config.get("block_size"):
        return "target-block_size"
    if failure.kind == "reload" and any(s.get("model_config", {}).get("block_size", 16) != 16 for s in stages):
        return "target-block_size"  # an earlier stage's target changed it
    experts = any(k in keys for k in ("n_expert", "mlp_class_name", "n_expert_per_token"))
    depth = any(k in keys for k in ("n_layer", "depth_map")) or (target and target.get("n_layer") is not None)
    if failure.kind in ("requires_grad", "optimizer") and experts and depth:
        return "depth+experts-requires_grad"
    if failure.kind == "claim" and program.family == "moe-grouped" and program.bias == "signed":
        return "grouped-router-bias"
    if failure.kind == "claim" and "mlp_class_name" in keys and program.config.get("routed_scaling_factor", 1) != 1:
        return "dense->moe-routed_scaling_factor"
    return None


# ------------------------------------------------------------------------------------------------ shrinking
def failure_kinds(result: CaseResult) -> set[str]:
    return {f.kind for f in result.failures}


def replay(program: Program, stages: list[dict[str, Any]]) -> CaseResult:
    return run_program(dataclasses.replace(program, stages=copy.deepcopy(stages)))


def shrink(program: Program, stages: list[dict[str, Any]], kind: str, budget: int = 60) -> list[dict[str, Any]]:
    """The fewest stages and keys of ``stages`` for which ``program`` still fails with ``kind`` (greedy: drop a
    stage, then a key, while the failure stays; at most ``budget`` replays)."""
    current = copy.deepcopy(stages)
    runs = 0

    def fails(candidate) -> bool:
        nonlocal runs
        runs += 1
        try:
            return kind in failure_kinds(replay(program, candidate))
        except Exception:
            return False

    changed = True
    while changed and runs < budget:
        changed = False
        for i in range(len(current)):
            if len(current) > 1 and fails(current[:i] + current[i + 1:]):
                current = current[:i] + current[i + 1:]
                changed = True
                break
        else:
            for i, keys in enumerate(current):
                for key in list(keys):
                    if len(keys) == 1 or runs >= budget:
                        continue
                    candidate = copy.deepcopy(current)
                    del candidate[i][key]
                    if fails(candidate):
                        current, changed = candidate, True
                        break
                if changed:
                    break
    return current


def reproduction(program: Program, stages: list[dict[str, Any]]) -> dict[str, Any]:
    return dataclasses.replace(program, stages=stages).to_dict()


# ------------------------------------------------------------------------------------------------ the CLI
def run_seeds(seeds: range, *, shrink_failures: bool = True, shrink_per_kind: int = 3,
              log: Callable[[str], None] | None = None,
              checkpoint: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Run every seed: counts per family, axis and outcome, and the failures by ``(family, kind)``: every seed,
    and the first ``shrink_per_kind`` with their minimal reproduction (:func:`shrink`). ``checkpoint`` gets the
    report so far every 200 cases (a long run stopped early keeps what it ran)."""
    families: Counter = Counter()
    axes: Counter = Counter()
    family_axes: dict[str, Counter] = {}
    outcomes: Counter = Counter()
    failures: dict[tuple[str, str, str | None], dict[str, Any]] = {}
    start = time.perf_counter()
    for n, seed in enumerate(seeds):
        program = draw_program(seed)
        result = run_program(program)
        families[program.family] += 1
        axes.update(result.axes)
        family_axes.setdefault(program.family, Counter()).update(result.axes)
        outcomes.update(result.outcomes)
        for kind in sorted(failure_kinds(result)):
            first = next(f for f in result.failures if f.kind == kind)
            known = known_case(program, result.stages, first)
            entry = failures.setdefault((program.family, kind, known), {
                "family": program.family, "kind": kind, "known": known, "count": 0, "seeds": [], "examples": []})
            entry["count"] += 1
            if len(entry["seeds"]) < 50:
                entry["seeds"].append(seed)
            if len(entry["examples"]) < shrink_per_kind:
                # new findings shrunk (a shrink costs up to 30 replays); a known case's stage is already named
                shrunk = shrink_failures and known is None
                minimal = shrink(program, result.stages, kind, budget=30) if shrunk else result.stages
                entry["examples"].append({"seed": seed, "family": program.family, "kind": kind,
                                          "stage": first.stage_index, "message": first.message,
                                          "repro": reproduction(program, minimal)})
            if log:
                log(f"seed {seed} {program.family} {kind}: {first.message[:300]}")
        if (n + 1) % 200 == 0:
            if log:
                log(f"{n + 1} cases, {time.perf_counter() - start:.0f} s, "
                    f"{sum(e['count'] for e in failures.values())} failures")
            if checkpoint:
                checkpoint(_report(seeds, seed + 1, families, axes, family_axes, outcomes, failures, start))
    return _report(seeds, seeds.stop, families, axes, family_axes, outcomes, failures, start)


def _report(seeds: range, stop: int, families, axes, family_axes, outcomes, failures, start: float) -> dict[str, Any]:
    return {"seeds": f"{seeds.start}:{stop}", "cases": sum(families.values()),
            "seconds": round(time.perf_counter() - start, 1), "families": dict(sorted(families.items())),
            "axes": dict(sorted(axes.items())),
            "family_axes": {f: dict(sorted(c.items())) for f, c in sorted(family_axes.items())},
            "outcomes": dict(sorted(outcomes.items())), "failures": list(failures.values())}


def merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One report of several (the parts of a seed range run in parallel processes): counts added, failures of the
    same ``(family, kind, known)`` joined."""
    def add(dicts):
        total: Counter = Counter()
        for d in dicts:
            total.update(d)
        return dict(sorted(total.items()))

    failures: dict[tuple, dict[str, Any]] = {}
    for report in reports:
        for entry in report["failures"]:
            key = (entry["family"], entry["kind"], entry["known"])
            joined = failures.setdefault(key, {**entry, "count": 0, "seeds": [], "examples": []})
            joined["count"] += entry["count"]
            joined["seeds"] = (joined["seeds"] + entry["seeds"])[:50]
            joined["examples"] = (joined["examples"] + entry["examples"])[:3]
    families = sorted({f for r in reports for f in r["family_axes"]})
    return {"seeds": " + ".join(r["seeds"] for r in reports), "cases": sum(r["cases"] for r in reports),
            "seconds": round(sum(r["seconds"] for r in reports), 1), "families": add(r["families"] for r in reports),
            "axes": add(r["axes"] for r in reports),
            "family_axes": {f: add(r["family_axes"].get(f, {}) for r in reports) for f in families},
            "outcomes": add(r["outcomes"] for r in reports), "failures": list(failures.values())}


AXES = ("n_embd", "intermediate_size", "moe_intermediate_size", "heads", "depth", "experts", "dense->moe", "target",
        "target-block_size")


def markdown(report: dict[str, Any]) -> str:
    """The report's counts as Markdown tables (``docs/BENCHMARKS.md``): stages per family and axis, outcomes,
    failures by family, kind and known case."""
    head = "| family | programs | " + " | ".join(f"`{a}`" for a in AXES) + " |"
    lines = [head, "|" + "---|" * (len(AXES) + 2)]
    for family, n in report["families"].items():
        counts = report["family_axes"].get(family, {})
        lines.append(f"| {family} | {n} | " + " | ".join(str(counts.get(a, 0)) for a in AXES) + " |")
    lines.append(f"| **all** | {report['cases']} | " + " | ".join(str(report['axes'].get(a, 0)) for a in AXES) + " |")
    lines += ["", "| outcome | stages |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in report["outcomes"].items()]
    lines += ["", "| family | check | known case | programs | first seeds |", "|---|---|---|---|---|"]
    lines += [f"| {e['family']} | {e['kind']} | {e['known'] or 'new'} | {e['count']} | "
              f"{', '.join(map(str, e['seeds'][:5]))} |" for e in report["failures"]]
    return "\n".join(lines)


def describe_failure(failure: dict[str, Any]) -> str:
    """A failure and its reproduction, for an assertion message."""
    return (f"seed {failure['seed']} ({failure['family']}) {failure['kind']} at stage {failure['stage']}: "
            f"{failure['message']}\n  reproduce: python benchmarks/fuzz_growth.py --repro "
            f"'{json.dumps(failure['repro'])}'")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0:200", help="a seed range start:stop")
    parser.add_argument("--out", default=None, help="write the counts and failures here (JSON)")
    parser.add_argument("--repro", default=None, help="replay one program (the JSON of a failure's 'repro')")
    parser.add_argument("--no-shrink", action="store_true")
    parser.add_argument("--merge", nargs="+", default=None, help="join these reports (parts of a range) into --out")
    parser.add_argument("--markdown", default=None, help="print this report's tables as Markdown")
    args = parser.parse_args(argv)
    if args.markdown:
        with open(args.markdown) as fh:
            print(markdown(json.load(fh)))
        return 0
    if args.merge:
        reports = []
        for path in args.merge:
            with open(path) as fh:
                reports.append(json.load(fh))
        merged = merge_reports(reports)
        with open(args.out, "w") as fh:
            fh.write(json.dumps(merged, indent=1) + "\n")
        print(json.dumps({k: v for k, v in merged.items() if k != "failures"}, indent=1))
        return 0
    torch.set_num_threads(1)
    if args.repro:
        program = Program(**json.loads(args.repro))
        result = run_program(program)
        for f in result.failures:
            print(f"stage {f.stage_index} {f.kind}: {f.message}")
        print(f"outcomes: {dict(result.outcomes)}")
        return 1 if result.failures else 0
    start, stop = (int(x) for x in args.seeds.split(":"))

    def write(report: dict[str, Any]) -> None:
        if args.out:
            with open(args.out, "w") as fh:
                fh.write(json.dumps(report, indent=1) + "\n")

    report = run_seeds(range(start, stop), shrink_failures=not args.no_shrink, checkpoint=write,
                       log=lambda line: print(line, file=sys.stderr, flush=True))
    write(report)
    print(json.dumps({k: v for k, v in report.items() if k != "failures"}, indent=1))
    print(f"{sum(e['count'] for e in report['failures'])} failing cases")
    for entry in report["failures"]:
        print(f"{entry['family']} {entry['kind']} ({entry['known'] or 'new'}): {entry['count']} cases, "
              f"seeds {entry['seeds'][:10]}")
        for example in entry["examples"]:
            print(describe_failure(example))
    return 1 if report["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
