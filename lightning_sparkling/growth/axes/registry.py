"""The axis registry: :func:`register_axis` adds a growth axis (a plug-in), and the plan, the surgery, the
backends, the callbacks and the reports read the registered ones through :func:`registered_axes` and the helpers
here, never naming one. It imports no axis: each axis module registers itself.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterable
from typing import TYPE_CHECKING

from lightning_sparkling.growth.axes.base import BaseAxis, GrowthAxis
from lightning_sparkling.growth.errors import GrowthError, StageError

if TYPE_CHECKING:
    import torch.nn as nn

__all__ = ["active_axes", "axis_key", "axis_of_size", "check_axis", "checked_model", "checked_stage",
           "describe_changes", "function_words", "growth_log_lines", "keeps_function", "plan_axes", "protocol_members",
           "register_axis", "registered_axes",
           "reserve_stage_keys", "size_details", "size_pairs", "structural_sizes", "unregister_axis"]


_AXES: list[GrowthAxis] = []
_RESERVED: set[str] = set()
"""``GrowthStage``'s own field names (:func:`reserve_stage_keys`), which no axis' ``stage_keys`` may take."""


def register_axis(axis: GrowthAxis) -> GrowthAxis:
    """Add ``axis`` to the registry (after those registered before it: the built-in ones register themselves when
    :mod:`lightning_sparkling.growth.axes` is imported): the one line a new axis needs besides its module. Its
    :attr:`~lightning_sparkling.growth.axes.GrowthAxis.stage_keys` become stage keys at once: a
    :class:`~lightning_sparkling.growth.stage.GrowthStage` holds them in ``extra``, the CLI reads them flat.

    The object is checked against the protocol first (:func:`check_axis`), so a missing member or a ``stage_keys``
    that is not a dataclass is refused here, naming the axis, the member and the fix, not at the first growth.

    Raises:
        TypeError: for an object that is not a whole :class:`~lightning_sparkling.growth.axes.GrowthAxis`
            (:func:`check_axis`).
        ValueError: for an axis whose name or sizes an axis already registered has, or whose stage keys
            ``GrowthStage`` already has (the registry is then left as it was).

    Example::

        >>> import dataclasses
        >>> @dataclasses.dataclass(frozen=True)
        ... class RopeKeys:
        ...     rope_base: int | None = None
        >>> class Rope(BaseAxis):
        ...     name, sizes, stage_keys = "rope", ("rope_base",), RopeKeys
        ...     def config_values(self, config, stage):
        ...         return {"rope_base": stage.get("rope_base")}
        >>> axis = register_axis(Rope())
        >>> [a.name for a in registered_axes()][-1]
        'rope'
        >>> unregister_axis(axis)
        >>> class Keyless(Rope):
        ...     name, stage_keys = "keyless", dict
        >>> register_axis(Keyless())
        Traceback (most recent call last):
        ...
        TypeError: register_axis(Keyless()): axis 'keyless': stage_keys=dict is not a dataclass; give the class ...
    """
    check_axis(axis)
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


_FIX = ("subclass lightning_sparkling.growth.BaseAxis (it gives every member a default) and override what the axis "
        "does")


def protocol_members() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(attributes, methods)`` of :class:`~lightning_sparkling.growth.axes.GrowthAxis`: what every axis must have.

    Example::

        >>> attributes, methods = protocol_members()
        >>> attributes
        ('name', 'sizes', 'structural', 'symmetry_key', 'stage_keys')
        >>> "report" in methods and "config_values" in methods
        True
    """
    attributes = tuple(GrowthAxis.__annotations__)
    methods = tuple(n for n, v in vars(GrowthAxis).items() if callable(v) and not n.startswith("_")
                    and n not in attributes)
    return attributes, methods


def check_axis(axis: object) -> None:
    """Refuse an object :func:`register_axis` cannot use, with one error naming the axis, what is wrong and the fix:
    a missing (or not callable) member of the protocol, a ``name`` that is not a non-empty string, ``sizes`` that
    are not a tuple of ``litgpt.Config`` fields, a ``stage_keys`` that is not a dataclass (or ``None``), and an axis
    that keeps :class:`BaseAxis`' ``active`` (active when the stage sets one of its sizes) while none of its sizes is
    a stage key (it could never be active).

    Raises:
        TypeError: naming the axis, the member and the fix.
    """
    label = f"register_axis({type(axis).__name__}())"
    name = getattr(axis, "name", None)
    who = f"axis {name!r}" if isinstance(name, str) and name else f"the axis {type(axis).__name__}"
    attributes, methods = protocol_members()
    missing = [m for m in attributes if not hasattr(axis, m)] + [m for m in methods if not hasattr(axis, m)]
    if missing:
        raise TypeError(f"{label}: {who} lacks {', '.join(missing)} of the GrowthAxis protocol; {_FIX}")
    not_callable = [m for m in methods if not callable(getattr(axis, m))]
    if not_callable:
        raise TypeError(f"{label}: {who}: {', '.join(not_callable)} must be method(s) of the GrowthAxis protocol, got "
                        f"{', '.join(type(getattr(axis, m)).__name__ for m in not_callable)}; {_FIX}")
    if not (isinstance(name, str) and name.strip()):
        raise TypeError(f"{label}: name={name!r}: give the axis a name of its own (a non-empty string, e.g. "
                        "name = \"rope\"): the growth log, the plan and the measured map name it")
    sizes = axis.sizes
    if not isinstance(sizes, tuple) or not all(isinstance(s, str) for s in sizes):
        raise TypeError(f"{label}: {who}: sizes={sizes!r} must be a tuple of litgpt.Config field names, e.g. "
                        "sizes = (\"rope_base\",) (with the comma: (\"rope_base\") is a string)")
    fields = _config_fields()
    unknown = [s for s in sizes if fields and s not in fields]
    if unknown:
        raise TypeError(f"{label}: {who}: sizes {unknown} are not fields of litgpt.Config; an axis' sizes are the "
                        "config fields its growth changes (e.g. rope_base, n_embd), whose old -> new the growth log "
                        "names")
    keys = axis.stage_keys
    if keys is not None and not (isinstance(keys, type) and dataclasses.is_dataclass(keys)):
        shown = keys.__name__ if isinstance(keys, type) else repr(keys)
        raise TypeError(f"{label}: {who}: stage_keys={shown} is not a dataclass; give the class of the axis' own stage "
                        "keys decorated with @dataclasses.dataclass(frozen=True) (its fields are the keys and their "
                        "defaults), or stage_keys = None")
    if type(axis).active is BaseAxis.active and sizes and _RESERVED:  # _RESERVED: once GrowthStage is defined
        own = set(_RESERVED) | set(_keys(axis))
        if not own & set(sizes):
            raise TypeError(f"{label}: {who} keeps BaseAxis.active (active when the stage sets one of its sizes), but "
                            f"none of its sizes {sizes} is a stage key, so it would never grow: add a field "
                            f"{sizes[0]!r} to its stage_keys dataclass, or override active(stage)")


def _config_fields() -> set[str]:
    """The fields of ``litgpt.Config``; empty while the package itself is imported (the built-in axes, registered
    then, are not checked against it: importing litgpt imports Lightning, which ``import lightning_sparkling`` does
    not). A user's axis registers once ``GrowthStage`` exists (:func:`reserve_stage_keys`), and is checked."""
    if not _RESERVED:
        return set()
    from litgpt import Config

    return {f.name for f in dataclasses.fields(Config)}


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
    """The axes a :class:`~lightning_sparkling.growth.plan.GrowthPlan` grows (:attr:`GrowthPlan.active_axes`: those active
    in its stage), whether or not they recorded a change in ``plan.changes``: every hook of an active axis runs."""
    return tuple(axis for axis in registered_axes() if axis.name in plan.active_axes)


def axis_key(axis: GrowthAxis, stage) -> str | None:
    """The stage key to name for a refusal of ``axis`` about ``stage``: the first of its own stage keys
    (``stage_keys``) the stage sets, else the first of its sizes the stage sets, else ``None`` (the stage as a
    whole)."""
    for key in (*_keys(axis), *axis.sizes):
        try:
            value = stage.get(key)
        except AttributeError:
            continue
        if value is not None:
            return key
    return None


def checked_stage(axis: GrowthAxis, stage) -> None:
    """``axis.check_stage(stage)``, a plain ``ValueError`` or ``TypeError`` it raises (what a user's axis may raise)
    re-raised as a :class:`~lightning_sparkling.growth.errors.StageError` keyed by the axis' key
    (:func:`axis_key`), so the CLI names ``growth.stages[k].<key>`` in one ``error:`` line.

    Raises:
        StageError: the axis' refusal, its key kept (or named).
    """
    try:
        axis.check_stage(stage)
    except StageError:
        raise
    except (ValueError, TypeError) as err:
        key = getattr(err, "key", None) or axis_key(axis, stage)
        raise StageError(f"{err} ({type(err).__name__} from the {axis.name!r} axis' check_stage)", key=key) from err


def checked_model(axis: GrowthAxis, config, stage) -> None:
    """``axis.check_model(config, stage)``, a plain ``ValueError`` or ``TypeError`` it raises re-raised as a
    :class:`~lightning_sparkling.growth.errors.GrowthError` keyed by the axis' key (:func:`axis_key`).

    Raises:
        GrowthError: the axis' refusal, its key kept (or named).
    """
    try:
        axis.check_model(config, stage)
    except GrowthError:
        raise
    except (ValueError, TypeError) as err:
        key = getattr(err, "key", None) or axis_key(axis, stage)
        raise GrowthError(f"{err} ({type(err).__name__} from the {axis.name!r} axis' check_model)", key=key) from err


def describe_changes(plan, model: nn.Module | None = None) -> dict[str, str]:
    """``{axis name: one line}`` for every axis of ``plan`` that describes itself in a line of its own
    (``sparkling plan``, the growth log). ``model`` (the grown model, in the growth log) goes to the axes whose
    ``describe`` takes it (the experts': a grouped router's score corrections decide whether the function is
    kept)."""
    lines = {axis.name: _describe(axis, plan, model) for axis in plan_axes(plan)}
    return {name: line for name, line in lines.items() if line is not None}


def _describe(axis, plan, model: nn.Module | None) -> str | None:
    """``axis.describe(plan, model=model)`` where the axis' ``describe`` takes a model, else ``describe(plan)``."""
    if model is not None and "model" in inspect.signature(axis.describe).parameters:
        return axis.describe(plan, model=model)
    return axis.describe(plan)


def keeps_function(plan, model: nn.Module | None = None) -> bool | None:
    """Whether the growth ``plan`` keeps the model's function: every axis of the stage that makes a claim
    (:meth:`BaseAxis.keeps_function`, ``model`` the grown model where known) says it is kept; ``False`` if one says
    it changes; ``None`` when none claims, or one cannot tell without ``model``. The one source of the growth log's and
    ``sparkling plan``'s "function kept" / "function changes"."""
    claims = [claim(axis, plan, model) for axis in plan_axes(plan)]
    if False in claims:
        return False
    return None if None in claims or not claims else True


def claim(axis, plan, model: nn.Module | None = None) -> bool | None:
    """``axis.keeps_function(plan, model)`` (``None`` for an axis without one: a user's axis written to the bare
    protocol)."""
    method = getattr(axis, "keeps_function", None)
    return None if method is None else method(plan, model)


def function_words(kept: bool | None) -> str | None:
    """The growth log's words for :func:`keeps_function`'s answer."""
    return {True: "function kept", False: "function changes"}.get(kept)


def size_pairs(old_config, new_config) -> dict[str, tuple]:
    """``{size: (old, new)}`` of every registered axis' size (a user's axis' too) that differs between two litgpt
    configs (``None`` where a config lacks it): ``GrowthCallback.summaries[k]["sizes"]``."""
    return {size: (getattr(old_config, size, None), getattr(new_config, size, None)) for size in axis_of_size()
            if getattr(old_config, size, None) != getattr(new_config, size, None)}


def growth_log_lines(plan, sizes: dict[str, tuple], model: nn.Module | None = None) -> list[str]:
    """The growth log's lines of ``plan``'s axes: each size of ``sizes`` (:func:`size_pairs`) as ``old -> new`` and
    its axis' detail (:meth:`GrowthAxis.details`), then each axis' line of its own (:meth:`GrowthAxis.describe`).
    A size whose axis has a line of its own and no detail (the experts'), or that the model did not have
    (``moe_intermediate_size`` at dense -> MoE), is left to that line. Last, whether the growth keeps the function
    (:func:`keeps_function`), where the axes claim it. ``model``: the grown model (:func:`describe_changes`)."""
    details, own = size_details(plan), describe_changes(plan, model)
    lines = [f"  {size:<22} {a:>8} -> {b:<8} {details.get(size, '')}".rstrip() for size, (a, b) in sizes.items()
             if size in details or (axis_of_size()[size].name not in own and a is not None)]
    words = function_words(keeps_function(plan, model))
    return lines + [f"  {name:<22} {line}" for name, line in own.items()] + ([f"  {'logits':<22} {words}"] if words
                                                                               else [])


def size_details(plan) -> dict[str, str]:
    """``{size: detail}`` of every axis of ``plan`` (the growth log's ``old -> new`` lines)."""
    out: dict[str, str] = {}
    for axis in plan_axes(plan):
        out.update(axis.details(plan))
    return out
