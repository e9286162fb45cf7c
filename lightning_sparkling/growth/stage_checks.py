"""The checks :class:`~lightning_sparkling.growth.stage.GrowthStage` runs on its timing and recipe keys when it is
built (each axis checks its own keys: ``GrowthAxis.check_stage``), and the choices of its recipe keys. Every refusal
is a :class:`~lightning_sparkling.growth.errors.StageError` naming the key, the value and the fix.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any

from lightning_sparkling.growth.axes import registered_axes
from lightning_sparkling.growth.errors import StageError, check_choice, did_you_mean
from lightning_sparkling.growth.scaling import SPLITS
from lightning_sparkling.growth.stage_keys import FILLED, FrozenKeys

OPTIMIZER_STATES: tuple[str, ...] = ("asymmetric", "copy", "drop", "asymmetric-scaled", "scaled")
REWARMUP_SCOPES: tuple[str, ...] = ("new", "all")
BIAS_CORRECTIONS: tuple[str, ...] = ("shared", "fresh")
SYMMETRY_RELEASES: tuple[str, ...] = ("hold", "schedule")
DEFAULT_SPLIT_RATIO = 1 / 3

StageLike = Any
"""A :class:`~lightning_sparkling.growth.stage.GrowthStage` (which imports this module, so it is named here in
words only)."""

__all__ = [
    "BIAS_CORRECTIONS",
    "DEFAULT_SPLIT_RATIO",
    "OPTIMIZER_STATES",
    "REWARMUP_SCOPES",
    "SYMMETRY_RELEASES",
    "check_baselines",
    "check_keywords",
    "check_lock_breakers",
    "check_target",
    "check_timing",
    "plugin_key_fields",
]


def check_timing(stage: StageLike) -> None:
    """Refuse none or both of ``at_step`` / ``at_fraction``, a negative ``at_step``, an ``at_fraction`` outside
    ``(0, 1)``."""
    if (stage.at_step is None) == (stage.at_fraction is None):
        raise StageError(f"GrowthStage(at_step={stage.at_step!r}, at_fraction={stage.at_fraction!r}): give exactly "
                         "one of at_step (optimizer steps) and at_fraction (a fraction of max_steps)",
                         key="at_step")
    if stage.at_step is not None and (isinstance(stage.at_step, bool) or not isinstance(stage.at_step, int)
                                     or stage.at_step < 0):
        raise StageError(f"GrowthStage(at_step={stage.at_step!r}): at_step must be an integer >= 0", key="at_step")
    f = stage.at_fraction
    if f is not None and (isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f < 1):
        raise StageError(f"GrowthStage(at_fraction={f!r}): must be a number in (0, 1), the fraction of "
                         "max_steps after which to grow (e.g. 0.25), or use at_step",
                         key="at_fraction")


def check_target(stage: StageLike) -> None:
    """Refuse a named target (``model_name`` / ``model_config``) given twice, with sizes, or of the wrong type."""
    if stage.model_name is not None and stage.model_config is not None:
        raise StageError("GrowthStage(model_name=..., model_config=...): give one of them, not both", key="model_name")
    if stage.sizes:
        raise StageError(f"GrowthStage(model_name/model_config with {', '.join(stage.sizes)}): the target config "
                         "sets every size; drop the size keys or the target")
    if stage.model_name is not None and not (isinstance(stage.model_name, str) and stage.model_name):
        raise StageError(f"GrowthStage(model_name={stage.model_name!r}): must be a litgpt config name",
                         key="model_name")
    if stage.model_config is not None and not isinstance(stage.model_config, dict):
        raise StageError(f"GrowthStage(model_config={stage.model_config!r}): must be a dict of litgpt Config fields",
                         key="model_config")


def check_baselines(stage: StageLike, fan_in: str) -> None:
    """Refuse bad values of the paper's baselines' keys (``split``, ``split_ratio``, ``perturb``, ``rewarmup_scope``,
    ``decay_speedup``), or one the stage's init pair or heads growth cannot apply."""
    def number(value: object) -> bool:
        return not isinstance(value, bool) and isinstance(value, (int, float))

    check_choice("split", stage.split, SPLITS)
    if not number(stage.split_ratio) or not 0 < stage.split_ratio < 1:
        raise StageError(f"GrowthStage(split_ratio={stage.split_ratio!r}): must be a number in (0, 1), the "
                         "source's part r of r : 1 - r (1/3: the paper's 1:2)",
                         key="split_ratio")
    if stage.split != "uneven" and stage.split_ratio != DEFAULT_SPLIT_RATIO:
        raise StageError(f"GrowthStage(split_ratio={stage.split_ratio!r}): only used with split='uneven' (split "
                         f"is {stage.split!r})", key="split")
    if not number(stage.perturb) or not (math.isfinite(stage.perturb) and stage.perturb >= 0):
        raise StageError(f"GrowthStage(perturb={stage.perturb!r}): must be a finite number >= 0 (the standard "
                         "deviation of the +/- perturbation relative to the RMS of the shares; 0: off)",
                         key="perturb")
    if stage.n_head is not None or stage.n_query_groups is not None:
        for key, active in (("split", stage.split != "even"), ("perturb", stage.perturb > 0)):
            if active:
                raise StageError(f"GrowthStage({key}={getattr(stage, key)!r}): not supported with a heads growth "
                                 "(n_head / n_query_groups); use the default even split and no perturb",
                                 key=key)
    if fan_in != "copy":
        for key, active in (("split", stage.split != "even"), ("perturb", stage.perturb > 0)):
            if active:
                raise StageError(
                    f"GrowthStage({key}={getattr(stage, key)!r}): divides or perturbs the fan-in shares of a "
                    f"copied channel, but the init pair {stage.init!r} does not copy the fan-in side; use a pair "
                    "ending in '-copy' (copy-copy, random-copy, zero-copy)", key=key)
    check_choice("rewarmup_scope", stage.rewarmup_scope, REWARMUP_SCOPES)
    if stage.rewarmup_scope == "all" and stage.rewarmup_ratio is None:
        raise StageError("GrowthStage(rewarmup_scope='all'): every parameter follows this stage's re-warmup, "
                         "but rewarmup_ratio is None (no re-warmup); give a rewarmup_ratio or use 'new'",
                         key="rewarmup_scope")
    if not number(stage.decay_speedup) or not 0 <= stage.decay_speedup < 1:
        raise StageError(f"GrowthStage(decay_speedup={stage.decay_speedup!r}): must be a number in [0, 1) (the "
                         "fraction by which the remaining decay is shortened; the paper uses 0.25 and 0.5)",
                         key="decay_speedup")


def check_lock_breakers(stage: StageLike, fan_out: str, fan_in: str) -> None:
    """Refuse bad values of the symmetry-lock keys (``bias_correction``, ``symmetry_*``), or one the stage cannot
    apply (no copies, no new-entry LR)."""
    check_choice("bias_correction", stage.bias_correction, BIAS_CORRECTIONS)
    if stage.bias_correction == "fresh" and stage.rewarmup_ratio is None:
        raise StageError("GrowthStage(bias_correction='fresh'): the correction scales the new entries' LR, but "
                         "rewarmup_ratio is None (no new-entry LR); set rewarmup_ratio (1.0 for the correction "
                         "alone)", key="bias_correction")
    if isinstance(stage.symmetry_interval, bool) or not isinstance(stage.symmetry_interval, int) \
            or stage.symmetry_interval < 1:
        raise StageError(f"GrowthStage(symmetry_interval={stage.symmetry_interval!r}): must be an integer >= 1 "
                         "(optimizer steps between two symmetry checks)",
                         key="symmetry_interval")
    boost = stage.symmetry_max_boost
    if isinstance(boost, bool) or not isinstance(boost, (int, float)) or not (math.isfinite(boost) and boost >= 1):
        raise StageError(f"GrowthStage(symmetry_max_boost={boost!r}): must be a finite number >= 1 (the largest "
                         "multiplier of the new entries' LR)", key="symmetry_max_boost")
    check_choice("symmetry_release", stage.symmetry_release, SYMMETRY_RELEASES)
    target = stage.symmetry_target
    if target is None:
        return
    if isinstance(target, bool) or not isinstance(target, (int, float)) or not 0 < target < 1:
        raise StageError(f"GrowthStage(symmetry_target={target!r}): must be a number in (0, 1), the mean cosine "
                         "of copies to their sources below which the LR boost ends (e.g. 0.5), or None",
                         key="symmetry_target")
    if not stage.copies:
        what = f"the init pair {stage.init!r}" if set(stage.sizes) - {"n_layer"} else ""
        if stage.n_layer is not None:
            what += (" and " if what else "") + f"depth_init={stage.depth_init!r}"
        raise StageError(f"GrowthStage(symmetry_target={target}): {what} copies nothing, so there is no symmetry "
                         "to break; use a copied init (a pair with a copied side, depth_init 'copy' or "
                         "'copy-zero') or drop symmetry_target",
                         key="depth_init" if stage.n_layer is not None else "symmetry_target")
    if stage.rewarmup_ratio is None:
        raise StageError(f"GrowthStage(symmetry_target={target}): the boost scales the new entries' LR, but "
                         "rewarmup_ratio is None (no new-entry LR); set rewarmup_ratio",
                         key="symmetry_target")
    if stage.rewarmup_scope == "all":
        raise StageError(f"GrowthStage(symmetry_target={target}): the boost scales the new entries' LR, but "
                         "with rewarmup_scope='all' every entry follows one LR; use rewarmup_scope='new'",
                         key="rewarmup_scope")


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def plugin_key_fields() -> dict[str, dataclasses.Field]:
    """``{key: its dataclass Field}`` of every registered axis' own stage keys (their ``stage_keys`` blocks): the
    keys a stage holds in :attr:`GrowthStage.extra`.

    Example::

        >>> plugin_key_fields()  # the built-in axes' keys are GrowthStage's fields
        {}
    """
    out: dict[str, dataclasses.Field] = {}
    for axis in registered_axes():
        for f in dataclasses.fields(axis.stage_keys) if axis.stage_keys is not None else ():
            out[f.name] = f
    return out


def _checked_extra(extra: Any) -> FrozenKeys:
    """``extra`` as a read-only mapping (:class:`FrozenKeys`) of the registered axes' keys set to other than their
    default (a default, e.g. an unset CLI key, is left out, so stages compare by what they grow).

    Raises:
        TypeError: for a key no registered axis has, naming the keys they have.
    """
    if not isinstance(extra, Mapping):
        raise TypeError(f"GrowthStage(extra={extra!r}): must be a mapping of registered axes' stage keys")
    plugin = plugin_key_fields()
    unknown = sorted(set(extra) - set(plugin))
    if unknown:
        raise TypeError(f"GrowthStage got unexpected stage key(s) {', '.join(map(repr, unknown))}: not a field, nor "
                        f"a registered axis' key (registered: {', '.join(plugin) or 'none'}); register its axis first "
                        "(growth.register_axis, or the CLI's plugins:)")
    return FrozenKeys({k: v for k, v in extra.items() if v != _default(plugin[k])})


def check_keywords(cls: type) -> None:
    """Wrap ``cls.__init__`` (a dataclass') so that an unknown keyword is a ``TypeError`` naming the close key, as
    the CLI names it (``GrowthStage(20, n_embdd=64)``: did you mean 'n_embd'?), and a registered axis' key given
    as a field points at :meth:`GrowthStage.from_keys`."""
    init = cls.__init__  # type: ignore[misc]
    names = [f.name for f in dataclasses.fields(cls)]

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        for key in kwargs:
            if key in names:
                continue
            if key in plugin_key_fields():
                raise TypeError(f"{cls.__name__}(..., {key}=...): {key!r} is a registered axis' key, held in extra: "
                                f"use {cls.__name__}.from_keys(at_step, {key}=...) or extra={{{key!r}: ...}}")
            raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {key!r}"
                            f"{did_you_mean(key, [n for n in names if n != FILLED] + list(plugin_key_fields()))}")
        init(self, *args, **kwargs)

    cls.__init__ = __init__  # type: ignore[misc]
