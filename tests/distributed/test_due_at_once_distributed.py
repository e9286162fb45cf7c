"""Two stages due at once when a fit starts (stages added to a run resumed past them), under FSDP1 and FSDP2 on 2
CPU ranks, run by due_at_once_script.py: the two growths in a row end where one process ends and ranks agree.

Under FSDP1 the first growth's loss check (a forward without backward) left the root unit unsharded, and the second
growth's optimizer-state gather then read that stale full buffer (the weights) instead of the state it had written
into the shards: the root's Adam moments became weights and training went to NaN. ``FSDP1Backend.reshard`` and
``grow_fsdp1`` now reshard every unit first (:func:`~lightning_sparkling.parallel.fsdp1.reshard_units`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from _dist import run_script

SCRIPT = Path(__file__).resolve().parents[1] / "due_at_once_script.py"
pytestmark = pytest.mark.slow


def _run(*args: str) -> None:
    run_script(SCRIPT, *args)


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("due_at_once")
    for phase in ("first", "resume"):
        _run(str(path), "single", phase)
    return path


@pytest.mark.parametrize("mode", ["fsdp1", "fsdp2"])
def test_two_growths_due_at_once_match_one_process(out, mode):
    for phase in ("first", "resume"):
        _run(str(out), mode, phase)
    single = torch.load(out / "final-single-rank0.pt")
    ranks = [torch.load(out / f"final-{mode}-rank{r}.pt") for r in (0, 1)]
    assert ranks[0].keys() == single.keys()
    num = den = 0.0
    for name, value in ranks[0].items():
        assert torch.equal(value, ranks[1][name]), name
        assert torch.isfinite(value).all(), name
        num += float((value - single[name]).norm() ** 2)
        den += float(single[name].norm() ** 2)
    assert (num / den) ** 0.5 < 1e-4
