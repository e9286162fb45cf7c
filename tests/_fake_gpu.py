"""A faked GPU node for the placement tests (``torch.cuda`` reports ``count`` GPUs; nothing runs on them) and a
stand-in for ``sparkling pretrain`` that records the environment it was started with (``env.json`` in its run folder)
and writes a completed ``summary.json``, after waiting (20 s at most) until ``FAKE_RUNS`` runs under ``FAKE_ROOT``
have started: the runs it records were side by side."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

FAKE_PRETRAIN = """
import json, os, sys, time
import yaml
config = yaml.safe_load(open(sys.argv[sys.argv.index("--config") + 1]))
out = config["out_dir"]
env = {k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "MASTER_PORT")}
open(os.path.join(out, "env.json"), "w").write(json.dumps(env))
end = time.time() + 20
while time.time() < end and sum(f == "env.json" for _, _, fs in os.walk(os.environ["FAKE_ROOT"])
                                for f in fs) < int(os.environ["FAKE_RUNS"]):
    time.sleep(0.05)
budget = os.path.basename(os.path.dirname(out)).removeprefix("scratch-x")  # growth: between scratch x1 and x2
loss = 3.05 if budget == "growth" else 3.2 - 0.1 * float(budget)
summary = {"status": "completed", "val_loss": loss, "steady_seconds": 1.0, "wall_clock_seconds": 1.0}
open(os.path.join(out, "summary.json"), "w").write(json.dumps(summary))
"""


def fake_gpu_node(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, count: int = 8) -> None:
    """``torch.cuda`` says ``count`` GPUs, no CUDA_VISIBLE_DEVICES or MASTER_PORT is set, ``sparkling pretrain`` is
    :data:`FAKE_PRETRAIN` and no data cache is built (the stand-in reads none)."""
    import torch

    from lightning_sparkling.pretrain.measure import command, measure_runs

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("MASTER_PORT", raising=False)
    script = tmp_path / "fake_pretrain.py"
    script.write_text(FAKE_PRETRAIN)
    monkeypatch.setattr(measure_runs, "PRETRAIN", (sys.executable, str(script)))
    monkeypatch.setattr(measure_runs, "prepare_data", lambda run: None)
    monkeypatch.setattr(command, "prepare_data", lambda run: None)


def launched(root: Path) -> dict[str, dict]:
    """Each started run's recorded environment, by its folder under ``root``."""
    return {str(p.parent.relative_to(root)): json.loads(p.read_text()) for p in sorted(root.rglob("env.json"))}
