"""Resolving a ``sparkling pretrain`` / ``plan`` configuration: :func:`resolve` checks every parsed value and derives
what a run needs (:class:`ResolvedRun`) before anything starts, each error naming its key (:class:`ConfigError`); one
helper per section: hardware, litgpt-only keys, initial checkpoint, data, model, length, optimizer, stages, resume.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lightning_sparkling.growth.schedules import DECAY_SHAPES, SCHEDULES
from lightning_sparkling.growth.stage import GrowthStage
from lightning_sparkling.parallel.registry import backend_class, cli_backend, registered_backends
from lightning_sparkling.pretrain.config import litgpt_compat
from lightning_sparkling.pretrain.config.resume import _newest_to_resume, check_resume_checkpoint
from lightning_sparkling.pretrain.config.schema import (PRECISIONS, DataArgs, EvalArgs, GrowthArgs, LogArgs,
                                                        RMSMonitorArgs, TrainArgs, _as, _get)
from lightning_sparkling.pretrain.config.stages import _resolve_stages, progressive_config_error
from lightning_sparkling.pretrain.data import litgpt_data
from lightning_sparkling.pretrain.errors import ConfigError, MissingInputError, _positive_int
from lightning_sparkling.pretrain.model.model_config import (_initial_model_config, model_config_from,
                                                             model_name_to_look_up)
from lightning_sparkling.pretrain.model.optim import _check_fresh_bias_correction, _optimizer_info, normalize_optimizer

__all__ = ["ResolvedRun", "resolve", "tokenizer_vocab_size"]


@dataclass
class ResolvedRun:
    """Everything a run needs, derived and checked from the parsed configuration (no side effects)."""

    model_config: Any  # litgpt.Config of the starting model
    stages: list[GrowthStage]
    steps: int
    tokens_per_step: int
    seq_len: int
    micro_batch_size: int
    accumulate: int
    devices: int | str
    num_devices: int
    num_nodes: int
    world_size: int
    accelerator: str
    strategy: str  # "auto" or a registered backend's CLI value ("ddp", "fsdp2", "fsdp1"; never a deprecated alias)
    precision: str
    optimizer: str | dict
    optimizer_name: str
    uses_muon: bool
    lr: float
    out_dir: Path
    resume: bool | str | Path
    resume_path: Path | None
    tokenizer_dir: Path | None
    data_vocab_size: int
    data: DataArgs
    train: TrainArgs
    eval: EvalArgs
    growth: GrowthArgs
    rms_monitor: RMSMonitorArgs | None
    seed: int
    num_threads: int | None = None
    notes: list[str] = field(default_factory=list)
    initial_checkpoint_dir: Path | None = None  # the litgpt checkpoint dir the weights come from
    initial_weights: Path | None = None  # its lit_model.pth
    logger_name: str = "tensorboard"
    log: Any = None  # LogArgs
    plans: list[Any] = field(default_factory=list)  # the GrowthPlan of each stage, planned once by resolve()
    compile: bool = False  # torch.compile the GPT (``compile: auto`` resolved)
    compile_scope: str = "whole"  # the whole GPT as one graph, or each block compiled (``compile: blocks``)
    activation_checkpointing: bool = False

    @property
    def litgpt_data(self) -> bool:
        """Whether the data is a litgpt data module (``data.class_path``) rather than the embedded corpus."""
        return self.data.class_path is not None

    @property
    def total_tokens(self) -> int:
        return self.steps * self.tokens_per_step


def resolve(ns: Any, *, dry_run: bool = False) -> ResolvedRun:
    """Check a parsed configuration and derive the run from it.

    Args:
        ns: the jsonargparse ``Namespace`` of :func:`pretrain_arguments` (or a dict with the same keys).
        dry_run: ``sparkling plan``'s reading: data and tokenizer need not be on disk yet (each missing one is a
            note, ``pretrain will need PATH``; the vocabulary is then the model's or ``data.vocab_size``).

    Raises:
        ConfigError: naming the key, for anything impossible or unsupported; :class:`MissingInputError` (not with
            ``dry_run``) for data or a tokenizer that is not on disk.
    """
    data = _as(DataArgs, _get(ns, "data")) or DataArgs()
    train = _as(TrainArgs, _get(ns, "train")) or TrainArgs()
    evaluation = _as(EvalArgs, _get(ns, "eval")) or EvalArgs()
    log = _as(LogArgs, _get(ns, "log")) or LogArgs()
    growth = _as(GrowthArgs, _get(ns, "growth") or {}, lr_schedule=train.lr_schedule)
    rms_monitor = _as(RMSMonitorArgs, _get(ns, "rms_monitor"))
    if train.tie_embeddings is None:  # litgpt's TrainArgs default
        train.tie_embeddings = False
    notes: list[str] = []
    strategy, num_nodes, accelerator, num_devices, world, precision = _resolve_hardware(ns, notes)
    notes += _cpu_processes_note(accelerator, num_devices, _get(ns, "num_threads"))
    compile_model, checkpointing = _resolve_runtime(ns, accelerator, strategy, notes)
    compile_scope = _compile_scope(ns, strategy)
    logger_name = _check_litgpt_keys(ns, train, evaluation, log, notes)
    initial_dir, initial_config, initial_shapes, initial_weights = _read_initial_checkpoint(ns)
    data_class, tokenizer_dir, data_vocab = _resolve_data(ns, data, train, initial_dir, initial_config, notes,
                                                          dry_run=dry_run)
    config, seq_len = _resolve_model(ns, data, train, evaluation, initial_config, initial_shapes, data_vocab,
                                     tokenizer_dir, data_class, notes)
    accumulate, tokens_per_step, steps = _resolve_length(ns, train, evaluation, num_devices, num_nodes, world, seq_len,
                                                         notes)
    spec, optimizer_name, uses_muon, lr = _resolve_optimizer(ns, train, strategy, precision)
    stages, plans = _resolve_stages(growth, config, train, steps, tokens_per_step, notes)
    # the recipe acts on new entries: a run whose stages add none (a config-field axis, rope_base) gets no note
    if any(p.adds_entries for p in plans) and _get(_get(ns, "growth"), "recipe", GrowthArgs.recipe) == "auto":
        notes.append(f"growth.recipe: auto is {growth.recipe!r}, the recipe measured best under train.lr_schedule "
                     f"{train.lr_schedule!r} (docs/BENCHMARKS.md, 'Where growth pays')")
    try:
        _check_fresh_bias_correction(stages, spec, optimizer_name, uses_muon)
        out_dir, resume, resume_path = _resolve_resume(ns, initial_dir, config, stages, plans, train, uses_muon,
                                                       notes)
    except ConfigError as err:  # about an expanded stage of growth.progressive: named by its key there
        if growth.progressive is None:
            raise
        raise progressive_config_error(err, growth.progressive) from err

    return ResolvedRun(
        model_config=config, stages=stages, steps=steps, tokens_per_step=tokens_per_step, seq_len=seq_len,
        micro_batch_size=train.micro_batch_size, accumulate=accumulate, devices=_get(ns, "devices", "auto"),
        num_devices=num_devices, num_nodes=num_nodes, world_size=world, accelerator=accelerator, strategy=strategy,
        precision=precision, optimizer=spec, optimizer_name=optimizer_name, uses_muon=uses_muon, lr=lr,
        out_dir=out_dir, resume=resume, resume_path=resume_path, tokenizer_dir=tokenizer_dir,
        data_vocab_size=data_vocab if data_vocab is not None else config.vocab_size, data=data, train=train,
        eval=evaluation, growth=growth, rms_monitor=rms_monitor,
        seed=int(_get(ns, "seed", 42)), num_threads=_get(ns, "num_threads"), notes=notes,
        initial_checkpoint_dir=initial_dir if resume_path is None else None,
        initial_weights=initial_weights if resume_path is None else None, logger_name=logger_name, log=log,
        plans=plans, compile=compile_model, compile_scope=compile_scope, activation_checkpointing=checkpointing,
    )


# ------------------------------------------------------------------------------------------------------------ hardware
def _strategy_choices(fits: Any = None) -> str:
    """The CLI's ``strategy`` values for messages, from the backend registry (``fits``: those it is true of)."""
    entries = [e for e in registered_backends() if e.cli_strategy is not None and (fits is None or fits(e))]
    labels = (["auto"] if fits is None else []) + [e.cli_label() for e in entries]
    return labels[0] if len(labels) == 1 else f"{', '.join(labels[:-1])} or {labels[-1]}"


def _named(entry: Any) -> str:
    """``strategy 'fsdp1' (FSDP1)``: a registered backend's CLI value and its few words, for messages."""
    return f"strategy {entry.cli_strategy!r}" + (f" ({entry.cli_help})" if entry.cli_help else "")


def _resolve_hardware(ns: Any, notes: list[str] | None = None) -> tuple[str, int, str, int, int, str]:
    """``(strategy, num_nodes, accelerator, num_devices, world size, precision)`` of a run. ``strategy`` is ``auto``
    or a registered backend's CLI value (:func:`~lightning_sparkling.parallel.registry.cli_backend`); a deprecated
    alias is resolved to it with a note appended to ``notes``."""
    strategy = str(_get(ns, "strategy", "auto") or "auto")
    entry = cli_backend(strategy)
    if strategy != "auto" and entry is None:
        unsupported = ("deepspeed" in strategy.lower() or "tensor" in strategy.lower()
                       or strategy.lower() in ("tp", "model_parallel"))
        why = (" (DeepSpeed and tensor parallelism cannot be grown in place: the callback rebuilds plain, DDP or "
               "FSDP-sharded litgpt modules only)" if unsupported else "")
        raise ConfigError("strategy", f"{strategy!r} is not supported{why}; use {_strategy_choices()}")
    if entry is not None and strategy != entry.cli_strategy:  # a deprecated alias
        until = f" (it goes in {entry.alias_until})" if entry.alias_until else ""
        if notes is not None:
            notes.append(f"strategy: {strategy} is a deprecated alias of strategy: {entry.cli_strategy}{until}; "
                         f"write {entry.cli_strategy}")
        strategy = str(entry.cli_strategy)
    num_nodes = _get(ns, "num_nodes", 1)
    accelerator, num_devices = _resolve_devices(_get(ns, "accelerator", "auto"), _get(ns, "devices", "auto"),
                                                num_nodes)
    if entry is not None and entry.cuda_only and accelerator != "cuda":
        raise ConfigError("strategy", f"{_named(entry)} runs on CUDA GPUs only, and the accelerator here is "
                                      f"{accelerator!r}: use "
                                      f"{_strategy_choices(lambda e: not e.cuda_only)} (CPU or GPU)")
    world = num_devices * num_nodes
    if strategy == "auto" and world > 1:
        strategy = "ddp"
    precision = _get(ns, "precision") or _default_precision(accelerator)
    precision = str(precision)
    if precision not in PRECISIONS:
        raise ConfigError("precision", f"expected one of {', '.join(PRECISIONS)}, got {precision!r}")
    return strategy, num_nodes, accelerator, num_devices, world, precision


def _resolve_runtime(ns: Any, accelerator: str, strategy: str, notes: list[str]) -> tuple[bool, bool]:
    """``(compile, activation_checkpointing)``: ``compile: auto`` is on for CUDA; each refused (and ``auto`` off,
    with a note) under a strategy whose registered backend does not support it (FSDP1's)."""
    compile_model = _get(ns, "compile", "auto")
    checkpointing = _get(ns, "activation_checkpointing", False)
    if compile_model not in (True, False, "auto", "blocks"):
        raise ConfigError("compile", f"expected auto, true, false or blocks, got {compile_model!r}")
    compile_model = True if compile_model == "blocks" else compile_model
    if not isinstance(checkpointing, bool):
        raise ConfigError("activation_checkpointing", f"expected true or false, got {checkpointing!r}")
    entry = cli_backend(strategy)
    for key, value in (("compile", compile_model is True), ("activation_checkpointing", checkpointing)):
        if value and entry is not None and not entry.supports(key):
            raise ConfigError(key, f"is not supported with {_named(entry)} yet: use strategy "
                                   f"{_strategy_choices(lambda e, key=key: e.supports(key))}, or set {key}: false")
    if compile_model == "auto":
        compile_model = accelerator == "cuda" and (entry is None or entry.supports("compile"))
        if entry is not None and not entry.supports("compile"):
            notes.append(f"compile: auto is off under {_named(entry)}; use "
                         f"{_strategy_choices(lambda e: e.supports('compile'))} to compile")
    return bool(compile_model), checkpointing


def _compile_scope(ns: Any, strategy: str) -> str:
    """``"blocks"`` for ``compile: blocks`` and under a backend that compiles per block (FSDP2's sharded blocks),
    ``"whole"`` otherwise (``compile: true`` and ``auto``: the whole GPT as one graph)."""
    entry = cli_backend(strategy)
    if _get(ns, "compile", "auto") == "blocks" or (entry is not None and backend_class(entry).compile_per_block):
        return "blocks"
    return "whole"


def _cpu_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the platform has one)."""
    import os

    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def _cpu_processes_note(accelerator: str, num_devices: int, num_threads: int | None) -> list[str]:
    """A warning when a CPU run starts more processes than this machine has cores (correct, only slower)."""
    cores = _cpu_cores()
    if accelerator != "cpu" or num_devices <= cores:
        return []
    threads = f", each with {num_threads} thread{'s' if num_threads != 1 else ''}" if num_threads else ""
    return [f"warning: devices={num_devices} starts {num_devices} CPU processes (gloo){threads} on {cores} CPU "
            f"core{'s' if cores != 1 else ''}: they share the cores, so each step is slower than with devices="
            f"{cores} or fewer"]


def _resolve_devices(accelerator: str, devices: int | str, num_nodes: int) -> tuple[str, int]:
    import torch

    acc = str(accelerator).lower()
    if acc not in ("auto", "cpu", "gpu", "cuda", "mps"):
        raise ConfigError("accelerator", f"expected auto, cpu, gpu, cuda or mps, got {accelerator!r}")
    if acc == "auto":
        acc = "cuda" if torch.cuda.is_available() else "cpu"
    if acc == "gpu":
        acc = "cuda"
    if isinstance(devices, str):
        if devices in ("auto", "-1"):
            n = (torch.cuda.device_count() or 1) if acc == "cuda" else 1
        elif devices.isdigit() and int(devices) > 0:
            n = int(devices)
        else:
            raise ConfigError("devices", f"expected a positive integer or 'auto', got {devices!r}")
    elif isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise ConfigError("devices", f"expected a positive integer or 'auto', got {devices!r}")
    else:
        n = devices
    _positive_int("num_nodes", num_nodes)
    return acc, n


def _default_precision(accelerator: str) -> str:
    import torch

    if accelerator == "cuda" and torch.cuda.is_available():
        return "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
    return "32-true"


# ---------------------------------------------------------------------------------------------------------- litgpt keys
def _check_litgpt_keys(ns: Any, train: TrainArgs, evaluation: EvalArgs, log: LogArgs, notes: list[str]) -> str:
    """Refuse litgpt keys that have no equivalent here; returns the logger name (notes are appended to ``notes``)."""
    if train.epochs is not None:
        raise ConfigError("train.epochs", "cannot be honoured: the run length must be known before the data is read "
                                          "(LR schedule, growth steps), and `litgpt pretrain` refuses it too; give "
                                          "train.max_tokens (or train.max_steps) and remove train.epochs")
    if train.max_time is not None and not (isinstance(train.max_time, (int, float)) and train.max_time > 0):
        raise ConfigError("train.max_time", f"must be a positive number of seconds, got {train.max_time!r}")
    _positive_int("train.max_seq_length", train.max_seq_length, allow_none=True)
    _positive_int("eval.max_new_tokens", evaluation.max_new_tokens, allow_none=True)
    example = evaluation.evaluate_example
    if not (example in ("first", "random") or (isinstance(example, int) and not isinstance(example, bool)
                                                and example >= 0)):
        raise ConfigError("eval.evaluate_example", f"expected 'first', 'random' or an index >= 0, got {example!r}")
    logger_name = str(_get(ns, "logger_name", "tensorboard") or "tensorboard")
    notes += litgpt_compat.check_logger(logger_name, log)
    return logger_name


def _read_initial_checkpoint(ns: Any) -> tuple[Path | None, Any, Any, Path | None]:
    """``(initial_checkpoint_dir, its litgpt Config, its tensor shapes, its weights file)``, all ``None`` without."""
    initial_dir = _get(ns, "initial_checkpoint_dir")
    initial_config = initial_shapes = initial_weights = None
    if initial_dir is not None:
        initial_config, initial_shapes, initial_weights = litgpt_compat.read_initial_checkpoint(Path(str(initial_dir)))
        initial_dir = initial_weights.parent
    return initial_dir, initial_config, initial_shapes, initial_weights


# ------------------------------------------------------------------------------------------------------------ data
def _resolve_data(ns: Any, data: DataArgs, train: TrainArgs, initial_dir: Path | None, initial_config: Any,
                  notes: list[str], *, dry_run: bool = False) -> tuple[Any, Path | None, int | None]:
    """``(litgpt data class or None, tokenizer_dir, vocabulary size or None)``; ``dry_run``: missing ones are notes."""
    data_class = _data_class(data)
    _check_corpus_keys(data, train)
    _missing_noted(lambda: _check_data_dir(data), dry_run, notes)
    tokenizer_dir = _tokenizer_dir(ns, data, data_class, initial_dir, notes)
    read = _missing_noted(lambda: _read_tokenizer(tokenizer_dir, data_class), dry_run, notes)
    if read is None:  # no tokenizer_dir, or (dry run) not on disk: the vocabulary is the model's or the corpus's own
        tokenizer_dir, tokenizer = None, None
        data_vocab = None if data_class is not None or initial_config is not None else data.vocab_size
    else:
        tokenizer, data_vocab = read
    if data_class is not None:
        _missing_noted(lambda: litgpt_data.check_litgpt_data(data_class, data.init_args, tokenizer, tokenizer_dir),
                       dry_run, notes)
    return data_class, tokenizer_dir, data_vocab


def _missing_noted(check: Callable[[], Any], dry_run: bool, notes: list[str]) -> Any:
    """``check()``; ``dry_run``: a :class:`MissingInputError` is the note ``pretrain will need PATH (missing: KEY)``."""
    try:
        return check()
    except MissingInputError as err:
        if not dry_run:
            raise
        notes.append(f"pretrain will need {err.path} (missing: {err.key})")
        return None


def _data_class(data: DataArgs) -> Any:
    """The litgpt data module class of ``data.class_path`` (``init_args`` checked), ``None`` for the embedded corpus."""
    if data.class_path is None:
        if data.init_args is not None:
            raise ConfigError("data.init_args", "is only read with data.class_path (a litgpt data module)")
        return None
    corpus_keys = [f.name for f in dataclasses.fields(DataArgs)
                   if f.name not in ("class_path", "init_args") and getattr(data, f.name) != f.default]
    if corpus_keys:
        raise ConfigError(f"data.{corpus_keys[0]}", f"is a key of the embedded corpus, and data.class_path "
                                                    f"{data.class_path!r} is given: put the data module's "
                                                    "arguments in data.init_args (the sequence length is "
                                                    "train.max_seq_length)")
    data_class = litgpt_data.resolve_data_class(data.class_path)
    litgpt_data.check_data_init_args(data_class, data.init_args)
    return data_class


def _check_corpus_keys(data: DataArgs, train: TrainArgs) -> None:
    """The embedded corpus's keys (``data.*``) and the sequence length they share with ``train.max_seq_length``."""
    if data.source not in ("stdlib", "stdlib+site-packages"):
        raise ConfigError("data.source", f"expected 'stdlib' or 'stdlib+site-packages', got {data.source!r} (for your "
                                         "own text set data.data_dir)")
    _positive_int("data.seq_len", data.seq_len, allow_none=True)
    _positive_int("data.vocab_size", data.vocab_size, minimum=2)
    if not 0 < data.val_percent < 100:
        raise ConfigError("data.val_percent", f"must be in (0, 100), got {data.val_percent}")
    _positive_int("data.max_files", data.max_files, allow_none=True, minimum=2)
    _positive_int("data.max_bytes", data.max_bytes, allow_none=True)
    _positive_int("data.num_workers", data.num_workers, minimum=0)
    if (data.seq_len is not None and train.max_seq_length is not None and data.seq_len != train.max_seq_length):
        raise ConfigError("train.max_seq_length", f"{train.max_seq_length} differs from data.seq_len={data.seq_len}: "
                                                  "give one of them")


def _tokenizer_dir(ns: Any, data: DataArgs, data_class: Any, initial_dir: Path | None, notes: list[str]) -> Path | None:
    """The run's ``tokenizer_dir`` (litgpt's ``checkpoints/`` prefix): the given one, else the initial checkpoint's."""
    tokenizer_dir = _get(ns, "tokenizer_dir")
    if tokenizer_dir is None and initial_dir is not None and (initial_dir / "tokenizer.json").is_file():
        tokenizer_dir = initial_dir  # the model's own tokenizer: its token ids are what its weights were trained on
        notes.append(f"tokenizer: {initial_dir} (the initial checkpoint's)")
    if tokenizer_dir is None and data_class is not None and litgpt_data.needs_tokenizer(data_class):
        raise ConfigError("tokenizer_dir", f"{data.class_path} tokenizes its text with the tokenizer of tokenizer_dir "
                                           "(as in litgpt): give tokenizer_dir (a folder with tokenizer.json, e.g. a "
                                           "litgpt checkpoint dir)")
    return None if tokenizer_dir is None else litgpt_compat.extend_checkpoint_dir(Path(str(tokenizer_dir)))


def _read_tokenizer(tokenizer_dir: Path | None, data_class: Any) -> tuple[Any, int] | None:
    """``(litgpt Tokenizer, vocabulary size)`` of ``tokenizer_dir`` (``None`` without one).

    Raises:
        MissingInputError: (``tokenizer_dir``) no ``tokenizer.json`` there.
        ConfigError: (``tokenizer_dir``) one that cannot be read or lacks a token the data needs.
    """
    if tokenizer_dir is None:
        return None
    if not (tokenizer_dir / "tokenizer.json").is_file():
        raise MissingInputError("tokenizer_dir", tokenizer_dir / "tokenizer.json", f"{str(tokenizer_dir)!r} holds no "
                                "tokenizer.json (a Hugging Face `tokenizers` file, as in litgpt checkpoint dirs)")
    try:
        data_vocab = tokenizer_vocab_size(tokenizer_dir)
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError("tokenizer_dir", f"cannot read {tokenizer_dir / 'tokenizer.json'}: {err}") from err
    return _check_tokenizer(tokenizer_dir, data_class), data_vocab


def tokenizer_vocab_size(tokenizer_dir: Path) -> int:
    """Vocabulary size of ``tokenizer_dir/tokenizer.json`` (read from the file; nothing is loaded or trained)."""
    path = Path(tokenizer_dir) / "tokenizer.json"
    spec = json.loads(path.read_text(encoding="utf-8"))
    ids = list((spec.get("model") or {}).get("vocab", {}).values()) + [t["id"] for t in spec.get("added_tokens", [])]
    return max(ids) + 1 if ids else 0


def _check_data_dir(data: DataArgs) -> None:
    """``data.data_dir`` must be a folder whose text files (``*.txt``, ``*.py``, ``*.md`` below it, not empty) fill
    both splits, as the data module will list and split them once the run has started."""
    if data.data_dir is None:
        return
    if not Path(data.data_dir).expanduser().is_dir():
        raise MissingInputError("data.data_dir", data.data_dir, f"{str(data.data_dir)!r} is not a directory")
    from lightning_sparkling.pretrain.data.corpus import corpus_splits

    try:
        corpus_splits(data.source, Path(data.data_dir).expanduser(), data.include_tests, data.val_percent,
                      data.max_files, data.max_bytes)
    except (OSError, ValueError) as err:
        raise ConfigError("data.data_dir", f"{err}") from err


def _check_tokenizer(tokenizer_dir: Path, data_class: Any) -> Any:
    """litgpt's ``Tokenizer`` of ``tokenizer_dir`` (it must load); with the embedded corpus it must have the EOS token
    that ends every file (``<|endoftext|>`` when it names none). A litgpt data module's needs are checked by
    :func:`~lightning_sparkling.pretrain.data.litgpt_data.check_litgpt_data`."""
    tokenizer = litgpt_data.load_tokenizer(tokenizer_dir)
    if data_class is None and tokenizer.eos_id is None and tokenizer.processor.token_to_id("<|endoftext|>") is None:
        litgpt_data.check_special_token(tokenizer, tokenizer_dir, "eos", "the corpus of data.data_dir / "
                                        "data.source ends every file with one (or <|endoftext|>, absent too)")
    return tokenizer


# ------------------------------------------------------------------------------------------------------------ model
def _resolve_model(ns: Any, data: DataArgs, train: TrainArgs, evaluation: EvalArgs, initial_config: Any,
                   initial_shapes: Any, data_vocab: int | None, tokenizer_dir: Path | None,
                   data_class: Any, notes: list[str]) -> tuple[Any, int]:
    """``(litgpt Config of the initial model, sequence length)``."""
    model_config = _get(ns, "model_config")
    if hasattr(model_config, "as_dict"):
        model_config = model_config.as_dict()
    model_name = model_name_to_look_up(_get(ns, "model_name"), model_config, notes)
    seq_key = "train.max_seq_length" if train.max_seq_length is not None else "data.seq_len"
    seq_len = train.max_seq_length if train.max_seq_length is not None else data.seq_len
    if initial_config is not None:
        config = _initial_model_config(initial_config, initial_shapes, model_name, model_config)
        if data_vocab is not None and config.padded_vocab_size < data_vocab:
            raise ConfigError("tokenizer_dir", f"its vocabulary ({data_vocab}) is larger than the initial checkpoint's "
                                               f"padded_vocab_size={config.padded_vocab_size}")
    else:
        config = model_config_from(model_name, model_config, vocab_size=data_vocab, seq_len=seq_len or 512)
    if seq_len is None:
        seq_len = config.block_size if (model_name is not None or initial_config is not None
                                        or "block_size" in (model_config or {})) else 512
    if data_vocab is not None and config.padded_vocab_size < data_vocab:
        raise ConfigError("model_config.vocab_size",
                          f"the model's padded_vocab_size={config.padded_vocab_size} is smaller than the tokenizer's "
                          f"vocabulary ({data_vocab})")
    if seq_len > config.block_size:
        raise ConfigError(seq_key, f"{seq_len} is longer than the model's block_size={config.block_size}")
    given = tokenizer_dir is not None or _get(ns, "tokenizer_dir") is not None  # a dry run's missing one counts
    if evaluation.max_new_tokens is not None and not given and data_class is not None:
        raise ConfigError("eval.max_new_tokens", "the sample is decoded with the tokenizer of tokenizer_dir, and none "
                                                 "is given: give tokenizer_dir or remove eval.max_new_tokens")
    return config, seq_len


# ------------------------------------------------------------------------------------------------------------ length
def _resolve_length(ns: Any, train: TrainArgs, evaluation: EvalArgs, num_devices: int, num_nodes: int,
                    world: int, seq_len: int, notes: list[str]) -> tuple[int, int, int]:
    """``(gradient accumulation, tokens per optimizer step, optimizer steps)`` of the run."""
    _positive_int("train.micro_batch_size", train.micro_batch_size)
    _positive_int("train.global_batch_size", train.global_batch_size)
    per_step = train.micro_batch_size * world
    if train.global_batch_size % per_step:
        raise ConfigError("train.global_batch_size",
                          f"{train.global_batch_size} is not divisible by micro_batch_size * devices * num_nodes = "
                          f"{train.micro_batch_size} * {num_devices} * {num_nodes} = {per_step}")
    accumulate = train.global_batch_size // per_step
    tokens_per_step = train.global_batch_size * seq_len
    if train.max_steps is not None:
        _positive_int("train.max_steps", train.max_steps)
        steps = train.max_steps
        if train.max_tokens is not None:
            notes.append(f"train.max_steps={steps} wins over train.max_tokens={train.max_tokens}")
    elif train.max_tokens is not None:
        _positive_int("train.max_tokens", train.max_tokens)
        steps = train.max_tokens // tokens_per_step
        if steps < 1:
            raise ConfigError("train.max_tokens", f"{train.max_tokens} is less than one optimizer step "
                                                  f"({tokens_per_step} tokens = global_batch_size * seq_len)")
    else:
        raise ConfigError("train.max_steps", "give train.max_steps or train.max_tokens")
    if train.lr_warmup_steps is not None and train.lr_warmup_fraction is not None:
        raise ConfigError("train.lr_warmup_steps", "give lr_warmup_steps or lr_warmup_fraction, not both")
    if train.lr_warmup_steps is not None:
        _positive_int("train.lr_warmup_steps", train.lr_warmup_steps, minimum=0)
        if train.lr_warmup_steps > steps:
            raise ConfigError("train.lr_warmup_steps", f"{train.lr_warmup_steps} is longer than the run ({steps} "
                                                       "steps)")
    if train.lr_warmup_fraction is not None and not 0 <= train.lr_warmup_fraction <= 1:
        raise ConfigError("train.lr_warmup_fraction", f"must be in [0, 1], got {train.lr_warmup_fraction}")
    _check_lr_schedule(train)
    if train.max_norm is not None and train.max_norm < 0:
        raise ConfigError("train.max_norm", f"must be >= 0, got {train.max_norm}")
    _positive_int("train.log_interval", train.log_interval)
    _positive_int("train.save_interval", train.save_interval, allow_none=True)
    _positive_int("train.keep_last_checkpoints", train.keep_last_checkpoints, allow_none=True)
    _positive_int("num_threads", _get(ns, "num_threads"), allow_none=True)
    _positive_int("eval.interval", evaluation.interval, allow_none=True)
    _positive_int("eval.max_iters", evaluation.max_iters, allow_none=True)
    return accumulate, tokens_per_step, steps


def _check_lr_schedule(train: TrainArgs) -> None:
    """``train.lr_schedule``, ``train.lr_decay_fraction`` and ``train.lr_decay_shape`` (WSD)."""
    if train.lr_schedule not in SCHEDULES:
        raise ConfigError("train.lr_schedule", f"choose {' or '.join(SCHEDULES)}, got {train.lr_schedule!r}")
    fraction = train.lr_decay_fraction
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise ConfigError("train.lr_decay_fraction", f"must be in (0, 1] (the share of the run spent decaying), "
                                                     f"got {fraction!r}")
    shape = train.lr_decay_shape
    if shape is not None and not SCHEDULES[train.lr_schedule].stable_phase:
        raise ConfigError("train.lr_decay_shape", f"{shape!r} shapes the decay of train.lr_schedule wsd; under "
                                                  f"{train.lr_schedule!r} the decay is {train.lr_schedule} and the "
                                                  "key would have no effect: drop it, or set --train.lr_schedule wsd")
    if shape is None:
        train.lr_decay_shape = shape = "linear"  # wsd's default; unused by a schedule without a stable phase
    if shape not in DECAY_SHAPES:
        raise ConfigError("train.lr_decay_shape", f"choose one of {', '.join(DECAY_SHAPES)}, got {shape!r}")


# ------------------------------------------------------------------------------------------------------------ optimizer
def _resolve_optimizer(ns: Any, train: TrainArgs, strategy: str,
                       precision: str) -> tuple[str | dict, str, bool, float]:
    """``(normalized optimizer spec, its name, whether it uses Muon, its lr)``."""
    spec = normalize_optimizer(_get(ns, "optimizer", "AdamW"))
    optimizer_name, uses_muon, lr = _optimizer_info(spec)
    if train.min_lr is not None:
        if train.min_lr < 0:
            raise ConfigError("train.min_lr", f"must be >= 0, got {train.min_lr}")
        if train.min_lr > lr:
            raise ConfigError("train.min_lr", f"{train.min_lr} is larger than the optimizer's lr={lr}")
    entry = cli_backend(strategy)
    if uses_muon and entry is not None and not entry.whole_matrices:
        raise ConfigError("optimizer", f"Muon orthogonalizes whole 2-D matrices, and {_named(entry)} "
                                       "hands the optimizer flattened 1-D shards: use strategy "
                                       f"{_strategy_choices(lambda e: e.whole_matrices)} with Muon, or AdamW")
    if uses_muon and precision in ("16-mixed", "16"):
        raise ConfigError("precision", "16-mixed (gradient scaling) is not supported with Muon: use bf16-mixed, "
                                       "bf16-true or 32-true")
    return spec, optimizer_name, uses_muon, lr


# ------------------------------------------------------------------------------------------------------------ resume
def _resolve_resume(ns: Any, initial_dir: Path | None, config: Any, stages: list[GrowthStage], plans: list[Any],
                    train: TrainArgs, uses_muon: bool, notes: list[str]) -> tuple[Path, Any, Path | None]:
    """``(out_dir, resume setting, checkpoint to resume or None)``; the checkpoint is checked against the run (the
    model it must hold: ``config`` grown by the stages it applied, the stages' ``plans``' configs)."""
    out_dir = Path(str(_get(ns, "out_dir", "out/sparkling"))).expanduser()
    resume = _get(ns, "resume", False)
    resume_path = None
    if initial_dir is not None and resume not in (False, None, "false", "False", "auto"):
        raise ConfigError("resume", "give resume or initial_checkpoint_dir, not both (as litgpt): resume continues a "
                                    "run of this out_dir, initial_checkpoint_dir starts a new one from weights; "
                                    "resume: auto resumes when out_dir has a checkpoint, else starts from "
                                    "initial_checkpoint_dir")
    if resume in ("auto", True, "true", "True"):
        resume_path = _newest_to_resume(out_dir, notes)
        if resume_path is None and resume != "auto":
            raise ConfigError("resume", f"no checkpoint to resume from in {out_dir / 'checkpoints'}")
    elif resume not in (False, None, "false", "False"):
        resume_path = Path(str(resume)).expanduser()
        if not resume_path.exists():
            raise ConfigError("resume", f"{str(resume_path)!r} does not exist")
        if (resume_path / "lit_model.pth").is_file() or resume_path.name == "lit_model.pth":
            raise ConfigError("resume", f"{str(resume_path)!r} is a litgpt checkpoint (lit_model.pth), not a Lightning "
                                        "checkpoint of `sparkling pretrain` (out_dir/checkpoints/step-*.ckpt): start "
                                        "from its weights with initial_checkpoint_dir instead")
    if resume_path is not None and initial_dir is not None:
        notes.append(f"resume: auto found {resume_path}: resuming it (initial_checkpoint_dir is not read)")
    if resume_path is not None:
        notes += check_resume_checkpoint(resume_path, config, stages, tie_embeddings=bool(train.tie_embeddings),
                                         num_optimizers=2 if uses_muon else 1,
                                         configs=[config, *(gp.new_config for gp in plans)])
    return out_dir, resume, resume_path

