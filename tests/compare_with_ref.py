"""Run the same tiny 12-step ``sparkling pretrain`` (growth at step 6) with this checkout and with a reference
checkout, and compare the final weights (bit for bit) and the CLI output (timings and paths masked).

    git worktree add --detach /tmp/ref main
    python tests/compare_with_ref.py /tmp/ref [--schedule wsd] [--recipe recommended]

Exit status 0 when both match. Not collected by pytest (a refactoring check, not a test).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import yaml

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE / "tests" / "pretrain"))
from test_cli import tiny_config  # noqa: E402


def run(root: Path, config: dict, work: Path) -> tuple[str, dict]:
    out = work / "out"
    path = work / "run.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-m", "lightning_sparkling.pretrain.cli", "pretrain", "--config", str(path),
                           "--out_dir", str(out)], env=env, capture_output=True, text=True, cwd=root)
    if proc.returncode != 0:
        raise SystemExit(f"{root}: exit {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    final = sorted(out.rglob("*.ckpt"), key=lambda p: p.stat().st_mtime)[-1]
    state = torch.load(final, map_location="cpu", weights_only=False)["state_dict"]
    text = proc.stdout + proc.stderr
    text = text.replace(str(work), "<work>").replace(str(root), "<root>")
    text = re.sub(r"\d+(\.\d+)?\s*(s|ms|it/s|s/it|MiB|GiB|tok/s)\b", "<num>", text)
    text = re.sub(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d\S*", "<time>", text)
    text = re.sub(r"/tmp/\S+?/(ref|this)/", "<tmp>/", text).replace("WidthGrowthCallback", "GrowthCallback")  # renamed
    text = re.sub(r"corpus-[0-9a-f]+", "corpus-<hash>", text)
    lines = [re.sub(r"[ \u2500-\u257f]+", " ", line).strip() for line in text.splitlines() if "\u2501" not in line]
    return "\n".join(line for line in lines if line), state


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("ref", type=Path)
    parser.add_argument("--schedule", default="cosine")
    parser.add_argument("--recipe", default=None)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, root in (("ref", args.ref.resolve()), ("this", HERE)):
            work = Path(tmp) / name
            work.mkdir()
            config = tiny_config(work / "cache", train={"lr_schedule": args.schedule, "lr_decay_fraction": 0.25})
            if args.recipe:
                config["growth"]["recipe"] = args.recipe
            results[name] = run(root, config, work)
    (ref_text, ref_state), (text, state) = results["ref"], results["this"]
    same_weights = ref_state.keys() == state.keys() and all(torch.equal(ref_state[k], state[k]) for k in ref_state)
    ref_lines, lines = ref_text.splitlines(), text.splitlines()
    diff = [(a, b) for a, b in zip(ref_lines, lines) if a != b]
    print(f"weights identical: {same_weights} ({len(state)} tensors)")
    print(f"output lines: ref {len(ref_lines)}, this {len(lines)}, differing {len(diff)}")
    for a, b in diff[:20]:
        print(f"- {a}\n+ {b}")
    return 0 if same_weights and not diff and len(ref_lines) == len(lines) else 1


if __name__ == "__main__":
    raise SystemExit(main())
