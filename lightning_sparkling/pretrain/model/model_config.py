"""The litgpt ``Config`` a run starts from: built from ``model_name`` / ``model_config`` (:func:`model_config_from`)
or taken from an ``initial_checkpoint_dir`` (:func:`_initial_model_config`, which must then fit its weights), with
litgpt's own rejections (bare ``assert`` statements included) turned into a :class:`ConfigError` naming the field
(:func:`_config_rejection`), and the parameter shapes a config builds (:func:`_expected_shapes`, on the meta device).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from lightning_sparkling.pretrain.errors import ConfigError

__all__ = ["model_config_from", "model_name_to_look_up"]


def model_name_to_look_up(model_name: str | None, model_config: dict | None, notes: list[str]) -> str | None:
    """The ``model_name`` a run looks up, as litgpt's ``pretrain.setup`` (``Config.from_name(model_name) if
    model_config is None else model_config``): a given ``model_config`` wins over a name that is not litgpt's (the
    ``stories15M`` of litgpt's ``config_hub/pretrain/tinystories.yaml``, whose ``model_config`` is the whole model),
    which is then not looked up (a note says so, with the litgpt name it is close to). A litgpt name with a
    ``model_config`` is looked up, the ``model_config`` keys overriding its fields (:func:`model_config_from`).

    Example::

        >>> notes = []
        >>> model_name_to_look_up("stories15M", {"n_layer": 6, "n_embd": 288}, notes)
        >>> notes[0].startswith("model_name 'stories15M' is not a litgpt config name: the model is model_config's")
        True
        >>> model_name_to_look_up("pythia-14m", {"n_layer": 2}, [])
        'pythia-14m'
    """
    from litgpt import Config
    from litgpt.config import name_to_config

    if model_name is None or not model_config:
        return model_name
    try:
        Config.from_name(model_name)
    except ValueError:
        import difflib

        close = difflib.get_close_matches(str(model_name), list(name_to_config), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        notes.append(f"model_name {model_name!r} is not a litgpt config name: the model is model_config's alone, as "
                     f"in litgpt pretrain (model_config wins over model_name{hint})")
        return None
    return model_name


def model_config_from(model_name: str | None, model_config: dict | None, *, vocab_size: int | None,
                      seq_len: int):
    """The litgpt ``Config`` a run starts from: ``Config.from_name(model_name, **model_config)`` or
    ``Config(**model_config)``; ``vocab_size`` (and the derived ``padded_vocab_size``) from the tokenizer unless
    given, ``block_size`` = ``seq_len`` unless given (or set by the named model)."""
    from litgpt import Config

    overrides = dict(model_config or {})
    known = {f.name for f in dataclasses.fields(Config)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"model_config.{unknown[0]}", f"not a litgpt Config field (unknown keys: {unknown})")
    if "vocab_size" not in overrides and vocab_size is not None:  # None: the named model's (or Config's) own
        overrides["vocab_size"] = vocab_size
        overrides.setdefault("padded_vocab_size", None)  # re-derived from vocab_size and padding_multiple
    if model_name is None and "block_size" not in overrides:
        overrides["block_size"] = seq_len
    if model_name is not None:
        try:
            Config.from_name(model_name)
        except ValueError as err:
            raise ConfigError("model_name", f"{err} (see `litgpt pretrain list`)") from err
    elif not model_config:
        raise ConfigError("model_config", "give model_name (a litgpt model name) or model_config (Config fields)")
    try:
        if model_name is not None:
            return Config.from_name(model_name, **overrides)
        return Config(**overrides)
    except (ValueError, TypeError, AssertionError, ZeroDivisionError) as err:
        key, reason = _config_rejection(err)
        raise ConfigError(key, f"litgpt Config rejected it: {reason}") from err


_CONFIG_HINTS = {  # failed litgpt check (the fields it names) -> (the key to blame, the message)
    ("n_embd", "n_head"): ("n_embd", "n_embd={n_embd} is not divisible by n_head={n_head}: give an n_embd that is a "
                                     "multiple of n_head, or set model_config.head_size"),
    ("n_head", "n_query_groups"): ("n_query_groups", "n_head={n_head} is not divisible by "
                                                     "n_query_groups={n_query_groups}: give an n_query_groups that "
                                                     "divides n_head"),
}


def _config_rejection(err: BaseException) -> tuple[str, str]:
    """``(key, reason)`` for an exception of ``litgpt.Config(...)``. litgpt checks many fields with bare ``assert``
    statements (an empty message): the failed check is then read from the traceback, with the values of the fields it
    names (``assert self.n_embd % self.n_head == 0`` -> ``model_config.n_embd``, ``n_embd=66 is not divisible by
    n_head=4 ...``)."""
    import traceback

    if str(err).strip():
        return "model_config", f"{type(err).__name__}: {err}"
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    line = traceback.extract_tb(err.__traceback__)[-1].line if err.__traceback__ is not None else ""
    owner = tb.tb_frame.f_locals.get("self") if tb is not None else None
    names = list(dict.fromkeys(re.findall(r"self\.(\w+)", line or "")))
    values = {n: getattr(owner, n, "?") for n in names}
    key = f"model_config.{names[0]}" if names else "model_config"
    hint = _CONFIG_HINTS.get(tuple(names))
    if hint is not None:
        return f"model_config.{hint[0]}", hint[1].format(**values)
    shown = ", ".join(f"{n}={v!r}" for n, v in values.items())
    return key, (f"its check `{line}` failed" + (f" ({shown})" if shown else "")
                 + ": fix those model_config fields (see litgpt's Config)")


def _initial_model_config(saved: Any, shapes: dict[str, tuple[int, ...]], model_name: str | None,
                          model_config: dict | None):
    """The starting ``Config`` of a run from ``initial_checkpoint_dir``: the checkpoint's own, or (litgpt's way)
    ``model_name`` / ``model_config`` (``model_config`` alone overrides fields of the checkpoint's config), which must
    then build exactly the checkpoint's parameters."""
    from litgpt import Config

    if model_name is None and not model_config:
        config = saved
    else:
        overrides = dict(model_config or {})
        known = {f.name for f in dataclasses.fields(Config)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(f"model_config.{unknown[0]}", f"not a litgpt Config field (unknown keys: {unknown})")
        try:
            if model_name is not None:
                config = Config.from_name(model_name, **overrides)
            else:
                config = Config(**{**dataclasses.asdict(saved), **overrides})
        except (ValueError, TypeError, AssertionError, ZeroDivisionError) as err:
            key, reason = _config_rejection(err)
            raise ConfigError(key, f"litgpt Config rejected it: {reason}") from err
    want = _expected_shapes(config)
    missing = sorted(set(want) - set(shapes))
    wrong = [f"{n}: checkpoint {shapes[n]}, config {s}" for n, s in want.items() if n in shapes and shapes[n] != s]
    extra = sorted(set(shapes) - set(want))
    if missing or wrong or extra:
        detail = "; ".join(([f"missing {', '.join(missing[:3])}"] if missing else []) + wrong[:3]
                           + ([f"unexpected {', '.join(extra[:3])}"] if extra else []))
        given = "model_name / model_config" if (model_name is not None or model_config) else "its model_config.yaml"
        raise ConfigError("initial_checkpoint_dir", f"its lit_model.pth does not fit the model of {given} ({detail}): "
                                                    "leave model_name and model_config out to use the checkpoint's "
                                                    "own config (on the command line, over a YAML that sets one: "
                                                    "--model_config null or --model_name null)")
    return config


def _expected_shapes(config: Any) -> dict[str, tuple[int, ...]]:
    """Parameter names and shapes of ``litgpt.GPT(config)``, built on the meta device (nothing allocated)."""
    import torch
    from litgpt import GPT

    with torch.device("meta"):
        model = GPT(config)
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}
