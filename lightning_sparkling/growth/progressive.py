"""A multi-stage progressive schedule as one mapping (``growth.progressive`` of ``sparkling pretrain``): the sizes
after each growth as lists, one timing list, and stage keys shared by every growth, expanded into ordinary
:class:`~lightning_sparkling.growth.stage.GrowthStage` keys (one mapping per growth), so every backend, resume,
``sparkling plan`` and the dashboards see plain stages.

Every size list starts with the model's size and then gives the size after each growth, so it holds one entry more
than the timing list; a growth sets the sizes that change at it (a size that stays the same is left out of that
stage). Any other stage key applies to every growth, or, as a list of one value per growth, to each in turn::

    n_layer:     [1, 2, 4, 8]        # 1 -> 2 -> 4 -> 8 blocks (zero/one-layer progressive training)
    at_fraction: [0.4, 0.6, 0.8]     # ... after 40%, 60% and 80% of the run
    depth_init: copy-zero            # every growth's

and width x depth, depth first and width late::

    at_fraction:       [0.25, 0.5, 0.75]
    n_layer:           [2, 4, 8, 8]
    n_embd:            [128, 128, 128, 256]
    intermediate_size: [512, 512, 512, 1024]

Refusals are :class:`ProgressiveError` naming the key (and index) they are about, before anything is built.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["PER_RUN_KEYS", "TIMING_KEYS", "ProgressiveError", "expand_progressive", "progressive_key",
           "progressive_sizes", "progressive_stages"]

TIMING_KEYS: tuple[str, ...] = ("at_fraction", "at_step", "at_tokens")
"""The timing lists a progressive schedule takes (exactly one): the run's share, the optimizer step, the tokens."""
PER_RUN_KEYS: tuple[str, ...] = ("depth_map", "model_name", "model_config")
"""Stage keys that name one growth's target and cannot be shared by every growth of a schedule."""


class ProgressiveError(ValueError):
    """A refused progressive schedule; ``key`` is the key it is about, with an index where one entry is meant
    (``n_layer[2]``, ``at_fraction[0]``), or ``None`` for the schedule as a whole."""

    def __init__(self, key: str | None, message: str) -> None:
        self.key = key
        super().__init__(f"{key}: {message}" if key else message)


def _size_keys() -> tuple[str, ...]:
    from lightning_sparkling.growth.axes import registered_axes

    return tuple(size for axis in registered_axes() for size in axis.sizes)


def progressive_sizes(block: Mapping[str, Any]) -> dict[str, list[int]]:
    """The size lists of a progressive schedule, ``{size key: [the model's, after growth 0, ...]}``, in the order the
    block gives them.

    Example::

        >>> progressive_sizes({"n_layer": [1, 2, 4], "at_fraction": [0.5, 0.8], "depth_init": "copy"})
        {'n_layer': [1, 2, 4]}
    """
    sizes = _size_keys()
    return {key: list(value) for key, value in block.items() if key in sizes}


def _timing(block: Mapping[str, Any]) -> tuple[str, list[Any]]:
    given = [key for key in TIMING_KEYS if block.get(key) is not None]
    if len(given) != 1:
        raise ProgressiveError(given[1] if len(given) > 1 else "at_fraction",
                               "give exactly one timing list, at_fraction, at_step or at_tokens (one entry per growth, "
                               "e.g. at_fraction: [0.4, 0.6, 0.8])" + (f"; got {', '.join(given)}" if given else ""))
    key = given[0]
    value = block[key]
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise ProgressiveError(key, f"must be a non-empty list, one entry per growth (e.g. [0.4, 0.6, 0.8]), "
                                    f"got {value!r}")
    value = list(value)
    for i, v in enumerate(value):
        if key == "at_fraction":
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1 or not math.isfinite(v):
                raise ProgressiveError(f"{key}[{i}]", f"must be a share of the run in (0, 1), got {v!r}")
        elif isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ProgressiveError(f"{key}[{i}]", f"must be an integer >= 0, got {v!r}")
        if i and not v > value[i - 1]:
            raise ProgressiveError(f"{key}[{i}]", f"{v} is not after {value[i - 1]} ({key}[{i - 1}]): the growths "
                                                  f"must come in increasing order, e.g. [0.4, 0.6, 0.8]")
    return key, value


def expand_progressive(block: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The stages of a progressive schedule (see the module docstring): one mapping of stage keys per growth, with
    the entry of the timing list, the sizes that change at that growth, and every other key of ``block`` (a list of
    one value per growth gives each its own).

    Args:
        block: the schedule: one timing list (``at_fraction``, ``at_step`` or ``at_tokens``), one or more size lists
            (the registered axes' size keys, e.g. ``n_layer``, ``n_embd``; each the model's size, then the size
            after each growth), and other :class:`~lightning_sparkling.growth.stage.GrowthStage` keys.

    Returns:
        the stages' keys, as ``growth.stages`` entries take them.

    Raises:
        ProgressiveError: naming the key (and index), for a block that is not a mapping, none or several timing
            lists, timing entries not increasing (``at_fraction`` outside ``(0, 1)``), no size list, a size list
            whose length is not the timing list's plus one, a size that is not a positive integer or shrinks, a
            growth that changes no size, a per-growth list of the wrong length, or a key of one target
            (``depth_map``, ``model_name``, ``model_config``).

    Example::

        >>> expand_progressive({"n_layer": [1, 2, 4], "at_fraction": [0.5, 0.8], "depth_init": "copy-zero"})
        [{'at_fraction': 0.5, 'n_layer': 2, 'depth_init': 'copy-zero'}, {'at_fraction': 0.8, 'n_layer': 4, \
'depth_init': 'copy-zero'}]
        >>> expand_progressive({"at_step": [10, 20], "n_layer": [2, 4, 4], "n_embd": [64, 64, 128]})
        [{'at_step': 10, 'n_layer': 4}, {'at_step': 20, 'n_embd': 128}]
    """
    if not isinstance(block, Mapping):
        raise ProgressiveError(None, f"expected a mapping of stage keys (e.g. {{n_layer: [1, 2, 4, 8], at_fraction: "
                                     f"[0.4, 0.6, 0.8]}}), got {block!r}")
    timing_key, timing = _timing(block)
    n = len(timing)
    given = [key for key in _size_keys() if key in block]
    if not given:
        raise ProgressiveError(None, f"no size list: give one or more of {', '.join(_size_keys())} as the model's "
                                     f"size followed by the size after each growth (e.g. n_layer: [1, 2, 4, 8])")
    for key in given:
        raw = block[key]
        if isinstance(raw, (str, bytes)) or not isinstance(raw, Sequence):
            raise ProgressiveError(key, f"must be a list, the model's {key} then the {key} after each growth "
                                        f"({n + 1} entries for {n} growths), got {raw!r}")
    sizes = progressive_sizes(block)
    for key, values in sizes.items():
        if len(values) != n + 1:
            raise ProgressiveError(key, f"has {len(values)} entries but {timing_key} has {n}: a size list holds "
                                        f"the model's {key} first, then the {key} after each growth, so {n + 1} "
                                        f"entries")
        for i, v in enumerate(values):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise ProgressiveError(f"{key}[{i}]", f"must be a positive integer, got {v!r}")
            if i and v < values[i - 1]:
                raise ProgressiveError(f"{key}[{i}]", f"{v} is smaller than {values[i - 1]} ({key}[{i - 1}]): "
                                                      "sizes must not shrink; a growth only makes sizes larger")
    for key in PER_RUN_KEYS:
        if block.get(key) is not None:
            raise ProgressiveError(key, "names one growth's target and cannot be shared by every growth of a "
                                        "progressive schedule: give the sizes as lists, or write growth.stages")
    shared = {key: value for key, value in block.items() if key not in sizes and key != timing_key}
    for key, value in shared.items():
        if isinstance(value, list) and len(value) != n:
            raise ProgressiveError(key, f"has {len(value)} entries but {timing_key} has {n}: a stage key given as "
                                        f"a list holds one value per growth (or give one value for every growth)")
    stages = []
    for k in range(n):
        grown = {key: values[k + 1] for key, values in sizes.items() if values[k + 1] != values[k]}
        if not grown:
            raise ProgressiveError(f"{timing_key}[{k}]", f"growth {k} changes no size (every size list has the same "
                                                         f"entry at {k} and {k + 1}): drop it or make a size larger")
        rest = {key: value[k] if isinstance(value, list) else value for key, value in shared.items()}
        stages.append({timing_key: timing[k], **grown, **rest})
    return stages


def progressive_key(block: Mapping[str, Any], k: int, key: str | None) -> str:
    """Where in a progressive schedule the key ``key`` of its expanded stage ``k`` came from: a timing entry
    (``at_fraction[k]``), a size entry (``n_layer[k + 1]``), a per-growth entry (``rewarmup_steps[k]``), a shared key
    (``depth_init``); ``growth k`` for the stage as a whole.

    Example::

        >>> block = {"n_layer": [1, 2, 4], "at_fraction": [0.5, 0.8], "depth_init": "copy"}
        >>> progressive_key(block, 1, "n_layer"), progressive_key(block, 0, "at_step"), progressive_key(block, 0, \
"depth_init")
        ('n_layer[2]', 'at_fraction[0]', 'depth_init')
    """
    if key is None:
        return f"growth {k}"
    if key in TIMING_KEYS:
        timing = next((t for t in TIMING_KEYS if block.get(t) is not None), key)
        return f"{timing}[{k}]"
    if key in block and key in _size_keys():
        return f"{key}[{k + 1}]"
    if isinstance(block.get(key), list):
        return f"{key}[{k}]"
    return key


def progressive_stages(**block: Any) -> list[Any]:
    """The :class:`~lightning_sparkling.growth.stage.GrowthStage` list of a progressive schedule given by its keys
    (:func:`expand_progressive`), for :class:`~lightning_sparkling.callbacks.GrowthCallback`; the timing must be
    ``at_fraction`` or ``at_step`` (the callback does not know tokens).

    Example::

        >>> stages = progressive_stages(n_layer=[1, 2, 4, 8], at_fraction=[0.4, 0.6, 0.8])
        >>> [(s.at_fraction, s.n_layer) for s in stages]
        [(0.4, 2), (0.6, 4), (0.8, 8)]
    """
    from lightning_sparkling.growth.stage import GrowthStage

    if block.get("at_tokens") is not None:
        raise ProgressiveError("at_tokens", "GrowthStage has no at_tokens: give at_fraction or at_step (sparkling "
                                            "pretrain's growth.progressive takes at_tokens)")
    return [GrowthStage(**keys) for keys in expand_progressive(block)]
