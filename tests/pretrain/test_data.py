"""Embedded corpus, tokenizer cache and the resumable TextCorpusDataModule (small stdlib subsets: fast)."""

from __future__ import annotations

import json
import warnings

import lightning as L
import numpy as np
import pytest
import torch
from litgpt.tokenizer import Tokenizer

import lightning_sparkling.pretrain.data.datamodule as data_mod
from lightning_sparkling.pretrain.data.bpe import EOS_TOKEN
from lightning_sparkling.pretrain.data.windows import (ContiguousWindowDataset, RandomWindowDataset,
                                                       ResumableWindowSampler)
from lightning_sparkling.pretrain.data.corpus import CorpusFile, cap_files, collect_corpus_files, split_files
from lightning_sparkling.pretrain.data.datamodule import TextCorpusDataModule

SMALL = dict(seq_len=32, batch_size=4, vocab_size=512, val_percent=20, max_files=24, max_bytes=200_000)




@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("sparkling_cache")


@pytest.fixture(scope="module")
def dm(cache_dir):
    module = TextCorpusDataModule(**SMALL, cache_dir=cache_dir)
    module.prepare_data()
    module.setup("fit")
    return module


def _batches(loader, n):
    it = iter(loader)
    return [next(it) for _ in range(n)]


# ------------------------------------------------------------------ files and split
def test_stdlib_listing_skips_site_packages_and_tests():
    files = collect_corpus_files("stdlib")
    keys = [f.key for f in files]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    assert all(k.startswith("stdlib/") and k.endswith(".py") for k in keys)
    assert not any("/site-packages/" in k or "/tests/" in k or "/test/" in k for k in keys)
    assert "stdlib/json/decoder.py" in keys
    total = sum(f.size for f in files)
    assert 2e6 < total < 60e6  # ~12 MB on CPython 3.11


def test_split_is_deterministic_disjoint_and_by_file():
    files = collect_corpus_files("stdlib")
    train, val = split_files(files, 10)
    train2, val2 = split_files(list(reversed(files)), 10)
    assert sorted(f.key for f in train) == sorted(f.key for f in train2)
    assert sorted(f.key for f in val) == sorted(f.key for f in val2)
    assert not {f.key for f in train} & {f.key for f in val}
    assert len(train) + len(val) == len(files)
    assert 0.04 < len(val) / len(files) < 0.2
    # a file's side does not depend on the other files
    sub_train, sub_val = split_files(files[::7], 10)
    assert {f.key for f in sub_val} == {f.key for f in val} & {f.key for f in files[::7]}
    with pytest.raises(ValueError, match="val_percent"):
        split_files(files, 0)


def test_cap_files_is_deterministic_and_bounded():
    files = [CorpusFile(f"data/{i}.txt", data_mod.Path(f"/{i}.txt"), 10 + i) for i in range(100)]
    a = cap_files(files, max_files=10, max_bytes=300)
    assert a == cap_files(list(reversed(files)), max_files=10, max_bytes=300)
    assert len(a) <= 10 and sum(f.size for f in a) <= 300
    assert len(cap_files(files, max_bytes=1)) == 1  # min_files


def test_datamodule_splits_are_disjoint(dm):
    assert dm.train_files and dm.val_files
    assert not {f.key for f in dm.train_files} & {f.key for f in dm.val_files}
    assert set(dm.meta["train_files"]) == {f.key for f in dm.train_files}
    assert sum(f.size for f in dm.train_files) + sum(f.size for f in dm.val_files) <= SMALL["max_bytes"]


# ------------------------------------------------------------------ tokenizer
def test_tokenizer_roundtrip_through_litgpt(dm):
    files = sorted(p.name for p in dm.tokenizer_dir.iterdir())
    assert files == ["generation_config.json", "tokenizer.json", "tokenizer_config.json"]
    config = json.loads((dm.tokenizer_dir / "tokenizer_config.json").read_text())
    assert config["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert config["bos_token"] == config["eos_token"] == EOS_TOKEN and config["add_bos_token"] is False
    tok = Tokenizer(dm.tokenizer_dir)
    assert tok.backend == "huggingface" and tok.use_bos is False
    assert tok.bos_id == tok.eos_id == 0 == tok.token_to_id(EOS_TOKEN)
    assert 257 < tok.vocab_size <= SMALL["vocab_size"] and tok.vocab_size == dm.vocab_size
    for text in ["def f(x):\n    return {'a': [x, 1.5e-3]}  # ok\n", "  leading spaces\ttabs\n\n",
                 "héllo wörld ✓ 漢字"]:
        ids = tok.encode(text)
        assert ids.dtype == torch.int32 and tok.decode(ids) == text
    assert tok.encode("x = 1", eos=True)[-1].item() == tok.eos_id
    assert len(tok.encode("import os\nimport sys\n")) < len("import os\nimport sys\n")  # merges learned


def test_token_files_hold_the_tokenized_sources(dm):
    tok = Tokenizer(dm.tokenizer_dir)
    val = np.fromfile(dm.cache_path / "val.bin", dtype=dm.meta["dtype"])
    assert val.dtype == np.uint16 and val.size == dm.meta["val_tokens"]
    assert (val == tok.eos_id).sum() == len(dm.val_files)  # one separator per file
    first_end = int(np.flatnonzero(val == tok.eos_id)[0])
    text = dm.val_files[0].path.read_text(encoding="utf-8", errors="replace")
    assert tok.decode(torch.from_numpy(val[:first_end].astype(np.int64))) == text


def test_cache_is_reused_without_retraining(dm, cache_dir, monkeypatch):
    stamps = {p.name: p.stat().st_mtime_ns for p in dm.cache_path.rglob("*") if p.is_file()}

    def fail(*args, **kwargs):
        raise AssertionError("the tokenizer was retrained")

    monkeypatch.setattr(data_mod, "train_tokenizer", fail)
    again = TextCorpusDataModule(**SMALL, cache_dir=cache_dir)
    again.prepare_data()
    again.setup("fit")
    assert again.cache_path == dm.cache_path and again.tokenizer_dir == dm.tokenizer_dir
    assert {p.name: p.stat().st_mtime_ns for p in dm.cache_path.rglob("*") if p.is_file()} == stamps
    assert [d.name for d in cache_dir.iterdir() if d.name.startswith(".tmp")] == []
    # a different vocabulary size is a different cache
    other = TextCorpusDataModule(**{**SMALL, "vocab_size": 300}, cache_dir=cache_dir)
    assert other.cache_path != dm.cache_path


def test_existing_tokenizer_gives_the_same_tokens_without_training(dm, cache_dir, monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("a tokenizer was trained although tokenizer_dir was given")

    monkeypatch.setattr(data_mod, "train_tokenizer", fail)
    given = TextCorpusDataModule(**{**SMALL, "vocab_size": 300}, cache_dir=cache_dir, tokenizer_dir=dm.tokenizer_dir)
    given.prepare_data()
    given.setup("fit")
    assert given.tokenizer_dir == dm.tokenizer_dir.resolve()
    assert given.cache_path != dm.cache_path and given.cache_path.name.startswith("corpus-tok-")
    assert given.vocab_size == dm.vocab_size  # the tokenizer's own, not the requested 300
    for split in ("train.bin", "val.bin"):  # the same tokenizer on the same files: the same tokens
        assert (given.cache_path / split).read_bytes() == (dm.cache_path / split).read_bytes()


def test_existing_tokenizer_dir_without_tokenizer_json_is_named(tmp_path, cache_dir):
    with pytest.raises(FileNotFoundError, match="tokenizer_dir=.*has no tokenizer.json"):
        TextCorpusDataModule(**SMALL, cache_dir=cache_dir, tokenizer_dir=tmp_path)


# ------------------------------------------------------------------ windows and loaders
def test_window_shapes_and_dtypes(dm):
    batch = next(iter(dm.train_dataloader()))
    assert batch.shape == (SMALL["batch_size"], SMALL["seq_len"] + 1) and batch.dtype == torch.int64
    assert int(batch.min()) >= 0 and int(batch.max()) < dm.vocab_size
    val_batches = list(dm.val_dataloader())
    assert all(b.shape[1] == SMALL["seq_len"] + 1 and b.dtype == torch.int64 for b in val_batches)
    assert sum(b.shape[0] for b in val_batches) == (dm.meta["val_tokens"] - 1) // SMALL["seq_len"]
    # windows are slices of the token file: train at offset(), validation contiguous
    tokens = np.fromfile(dm.cache_path / "train.bin", dtype=dm.meta["dtype"]).astype(np.int64)
    ds = dm.train_dataset
    for pos in (0, 5, len(ds) + 3):  # positions past one data epoch continue the stream
        off = ds.offset(pos)
        assert torch.equal(ds[pos], torch.from_numpy(tokens[off:off + SMALL["seq_len"] + 1]))
    val_tokens = np.fromfile(dm.cache_path / "val.bin", dtype=dm.meta["dtype"]).astype(np.int64)
    assert torch.equal(val_batches[0][1], torch.from_numpy(val_tokens[SMALL["seq_len"]:2 * SMALL["seq_len"] + 1]))


def test_validation_sample_is_spread_over_the_whole_split_and_fixed(cache_dir, dm):
    """``val_windows``: a fixed, seeded sample of windows over the whole validation split (one in each of
    ``val_windows`` equal strata), not its first windows (the alphabetically first files); identical at every
    evaluation and in a resumed data module."""
    n_windows = len(dm.val_dataset)
    n = 8
    assert n_windows >= 4 * n
    module = TextCorpusDataModule(**SMALL, cache_dir=cache_dir, val_windows=n)
    module.setup("fit")
    windows = module.val_dataset.windows
    assert len(module.val_dataset) == n and list(windows) == sorted(set(windows))
    edges = [k * n_windows // n for k in range(n + 1)]
    assert all(lo <= w < hi for w, lo, hi in zip(windows, edges, edges[1:]))  # one window per eighth of the split
    assert windows[0] < n_windows / n and windows[-1] >= n_windows * (n - 1) / n
    assert list(windows) != list(range(n))  # not the first windows
    val_tokens = np.fromfile(dm.cache_path / "val.bin", dtype=dm.meta["dtype"]).astype(np.int64)
    batches = list(module.val_dataloader())
    assert sum(b.shape[0] for b in batches) == n
    seq = SMALL["seq_len"]
    assert torch.equal(batches[0][0], torch.from_numpy(val_tokens[windows[0] * seq:windows[0] * seq + seq + 1]))
    # the same windows at the next evaluation, and in a fresh module restored from a checkpoint's state
    assert all(torch.equal(a, b) for a, b in zip(batches, module.val_dataloader()))
    resumed = TextCorpusDataModule(**SMALL, cache_dir=cache_dir, val_windows=n)
    resumed.setup("fit")
    resumed.load_state_dict({**module.state_dict(), "samples_consumed": 40})
    assert all(torch.equal(a, b) for a, b in zip(batches, resumed.val_dataloader()))
    # another seed draws other windows from the same strata; more windows than the split has: all of them
    other = TextCorpusDataModule(**SMALL, cache_dir=cache_dir, val_windows=n, val_seed=1)
    other.setup("fit")
    assert list(other.val_dataset.windows) != list(windows)
    everything = TextCorpusDataModule(**SMALL, cache_dir=cache_dir, val_windows=10 * n_windows)
    everything.setup("fit")
    assert list(everything.val_dataset.windows) == list(range(n_windows))
    with pytest.raises(ValueError, match="val_windows=0"):
        TextCorpusDataModule(**SMALL, cache_dir=cache_dir, val_windows=0)


def test_train_order_is_seeded(cache_dir, dm):
    def first(seed):
        module = TextCorpusDataModule(**SMALL, cache_dir=cache_dir, seed=seed)
        module.setup("fit")
        return _batches(module.train_dataloader(), 3)

    a, b, c = first(1), first(1), first(2)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))
    # one data epoch visits every window once
    ds = dm.train_dataset
    offsets = sorted(ds.offset(p) for p in range(len(ds)))
    shift = offsets[0]
    assert offsets == [shift + k * SMALL["seq_len"] for k in range(len(ds))]


def test_stream_continues_across_epochs_and_resumes_exactly(cache_dir):
    module = TextCorpusDataModule(**SMALL, cache_dir=cache_dir, seed=3)
    module.setup("fit")
    loader = module.train_dataloader()
    epoch1, epoch2 = list(loader), list(loader)
    assert len(epoch1) == len(loader) and not torch.equal(epoch1[0], epoch2[0])
    # resume after 5 consumed batches: the next batches are the uninterrupted ones
    resumed = TextCorpusDataModule(**SMALL, cache_dir=cache_dir, seed=3)
    resumed.setup("fit")
    resumed.load_state_dict({"samples_consumed": 5 * SMALL["batch_size"]})
    assert all(torch.equal(x, y) for x, y in zip(_batches(resumed.train_dataloader(), 4), (epoch1 + epoch2)[5:9]))


def test_distributed_ranks_stride_the_same_stream(dm):
    ds = dm.train_dataset
    single = list(ResumableWindowSampler(ds, batch_size=2, start=8))
    ranks = [list(ResumableWindowSampler(ds, batch_size=2, num_replicas=2, rank=r, start=8)) for r in range(2)]
    assert not set(ranks[0]) & set(ranks[1])
    assert sorted(ranks[0] + ranks[1]) == single[:len(ranks[0]) * 2]
    assert ranks[0][:3] == [8, 10, 12] and ranks[1][:3] == [9, 11, 13]
    # a DistributedSampler, so Lightning keeps it under DDP instead of wrapping it
    assert isinstance(ResumableWindowSampler(ds, batch_size=2), torch.utils.data.DistributedSampler)


class _Recorder(L.LightningModule):
    """Records every training batch; a scalar parameter keeps the optimizer busy."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))
        self.seen = []

    def training_step(self, batch, batch_idx):
        self.seen.append(batch.clone())
        return (self.w - batch.float().mean()) ** 2

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def _trainer(steps, **kw):
    return L.Trainer(max_steps=steps, accelerator="cpu", logger=False, enable_checkpointing=False,
                     enable_progress_bar=False, enable_model_summary=False, limit_val_batches=0, **kw)


def test_trainer_resume_sees_the_uninterrupted_batches(cache_dir, tmp_path):
    settings = {**SMALL, "max_files": 6, "max_bytes": 40_000, "seq_len": 64, "batch_size": 16}
    full = _Recorder()
    loader_len = len(TextCorpusDataModule(**settings, cache_dir=cache_dir).train_dataloader())
    assert 4 <= loader_len <= 12  # the 30 steps below cross several Lightning epochs
    _trainer(30).fit(full, datamodule=TextCorpusDataModule(**settings, cache_dir=cache_dir))
    first = _Recorder()
    trainer = _trainer(loader_len + 3)  # stop mid-epoch
    trainer.fit(first, datamodule=TextCorpusDataModule(**settings, cache_dir=cache_dir))
    trainer.save_checkpoint(tmp_path / "mid.ckpt")
    second = _Recorder()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _trainer(30).fit(second, datamodule=TextCorpusDataModule(**settings, cache_dir=cache_dir),
                         ckpt_path=tmp_path / "mid.ckpt")
    assert not [w for w in caught if "not resumable" in str(w.message)]
    assert len(full.seen) == 30 and len(first.seen) == loader_len + 3 and len(second.seen) == 30 - loader_len - 3
    assert all(torch.equal(a, b) for a, b in zip(full.seen, first.seen + second.seen))


# ------------------------------------------------------------------ sources and errors
def test_user_data_dir(tmp_path):
    src = tmp_path / "texts"
    (src / "sub").mkdir(parents=True)
    for i in range(12):
        (src / f"note{i}.md").write_text(f"# Note {i}\n" + "the quick brown fox jumps over the lazy dog. " * 30)
    (src / "sub" / "code.py").write_text("print('hello')\n" * 50)
    (src / "ignored.bin").write_bytes(b"\x00\x01")
    module = TextCorpusDataModule(seq_len=16, batch_size=2, vocab_size=300, val_percent=30, data_dir=src,
                                  cache_dir=tmp_path / "cache")
    module.prepare_data()
    module.setup("fit")
    keys = {f.key for f in module.train_files + module.val_files}
    assert keys == {f"data/note{i}.md" for i in range(12)} | {"data/sub/code.py"}
    assert next(iter(module.train_dataloader())).shape == (2, 17)
    tok = module.tokenizer
    assert tok.decode(tok.encode("the lazy dog")) == "the lazy dog"


def test_connect_sets_batch_size_and_seq_len(cache_dir, dm):
    module = TextCorpusDataModule(**SMALL, cache_dir=cache_dir)
    module.setup("fit")
    module.connect(tokenizer=None, batch_size=3, max_seq_length=16)  # litgpt's DataModule interface
    assert next(iter(module.train_dataloader())).shape == (3, 17)
    assert next(iter(module.val_dataloader())).shape == (3, 17)


def test_seq_len_too_large_names_the_setting(cache_dir, dm):
    too_long = dm.meta["val_tokens"] + 10
    module = TextCorpusDataModule(**{**SMALL, "seq_len": too_long}, cache_dir=cache_dir)
    with pytest.raises(ValueError, match=r"seq_len=\d+ is too large for the (validation|train) split of \d+ tokens"):
        module.setup("fit")
    with pytest.raises(ValueError, match="seq_len"):
        ContiguousWindowDataset(dm.cache_path / "val.bin", "uint16", 10, seq_len=10)
    with pytest.raises(ValueError, match="seq_len"):
        RandomWindowDataset(dm.cache_path / "train.bin", "uint16", 10, seq_len=8, seed=0)
    with pytest.raises(ValueError, match="batch_size"):
        ResumableWindowSampler(dm.train_dataset, batch_size=10 ** 7)
    with pytest.raises(ValueError, match="source"):
        TextCorpusDataModule(source="wikipedia")
    with pytest.raises(FileNotFoundError, match="data_dir"):
        TextCorpusDataModule(data_dir="/nonexistent/dir", cache_dir=cache_dir).prepare_data()
