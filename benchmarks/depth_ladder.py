"""Depth growth at 20+ tokens per parameter (issue 46): several growth schedules against ONE shared ladder of
from-scratch runs of the grown shape, per seed, so that every candidate's speed-up at equal loss is read off the same
scratch curve (``sparkling measure`` trains its own scratch runs at multiples of each candidate's FLOPs: 4 runs per
candidate and seed, where a shared ladder costs 4 runs per seed for all candidates together).

    python benchmarks/depth_ladder.py --seeds 1 --jobs 2                      # every candidate, seed 1
    python benchmarks/depth_ladder.py --seeds 1,2,3 --candidates late-shallow,stages-1248
    python benchmarks/depth_ladder.py --report-only                          # the table from what finished

The model is the map's depth shape at the ``cpu`` size (8 layers, n_embd 32, 2 heads of 16, MLP 128, vocabulary
1024 on the standard library, 197,152 parameters grown); every run trains ``--steps`` steps of 8 x 128 tokens under
WSD with a 10% decay (4,000 steps: 4.1M tokens, 20.8 tokens per grown parameter), float32, one CPU thread. The
scratch ladder trains the 8-layer model at ``--ladder`` fractions of those steps (its own WSD schedule each). Per
candidate and seed: the growth run's FLOPs (6 N D, embeddings included, as the map counts), its final val loss, the
Δ against scratch at equal FLOPs and the speed-up (scratch FLOPs to the growth run's final loss over the growth run's
FLOPs), both interpolated in log-FLOPs between the ladder's runs and never extrapolated; the final hidden and
largest residual RMS against scratch's (the RMS monitor every 100 steps). Each run's row is appended to
``results/depth_ladder.jsonl`` as it ends; the table is ``results/depth_ladder.md``. Wall-clock is not compared:
the runs share a machine (issue 45).

``--shape`` picks the model and corpus (issue 54: the same schedule at other sizes, a low embedding share and a block
family it was not tuned on); ``quick`` (the default) is the ladder above, on the standard library. The others train on
``stdlib+site-packages`` (146 MB: the 1.4M model's 29M tokens are one pass over it, where the standard library alone
would repeat ~7 times) at 20.8 tokens per grown parameter, vocabulary 1024 unless named:

    mini-sp     8 layers, n_embd 16, 2 heads of 8, MLP 64 (65,808 parameters, embedding and head 50%)
    quick-sp    the ``quick`` model (197,152 parameters, 33%)
    cpu-1m-sp   8 layers, n_embd 96, 6 heads of 16, MLP 384 (1,377,888 parameters, 14%)
    lowemb-sp   the ``quick`` model with a vocabulary of 272, which litgpt pads to 512 (164,384 parameters, embedding
                and head 19.9%, 18.9 tokens per parameter at 3,027 steps: the share it was meant to cut, only halved)
    lowemb12-sp the same with ``padded_vocab_size: 272`` (149,024 parameters, embedding and head 11.7%: a 1B model's
                embedding share, nothing else changed; 20.8 tokens per parameter)
    neox-sp     quick's sizes in the pythia / GPT-NeoX block: parallel residual, LayerNorm, GELU MLP (``GptNeoxMLP``),
                biases, rotary on a quarter of each head (167,232 parameters, 39%). Chosen before any result, with
                quick's optimizer, LR and schedule, and never tuned.

A candidate's layer counts are written for 8 layers and scale with a shape of 16 or 24 layers. The shapes added for
issue 54 train the scratch ladder at 0.55, 0.75 and 1.0 of the steps (0.4 was never needed at 20+ tokens per
parameter: every candidate's loss fell between 0.55 and 1.0 there).

    python benchmarks/depth_ladder.py --shape cpu-1m-sp --seeds 1,2 --candidates stages-248-copy --jobs 2
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from lightning_sparkling.pretrain.measure.measure_runs import TrainingRun, train_runs  # noqa: E402
from lightning_sparkling.pretrain.measure.measure_stats import mean_sd, scratch_flops_at  # noqa: E402

RESULTS = HERE / "results"
MODEL = {"name": "depth-ladder", "n_layer": 8, "n_embd": 32, "n_head": 2, "n_query_groups": 2, "head_size": 16,
         "intermediate_size": 128, "mlp_class_name": "LLaMAMLP", "norm_class_name": "RMSNorm", "bias": False,
         "parallel_residual": False, "rotary_percentage": 1.0, "block_size": 128}
_NEOX = {"mlp_class_name": "GptNeoxMLP", "norm_class_name": "LayerNorm", "bias": True, "parallel_residual": True,
         "rotary_percentage": 0.25}


@dataclass(frozen=True)
class Shape:
    """A ladder's grown model, corpus and length: ``steps`` of 8 x 128 tokens (20.8 per grown parameter), the scratch
    ``ladder`` (fractions of the steps) and the block family (``arch``) the map records."""

    model: dict[str, Any]
    steps: int
    ladder: tuple[float, ...]
    vocab_size: int = 1024
    source: str = "stdlib+site-packages"
    arch: str = "llama"
    eval_iters: int = 50

    @property
    def n_layer(self) -> int:
        return self.model["n_layer"]


_LADDER = (0.55, 0.75, 1.0)
SHAPES: dict[str, Shape] = {
    "quick": Shape(MODEL, 4000, (0.4, *_LADDER), source="stdlib", eval_iters=20),
    "mini-sp": Shape({**MODEL, "name": "depth-ladder-mini", "n_embd": 16, "head_size": 8, "intermediate_size": 64},
                     1337, _LADDER),
    "quick-sp": Shape(MODEL, 4000, _LADDER),
    # 2 -> 4 -> 8 costs 0.571 of the 8-layer run: budgets 1 and 1.4 of the growth run, and the full run (1.75)
    "cpu-1m-sp": Shape({**MODEL, "name": "depth-ladder-1m", "n_embd": 96, "n_head": 6, "n_query_groups": 6,
                        "intermediate_size": 384}, 27988, (0.571, 0.8, 1.0)),
    # litgpt pads a vocabulary of 272 to 512 (padding_multiple): 164,384 parameters, 19.9% embedding and head, 18.9
    # tokens per parameter at these steps; lowemb12-sp pins the padded size to 272, the 11.7% it was meant to have
    "lowemb-sp": Shape({**MODEL, "name": "depth-ladder-lowemb"}, 3027, _LADDER, vocab_size=272),
    "lowemb12-sp": Shape({**MODEL, "name": "depth-ladder-lowemb12", "padded_vocab_size": 272}, 3027, _LADDER,
                         vocab_size=272),
    "neox-sp": Shape({**MODEL, **_NEOX, "name": "depth-ladder-neox"}, 3397, _LADDER, arch="neox"),
}

#: name -> (starting model overrides, growth block): each a `growth:` block as a user writes it
CANDIDATES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # today's late-shallow WSD recipe (BENCHMARKS: 1.38x at 5.2 tokens per parameter)
    "late-shallow": ({"n_layer": 2}, {"stages": [{"at_fraction": 0.8, "n_layer": 8}]}),
    # multi-stage depth: 2 -> 4 -> 8 at 50% and 75%
    "stages-248": ({"n_layer": 2}, {"stages": [{"at_fraction": 0.5, "n_layer": 4},
                                               {"at_fraction": 0.75, "n_layer": 8}]}),
    # the zero/one-layer shape: 1 -> 2 -> 4 -> 8 at 40%, 60%, 80%
    "stages-1248": ({"n_layer": 1}, {"stages": [{"at_fraction": 0.4, "n_layer": 2}, {"at_fraction": 0.6, "n_layer": 4},
                                                {"at_fraction": 0.8, "n_layer": 8}]}),
    # G_stack's early 4x: 2 -> 8 at 10%
    "early-4x": ({"n_layer": 2}, {"stages": [{"at_fraction": 0.1, "n_layer": 8}]}),
    # the multi-stage leader with G_stack's full copy (new blocks write what their source writes) ...
    "stages-248-copy": ({"n_layer": 2}, {"stages": [{"at_fraction": 0.5, "n_layer": 4, "depth_init": "copy"},
                                                    {"at_fraction": 0.75, "n_layer": 8, "depth_init": "copy"}]}),
    "stages-1248-copy": ({"n_layer": 1}, {"stages": [{"at_fraction": 0.4, "n_layer": 2, "depth_init": "copy"},
                                                     {"at_fraction": 0.6, "n_layer": 4, "depth_init": "copy"},
                                                     {"at_fraction": 0.8, "n_layer": 8, "depth_init": "copy"}]}),
    # the depth-aware rule on the copied blocks: each kept block writes sqrt(L / L') of what it wrote, so the copies
    # double the residual stream's writes by sqrt(2) instead of 2
    "stages-248-copy-sqrt": ({"n_layer": 2}, {"stages": [
        {"at_fraction": 0.5, "n_layer": 4, "depth_init": "copy", "depth_scaling": "sqrt"},
        {"at_fraction": 0.75, "n_layer": 8, "depth_init": "copy", "depth_scaling": "sqrt"}]}),
    "late-shallow-copy": ({"n_layer": 2}, {"stages": [{"at_fraction": 0.8, "n_layer": 8, "depth_init": "copy"}]}),
    # ... and with the new blocks re-warmed to 3x (the width default's ratio) instead of the paper's 1.3x
    "stages-248-r3": ({"n_layer": 2}, {"stages": [{"at_fraction": 0.5, "n_layer": 4, "rewarmup_ratio": 3.0},
                                                  {"at_fraction": 0.75, "n_layer": 8, "rewarmup_ratio": 3.0}]}),
    # the zero/one-layer paper's shape in one step: 1 -> 8 at 80%
    "late-1to8": ({"n_layer": 1}, {"stages": [{"at_fraction": 0.8, "n_layer": 8}]}),
    # the depth-aware rule: late-shallow with depth-muP's sqrt(L / L') on every block's output projections
    "late-shallow-sqrt": ({"n_layer": 2}, {"stages": [{"at_fraction": 0.8, "n_layer": 8, "depth_scaling": "sqrt"}]}),
    # late width + depth: depth first (4 -> 8 at 40%), width late (n_embd 16 -> 32, MLP 64 -> 128 and one head of 16
    # -> two at 70%: the grown model is the scratch shape exactly)
    "depth-then-width": ({"n_layer": 4, "n_embd": 16, "n_head": 1, "n_query_groups": 1, "intermediate_size": 64},
                         {"stages": [{"at_fraction": 0.4, "n_layer": 8},
                                     {"at_fraction": 0.7, "n_embd": 32, "intermediate_size": 128, "n_head": 2,
                                      "n_query_groups": 2}]}),
}


@dataclass(frozen=True)
class LadderRun(TrainingRun):
    """One run: ``kind`` ``"scratch"`` (``fraction`` of the steps) or a candidate's name; ``seed``."""

    kind: str
    fraction: float
    seed: int
    config: dict[str, Any]
    run_dir: Path
    flops: float
    config_file: ClassVar[str] = "ladder_config.yaml"

    @property
    def name(self) -> str:
        return (f"scratch x{self.fraction:g} seed {self.seed}" if self.kind == "scratch"
                else f"{self.kind} seed {self.seed}")


def base_config(shape: Shape, steps: int, seed: int, out: Path, cache: Path) -> dict[str, Any]:
    return {
        "model_config": dict(shape.model), "precision": "32-true", "accelerator": "cpu", "devices": 1,
        "num_threads": 1, "seed": seed, "out_dir": str(out),
        "data": {"source": shape.source, "vocab_size": shape.vocab_size, "seq_len": 128, "cache_dir": str(cache)},
        "train": {"global_batch_size": 8, "micro_batch_size": 8, "max_steps": steps, "max_norm": 1.0,
                  "log_interval": 50, "save_interval": None, "lr_schedule": "wsd", "lr_decay_fraction": 0.1},
        "eval": {"interval": max(1, steps // 4), "max_iters": shape.eval_iters},
        "optimizer": {"class_path": "torch.optim.AdamW",
                      "init_args": {"lr": 0.003, "weight_decay": 0.1, "betas": [0.9, 0.95]}},
        "rms_monitor": {"every_n_steps": 100},
    }


def scaled(growth: dict[str, Any], small: dict[str, Any], n_layer: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A candidate written for 8 layers, for a shape of ``n_layer`` layers (its layer counts times ``n_layer / 8``).

    Example::

        >>> scaled({"stages": [{"at_fraction": 0.5, "n_layer": 8}]}, {"n_layer": 2}, 16)
        ({'stages': [{'at_fraction': 0.5, 'n_layer': 16}]}, {'n_layer': 4})
    """
    if n_layer % 8:
        raise ValueError(f"n_layer={n_layer}: the candidates are written for 8 layers; give a multiple of 8")
    k = n_layer // 8
    widths = {"n_embd", "intermediate_size", "n_head", "n_query_groups"}
    if k != 1 and (widths & set(small) or any(widths & set(st) for st in growth["stages"])):
        raise ValueError("a candidate that grows width runs at 8 layers only")
    growth = copy.deepcopy(growth)
    for stage in growth["stages"]:
        if "n_layer" in stage:
            stage["n_layer"] *= k
    return growth, {key: v * k if key == "n_layer" else v for key, v in small.items()}


def prepare(run: LadderRun) -> None:
    """Build ``run``'s data cache (tokenizer and token files) in this process."""
    import tempfile

    import yaml

    from lightning_sparkling.pretrain.cli import parse
    from lightning_sparkling.pretrain.measure.measure_runs import prepare_data

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(run.config))
        prepare_data(parse(["--config", str(path)], "plan")[1])


def plan(args: argparse.Namespace) -> list[LadderRun]:
    runs: list[LadderRun] = []
    shape: Shape = args.shape_spec
    per_token = 6 * 8 * 128  # 6 x tokens per step: FLOPs per parameter per step (a rough 1e5 per block-width^2)
    params = 12 * shape.model["n_embd"] ** 2 * shape.n_layer + 2 * shape.vocab_size * shape.model["n_embd"]
    for seed in args.seeds:
        for name in args.candidates:
            growth, small = scaled(*CANDIDATES[name][::-1], shape.n_layer)
            run_dir = args.out / name / f"seed{seed}"
            config = base_config(shape, args.steps, seed, run_dir, args.cache)
            config["model_config"].update(small)
            config["growth"] = growth
            if args.rewarmup_steps is not None:
                for stage in config["growth"]["stages"]:
                    stage["rewarmup_steps"] = args.rewarmup_steps
            runs.append(LadderRun(name, 1.0, seed, config, run_dir, per_token * 0.65 * params * args.steps))
        for fraction in [] if args.no_ladder else args.ladder:
            steps = round(fraction * args.steps)
            run_dir = args.out / "scratch" / f"x{fraction:g}" / f"seed{seed}"
            runs.append(LadderRun("scratch", fraction, seed, base_config(shape, steps, seed, run_dir, args.cache),
                                  run_dir, per_token * params * steps))
    return runs


def _summary(run_dir: Path) -> dict[str, Any] | None:
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return summary if summary.get("status") == "completed" and summary.get("val_loss") is not None else None


def _rms(run_dir: Path) -> dict[str, float]:
    """The final hidden RMS and the largest per-block residual RMS (last logged values)."""
    from lightning_sparkling.dashboards.plotting import load_run

    run = load_run(run_dir / "logs")
    final = {tag: float(values[-1]) for tag, (_, values) in run.scalars.items() if tag.startswith("rms/")}
    residual = [v for t, v in final.items() if t.startswith("rms/residual/")]
    hidden = [v for t, v in final.items() if t.startswith(("rms/final", "rms/hidden"))]
    return {"residual_max": max(residual) if residual else math.nan, "hidden": hidden[0] if hidden else math.nan}


def _loss_at(points: list[tuple[float, float]], flops: float) -> float | None:
    """Scratch's val loss at ``flops``, interpolated in log-FLOPs between the ladder's runs (never extrapolated)."""
    pts = sorted(points)
    for (f0, l0), (f1, l1) in zip(pts, pts[1:]):
        if f0 <= flops <= f1:
            t = (math.log(flops) - math.log(f0)) / (math.log(f1) - math.log(f0))
            return l0 + t * (l1 - l0)
    return None


def report(args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for name in args.candidates:
        per_seed = []
        for seed in args.seeds:
            growth = _summary(args.out / name / f"seed{seed}")
            # the rungs this seed has: a rung past the full run (x1.25) is trained only for a seed whose growth run
            # beat the full-length scratch run, so the other seeds' ladders end at x1
            ladder = {f: _summary(args.out / "scratch" / f"x{f:g}" / f"seed{seed}") for f in args.ladder}
            ladder = {f: s for f, s in ladder.items() if s is not None}
            if growth is None or any(f not in ladder for f in args.ladder if f <= 1.0):
                continue
            points = [(s["flops"], s["val_loss"]) for s in ladder.values()]
            flops, why = scratch_flops_at(points, growth["val_loss"])
            at_equal = _loss_at(points, growth["flops"])
            # the rung nearest the growth run's steps (x1, or cpu-1m's x0.8): the RMS reference and the shape check;
            # the full-length run's FLOPs from it (FLOPs grow linearly with steps at a fixed shape)
            same_steps = min(ladder, key=lambda f: abs(f - 1.0))
            full = ladder[same_steps]
            full_flops = full["flops"] / same_steps
            rms_g = _rms(args.out / name / f"seed{seed}")
            rms_s = _rms(args.out / "scratch" / f"x{same_steps:g}" / f"seed{seed}")
            if growth["total_params"][-1] != full["total_params"][-1]:
                raise SystemExit(f"{name} seed {seed}: the grown model has {growth['total_params'][-1]:,} parameters, "
                                 f"scratch {full['total_params'][-1]:,}: not the same shape")
            per_seed.append({
                "seed": seed, "loss": growth["val_loss"], "flops": growth["flops"],
                "speedup": flops / growth["flops"] if flops else None, "outside": why,
                "delta": growth["val_loss"] - at_equal if at_equal is not None else None,
                "flops_vs_full": growth["flops"] / full_flops,
                "tokens_per_param": growth["tokens"] / growth["total_params"][-1],
                "residual_ratio": rms_g["residual_max"] / rms_s["residual_max"],
                "hidden_ratio": rms_g["hidden"] / rms_s["hidden"]})
        if not per_seed:
            continue
        speedups = [s["speedup"] for s in per_seed if s["speedup"] is not None]
        deltas = [s["delta"] for s in per_seed if s["delta"] is not None]
        row = {"candidate": name, "seeds": len(per_seed), "per_seed": per_seed,
               "speedup": mean_sd(speedups) if len(speedups) == len(per_seed) else None,
               "delta": mean_sd(deltas) if deltas else None,
               "flops_vs_full": statistics.fmean(s["flops_vs_full"] for s in per_seed),
               "tokens_per_param": per_seed[0]["tokens_per_param"],
               "residual_ratio": max(s["residual_ratio"] for s in per_seed),
               "hidden_ratio": max(s["hidden_ratio"] for s in per_seed)}
        rows.append(row)
    lines = ["| candidate | seeds | tokens / param | FLOPs vs 8-layer run | speed-up at equal loss | per seed | "
             "Δ at equal FLOPs | residual RMS / scratch (max) | final hidden / scratch (max) |", "|" + "---|" * 9]
    for r in rows:
        sp = "-" if r["speedup"] is None else f"{r['speedup'][0]:.2f}x ± {r['speedup'][1] or 0:.2f}"
        per = ", ".join(f"{s['speedup']:.2f}x" if s["speedup"] else s["outside"] for s in r["per_seed"])
        dl = "-" if r["delta"] is None else f"{r['delta'][0]:+.3f} ± {r['delta'][1] or 0:.3f}"
        lines.append(f"| {r['candidate']} | {r['seeds']} | {r['tokens_per_param']:.1f} | {r['flops_vs_full']:.2f} | "
                     f"{sp} | {per} | {dl} | {r['residual_ratio']:.2f} | {r['hidden_ratio']:.2f} |")
    table = "\n".join(lines)
    print(table)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"depth_ladder{args.tag}.md").write_text(table + "\n")
    (RESULTS / f"depth_ladder{args.tag}.json").write_text(json.dumps(rows, indent=1) + "\n")
    (RESULTS / f"depth_ladder{args.tag}_runs.json").write_text(json.dumps(run_rows(args), indent=1) + "\n")
    (RESULTS / f"depth_ladder{args.tag}_cells.json").write_text(
        json.dumps([map_cell(r, args) for r in rows
                    if r["seeds"] >= MIN_CELL_SEEDS and all(s["delta"] is not None for s in r["per_seed"])],
                   indent=1) + "\n")
    return rows


def run_rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every finished run's final val loss, FLOPs, steps, parameters and growth steps (what BENCHMARKS lists)."""
    out = []
    for seed in args.seeds:
        dirs = [(f"{name}/seed{seed}", args.out / name / f"seed{seed}") for name in args.candidates]
        dirs += [(f"scratch x{f:g}/seed{seed}", args.out / "scratch" / f"x{f:g}" / f"seed{seed}") for f in args.ladder]
        for label, run_dir in dirs:
            summary = _summary(run_dir)
            if summary is not None:
                out.append({"run": label, "val_loss": summary["val_loss"], "flops": summary["flops"],
                            "steps": summary["steps"], "total_params": summary["total_params"],
                            "growth_at_steps": [e["global_step"] for e in summary.get("growth_events", [])]})
    return out


def candidate_run(shape_name: str, candidate: str, steps: int | None = None) -> Any:
    """The resolved growth run of ``candidate`` at ``shape_name`` (seed 1, nothing written): what a map cell of it
    was measured on (``backfill_sizes.py`` computes the cell's size and ceiling from it)."""
    from lightning_sparkling.pretrain.cli import parse

    shape: Shape = SHAPES[shape_name]
    growth, small = scaled(*CANDIDATES[candidate][::-1], shape.n_layer)
    with tempfile.TemporaryDirectory() as tmp:
        config = base_config(shape, steps or shape.steps, 1, Path(tmp) / "unused", Path(tmp) / "cache")
        config["model_config"].update(small)
        config["growth"] = growth
        path = Path(tmp) / "cell_config.yaml"
        path.write_text(json.dumps(config))
        return parse(["--config", str(path)], "plan")[1]


def cell_where(shape_name: str, candidate: str) -> str:
    """A ladder cell's ``where``: this page's section in docs/BENCHMARKS.md, the shape and the candidate."""
    return f"Evidence that transfers ({shape_name}, {candidate})"


MIN_CELL_SEEDS = 2
"""The fewest seeds a reported candidate needs to become a map cell (the map's scan cells have 2; issue 54 asks 2 at
least for the 1.38M shape and 3 for the others)."""


def map_cell(row: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """A reported candidate of :data:`MIN_CELL_SEEDS`+ seeds as a cell of the measured map (``measured.json``'s
    format; the size fields from the grown model, ``ceiling`` from the growth run's FLOPs over the full scratch run's;
    ``backfill_sizes.py`` computes both again from :func:`candidate_run`)."""
    from lightning_sparkling.pretrain.advice.measured_axes import block_family
    from lightning_sparkling.pretrain.advice.measured_size import cell_size
    from lightning_sparkling.pretrain.advice.run_plan import plan_run
    from lightning_sparkling.pretrain.advice.target import run_schedule

    shape: Shape = args.shape_spec
    run = candidate_run(args.shape, row["candidate"], args.steps)
    run_plan = plan_run(run, advise=False)
    schedule = run_schedule(run_plan.configs, run.stages, run.steps)
    for stage in schedule.get("stages", []):  # 1,699 / 3,397 steps is the schedule's 50%
        stage["at_fraction"] = round(stage["at_fraction"], 3)
    deltas = [s["delta"] for s in row["per_seed"]]
    inits = {st.depth_init for st in run.stages}
    return {"axis": "depth", "recipe": "paper", "schedule": "wsd",
            "growth_at": round(run.stages[0].at_step / run.steps, 3),
            "tokens_per_param": round(row["tokens_per_param"], 1),
            "delta": round(row["delta"][0], 3), "sd": round(row["delta"][1] or 0.0, 3), "seeds": row["seeds"],
            "seeds_above": sum(d > 0 for d in deltas),
            # a seed whose growth run ended outside the ladder (cpu-1m-sp seed 2: above scratch at budget 1) has no
            # speed-up at equal loss, so neither has the cell; its verdict comes from the Δ at equal FLOPs
            **({"speedup": round(row["speedup"][0], 2), "speedup_sd": round(row["speedup"][1] or 0.0, 2)}
               if row["speedup"] is not None else {}),
            **({"init": next(iter(inits))} if inits != {"copy-zero"} else {}),
            "where": cell_where(args.shape, row["candidate"]), **schedule,
            **cell_size(run_plan.final_config, device="cpu", precision="32-true", corpus=shape.source),
            "arch": block_family(run_plan.final_config), "ceiling": round(1 / row["flops_vs_full"], 3)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="quick", choices=list(SHAPES),
                        help="the grown model and corpus (default quick: issue 46's ladder on the standard library)")
    parser.add_argument("--seeds", default="1", help="comma-separated seeds (default 1)")
    parser.add_argument("--candidates", default=",".join(CANDIDATES), help=f"of {', '.join(CANDIDATES)}")
    parser.add_argument("--steps", type=int, default=None,
                        help="steps of every growth run (default: the shape's, 20.8 tokens per grown parameter)")
    parser.add_argument("--ladder", default=None, help="scratch run lengths, fractions of --steps (default: the "
                                                       "shape's; quick: 0.4,0.55,0.75,1.0)")
    parser.add_argument("--rewarmup-steps", type=int, default=None,
                        help="every stage's rewarmup_steps (default: the recipe's, 250; a short --steps needs fewer)")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--no-ladder", action="store_true",
                        help="train the candidates only (another invocation trains the shared ladder)")
    parser.add_argument("--out", type=Path, default=None,
                        help="runs directory (default runs/depth_ladder, runs/depth_ladder_<shape> for other shapes)")
    parser.add_argument("--tag", default=None, help="suffix of the results files (default: _<shape>, none for quick)")
    parser.add_argument("--report-only", action="store_true")
    args = parser.parse_args(argv)
    args.shape_spec = SHAPES[args.shape]
    quick = args.shape == "quick"
    args.steps = args.steps or args.shape_spec.steps
    args.out = args.out or ROOT / "runs" / ("depth_ladder" if quick else f"depth_ladder_{args.shape}")
    args.tag = args.tag if args.tag is not None else ("" if quick else f"_{args.shape}")
    args.seeds = [int(s) for s in args.seeds.split(",")]
    args.candidates = [c for c in args.candidates.split(",") if c]
    unknown = [c for c in args.candidates if c not in CANDIDATES]
    if unknown:
        parser.error(f"--candidates: unknown {unknown}; choose from {', '.join(CANDIDATES)}")
    args.ladder = ([float(f) for f in args.ladder.split(",")] if args.ladder else list(args.shape_spec.ladder))
    args.cache = args.out / "cache"
    if not args.report_only:
        runs = plan(args)
        env = {"OMP_NUM_THREADS": "1"}
        if args.jobs > 1:
            prepare(runs[0])  # the tokenizer and token files, once, before runs start side by side
        failed = train_runs(runs, args.jobs, env=env)
        for run in failed:
            print(f"FAILED: {run.name}: see {run.run_dir / 'run.log'}")
    report(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
