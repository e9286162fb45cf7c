"""The shipped examples: every config parses and plans (no training), the quickstart stays a quick CPU run that grows
mid-run, the MoE config's model kind grows end to end through the CLI (shrunk), and ``add_callback.py``'s module
grows inside a plain Trainer."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

from lightning_sparkling.pretrain.cli import main, parse, plan

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CONFIGS = sorted(EXAMPLES.glob("*.yaml"))




def test_expected_examples_exist():
    names = {p.name for p in CONFIGS}
    assert {"quickstart.yaml", "dense_inner_2x.yaml", "hidden_2x.yaml", "joint_2x.yaml", "olmoe_inner_2x.yaml",
            "two_stage.yaml"} <= names
    assert (EXAMPLES / "add_callback.py").is_file()


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_example_config_plans(path, tmp_path):
    _, run, _ = parse(["--config", str(path), "--data.cache_dir", str(tmp_path / "cache")])
    report = plan(run, print_report=False)
    assert run.stages, "every example grows"
    assert 0.1 < report["flops_saved"] < 0.5
    assert all(s.at_step < run.steps for s in run.stages)
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_example_uses_the_default_recipe_and_plan_does_not_say_it_was_not_found_to_pay(path, tmp_path, capsys):
    """Issue 40: five examples set the paper's keys, which their own plan warned against. An example grows by the
    default recipe (``auto``, the schedule's) and sets no key a recipe sets, unless a comment on that line says why."""
    import yaml

    from lightning_sparkling.growth.recipes import schedule_recipe
    from lightning_sparkling.pretrain.cli import main

    _, run, _ = parse(["--config", str(path), "--data.cache_dir", str(tmp_path / "cache")])
    assert run.growth.recipe == schedule_recipe(run.train.lr_schedule)
    assert {s.recipe for s in run.stages} == {run.growth.recipe}
    growth = yaml.safe_load(path.read_text())["growth"]
    assert growth.get("recipe", "auto") == "auto"
    recipe_keys = {"init", "rewarmup_ratio", "symmetry_target", "symmetry_max_boost", "symmetry_release"}
    for k, stage in enumerate(growth["stages"]):
        for key in recipe_keys & set(stage):
            line = next(line for line in path.read_text().splitlines() if line.strip().startswith(f"{key}:"))
            assert "#" in line, f"{path.name}: growth.stages[{k}].{key} overrides the recipe without saying why"
    main(["plan", "--config", str(path), "--data.cache_dir", str(tmp_path / "cache")])
    printed = " ".join(" ".join(capsys.readouterr()).split())
    assert "Where growth pays" in printed or "recipe" in printed
    assert "not been found to pay" not in printed


def test_quickstart_is_a_small_cpu_run_that_grows_mid_run():
    raw = yaml.safe_load((EXAMPLES / "quickstart.yaml").read_text())
    _, run, _ = parse(["--config", str(EXAMPLES / "quickstart.yaml")])
    assert run.accelerator == "cpu" and run.precision == "32-true" and run.tokenizer_dir is None
    assert raw["data"]["source"] == "stdlib" and "data_dir" not in raw["data"]
    assert 2048 <= run.data_vocab_size <= 4096 and run.seq_len == 128
    assert 150 <= run.steps <= 300
    assert len(run.stages) == 1 and 0.2 * run.steps < run.stages[0].at_step < 0.8 * run.steps
    assert run.model_config.n_embd == 64 and run.stages[0].n_embd == 128
    assert run.rms_monitor is not None and run.rms_monitor.every_n_steps == 10
    assert run.eval.interval and run.steps // run.eval.interval >= 2


def test_moe_example_model_grows_through_the_cli(tmp_path):
    """olmoe_inner_2x.yaml's model kind (LLaMAMoE, QK-norm, tied embeddings), shrunk to a few CPU steps."""
    out = tmp_path / "out"
    args = ["pretrain", "--config", str(EXAMPLES / "olmoe_inner_2x.yaml"), "--out_dir", str(out),
            "--accelerator", "cpu", "--precision", "32-true", "--data.source", "stdlib", "--data.num_workers", "0",
            "--data.vocab_size", "512", "--data.seq_len", "32", "--data.max_files", "10", "--data.max_bytes",
            "100000", "--data.val_percent", "20", "--data.cache_dir", str(tmp_path / "cache"),
            "--model_config.n_layer", "1", "--model_config.n_embd", "32", "--model_config.n_head", "4",
            "--model_config.head_size", "8", "--model_config.n_expert", "4", "--model_config.n_expert_per_token",
            "2", "--model_config.moe_intermediate_size", "16", "--model_config.block_size", "32",
            "--train.global_batch_size", "4", "--train.micro_batch_size", "4", "--train.max_tokens", "null",
            "--train.max_steps", "4", "--train.save_interval", "null", "--eval.interval", "null",
            "--eval.max_iters", "1", "--rms_monitor.every_n_steps", "1",
            "--growth.stages", "[{at_step: 2, moe_intermediate_size: 32, rewarmup_steps: 1}]"]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["final_model_config"]["moe_intermediate_size"] == 32
    final = yaml.safe_load((out / "final" / "model_config.yaml").read_text())
    assert final["mlp_class_name"] == "LLaMAMoE" and final["norm_qk"] is True
    state = torch.load(out / "final" / "lit_model.pth", weights_only=True)
    assert torch.equal(state["lm_head.weight"], state["transformer.wte.weight"])  # tied


def test_add_callback_example_module_grows(tmp_path):
    from lightning_sparkling import ActivationRMSMonitor, GrowthStage, WidthGrowthCallback
    from lightning.pytorch.loggers import TensorBoardLogger

    example = runpy.run_path(str(EXAMPLES / "add_callback.py"))  # not __main__: defines, does not train
    module = example["TinyGPT"]()
    data = torch.utils.data.DataLoader(example["random_runs"](64), batch_size=16)
    trainer = L.Trainer(max_steps=6, accelerator="cpu", logger=TensorBoardLogger(tmp_path), enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        callbacks=[WidthGrowthCallback(GrowthStage(3, n_embd=64, intermediate_size=128,
                                                                   rewarmup_steps=2)),
                                   ActivationRMSMonitor(every_n_steps=2)])
    trainer.fit(module, data)
    assert module.model.config.n_embd == 64 and trainer.global_step == 6


def test_add_callback_example_prints_no_third_party_noise(tmp_path):
    """Issue 40: the example printed Lightning's GPU/TPU lines, the LitLogger tip and a pytree FutureWarning. Its
    ``quiet_lightning_output`` leaves them out and keeps the growth log; without it they are there (the control)."""
    import subprocess
    import sys

    def run(quiet: bool) -> str:
        code = (
            "import runpy, torch, lightning as L\n"
            "from lightning.pytorch.loggers import TensorBoardLogger\n"
            "from lightning_sparkling import GrowthCallback, GrowthStage\n"
            f"ex = runpy.run_path({str(EXAMPLES / 'add_callback.py')!r})\n"
            + ("ex['quiet_lightning_output']()\n" if quiet else "")
            + "data = torch.utils.data.DataLoader(ex['random_runs'](64), batch_size=16)\n"
            f"L.Trainer(max_steps=4, accelerator='cpu', logger=TensorBoardLogger({str(tmp_path)!r}), "
            "enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, "
            "callbacks=[GrowthCallback(GrowthStage(2, n_embd=64, rewarmup_steps=1))]).fit(ex['TinyGPT'](), data)\n")
        done = subprocess.run([sys.executable, "-W", "default", "-c", code], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        return done.stdout + done.stderr

    quiet, loud = run(True), run(False)
    assert "GrowthCallback: stage 0 grew the model" in quiet
    for noise in ("GPU available", "TPU available", "Tip:", "LeafSpec"):
        assert noise not in quiet, quiet
    assert "GPU available" in loud and "Tip:" in loud
