"""The errors of the ``sparkling`` configuration: :class:`ConfigError` (an impossible or unsupported value, named by
its dotted key), the integer check most keys share (:func:`_positive_int`), and jsonargparse's parser errors as one
line that starts with the key (:func:`_one_line_error`).

Every other module of :mod:`lightning_sparkling.pretrain` that refuses a value imports its error from here; this
module imports none of them.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["ConfigError", "MissingInputError", "first_error_line"]


class ConfigError(ValueError):
    """An impossible or unsupported configuration value; ``key`` is its dotted path (``train.global_batch_size``)."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"{key}: {message}")


class MissingInputError(ConfigError):
    """A file or folder the run reads (data, tokenizer) that is not on disk: ``sparkling pretrain`` refuses it before
    any step; ``sparkling plan``, a dry run, notes that ``pretrain`` will need it (:attr:`path`)."""

    def __init__(self, key: str, path: Any, message: str) -> None:
        self.path = str(path)
        super().__init__(key, message)


def _positive_int(key: str, value: Any, *, allow_none: bool = False, minimum: int = 1) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(key, f"must be an integer >= {minimum}, got {value!r}")


def _one_line_error(message: str) -> str:
    """A parser error as one line that starts with the key: jsonargparse's ``Parser key "train.max_steps": Does not
    validate against any of the Union subtypes ... Given value: abc`` becomes ``train.max_steps: 'abc' is not a
    valid value: expected null or int``.

    Example::

        >>> _one_line_error('Parser key "config":\\n  File does not exist: x.yaml')
        'config: File does not exist: x.yaml'
    """
    message = " ".join(message.split())
    match = re.match(r'Parser key "([^"]+)":\s*(.*)', message)
    if match is None:
        return message
    key, rest = match.groups()
    value = re.search(r"(?:Given|Got) value: (.*)$", rest)
    types = re.findall(r"<class '([\w.]+)'>|Literal\[([^\]]*)\]", rest.split("Errors:")[0])
    if value is not None and types:
        names = [name for cls, literal in types for name in
                 ([{"NoneType": "null"}.get(cls, cls.rsplit(".", 1)[-1])] if cls else
                  [v.strip().strip("'\"") for v in literal.split(",")])]  # Literal['auto']: its values
        names = list(dict.fromkeys(names))
        rest = f"{value.group(1).strip()!r} is not a valid value: expected {' or '.join(names)}"
    return f"{key}: {rest}"


_ERROR_LINE = re.compile(r"^(error: |FAILED |ERROR |sparkling \w+ failed|"
                         r"(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Interrupt)\b)")


def first_error_line(text: str) -> str | None:
    """The line of a run's output that says what went wrong, for a status table: the CLI's ``error:`` line, a
    Python exception's line (``RuntimeError: ...``, the cause rather than a ``CalledProcessError`` that only says a
    child failed), ``sparkling pretrain failed (...)``, or pytest's ``FAILED`` / ``ERROR`` line; ``None`` if the
    output has none.

    Args:
        text: the whole output (stdout and stderr) of the run.

    Example::

        >>> log = "Traceback (most recent call last):\\n  ...\\nRuntimeError: The current optimizer, AdamW, ..."
        >>> first_error_line(log)
        'RuntimeError: The current optimizer, AdamW, ...'
        >>> first_error_line("subprocess.CalledProcessError: ... exit status 1\\nerror: train.max_norm: ...")
        'error: train.max_norm: ...'
        >>> first_error_line("all good") is None
        True
    """
    found = [line.strip() for line in text.splitlines() if _ERROR_LINE.match(line.strip())]
    causes = [line for line in found if "CalledProcessError" not in line]
    lines = causes or found
    return lines[0] if lines else None
