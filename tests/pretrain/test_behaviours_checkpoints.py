"""Behaviours of checkpoint writing and resuming that no other test pinned (issue 31's mutation audit): the temporary
file is flushed to disk before it is renamed into place, and its folder after the rename; ``file://`` paths go through
the atomic save; ``resume: auto`` on an out_dir without checkpoints starts afresh; a broken checkpoint among three or
more is refused naming the newest older one."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import torch

from lightning_sparkling.pretrain.model import checkpointing
from lightning_sparkling.pretrain.model.checkpointing import AtomicCheckpointIO, atomic_save
from lightning_sparkling.pretrain.cli import parse
from lightning_sparkling.pretrain.errors import ConfigError
from lightning_sparkling.pretrain.config.resume import check_resume_checkpoint
from test_cli import tiny_config, write_config


# ------------------------------------------------------------------------------------------------------------ writing
def _record_disk_calls(monkeypatch) -> list[tuple]:
    """Record ``os.fsync`` (what the descriptor is: a regular file's name, or ``"dir"``) and ``os.replace`` calls, in
    order, letting them through."""
    events: list[tuple] = []
    fsync, replace = os.fsync, os.replace

    def recording_fsync(fd):
        mode = os.fstat(fd).st_mode
        name = Path(os.readlink(f"/proc/self/fd/{fd}")).name if stat.S_ISREG(mode) else "dir"
        events.append(("fsync", name))
        return fsync(fd)

    def recording_replace(src, dst):
        events.append(("replace", Path(src).name, Path(dst).name))
        return replace(src, dst)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    monkeypatch.setattr(os, "replace", recording_replace)
    return events


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd to name the fsynced file")
def test_the_temporary_is_fsynced_before_the_rename_and_the_folder_after(tmp_path, monkeypatch):
    events = _record_disk_calls(monkeypatch)
    target = tmp_path / "step-00000005.ckpt"
    atomic_save({"w": torch.ones(3)}, target)
    assert [e[0] for e in events] == ["fsync", "replace", "fsync"], events
    (_, synced), (_, src, dst), last = events
    assert synced == src and src.startswith(".step-00000005.ckpt.") and src.endswith(".tmp")  # the temporary's bytes
    assert dst == target.name and last == ("fsync", "dir")  # then the rename itself
    assert torch.equal(torch.load(target)["w"], torch.ones(3))


def test_file_urls_are_saved_atomically(tmp_path, monkeypatch):
    """A ``file://`` checkpoint path is a local file: written by ``atomic_save`` (and stale temporaries of the folder
    cleared), not by fsspec's direct write."""
    calls = []
    monkeypatch.setattr(checkpointing, "atomic_save", lambda obj, path: calls.append(Path(path)) or
                        atomic_save(obj, path))
    stale = tmp_path / ".step-00000003.ckpt.0badf00d.tmp"
    stale.write_bytes(b"half a checkpoint")
    target = tmp_path / "step-00000005.ckpt"
    AtomicCheckpointIO().save_checkpoint({"step": 5}, f"file://{target}")
    assert calls == [target]
    assert torch.load(target)["step"] == 5 and not stale.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-00000005.ckpt"]


# ------------------------------------------------------------------------------------------------------------ resuming
@pytest.mark.parametrize("make", ["absent", "empty", "empty checkpoints folder"])
def test_resume_auto_without_a_checkpoint_starts_afresh(tmp_path, make):
    out = tmp_path / "out"
    if make != "absent":
        out.mkdir()
    if make == "empty checkpoints folder":
        (out / "checkpoints").mkdir()
    config = write_config(tmp_path / "tiny.yaml", tiny_config(tmp_path / "cache", rms_monitor=None))
    _, run, _ = parse(["--config", str(config), "--out_dir", str(out), "--resume", "auto"])
    assert run.resume_path is None and not any(n.startswith("warning: resume") for n in run.notes)
    with pytest.raises(SystemExit):  # `resume: true` needs one
        parse(["--config", str(config), "--out_dir", str(out), "--resume", "true"])


@pytest.mark.parametrize("older", [[3, 6], [3, 6, 9], [9, 3, 6, 1]])
def test_a_broken_checkpoint_is_refused_naming_the_newest_older_one(tmp_path, older):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    for step in older:
        (folder / f"step-{step:08d}.ckpt").write_bytes(b"not read")
    broken = folder / "step-00000012.ckpt"
    broken.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ConfigError, match="cannot read the checkpoint") as info:
        check_resume_checkpoint(broken, None, [], tie_embeddings=False)
    assert f"resume from an older one (--resume {folder / f'step-{max(older):08d}.ckpt'})" in str(info.value)
