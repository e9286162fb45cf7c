"""What makes a ``litgpt pretrain`` configuration run unchanged under ``sparkling pretrain``: litgpt data modules given
by ``class_path``, ``initial_checkpoint_dir``, ``logger_name`` / ``log``, and the sample generated at each evaluation
(``eval.max_new_tokens``). The decision per litgpt key (accepted, mapped, refused) is in docs/ARCHITECTURE.md.

- :func:`litgpt_pretrain_keys`: every dotted key of the *installed* litgpt's ``litgpt.pretrain.setup`` (its signature
  and the dataclasses of its sections), so a key a new litgpt adds fails a test instead of being a silent gap.
- :func:`resolve_data_class` / :func:`check_data_init_args`: ``data.class_path`` and ``data.init_args``, checked
  against the class's signature with jsonargparse (as litgpt's CLI does), each error naming its key.
- :func:`build_litgpt_datamodule`: the instance, ``connect``-ed as litgpt does (tokenizer, micro-batch size, sequence
  length).
- :func:`read_initial_checkpoint` / :func:`load_initial_weights`: a litgpt checkpoint dir to start from.
- :func:`make_logger`: litgpt's ``logger_name`` choices, logging under ``out_dir/logs``.
- :class:`SampleGeneration`: greedy text from a validation prompt after each evaluation.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any, Optional

from lightning_sparkling.pretrain.config import ConfigError

__all__ = [
    "LITGPT_PRETRAIN_DATA",
    "LOGGERS",
    "SampleGeneration",
    "build_litgpt_datamodule",
    "check_data_init_args",
    "litgpt_pretrain_keys",
    "load_initial_weights",
    "make_logger",
    "read_initial_checkpoint",
    "resolve_data_class",
]

LITGPT_PRETRAIN_DATA = ("TextFiles", "LitData", "TinyStories", "OpenWebText", "TinyLlama", "MicroLlama")
"""litgpt's pretraining data modules (batches of token ids), importable by their short name."""

_TOKENIZING = ("TextFiles", "TinyStories", "OpenWebText")
"""litgpt data modules whose ``prepare_data`` tokenizes text with the tokenizer ``connect`` hands them."""

LOGGERS = ("tensorboard", "csv", "wandb", "mlflow", "litlogger")
"""litgpt's ``logger_name`` choices (``litgpt.types.LoggerChoice``)."""

_LOGGER_PACKAGES = {"wandb": "wandb", "mlflow": "mlflow", "litlogger": "litlogger"}
_LOG_KEYS = {"wandb": ("project", "run", "group"),
             "litlogger": ("teamspace", "metadata", "log_model", "save_logs", "checkpoint_name")}


# ------------------------------------------------------------------------------------------------------------ keys
def litgpt_pretrain_keys() -> set[str]:
    """Every configuration key of the installed ``litgpt pretrain``: the parameters of ``litgpt.pretrain.setup``, and
    ``section.field`` for each parameter whose default is a dataclass (``train``, ``eval``, ``log``).

    Example::

        >>> {"initial_checkpoint_dir", "train.max_time", "eval.max_new_tokens", "log.project"} <= litgpt_pretrain_keys()
        True
    """
    from litgpt.pretrain import setup

    keys: set[str] = set()
    for name, param in inspect.signature(setup).parameters.items():
        keys.add(name)
        if dataclasses.is_dataclass(param.default):
            keys.update(f"{name}.{f.name}" for f in dataclasses.fields(param.default) if f.init)
    return keys


# ------------------------------------------------------------------------------------------------------------ data
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
        raise ConfigError("data.class_path", f"{path!r} has no connect(tokenizer, batch_size, max_seq_length) (litgpt's "
                                             "DataModule interface), so the batch size and sequence length cannot "
                                             "be handed to it")
    return cls


def _init_args_parser(cls: type):
    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_class_arguments(cls, "data", fail_untyped=False)
    return parser


def check_data_init_args(cls: type, init_args: Optional[dict]) -> dict:
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
    parser = _init_args_parser(cls)
    module = parser.instantiate_classes(parser.parse_object({"data": dict(run.data.init_args or {})})).data
    tokenizer = None
    if run.tokenizer_dir is not None:
        from litgpt.tokenizer import Tokenizer

        tokenizer = Tokenizer(run.tokenizer_dir)
    module.connect(tokenizer=tokenizer, batch_size=run.micro_batch_size, max_seq_length=run.seq_len)
    if getattr(module, "tokenizer_dir", None) is None:
        try:
            module.tokenizer_dir = run.tokenizer_dir
        except AttributeError:  # a read-only property of a custom module
            pass
    return module


def needs_tokenizer(cls: type) -> bool:
    """Whether litgpt's data module ``cls`` tokenizes text in ``prepare_data`` (and so needs ``tokenizer_dir``)."""
    return cls.__module__.startswith("litgpt.data") and cls.__name__ in _TOKENIZING


# ------------------------------------------------------------------------------------------------------------ checkpoint
def extend_checkpoint_dir(path: Path) -> Path:
    """litgpt's ``extend_checkpoint_dir``: ``checkpoints/<path>`` when ``path`` does not exist but that does."""
    from litgpt.utils import extend_checkpoint_dir as litgpt_extend

    return Path(litgpt_extend(Path(path).expanduser()))


def read_initial_checkpoint(path: Path) -> tuple[Any, dict[str, tuple[int, ...]], Path]:
    """``(litgpt Config, parameter name -> shape, weights file)`` of a litgpt checkpoint dir (``model_config.yaml``
    and ``lit_model.pth``, memory-mapped: no tensor is read).

    Raises:
        ConfigError: (``initial_checkpoint_dir``) a missing or unreadable file.
    """
    import torch
    from litgpt import Config

    folder = extend_checkpoint_dir(path)
    if not folder.is_dir():
        raise ConfigError("initial_checkpoint_dir", f"{str(path)!r} is not a directory")
    weights, config_file = folder / "lit_model.pth", folder / "model_config.yaml"
    for file in (weights, config_file):
        if not file.is_file():
            raise ConfigError("initial_checkpoint_dir", f"{str(folder)!r} holds no {file.name} (a litgpt checkpoint "
                                                        "dir holds lit_model.pth and model_config.yaml, e.g. "
                                                        "out_dir/final/ of a sparkling or litgpt run)")
    try:
        config = Config.from_file(config_file)
    except Exception as err:  # noqa: BLE001 - yaml / Config errors
        raise ConfigError("initial_checkpoint_dir", f"cannot read {config_file}: {err}") from err
    try:
        state = torch.load(weights, map_location="cpu", mmap=True, weights_only=True)
    except Exception as err:  # noqa: BLE001 - torch raises anything on a corrupt file
        raise ConfigError("initial_checkpoint_dir", f"cannot read {weights}: {type(err).__name__}: {err}") from err
    if isinstance(state, dict) and "model" in state and isinstance(state["model"], dict):
        state = state["model"]  # litgpt pretrain's own step-*/lit_model.pth: {"model": ..., "optimizer": ...}
    shapes = {name: tuple(t.shape) for name, t in state.items() if hasattr(t, "shape")}
    return config, shapes, weights


def initial_state_dict(weights: Path) -> dict[str, Any]:
    """The model state dict of a ``lit_model.pth`` (plain, or litgpt pretrain's ``{"model": ...}``)."""
    import torch

    state = torch.load(weights, map_location="cpu", weights_only=True)
    if isinstance(state, dict) and "model" in state and isinstance(state["model"], dict):
        state = state["model"]
    return state


def load_initial_weights(model: Any, weights: Path) -> None:
    """Copy the weights of ``weights`` (a litgpt ``lit_model.pth``) into the plain ``litgpt.GPT`` ``model``
    (strict: every parameter, same shapes)."""
    model.load_state_dict(initial_state_dict(weights), strict=True)


# ------------------------------------------------------------------------------------------------------------ logger
def check_logger(logger_name: str, log: Any) -> list[str]:
    """Check ``logger_name`` and ``log.*``; return notes for the run.

    Raises:
        ConfigError: an unknown logger, one whose package is not installed, or a ``log.*`` value its logger does not
            use.
    """
    import importlib.util

    name = str(logger_name)
    if name not in LOGGERS:
        raise ConfigError("logger_name", f"expected one of {', '.join(LOGGERS)}, got {name!r}")
    package = _LOGGER_PACKAGES.get(name)
    if package is not None and importlib.util.find_spec(package) is None:
        raise ConfigError("logger_name", f"{name!r} needs the {package!r} package, which is not installed "
                                         f"(pip install {package}), or use tensorboard or csv")
    defaults = {f.name: f.default for f in dataclasses.fields(type(log))} if log is not None else {}
    for key, default in defaults.items():
        value = getattr(log, key)
        if value != default and key not in _LOG_KEYS.get(name, ()):
            users = [n for n, keys in _LOG_KEYS.items() if key in keys]
            raise ConfigError(f"log.{key}", f"is used by logger_name {users[0]!r}, and this run logs with {name!r}: "
                                            f"set logger_name: {users[0]} or remove log.{key}")
    notes = []
    if name != "tensorboard":
        notes.append(f"logger_name {name}: metrics (rms/..., growth/..., symmetry/...) go to {name}; the RMS "
                     "dashboard (TensorBoard's custom-scalars layout) and `sparkling plot` need logger_name tensorboard")
    return notes


def make_logger(run: Any):
    """The run's Lightning logger, under ``out_dir/logs`` (TensorBoard: events directly there, as before)."""
    from lightning.pytorch import loggers

    out_dir, name = run.out_dir, run.logger_name
    if name == "tensorboard":
        return loggers.TensorBoardLogger(save_dir=str(out_dir), name="logs", version="", default_hp_metric=False)
    if name == "csv":
        return loggers.CSVLogger(save_dir=str(out_dir), name="logs", version="",
                                 flush_logs_every_n_steps=run.train.log_interval)
    model = f"pretrain-{run.model_config.name}" if run.model_config.name else "pretrain"
    if name == "wandb":
        return loggers.WandbLogger(project=run.log.project or model, name=run.log.run, group=run.log.group,
                                   save_dir=str(out_dir / "logs"), resume="allow" if run.resume_path else None)
    if name == "mlflow":
        return loggers.MLFlowLogger(experiment_name=model, save_dir=str(out_dir / "logs"))
    from lightning.pytorch.loggers import LitLogger  # type: ignore[attr-defined]

    log = run.log
    return LitLogger(root_dir=str(out_dir / "logs"), name=model, teamspace=log.teamspace, metadata=log.metadata,
                     log_model=log.log_model, save_logs=log.save_logs, checkpoint_name=log.checkpoint_name)


# ------------------------------------------------------------------------------------------------------------ samples
def _sample_callback_class():
    import lightning.pytorch as pl

    class SampleGeneration(pl.Callback):
        """After each evaluation, greedily continue a validation prompt by ``max_new_tokens`` tokens (litgpt's
        ``eval.max_new_tokens`` / ``eval.evaluate_example``), print the text and log it (TensorBoard ``text`` tag
        ``sample``). The prompt is the first half (at most 32 tokens) of the chosen validation sequence: ``first``,
        ``random`` (seeded by the step: no global RNG is used, so resumed runs stay exact) or an index into the
        sequences of that evaluation. Greedy decoding runs on every rank (an FSDP-sharded forward needs them all)
        and gives the same text everywhere; rank zero prints it.

        Attributes:
            samples: ``(step, prompt text, generated text)`` of each evaluation.
        """

        def __init__(self, tokenizer_dir: Path, max_new_tokens: int, evaluate_example: str | int = "first") -> None:
            self.tokenizer_dir = Path(tokenizer_dir)
            self.max_new_tokens = int(max_new_tokens)
            self.evaluate_example = evaluate_example
            self.samples: list[tuple[int, str, str]] = []
            self._rows: list[Any] = []
            self._tokenizer = None

        def on_validation_epoch_start(self, trainer, pl_module) -> None:
            self._rows = []

        def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
            import torch

            if isinstance(batch, torch.Tensor) and batch.ndim == 2:
                self._rows.extend(batch.detach().to("cpu").unbind(0))

        def _pick(self, step: int):
            import torch

            rows = self._rows
            if not rows:
                return None
            choice = self.evaluate_example
            if choice == "first":
                return rows[0]
            if choice == "random":
                g = torch.Generator().manual_seed(step)
                return rows[int(torch.randint(len(rows), (1,), generator=g))]
            return rows[int(choice) % len(rows)]

        def on_validation_end(self, trainer, pl_module) -> None:
            import torch

            if trainer.sanity_checking:
                return
            row = self._pick(trainer.global_step)
            if row is None:
                return
            if self._tokenizer is None:
                from litgpt.tokenizer import Tokenizer

                self._tokenizer = Tokenizer(self.tokenizer_dir)
            model = pl_module.model
            block = int(model.config.block_size)
            ids = row[: max(1, min(32, row.numel() // 2))].long().to(pl_module.device)
            prompt_len = ids.numel()
            was_training = model.training
            model.eval()
            with torch.no_grad():
                for _ in range(self.max_new_tokens):
                    logits = model(ids[-block:].unsqueeze(0))
                    ids = torch.cat([ids, logits[0, -1].float().argmax().reshape(1)])
            model.train(was_training)
            ids = ids.to("cpu")
            prompt, text = self._tokenizer.decode(ids[:prompt_len]), self._tokenizer.decode(ids[prompt_len:])
            step = trainer.global_step
            self.samples.append((step, prompt, text))
            if trainer.is_global_zero:
                from lightning.pytorch.utilities.rank_zero import rank_zero_info

                rank_zero_info(f"[sparkling] sample at step {step}: {prompt!r} -> {text!r}")
                for logger in trainer.loggers:
                    experiment = getattr(logger, "experiment", None)
                    if hasattr(experiment, "add_text"):
                        experiment.add_text("sample", f"**{prompt}**{text}", global_step=step)

    return SampleGeneration


def __getattr__(name: str) -> Any:  # SampleGeneration is built lazily: importing Lightning is slow
    if name == "SampleGeneration":
        cls = _sample_callback_class()
        globals()["SampleGeneration"] = cls
        return cls
    raise AttributeError(name)
