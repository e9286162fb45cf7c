"""The growth layer's errors: one module, imported by every part of :mod:`lightning_sparkling.growth` and above.

``GrowthError`` (a model or stage that cannot be grown) is also importable from its old home,
:mod:`lightning_sparkling.growth.plan`, and from the package; ``StageError`` (a refused stage setting) and
``check_choice`` from :mod:`lightning_sparkling.growth.stage` and the package. Both take their arguments in one
order, the message first (as every Python exception) and the stage key it is about by keyword:
``GrowthError(message, key=...)``, ``StageError(message, key=..., stage=...)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["GrowthError", "StageError", "check_choice", "did_you_mean"]


def did_you_mean(key: str, known: Sequence[str]) -> str:
    """`` (did you mean 'n_embd'?)`` for a misspelt ``key`` close to one of ``known`` (``difflib``), else ``""``.

    Example::

        >>> did_you_mean("n_embdd", ["n_embd", "n_head"])
        " (did you mean 'n_embd'?)"
    """
    import difflib

    close = difflib.get_close_matches(key, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


class GrowthError(ValueError):
    """A model or stage that cannot be grown; raised before anything is modified.

    ``key`` is the :class:`~lightning_sparkling.growth.stage.GrowthStage` field the refusal is about (``"n_head"``,
    ``"depth_map"``, ...), or ``None`` when it is about the model, the optimizer or the stage as a whole (e.g. a
    ``model_name`` target whose fields differ from the model's): the CLI names ``growth.stages[k].<key>`` from it.

    Example::

        >>> from litgpt import Config
        >>> from lightning_sparkling.growth.plan import plan_growth
        >>> from lightning_sparkling.growth.stage import GrowthStage
        >>> config = Config(n_embd=64, n_head=4, n_layer=2, intermediate_size=128, vocab_size=100)
        >>> try:
        ...     plan_growth(config, GrowthStage(10, n_embd=32))
        ... except GrowthError as err:
        ...     err.key
        'n_embd'
    """

    def __init__(self, message: str, *, key: str | None = None) -> None:
        super().__init__(message)
        self.key = key

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across processes with its key
        return _growth_error, (str(self), self.key)


def _growth_error(message: str, key: str | None) -> GrowthError:
    return GrowthError(message, key=key)


class StageError(ValueError):
    """A refused :class:`~lightning_sparkling.growth.stage.GrowthStage` setting: ``key`` is the field the refusal
    is about (``None`` when it is about the stage as a whole, e.g. a stage that grows nothing) and ``stage`` the
    index of the stage in a list of stages (``None`` for one stage). The message is the refusal's own text; a
    ``ValueError``, so ``except ValueError`` and ``pytest.raises(ValueError)`` still catch it. Raised as
    ``StageError(message, key="rope_base")``: the arguments of :class:`GrowthError`, in its order.

    Example::

        >>> from lightning_sparkling.growth.stage import GrowthStage
        >>> try:
        ...     GrowthStage(10, n_embd=128, init="zero-zero")
        ... except StageError as err:
        ...     err.key
        'init'
    """

    def __init__(self, message: str, *, key: str | None = None, stage: int | None = None) -> None:
        super().__init__(message)
        self.key = key
        self.stage = stage

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across processes despite the extra arguments
        return _stage_error, (str(self), self.key, self.stage)


def check_choice(key: str, value: Any, choices: Sequence[str]) -> None:
    """Refuse a :class:`GrowthStage` setting ``key`` whose ``value`` is not one of ``choices``, listing them.

    Example::

        >>> check_choice("depth_order", "zigzag", ("stack", "interleave"))
        Traceback (most recent call last):
        ...
        lightning_sparkling.growth.errors.StageError: GrowthStage(depth_order='zigzag'): choose one of stack, interleave
    """
    if value not in choices:
        raise StageError(f"GrowthStage({key}={value!r}): choose one of {', '.join(choices)}", key=key)


def _stage_error(message: str, key: str | None, stage: int | None) -> StageError:
    return StageError(message, key=key, stage=stage)
