"""Issue 53's done-when check, with docs/ARCHITECTURE.md's "Write your own axis" example itself (read from the page,
``tests/_rope_axis_source.py``): a config-field axis loaded through a bare ``--plugins NAME``, its stage without
``rewarmup_steps``, trains a tiny ``sparkling pretrain`` run (a real subprocess, as a user runs it), and its growth is
named in the log (``rope_base 10000 -> 40000``, the axis' detail) and the summary (``summary.json``'s ``growth`` and
``growth_events``, i.e. ``GrowthCallback.summaries``); the grown checkpoint's config holds the new ``rope_base``, and
the stage, which adds no entries, gets no ``growth/lr_new`` tag."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from _rope_axis_source import ROPE_AXIS

ROOT = Path(__file__).resolve().parents[2]


def _tiny_run(tmp_path: Path) -> Path:
    config = {
        "model_config": {"name": "rope-guide", "n_layer": 1, "n_embd": 32, "n_head": 4, "n_query_groups": 4,
                         "head_size": 8, "intermediate_size": 64, "mlp_class_name": "LLaMAMLP",
                         "norm_class_name": "RMSNorm", "bias": False, "parallel_residual": False,
                         "rotary_percentage": 1.0},
        "out_dir": str(tmp_path / "out"), "precision": "32-true", "accelerator": "cpu", "devices": 1,
        "num_threads": 1,
        "data": {"vocab_size": 512, "seq_len": 32, "max_files": 20, "max_bytes": 150_000, "val_percent": 20,
                 "cache_dir": str(tmp_path / "cache")},
        "train": {"global_batch_size": 4, "micro_batch_size": 4, "max_steps": 8, "lr_warmup_steps": 2,
                  "save_interval": None, "log_interval": 1},
        "eval": {"interval": 100, "max_iters": 1},
        "growth": {"stages": [{"at_step": 4, "rope_base": 40000}]},  # no rewarmup_steps
        "rms_monitor": None,
    }
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_the_guides_axis_trains_through_a_bare_plugins_name_without_rewarmup_keys(tmp_path):
    (tmp_path / "my_rope_axis.py").write_text(ROPE_AXIS, encoding="utf-8")
    config = _tiny_run(tmp_path)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "OMP_NUM_THREADS": "1"}
    out = subprocess.run([sys.executable, "-m", "lightning_sparkling.pretrain.cli", "pretrain", "--config", str(config),
                          "--plugins", "my_rope_axis"], capture_output=True, text=True, timeout=600, cwd=tmp_path,
                         env=env, check=False)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-3000:]
    assert "Traceback" not in log
    growth_lines = [line.split() for line in log.splitlines() if line.strip().startswith("rope_base")]
    assert ["rope_base", "10000", "->", "40000", "RoPE", "cache", "rebuilt"] in growth_lines, log[-3000:]  # the log
    assert "none applies: the stage adds no new entries" in log  # no recipe note about new entries it has not
    assert "growth.recipe: auto is" not in log and "rewarmup" not in log
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 8
    assert summary["growth"] == [{"stage": 0, "at_step": 4, "widths": {}, "sizes": {"rope_base": 40000}}]
    (event,) = summary["growth_events"]  # GrowthCallback.summaries
    assert event["sizes"] == {"rope_base": [10000, 40000]} and event["new_entries"] is False
    final = yaml.safe_load((tmp_path / "out" / "final" / "model_config.yaml").read_text())
    assert final["rope_base"] == 40000
    from lightning_sparkling.dashboards.plotting import load_run

    tags = set(load_run(tmp_path / "out" / "logs").scalars)
    assert "growth/event" in tags and not any(tag.startswith("growth/lr_new") for tag in tags), sorted(tags)
