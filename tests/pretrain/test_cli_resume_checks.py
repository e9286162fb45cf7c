"""Bad resumes are refused before anything starts, in one ``error:`` line naming the file, what is wrong and the fix:
corrupt or truncated checkpoints, checkpoints grown by other stages, checkpoints of another architecture (files and
sharded FSDP directories); ``sparkling plot`` on a missing or empty folder."""

from __future__ import annotations

import shutil
import warnings
import zipfile
from pathlib import Path

import pytest
import torch

from lightning_sparkling.pretrain.cli import main, parse
from test_cli import MODEL, tiny_config, write_config


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, Path]:
    """A 10-step run (growth at step 6) with checkpoints at steps 5 and 10: ``(config file, out_dir)``."""
    root = tmp_path_factory.mktemp("resume-checks")
    config = tiny_config(root / "cache", train={"max_steps": 10}, eval={"interval": None, "max_iters": 1},
                         rms_monitor=None, num_threads=1)
    path = write_config(root / "tiny.yaml", config)
    out = root / "out"
    assert main(["pretrain", "--config", str(path), "--out_dir", str(out)]) == 0
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-00000005.ckpt", "step-00000010.ckpt"]
    return path, out


def _refused(capsys, args: list[str], out: Path) -> str:
    """Runs ``sparkling pretrain`` expecting a refusal: exit status 2, one error line, nothing written in ``out``."""
    with pytest.raises(SystemExit) as info:
        main(["pretrain", *args, "--out_dir", str(out)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: resume: "), err
    assert not out.exists()  # no logs/, no checkpoints/, no summary
    return lines[0]


def _corrupt_pickle(src: Path, dst: Path) -> Path:
    """``src`` with bytes of its pickled object tree (``data.pkl``) overwritten: unreadable, as after a bad copy."""
    data = bytearray(src.read_bytes())
    info = next(i for i in zipfile.ZipFile(src).infolist() if i.filename.endswith("data.pkl"))
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    data[start + 50:start + 300] = bytes(250)
    dst.write_bytes(bytes(data))
    return dst


def test_corrupt_checkpoint_is_named_with_an_older_one_to_use(run, tmp_path, capsys):
    config, out = run
    folder = tmp_path / "checkpoints"
    shutil.copytree(out / "checkpoints", folder)
    bad = _corrupt_pickle(folder / "step-00000010.ckpt", folder / "step-00000010.ckpt")
    line = _refused(capsys, ["--config", str(config), "--resume", str(bad)], tmp_path / "new")
    assert str(bad) in line and "cannot read the checkpoint" in line
    assert f"--resume {folder / 'step-00000005.ckpt'}" in line  # the fix: the next-newest checkpoint


def test_truncated_checkpoint_is_refused(run, tmp_path, capsys):
    config, out = run
    bad = tmp_path / "step-00000010.ckpt"
    bad.write_bytes((out / "checkpoints" / "step-00000010.ckpt").read_bytes()[:50_000])
    line = _refused(capsys, ["--config", str(config), "--resume", str(bad)], tmp_path / "new")
    assert "cannot read the checkpoint" in line and str(bad) in line and "--resume false" in line


def test_resume_auto_skips_a_corrupt_newest_checkpoint(run, tmp_path):
    """A preempted write left the newest checkpoint unreadable: ``auto`` warns, naming it, and takes the next one."""
    config, out = run
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    bad = _corrupt_pickle(copy / "checkpoints" / "step-00000010.ckpt", copy / "checkpoints" / "step-00000010.ckpt")
    _, resolved, _ = parse(["--config", str(config), "--out_dir", str(copy), "--resume", "auto"])
    assert resolved.resume_path == copy / "checkpoints" / "step-00000005.ckpt"
    warning = [n for n in resolved.notes if n.startswith("warning: resume: skipped 1 unreadable checkpoint")]
    assert len(warning) == 1 and str(bad) in warning[0] and "step-00000005.ckpt" in warning[0], resolved.notes


def test_resume_auto_refuses_when_no_checkpoint_is_readable(run, tmp_path, capsys):
    config, out = run
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    for name in ("step-00000005.ckpt", "step-00000010.ckpt"):
        _corrupt_pickle(copy / "checkpoints" / name, copy / "checkpoints" / name)
    before = {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()}
    with pytest.raises(SystemExit) as info:
        main(["pretrain", "--config", str(config), "--out_dir", str(copy), "--resume", "auto"])
    assert info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: resume: no checkpoint in "), lines
    assert "step-00000010.ckpt" in lines[0] and "step-00000005.ckpt" in lines[0]
    assert {p: p.read_bytes() for p in copy.rglob("*") if p.is_file()} == before  # nothing written or removed


@pytest.mark.parametrize("override, expected", [
    # grown by other stages than the config's
    (["--growth.stages", "[{at_step: 6, n_embd: 64, rewarmup_steps: 3}]"],
     "another growth.stages[0] than the config's (intermediate_size: checkpoint 128, config None)"),
    (["--growth.stages", "[]"], "was grown by 1 stage(s) but growth.stages has 0"),
    # same stages, other recipe: the message names the key that restores it
    (["--growth.recipe", "paper"],
     "(init: checkpoint 'random-zero', config 'copy-copy', rewarmup_ratio: checkpoint 3.0"),
    (["--growth.recipe", "paper"], "only the recipe's keys differ: growth.recipe: random-zero-3x"),  # as trained
    # another architecture: the checkpoint's would be silently used (then a KeyError a few steps later)
    (["--model_config.n_layer", "3"], "n_layer: checkpoint 2, config 3"),
    (["--data.seq_len", "16"], "block_size: checkpoint 32, config 16"),
    (["--train.tie_embeddings", "true"], "train.tie_embeddings=False"),
    (["--optimizer", "torch.optim.Muon"], "holds 1 optimizer state(s) and this run builds 2"),
])
def test_checkpoint_of_another_run_is_refused(run, tmp_path, capsys, override, expected):
    config, out = run
    ckpt = out / "checkpoints" / "step-00000010.ckpt"
    line = _refused(capsys, ["--config", str(config), "--resume", str(ckpt), *override], tmp_path / "new")
    assert expected in line and str(ckpt) in line, line
    assert "start a fresh out_dir" in line or "resume with" in line


def test_stage_the_checkpoint_skipped_is_refused(run, tmp_path, capsys):
    """A plain checkpoint at step 10 resumed with a growth at step 4: that growth would happen late, at step 10."""
    config, out = run
    ckpt = out / "checkpoints" / "step-00000010.ckpt"
    state = torch.load(ckpt, weights_only=False)
    del state["callbacks"]["GrowthCallback"]
    plain = tmp_path / "step-00000010.ckpt"
    torch.save(state, plain)
    line = _refused(capsys, ["--config", str(config), "--resume", str(plain), "--growth.stages",
                             "[{at_step: 4, n_embd: 64, intermediate_size: 128, rewarmup_steps: 2}]"],
                    tmp_path / "new")
    assert "was not grown by growth.stages[0] (at_step=4)" in line


def test_shapes_are_compared_when_the_checkpoint_has_no_model_config(run, tmp_path, capsys):
    config, out = run
    state = torch.load(out / "checkpoints" / "step-00000010.ckpt", weights_only=False)
    del state["model_config"]
    ckpt = tmp_path / "step-00000010.ckpt"
    torch.save(state, ckpt)
    # n_head 8 (head_size 4 instead of 8) keeps every parameter shape except the attention's own
    line = _refused(capsys, ["--config", str(config), "--resume", str(ckpt), "--model_config",
                             str({**MODEL, "n_head": 8, "n_query_groups": 8})], tmp_path / "new")
    assert "does not hold the parameters of model_config" in line and "attn.qkv.weight" in line, line


def _sharded(src: Path, folder: Path, *, keep_model_config: bool = True) -> Path:
    """``src`` as an FSDP2-style sharded checkpoint directory: ``meta.pt`` + a ``torch.distributed.checkpoint`` of
    ``{"state_dict": ...}`` (what ``ModelParallelStrategy`` writes; saved here by one process)."""
    import torch.distributed.checkpoint as dcp

    state = torch.load(src, weights_only=False)
    tensors = {"state_dict": state.pop("state_dict")}
    state.pop("optimizer_states")
    if not keep_model_config:
        del state["model_config"]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*assuming the intent is to save in a single process")
        dcp.save(tensors, checkpoint_id=str(folder))
    torch.save(state, folder / "meta.pt")
    return folder


def test_sharded_checkpoint_directories_are_checked(run, tmp_path, capsys):
    config, out = run
    src = out / "checkpoints" / "step-00000010.ckpt"
    folder = _sharded(src, tmp_path / "step-00000010.ckpt", keep_model_config=False)
    # a good one passes (plan resolves the same configuration, and checks the resume point)
    assert main(["plan", "--config", str(config), "--resume", str(folder)]) == 0
    capsys.readouterr()
    line = _refused(capsys, ["--config", str(config), "--resume", str(folder), "--growth.stages", "[]"],
                    tmp_path / "new")
    assert "was grown by 1 stage(s)" in line
    line = _refused(capsys, ["--config", str(config), "--resume", str(folder), "--model_config",
                             str({**MODEL, "n_head": 8, "n_query_groups": 8})], tmp_path / "new")
    assert "transformer.h.0.attn.qkv.weight: checkpoint (64, 64), config (96, 64)" in line, line
    (folder / "meta.pt").unlink()
    line = _refused(capsys, ["--config", str(config), "--resume", str(folder)], tmp_path / "new")
    assert "without meta.pt" in line


# ------------------------------------------------------------------------------------------------------------ plot
@pytest.mark.parametrize("make", [lambda p: p / "missing", lambda p: (p / "empty").mkdir() or p / "empty"])
def test_plot_on_a_missing_or_empty_folder_is_one_error_line(tmp_path, capsys, make):
    folder = make(tmp_path)
    with pytest.raises(SystemExit) as info:
        main(["plot", str(folder), "--out", str(tmp_path / "dash.png")])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "error: " in err and str(folder) in err and "logs/" in err
    assert not (tmp_path / "dash.png").exists()


def test_a_stage_given_by_at_fraction_resumes_where_its_step_matches(run, tmp_path, capsys):
    """The checkpoint grew at step 6 of 10: ``at_fraction: 0.6`` is that step (the checkpoint's stages are steps),
    ``0.5`` (step 5) is another stage, refused naming the step."""
    config, out = run
    ckpt = out / "checkpoints" / "step-00000010.ckpt"
    stage = "[{{at_fraction: {}, n_embd: 64, intermediate_size: 128, rewarmup_steps: 3}}]"
    _, resolved, _ = parse(["--config", str(config), "--resume", str(ckpt), "--out_dir", str(tmp_path / "ok"),
                            "--growth.stages", stage.format(0.6)])
    assert [s.at_step for s in resolved.stages] == [6] and resolved.resume_path == ckpt
    line = _refused(capsys, ["--config", str(config), "--resume", str(ckpt), "--growth.stages", stage.format(0.5)],
                    tmp_path / "new")
    assert "another growth.stages[0] than the config's (at_step: checkpoint 6, config 5)" in line, line


def test_a_checkpoint_written_before_stages_named_their_recipe_resumes_on_its_keys(run, tmp_path):
    """Stage dicts without ``recipe`` (checkpoints of earlier releases) match the config's stages on every other key;
    a different key is still refused."""
    import torch

    from lightning_sparkling.pretrain.cli import parse

    config, out = run
    state = torch.load(out / "checkpoints" / "step-00000010.ckpt", weights_only=False)
    for stage in state["callbacks"]["GrowthCallback"]["stages"]:
        assert stage.pop("recipe") == "random-zero-3x"
        assert stage.pop("_filled")["init"] == "random-zero"  # nor which keys the recipe filled (issue 53)
    old = tmp_path / "old.ckpt"
    torch.save(state, old)
    _, resumed, _ = parse(["--config", str(config), "--resume", str(old), "--out_dir", str(tmp_path / "o")])
    assert resumed.resume_path == old
    with pytest.raises(SystemExit):
        parse(["--config", str(config), "--resume", str(old), "--out_dir", str(tmp_path / "o"),
               "--growth.recipe", "paper"])
