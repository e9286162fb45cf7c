"""What a ``sparkling pretrain`` run prints besides its own lines: none of Lightning's device lines, LitLogger tip,
``_pytree`` deprecation warning or (on resume) "Checkpoint directory ... exists and is not empty"; and the progress
bar's last line shows no val loss older than the run's last step (the summary's is validated after the fit)."""

from __future__ import annotations

import logging
import re
import warnings

from test_cli import tiny_config, write_config

from lightning_sparkling.pretrain.cli import main

NOISE = ("GPU available:", "TPU available:", "Tip: For seamless", "litlogger", "LeafSpec", "_pytree",
         "exists and is not empty")


def _run(argv, capfd, caplog) -> tuple[str, list[str]]:
    """What ``sparkling pretrain ARGV`` printed (stdout, stderr, and the log records of Lightning's logger, whose
    handler writes to the stream it found at import) and the warnings it raised (every warning recorded, whatever
    the test session's filters)."""
    caplog.clear()
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.INFO):
        warnings.simplefilter("always")
        assert main(["pretrain", *argv]) == 0
    out, err = capfd.readouterr()
    return out + err + caplog.text, [str(w.message) for w in caught]


def _last_bar_line(text: str) -> str:
    """The progress bar's last frame: the ``step ━━ N/N ...`` line and its wrapped metric lines."""
    frames = re.findall(r"step\s+━+ .*?(?=\n\S|\Z)", text.replace("\r", "\n"), flags=re.S)
    assert frames, text[-2000:]
    return frames[-1]


def test_a_run_and_its_resume_print_no_third_party_noise(tmp_path, capfd, caplog):
    config = tiny_config(tmp_path / "cache", growth={"stages": []}, rms_monitor=None,
                         train={"max_steps": 5, "save_interval": 5}, eval={"interval": 2, "max_iters": 1})
    path = write_config(tmp_path / "tiny.yaml", config)
    out_dir = str(tmp_path / "out")
    first, first_warnings = _run(["--config", str(path), "--out_dir", out_dir], capfd, caplog)
    resumed, resumed_warnings = _run(["--config", str(path), "--out_dir", out_dir, "--resume", "auto",
                                      "--train.max_steps", "7"], capfd, caplog)
    assert "resuming from" in resumed and "step-00000005.ckpt" in resumed
    for text, caught in ((first, first_warnings), (resumed, resumed_warnings)):
        for noise in NOISE:
            assert noise not in text, (noise, text[-3000:])
            assert not [w for w in caught if noise in w], (noise, caught)
        # validated at steps 2 and 4 (6) in the fit, at 5 (7) after it: the bar's last line shows no val loss
        assert "val_loss" not in _last_bar_line(text) and "tokens:" in _last_bar_line(text)
        assert "final val loss" in text


def test_the_bar_shows_the_val_loss_of_the_last_step(tmp_path, capfd, caplog):
    config = tiny_config(tmp_path / "cache", growth={"stages": []}, rms_monitor=None,
                         train={"max_steps": 4, "save_interval": None}, eval={"interval": 2, "max_iters": 1})
    path = write_config(tmp_path / "tiny.yaml", config)
    text, _ = _run(["--config", str(path), "--out_dir", str(tmp_path / "out")], capfd, caplog)
    shown = re.search(r"val_loss: (\d+\.\d+)", _last_bar_line(text))
    summary = re.search(r"final val loss / ppl\s*│\s*(\d+\.\d+)", text)
    assert shown and summary and abs(float(shown.group(1)) - float(summary.group(1))) < 1e-3, text[-3000:]


def test_add_callback_example_shows_its_flops_and_no_logger_version(tmp_path):
    """``examples/add_callback.py``: its model summary measured ``Total FLOPs: 0`` (no example input) and its bar
    read ``v_num: 0.000``."""
    import runpy
    from pathlib import Path

    import lightning as L
    from lightning.pytorch.loggers import TensorBoardLogger
    from lightning.pytorch.utilities.model_summary import ModelSummary

    example = runpy.run_path(str(Path(__file__).resolve().parents[2] / "examples" / "add_callback.py"))
    module = example["TinyGPT"]()
    assert ModelSummary(module).total_flops > 0
    bar = example["ProgressBar"]()
    trainer = L.Trainer(max_steps=1, max_epochs=1, accelerator="cpu", logger=TensorBoardLogger(tmp_path),
                        callbacks=[bar], enable_checkpointing=False, enable_model_summary=False)
    assert "v_num" not in bar.get_metrics(trainer, module)
