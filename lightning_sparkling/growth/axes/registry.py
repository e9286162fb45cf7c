"""The axis registry: :func:`register_axis` adds a growth axis (a plug-in), and the plan, the surgery, the
backends, the callbacks and the reports read the registered ones through :func:`registered_axes` and the helpers
here, never naming one. It imports no axis: each axis module registers itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from lightning_sparkling.growth.axes.base import BaseAxis, GrowthAxis  # noqa: F401 (BaseAxis: the doctest)

__all__ = ["active_axes", "axis_of_size", "describe_changes", "plan_axes", "register_axis",
           "registered_axes", "reserve_stage_keys", "size_details", "structural_sizes", "unregister_axis"]


_AXES: list[GrowthAxis] = []
_RESERVED: set[str] = set()
"""``GrowthStage``'s own field names (:func:`reserve_stage_keys`), which no axis' ``stage_keys`` may take."""


def register_axis(axis: GrowthAxis) -> GrowthAxis:
    """Add ``axis`` to the registry (after those registered before it: the built-in ones register themselves when
    :mod:`lightning_sparkling.growth.axes` is imported): the one line a new axis needs besides its module. Its
    :attr:`~lightning_sparkling.growth.axes.GrowthAxis.stage_keys` become stage keys at once: a
    :class:`~lightning_sparkling.growth.stage.GrowthStage` holds them in ``extra``, the CLI reads them flat.

    Raises:
        ValueError: for an axis whose name or sizes an axis already registered has, or whose stage keys
            ``GrowthStage`` already has (the registry is then left as it was).

    Example::

        >>> class Frozen(BaseAxis):
        ...     name = "frozen"
        >>> axis = register_axis(Frozen())
        >>> [a.name for a in registered_axes()][-1]
        'frozen'
        >>> unregister_axis(axis)
    """
    for known in registered_axes():
        if known.name == axis.name or set(known.sizes) & set(axis.sizes):
            raise ValueError(f"axis {axis.name!r} (sizes {axis.sizes}) clashes with the registered axis {known.name!r} "
                             f"(sizes {known.sizes}); give it its own name and sizes")
    taken = set(_RESERVED) | {key for known in registered_axes() for key in _keys(known)}
    for key in _keys(axis):
        if key in taken:
            raise ValueError(f"axis {axis.name!r}: stage key {key!r} is already a GrowthStage key; "
                             "give the axis a key of its own")
    _AXES.append(axis)
    return axis


def unregister_axis(axis: GrowthAxis) -> None:
    """Remove an axis :func:`register_axis` added (and its stage keys with it)."""
    _AXES.remove(axis)


def reserve_stage_keys(keys: Iterable[str]) -> None:
    """Tell the registry ``GrowthStage``'s own field names (called once, by :mod:`~lightning_sparkling.growth.stage`
    when it is imported: this module does not import it), so that :func:`register_axis` refuses an axis whose
    ``stage_keys`` would shadow one."""
    _RESERVED.update(keys)


def _keys(axis: GrowthAxis) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(axis.stage_keys)) if axis.stage_keys is not None else ()


def registered_axes() -> tuple[GrowthAxis, ...]:
    """Every axis, in the order plans apply them: the order they registered (the channel axes width and heads, then
    the structural depth and experts, then those a user's :func:`register_axis` added)."""
    return tuple(_AXES)


def active_axes(stage) -> tuple[GrowthAxis, ...]:
    """The axes ``stage`` grows.

    Example::

        >>> from lightning_sparkling.growth.stage import GrowthStage
        >>> [axis.name for axis in active_axes(GrowthStage(10, n_expert=8))]
        ['experts']
        >>> [axis.name for axis in active_axes(GrowthStage(10, n_embd=64, n_layer=8))]
        ['width', 'depth']
    """
    return tuple(axis for axis in registered_axes() if axis.active(stage))


def axis_of_size() -> dict[str, GrowthAxis]:
    """``{litgpt.Config size: the axis that changes it}``."""
    return {size: axis for axis in registered_axes() for size in axis.sizes}


def structural_sizes() -> set[str]:
    """The sizes of the axes that add or replace modules (``n_layer``, ``n_expert``, ...)."""
    return {size for axis in registered_axes() if axis.structural for size in axis.sizes}


def plan_axes(plan) -> tuple[GrowthAxis, ...]:
    """The axes a :class:`~lightning_sparkling.growth.plan.GrowthPlan` holds a change of."""
    return tuple(axis for axis in registered_axes() if axis.name in plan.changes)


def describe_changes(plan) -> dict[str, str]:
    """``{axis name: one line}`` for every axis of ``plan`` that describes itself in a line of its own
    (``sparkling plan``, the growth log)."""
    lines = {axis.name: axis.describe(plan) for axis in plan_axes(plan)}
    return {name: line for name, line in lines.items() if line is not None}


def size_details(plan) -> dict[str, str]:
    """``{size: detail}`` of every axis of ``plan`` (the growth log's ``old -> new`` lines)."""
    out: dict[str, str] = {}
    for axis in plan_axes(plan):
        out.update(axis.details(plan))
    return out
