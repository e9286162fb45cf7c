"""Make the README's dashboard image from the quickstart, so the picture cannot go stale.

Runs ``sparkling pretrain --config examples/quickstart.yaml`` into ``--out-dir`` (a fresh run: a previous run there
is removed first; ``--reuse`` keeps a completed one), then ``sparkling plot OUT_DIR/logs`` into
``docs/img/quickstart_dashboard.png``, and prints the run's summary table (what the README quotes). From the
repository root, after changing the quickstart::

    python docs/make_dashboard_image.py

Extra arguments after ``--`` go to ``sparkling pretrain`` (the tests shrink the run with them), e.g.
``python docs/make_dashboard_image.py --out-dir /tmp/q --image /tmp/q.png -- --train.max_steps 20``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "quickstart.yaml"
IMAGE = ROOT / "docs" / "img" / "quickstart_dashboard.png"
TITLE = "sparkling pretrain --config examples/quickstart.yaml, drawn by sparkling plot"


def _sparkling(*args: str) -> list[str]:
    return [sys.executable, "-m", "lightning_sparkling.pretrain.cli", *args]


def _completed(out_dir: Path) -> bool:
    summary = out_dir / "summary.json"
    return summary.is_file() and json.loads(summary.read_text()).get("status") == "completed"


def main(argv: Sequence[str] | None = None) -> int:
    """Train (or reuse) the quickstart, draw its dashboard; returns the exit status.

    Args:
        argv: ``[--out-dir DIR] [--image PNG] [--reuse] [--dpi N] [-- PRETRAIN_ARGS...]``.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    argv = argv[:argv.index("--")] if "--" in argv else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=ROOT / "out" / "quickstart-dashboard",
                        help="the quickstart's out_dir (default: out/quickstart-dashboard)")
    parser.add_argument("--image", type=Path, default=IMAGE, help="the image to write")
    parser.add_argument("--reuse", action="store_true", help="keep a completed run in --out-dir instead of rerunning")
    parser.add_argument("--dpi", type=int, default=100)
    args = parser.parse_args(argv)
    out_dir = args.out_dir.resolve()
    if not (args.reuse and _completed(out_dir)):
        if out_dir.exists():
            if not ((out_dir / "summary.json").exists() or (out_dir / "logs").is_dir()):
                parser.error(f"--out-dir {out_dir} exists and is not a sparkling run (no summary.json, no logs/): "
                             "give another folder")
            shutil.rmtree(out_dir)  # a fresh run: logs of an older quickstart would mix into the plot
        start = time.perf_counter()
        subprocess.run(_sparkling("pretrain", "--config", str(CONFIG), "--out_dir", str(out_dir), *extra),
                       check=True, cwd=ROOT)
        print(f"[make_dashboard_image] the quickstart took {time.perf_counter() - start:.0f} s (wall clock)")
    args.image.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(_sparkling("plot", str(out_dir / "logs"), "--out", str(args.image), "--title", TITLE,
                              "--dpi", str(args.dpi)), check=True, cwd=ROOT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
