"""One run plan per command (issue 53): ``sparkling pretrain`` and ``sparkling plan`` derive the plan of the run once
(:func:`~lightning_sparkling.pretrain.advice.run_plan.plan_run`: each stage planned once, each phase's parameters
counted once, no ``estimate_compute``, one look-up in the measured map) and every consumer reads it: the plan's
report, the run's announcement, its ``GrowthCallback`` (which applies the plans ``resolve`` made) and its summary.
Before, one ``pretrain`` run planned each stage twice, called ``estimate_compute`` three times and counted the
phases' parameters ten times (two stages)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import yaml

from lightning_sparkling.growth import compute as compute_module
from lightning_sparkling.growth import plan as plan_module
from lightning_sparkling.growth.compute import estimate_compute
from lightning_sparkling.pretrain.advice import measured as measured_module
from lightning_sparkling.pretrain.advice.run_plan import RunPlan, plan_run
from lightning_sparkling.pretrain.cli import main, parse

MODEL = dict(n_layer=2, n_embd=32, n_head=4, n_query_groups=2, intermediate_size=64, mlp_class_name="LLaMAMLP",
             norm_class_name="RMSNorm", bias=False, parallel_residual=False, rotary_percentage=1.0)
STAGES = [{"at_step": 3, "n_embd": 64, "intermediate_size": 128, "rewarmup_steps": 2},  # width, then depth
          {"at_step": 5, "n_layer": 4, "rewarmup_steps": 2}]


@pytest.fixture(scope="module")
def config_file(tmp_path_factory) -> Path:
    config = {
        "model_config": dict(MODEL), "precision": "32-true", "accelerator": "cpu", "devices": 1,
        "data": {"vocab_size": 512, "seq_len": 32, "max_files": 20, "max_bytes": 150_000, "val_percent": 20,
                 "cache_dir": str(tmp_path_factory.mktemp("corpus-cache"))},
        "train": {"global_batch_size": 4, "micro_batch_size": 4, "max_steps": 8, "lr_warmup_steps": 1,
                  "log_interval": 1},
        "eval": {"interval": 8, "max_iters": 1},
        "optimizer": {"class_path": "torch.optim.AdamW", "init_args": {"lr": 0.003}},
        "growth": {"stages": STAGES},
    }
    path = tmp_path_factory.mktemp("cfg") / "two_stages.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _count_derivations(monkeypatch) -> tuple[Counter, list[int]]:
    """Count the calls that derive a part of the plan: ``plan_growth`` (by stage index; the callback's own import
    too), ``count_params``, ``estimate_compute``, ``phase_compute``, ``size_changes`` and the map's ``advise``."""
    calls: Counter = Counter()
    planned: list[int] = []

    def counting(module, name, record=None):
        original = getattr(module, name)

        def wrapper(*args, **kwargs):
            calls[name] += 1
            if record is not None:
                record.append(kwargs.get("stage_index", 0))
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    from lightning_sparkling.callbacks import growth as callback_module

    counting(plan_module, "plan_growth", planned)
    monkeypatch.setattr(callback_module, "plan_growth", plan_module.plan_growth)  # the callback's own import too
    for name in ("count_params", "estimate_compute", "phase_compute"):
        counting(compute_module, name)
    counting(plan_module, "size_changes")
    counting(measured_module, "advise")
    return calls, planned


def test_sparkling_pretrain_derives_the_plan_once(config_file, tmp_path, monkeypatch):
    calls, planned = _count_derivations(monkeypatch)
    plans: list[RunPlan] = []
    from lightning_sparkling.pretrain.training import run as run_module

    monkeypatch.setattr(run_module, "plan_run", lambda *a, **k: plans.append(plan_run(*a, **k)) or plans[-1])
    out = tmp_path / "out"
    assert main(["pretrain", "--config", str(config_file), "--out_dir", str(out)]) == 0
    assert len(plans) == 1  # one plan for the run
    assert planned == [0, 1]  # resolve's dry run; the growth callback applied those plans, not its own
    assert calls["count_params"] == 3  # one per phase: before growth, after each stage
    assert calls["estimate_compute"] == 0 and calls["size_changes"] == 2 and calls["advise"] == 1
    assert calls["phase_compute"] == 2  # the plan's, and the summary's of what ran (its counts reused)
    summary = json.loads((out / "summary.json").read_text())
    compute = plans[0].compute
    assert summary["flops"] == compute.flops and summary["total_params"] == list(compute.total_params)
    assert [g["sizes"] for g in summary["growth"]] == [{"n_embd": 64, "intermediate_size": 128}, {"n_layer": 4}]
    assert summary["final_model_config"]["n_layer"] == 4 and summary["final_model_config"]["n_embd"] == 64


def test_sparkling_plan_derives_the_plan_once(config_file, monkeypatch, capsys):
    calls, planned = _count_derivations(monkeypatch)
    assert main(["plan", "--config", str(config_file)]) == 0
    assert "stage 1" in capsys.readouterr().out
    assert planned == [0, 1] and calls["count_params"] == 3 and calls["phase_compute"] == 1
    assert calls["estimate_compute"] == 0 and calls["size_changes"] == 2 and calls["advise"] == 1


def test_the_run_plan_is_estimate_compute_s_and_the_summary_s_is_what_ran(config_file):
    _, run, _ = parse(["--config", str(config_file)], "plan")
    run_plan = plan_run(run)
    tied = run.train.tie_embeddings
    est = estimate_compute(run.model_config, run.stages, total_steps=run.steps, tokens_per_step=run.tokens_per_step,
                           tie_embeddings=tied)
    assert run_plan.compute == est and run_plan.plans == tuple(run.plans)  # resolve's plans, not planned again
    assert run_plan.final_config.n_layer == 4 and run_plan.sizes[1] == {"n_layer": (2, 4)}
    for steps, applied in ((4, 1), (2, 0), (8, 2), (5, 2)):  # interrupted after the first growth, before any, ...
        partial = estimate_compute(run.model_config, run.stages[:applied], total_steps=steps,
                                   tokens_per_step=run.tokens_per_step, tie_embeddings=tied)
        assert run_plan.compute_until(steps, applied) == partial
    assert plan_run(run, advise=False).advice is None and run_plan.advice is not None
    assert run_plan.warning == (None if run_plan.advice.pays else run_plan.advice.message())
