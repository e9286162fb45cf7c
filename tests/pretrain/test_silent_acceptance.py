"""Settings that used to be accepted silently (issue 40, point 4): an abbreviated key, a WSD-only key under the
cosine schedule, a growth at step 0. Each is refused in one ``error:`` line before anything is written, or noted."""

from __future__ import annotations

from lightning_sparkling.pretrain.cli import parse
from test_bad_input import refused
from test_cli import tiny_config, write_config


def test_an_abbreviated_key_is_refused_not_completed(tmp_path, capsys):
    """argparse completes ``--train.max_step`` to ``--train.max_steps``; the README says unknown keys are refused."""
    line = refused(capsys, tmp_path, tiny_config(tmp_path / "cache"), "--train.max_step", "7")
    assert "--train.max_step" in line


def test_lr_decay_shape_under_cosine_is_refused_naming_the_fix(tmp_path, capsys):
    line = refused(capsys, tmp_path, tiny_config(tmp_path / "cache"), "--train.lr_decay_shape", "sqrt")
    assert line.startswith("error: train.lr_decay_shape: 'sqrt'") and "--train.lr_schedule wsd" in line


def test_lr_decay_shape_is_kept_under_wsd_and_defaults_to_linear(tmp_path):
    path = write_config(tmp_path / "c.yaml", tiny_config(tmp_path / "cache", train={"lr_schedule": "wsd"}))
    _, run, _ = parse(["--config", str(path), "--out_dir", str(tmp_path / "o"), "--train.lr_decay_shape", "sqrt"])
    assert run.train.lr_decay_shape == "sqrt"
    _, run, _ = parse(["--config", str(path), "--out_dir", str(tmp_path / "o")])
    assert run.train.lr_decay_shape == "linear"


def test_growth_at_step_0_is_noted(tmp_path):
    config = tiny_config(tmp_path / "cache")
    config["growth"]["stages"][0]["at_step"] = 0
    path = write_config(tmp_path / "c.yaml", config)
    _, run, _ = parse(["--config", str(path), "--out_dir", str(tmp_path / "o")])
    assert run.stages[0].at_step == 0
    (note,) = [n for n in run.notes if "step 0" in n]
    assert note.startswith("growth.stages[0].at_step:") and "transformed init" in note
    config["growth"]["stages"][0]["at_step"] = 1
    _, run, _ = parse(["--config", str(write_config(tmp_path / "c.yaml", config)), "--out_dir", str(tmp_path / "o")])
    assert not [n for n in run.notes if "step 0" in n]


def test_a_flow_mapping_without_the_space_after_the_colon_names_the_space(tmp_path, capsys):
    """``{at_step:15}`` is the YAML key ``at_step:15``: the refusal says the space is missing, not only that the key
    is unknown."""
    line = refused(capsys, tmp_path, tiny_config(tmp_path / "cache"), "--growth.stages",
                   "[{at_step:5, n_embd: 64, rewarmup_steps: 2}]")
    assert line.startswith("error: growth.stages[0].at_step:5: unknown key")
    assert "YAML needs a space after the colon: write at_step: 5" in line


def test_help_lists_every_decay_shape(capsys):
    import pytest

    from lightning_sparkling.pretrain.cli import main

    with pytest.raises(SystemExit):
        main(["pretrain", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    start = text.index("--train.lr_decay_shape")
    assert all(shape in text[start:start + 400] for shape in ("linear", "cosine", "sqrt"))
