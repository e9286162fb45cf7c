"""litgpt data modules given by ``data.class_path`` (``litgpt.data.TextFiles``, ``LitData``, ``TinyStories``, ...,
or any ``LightningDataModule`` with litgpt's ``connect``), as ``litgpt pretrain`` uses them:

- :func:`resolve_data_class` / :func:`check_data_init_args`: ``data.class_path`` and ``data.init_args``, checked
  against the class's signature with jsonargparse (as litgpt's CLI does), each error naming its key.
- :func:`check_litgpt_data`: before anything starts, what the module will need once the run has started: the folders
  it reads and the special token its ``tokenize`` adds (:func:`load_tokenizer`, :func:`check_special_token`).
- :func:`build_litgpt_datamodule`: the instance, ``connect``-ed as litgpt does (tokenizer, micro-batch size, sequence
  length).

Importable from :mod:`~lightning_sparkling.pretrain.config.litgpt_compat` too.
"""

from __future__ import annotations

import contextlib
import glob
import inspect
import json
import os
import re
from pathlib import Path
from typing import Any

from lightning_sparkling.pretrain.errors import ConfigError, MissingInputError

__all__ = [
    "LITGPT_PRETRAIN_DATA",
    "build_litgpt_datamodule",
    "check_data_init_args",
    "check_litgpt_data",
    "check_special_token",
    "instantiate_data",
    "load_tokenizer",
    "needs_tokenizer",
    "resolve_data_class",
]

LITGPT_PRETRAIN_DATA = ("TextFiles", "LitData", "TinyStories", "OpenWebText", "TinyLlama", "MicroLlama")
"""litgpt's pretraining data modules (batches of token ids), importable by their short name."""

_TOKENIZING = ("TextFiles", "TinyStories", "OpenWebText")
"""litgpt data modules whose ``prepare_data`` tokenizes text with the tokenizer ``connect`` hands them."""


# ------------------------------------------------------------------------------------------------------------ class
def resolve_data_class(class_path: str) -> type:
    """The data module class of ``data.class_path``: a dotted path, or a short name of ``litgpt.data``.

    Raises:
        ConfigError: (``data.class_path``) not importable, not a ``LightningDataModule``, or an instruction-tuning
            module of litgpt (batches of prompt/response dicts, not pretraining text).
    """
    import importlib

    from lightning import LightningDataModule

    path = str(class_path)
    module_name, _, name = path.rpartition(".")
    module_name = module_name or "litgpt.data"
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as err:
        hint = f"; litgpt's pretraining data modules: {', '.join(LITGPT_PRETRAIN_DATA)}"
        raise ConfigError("data.class_path", f"cannot import {name!r} from {module_name!r} ({err}){hint}") from err
    if not (isinstance(cls, type) and issubclass(cls, LightningDataModule)):
        raise ConfigError("data.class_path", f"{path!r} is not a LightningDataModule")
    if cls.__module__.startswith("litgpt.data") and cls.__name__ not in LITGPT_PRETRAIN_DATA:
        raise ConfigError("data.class_path", f"{path!r} is an instruction-tuning data module (batches of "
                                             "prompt/response dicts), not pretraining text: use one of "
                                             f"{', '.join(LITGPT_PRETRAIN_DATA)} or your own LightningDataModule")
    if not callable(getattr(cls, "connect", None)):
        raise ConfigError("data.class_path", f"{path!r} has no connect(tokenizer, batch_size, max_seq_length) "
                                             "(litgpt's DataModule interface), so the batch size and sequence length "
                                             "cannot be handed to it")
    return cls


def _init_args_parser(cls: type):
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls, "data", fail_untyped=False)
    return parser


def check_data_init_args(cls: type, init_args: dict | None) -> dict:
    """``data.init_args`` checked against ``cls``'s signature (types, unknown and missing keys), as jsonargparse
    reads them for litgpt; returns them as given (``dict``).

    Raises:
        ConfigError: ``data.init_args.<key>`` for the first bad key.
    """
    from argparse import ArgumentError

    init_args = dict(init_args or {})
    try:
        _init_args_parser(cls).parse_object({"data": init_args})
    except (ArgumentError, TypeError, ValueError) as err:
        message = " ".join(str(err).split())
        match = (re.search(r"nested key '([^']+)'", message) or re.search(r'key "data\.([^"]+)"', message)
                 or re.search(r'Key "data\.([^"]+)"', message))
        key = f"data.init_args.{match.group(1)}" if match else "data.init_args"
        if "nested key" in message:
            known = [p for p in inspect.signature(cls).parameters if p not in ("self", "args", "kwargs")]
            message = f"not an argument of {cls.__name__} (it takes {', '.join(known)})"
        else:
            message = re.sub(r'^(Validation failed: )?(Parser key "[^"]+":\s*)?', "", message)
        raise ConfigError(key, message) from err
    return init_args


def build_litgpt_datamodule(run: Any):
    """The ``data.class_path`` module of ``run``, instantiated from ``data.init_args`` (types converted as litgpt's
    CLI does) and ``connect``-ed as ``litgpt pretrain`` does: the tokenizer of ``tokenizer_dir`` (``None`` without
    one), ``micro_batch_size`` and the sequence length (the module serves ``seq_len + 1`` tokens per sample). Its
    ``tokenizer_dir`` attribute is set to the run's (the litgpt dirs written next to checkpoints copy it)."""
    cls = resolve_data_class(run.data.class_path)
    module = instantiate_data(cls, run.data.init_args)
    tokenizer = None
    if run.tokenizer_dir is not None:
        from litgpt.tokenizer import Tokenizer

        tokenizer = Tokenizer(run.tokenizer_dir)
    module.connect(tokenizer=tokenizer, batch_size=run.micro_batch_size, max_seq_length=run.seq_len)
    if getattr(module, "tokenizer_dir", None) is None:
        with contextlib.suppress(AttributeError):  # a read-only property of a custom module
            module.tokenizer_dir = run.tokenizer_dir
    return module


def needs_tokenizer(cls: type) -> bool:
    """Whether litgpt's data module ``cls`` tokenizes text in ``prepare_data`` (and so needs ``tokenizer_dir``)."""
    return cls.__module__.startswith("litgpt.data") and cls.__name__ in _TOKENIZING


def instantiate_data(cls: type, init_args: dict | None) -> Any:
    """``cls(**init_args)``, the types converted as litgpt's CLI converts them (jsonargparse)."""
    parser = _init_args_parser(cls)
    return parser.instantiate_classes(parser.parse_object({"data": dict(init_args or {})})).data


# ----------------------------------------------------------------------------------------------------------- tokenizer
_SPECIAL_TOKENS = {"TextFiles": ("bos", "starts every document with one (tokenizer.encode(text, bos=True))"),
                   "TinyStories": ("bos", "starts every story with one (tokenizer.encode(text, bos=True))"),
                   "OpenWebText": ("eos", "ends every document with one (tokenizer.encode(text, eos=True))")}
"""The special token each tokenizing litgpt data module's ``tokenize`` adds to every document, and how it says so.
``OpenWebText`` also adds a BOS when the tokenizer's config asks for one (litgpt's ``Tokenizer.use_bos``)."""


def load_tokenizer(tokenizer_dir: Path) -> Any:
    """litgpt's ``Tokenizer`` of ``tokenizer_dir``, loaded as litgpt loads it (its ``tokenizer_config.json`` checked
    first: litgpt reads its ``tokenizer_class``).

    Raises:
        ConfigError: (``tokenizer_dir``) litgpt's ``Tokenizer`` cannot load it, naming the file and the fix.
    """
    from litgpt.tokenizer import Tokenizer

    _check_tokenizer_config(Path(tokenizer_dir) / "tokenizer_config.json")
    try:
        return Tokenizer(tokenizer_dir)
    except Exception as err:
        raise ConfigError("tokenizer_dir", f"litgpt's Tokenizer cannot load {str(tokenizer_dir)!r} "
                                           f"({type(err).__name__}: {err}): fix its tokenizer.json, "
                                           "tokenizer_config.json or generation_config.json, or give another "
                                           "tokenizer_dir") from err


def _check_tokenizer_config(path: Path) -> None:
    """A ``tokenizer_config.json``, when there is one, must be a JSON object with a ``tokenizer_class`` string
    (litgpt's ``Tokenizer`` reads ``config["tokenizer_class"]`` unconditionally)."""
    if not path.is_file():
        return
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise ConfigError("tokenizer_dir", f"cannot read {str(path)!r} ({err}): litgpt's Tokenizer reads it as "
                                           "JSON: fix it, or remove it") from err
    if not isinstance(config, dict) or not isinstance(config.get("tokenizer_class"), str):
        raise ConfigError("tokenizer_dir", f"{str(path)!r} has no \"tokenizer_class\" (litgpt's Tokenizer reads it): "
                                           "add one to that file, e.g. \"tokenizer_class\": "
                                           "\"PreTrainedTokenizerFast\" for a tokenizer.json tokenizer")


def check_special_token(tokenizer: Any, tokenizer_dir: Path | None, kind: str, why: str) -> None:
    """Refuse a tokenizer without the ``kind`` (``"bos"`` or ``"eos"``) token that its user adds to every document.

    Args:
        tokenizer: litgpt's ``Tokenizer``.
        tokenizer_dir: its folder (named in the message).
        kind: ``"bos"`` or ``"eos"``.
        why: who needs it, e.g. ``"litgpt.data.TextFiles starts every document with one"``.

    Raises:
        ConfigError: (``tokenizer_dir``) the token is missing.
    """
    if getattr(tokenizer, f"{kind}_id", None) is not None:
        return
    raise ConfigError("tokenizer_dir", f"the tokenizer of {str(tokenizer_dir)!r} has no {kind.upper()} token, and "
                                       f"{why}: name one of its tokens in tokenizer_config.json "
                                       f"(\"{kind}_token\": ...) or generation_config.json (\"{kind}_token_id\": ...), "
                                       "or give a tokenizer_dir whose tokenizer has one")


# ----------------------------------------------------------------------------------------------------------- data paths
def check_litgpt_data(cls: type, init_args: dict | None, tokenizer: Any, tokenizer_dir: Path | None) -> None:
    """Check, before anything starts, what litgpt's data module ``cls`` will need once the run has started: the
    folders it reads (``TextFiles``' ``*.txt``, ``LitData`` / ``TinyLlama`` / ``MicroLlama``'s litdata folders) and
    the special token its ``tokenize`` adds (when it still has to tokenize: no prepared ``train/``/``val/``).
    Modules outside ``litgpt.data`` are not checked.

    Raises:
        ConfigError: ``data.init_args.<path key>`` or ``tokenizer_dir``, naming the path or the token and the fix.
    """
    if not cls.__module__.startswith("litgpt.data"):
        return
    try:
        module = instantiate_data(cls, init_args)
    except Exception as err:
        raise ConfigError("data.init_args", f"{cls.__name__} rejects them: {err}") from err
    check = {"TextFiles": _check_text_files, "LitData": _check_lit_data, "TinyLlama": _check_tiny_llama,
             "MicroLlama": _check_tiny_llama}.get(cls.__name__)
    if check is not None:
        check(module)
    need = _SPECIAL_TOKENS.get(cls.__name__)
    if tokenizer is None or need is None or not _will_tokenize(module):
        return
    kind, why = need
    check_special_token(tokenizer, tokenizer_dir, kind, f"litgpt.data.{cls.__name__} {why}")
    if cls.__name__ == "OpenWebText" and tokenizer.use_bos:
        check_special_token(tokenizer, tokenizer_dir, "bos", "its tokenizer_config.json asks for one at the start of "
                                                             "every document (add_bos_token)")


def _will_tokenize(module: Any) -> bool:
    """Whether the module's ``prepare_data`` still tokenizes (litgpt skips a split whose output folder exists)."""
    outputs = [getattr(module, name, None) for name in ("out_path_train", "out_path_val", "data_path_train",
                                                         "data_path_val")]
    paths = [str(p) for p in outputs if p is not None]
    return not all("://" in p or Path(p).is_dir() for p in paths)


def _txt_files(key: str, folder: Any, role: str) -> list[Path]:
    """The ``*.txt`` files ``TextFiles`` reads in ``folder`` (``glob``, as litgpt does), refusing a missing folder or
    one without any."""
    if not Path(folder).is_dir():
        raise MissingInputError(key, folder, f"{str(folder)!r} is not a directory: give the folder of .txt files to "
                                             f"{role}")
    files = [Path(f) for f in sorted(glob.glob(str(Path(folder) / "*.txt")))]
    if not files:
        raise MissingInputError(key, Path(folder) / "*.txt", f"{str(folder)!r} holds no .txt file "
                                                             "(litgpt.data.TextFiles reads the *.txt files directly "
                                                             f"in it to {role}): put your text there as .txt files")
    return files


def _check_text_files(module: Any) -> None:
    """``TextFiles``: the ``*.txt`` files of ``train_data_path`` (the first one for validation unless
    ``val_data_path`` is given, so then at least two) and of ``val_data_path``, each split with a non-empty file."""
    key = "data.init_args.train_data_path"
    train = _txt_files(key, module.train_data_path, "train on")
    if module.val_data_path is None:
        if len(train) < 2:
            raise ConfigError(key, f"{str(module.train_data_path)!r} holds one .txt file, and litgpt.data.TextFiles "
                                   "takes the first one for validation when val_data_path is not given: add .txt "
                                   "files or give data.init_args.val_data_path")
        val_key, val, train = key, train[:1], train[1:]
    else:
        val_key = "data.init_args.val_data_path"
        val = _txt_files(val_key, module.val_data_path, "validate on")
    for split_key, files, split in ((key, train, "training"), (val_key, val, "validation")):
        if not any(f.stat().st_size > 0 for f in files):
            names = ", ".join(f.name for f in files[:3]) + (", ..." if len(files) > 3 else "")
            raise ConfigError(split_key, f"every .txt file of the {split} split is empty ({names}): put text in them")


def _check_litdata_dir(key: str, folder: str, what: str) -> None:
    """A local folder litdata's ``StreamingDataset`` reads must exist and hold the ``index.json`` of
    ``litdata.optimize``; remote (``s3://``) folders are not checked."""
    if "://" in folder:
        return
    if not Path(folder).is_dir():
        raise MissingInputError(key, folder, f"{folder!r} does not exist ({what})")
    if not (Path(folder) / "index.json").is_file():
        raise MissingInputError(key, Path(folder) / "index.json", f"{folder!r} holds no index.json ({what}; litdata's "
                                                                  "StreamingDataset reads a folder written by "
                                                                  "litdata.optimize)")


def _check_lit_data(module: Any) -> None:
    """``LitData``: ``data_path`` (or its two ``split_names`` subfolders) are prepared litdata folders."""
    root = str(module.data_path)
    if module.split_names:
        if "://" not in root and not Path(root).is_dir():
            raise MissingInputError("data.init_args.data_path", root, f"{root!r} does not exist (the folder of the "
                                                                      "split_names folders)")
        for name in module.split_names:
            _check_litdata_dir("data.init_args.split_names", os.path.join(root, name),
                               f"split {name!r} of split_names under data_path")
    else:
        _check_litdata_dir("data.init_args.data_path", root, "the prepared litdata folder to train and validate on")


def _check_tiny_llama(module: Any) -> None:
    """``TinyLlama`` / ``MicroLlama``: ``data_path/slimpajama/train``, ``slimpajama/val`` (and ``starcoder``) are
    prepared litdata folders (litgpt checks they exist in ``prepare_data``, after the run has started)."""
    for path in module.required_paths:
        _check_litdata_dir("data.init_args.data_path", str(path),
                           f"{type(module).__name__} reads data_path/slimpajama/train, slimpajama/val"
                           f"{' and starcoder' if len(module.required_paths) > 2 else ''}, prepared as in litgpt's "
                           "pretrain_tinyllama tutorial")
