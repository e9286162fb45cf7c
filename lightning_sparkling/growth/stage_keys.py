"""How a :class:`~lightning_sparkling.growth.stage.GrowthStage` keeps the keys it was given, whichever way it is
built (by keyword, :meth:`~lightning_sparkling.growth.stage.GrowthStage.from_keys`, jsonargparse from a YAML mapping,
``dataclasses.replace``, ``copy``, pickling, ``GrowthStage(**stage.to_dict())``):

- a key a recipe may fill (:data:`~lightning_sparkling.growth.recipes.RECIPE_KEYS`) defaults to
  :data:`~lightning_sparkling.growth.recipes.RECIPE_DEFAULT`; the stage fills it from its recipe (else the paper's
  value) and records it in ``_filled`` with the value it got (:func:`fill_recipe_keys`), a field that every copy
  passes back, so a key still at that value stays the recipe's;
- ``__init__``'s signature, which argparse-based parsers (jsonargparse, so LightningCLI) read, gives those keys the
  default ``argparse.SUPPRESS``: a parsed mapping passes only the keys it sets (:func:`set_signatures`);
- :class:`FrozenKeys`: the read-only mapping of ``extra`` (a registered axis' keys, checked when the stage is built).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
from argparse import SUPPRESS
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from lightning_sparkling.growth.recipes import PAPER_KEYS, RECIPE_DEFAULT, RECIPE_KEYS, recipe_keys

__all__ = ["FILLED", "FrozenKeys", "fill_recipe_keys", "paper_default", "set_signatures"]

FILLED = "_filled"
"""The name of the field of the recipe keys a stage left to its recipe (internal: ``dataclasses.replace`` and
``to_dict`` pass it back)."""


class FrozenKeys(Mapping[str, Any]):
    """A read-only mapping of stage keys (:attr:`GrowthStage.extra`): a frozen stage's keys cannot change in place,
    so every key it holds was checked when it was built. It compares equal to a mapping of the same items, and
    copies, pickles and ``dataclasses.asdict`` like a dict.

    Example::

        >>> keys = FrozenKeys({"rope_base": 40000})
        >>> keys["rope_base"], keys == {"rope_base": 40000}, keys
        (40000, True, {'rope_base': 40000})
        >>> keys["rope_base"] = -1
        Traceback (most recent call last):
        ...
        TypeError: 'FrozenKeys' object does not support item assignment
    """

    __slots__ = ("_keys",)
    _keys: dict[str, Any]

    def __init__(self, keys: Mapping[str, Any] | Iterable[tuple[str, Any]] = ()) -> None:
        object.__setattr__(self, "_keys", dict(keys))

    def __getitem__(self, key: str) -> Any:
        return self._keys[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return repr(self._keys)

    def __setattr__(self, name: str, value: Any) -> None:
        raise TypeError(f"{type(self).__name__} is read-only: build a new stage (dataclasses.replace) instead")

    def __reduce__(self) -> tuple[type, tuple[dict[str, Any]]]:
        return type(self), (self._keys,)


def fill_recipe_keys(stage: Any) -> None:
    """Give each recipe key ``stage`` (a :class:`~lightning_sparkling.growth.stage.GrowthStage` being built) left to
    its recipe the recipe's value (none for ``auto`` until it is resolved), else the paper's
    (:data:`~lightning_sparkling.growth.recipes.PAPER_KEYS`), and record them with those values in ``_filled``.

    A key is left to the recipe when it holds :data:`~lightning_sparkling.growth.recipes.RECIPE_DEFAULT` (not
    given), or the value the ``_filled`` it was built with says its recipe gave it (a copy of a stage: a key
    replaced by another value is the caller's).

    Raises:
        TypeError: for a ``_filled`` that is not a mapping of recipe keys.
    """
    carried = getattr(stage, FILLED)
    if not isinstance(carried, Mapping) or not set(carried) <= RECIPE_KEYS:
        raise TypeError(f"GrowthStage({FILLED}={carried!r}): internal, the recipe keys a copied stage left to its "
                        f"recipe ({', '.join(sorted(RECIPE_KEYS))}); leave it out")
    left = [f.name for f in dataclasses.fields(stage) if f.name in RECIPE_KEYS and _left(stage, f.name, carried)]
    for key in left:
        object.__setattr__(stage, key, PAPER_KEYS[key])
    object.__setattr__(stage, FILLED, FrozenKeys(dict.fromkeys(left)))  # given_keys: what the recipe may fill
    for key, value in recipe_keys(stage).items():  # a named recipe fills the keys the stage did not set
        object.__setattr__(stage, key, value)
    object.__setattr__(stage, FILLED, FrozenKeys({key: getattr(stage, key) for key in left}))


def _left(stage: Any, key: str, carried: Mapping[str, Any]) -> bool:
    value = getattr(stage, key)
    return value is RECIPE_DEFAULT or (key in carried and value == carried[key])


def set_signatures(cls: type) -> None:
    """``cls``'s signature (``inspect.signature``, ``help``) shows a recipe key's default as ``<recipe>`` and leaves
    ``_filled`` out; the one of its ``__init__``, which argparse-based parsers read (jsonargparse, so LightningCLI),
    gives a recipe key the default ``argparse.SUPPRESS``: a YAML mapping then passes only the keys it sets, and the
    recipe fills the others. A dataclass subclass gets its own ``__init__``: call this on it too."""
    init = inspect.signature(cls.__init__)  # type: ignore[misc]  # the class's own __init__, as intended
    params = [p for p in init.parameters.values() if p.name != FILLED]
    cls.__signature__ = _OwnSignature(cls, init.replace(parameters=params[1:]))  # type: ignore[attr-defined]
    cls.__init__.__signature__ = init.replace(  # type: ignore[misc]  # the class's own __init__, as intended
        parameters=[p.replace(default=SUPPRESS) if p.default is RECIPE_DEFAULT else p for p in params])


class _OwnSignature:
    """A class' ``__signature__`` that its subclasses do not inherit (``inspect`` then reads their own
    ``__init__``)."""

    def __init__(self, cls: type, signature: inspect.Signature) -> None:
        self.cls, self.signature = cls, signature

    def __get__(self, obj: Any, cls: type | None = None) -> inspect.Signature:
        if (cls or type(obj)) is not self.cls:
            raise AttributeError("__signature__")
        return self.signature


@functools.cache  # one copy per field: the CLI derives its stage keys again only when the fields change
def paper_default(f: dataclasses.Field) -> dataclasses.Field:
    """``f``; a recipe key's (default :data:`~lightning_sparkling.growth.recipes.RECIPE_DEFAULT`) with the paper's
    value as its default instead, as the CLI's stage keys show it."""
    if f.default is not RECIPE_DEFAULT:
        return f
    shown = copy.copy(f)
    shown.default = PAPER_KEYS[f.name]
    return shown
