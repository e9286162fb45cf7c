"""What makes a ``litgpt pretrain`` configuration run unchanged under ``sparkling pretrain``: litgpt data modules given
by ``class_path`` or by litgpt's short form (``data: TinyStories``), ``initial_checkpoint_dir``, ``logger_name`` /
``log``, and the sample generated at each evaluation (``eval.max_new_tokens``). The decision per litgpt key (accepted,
mapped, refused) is in docs/ARCHITECTURE.md.

- :func:`litgpt_pretrain_keys`: every dotted key of the *installed* litgpt's ``litgpt.pretrain.setup`` (its signature
  and the dataclasses of its sections), so a key a new litgpt adds fails a test instead of being a silent gap.
- :func:`expand_data_short_form`: litgpt's ``data: TinyStories`` as its parser reads it, ``{class_path:
  litgpt.data.TinyStories}``; litgpt data modules (``data.class_path``) are read in
  :mod:`~lightning_sparkling.pretrain.data.litgpt_data`.
- :func:`read_initial_checkpoint` / :func:`load_initial_weights`: a litgpt checkpoint dir to start from.
- :func:`make_logger`: litgpt's ``logger_name`` choices, logging under ``out_dir/logs``.
- the sample generated after each evaluation is
  :class:`~lightning_sparkling.pretrain.training.run_callbacks.SampleGeneration` (it imports Lightning).
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import Any

from lightning_sparkling.pretrain.errors import ConfigError

__all__ = ["LOGGERS", "expand_data_short_form", "litgpt_data_modules", "litgpt_pretrain_keys", "load_initial_weights",
           "make_logger", "read_initial_checkpoint"]

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
_CLASS_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
"""A class name (``TinyStories``) or dotted class path (``litgpt.data.TinyStories``, ``my_data.MyModule``)."""


def litgpt_data_modules() -> dict[str, str]:
    """litgpt's data modules by the short name its parser accepts for ``data:`` (``TinyStories`` ->
    ``litgpt.data.TinyStories``): every subclass of ``litgpt.data.DataModule`` that ``litgpt.data`` exports (its
    instruction-tuning modules too, which the pretraining run then refuses by name).

    Example::

        >>> litgpt_data_modules()["TinyStories"]
        'litgpt.data.TinyStories'
    """
    import litgpt.data
    from litgpt.data import DataModule

    names = {}
    for name in litgpt.data.__all__:
        obj = getattr(litgpt.data, name, None)
        if isinstance(obj, type) and issubclass(obj, DataModule) and obj is not DataModule:
            names[name] = f"litgpt.data.{name}"
    return names


def expand_data_short_form(value: Any) -> Any:
    """litgpt's ``data:`` value given as a class name or path (``data: TinyStories``, ``data: my_data.MyModule``) as
    litgpt's parser (jsonargparse) reads it: ``{"class_path": "litgpt.data.TinyStories"}``; a short name that is not
    litgpt's stays as written (``resolve_data_class`` refuses it by name). Any other value is returned unchanged (a
    mapping, or a path to a YAML file of ``data.*`` keys).

    Example::

        >>> expand_data_short_form("TinyStories")
        {'class_path': 'litgpt.data.TinyStories'}
        >>> expand_data_short_form({"class_path": "TextFiles"})
        {'class_path': 'TextFiles'}
    """
    if not isinstance(value, str) or _CLASS_NAME.fullmatch(value) is None or Path(value).is_file():
        return value
    return {"class_path": litgpt_data_modules().get(value, value)}


def expand_litgpt_forms(config: Any) -> Any:
    """A loaded configuration file (or ``--config`` string) with litgpt's short forms written as this package's
    schema reads them (:func:`expand_data_short_form` for ``data``); anything that is not a mapping with those keys is
    returned unchanged."""
    if isinstance(config, dict) and "data" in config:
        return {**config, "data": expand_data_short_form(config["data"])}
    return config


# ----------------------------------------------------------------------------------------------------------- checkpoint
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
    except Exception as err:
        raise ConfigError("initial_checkpoint_dir", f"cannot read {config_file}: {err}") from err
    try:
        state = torch.load(weights, map_location="cpu", mmap=True, weights_only=True)
    except Exception as err:
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
        notes.append(f"logger_name {name}: metrics (rms/..., growth/..., symmetry/...) go to {name}; the RMS dashboard "
                     "(TensorBoard's custom-scalars layout) and `sparkling plot` need logger_name tensorboard")
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
    from lightning.pytorch.loggers import LitLogger

    log = run.log
    return LitLogger(root_dir=str(out_dir / "logs"), name=model, teamspace=log.teamspace, metadata=log.metadata,
                     log_model=log.log_model, save_logs=log.save_logs, checkpoint_name=log.checkpoint_name)

