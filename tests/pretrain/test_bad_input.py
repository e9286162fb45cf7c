"""Bad inputs that used to fail after the run had started (a traceback, ``summary.json`` written) are refused before
anything starts, in one ``error:`` line naming the setting and the fix (issue 24): a ``tokenizer_dir`` litgpt's
``Tokenizer`` cannot load, a tokenizer without the BOS / EOS token its data module adds to every document, data
paths a litgpt data module cannot read, an ``out_dir`` that cannot be created, an empty ``data.data_dir``."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from lightning_sparkling.pretrain.cli import main, parse
from lightning_sparkling.pretrain.data.bpe import save_tokenizer_dir, train_tokenizer
from test_cli import tiny_config, write_config

WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "the", "dog", "ran", "to", "the", "park", "while", "birds",
         "sang", "in", "tall", "green", "trees"]


# -------------------------------------------------------------------------------------------------------------- helpers
@pytest.fixture(scope="module")
def texts(tmp_path_factory) -> Path:
    """A folder of four non-empty ``.txt`` files (what ``litgpt.data.TextFiles`` reads)."""
    folder = tmp_path_factory.mktemp("texts")
    rng = random.Random(0)
    for i in range(4):
        (folder / f"doc{i}.txt").write_text("\n".join(" ".join(rng.choice(WORDS) for _ in range(12))
                                                      for _ in range(50)))
    return folder


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory, texts) -> Path:
    """A good tokenizer dir (``<|endoftext|>`` as BOS and EOS), as this package writes them."""
    corpus = [p.read_text() for p in sorted(texts.glob("*.txt"))]
    return save_tokenizer_dir(train_tokenizer(corpus, 300), tmp_path_factory.mktemp("tok"))


def edited_tokenizer(src: Path, dst: Path, config: dict | None, generation: dict | None = None) -> Path:
    """A copy of the tokenizer dir ``src`` whose ``tokenizer_config.json`` / ``generation_config.json`` are
    replaced (``None``: left out)."""
    dst.mkdir()
    (dst / "tokenizer.json").write_bytes((src / "tokenizer.json").read_bytes())
    for name, content in (("tokenizer_config.json", config), ("generation_config.json", generation)):
        if content is not None:
            (dst / name).write_text(json.dumps(content))
    return dst


def litgpt_data_config(tmp_path: Path, tokenizer_dir: Path | None, class_path: str, **init_args) -> dict:
    """The tiny CLI config of test_cli on a litgpt data module (``data.class_path``) and ``tokenizer_dir``."""
    config = tiny_config(tmp_path / "cache", train={"max_seq_length": 32})
    config["data"] = {"class_path": class_path, "init_args": {**init_args, "num_workers": 0}}
    if tokenizer_dir is not None:
        config["tokenizer_dir"] = str(tokenizer_dir)
    return config


def refused(capsys, tmp_path: Path, config: dict, *args: str, out: Path | None = None) -> str:
    """Runs ``sparkling pretrain`` expecting one refusal: exit status 2 and one ``error:`` line, nothing else (no
    usage line, no traceback), nothing written (no ``out_dir``, no corpus cache). Returns the error line."""
    out = tmp_path / "out" if out is None else out
    path = write_config(tmp_path / "bad.yaml", config)
    with pytest.raises(SystemExit) as info:
        main(["pretrain", "--config", str(path), "--out_dir", str(out), *args])
    assert info.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    assert not out.exists() and not (tmp_path / "cache").exists()
    return lines[0]


# ---------------------------------------------------------------------------------------------------- 1 tokenizer_class
@pytest.mark.parametrize("data", ["TextFiles", "embedded corpus"])
def test_tokenizer_config_without_tokenizer_class(tmp_path, capsys, texts, tokenizer, data):
    """litgpt's Tokenizer reads ``tokenizer_config.json["tokenizer_class"]``: a KeyError once the run had started."""
    tok = edited_tokenizer(tokenizer, tmp_path / "tok", {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"})
    if data == "TextFiles":
        config = litgpt_data_config(tmp_path, tok, "litgpt.data.TextFiles", train_data_path=str(texts))
    else:
        config = tiny_config(tmp_path / "cache", tokenizer_dir=str(tok))
    line = refused(capsys, tmp_path, config)
    assert line == (f"error: tokenizer_dir: '{tok / 'tokenizer_config.json'}' has no \"tokenizer_class\" (litgpt's "
                    "Tokenizer reads it): add one to that file, e.g. \"tokenizer_class\": \"PreTrainedTokenizerFast\" "
                    "for a tokenizer.json tokenizer"), line


def test_tokenizer_litgpt_cannot_load_is_named(tmp_path, capsys, texts, tokenizer):
    """A bos_token that is not in the vocabulary: litgpt's own error, in one line naming tokenizer_dir."""
    tok = edited_tokenizer(tokenizer, tmp_path / "tok", {"tokenizer_class": "PreTrainedTokenizerFast",
                                                         "bos_token": "<s>"})
    config = litgpt_data_config(tmp_path, tok, "litgpt.data.TextFiles", train_data_path=str(texts))
    line = refused(capsys, tmp_path, config)
    assert line.startswith(f"error: tokenizer_dir: litgpt's Tokenizer cannot load '{tok}' (ValueError: token '<s>' "
                           "not found in the collection.)"), line
    assert line.endswith("or give another tokenizer_dir")


# ---------------------------------------------------------------------------------------------------------- 2 BOS / EOS
NO_BOS = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>"}
NO_EOS = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|endoftext|>"}


def _token_fix(kind: str) -> str:
    return (f"name one of its tokens in tokenizer_config.json (\"{kind}_token\": ...) or generation_config.json "
            f"(\"{kind}_token_id\": ...), or give a tokenizer_dir whose tokenizer has one")


@pytest.mark.parametrize("class_path, tokens, why", [
    ("litgpt.data.TextFiles", NO_BOS, "has no BOS token, and litgpt.data.TextFiles starts every document with one "
                                      "(tokenizer.encode(text, bos=True))"),
    ("litgpt.data.TinyStories", NO_BOS, "has no BOS token, and litgpt.data.TinyStories starts every story with one "
                                        "(tokenizer.encode(text, bos=True))"),
    ("litgpt.data.OpenWebText", NO_EOS, "has no EOS token, and litgpt.data.OpenWebText ends every document with one "
                                        "(tokenizer.encode(text, eos=True))"),
])
def test_tokenizer_without_the_special_token_the_data_module_adds(tmp_path, capsys, texts, tokenizer, class_path,
                                                                  tokens, why):
    """TextFiles failed inside litdata's optimize (NotImplementedError wrapped in RuntimeErrors), after the run
    started; TinyStories after downloading; OpenWebText after downloading and tokenizing a None id."""
    tok = edited_tokenizer(tokenizer, tmp_path / "tok", tokens)
    paths = ({"train_data_path": str(texts)} if class_path.endswith("TextFiles")
             else {"data_path": str(tmp_path / "data")})
    line = refused(capsys, tmp_path, litgpt_data_config(tmp_path, tok, class_path, **paths))
    kind = "bos" if "BOS" in why else "eos"
    assert line == f"error: tokenizer_dir: the tokenizer of '{tok}' {why}: {_token_fix(kind)}", line
    assert not (tmp_path / "data").exists()  # nothing downloaded


def test_embedded_corpus_needs_an_eos_token(tmp_path, capsys):
    """The embedded corpus ends every file with the tokenizer's EOS (``<|endoftext|>`` when it names none)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.train_from_iterator([" ".join(WORDS)] * 20, trainer=trainers.BpeTrainer(vocab_size=300, special_tokens=[],
                                                                                 show_progress=False))
    tok = tmp_path / "tok"
    tok.mkdir()
    bpe.save(str(tok / "tokenizer.json"))
    (tok / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}))
    line = refused(capsys, tmp_path, tiny_config(tmp_path / "cache", tokenizer_dir=str(tok)))
    assert line == (f"error: tokenizer_dir: the tokenizer of '{tok}' has no EOS token, and the corpus of "
                    "data.data_dir / data.source ends every file with one (or <|endoftext|>, absent too): "
                    f"{_token_fix('eos')}"), line


def test_prepared_textfiles_data_needs_no_bos(tmp_path, texts, tokenizer):
    """litgpt skips tokenizing when ``train_data_path/train`` and ``/val`` exist: no BOS is needed then."""
    data = tmp_path / "texts"
    data.mkdir()
    for f in texts.glob("*.txt"):
        (data / f.name).write_text(f.read_text())
    (data / "train").mkdir()
    (data / "val").mkdir()
    tok = edited_tokenizer(tokenizer, tmp_path / "tok", NO_BOS)
    path = write_config(tmp_path / "ok.yaml", litgpt_data_config(tmp_path, tok, "litgpt.data.TextFiles",
                                                                 train_data_path=str(data)))
    _, run, _ = parse(["--config", str(path), "--out_dir", str(tmp_path / "out")])
    assert run.tokenizer_dir == tok and not (tmp_path / "out").exists()


# --------------------------------------------------------------------------------------------------------- 2 data paths
def _folder(tmp_path: Path, files: dict[str, str], *dirs: str) -> Path:
    root = tmp_path / "data"
    root.mkdir()
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    for name in dirs:
        (root / name).mkdir(parents=True)
    return root


@pytest.mark.parametrize("files, dirs, init_args, expected", [
    ({}, (), {"train_data_path": "missing"},
     "data.init_args.train_data_path: '{root}/missing' is not a directory: give the folder of .txt "
     "files to train on"),
    ({"a.md": "text"}, (), {"train_data_path": ""},
     "data.init_args.train_data_path: '{root}' holds no .txt file (litgpt.data.TextFiles reads the "
     "*.txt files "
     "directly in it to train on): put your text there as .txt files"),
    ({"a.txt": "text"}, (), {"train_data_path": ""},
     "data.init_args.train_data_path: '{root}' holds one .txt file, and litgpt.data.TextFiles takes "
     "the first one "
     "for validation when val_data_path is not given: add .txt files or give "
     "data.init_args.val_data_path"),
    ({"a.txt": "", "b.txt": "text"}, (), {"train_data_path": ""},
     "data.init_args.train_data_path: every .txt file of the validation split is empty (a.txt): put "
     "text in them"),
    ({"a.txt": "text", "b.txt": "", "c.txt": ""}, (), {"train_data_path": ""},
     "data.init_args.train_data_path: every .txt file of the training split is empty (b.txt, c.txt): "
     "put text in "
     "them"),
    ({"t/a.txt": "text"}, ("v",), {"train_data_path": "t", "val_data_path": "v"},
     "data.init_args.val_data_path: '{root}/v' holds no .txt file (litgpt.data.TextFiles reads the "
     "*.txt files "
     "directly in it to validate on): put your text there as .txt files"),
])
def test_textfiles_paths(tmp_path, capsys, tokenizer, files, dirs, init_args, expected):
    root = _folder(tmp_path, files, *dirs)
    args = {k: str(root / v) if v else str(root) for k, v in init_args.items()}
    line = refused(capsys, tmp_path, litgpt_data_config(tmp_path, tokenizer, "litgpt.data.TextFiles", **args))
    assert line == "error: " + expected.format(root=root), line


@pytest.mark.parametrize("class_path, files, dirs, init_args, expected", [
    ("LitData", {}, (), {"data_path": "missing"},
     "data.init_args.data_path: '{root}/missing' does not exist (the prepared litdata folder to train "
     "and validate "
     "on)"),
    ("LitData", {"notes.txt": "x"}, (), {"data_path": ""},
     "data.init_args.data_path: '{root}' holds no index.json (the prepared litdata folder to train "
     "and validate on; "
     "litdata's StreamingDataset reads a folder written by litdata.optimize)"),
    ("LitData", {"train/index.json": "{}"}, (), {"data_path": "", "split_names": ["train", "val"]},
     "data.init_args.split_names: '{root}/val' does not exist (split 'val' of split_names under "
     "data_path)"),
    ("TinyLlama", {}, ("slimpajama/train",), {"data_path": ""},
     "data.init_args.data_path: '{root}/slimpajama/train' holds no index.json (TinyLlama reads "
     "data_path/slimpajama/train, slimpajama/val and starcoder, prepared as in litgpt's "
     "pretrain_tinyllama tutorial; "
     "litdata's StreamingDataset reads a folder written by litdata.optimize)"),
    ("MicroLlama", {"slimpajama/train/index.json": "{}"}, (), {"data_path": ""},
     "data.init_args.data_path: '{root}/slimpajama/val' does not exist (MicroLlama reads "
     "data_path/slimpajama/train, "
     "slimpajama/val, prepared as in litgpt's pretrain_tinyllama tutorial)"),
])
def test_litdata_paths(tmp_path, capsys, class_path, files, dirs, init_args, expected):
    """Modules that stream prepared litdata folders (no tokenizer): the folders and their index.json."""
    root = _folder(tmp_path, files, *dirs)
    args = {k: (str(root / v) if v else str(root)) if isinstance(v, str) else v for k, v in init_args.items()}
    config = litgpt_data_config(tmp_path, None, f"litgpt.data.{class_path}", **args)
    config["model_config"]["vocab_size"] = 300
    line = refused(capsys, tmp_path, config)
    assert line == "error: " + expected.format(root=root), line


# ------------------------------------------------------------------------------------------------------------ 3 out_dir
FIX = "give a folder you can write to (--out_dir PATH)"


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_out_dir_that_cannot_be_created(tmp_path, capsys):
    """``--out_dir /proc/nope``: a FileNotFoundError traceback once the run had started."""
    line = refused(capsys, tmp_path, tiny_config(tmp_path / "cache"), out=Path("/proc/nope"))
    assert line == ("error: out_dir: cannot create '/proc/nope': creating a folder in '/proc' fails (No such file or "
                    f"directory): {FIX}"), line
    assert not Path("/proc/nope").exists()


def test_out_dir_below_a_file_or_a_file(tmp_path, capsys):
    (tmp_path / "a-file").write_text("x")
    line = refused(capsys, tmp_path, tiny_config(tmp_path / "cache"), out=tmp_path / "a-file" / "run")
    assert line == (f"error: out_dir: cannot create the folder '{tmp_path / 'a-file' / 'run'}': "
                    f"'{tmp_path / 'a-file'}' is a file, not a folder: {FIX}"), line
    with pytest.raises(SystemExit):
        main(["pretrain", "--config", str(tmp_path / "bad.yaml"), "--out_dir", str(tmp_path / "a-file")])
    line = capsys.readouterr().err.strip().splitlines()[-1]
    folder = tmp_path / "a-file"
    assert line == f"error: out_dir: cannot create the folder '{folder}': it is a file, not a folder: {FIX}", line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file", "bad.yaml"]  # the write check left nothing


def test_out_dir_check_leaves_nothing_and_plan_does_not_check(tmp_path, config_file):
    """A writable out_dir is not created by the check (no probe left behind); ``plan`` writes nothing, so an
    out_dir of another machine is fine there."""
    before = sorted(tmp_path.iterdir())
    _, run, _ = parse(["--config", str(config_file), "--out_dir", str(tmp_path / "new" / "run")])
    assert run.out_dir == tmp_path / "new" / "run" and sorted(tmp_path.iterdir()) == before
    assert main(["plan", "--config", str(config_file), "--out_dir", "/proc/nope"]) == 0


@pytest.fixture(scope="module")
def config_file(tmp_path_factory) -> Path:
    return write_config(tmp_path_factory.mktemp("cfg") / "tiny.yaml", tiny_config(Path("/nonexistent-cache")))


# ----------------------------------------------------------------------------------------------------------- 4 data_dir
@pytest.mark.parametrize("files, expected", [
    ({}, "data.data_dir: data_dir='{root}' holds no non-empty file ending in .txt .py .md: put your text there "
         "(every such file below it is read), or leave data_dir unset for the embedded corpus"),
    ({"a.txt": "", "sub/b.md": "", "c.csv": "x"},
     "data.data_dir: data_dir='{root}' holds no non-empty file ending in .txt .py .md: put your text "
     "there "
     "(every such file below it is read), or leave data_dir unset for the embedded corpus"),
    ({"only.txt": "some text"}, "data.data_dir: the {split} split is empty (1 files, val_percent=20.0): adjust "
                                "val_percent or add data"),
])
def test_data_dir_without_text(tmp_path, capsys, files, expected):
    """An empty data_dir: a ValueError traceback after the run had started, and summary.json written."""
    root = _folder(tmp_path, files)
    line = refused(capsys, tmp_path, tiny_config(tmp_path / "cache", data={"data_dir": str(root)}))
    split = None
    if "{split}" in expected:  # the one file goes to the split its name hashes to; the other is empty
        from lightning_sparkling.pretrain.data.corpus import collect_corpus_files, split_files

        split = "train" if not split_files(collect_corpus_files(data_dir=root), 20)[0] else "validation"
    assert line == "error: " + expected.format(root=root, split=split), line
