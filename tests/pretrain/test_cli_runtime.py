"""``compile: auto | true | false`` and ``activation_checkpointing: true | false`` through ``sparkling pretrain``:
refused values in one ``error:`` line before anything is written; ``auto`` compiles on CUDA only; a run with
activation checkpointing ends where the run without it ends (same losses, the same final weights), growth included;
a compiled (inductor) run grows mid-run with ``rms/*`` logged after the growth and its first step's time logged
(``compile`` marker: ``SPARKLING_COMPILE_TESTS=1 python -m pytest -m compile``). Under FSDP1 both are refused, by
the CLI and by ``LitGPTPretrainModule``."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from lightning_sparkling.pretrain.cli import main
from lightning_sparkling.pretrain.config.resolve import _compile_scope, _resolve_runtime
from lightning_sparkling.pretrain.errors import ConfigError
from test_bad_input import refused
from test_cli import _tb_scalars, tiny_config, write_config


@pytest.mark.parametrize("key, value, expected", [
    ("compile", "maybe", "compile: 'maybe' is not a valid value: expected bool or auto or blocks"),
    ("activation_checkpointing", "sometimes",
     "activation_checkpointing: 'sometimes' is not a valid value: expected bool"),
])
def test_bad_values_are_refused_before_anything_starts(tmp_path, capsys, key, value, expected):
    config = tiny_config(tmp_path / "cache")
    config[key] = value
    line = refused(capsys, tmp_path, config)
    assert expected in line


@pytest.mark.parametrize("given, accelerator, strategy, expected", [
    ("auto", "cpu", "auto", (False, False)), ("auto", "cuda", "ddp", (True, False)),
    (True, "cpu", "fsdp2", (True, False)), (False, "cuda", "auto", (False, False)),
])
def test_compile_auto_is_on_for_cuda_only(given, accelerator, strategy, expected):
    notes: list[str] = []
    assert _resolve_runtime({"compile": given}, accelerator, strategy, notes) == expected


@pytest.mark.parametrize("given, strategy, expected", [
    (True, "auto", "whole"), ("auto", "ddp", "whole"), ("blocks", "auto", "blocks"), ("blocks", "ddp", "blocks"),
    (True, "fsdp2", "blocks"), ("blocks", "fsdp2", "blocks"),
])
def test_compile_true_is_the_whole_gpt_and_blocks_per_block(given, strategy, expected):
    assert _resolve_runtime({"compile": given}, "cuda", strategy, []) == (True, False)
    assert _compile_scope({"compile": given}, strategy) == expected


def test_compile_blocks_reaches_the_module(tmp_path):
    from lightning_sparkling.pretrain.cli import parse
    from lightning_sparkling.pretrain.training.run import build_module

    config = write_config(tmp_path / "c.yaml", dict(tiny_config(tmp_path / "cache"), compile="blocks"))
    _, run, _ = parse(["--config", str(config), "--out_dir", str(tmp_path / "o")])
    assert run.compile and run.compile_scope == "blocks"
    module = build_module(run)
    assert module.compile_options == {} and module.compile_scope == "blocks"


def test_fsdp1_refuses_both_and_auto_notes_it():
    for key in ("compile", "activation_checkpointing"):
        with pytest.raises(ConfigError, match=f"{key}.*not supported with strategy 'fsdp1'.*ddp or fsdp2"):
            _resolve_runtime({key: True}, "cuda", "fsdp1", [])
    notes: list[str] = []
    assert _resolve_runtime({"compile": "auto"}, "cuda", "fsdp1", notes) == (False, False)
    assert notes == ["compile: auto is off under strategy 'fsdp1' (FSDP1); use ddp or fsdp2 (FSDP2 sharding) to "
                     "compile"]


def _final_state(out: Path) -> dict:
    return torch.load(out / "final" / "lit_model.pth", weights_only=True)


@pytest.mark.slow
def test_activation_checkpointing_run_ends_where_the_plain_run_ends(tmp_path, caplog):
    """In bf16-mixed with the default fused AdamW and clipping, a GPU user's path (issue 45): recomputing the
    blocks' activations in the backward changes nothing, bit for bit."""
    config = write_config(tmp_path / "tiny.yaml", tiny_config(tmp_path / "cache", precision="bf16-mixed"))
    outs = {}
    for flag in ("false", "true"):
        outs[flag] = tmp_path / f"out-{flag}"
        assert main(["pretrain", "--config", str(config), "--out_dir", str(outs[flag]),
                     "--activation_checkpointing", flag]) == 0
    assert "precision bf16-mixed, optimizer AdamW (lr 0.003), activation checkpointing" in caplog.text
    plain, ckpt = (json.loads((outs[f] / "summary.json").read_text()) for f in ("false", "true"))
    assert ckpt["train_loss"] == plain["train_loss"] and ckpt["val_loss"] == plain["val_loss"]
    a, b = _final_state(outs["false"]), _final_state(outs["true"])
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert a["transformer.wte.weight"].shape[1] == 64  # grown


@pytest.mark.slow
@pytest.mark.compile
@pytest.mark.skipif(not os.environ.get("SPARKLING_COMPILE_TESTS"), reason="set SPARKLING_COMPILE_TESTS=1")
def test_compiled_run_grows_with_rms_logged_after_the_growth(tmp_path, caplog):
    config = write_config(tmp_path / "tiny.yaml", tiny_config(tmp_path / "cache"))
    out = tmp_path / "out"
    assert main(["pretrain", "--config", str(config), "--out_dir", str(out), "--compile", "true"]) == 0
    assert "optimizer AdamW (lr 0.003), compiled" in caplog.text
    assert "the first optimizer step after the growth took" in caplog.text
    run = _tb_scalars(out / "logs")
    steps, _ = run.scalars["rms/residual/block_00"]
    assert max(steps) > 6 and "growth/first_step_seconds" in run.scalars  # logged after the growth at step 6
    summary = json.loads((out / "summary.json").read_text())
    assert summary["final_model_config"]["n_embd"] == 64 and summary["train_loss"] < 7
    state = _final_state(out)
    assert not any("_orig_mod" in k for k in state)  # a plain litgpt state_dict


@pytest.mark.parametrize("kwargs", [{"compile": True}, {"activation_checkpointing": True}])
def test_the_module_refuses_both_under_fsdp1(kwargs):
    from types import SimpleNamespace

    from lightning.pytorch.strategies import FSDPStrategy

    from lightning_sparkling.pretrain.training.module import LitGPTPretrainModule

    module = LitGPTPretrainModule({"n_layer": 1, "n_embd": 16, "n_head": 2, "vocab_size": 32, "block_size": 8},
                                  **kwargs)
    module._trainer = SimpleNamespace(strategy=FSDPStrategy())  # what configure_model reads of the Trainer
    with pytest.raises(ValueError, match="not supported under FSDPStrategy.*ModelParallelStrategy"):
        module.configure_model()
