"""The ``sparkling`` CLI end to end, in-process: a tiny config grows mid-run and leaves litgpt checkpoint dirs that
litgpt itself loads and generates from, Lightning checkpoints that ``resume: auto`` continues from, TensorBoard
logs; bad keys and impossible values are refused before anything starts; ``sparkling plan`` agrees with
``estimate_compute``."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from lightning_sparkling.growth.compute import estimate_compute
from lightning_sparkling.pretrain.cli import main, parse, plan

MODEL = dict(n_layer=2, n_embd=32, n_head=4, n_query_groups=2, intermediate_size=64, mlp_class_name="LLaMAMLP",
             norm_class_name="RMSNorm", bias=False, parallel_residual=False, rotary_percentage=1.0)
TOKENS_PER_STEP = 8 * 32


def tiny_config(cache_dir: Path, **sections) -> dict:
    config = {
        "model_config": dict(MODEL),
        "precision": "32-true",
        "accelerator": "cpu",
        "devices": 1,
        "data": {"vocab_size": 512, "seq_len": 32, "max_files": 20, "max_bytes": 150_000, "val_percent": 20,
                 "cache_dir": str(cache_dir)},
        "train": {"global_batch_size": 8, "micro_batch_size": 4, "max_steps": 12, "lr_warmup_steps": 2,
                  "save_interval": 5, "log_interval": 1},
        "eval": {"interval": 5, "max_iters": 2},
        "optimizer": {"class_path": "torch.optim.AdamW",
                      "init_args": {"lr": 0.003, "weight_decay": 0.1, "betas": [0.9, 0.95]}},
        "growth": {"stages": [{"at_step": 6, "n_embd": 64, "intermediate_size": 128, "rewarmup_steps": 3}]},
        "rms_monitor": {"every_n_steps": 2},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


def write_config(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path




@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("corpus-cache")


@pytest.fixture(scope="module")
def config_file(tmp_path_factory, cache_dir) -> Path:
    return write_config(tmp_path_factory.mktemp("cfg") / "tiny.yaml", tiny_config(cache_dir))


@pytest.fixture(scope="module")
def first_run(tmp_path_factory, config_file) -> Path:
    """12 steps, growth at step 6, litgpt dirs and .ckpt every 5 steps."""
    out = tmp_path_factory.mktemp("run") / "out"
    assert main(["pretrain", "--config", str(config_file), "--out_dir", str(out)]) == 0
    return out


def _tb_scalars(logdir: Path):
    from lightning_sparkling.dashboards.plotting import load_run

    return load_run(logdir)


# ------------------------------------------------------------------------------------------------------------ pretrain
def test_pretrain_grows_and_writes_litgpt_dirs(first_run):
    out = first_run
    for name in ("step-00000005", "step-00000010", "final"):
        folder = out / name
        for file in ("lit_model.pth", "model_config.yaml", "tokenizer.json", "tokenizer_config.json",
                     "generation_config.json", "hyperparameters.yaml"):
            assert (folder / file).is_file(), folder / file
    widths = {name: yaml.safe_load((out / name / "model_config.yaml").read_text())["n_embd"]
              for name in ("step-00000005", "step-00000010", "final")}
    assert widths == {"step-00000005": 32, "step-00000010": 64, "final": 64}
    final_cfg = yaml.safe_load((out / "final" / "model_config.yaml").read_text())
    assert final_cfg["intermediate_size"] == 128 and final_cfg["head_size"] == 8 and final_cfg["n_head"] == 4
    hparams = yaml.safe_load((out / "final" / "hyperparameters.yaml").read_text())
    assert hparams["growth"]["stages"][0]["at_step"] == 6 and hparams["train"]["max_steps"] == 12
    # Lightning checkpoints for resume: every save_interval, and the last step
    ckpts = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert ckpts == ["step-00000005.ckpt", "step-00000010.ckpt", "step-00000012.ckpt"]


def test_pretrain_logs_tensorboard_and_summary(first_run):
    run = _tb_scalars(first_run / "logs")
    for tag in ("train_loss", "val_loss", "val_ppl", "tokens", "flops", "growth/event", "growth/lr_new/stage_0",
                "rms/residual/block_00", "rms/attn_ratio/block_01", "rms/mlp_ratio/block_00", "lr-AdamW"):
        assert tag in run.scalars, tag
    steps, tokens = run.scalars["tokens"]
    assert list(steps) == list(range(1, 13)) and list(tokens) == [s * TOKENS_PER_STEP for s in range(1, 13)]
    assert run.growth_steps() == [(6, 0)]
    summary = json.loads((first_run / "summary.json").read_text())
    assert summary["steps"] == 12 and summary["tokens"] == 12 * TOKENS_PER_STEP
    assert summary["growth"] == [{"stage": 0, "at_step": 6, "widths": {"n_embd": 64, "intermediate_size": 128},
                                  "sizes": {"n_embd": 64, "intermediate_size": 128}}]
    assert summary["final_model_config"]["n_embd"] == 64
    assert math.isfinite(summary["train_loss"]) and math.isfinite(summary["val_loss"])
    assert summary["val_ppl"] == pytest.approx(math.exp(summary["val_loss"]), rel=1e-4)
    # FLOPs counted while training (6 * active params of the model that took each step) = the estimate
    assert summary["flops_logged"] == pytest.approx(summary["flops"], rel=1e-9)
    assert 0.2 < summary["flops_saved"] < 0.4
    flops_steps, flops = run.scalars["flops"]
    assert flops[-1] == pytest.approx(summary["flops"], rel=1e-6)


def test_final_dir_loads_and_generates_with_litgpt(first_run):
    import litgpt
    from litgpt.generate.base import generate
    from litgpt.tokenizer import Tokenizer

    final = first_run / "final"
    config = litgpt.Config.from_file(final / "model_config.yaml")
    state = torch.load(final / "lit_model.pth", weights_only=True)
    assert not any(k.startswith("model.") for k in state)
    model = litgpt.GPT(config)
    model.load_state_dict(state, strict=True)
    model.eval()
    tokenizer = Tokenizer(final)
    prompt = tokenizer.encode("import os\n")
    model.set_kv_cache(batch_size=1)
    out = generate(model, prompt, max_returned_tokens=prompt.numel() + 5, temperature=0.0, top_k=1)
    assert out.numel() == prompt.numel() + 5 and torch.equal(out[: prompt.numel()], prompt)
    assert isinstance(tokenizer.decode(out), str)


def test_litgpt_generate_cli_loads_final_dir(first_run):
    litgpt_bin = Path(sys.executable).parent / "litgpt"
    if not litgpt_bin.exists():
        pytest.skip("the litgpt console script is not installed next to this Python")
    result = subprocess.run([str(litgpt_bin), "generate", str(first_run / "final"), "--prompt", "def f(",
                             "--max_new_tokens", "5", "--temperature", "0"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "def f(" in result.stdout


def test_resume_auto_continues_from_newest_checkpoint(first_run, config_file, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(first_run, out)
    first_events = json.loads((out / "summary.json").read_text())["growth_events"]
    assert main(["pretrain", "--config", str(config_file), "--out_dir", str(out), "--train.max_steps", "16",
                 "--resume", "auto"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed_from"].endswith("step-00000012.ckpt")
    assert summary["steps"] == 16
    # the growth of step 6 is in the checkpoint: reported as it happened (issue 40: it read []), not done again
    assert [e["global_step"] for e in summary["growth_events"]] == [6]
    assert summary["growth_events"] == first_events
    assert summary["final_model_config"]["n_embd"] == 64
    # the FLOPs counter was restored from the checkpoint and continued
    assert summary["flops_logged"] == pytest.approx(summary["flops"], rel=1e-9)
    run = _tb_scalars(out / "logs")
    assert run.growth_steps() == [(6, 0)]
    steps, tokens = run.scalars["tokens"]
    assert list(steps) == list(range(1, 17)) and tokens[-1] == 16 * TOKENS_PER_STEP
    assert (out / "step-00000015" / "lit_model.pth").is_file()
    assert (out / "checkpoints" / "step-00000016.ckpt").is_file()
    assert yaml.safe_load((out / "final" / "model_config.yaml").read_text())["n_embd"] == 64


def test_plot_delegates_to_plotting(first_run, tmp_path):
    png = tmp_path / "dash.png"
    assert main(["plot", str(first_run / "logs"), "--out", str(png), "--x", "tokens"]) == 0
    assert png.is_file() and png.stat().st_size > 1000


# ------------------------------------------------------------------------------------------------------------ refusals
def test_unknown_key_on_command_line_is_refused(config_file, capsys):
    with pytest.raises(SystemExit) as info:
        main(["pretrain", "--config", str(config_file), "--train.max_stepz", "3"])
    assert info.value.code == 2
    assert "max_stepz" in capsys.readouterr().err


@pytest.mark.parametrize("edit, key", [
    (lambda c: c["growth"]["stages"][0].update(n_embdd=64), "growth.stages[0].n_embdd"),
    (lambda c: c["train"].update(max_stepz=3), "train.max_stepz"),
    (lambda c: c.update(trian={}), "trian"),
    (lambda c: c["model_config"].update(n_emb=3), "model_config.n_emb"),
])
def test_unknown_key_in_config_file_is_refused_with_its_path(tmp_path, capsys, edit, key):
    config = tiny_config(tmp_path / "cache")
    edit(config)
    path = write_config(tmp_path / "bad.yaml", config)
    with pytest.raises(SystemExit):
        main(["plan", "--config", str(path)])
    assert key in capsys.readouterr().err


@pytest.mark.parametrize("overrides, key", [
    ({"growth": {"stages": [{"at_step": 12, "n_embd": 64}]}}, "growth.stages[0].at_step"),
    ({"growth": {"stages": [{"at_tokens": 12 * TOKENS_PER_STEP, "n_embd": 64}]}}, "growth.stages[0].at_tokens"),
    ({"growth": {"stages": [{"at_step": 3, "at_tokens": 10, "n_embd": 64}]}}, "growth.stages[0].at_step"),
    ({"growth": {"stages": [{"at_step": 3, "n_embd": 16}]}}, "growth.stages[0].n_embd"),
    ({"growth": {"stages": [{"at_step": 3, "moe_intermediate_size": 64}]}}, "growth.stages[0].moe_intermediate_size"),
    ({"growth": {"stages": [{"at_step": 3, "n_embd": 64, "init": "copy-foo"}]}}, "growth.stages[0].init"),
    ({"growth": {"stages": [{"at_step": 3, "n_embd": 64, "rewarmup_steps": -1}]}}, "growth.stages[0].rewarmup_steps"),
    ({"growth": {"stages": [{"at_step": 5, "n_embd": 64, "rewarmup_steps": 2},
                            {"at_step": 4, "n_embd": 128, "rewarmup_steps": 2}]}}, "growth.stages[1].at_step"),
    # a re-warmup that cannot finish by max_steps (the default 250 steps, 9 steps left; or exactly the steps left)
    ({"growth": {"stages": [{"at_step": 3, "n_embd": 64}]}}, "growth.stages[0].rewarmup_steps"),
    ({"growth": {"stages": [{"at_step": 3, "n_embd": 64, "rewarmup_steps": 2},
                            {"at_tokens": 6 * TOKENS_PER_STEP, "intermediate_size": 256, "rewarmup_steps": 6}]}},
     "growth.stages[1].rewarmup_steps"),
    ({"train": {"global_batch_size": 6}}, "train.global_batch_size"),
    ({"train": {"micro_batch_size": -1}}, "train.micro_batch_size"),
    ({"train": {"max_steps": -5}}, "train.max_steps"),
    ({"train": {"lr_warmup_steps": 50}}, "train.lr_warmup_steps"),
    ({"train": {"min_lr": 1.0}}, "train.min_lr"),
    ({"data": {"seq_len": 64}, "model_config": {**MODEL, "block_size": 32}}, "data.seq_len"),
    ({"strategy": "fsdp1"}, "strategy"),
    ({"strategy": "fsdp"}, "strategy"),  # fsdp1's old value: no alias (0.1.0 was never released)
    ({"strategy": "deepspeed"}, "strategy"),
    ({"data": {"source": "stdlib+everything"}}, "data.source"),
    ({"model_config": {**MODEL, "n_embd": 66}}, "model_config.n_embd"),
    ({"model_config": {**MODEL, "n_query_groups": 3}}, "model_config.n_query_groups"),
    ({"optimizer": {"class_path": "torch.optim.AdamW", "init_args": {"lrr": 1}}}, "optimizer.init_args"),
    # issue 15's lock breakers: a fresh bias correction needs Adam's betas; a symmetry target needs a copied side
    ({"optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.1}},
      "growth": {"stages": [{"at_step": 6, "n_embd": 64, "rewarmup_steps": 3, "bias_correction": "fresh"}]}},
     "growth.stages[0].bias_correction"),
    ({"growth": {"stages": [{"at_step": 6, "n_embd": 64, "rewarmup_steps": 3, "init": "random-random",
                             "symmetry_target": 0.5}]}}, "growth.stages[0].symmetry_target"),
    ({"growth": {"recipe": "sparkling", "stages": [{"at_step": 6, "n_embd": 64, "rewarmup_steps": 3}]}},
     "growth.recipe"),
])
def test_impossible_values_are_refused_before_anything_starts(tmp_path, capsys, overrides, key):
    cache = tmp_path / "cache"
    out = tmp_path / "out"
    config = tiny_config(cache, **overrides)
    path = write_config(tmp_path / "bad.yaml", config)
    with pytest.raises(SystemExit) as info:
        main(["pretrain", "--config", str(path), "--out_dir", str(out)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"error: {key}" in err, err
    # one error line (no usage line before it, not the 38 lines of the full help), nothing else
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert not cache.exists() and not out.exists()  # no tokenizer trained, nothing written


def test_empty_litgpt_rejection_reason_is_filled_in(tmp_path, capsys):
    """litgpt's Config checks n_embd % n_head with a bare assert: the message names the fields and the fix."""
    path = write_config(tmp_path / "bad.yaml", tiny_config(tmp_path / "cache", model_config={**MODEL, "n_embd": 66}))
    with pytest.raises(SystemExit):
        main(["plan", "--config", str(path)])
    err = capsys.readouterr().err
    assert "n_embd=66 is not divisible by n_head=4" in err and "head_size" in err, err


@pytest.mark.parametrize("value", ["fsdp1"])
def test_fsdp1_on_cpu_refused_naming_fsdp2(config_file, capsys, value):
    with pytest.raises(SystemExit):
        main(["plan", "--config", str(config_file), "--strategy", value])
    err = capsys.readouterr().err
    assert "fsdp2" in err and "FSDP1" in err and "'fsdp1'" in err, err


def test_unknown_strategy_lists_the_registry_s(config_file, capsys):
    with pytest.raises(SystemExit):
        main(["plan", "--config", str(config_file), "--strategy", "deepspeed"])
    err = capsys.readouterr().err
    assert "use auto, ddp, fsdp2 (FSDP2 sharding) or fsdp1 (FSDP1, CUDA only)" in err, err


def test_strategy_fsdp_is_no_alias_of_fsdp1(config_file, capsys):
    """``strategy: fsdp`` (fsdp1's value before 0.1.0) is not kept as an alias: 0.1.0 was never released. The
    error lists the values, ``fsdp1`` among them."""
    from lightning_sparkling.pretrain.config.resolve import _resolve_hardware

    with pytest.raises(SystemExit):
        main(["plan", "--config", str(config_file), "--strategy", "fsdp"])
    assert "fsdp1 (FSDP1, CUDA only)" in capsys.readouterr().err
    notes: list[str] = []
    assert _resolve_hardware({"strategy": "fsdp1", "accelerator": "cuda", "devices": 1}, notes)[0] == "fsdp1"
    assert notes == []


# ------------------------------------------------------------------------------------------------------------ parsing
def test_at_tokens_and_optimizer_overrides(config_file):
    _, run, dumped = parse(["--config", str(config_file), "--growth.stages",
                            f"[{{at_tokens: {5 * TOKENS_PER_STEP + 1}, n_embd: 64, rewarmup_steps: 5}}]",
                            "--optimizer.init_args.lr", "0.01", "--train.max_steps", "20"])
    assert [s.at_step for s in run.stages] == [6]  # ceil(tokens / tokens per step)
    assert run.optimizer["init_args"]["lr"] == 0.01 and run.optimizer["init_args"]["weight_decay"] == 0.1
    assert run.steps == 20 and run.accumulate == 2 and run.tokens_per_step == TOKENS_PER_STEP
    assert yaml.safe_load(dumped)["optimizer"]["init_args"]["lr"] == 0.01


def test_validation_takes_a_spread_sample_of_max_iters_batches(config_file):
    """eval.max_iters batches per device of windows spread over the whole validation split (not its first batches)."""
    from lightning_sparkling.pretrain.cli import build_datamodule

    _, run, _ = parse(["--config", str(config_file)])
    assert build_datamodule(run).val_windows == 2 * 4  # max_iters * micro_batch_size * devices
    _, run, _ = parse(["--config", str(config_file), "--eval.max_iters", "null"])
    assert build_datamodule(run).val_windows is None  # the whole split


def test_max_tokens_sets_the_steps(config_file):
    _, run, _ = parse(["--config", str(config_file), "--train.max_steps", "null",
                       "--train.max_tokens", str(20 * TOKENS_PER_STEP + 100)])
    assert run.steps == 20


def test_model_name_with_overrides_and_vocab_from_data(config_file):
    _, run, _ = parse(["--config", str(config_file), "--model_name", "pythia-14m", "--model_config", "{}",
                       "--growth.stages", "[{at_step: 6, n_embd: 256, rewarmup_steps: 3}]"])
    assert run.model_config.name == "pythia-14m" and run.model_config.vocab_size == 512
    assert run.model_config.padded_vocab_size == 512 and run.model_config.n_embd == 128


# ------------------------------------------------------------------------------------------------------------ plan
def test_plan_prints_every_size_the_depth_map_and_the_heads_map(config_file, capsys):
    target = {**MODEL, "n_layer": 4, "n_embd": 64, "n_head": 8, "n_query_groups": 4, "intermediate_size": 128}
    stages = json.dumps([{"at_step": 4, "n_layer": 4, "depth_order": "interleave", "rewarmup_steps": 2},
                         {"at_step": 8, "model_config": target, "rewarmup_steps": 2}])
    loop = ["--growth.recipe", "recommended"]  # the recipe whose loop goes to width copies only
    assert main(["plan", "--config", str(config_file), "--growth.stages", stages, *loop]) == 0
    printed = " ".join(capsys.readouterr().out.split())  # rich wraps long lines
    _, run, _ = parse(["--config", str(config_file), "--growth.stages", stages, *loop])
    first, second = plan(run, print_report=False)["stages"]
    assert first["sizes"] == {"n_layer": [2, 4]} and first["widths"] == {}
    assert first["depth"]["source"] == [0, 0, 1, 1] and first["depth"]["map"] == "new 1<-0, 3<-1; moved 1->2"
    assert "stage 0 at step 4" in printed and "n_layer 2 -> 4" in printed
    assert "depth: depth_order interleave, depth_init copy-zero: new 1<-0, 3<-1; moved 1->2" in printed
    n_head, groups = MODEL["n_head"], MODEL.get("n_query_groups", MODEL["n_head"])
    assert second["sizes"] == {"n_embd": [32, 64], "intermediate_size": [64, 128], "n_head": [n_head, 8],
                               "n_query_groups": [groups, 4]}
    assert second["heads"].startswith("new q ") and f"heads: {second['heads']}" in printed
    assert f"n_head {n_head} -> 8" in printed and second["depth"] is None
    assert first["symmetry_target"] is None and second["symmetry_target"] == 0.5  # the recipe loops width copies only
    assert any("takes the run's vocabulary (vocab_size 512" in note for note in run.notes)  # Config's default 50254


def test_a_named_target_takes_the_run_vocabulary_like_the_starting_model(config_file):
    _, run, _ = parse(["--config", str(config_file), "--model_name", "pythia-14m", "--model_config", "{}",
                       "--growth.stages", "[{at_step: 6, model_name: pythia-31m, rewarmup_steps: 3}]"])
    (stage,) = run.stages
    assert stage.model_name is None and stage.model_config["name"] == "pythia-31m"
    assert (stage.model_config["vocab_size"], stage.model_config["padded_vocab_size"]) == (512, 512)
    report = plan(run, print_report=False)
    assert report["stages"][0]["into"] == "pythia-31m"
    assert report["stages"][0]["sizes"] == {"n_embd": [128, 256], "intermediate_size": [512, 1024],
                                            "n_head": [4, 8], "n_query_groups": [4, 8]}
    assert report["final_config"]["name"] == "pythia-31m" and report["final_config"]["padded_vocab_size"] == 512
    with pytest.raises(SystemExit):  # a target that sets its own, different vocabulary is refused, naming it
        parse(["--config", str(config_file), "--model_name", "pythia-14m", "--model_config", "{}", "--growth.stages",
               "[{at_step: 6, model_config: {name: x, n_embd: 256, vocab_size: 1000}, rewarmup_steps: 3}]"])


def test_plan_matches_estimate_compute(config_file, capsys, tmp_path):
    cache = tmp_path / "fresh-cache"
    copy_copy = ["--growth.recipe", "recommended"]  # copy-copy: alpha 1/2 at 2x, the paper's 1.3x re-warmup
    assert main(["plan", "--config", str(config_file), "--data.cache_dir", str(cache), *copy_copy]) == 0
    printed = capsys.readouterr().out
    assert not cache.exists()  # the plan trains no tokenizer
    _, run, _ = parse(["--config", str(config_file), *copy_copy])
    est = estimate_compute(run.model_config, run.stages, total_steps=12, tokens_per_step=TOKENS_PER_STEP)
    saved = float(re.search(r"flops_saved=([0-9.]+)", printed).group(1))
    assert saved == pytest.approx(est.flops_saved, abs=1e-6)
    report = plan(run, print_report=False)
    assert report["flops"] == est.flops and report["flops_from_scratch"] == est.flops_from_scratch
    assert report["active_params"] == list(est.active_params)
    stage = report["stages"][0]
    assert stage["widths"] == {"n_embd": [32, 64], "intermediate_size": [64, 128]}
    assert stage["alpha"] == {"n_embd": pytest.approx(0.5), "intermediate_size": pytest.approx(0.5)}
    assert stage["params_before"] == est.total_params[0] and stage["params_after"] == est.total_params[1]
    groups = stage["tensor_groups"]
    assert groups["transformer.h.*.attn.qkv.weight"]["count"] == 2
    assert groups["transformer.h.*.mlp.proj.weight"]["new_shape"] == (64, 128)
    assert "transformer.h.*.attn.qkv.weight" in printed and "alpha" in printed
    # the new entries' LR window: linear re-warmup over the steps taken at 6, 7, 8, then 3 steps of cosine
    assert stage["rewarmup_window"] == {"start": 6, "warmup_end": 9, "peak_ratio": 1.3, "tail_steps": 3, "end": 12}
    assert "linear re-warmup over steps 6..9 (to 1.3x the LR at growth), then cosine to min_lr over 3 steps" in printed


def test_plan_advises_from_the_measured_map(config_file, capsys):
    from lightning_sparkling.pretrain.advice.measured import load_map

    _, run, _ = parse(["--config", str(config_file), "--growth.recipe", "paper"])
    report = plan(run, print_report=False)
    assert report["tokens_per_param"] == pytest.approx(run.total_tokens / report["active_params"][-1])
    # 0.0x tokens per parameter: far below every measured cell, so the run is told it is a demo, in one line
    assert report["tokens_per_param"] < min(c.tokens_per_param for c in load_map()) / 1.6
    warning = report["regime_warning"]
    assert warning.startswith(f"this run is a demo ({report['tokens_per_param']:.2f} training tokens per final "
                              "active parameter") and "\n" not in warning
    assert main(["plan", "--config", str(config_file), "--growth.recipe", "paper"]) == 0
    assert "warning: this run is a demo" in " ".join(capsys.readouterr().out.split())
    # 1.4 tokens per parameter (58x the steps): not a demo; the nearest joint cell (2.8) is too far to say
    _, run, _ = parse(["--config", str(config_file), "--growth.recipe", "paper", "--train.max_steps", "700",
                       "--growth.stages", "[{at_step: 350, n_embd: 64, intermediate_size: 128, rewarmup_steps: 3}]"])
    report = plan(run, print_report=False)
    warning = report["regime_warning"]
    assert f"{report['tokens_per_param']:.2f} training tokens per final active parameter" in warning
    assert warning.startswith("nothing near this run (joint, growth.recipe paper, cosine schedule, first growth at 50%")
    assert "joint, paper, cosine, growth at 50%, 2.8 tokens per parameter: Δ +0.076 ± 0.021" in warning
    # at 2.8 tokens per parameter (the quick grid's ratio): the paper's recipe was measured not to pay, recommended to
    steps = round(2.8 * report["active_params"][-1] / run.tokens_per_step)
    at = {"at_step": steps // 2, "n_embd": 64, "intermediate_size": 128, "rewarmup_steps": 3}
    for recipe, expected in (("paper", "growth cost near"), ("recommended", None)):
        _, near, _ = parse(["--config", str(config_file), "--train.max_steps", str(steps), "--growth.recipe", recipe,
                            "--growth.stages", json.dumps([at])])
        got = plan(near, print_report=False)
        assert (got["regime_warning"] is None) if expected is None else got["regime_warning"].startswith(expected)
        assert "2.8 tokens per parameter" in got["regime_advice"]
    assert "Δ -0.020 ± 0.018 val loss (above scratch in 0/3 seeds" in got["regime_advice"]
    # under WSD the default (auto) is the wsd recipe, measured to pay there; pinning recommended gets a warning
    # that names it
    wsd_args = ["--config", str(config_file), "--train.max_steps", str(steps), "--train.lr_schedule", "wsd",
                "--growth.stages", json.dumps([at])]
    _, auto, _ = parse(wsd_args)
    got = plan(auto, print_report=False)
    assert auto.growth.recipe == "wsd" and got["regime_warning"] is None
    assert ("joint, wsd, wsd, growth at 50%, 2.8 tokens per parameter: speed-up at equal loss 1.24x ± 0.05 (3 seeds), "
            "Δ -0.089 ± 0.011") in got["regime_advice"]  # the speed-up first where it was measured
    _, pinned, _ = parse([*wsd_args, "--growth.recipe", "recommended"])
    warning = plan(pinned, print_report=False)["regime_warning"]
    assert warning.startswith("growth cost near") and "Δ +0.053 ± 0.007" in warning
    assert "Measured better near this run: growth.recipe wsd (joint, wsd, wsd, growth at 50%" in warning
    _, plain, _ = parse(["--config", str(config_file), "--growth.stages", "[]"])
    assert plan(plain, print_report=False)["regime_warning"] is None


def test_plan_without_rewarmup_says_so(config_file, capsys):
    assert main(["plan", "--config", str(config_file), "--growth.stages",
                 "[{at_step: 6, n_embd: 64, rewarmup_ratio: null}]"]) == 0
    assert "no re-warmup" in capsys.readouterr().out


# ------------------------------------------------------------------------------------------------------------ variants
def test_muon_existing_tokenizer_initial_validation_and_checkpoint_pruning(first_run, cache_dir, tmp_path):
    """Muon (manual optimization, accumulation inside the module) with a tokenizer taken from a litgpt dir, a
    validation before the first step, and only the newest Lightning checkpoint kept."""
    config = tiny_config(cache_dir, train={"max_steps": 6, "save_interval": 2, "keep_last_checkpoints": 1},
                         growth={"stages": [{"at_step": 3, "intermediate_size": 128, "rewarmup_steps": 2}]},
                         optimizer={"class_path": "torch.optim.Muon", "init_args": {"lr": 0.02,
                                                                                   "adjust_lr_fn": "match_rms_adamw"}},
                         eval={"interval": None, "max_iters": 1, "initial_validation": True}, rms_monitor=None,
                         tokenizer_dir=str(first_run / "final"))
    config["data"]["max_files"] = 10
    out = tmp_path / "out"
    assert main(["pretrain", "--config", str(write_config(tmp_path / "muon.yaml", config)),
                 "--out_dir", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 6 and summary["final_model_config"]["intermediate_size"] == 128
    assert (out / "final" / "tokenizer.json").read_bytes() == (first_run / "final" / "tokenizer.json").read_bytes()
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000006.ckpt"]
    assert all((out / f"step-{s:08d}" / "lit_model.pth").is_file() for s in (2, 4, 6))
    val_steps, _ = _tb_scalars(out / "logs").scalars["val_loss"]
    assert len(val_steps) == 2 and val_steps[0] == 0  # before the first step, and at the end
    assert summary["val_loss"] is not None


# ----------------------------------------------------------------------------------------------------- distributed
@pytest.mark.slow
def test_fsdp2_two_cpu_ranks_through_the_console_script(config_file, tmp_path):
    """``sparkling pretrain --strategy fsdp2 --devices 2`` (gloo on CPU) in bf16-mixed with the default fused AdamW
    and clipping: Lightning relaunches the console script per rank; the growth gathers and re-shards; ``final/`` is a
    gathered plain litgpt state dict (tied embeddings)."""
    script = Path(sys.executable).parent / "sparkling"
    if not script.exists():
        pytest.skip("the sparkling console script is not installed next to this Python")
    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([str(script), "pretrain", "--config", str(config_file), "--out_dir", str(out),
                             "--devices", "2", "--strategy", "fsdp2", "--train.tie_embeddings", "true",
                             "--precision", "bf16-mixed",  # a GPU user's path: fused AdamW, clipped at 1.0
                             "--train.max_steps", "8", "--train.save_interval", "null", "--rms_monitor", "null",
                             "--growth.stages",
                             "[{at_step: 6, n_embd: 64, intermediate_size: 128, rewarmup_steps: 1}]"],
                            capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    for noise in ("GPU available:", "TPU available:", "litlogger", "LeafSpec", "exists and is not empty"):
        assert noise not in result.stdout + result.stderr, noise  # no rank prints Lightning's noise
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 8 and summary["final_model_config"]["n_embd"] == 64
    assert (out / "checkpoints" / "step-00000008.ckpt").is_dir()  # sharded Lightning checkpoint
    import litgpt

    state = torch.load(out / "final" / "lit_model.pth", weights_only=True)
    model = litgpt.GPT(litgpt.Config.from_file(out / "final" / "model_config.yaml"))
    model.load_state_dict(state, strict=True)
    assert torch.equal(state["lm_head.weight"], state["transformer.wte.weight"])


# ------------------------------------------------------------------------------------------------------------ README
def test_readme_commands_and_config_reference():
    import dataclasses
    import inspect

    from lightning_sparkling.pretrain.config import schema

    root = Path(__file__).resolve().parents[2]
    readme = (root / "README.md").read_text()
    blocks = re.findall(r"```bash\n(.*?)```", readme, flags=re.S)
    readme += (root / "docs" / "REFERENCE.md").read_text()  # the keys and the override examples moved there
    install_run, install_test = blocks[0].strip(), blocks[1].strip()
    assert "\n" not in install_run and "\n" not in install_test  # one copy-pasteable line each
    assert install_run.endswith("sparkling pretrain --config examples/quickstart.yaml")
    ci_lines = [line.strip() for line in (root / ".ci" / "run").read_text().splitlines()
                if line.strip() and not line.strip().startswith("#")]
    test_command = install_test.rsplit("&&", 1)[1].strip()
    assert test_command == ci_lines[-1] and test_command.startswith("python -m pytest -q")
    for name in inspect.signature(schema.pretrain_arguments).parameters:
        assert f"`{name}`" in readme, name
    for section, cls in schema._SECTIONS.items():
        for f in dataclasses.fields(cls):
            assert f"`{section}.{f.name}`" in readme, f"{section}.{f.name}"
    for f in dataclasses.fields(schema.StageArgs):
        assert f"`growth.stages[].{f.name}`" in readme, f.name
    # the README's --growth.stages examples run on the quickstart (a re-warmup that fits its 300 steps)
    examples = re.findall(r"--growth\.stages '(\[\{.*?\}\])'", readme)
    assert examples
    for stages in examples:
        _, run, _ = parse(["--config", str(root / "examples" / "quickstart.yaml"), "--growth.stages", stages])
        assert run.stages[0].at_step + run.stages[0].rewarmup_steps < run.steps


def test_optimizer_mapping_on_the_command_line_replaces_the_files_optimizer(config_file, capsys):
    """``--optimizer '{class_path, init_args}'`` over a config file whose optimizer is a mapping: the whole optimizer
    is replaced (no AdamW betas leak into SGD), where jsonargparse alone ended in an AttributeError traceback."""
    _, run, dumped = parse(["--config", str(config_file), "--optimizer",
                            "{class_path: torch.optim.SGD, init_args: {lr: 0.1, momentum: 0.9}}"])
    assert run.optimizer == {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.1, "momentum": 0.9}}
    assert "torch.optim.SGD" in dumped
    _, run, _ = parse(["--config", str(config_file), "--optimizer=AdamW"])  # a name still goes through jsonargparse
    assert run.optimizer == "AdamW"
    with pytest.raises(SystemExit) as info:  # and a bad one is still one error line
        main(["plan", "--config", str(config_file), "--optimizer",
              "{class_path: torch.optim.SGD, init_args: {lrr: 1}}"])
    assert info.value.code == 2 and "error: optimizer.init_args" in capsys.readouterr().err
