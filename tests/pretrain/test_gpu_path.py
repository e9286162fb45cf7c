"""The GPU-shaped path on the CPU (issue 45): every GPU run used to fail at its first optimizer step, because the
default fused AdamW with the default clipping (``train.max_norm: 1.0``) was refused by Lightning's mixed-precision
plugin, and every CPU test of the command line pinned ``32-true``. Here each example trains shortened in its OWN
precision (``bf16-mixed`` where it says so), optimizer and clipping, and must grow and end with a finite loss; a small
matrix runs the quickstart's model kind in every precision a user picks, with each optimizer kernel, under DDP and
FSDP2, compiled, with activation checkpointing, resumed, and through ``sparkling measure``.

The models are shrunk (widths / 16, layers / 6, experts / 4, a vocabulary of 512, 32-token windows, a few steps): the
code path is the example's, the size is not.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import yaml

from lightning_sparkling.pretrain.cli import main
from tests.pretrain.test_cli import tiny_config, write_config

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_examples  # noqa: E402  (benchmarks/: the GPU smoke shrinks the examples the same way with --tiny)

GPU_EXAMPLES = sorted(p for p in (ROOT / "examples").glob("*.yaml") if p.stem != "quickstart")
STEPS = 6


def shrink_example(path: Path, out: Path, cache: Path) -> tuple[dict, list[int]]:
    """The example at ``path``, shortened to :data:`STEPS` steps and shrunk (``gpu_examples.py --tiny``), keeping
    its precision, optimizer, clipping, tied embeddings, accumulation, growth stages (at the same shares of the run)
    and RMS monitor. Returns the config and the steps its stages grow at."""
    config, at_steps = gpu_examples.shrink(yaml.safe_load(path.read_text()), STEPS, out, tiny=True)
    config["data"]["cache_dir"] = str(cache)
    config["accelerator"] = "cpu"
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
    assert config["train"]["global_batch_size"] > config["train"]["micro_batch_size"]  # accumulation > 1
    cfg = write_config(tmp_path / f"{path.stem}.yaml", config)
    assert main(["pretrain", "--config", str(cfg)]) == 0
    summary = _grew_and_finite(tmp_path / "out", at_steps)
    assert summary["steps"] == STEPS


# ---------------------------------------------------------------------------------------------------------- matrix
OPTIMIZERS = {
    "fused": {"class_path": "torch.optim.AdamW", "init_args": {"lr": 0.003, "weight_decay": 0.1, "betas": [0.9, 0.95]}},
    "foreach": {"class_path": "torch.optim.AdamW",
                "init_args": {"lr": 0.003, "weight_decay": 0.1, "betas": [0.9, 0.95], "foreach": True}},
    "muon": {"class_path": "torch.optim.Muon", "init_args": {"lr": 0.02, "adjust_lr_fn": "match_rms_adamw"}},
}


def matrix_config(cache: Path, out: Path, precision: str, kernel: str = "fused", **sections) -> dict:
    """The quickstart's model kind (LLaMAMLP, RMSNorm, no bias) at test_cli's tiny size: 8 steps of 4 sequences
    (accumulation 1; the examples above accumulate), a joint width growth at step 4, clipping at 1.0."""
    config = tiny_config(cache, precision=precision, optimizer=OPTIMIZERS[kernel], out_dir=str(out), **sections)
    config["train"].update(max_steps=8, global_batch_size=4, micro_batch_size=4, save_interval=None, max_norm=1.0)
    config["eval"] = {"interval": 4, "max_iters": 1}
    config["growth"]["stages"][0].update(at_step=4, rewarmup_steps=2)
    return config


def _train(tmp_path: Path, config: dict, *args: str) -> dict:
    path = write_config(tmp_path / "run.yaml", config)
    assert main(["pretrain", "--config", str(path), *args]) == 0
    return _grew_and_finite(Path(config["out_dir"]), [4])


def _final(out: Path) -> dict:
    import torch

    return torch.load(out / "final" / "lit_model.pth", weights_only=True)


@pytest.mark.parametrize("kernel", list(OPTIMIZERS))
@pytest.mark.parametrize("precision", ["32-true", "bf16-mixed", "bf16-true"])
def test_precision_and_optimizer_matrix_trains_clips_and_grows(precision, kernel, tmp_path, cache):
    summary = _train(tmp_path, matrix_config(cache, tmp_path / "out", precision, kernel))
    assert summary["steps"] == 8 and summary["final_model_config"]["n_embd"] == 64
    assert summary["val_loss"] is not None and math.isfinite(summary["val_loss"])


def test_fused_and_foreach_end_in_the_same_place_under_bf16_mixed(tmp_path, cache):
    """The clipped fused step is foreach's within float tolerance, through the whole CLI run and its growth."""
    outs = {}
    for kernel in ("fused", "foreach"):
        outs[kernel] = tmp_path / kernel
        _train(tmp_path, matrix_config(cache, outs[kernel], "bf16-mixed", kernel))
    fused, foreach = _final(outs["fused"]), _final(outs["foreach"])
    import torch

    for name in fused:
        torch.testing.assert_close(fused[name], foreach[name], rtol=1e-3, atol=1e-4, msg=lambda m: f"{name}: {m}")


def test_bf16_mixed_resume_from_mid_run_ends_bit_for_bit_where_the_run_ends(tmp_path, cache):
    """A Lightning checkpoint after the growth (step 6), resumed in bf16-mixed with fused AdamW and clipping."""
    import torch

    config = matrix_config(cache, tmp_path / "full", "bf16-mixed")
    config["train"]["save_interval"] = 6
    _train(tmp_path, config)
    ckpt = tmp_path / "full" / "checkpoints" / "step-00000006.ckpt"
    assert ckpt.is_file()
    resumed = dict(config, out_dir=str(tmp_path / "resumed"))
    summary = _train(tmp_path, resumed, "--resume", str(ckpt))
    assert summary["resumed_from"] == str(ckpt)
    full, again = _final(tmp_path / "full"), _final(tmp_path / "resumed")
    assert full.keys() == again.keys() and all(torch.equal(full[k], again[k]) for k in full)


def _groups(ckpt: Path) -> list[dict]:
    import torch

    return torch.load(ckpt, weights_only=False, map_location="cpu")["optimizer_states"][0]["param_groups"]


@pytest.mark.parametrize("first, then", [("fused", "foreach"), ("foreach", "fused")])
def test_resume_runs_the_kernel_this_run_asks_for(first, then, tmp_path, cache, caplog):
    """Issue 45, item 2: torch restores each param group's ``fused`` / ``foreach`` from the checkpoint; the resumed
    run must use the kernel of ITS spec, say so once, and not crash. Read from the optimizer state it saves."""
    config = matrix_config(cache, tmp_path / "first", "bf16-mixed", first)
    config["train"]["save_interval"] = 6
    _train(tmp_path, config)
    ckpt = tmp_path / "first" / "checkpoints" / "step-00000006.ckpt"
    assert all(bool(g.get(first)) for g in _groups(ckpt))
    resumed = matrix_config(cache, tmp_path / "then", "bf16-mixed", then)
    resumed["train"]["save_interval"] = 8
    _train(tmp_path, resumed, "--resume", str(ckpt))
    groups = _groups(tmp_path / "then" / "checkpoints" / "step-00000008.ckpt")
    assert all(bool(g.get(then)) and not g.get(first) for g in groups), groups
    assert f"the checkpoint's AdamW ran {first}; this run's optimizer spec chooses {then}" in caplog.text


def test_compiled_bf16_mixed_run_clips_and_grows(tmp_path, cache, caplog):
    """``compile: true`` (inductor, as on a GPU) once in CI, on the GPU path: bf16-mixed, fused AdamW, clipping at
    1.0, a growth that recompiles the grown shapes. Kept small (4 steps, no evaluation): compiling is the cost."""
    config = matrix_config(cache, tmp_path / "out", "bf16-mixed", compile=True, rms_monitor=None)
    config["train"]["max_steps"] = 4
    config["growth"]["stages"][0].update(at_step=2, rewarmup_steps=1)
    config["eval"] = {"interval": None, "max_iters": 1, "final_validation": False}
    path = write_config(tmp_path / "run.yaml", config)
    assert main(["pretrain", "--config", str(path)]) == 0
    summary = _grew_and_finite(tmp_path / "out", [2])
    assert summary["steps"] == 4
    assert "precision bf16-mixed, optimizer AdamW (lr 0.003), compiled" in caplog.text
    assert "the first optimizer step after the growth took" in caplog.text  # the recompile, timed
    assert not any("_orig_mod" in k for k in _final(tmp_path / "out"))  # a plain litgpt state_dict
