"""The GPU examples, shrunk to a few dozen steps so that each grows, on one GPU: do they run, grow and fit there?

    python benchmarks/gpu_examples.py                                # every GPU example, 40 steps each
    python benchmarks/gpu_examples.py --examples joint_2x,depth_2x --steps 60 --jobs 2

Each ``examples/<name>.yaml`` keeps its model, batch, precision, optimizer and growth stages; only the length is
changed: ``train.max_tokens`` becomes ``--steps`` steps, each stage's ``at_tokens`` keeps its share of the run, the
corpus is the standard library (``data.source: stdlib``, the example's vocabulary: a tokenizer of seconds, where
``stdlib+site-packages`` takes minutes to build on a machine with many packages), evaluation runs at half the run and
at its end on 4 batches, and no checkpoint is kept but ``final/``. Per example: whether it finished and grew at the
planned steps, its wall-clock and fit seconds, its parameters before and after, and the final val loss (a few
dozen steps: the mechanics, not a result). Each example's row is printed, and ``results/gpu_examples.json``
rewritten, as soon as it ends, so a run cut short keeps what finished.

Not yet run to its end: its one attempt (one H100, 4 examples at a time, the last 3 minutes of a session's device
time) was cut off at 185 s before any example had ended, and printed nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EXAMPLES = ("dense_inner_2x", "hidden_2x", "joint_2x", "depth_2x", "olmoe_inner_2x", "two_stage",
            "pythia_70m_to_160m")


def shrink(config: dict, steps: int, out_dir: Path) -> tuple[dict, list[int]]:
    """``config`` at ``steps`` steps, its stages at the same shares of the run; the stages' steps."""
    train = config["train"]
    tokens_per_step = train["global_batch_size"] * config["data"]["seq_len"]
    total = train.pop("max_tokens")
    train["max_tokens"] = steps * tokens_per_step
    train["save_interval"] = None
    at_steps = []
    for stage in config["growth"]["stages"]:
        at = max(1, round(stage.pop("at_tokens") / total * steps))
        stage["at_step"] = at
        stage["rewarmup_steps"] = max(1, min(stage.get("rewarmup_steps", 1), (steps - at) // 2))
        at_steps.append(at)
    config["data"] = {**config["data"], "source": "stdlib", "num_workers": 0}
    config["eval"] = {"interval": steps // 2, "max_iters": 4}
    if config.get("rms_monitor"):
        config["rms_monitor"] = {"every_n_steps": max(1, steps // 8)}
    config["out_dir"] = str(out_dir)
    return config, at_steps


def run_one(name: str, steps: int, work: Path, timeout: float) -> dict:
    config = yaml.safe_load((ROOT / "examples" / f"{name}.yaml").read_text())
    config, at_steps = shrink(config, steps, work / name)
    work.mkdir(parents=True, exist_ok=True)
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "lightning_sparkling.pretrain.cli", "pretrain", "--config",
                               str(path)], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "PYTHONWARNINGS": "ignore"})
        rc, tail = proc.returncode, (proc.stdout + proc.stderr)[-1500:]
    except subprocess.TimeoutExpired:
        rc, tail = "timeout", ""
    row = {"example": name, "rc": rc, "wall_s": round(time.perf_counter() - t0, 1), "planned_growth_steps": at_steps}
    summary = work / name / "summary.json"
    if summary.is_file():
        s = json.loads(summary.read_text())
        row.update({"steps": s["steps"], "grew_at": [e["global_step"] for e in s["growth_events"]],
                    "params": [s["total_params"][0], s["total_params"][-1]] if isinstance(s.get("total_params"), list)
                    else s.get("total_params"), "fit_s": s.get("fit_seconds"), "val_loss": s.get("val_loss")})
    if rc != 0:
        row["tail"] = tail
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", default=",".join(EXAMPLES), help="comma list (default: every GPU example)")
    parser.add_argument("--steps", type=int, default=40, help="steps per example (default 40)")
    parser.add_argument("--jobs", type=int, default=1, help="examples at once on the GPU (default 1)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per example (default 600)")
    parser.add_argument("--work", default=None, help="folder for the runs (default: a temporary one)")
    parser.add_argument("--out", default=str(HERE / "results" / "gpu_examples.json"), help="JSON path")
    args = parser.parse_args()
    names = args.examples.split(",")
    unknown = [n for n in names if n not in EXAMPLES]
    if unknown:
        parser.error(f"--examples: unknown {', '.join(unknown)} (known: {', '.join(EXAMPLES)})")
    work = Path(args.work or tempfile.mkdtemp(prefix="gpu_examples_"))
    work.mkdir(parents=True, exist_ok=True)
    import torch

    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    head = ["| example | finished | grew at (planned) | parameters | wall-clock (s) | fit (s) | val loss |",
            "|---|---|---|---|---|---|---|"]
    print("\n".join(head), flush=True)
    rows, lines = [], list(head)
    with ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(run_one, n, args.steps, work, args.timeout) for n in names]
        for future in as_completed(futures):  # each row as its example ends, the JSON rewritten each time
            r = future.result()
            rows.append(r)
            lines.append(f"| {r['example']} | {'yes' if r['rc'] == 0 else r['rc']} | {r.get('grew_at', '-')} "
                         f"({r['planned_growth_steps']}) | {r.get('params', '-')} | {r['wall_s']} | "
                         f"{r.get('fit_s', '-')} | {r.get('val_loss', '-')} |")
            print(lines[-1], flush=True)
            if r["rc"] != 0:
                print(f"--- {r['example']}: {r['rc']}\n{r['tail']}", flush=True)
            out.write_text(json.dumps({"device": device, "steps": args.steps, "jobs": args.jobs, "rows": rows,
                                       "table": "\n".join(lines)}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0 if all(r["rc"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
