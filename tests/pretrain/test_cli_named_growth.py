"""`sparkling pretrain` end to end through a depth stage and a growth into a named litgpt config: the checkpoints are
plain litgpt dirs of the grown config, the summary lists every size, and the FLOPs counted while training equal the
plan's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from litgpt import GPT, Config

from lightning_sparkling.pretrain.cli import main, parse, plan

from test_cli import tiny_config, write_config

STAGES = [{"at_step": 4, "n_layer": 6, "rewarmup_steps": 2},  # pythia-14m cut to 3 layers -> 6 (stack, copy-zero)
          {"at_step": 8, "model_name": "pythia-31m", "rewarmup_steps": 2}]  # then 31m's width and heads


@pytest.fixture(scope="module")
def named_run(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("named")
    config = tiny_config(root / "cache", growth={"stages": STAGES}, rms_monitor={"every_n_steps": 4},
                         eval={"interval": 6, "max_iters": 1}, train={"save_interval": 6})
    config.pop("model_config")
    config.update(model_name="pythia-14m", model_config={"block_size": 32, "n_layer": 3})
    path = write_config(root / "c.yaml", config)
    out = root / "out"
    assert main(["pretrain", "--config", str(path), "--out_dir", str(out)]) == 0
    return path, out


def test_final_is_the_named_target_with_the_run_vocabulary_and_loads_strictly(named_run):
    _, out = named_run
    saved = yaml.safe_load((out / "final" / "model_config.yaml").read_text())
    target = Config.from_name("pythia-31m")
    for key in ("name", "n_layer", "n_embd", "n_head", "n_query_groups", "head_size", "intermediate_size"):
        assert saved[key] == getattr(target, key), key
    assert saved["padded_vocab_size"] == 512  # the tokenizer's vocabulary, as for the starting model
    model = GPT(Config(**saved))
    model.load_state_dict(torch.load(out / "final" / "lit_model.pth", weights_only=True), strict=True)
    mid = yaml.safe_load((out / "step-00000006" / "model_config.yaml").read_text())
    assert (mid["name"], mid["n_layer"], mid["n_embd"]) == ("pythia-14m", 6, 128)


def test_summary_lists_every_size_and_the_flops_match_the_plan(named_run):
    path, out = named_run
    summary = json.loads((out / "summary.json").read_text())
    assert [g["sizes"] for g in summary["growth"]] == [
        {"n_layer": 6}, {"n_embd": 256, "intermediate_size": 1024, "n_head": 8, "n_query_groups": 8}]
    assert summary["final_model_config"] == {"n_embd": 256, "intermediate_size": 1024, "moe_intermediate_size": None,
                                             "n_head": 8, "n_query_groups": 8, "n_layer": 6}
    _, run, _ = parse(["--config", str(path)])
    report = plan(run, print_report=False)
    assert summary["flops_logged"] == pytest.approx(report["flops"], rel=1e-9)
    assert summary["active_params"] == report["active_params"]
