"""Preemption-safe checkpoints (issue 24): Lightning checkpoints are written to a hidden temporary name in their own
folder and renamed into place (files: ``AtomicCheckpointIO``; sharded FSDP2/FSDP1 directories: the ``Atomic*Strategy``
classes), so a process killed mid-write (SIGKILL) leaves the previous checkpoints intact and no truncated
``step-*.ckpt``; ``resume: auto`` skips unreadable checkpoints (truncated by hand here) with a warning naming them and
resumes from the newest readable one, and never takes a leftover temporary for a checkpoint."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from lightning_sparkling.pretrain.model.checkpointing import (AtomicCheckpointIO, AtomicFSDPStrategy,
                                                              AtomicModelParallelStrategy, _writes_sharded, atomic_save,
                                                              publish_dir, remove_stale_temporaries)
from lightning_sparkling.pretrain.cli import main, parse
from lightning_sparkling.pretrain.config.resume import newest_readable_checkpoint
from test_cli import tiny_config, write_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, Path]:
    """A 10-step run (growth at step 6) with checkpoints at steps 5 and 10: ``(config file, out_dir)``."""
    root = tmp_path_factory.mktemp("atomic")
    config = tiny_config(root / "cache", train={"max_steps": 10}, eval={"interval": None, "max_iters": 1},
                         rms_monitor=None, num_threads=1)
    path = write_config(root / "tiny.yaml", config)
    out = root / "out"
    assert main(["pretrain", "--config", str(path), "--out_dir", str(out)]) == 0
    return path, out


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _resume_auto(config: Path, out: Path, caplog) -> dict:
    """``sparkling pretrain --resume auto`` to the end of the run; returns its summary."""
    with caplog.at_level(logging.INFO):
        assert main(["pretrain", "--config", str(config), "--out_dir", str(out), "--resume", "auto"]) == 0
    return json.loads((out / "summary.json").read_text())


# ------------------------------------------------------------------------------------------------------------ wiring
def test_cli_trainer_writes_through_the_atomic_checkpoint_io(run, tmp_path):
    from lightning_sparkling.pretrain.cli import _build_trainer, _strategy

    config, out = run
    assert _names(out / "checkpoints") == ["step-00000005.ckpt", "step-00000010.ckpt"]  # no temporary left
    _, resolved, _ = parse(["--config", str(config), "--out_dir", str(tmp_path / "new")])
    trainer = _build_trainer(resolved, [], False)
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)
    resolved.strategy, resolved.world_size = "fsdp2", 1
    assert isinstance(_strategy(resolved), AtomicModelParallelStrategy) and _writes_sharded(_strategy(resolved))
    fsdp2 = _strategy(resolved)
    assert type(fsdp2) is AtomicModelParallelStrategy
    assert (fsdp2._data_parallel_size, fsdp2._tensor_parallel_size) == (1, 1)
    resolved.strategy = "fsdp1"  # FSDP1 runs on CUDA only: its save is the FSDP2 one (the mixin), checked here by type
    fsdp1 = _strategy(resolved)
    assert type(fsdp1) is AtomicFSDPStrategy and _writes_sharded(fsdp1) and fsdp1.kwargs["use_orig_params"] is True
    resolved.strategy = "ddp"
    assert _strategy(resolved) == "ddp"


def test_any_sharded_strategy_a_backend_makes_is_written_atomically():
    """``atomic_strategy``: the strategy object a backend made, re-classed (cached) with the atomic mixin when it
    writes sharded directories; the built-in classes map to the named ones."""
    from lightning.pytorch.strategies import DDPStrategy, ModelParallelStrategy

    from lightning_sparkling.pretrain.model.checkpointing import _AtomicShardedSave, atomic_class, atomic_strategy

    class MyShardedStrategy(ModelParallelStrategy):
        pass

    made = MyShardedStrategy(data_parallel_size=1, tensor_parallel_size=1)
    atomic = atomic_strategy(made)
    assert type(atomic).__name__ == "AtomicMyShardedStrategy" and isinstance(atomic, _AtomicShardedSave)
    assert isinstance(atomic, MyShardedStrategy) and type(atomic) is atomic_class(MyShardedStrategy)
    assert vars(atomic) == vars(made) and atomic._data_parallel_size == 1
    assert type(atomic).save_checkpoint is _AtomicShardedSave.save_checkpoint  # a save goes through the mixin
    import pickle

    assert pickle.loads(pickle.dumps(type(atomic))) is type(atomic)  # found by name (spawn launchers pickle it)
    assert atomic_class(ModelParallelStrategy) is AtomicModelParallelStrategy
    ddp = DDPStrategy()
    assert type(atomic_strategy(ddp)) is DDPStrategy  # whole files: its checkpoint_io writes them atomically


# ------------------------------------------------------------------------------------------------------------ files
def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "step-00000005.ckpt"
    AtomicCheckpointIO().save_checkpoint({"step": 5, "w": torch.ones(4)}, path)
    old = path.read_bytes()

    def failing(obj, file):
        file.write(b"PK\x03\x04 partial")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        atomic_save({"step": 6}, path, write=failing)
    assert path.read_bytes() == old and _names(tmp_path) == ["step-00000005.ckpt"]


KILLED_WRITE = textwrap.dedent("""
    import io, os, signal, sys
    import torch
    from lightning_sparkling.pretrain.model import checkpointing

    state, target = torch.load(sys.argv[1], weights_only=False), sys.argv[2]

    def dying_write(obj, file):  # the process is killed (preempted) half-way through the checkpoint's bytes
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        data = buffer.getvalue()
        file.write(data[: len(data) // 2])
        file.flush()
        os.fsync(file.fileno())
        os.kill(os.getpid(), signal.SIGKILL)

    checkpointing._write_torch = dying_write
    checkpointing.AtomicCheckpointIO().save_checkpoint(state, target)
""")


def _killed_write(src: Path, target: Path) -> None:
    """A subprocess saves the checkpoint ``src`` to ``target`` with ``AtomicCheckpointIO`` and is SIGKILLed half-way
    through writing it."""
    result = subprocess.run([sys.executable, "-c", KILLED_WRITE, str(src), str(target)], capture_output=True,
                            text=True, timeout=300, cwd=REPO)
    assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]


def test_sigkill_while_writing_a_new_checkpoint_then_auto_resumes_from_the_previous(run, tmp_path, caplog):
    config, out = run
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    folder = copy / "checkpoints"
    saved = tmp_path / "step-10.pt"
    shutil.move(folder / "step-00000010.ckpt", saved)
    previous = (folder / "step-00000005.ckpt").read_bytes()
    _killed_write(saved, folder / "step-00000010.ckpt")
    names = _names(folder)
    assert len(names) == 2 and names[0].startswith(".step-00000010.ckpt.") and names[0].endswith(".tmp"), names
    assert names[1] == "step-00000005.ckpt"  # no truncated step-00000010.ckpt
    assert (folder / "step-00000005.ckpt").read_bytes() == previous  # the previous checkpoint is intact
    assert newest_readable_checkpoint(copy) == (folder / "step-00000005.ckpt", [])  # the temporary is no candidate
    summary = _resume_auto(config, copy, caplog)
    assert summary["status"] == "completed" and summary["steps"] == 10
    assert summary["resumed_from"] == str(folder / "step-00000005.ckpt")
    assert _names(folder) == ["step-00000005.ckpt", "step-00000010.ckpt"]  # the next write removed the leftover
    assert not any("unreadable" in r.getMessage() for r in caplog.records)


def test_sigkill_while_replacing_a_checkpoint_keeps_the_old_one(run, tmp_path):
    _, out = run
    folder = tmp_path / "checkpoints"
    shutil.copytree(out / "checkpoints", folder)
    target = folder / "step-00000010.ckpt"
    old = target.read_bytes()
    _killed_write(folder / "step-00000005.ckpt", target)
    assert target.read_bytes() == old
    assert newest_readable_checkpoint(tmp_path) == (target, [])


LOOPED_WRITES = textwrap.dedent("""
    import sys
    import torch
    from lightning_sparkling.pretrain.model.checkpointing import AtomicCheckpointIO

    io, target = AtomicCheckpointIO(), sys.argv[1]
    weights = torch.randn(12_000_000)  # 48 MB: a write takes a while
    for k in range(1_000_000):
        io.save_checkpoint({"k": k, "weights": weights, "tail": weights[-1000:].clone()}, target)
""")


def test_sigkill_at_any_moment_of_a_real_write_leaves_a_complete_checkpoint(tmp_path):
    """No patched writer: a process rewriting a large checkpoint in a loop is SIGKILLed while a write is under way
    (its temporary file is growing); the checkpoint file is then a complete earlier one."""
    target = tmp_path / "step-00000001.ckpt"
    proc = subprocess.Popen([sys.executable, "-c", LOOPED_WRITES, str(target)], cwd=REPO, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and proc.poll() is None:
            temporaries = list(tmp_path.glob(".step-00000001.ckpt.*.tmp")) if target.exists() else []
            if any(p.stat().st_size > 0 for p in temporaries if p.exists()):
                break
            time.sleep(0.002)
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert any(tmp_path.glob(".step-00000001.ckpt.*.tmp"))  # killed mid-write
    state = torch.load(target, weights_only=True)
    assert state["weights"].numel() == 12_000_000 and torch.equal(state["tail"], state["weights"][-1000:])
    assert remove_stale_temporaries(tmp_path) and _names(tmp_path) == ["step-00000001.ckpt"]


# ------------------------------------------------------------------------------------------------------------ auto
def test_truncated_newest_checkpoint_is_skipped_by_auto_with_a_warning(run, tmp_path, caplog):
    config, out = run
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    bad = copy / "checkpoints" / "step-00000010.ckpt"
    bad.write_bytes(bad.read_bytes()[:50_000])  # truncated by hand
    summary = _resume_auto(config, copy, caplog)
    assert summary["status"] == "completed" and summary["steps"] == 10
    assert summary["resumed_from"] == str(copy / "checkpoints" / "step-00000005.ckpt")
    warnings = [r.getMessage() for r in caplog.records if "skipped 1 unreadable checkpoint" in r.getMessage()]
    assert len(warnings) == 1 and str(bad) in warnings[0] and "step-00000005.ckpt" in warnings[0], warnings
    assert newest_readable_checkpoint(copy) == (bad, [])  # rewritten, whole, by the resumed run


def test_explicit_resume_path_still_refuses_a_truncated_checkpoint(run, tmp_path, capsys):
    config, out = run
    bad = tmp_path / "step-00000010.ckpt"
    bad.write_bytes((out / "checkpoints" / "step-00000010.ckpt").read_bytes()[:50_000])
    with pytest.raises(SystemExit) as info:
        main(["pretrain", "--config", str(config), "--out_dir", str(tmp_path / "new"), "--resume", str(bad)])
    assert info.value.code == 2
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert line.startswith(f"error: resume: cannot read the checkpoint '{bad}'"), line
    assert not (tmp_path / "new").exists()


# ------------------------------------------------------------------------------------------------------------ sharded
def test_publish_dir_replaces_a_directory_and_stale_temporaries_are_ours_only(tmp_path):
    final, tmp = tmp_path / "step-00000005.ckpt", tmp_path / ".step-00000005.ckpt.tmp"
    for folder, text in ((final, "old"), (tmp, "new")):
        folder.mkdir()
        (folder / "meta.pt").write_text(text)
    publish_dir(tmp, final)
    assert (final / "meta.pt").read_text() == "new" and _names(tmp_path) == ["step-00000005.ckpt"]
    stale = [".step-00000009.ckpt.tmp", ".step-00000009.ckpt.0a1b2c3d.tmp", ".step-00000009.ckpt.old-0a1b2c3d"]
    kept = [".keep", "step-00000009.ckpt", "notes.tmp"]
    for name in stale + kept:
        (tmp_path / name).mkdir() if name.endswith(".ckpt.tmp") else (tmp_path / name).write_text("x")
    assert sorted(p.name for p in remove_stale_temporaries(tmp_path)) == sorted(stale)
    assert _names(tmp_path) == sorted(kept + ["step-00000005.ckpt"])


def test_a_checkpoint_swapped_aside_by_a_killed_replacement_is_resumed_from_and_renamed_back(tmp_path):
    """A kill between publish_dir's two renames leaves only `.step-N.ckpt.old-<hex>`: `auto` must still find step N
    (it is the only copy), and the next save's cleanup renames it back instead of deleting it."""
    from lightning_sparkling.pretrain.config.resume import _step_checkpoints

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    (folder / "step-00000005.ckpt").write_text("5")
    orphan = folder / ".step-00000010.ckpt.old-0a1b2c3d"
    orphan.mkdir()
    (orphan / "meta.pt").write_text("10")
    assert _step_checkpoints(tmp_path) == [orphan, folder / "step-00000005.ckpt"]
    assert remove_stale_temporaries(folder) == []
    assert _names(folder) == ["step-00000005.ckpt", "step-00000010.ckpt"]
    assert (folder / "step-00000010.ckpt" / "meta.pt").read_text() == "10"
    assert _step_checkpoints(tmp_path)[0] == folder / "step-00000010.ckpt"


KILL_AFTER_SHARDS = textwrap.dedent("""
    import os, signal
    import torch.distributed.checkpoint as dcp

    _save = dcp.save

    def save(state_dict, *args, checkpoint_id=None, **kwargs):  # every rank is killed once its shards are written
        result = _save(state_dict, *args, checkpoint_id=checkpoint_id, **kwargs)
        kill_at = os.environ.get("SPARKLING_TEST_KILL_AT")
        if kill_at and kill_at in str(checkpoint_id):
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    dcp.save = save
""")


def test_fsdp2_directory_write_killed_on_every_rank_then_auto_resumes(run, tmp_path):
    """Two FSDP2 ranks (gloo, CPU) are SIGKILLed after writing the shards of the step-10 checkpoint, before its
    ``meta.pt`` and the rename: no ``step-00000010.ckpt`` directory appears, and ``auto`` resumes from step 5."""
    script = Path(sys.executable).parent / "sparkling"
    if not script.exists():
        pytest.skip("the sparkling console script is not installed next to this Python")
    config, _ = run
    (tmp_path / "hook").mkdir()
    (tmp_path / "hook" / "sitecustomize.py").write_text(KILL_AFTER_SHARDS)
    out = tmp_path / "out"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(tmp_path / "hook"),
           "SPARKLING_TEST_KILL_AT": "step-00000010"}
    args = [str(script), "pretrain", "--config", str(config), "--out_dir", str(out), "--devices", "2", "--strategy",
            "fsdp2"]
    killed = subprocess.run(args, capture_output=True, text=True, timeout=300, env=env)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert _names(out / "checkpoints") == [".step-00000010.ckpt.tmp", "step-00000005.ckpt"]
    assert not (out / "checkpoints" / ".step-00000010.ckpt.tmp" / "meta.pt").exists()
    env.pop("SPARKLING_TEST_KILL_AT")
    resumed = subprocess.run([*args, "--resume", "auto"], capture_output=True, text=True, timeout=300, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed_from"] == str(out / "checkpoints" / "step-00000005.ckpt") and summary["steps"] == 10
    assert _names(out / "checkpoints") == ["step-00000005.ckpt", "step-00000010.ckpt"]
    assert (out / "checkpoints" / "step-00000010.ckpt" / "meta.pt").is_file()
