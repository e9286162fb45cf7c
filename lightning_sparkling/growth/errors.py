"""The growth layer's errors: one module, imported by every part of :mod:`lightning_sparkling.growth` and above.

``GrowthError`` is also importable from its old home, :mod:`lightning_sparkling.growth.plan`, and from the package.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GrowthError"]


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
