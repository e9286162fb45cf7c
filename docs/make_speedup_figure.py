"""Draw the README's "where growth pays" figure from the measured map, so the picture cannot go stale.

Reads ``lightning_sparkling/pretrain/advice/measured.json`` and plots, for every cell with a measured speed-up at
equal loss, that speed-up against the cell's training tokens per parameter, one panel per axis, with the seeds'
spread (``speedup_sd``) as error bars and the schedule's ceiling (its saving if the grown run matched scratch token
for token) as a bar marker above the point. Prints the plotted points as JSON lines. From the repository root::

    python docs/make_speedup_figure.py [--map PATH] [--image PNG]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MAP = ROOT / "lightning_sparkling" / "pretrain" / "advice" / "measured.json"
IMAGE = ROOT / "docs" / "img" / "speedup_at_equal_loss.png"
# the panels, in reading order: the map's axis names each panel shows
PANELS = {"width": ("joint", "hidden", "inner", "two-stage", "hidden+heads"), "depth": ("depth",),
          "depth + width": ("depth+width",), "experts": ("upcycle", "experts", "experts+topk")}
COLORS = {"cosine": "tab:blue", "wsd": "tab:orange"}


def points(cells: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The plotted points: one per cell with a measured speed-up.

    Args:
        cells: the ``cells`` of measured.json.

    Returns:
        One dict per point: ``panel``, ``axis``, ``recipe``, ``schedule``, ``tokens_per_param``, ``speedup``,
        ``speedup_sd``, ``ceiling``, ``params`` and ``where`` (the BENCHMARKS section that measured it).
    """
    panel_of = {axis: panel for panel, axes in PANELS.items() for axis in axes}
    keys = ("axis", "recipe", "schedule", "tokens_per_param", "speedup", "speedup_sd", "ceiling", "params", "where")
    return [{"panel": panel_of[c["axis"]], **{k: c.get(k) for k in keys}} for c in cells
            if c.get("speedup") is not None]


def draw(map_path: Path = MAP, image: Path = IMAGE, dpi: int = 110) -> list[dict[str, Any]]:
    """Write the figure of ``map_path``'s speed-ups to ``image``.

    Args:
        map_path: a measured.json.
        image: the PNG to write (its folder is created).
        dpi: the image's resolution.

    Returns:
        The plotted points (see :func:`points`).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plotted = points(json.loads(map_path.read_text(encoding="utf-8"))["cells"])
    panels = [p for p in PANELS if any(q["panel"] == p for q in plotted)]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 3.6), sharex=True, sharey=True,
                             squeeze=False)
    ticks = [1, 2, 5, 10, 20, 40]
    for ax, panel in zip(axes[0], panels):
        shown: dict[float, int] = {}
        for q in (q for q in plotted if q["panel"] == panel):
            color = COLORS.get(q["schedule"], "tab:gray")
            k = shown[q["tokens_per_param"]] = shown.get(q["tokens_per_param"], -1) + 1
            x = q["tokens_per_param"] * 1.04**k  # cells at one ratio side by side, not on top of each other
            ax.errorbar(x, q["speedup"], yerr=q["speedup_sd"], fmt="o", ms=4, color=color, capsize=2, lw=1)
            if q["ceiling"] is not None:  # the schedule's ceiling, joined to its point
                ax.plot([x, x], [q["speedup"], q["ceiling"]], color=color, lw=0.5, ls=":")
                ax.plot(x, q["ceiling"], marker="_", ms=8, mew=1.5, color=color)
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set_xscale("log")
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlim(1.2, 45)
        ax.set_title(panel)
        ax.set_xlabel("training tokens per parameter")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("speed-up at equal loss (x)")
    handles = [plt.Line2D([], [], color=c, marker="o", ls="", label=f"{s} (mean ± sd of seeds)")
               for s, c in COLORS.items()]
    handles.append(plt.Line2D([], [], color="black", marker="_", ms=10, mew=1.5, ls="", label="schedule's ceiling"))
    fig.legend(handles=handles, loc="lower center", ncol=3, frameon=False, fontsize=8)
    fig.suptitle("Compute to reach scratch's loss: scratch FLOPs / growth FLOPs (1.0: no saving)", fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    image.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(image, dpi=dpi)
    plt.close(fig)
    return plotted


def main(argv: Sequence[str] | None = None) -> int:
    """Draw the figure and print its points; returns the exit status.

    Args:
        argv: ``[--map PATH] [--image PNG] [--dpi N]``.
    """
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--map", type=Path, default=MAP, help="the measured map (default: the package's)")
    parser.add_argument("--image", type=Path, default=IMAGE, help="the image to write")
    parser.add_argument("--dpi", type=int, default=110)
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    for q in draw(args.map, args.image, args.dpi):
        print(json.dumps(q))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
