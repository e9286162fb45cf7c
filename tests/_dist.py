"""Shared pieces of the 2-rank tests: run a script of the tests folder in a subprocess (one torch thread), compare
state dicts, load each rank's final state, and the module fixtures of the scripts that train one process and each
backend (`single`/`<mode>` with `--accumulate`, then resumed from checkpoints)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import torch


def run_script(script: Path, *args: str) -> None:
    """Run ``script`` with ``args`` in a fresh interpreter; fail with its output's tail if it fails."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]


def rel_diff(a: dict, b: dict) -> float:
    """``||a - b|| / ||b||`` over every tensor of two state dicts with the same keys (float64)."""
    assert a.keys() == b.keys()
    num = sum(float((a[k].double() - b[k].double()).norm() ** 2) for k in a)
    den = sum(float(b[k].double().norm() ** 2) for k in b)
    return (num / den) ** 0.5


def final_states(out: Path, run: str, tag: str = "") -> list[dict]:
    """What ranks 0 and 1 saved at the end of ``run`` (``final<tag>-rank<r>.pt``)."""
    return [torch.load(out / run / f"final{tag}-rank{r}.pt") for r in (0, 1)]


def backend_fixtures(script: Path, runs: Sequence[tuple[str, int, tuple[str, ...]]], flags: Sequence[str] = ()
                     ) -> tuple[Callable, Callable]:
    """``(singles, multi)`` module fixtures for ``script``: ``singles`` trains the one-process twin (the global batch
    of 2 ranks) per accumulation and gives its rank-0 final state by accumulation; ``multi`` trains each
    ``(backend, accumulation, checkpoints to resume from)`` of ``runs`` and resumes from each checkpoint (tagged
    ``-<kind>``), giving ``(mode, accumulation, out, resumes)``. ``flags``: passed to every run (a variant of the
    script, e.g. ``--first-k=1``)."""

    @pytest.fixture(scope="module")
    def singles(tmp_path_factory) -> dict[int, dict]:
        out = tmp_path_factory.mktemp("single")
        found = {}
        for acc in sorted({acc for _, acc, _ in runs}):
            run_script(script, str(out), "single", f"--accumulate={acc}", *flags)
            found[acc] = torch.load(out / f"single-acc{acc}" / "final-rank0.pt")
        return found

    @pytest.fixture(scope="module", params=runs, ids=lambda r: f"{r[0]}-acc{r[1]}")
    def multi(request, tmp_path_factory) -> tuple[str, int, Path, tuple[str, ...]]:
        mode, acc, resumes = request.param
        out = tmp_path_factory.mktemp(mode)
        run_script(script, str(out), mode, f"--accumulate={acc}", *flags)
        run = f"{mode}-acc{acc}"
        for kind in resumes:
            run_script(script, str(out), mode, f"--accumulate={acc}", *flags, "--resume",
                       str(out / run / f"{kind}.ckpt"), f"--tag=-{kind}")
        return mode, acc, out, resumes

    return singles, multi
