"""Ctrl-C and exceptions during ``sparkling pretrain`` lose no finished step: the Lightning checkpoint of the last
completed optimizer step is saved, ``summary.json`` says the run was interrupted (or failed), the exact resume command
is printed, and resuming from it ends where an uninterrupted run ends."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from lightning_sparkling.pretrain.cli import main, resume_command
from lightning_sparkling.pretrain.training.module import LitGPTPretrainModule
from test_cli import tiny_config, write_config


def _final_state(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(out / "final" / "lit_model.pth", weights_only=True)


def test_resume_command_replaces_resume():
    assert resume_command(["--config", "a b.yaml", "--resume", "auto", "--train.max_steps", "9"], "o/c.ckpt") == \
        "sparkling pretrain --config 'a b.yaml' --train.max_steps 9 --resume o/c.ckpt"
    assert resume_command(["--config=x.yaml", "--resume=true"], "c.ckpt") == \
        "sparkling pretrain --config=x.yaml --resume c.ckpt"


def test_exception_in_a_step_leaves_a_resumable_checkpoint(tmp_path, monkeypatch, capsys):
    """A step raises in the middle of a gradient accumulation (step 9, second micro-batch, after the growth at step
    6): the checkpoint holds step 8 exactly (the half-accumulated micro-batch is not counted), and resuming from it
    ends bit for bit where the uninterrupted run ends."""
    config = write_config(tmp_path / "tiny.yaml", tiny_config(tmp_path / "cache", num_threads=1))
    full = tmp_path / "full"
    assert main(["pretrain", "--config", str(config), "--out_dir", str(full)]) == 0

    original = LitGPTPretrainModule.training_step

    def failing_step(self, batch, batch_idx):
        if self.trainer.global_step == 8 and batch_idx % 2 == 1:  # accumulate_grad_batches=2: mid-step
            raise RuntimeError("boom in a training step")
        return original(self, batch, batch_idx)

    out = tmp_path / "out"
    args = ["--config", str(config), "--out_dir", str(out)]
    monkeypatch.setattr(LitGPTPretrainModule, "training_step", failing_step)
    with pytest.raises(RuntimeError, match="boom in a training step"):
        main(["pretrain", *args])
    monkeypatch.setattr(LitGPTPretrainModule, "training_step", original)

    ckpt = out / "checkpoints" / "step-00000008.ckpt"  # not a save_interval step (5, 10): written on the exception
    assert ckpt.is_file()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["steps"] == 8 and summary["checkpoint"] == str(ckpt)
    assert "boom in a training step" in summary["error"] and summary["final_dir"] is None
    assert summary["resume_command"] == shlex.join(["sparkling", "pretrain", *args, "--resume", str(ckpt)])
    assert f"resume with: {summary['resume_command']}" in capsys.readouterr().err
    state = torch.load(ckpt, weights_only=False)
    assert state["global_step"] == 8 and state["TextCorpusDataModule"]["samples_consumed"] == 8 * 8
    assert state["callbacks"]["GrowthCallback"]["grown"] == 1

    assert main(["pretrain", *args, "--resume", str(ckpt)]) == 0
    resumed = json.loads((out / "summary.json").read_text())
    assert resumed["status"] == "completed" and resumed["steps"] == 12
    assert [e["global_step"] for e in resumed["growth_events"]] == [6]  # the growth before the failure, reported
    expected, got = _final_state(full), _final_state(out)
    assert expected.keys() == got.keys()
    assert all(torch.equal(expected[k], got[k]) for k in expected), "the resumed run ends elsewhere"


def _sigint_after_optimizer_step(monkeypatch, step: int, times: int) -> None:
    """Make the fit send itself ``times`` SIGINTs from a torch step post-hook of optimizer step ``step + 1``: after
    ``optimizer.step()`` changed the weights, before Lightning counts the step and the batch ends."""
    original = LitGPTPretrainModule.on_train_start

    def on_train_start(self):
        original(self)

        def post_hook(opt, args, kwargs):
            if self.trainer.global_step == step:
                for _ in range(times):
                    os.kill(os.getpid(), signal.SIGINT)

        self.trainer.optimizers[0].register_step_post_hook(post_hook)

    monkeypatch.setattr(LitGPTPretrainModule, "on_train_start", on_train_start)


@pytest.mark.parametrize("micro_batch_size", [8, 4])  # accumulation 1 and 2
def test_ctrl_c_right_after_an_optimizer_step_is_held_until_the_step_ends(tmp_path, monkeypatch, micro_batch_size):
    """SIGINT delivered inside step 9, after ``optimizer.step()`` changed the weights but before the batch ends:
    the step finishes, the checkpoint holds step 9 (weights, optimizer and loop of the same step) and resuming from
    it ends bit for bit where the uninterrupted run ends. Before the fix the interrupt was raised at once, and the
    checkpoint paired step 9's weights with step 8's loop."""
    config = write_config(tmp_path / "tiny.yaml", tiny_config(tmp_path / "cache", num_threads=1))
    args = ["--config", str(config), "--train.micro_batch_size", str(micro_batch_size)]
    full = tmp_path / "full"
    handler = signal.getsignal(signal.SIGINT)
    assert main(["pretrain", *args, "--out_dir", str(full)]) == 0
    assert signal.getsignal(signal.SIGINT) is handler  # the fit's own handler is gone after it

    out = tmp_path / "out"
    args += ["--out_dir", str(out)]
    with monkeypatch.context() as patch:
        _sigint_after_optimizer_step(patch, step=8, times=1)
        assert main(["pretrain", *args]) == 130
    assert signal.getsignal(signal.SIGINT) is handler

    summary = json.loads((out / "summary.json").read_text())
    ckpt = out / "checkpoints" / "step-00000009.ckpt"
    assert summary["status"] == "interrupted" and summary["steps"] == 9, summary
    assert summary["checkpoint"] == str(ckpt) and summary["checkpoint_step"] == 9
    state = torch.load(ckpt, weights_only=False)
    assert state["global_step"] == 9 and state["TextCorpusDataModule"]["samples_consumed"] == 9 * 8

    assert main(["pretrain", *args, "--resume", str(ckpt)]) == 0
    expected, got = _final_state(full), _final_state(out)
    assert all(torch.equal(expected[k], got[k]) for k in expected), "the resumed run ends elsewhere"


def test_a_second_ctrl_c_stops_at_once_and_names_the_newest_periodic_checkpoint(tmp_path, monkeypatch):
    """Two SIGINTs inside step 9, after its weights changed: the second stops the fit there, no checkpoint of that
    half-finished moment is written, and the run names the newest periodic checkpoint (step 5) to resume from."""
    config = write_config(tmp_path / "tiny.yaml", tiny_config(tmp_path / "cache", num_threads=1))
    out = tmp_path / "out"
    _sigint_after_optimizer_step(monkeypatch, step=8, times=2)
    assert main(["pretrain", "--config", str(config), "--out_dir", str(out)]) == 130
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    assert summary["checkpoint"] == str(out / "checkpoints" / "step-00000005.ckpt"), summary
    assert sorted(p.name for p in (out / "checkpoints").glob("*.ckpt")) == ["step-00000005.ckpt"]


@pytest.mark.slow
def test_ctrl_c_saves_a_checkpoint_summary_and_resume_command(tmp_path):
    """A real ``sparkling pretrain`` process gets SIGINT once it has written its step-4 checkpoint."""
    script = Path(sys.executable).parent / "sparkling"
    if not script.exists():
        pytest.skip("the sparkling console script is not installed next to this Python")
    config = write_config(tmp_path / "tiny.yaml", tiny_config(
        tmp_path / "cache", num_threads=1, train={"max_steps": 40, "save_interval": 4},
        eval={"interval": 20, "max_iters": 1}, rms_monitor=None))
    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "COLUMNS": "120"}
    process = subprocess.Popen([str(script), "pretrain", "--config", str(config), "--out_dir", str(out)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 240
        while not (out / "checkpoints" / "step-00000004.ckpt").exists():
            assert process.poll() is None, process.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "no step-4 checkpoint after 240 s"
            time.sleep(0.05)
        time.sleep(0.2)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=240)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["interrupted"] is True
    steps = summary["steps"]
    assert 4 <= steps < 40, "the run ended before the interrupt: make it longer"
    ckpt = Path(summary["checkpoint"])
    assert ckpt == out / "checkpoints" / f"step-{steps:08d}.ckpt" and ckpt.is_file()  # no finished step lost
    assert summary["resume_command"].endswith(f"--resume {ckpt}")
    assert f"resume with: {summary['resume_command']}" in stderr
    assert "Traceback" not in stderr
    # what the user reads: steps against max_steps, no 'Epoch 0/-2', no 'Total FLOPs: 0'
    assert "Epoch" not in stdout and "Total FLOPs" not in stdout and "/40" in stdout
    assert "training FLOPs (6 N D)" in stderr

    command = shlex.split(summary["resume_command"])
    assert command[:2] == ["sparkling", "pretrain"]
    result = subprocess.run([str(script), *command[1:]], capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    done = json.loads((out / "summary.json").read_text())
    assert done["status"] == "completed" and done["steps"] == 40 and done["resumed_from"] == str(ckpt)
    assert (out / "final" / "lit_model.pth").is_file()
