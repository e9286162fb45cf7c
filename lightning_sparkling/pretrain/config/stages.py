"""The growth stages of a run, checked before anything starts: ``growth.stages`` turned into
:class:`~lightning_sparkling.growth.stage.GrowthStage` objects (``at_tokens`` / ``at_fraction`` into steps, a recipe's
keys filled in by the schema), each dry-run on the model it grows (:func:`_resolve_stages`), the stages' order and
baseline keys (:func:`_check_stage_sequence`) and, under a WSD schedule, no growth inside the decay
(:func:`_check_wsd_growth`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, cast

from lightning_sparkling.growth.schedules import build_schedule, check_growth_before_decay, schedule_kind
from lightning_sparkling.growth.stage import GrowthStage, StageError, check_rewarmup_fits
from lightning_sparkling.pretrain.errors import ConfigError, _positive_int
from lightning_sparkling.pretrain.config.schema import GrowthArgs, TrainArgs

__all__ = ["lr_decay_start"]


def _resolve_stages(growth: GrowthArgs, config: Any, train: TrainArgs, steps: int, tokens_per_step: int,
                    notes: list[str] | None = None) -> tuple[list[GrowthStage], list[Any]]:
    """``(the GrowthStage list of growth.stages, the GrowthPlan of each)``: ``at_tokens`` turned into steps, the
    recipe applied, each stage planned once on the model it grows (a dry run on meta; a named target takes the run's
    vocabulary: :func:`_target_with_run_vocabulary`). ``sparkling plan`` reports those plans. The stages of a
    ``growth.progressive`` schedule (expanded into ``growth.stages`` by the schema) start from the model's sizes,
    and a refusal names the progressive key it is about (:func:`progressive_config_error`)."""
    if growth.progressive is None:
        return _resolve_stage_list(growth, config, train, steps, tokens_per_step, notes)
    _check_progressive_start(growth.progressive, config)
    try:
        return _resolve_stage_list(growth, config, train, steps, tokens_per_step, notes)
    except ConfigError as err:
        raise progressive_config_error(err, growth.progressive) from err


def _check_progressive_start(block: dict[str, Any], config: Any) -> None:
    """Refuse a ``growth.progressive`` size list whose first entry is not the model's size."""
    from lightning_sparkling.growth.progressive import progressive_sizes

    for key, values in progressive_sizes(block).items():
        if values[0] != getattr(config, key):
            raise ConfigError(f"growth.progressive.{key}[0]",
                              f"is {values[0]}, but the model's {key} is {getattr(config, key)}: a size list starts "
                              f"with the model's size, then gives the size after each growth (e.g. {key}: "
                              f"[{getattr(config, key)}, ...])")


_STAGE_KEY = re.compile(r"growth\.stages\[(\d+)\](?:\.(\w+))?")


def progressive_config_error(err: ConfigError, block: dict[str, Any]) -> ConfigError:
    """``err`` about an expanded stage (``growth.stages[k].KEY``, in its key or message) named by the
    ``growth.progressive`` key it came from (``growth.progressive.n_layer[2]``, ``growth.progressive.depth_init``:
    :func:`~lightning_sparkling.growth.progressive.progressive_key`), with the expanded stage it was."""
    from lightning_sparkling.growth.progressive import progressive_key

    def name(match: re.Match) -> str:
        k, key = int(match.group(1)), match.group(2)
        return f"growth.progressive.{progressive_key(block, k, key)}" if key else f"growth.progressive (growth {k})"

    key = _STAGE_KEY.sub(name, err.key)
    message = str(err).removeprefix(f"{err.key}: ")
    found = _STAGE_KEY.search(err.key) or _STAGE_KEY.search(message)
    where = f" (expanded growth.stages[{found.group(1)}])" if found else ""
    return ConfigError(key, _STAGE_KEY.sub(name, message) + where)


def _resolve_stage_list(growth: GrowthArgs, config: Any, train: TrainArgs, steps: int, tokens_per_step: int,
                        notes: list[str] | None = None) -> tuple[list[GrowthStage], list[Any]]:
    """:func:`_resolve_stages` of the ``growth.stages`` list."""
    if growth.min_lr is not None and (growth.min_lr < 0 or not math.isfinite(growth.min_lr)):
        raise ConfigError("growth.min_lr", f"must be a finite number >= 0, got {growth.min_lr}")
    stages: list[GrowthStage] = []
    plans: list[Any] = []
    step_keys: list[str] = []  # growth.stages[k].at_step or .at_tokens, as given
    current = config
    for k, s in enumerate(growth.stages):
        key = f"growth.stages[{k}]"
        at_step, where = _stage_step(s, key, tokens_per_step, steps, stages)
        stage = _growth_stage(s, at_step, key, growth.recipe)
        if at_step == 0 and notes is not None:
            notes.append(f"{where}: growth at step 0 comes before the first optimizer step, so the run never trains "
                         "the small model: it trains the grown shape from a transformed init (set a later step to "
                         "train the small model first)")
        _check_target_name(stage, key)
        stage = _target_with_run_vocabulary(stage, current, key, notes if notes is not None else [])
        plans.append(_plan_stage(current, stage, k, growth.seed, bool(train.tie_embeddings), key))
        current = plans[-1].new_config
        try:  # a stage that adds no entries (a config-field axis, e.g. rope_base) has no re-warmup to fit
            if plans[-1].rewarms:
                check_rewarmup_fits([stage], steps, names=[key])
        except StageError as err:
            raise ConfigError(f"{key}.{err.key}", str(err).removeprefix(f"{key}: ")) from err
        stages.append(stage)
        step_keys.append(where)
    _check_wsd_growth(stages, step_keys, train, steps)
    _check_stage_sequence(stages)
    return stages, plans


def _stage_step(s: dict[str, Any], key: str, tokens_per_step: int, steps: int,
                previous: list[GrowthStage]) -> tuple[int, str]:
    """``(at_step, the key it was given by)`` of the stage ``s`` (``growth.stages[k]``, the keys it sets):
    ``at_tokens`` or ``at_fraction`` (:func:`~lightning_sparkling.growth.stage.fraction_step`) turned into steps,
    inside the run and after the ``previous`` stages."""
    at_step = s.get("at_step")
    given = [name for name in ("at_step", "at_tokens", "at_fraction") if s.get(name) is not None]
    if len(given) != 1:
        raise ConfigError(f"{key}.{given[0] if given else 'at_step'}",
                          "give exactly one of at_step, at_tokens or at_fraction"
                          + (f" (got {', '.join(given)})" if given else ""))
    if s.get("at_fraction") is not None:
        try:
            at_step = GrowthStage(at_fraction=s["at_fraction"], n_layer=1).resolved(steps).at_step
        except ValueError as err:
            raise ConfigError(f"{key}.at_fraction", str(err)) from err
        where = f"{key}.at_fraction"
    elif s.get("at_tokens") is not None:
        _positive_int(f"{key}.at_tokens", s["at_tokens"], minimum=0)
        at_step = math.ceil(s["at_tokens"] / tokens_per_step)
        where = f"{key}.at_tokens"
    else:
        _positive_int(f"{key}.at_step", at_step, minimum=0)
        where = f"{key}.at_step"
    assert at_step is not None  # each branch computed or checked it
    if at_step >= steps:
        raise ConfigError(where, f"growth at step {at_step} is at or past the end of the run (max_steps={steps}): "
                                 "the grown model would never train")
    if previous and at_step <= cast(int, previous[-1].at_step):
        raise ConfigError(where, f"step {at_step} is not after the previous stage's step {previous[-1].at_step}: "
                                 "stages must grow in increasing step order")
    return at_step, where


def _growth_stage(s: dict[str, Any], at_step: int, key: str, recipe: str) -> GrowthStage:
    """The :class:`GrowthStage` of the keys ``s`` sets at ``at_step``, completed by ``recipe``
    (:meth:`GrowthStage.from_recipe`, the one place a recipe is applied); a refusal names the key it is about
    (:class:`~lightning_sparkling.growth.errors.StageError`)."""
    keys = {name: value for name, value in s.items()
            if name not in ("at_step", "at_tokens", "at_fraction")}  # timing: at_step
    if keys.get("recipe", "auto") in ("auto", None):  # a stage's own recipe wins over growth.recipe
        keys.pop("recipe", None)
    else:
        recipe = keys.pop("recipe")
    try:
        return GrowthStage.from_recipe(recipe, at_step, **keys)
    except StageError as err:
        raise ConfigError(f"{key}.{err.key}" if err.key else key, str(err)) from err


def _plan_stage(config: Any, stage: GrowthStage, k: int, seed: int, tie_embeddings: bool, key: str) -> Any:
    """The ``GrowthPlan`` of ``stage`` on a model of ``config`` (a dry run: meta only); a refused growth names the
    stage key it is about (:attr:`GrowthError.key <lightning_sparkling.growth.errors.GrowthError>`), or the stage
    when it is about the model or the stage's target as a whole."""
    from lightning_sparkling.growth.plan import GrowthError, plan_growth

    try:
        return plan_growth(config, stage, seed=seed, stage_index=k, tied_embeddings=tie_embeddings)
    except GrowthError as err:
        raise ConfigError(f"{key}.{err.key}" if err.key else key, str(err)) from err


def _check_target_name(stage: GrowthStage, key: str) -> None:
    """Refuse a ``model_config`` target that gives only a ``name``: a ``model_config`` holds the target's fields (its
    ``name`` is only a label, as in litgpt), so every other field would be litgpt's default and the refusal would be
    about the first of them (``norm_class_name``), not about what the stage meant: a named config (``model_name``)."""
    if not (isinstance(stage.model_config, dict) and set(stage.model_config) == {"name"}):
        return
    import difflib

    from litgpt.config import name_to_config

    name = stage.model_config["name"]
    use = "grow into a litgpt config by its name with model_name, or give the target's fields in model_config"
    if name in name_to_config:
        raise ConfigError(f"{key}.model_config", f"gives only name={name!r}, and a model_config holds the target's "
                                                 f"fields (its name is only a label): use model_name: {name}")
    close = difflib.get_close_matches(str(name), list(name_to_config), n=1)
    suggest = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"{key}.model_config", f"name={name!r} is not a litgpt config name{suggest} (see `litgpt "
                                             f"pretrain list`), and a model_config holds the target's fields (its "
                                             f"name is only a label): {use}")


def _target_with_run_vocabulary(stage: GrowthStage, config: Any, key: str, notes: list[str]) -> GrowthStage:
    """A ``model_name`` / ``model_config`` stage whose target takes the run's vocabulary, as the starting model does
    (``vocab_size`` from the tokenizer): the named config's fields with the model's ``vocab_size`` and
    ``padded_vocab_size``, as ``model_config``. A ``model_config`` that sets ``vocab_size`` itself is kept (a
    different vocabulary is then refused by the dry run, naming both values)."""
    from lightning_sparkling.growth.plan import GrowthError, target_config

    if stage.model_name is None and (stage.model_config is None or "vocab_size" in stage.model_config):
        return stage
    try:
        target = target_config(stage)
    except GrowthError as err:
        raise ConfigError(f"{key}.{'model_name' if stage.model_name else 'model_config'}", str(err)) from err
    fields_ = {f.name: getattr(target, f.name) for f in dataclasses.fields(target) if f.init}
    if (target.vocab_size, target.padded_vocab_size) != (config.vocab_size, config.padded_vocab_size):
        notes.append(f"{key}: the target {target.name} takes the run's vocabulary (vocab_size {config.vocab_size}, "
                     f"padded {config.padded_vocab_size}) instead of its own ({target.vocab_size}), as the starting "
                     "model does")
    fields_.update(vocab_size=config.vocab_size, padded_vocab_size=config.padded_vocab_size)
    return dataclasses.replace(stage, model_name=None, model_config=fields_)


def _check_stage_sequence(stages: list[GrowthStage]) -> None:
    """``rewarmup_scope: all`` and ``decay_speedup`` only on the last stage (they redefine the rest of the run)."""
    from lightning_sparkling.growth.stage import check_stage_sequence

    try:
        check_stage_sequence(stages)
    except StageError as err:
        raise ConfigError(f"growth.stages[{err.stage}].{err.key}", str(err)) from err


def lr_decay_start(train: TrainArgs, steps: int) -> int | None:
    """The first step of the decay phase of a run of ``steps`` optimizer steps under a schedule with a stable phase
    (``wsd``; ``None`` under one without, ``cosine``), as ``LitGPTPretrainModule`` builds it (the schedule registry,
    warmup by :func:`~lightning_sparkling.pretrain.model.optim.warmup_steps`)."""
    from lightning_sparkling.pretrain.model.optim import warmup_steps

    if not schedule_kind(train.lr_schedule).stable_phase:
        return None
    warmup = min(warmup_steps(steps, train.lr_warmup_steps, train.lr_warmup_fraction), steps)
    return build_schedule(train.lr_schedule, warmup, steps, decay_fraction=train.lr_decay_fraction,
                          decay_shape=cast(str, train.lr_decay_shape)).decay_start  # resolved


def _check_wsd_growth(stages: list[GrowthStage], keys: list[str], train: TrainArgs, steps: int) -> None:
    """Under a schedule with a stable phase (``train.lr_schedule: wsd``), refuse a growth inside the decay phase,
    naming the stage's step key."""
    start = lr_decay_start(train, steps)
    if start is None:
        return
    for stage, key in zip(stages, keys):
        try:
            check_growth_before_decay([cast(int, stage.at_step)], decay_start=start, total_steps=steps, names=[key],
                                      setting=f", train.lr_decay_fraction={train.lr_decay_fraction:g}")
        except ValueError as err:
            raise ConfigError(key, str(err).removeprefix(f"{key}: ")) from err
