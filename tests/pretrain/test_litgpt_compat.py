"""A ``litgpt pretrain`` configuration runs under ``sparkling pretrain`` with a ``growth:`` section added: every key of
the installed litgpt's ``pretrain`` is accepted (or refused by name), litgpt data modules are taken by ``class_path``
(``TextFiles`` end to end; a small custom ``LitDataModule`` without litdata), ``initial_checkpoint_dir`` starts from a
litgpt checkpoint dir (this package's ``final/``, grown or not) and grows it further, ``logger_name`` picks the logger,
and ``eval.max_new_tokens`` generates a sample at each evaluation."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from lightning import LightningDataModule
from torch.utils.data import DataLoader

from lightning_sparkling.pretrain.cli import main, parse
from lightning_sparkling.pretrain.config.schema import check_keys
from lightning_sparkling.pretrain.data.bpe import save_tokenizer_dir, train_tokenizer

WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "the", "dog", "ran", "to", "the", "park", "while", "birds",
         "sang", "in", "tall", "green", "trees", "near", "old", "stone", "walls"]


def litgpt_printed_config() -> dict:
    """What the installed ``litgpt pretrain pythia-14m --print_config`` prints (litgpt's own CLI, offline)."""
    code = "import sys; from litgpt.__main__ import main; sys.argv = ['litgpt'] + sys.argv[1:]; main()"
    result = subprocess.run([sys.executable, "-c", code, "pretrain", "pythia-14m", "--print_config"],
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    return yaml.safe_load(result.stdout)


def dotted_keys(config: dict, prefix: str = "") -> set[str]:
    keys = set()
    for key, value in config.items():
        keys.add(prefix + key)
        if isinstance(value, dict) and key not in ("model_config", "optimizer"):
            keys |= dotted_keys(value, f"{prefix}{key}.")
    return keys


@pytest.fixture(scope="module")
def printed() -> dict:
    return litgpt_printed_config()


@pytest.fixture(scope="module")
def text_dir(tmp_path_factory) -> Path:
    """A folder of plain-text files (as TextFiles reads them) and a BPE tokenizer dir trained on them."""
    root = tmp_path_factory.mktemp("litgpt-data")
    texts = root / "texts"
    texts.mkdir()
    rng = random.Random(0)
    for i in range(4):
        lines = [" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(150)]
        (texts / f"doc{i}.txt").write_text("\n".join(lines))
    save_tokenizer_dir(train_tokenizer([p.read_text() for p in sorted(texts.glob("*.txt"))], 300), root / "tok")
    return root


def shrunk(printed: dict, text_dir: Path, out: Path, **data) -> dict:
    """litgpt's printed config, shrunk to a tiny pythia model and 6 CPU steps, data pointed at ``text_dir``, plus a
    ``growth:`` section (the only key that is not litgpt's, with ``num_threads``)."""
    config = json.loads(json.dumps(printed))  # deep copy
    config["model_config"] = None
    config.update(out_dir=str(out), tokenizer_dir=str(text_dir / "tok"), devices=1,
                  data=data or {"class_path": "litgpt.data.TextFiles",
                                "init_args": {"train_data_path": str(text_dir / "texts"), "num_workers": 0}})
    config["train"].update(global_batch_size=4, micro_batch_size=2, max_tokens=None, max_steps=6, lr_warmup_steps=1,
                           save_interval=3, max_seq_length=32)
    config["eval"].update(interval=3, max_iters=1, max_new_tokens=4)
    config["growth"] = {"stages": [{"at_tokens": 3 * 4 * 32, "n_embd": 64, "intermediate_size": 256,
                                    "rewarmup_steps": 1}]}
    config["num_threads"] = 1
    return config


def _installed(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


TINY_PYTHIA = "{n_layer: 1, n_embd: 32, n_head: 4, intermediate_size: 128}"


# ------------------------------------------------------------------------------------------------------------ keys
def test_every_litgpt_pretrain_key_is_known(printed):
    """Every key of the installed litgpt's pretrain (its printed config, and its ``setup`` signature with the
    fields of its sections) is a key of ``sparkling pretrain``: a key a new litgpt adds fails here."""
    from lightning_sparkling.pretrain.cli import build_parser
    from lightning_sparkling.pretrain.config.litgpt_compat import litgpt_pretrain_keys

    keys = dotted_keys(printed)
    assert {"initial_checkpoint_dir", "logger_name", "log", "train.epochs", "train.max_time", "train.max_seq_length",
            "eval.max_new_tokens", "eval.evaluate_example"} <= keys
    assert keys == litgpt_pretrain_keys()
    check_keys(printed)  # no unknown key
    ours = {action.dest for action in build_parser()._actions}
    missing = sorted(k for k in keys if k not in ours)
    assert not missing, missing


def test_printed_litgpt_config_parses_unchanged(printed, tmp_path):
    """The printed config as it is (model_name pythia-14m, data null: the embedded corpus) resolves."""
    path = tmp_path / "litgpt.yaml"
    path.write_text(yaml.safe_dump(printed))
    _, run, _ = parse(["--config", str(path), "--out_dir", str(tmp_path / "out")])
    assert run.model_config.name == "pythia-14m" and run.seq_len == 512  # litgpt: the model's block_size
    assert run.train.min_lr == pytest.approx(4e-5) and run.train.lr_warmup_steps == 2000
    assert run.steps == 3_000_000_000_000 // (512 * 512) and run.logger_name == "tensorboard"
    assert not run.litgpt_data


@pytest.mark.parametrize("edit, key", [
    (lambda c: c["train"].update(epochs=2), "train.epochs"),
    (lambda c: c.update(logger_name="nope"), "logger_name"),
    pytest.param(lambda c: c.update(logger_name="wandb"), "logger_name",  # not installed: refused, naming it
                 marks=pytest.mark.skipif(_installed("wandb"), reason="wandb is installed here")),
    (lambda c: c["log"].update(project="p"), "log.project"),  # a wandb key with the tensorboard logger
    (lambda c: c["eval"].update(evaluate_example="last"), "eval.evaluate_example"),
    (lambda c: c["train"].update(max_time=-1), "train.max_time"),
    (lambda c: c.update(data={"class_path": "litgpt.data.Alpaca"}), "data.class_path: 'litgpt.data.Alpaca' is an "
                                                                      "instruction-tuning data module"),
    (lambda c: c.update(data={"class_path": "litgpt.data.NoSuchData"}), "data.class_path: cannot import"),
    (lambda c: c["data"]["init_args"].update(train_data_pat="x"), "data.init_args.train_data_pat"),
    (lambda c: c["data"].update(vocab_size=100), "data.vocab_size"),
    (lambda c: c.update(tokenizer_dir=None), "tokenizer_dir"),  # TextFiles tokenizes with it
    (lambda c: c["train"].update(max_seq_length=4096), "train.max_seq_length"),
    (lambda c: c.update(initial_checkpoint_dir="/no/such/dir"), "initial_checkpoint_dir"),
])
def test_keys_that_cannot_be_honoured_are_refused_by_name(printed, text_dir, tmp_path, capsys, edit, key):
    config = shrunk(printed, text_dir, tmp_path / "out")
    config["model_config"] = yaml.safe_load(TINY_PYTHIA)
    edit(config)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(SystemExit) as info:
        main(["pretrain", "--config", str(path)])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {key}"), err  # one line, no usage line
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------------------ TextFiles
@pytest.fixture(scope="module")
def textfiles_run(printed, text_dir, tmp_path_factory) -> Path:
    """litgpt's config + growth:, on litgpt.data.TextFiles (litdata.optimize on a local folder, offline)."""
    if os.environ.get("SPARKLING_REQUIRE_LITDATA"):  # CI (.ci/run) installs litdata: never skip there
        import litdata  # noqa: F401
    pytest.importorskip("litdata", reason="litgpt.data.TextFiles needs litdata: pip install "
                                          "lightning-sparkling[litdata] (on a CPU build of torch, without torchvision: "
                                          "see pyproject.toml)")
    out = tmp_path_factory.mktemp("textfiles") / "out"
    path = out.parent / "litgpt+growth.yaml"
    path.write_text(yaml.safe_dump(shrunk(printed, text_dir, out)))
    assert main(["pretrain", "--config", str(path), "--model_config", TINY_PYTHIA]) == 0
    return out


def test_litgpt_config_with_growth_runs_on_textfiles(textfiles_run, text_dir):
    out = textfiles_run
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 6
    assert summary["growth"] == [{"stage": 0, "at_step": 3, "widths": {"n_embd": 64, "intermediate_size": 256},
                                  "sizes": {"n_embd": 64, "intermediate_size": 256}}]
    assert summary["final_model_config"]["n_embd"] == 64
    assert summary["tokens"] == 6 * 4 * 32  # global_batch_size x train.max_seq_length per step
    assert summary["flops_logged"] == pytest.approx(summary["flops"], rel=1e-9)  # FLOPs follow the growth
    assert 0 < summary["flops_saved"] < 1
    assert (text_dir / "texts" / "train" / "index.json").is_file()  # litdata.optimize ran (litgpt's TextFiles)
    widths = {d: yaml.safe_load((out / d / "model_config.yaml").read_text())["n_embd"]
              for d in ("step-00000003", "step-00000006", "final")}
    assert widths == {"step-00000003": 64, "step-00000006": 64, "final": 64}
    assert yaml.safe_load((out / "final" / "model_config.yaml").read_text())["name"] == "pythia-14m"
    from lightning_sparkling.dashboards.plotting import load_run

    run = load_run(out / "logs")
    assert run.growth_steps() == [(3, 0)] and "val_loss" in run.scalars


def test_textfiles_final_dir_loads_in_litgpt_generate(textfiles_run):
    litgpt_bin = Path(sys.executable).parent / "litgpt"
    if not litgpt_bin.exists():
        pytest.skip("the litgpt console script is not installed next to this Python")
    result = subprocess.run([str(litgpt_bin), "generate", str(textfiles_run / "final"), "--prompt", "the cat",
                             "--max_new_tokens", "5", "--temperature", "0"], capture_output=True, text=True,
                            timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "the cat" in result.stdout


def test_samples_are_generated_at_each_evaluation(textfiles_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(textfiles_run / "logs"), size_guidance={"tensors": 0})
    acc.Reload()
    steps = sorted({e.step for e in acc.Tensors("sample/text_summary")})
    assert steps == [3, 6]  # eval.interval 3 of 6 steps


def test_textfiles_resume_continues_the_data_stream(textfiles_run, printed, text_dir, tmp_path):
    """resume restores litdata's stream position (litgpt saves the train dataloader's state the same way)."""
    ckpt = torch.load(textfiles_run / "checkpoints" / "step-00000003.ckpt", map_location="cpu", weights_only=False)
    state = ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]
    assert state["num_samples_yielded"] == 3 * 4  # 3 steps x 2 micro-batches x 2 samples
    import shutil

    out = tmp_path / "out"
    shutil.copytree(textfiles_run, out)
    (out / "checkpoints" / "step-00000006.ckpt").unlink()
    path = tmp_path / "resume.yaml"
    config = shrunk(printed, text_dir, out)
    config["train"]["max_steps"] = 6
    path.write_text(yaml.safe_dump(config))
    assert main(["pretrain", "--config", str(path), "--model_config", TINY_PYTHIA, "--resume", "auto"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed_from"].endswith("step-00000003.ckpt") and summary["steps"] == 6
    # grown at step 3 already: reported from the checkpoint (issue 40), not grown again
    assert [e["global_step"] for e in summary["growth_events"]] == [3]
    ckpt = torch.load(out / "checkpoints" / "step-00000006.ckpt", map_location="cpu", weights_only=False)
    assert ckpt["loops"]["fit_loop"]["state_dict"]["combined_loader"][0]["num_samples_yielded"] == 6 * 4


# ---------------------------------------------------------------------------------------------------- any LitDataModule
class ArithmeticData(LightningDataModule):
    """A minimal litgpt-style data module (no litdata): ``connect`` then loaders of ``(B, max_seq_length + 1)``."""

    def __init__(self, n: int = 64, vocab: int = 200) -> None:
        super().__init__()
        self.n, self.vocab = n, vocab
        self.batch_size, self.seq_len, self.connected = 1, 8, False

    def connect(self, tokenizer=None, batch_size: int = 1, max_seq_length: int | None = None) -> None:
        self.batch_size, self.seq_len, self.connected = batch_size, max_seq_length, True

    def _rows(self, offset: int):
        g = torch.Generator().manual_seed(offset)
        start = torch.randint(0, self.vocab, (self.n, 1), generator=g)
        return ((start + torch.arange(self.seq_len + 1)) % self.vocab).to(torch.int32)

    def train_dataloader(self):
        return DataLoader(self._rows(0), batch_size=self.batch_size, shuffle=True, drop_last=True)

    def val_dataloader(self):
        return DataLoader(self._rows(1), batch_size=self.batch_size)


def test_any_litdatamodule_by_class_path_with_csv_logger(text_dir, tmp_path):
    out = tmp_path / "out"
    config = {
        "model_name": "pythia-14m", "model_config": yaml.safe_load(TINY_PYTHIA) | {"vocab_size": 200},
        "out_dir": str(out), "devices": 1, "logger_name": "csv", "num_threads": 1,
        "data": {"class_path": f"{__name__}.ArithmeticData", "init_args": {"n": 32}},
        "train": {"global_batch_size": 4, "micro_batch_size": 4, "max_steps": 5, "max_seq_length": 16,
                  "lr_warmup_steps": 1, "save_interval": None},
        "eval": {"interval": 5, "max_iters": 1},
        "growth": {"stages": [{"at_step": 2, "intermediate_size": 256, "rewarmup_steps": 1}]},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    _, run, _ = parse(["--config", str(path)])
    assert run.seq_len == 16 and run.model_config.vocab_size == 200 and run.tokenizer_dir is None
    assert any("logger_name csv" in note and "tensorboard" in note for note in run.notes)
    assert main(["pretrain", "--config", str(path)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 5 and summary["final_model_config"]["intermediate_size"] == 256
    metrics = (out / "logs" / "metrics.csv").read_text()
    assert "train_loss" in metrics and "growth/event" in metrics and "val_loss" in metrics
    assert (out / "final" / "lit_model.pth").is_file() and not (out / "final" / "tokenizer.json").exists()


# ----------------------------------------------------------------------------------------------- initial_checkpoint_dir
@pytest.fixture(scope="module")
def quickstart_final(tmp_path_factory) -> Path:
    """The quickstart, shrunk to 4 steps (grown 64 -> 128 at step 2): its ``final/``."""
    root = tmp_path_factory.mktemp("quickstart")
    quickstart = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"
    assert main(["pretrain", "--config", str(quickstart), "--out_dir", str(root / "out"), "--train.max_steps", "4",
                 "--train.global_batch_size", "4", "--train.micro_batch_size", "4", "--train.lr_warmup_steps", "1",
                 "--train.save_interval", "null", "--eval.interval", "null", "--eval.max_iters", "1",
                 "--data.max_files", "8", "--data.max_bytes", "60000", "--data.vocab_size", "512",
                 "--data.cache_dir", str(root / "cache"), "--rms_monitor", "null", "--growth.stages",
                 "[{at_step: 2, n_embd: 128, intermediate_size: 512, rewarmup_steps: 1}]"]) == 0
    return root / "out" / "final"


def test_initial_checkpoint_dir_starts_from_a_grown_final_and_grows_it(quickstart_final, tmp_path):
    """Mid-stage growth of a model someone already trained: start from the quickstart's (grown) ``final/``, whose
    config and tokenizer are used, on the embedded corpus (tokenized with that tokenizer), and grow it again."""
    final = quickstart_final
    out = tmp_path / "out"
    config = {
        "initial_checkpoint_dir": str(final), "out_dir": str(out), "devices": 1, "num_threads": 1,
        "data": {"max_files": 6, "max_bytes": 40_000, "val_percent": 30, "cache_dir": str(tmp_path / "cache")},
        "train": {"global_batch_size": 4, "micro_batch_size": 4, "max_steps": 4, "max_seq_length": 32,
                  "lr_warmup_steps": 1, "save_interval": None},
        "eval": {"interval": None, "max_iters": 1},
        "growth": {"stages": [{"at_step": 2, "intermediate_size": 1024, "rewarmup_steps": 1}]},
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    _, run, _ = parse(["--config", str(path)])
    assert run.model_config.n_embd == 128 and run.model_config.name == "sparkling-quickstart"  # the checkpoint's
    assert run.tokenizer_dir == final  # and its tokenizer
    from lightning_sparkling.pretrain.cli import build_module

    module = build_module(run)
    saved = torch.load(final / "lit_model.pth", weights_only=True)
    assert all(torch.equal(module.model.state_dict()[k], v) for k, v in saved.items())
    assert main(["pretrain", "--config", str(path)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["initial_checkpoint_dir"] == str(final) and summary["steps"] == 4
    assert summary["total_params"][0] == sum(v.numel() for v in saved.values())
    assert summary["final_model_config"]["intermediate_size"] == 1024
    assert (out / "final" / "tokenizer.json").read_bytes() == (final / "tokenizer.json").read_bytes()


def test_initial_checkpoint_dir_refusals(quickstart_final, tmp_path, capsys):
    final = quickstart_final
    base = ["pretrain", "--initial_checkpoint_dir", str(final), "--out_dir", str(tmp_path / "out"),
            "--train.max_steps", "4", "--train.max_seq_length", "32"]
    for extra, key in ((["--model_config", "{n_layer: 2}"], "initial_checkpoint_dir"),
                       (["--resume", "true"], "resume"),
                       (["--resume", str(final)], "resume")):
        with pytest.raises(SystemExit):
            main(base + extra)
        err = capsys.readouterr().err
        assert f"error: {key}" in err, err
        if extra[0] == "--model_config":  # the fix, as typed on the command line (issue 40)
            assert "--model_config null" in err, err
    assert not (tmp_path / "out").exists()
    quickstart = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"
    _, run, _ = parse(["--config", str(quickstart), *base[1:5], "--model_config", "null",
                       "--data.cache_dir", str(tmp_path / "cache"),
                       "--growth.stages", "[{at_step: 120, n_embd: 256, rewarmup_steps: 20}]"])
    assert run.model_config.n_embd == 128  # the checkpoint's own config, as the message says
