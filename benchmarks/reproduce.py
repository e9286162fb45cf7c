"""Does growth pay? The paper's comparisons, with seeds: a grid of ``sparkling pretrain`` runs and its tables.

    python benchmarks/reproduce.py --quick                      # the CPU subset (3 seeds, joint 2x, 18 runs)
    python -m benchmarks.reproduce --size cpu --jobs 2          # the same, as a module

The harness lives in the package ``benchmarks/repro/`` (one job per module: ``sizes``, ``rows``, ``grid``,
``tables``, ``scan``, ``export``, ``cli``; its docstring is the manual); this script runs it and re-exports its
names, so ``import reproduce`` (with ``benchmarks/`` on the path) keeps working. The statistics of a cell (speed-up
at equal loss, ``mean_sd``) are those of ``sparkling measure`` (``lightning_sparkling.pretrain.measure.measure_stats``).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from repro import *  # noqa: F403
from repro import __doc__ as MANUAL  # noqa: F401
from repro import main

if __name__ == "__main__":
    raise SystemExit(main())
