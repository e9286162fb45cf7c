"""The growth fuzzer's command line (the package is ``benchmarks/fuzz/``: :mod:`fuzz.programs` draws the programs,
:mod:`fuzz.checks` grows and checks them, :mod:`fuzz.report` shrinks failures and writes the report).

Example::

    python benchmarks/fuzz_growth.py --seeds 0:200                        # the rate, counts and failures
    python benchmarks/fuzz_growth.py --seeds 0:20000 --out benchmarks/results/fuzz_growth.json
    python benchmarks/fuzz_growth.py --repro '{"seed": ..., "family": ..., "config": ..., "stages": [...]}'
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fuzz import *  # noqa: F403
from fuzz import main

if __name__ == "__main__":
    sys.exit(main())
