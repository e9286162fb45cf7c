"""litgpt's own pretraining configs (``config_hub/pretrain/*.yaml``, copied in ``tests/fixtures/litgpt_config_hub``)
read as ``litgpt pretrain`` reads them: the same model, data module, schedule and optimizer; ``sparkling plan`` plans
each with only a ``growth:`` section added and nothing on disk; ``sparkling pretrain`` refuses the missing tokenizer
or data in one line before writing anything, and trains ``debug.yaml`` once its data exist."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import random
from importlib.metadata import version
from pathlib import Path

import pytest
import yaml

from lightning_sparkling.pretrain.cli import main, parse
from lightning_sparkling.pretrain.config.litgpt_compat import litgpt_pretrain_keys

HUB = Path(__file__).resolve().parents[1] / "fixtures" / "litgpt_config_hub"
FILES = ("debug", "tinyllama", "microllama", "tinystories")
DATA = {"debug": "TinyStories", "tinyllama": "TinyLlama", "microllama": "MicroLlama", "tinystories": "TinyStories"}
LAYERS = {"debug": 6, "tinyllama": 22, "microllama": 12, "tinystories": 6}  # each file's model's n_layer
LLAMA_2 = "checkpoints/meta-llama/Llama-2-7b-hf"
TOKENIZERS = {"debug": "checkpoints/EleutherAI/pythia-14m", "tinyllama": LLAMA_2, "microllama": LLAMA_2,
              "tinystories": LLAMA_2}  # each file's tokenizer_dir
WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "the", "dog", "ran", "to", "the", "park", "while", "birds",
         "sang", "in", "tall", "green", "trees"]


def source() -> dict[str, str]:
    """The ``SOURCE`` file of the fixture copies: repository, path, commit, litgpt version."""
    return dict(line.split(": ", 1) for line in (HUB / "SOURCE").read_text().splitlines() if line.strip())


def litgpt_print_config(path: Path) -> dict:
    """What the installed ``litgpt pretrain --config PATH --print_config`` prints: litgpt's own parser of
    ``litgpt.pretrain.setup`` (jsonargparse's ``CLI``, as ``litgpt``'s entry point builds it), in-process."""
    from jsonargparse import CLI
    from litgpt.pretrain import setup

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as info:
        CLI(setup, args=["--config", str(path), "--print_config"])
    assert info.value.code in (0, None), out.getvalue()
    return yaml.safe_load(out.getvalue())


def litgpt_setup_arguments(path: Path, *argv: str):
    """The arguments ``litgpt pretrain --config PATH ARGV...`` calls ``setup`` with (its parser's, classes
    instantiated)."""
    from jsonargparse import ActionConfigFile, ArgumentParser
    from litgpt.pretrain import setup

    parser = ArgumentParser()
    parser.add_argument("--config", action=ActionConfigFile)
    parser.add_function_arguments(setup)
    return parser.instantiate_classes(parser.parse_args(["--config", str(path), *argv]))


def dotted_keys(config: dict, prefix: str = "") -> set[str]:
    keys = set()
    for key, value in config.items():
        keys.add(prefix + key)
        if isinstance(value, dict) and key in ("train", "eval", "log"):
            keys |= dotted_keys(value, f"{prefix}{key}.")
    return keys


def with_growth(name: str, folder: Path) -> Path:
    """The fixture copy ``name`` with one ``growth:`` stage (its depth doubled halfway) appended, in ``folder``."""
    path = folder / f"{name}.yaml"
    path.write_text((HUB / f"{name}.yaml").read_text()
                    + f"growth:\n  stages:\n    - {{at_fraction: 0.5, n_layer: {2 * LAYERS[name]}}}\n")
    return path


def one_error_line(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: "), err  # one line: no traceback, no usage
    return err[0]


# ------------------------------------------------------------------------------------------------------------ copies
def test_copies_are_of_the_installed_litgpt():
    """The copies were taken from the installed litgpt's version, and its own parser still reads each of them, every
    key a key of its ``pretrain.setup``: a new litgpt whose files or keys change fails here (copy its files again)."""
    assert source()["litgpt"] == version("litgpt")
    assert sorted(p.stem for p in HUB.glob("*.yaml")) == sorted(FILES)
    keys = litgpt_pretrain_keys()
    for name in FILES:
        raw = yaml.safe_load((HUB / f"{name}.yaml").read_text())
        assert dotted_keys(raw) <= keys, sorted(dotted_keys(raw) - keys)
        printed = litgpt_print_config(HUB / f"{name}.yaml")
        assert printed["data"]["class_path"] == f"litgpt.data.{DATA[name]}"  # litgpt's short form, expanded


@pytest.mark.parametrize("name", FILES)
def test_each_file_reads_as_litgpt_reads_it(name):
    """The model, data module, optimizer and every ``train.*`` / ``eval.*`` value of the plan are those ``litgpt
    pretrain`` builds from the same file: ``data: TinyStories`` is ``litgpt.data.TinyStories``, and tinystories.yaml's
    ``model_config`` wins over its ``model_name: stories15M`` (not a litgpt name)."""
    from litgpt import Config

    from lightning_sparkling.pretrain.data.litgpt_data import instantiate_data, resolve_data_class

    path = HUB / f"{name}.yaml"
    lit = litgpt_setup_arguments(path)
    _, run, dumped = parse(["--config", str(path)], "plan")
    litgpt_model = Config.from_name(lit.model_name) if lit.model_config is None else lit.model_config
    assert dataclasses.asdict(run.model_config) == dataclasses.asdict(litgpt_model)
    assert run.data.class_path == f"litgpt.data.{DATA[name]}"
    assert instantiate_data(resolve_data_class(run.data.class_path), run.data.init_args) == lit.data
    printed, ours = litgpt_print_config(path), yaml.safe_load(dumped)
    for section in ("train", "eval"):
        assert {k: ours[section][k] for k in printed[section]} == printed[section]
    for key in ("optimizer", "precision", "devices", "num_nodes", "seed", "logger_name", "out_dir", "tokenizer_dir",
                "resume", "initial_checkpoint_dir"):
        assert ours[key] == printed[key], key
    assert run.tokenizer_dir is None  # not on disk: the plan's vocabulary is the model's own
    assert run.steps == printed["train"]["max_tokens"] // (printed["train"]["global_batch_size"] * run.seq_len)


@pytest.mark.parametrize("argv", [
    ["--data", "TinyStories"],  # replaces the file's module, with the new class's defaults
    ["--data=MicroLlama", "--data.data_path", "/d"],  # litgpt's --data.KEY: an argument of the module
    ["--data.init_args.num_workers", "0", "--data.use_starcoder=false"],  # the file's other arguments kept
])
def test_data_forms_on_the_command_line_read_as_litgpt_reads_them(argv):
    """litgpt's command-line forms of ``data`` give the data module litgpt's own parser builds from them."""
    from lightning_sparkling.pretrain.data.litgpt_data import instantiate_data, resolve_data_class

    path = HUB / "tinyllama.yaml"
    _, run, _ = parse(["--config", str(path), *argv], "plan")
    lit = litgpt_setup_arguments(path, *argv).data
    assert run.data.class_path == f"litgpt.data.{type(lit).__name__}"
    assert instantiate_data(resolve_data_class(run.data.class_path), run.data.init_args) == lit


def test_data_short_forms_that_are_not_pretraining_data_are_refused(capsys):
    path = str(HUB / "tinyllama.yaml")
    line = one_error_line(capsys, ["plan", "--config", path, "--data", "Alpaca"])  # litgpt's, instruction tuning
    assert line.startswith("error: data.class_path: 'litgpt.data.Alpaca' is an instruction-tuning data module"), line
    line = one_error_line(capsys, ["plan", "--config", path, "--data", "NoSuchData"])
    assert line.startswith("error: data.class_path: cannot import 'NoSuchData' from 'litgpt.data'"), line
    line = one_error_line(capsys, ["plan", "--config", path, "--data.class_path", "null", "--data.train_dat", "x"])
    assert "data.train_dat" in line, line  # the embedded corpus: an unknown data.* key, named


# ------------------------------------------------------------------------------------------------------------ plan
@pytest.mark.parametrize("name", FILES)
def test_each_file_plans_with_growth_and_nothing_on_disk(name, tmp_path, monkeypatch, capsys):
    """``sparkling plan`` is a dry run: no tokenizer, no data on disk (a fresh working directory), exit 0, the plan
    shown, and one note for each input ``pretrain`` will need."""
    monkeypatch.chdir(tmp_path)
    config = with_growth(name, tmp_path)
    assert main(["plan", "--config", str(config)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"n_layer {LAYERS[name]} -> {2 * LAYERS[name]}" in out  # the stage planned
    assert f"note: pretrain will need {TOKENIZERS[name]}/tokenizer.json (missing: tokenizer_dir)" in out
    slimpajama = "note: pretrain will need data/slimpajama/train (missing: data.init_args.data_path)"
    assert (slimpajama in out) == (DATA[name] in ("TinyLlama", "MicroLlama"))
    assert ("model_name 'stories15M' is not a litgpt config name" in out) == (name == "tinystories")
    assert sorted(p.name for p in tmp_path.iterdir()) == [config.name]  # wrote nothing


def test_plan_notes_a_missing_corpus_folder_and_pretrain_refuses_it(tmp_path, capsys):
    """The embedded corpus's ``data.data_dir`` is data too: noted by ``plan``, refused by ``pretrain``; a missing
    tokenizer still counts as given for ``eval.max_new_tokens`` (the plan does not ask for one)."""
    missing = tmp_path / "no-texts"
    argv = ["--model_config", "{n_layer: 1, n_embd: 32, n_head: 4}", "--train.max_steps", "4",
            "--data.data_dir", str(missing), "--out_dir", str(tmp_path / "out")]
    _, run, _ = parse(argv, "plan")
    assert f"pretrain will need {missing} (missing: data.data_dir)" in run.notes
    line = one_error_line(capsys, ["pretrain", *argv])
    assert line == f"error: data.data_dir: '{missing}' is not a directory", line
    _, run, _ = parse(["--config", str(HUB / "tinystories.yaml"), "--eval.max_new_tokens", "8"], "plan")
    assert run.eval.max_new_tokens == 8 and run.tokenizer_dir is None


# ------------------------------------------------------------------------------------------------------------ pretrain
@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory) -> Path:
    """TinyStories' raw shards as litgpt downloads them (``TinyStories_all_data/*.json``: two, the first for
    validation) and a BPE tokenizer dir trained on them, both small."""
    from lightning_sparkling.pretrain.data.bpe import save_tokenizer_dir, train_tokenizer

    root = tmp_path_factory.mktemp("tinystories")
    shards = root / "tinystories" / "TinyStories_all_data"
    shards.mkdir(parents=True)
    rng, texts = random.Random(0), []
    for k in range(2):
        stories = [" ".join(rng.choice(WORDS) for _ in range(12)) for _ in range(60)]
        (shards / f"data{k:02d}.json").write_text(json.dumps([{"story": s} for s in stories]))
        texts += stories
    save_tokenizer_dir(train_tokenizer(texts, 300), root / "tok")
    return root


@pytest.mark.parametrize("name", FILES)
def test_pretrain_refuses_the_missing_tokenizer_before_writing(name, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = one_error_line(capsys, ["pretrain", "--config", str(with_growth(name, tmp_path))])
    assert line.startswith(f"error: tokenizer_dir: '{TOKENIZERS[name]}' holds no tokenizer.json"), line
    assert not (tmp_path / "out").exists()


def test_measure_refuses_the_missing_tokenizer_as_pretrain(tmp_path, monkeypatch, capsys):
    """``sparkling measure`` trains what it plans: not a dry run."""
    monkeypatch.chdir(tmp_path)
    line = one_error_line(capsys, ["measure", "--config", str(with_growth("debug", tmp_path))])
    assert line.startswith(f"error: tokenizer_dir: '{TOKENIZERS['debug']}' holds no tokenizer.json"), line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["debug.yaml"]


@pytest.mark.parametrize("name", ["tinyllama", "microllama"])
def test_pretrain_refuses_the_missing_data_before_writing(name, tiny_data, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    line = one_error_line(capsys, ["pretrain", "--config", str(with_growth(name, tmp_path)),
                                   "--tokenizer_dir", str(tiny_data / "tok")])
    assert line.startswith("error: data.init_args.data_path: 'data/slimpajama/train' does not exist"), line
    assert not (tmp_path / "out").exists()


def test_pretrain_takes_debug_yaml_when_its_data_exist(tiny_data, tmp_path, monkeypatch):
    """litgpt's debug.yaml (``data: TinyStories``) plus one growth stage trains once TinyStories' shards and the
    tokenizer are on disk. Overrides, to fit a CPU test: the tokenizer and data paths, a 1-block 32-wide model
    (``model_config`` keys over pythia-14m), 4 steps of 4 x 32 tokens, fp32 and evaluation every 2 steps."""
    pytest.importorskip("litdata", reason="litgpt.data.TinyStories needs litdata")
    monkeypatch.chdir(tmp_path)
    config = tmp_path / "debug.yaml"
    config.write_text((HUB / "debug.yaml").read_text()
                      + "growth:\n  stages:\n    - {at_step: 2, n_layer: 2, rewarmup_steps: 1}\n")
    data_path = tiny_data / "tinystories"
    assert main(["pretrain", "--config", str(config), "--tokenizer_dir", str(tiny_data / "tok"),
                 "--data.init_args", f"{{data_path: {data_path}, num_workers: 0}}", "--precision", "32-true",
                 "--model_config", "{n_layer: 1, n_embd: 32, n_head: 4, intermediate_size: 128}",
                 "--train.max_steps", "4", "--train.global_batch_size", "4", "--train.micro_batch_size", "2",
                 "--train.lr_warmup_steps", "1", "--train.max_seq_length", "32", "--train.save_interval", "2",
                 "--eval.interval", "2", "--eval.max_iters", "1", "--num_threads", "1"]) == 0
    out = tmp_path / "out" / "pretrain" / "debug"  # debug.yaml's out_dir
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 4 and summary["tokens"] == 4 * 4 * 32
    assert [(g["at_step"], g["sizes"]) for g in summary["growth"]] == [(2, {"n_layer": 2})]
    final = yaml.safe_load((out / "final" / "model_config.yaml").read_text())
    assert (final["name"], final["n_layer"], final["n_embd"]) == ("pythia-14m", 2, 32)
    assert (data_path / "train" / "index.json").is_file() and (data_path / "val" / "index.json").is_file()
