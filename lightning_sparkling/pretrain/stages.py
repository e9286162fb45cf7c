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
from typing import Any, Optional

from lightning_sparkling.growth.schedules import check_growth_before_decay, wsd_decay_start
from lightning_sparkling.growth.stage import GrowthStage, check_rewarmup_fits
from lightning_sparkling.pretrain.errors import ConfigError, _positive_int
from lightning_sparkling.pretrain.schema import GrowthArgs, StageArgs, TrainArgs

__all__ = ["lr_decay_start"]


def _resolve_stages(growth: GrowthArgs, config: Any, train: TrainArgs, steps: int, tokens_per_step: int,
                    strategy: str, num_devices: int, num_nodes: int, notes: list[str] | None = None
                    ) -> list[GrowthStage]:
    """The ``GrowthStage`` list of ``growth.stages`` (``at_tokens`` turned into steps), each dry-run on the model
    (a named target takes the run's vocabulary: :func:`_target_with_run_vocabulary`)."""
    if growth.min_lr is not None and (growth.min_lr < 0 or not math.isfinite(growth.min_lr)):
        raise ConfigError("growth.min_lr", f"must be a finite number >= 0, got {growth.min_lr}")
    stages: list[GrowthStage] = []
    step_keys: list[str] = []  # growth.stages[k].at_step or .at_tokens, as given
    current = config
    for k, s in enumerate(growth.stages):
        key = f"growth.stages[{k}]"
        at_step, where = _stage_step(s, key, tokens_per_step, steps, stages)
        stage = _growth_stage(s, at_step, key)
        stage = _target_with_run_vocabulary(stage, current, key, notes if notes is not None else [])
        current = _grown_by(current, stage, k, growth.seed, train.tie_embeddings, key)
        try:
            check_rewarmup_fits([stage], steps, names=[key])
        except ValueError as err:
            raise ConfigError(f"{key}.rewarmup_steps", str(err).removeprefix(f"{key}: ")) from err
        stages.append(stage)
        step_keys.append(where)
    _check_wsd_growth(stages, step_keys, train, steps)
    _check_stage_sequence(stages)
    if stages and strategy == "fsdp2" and num_devices * num_nodes < 1:
        raise ConfigError("devices", "fsdp2 needs at least one device")
    return stages


def _stage_step(s: StageArgs, key: str, tokens_per_step: int, steps: int,
                previous: list[GrowthStage]) -> tuple[int, str]:
    """``(at_step, the key it was given by)`` of the stage ``s`` (``growth.stages[k]``): ``at_tokens`` or
    ``at_fraction`` (:func:`~lightning_sparkling.growth.stage.fraction_step`) turned into steps, inside the run and
    after the ``previous`` stages."""
    given = [name for name in ("at_step", "at_tokens", "at_fraction") if getattr(s, name) is not None]
    if len(given) != 1:
        raise ConfigError(f"{key}.{given[0] if given else 'at_step'}",
                          "give exactly one of at_step, at_tokens or at_fraction"
                          + (f" (got {', '.join(given)})" if given else ""))
    if s.at_fraction is not None:
        try:
            at_step = GrowthStage(at_fraction=s.at_fraction, n_layer=1).resolved(steps).at_step
        except ValueError as err:
            raise ConfigError(f"{key}.at_fraction", str(err)) from err
        where = f"{key}.at_fraction"
    elif s.at_tokens is not None:
        _positive_int(f"{key}.at_tokens", s.at_tokens, minimum=0)
        at_step = math.ceil(s.at_tokens / tokens_per_step)
        where = f"{key}.at_tokens"
    else:
        _positive_int(f"{key}.at_step", s.at_step, minimum=0)
        at_step, where = s.at_step, f"{key}.at_step"
    if at_step >= steps:
        raise ConfigError(where, f"growth at step {at_step} is at or past the end of the run (max_steps={steps}): "
                                 "the grown model would never train")
    if previous and at_step <= previous[-1].at_step:
        raise ConfigError(where, f"step {at_step} is not after the previous stage's step {previous[-1].at_step}: "
                                 "stages must grow in increasing step order")
    return at_step, where


def _growth_stage(s: StageArgs, at_step: int, key: str) -> GrowthStage:
    """The :class:`GrowthStage` of ``s`` at ``at_step``; its own check's error names the key it is about."""
    fields_ = {f.name: getattr(s, f.name) for f in dataclasses.fields(GrowthStage)
               if f.name not in ("at_step", "at_fraction")}  # at_fraction: already turned into at_step
    try:
        return GrowthStage(at_step, **fields_)
    except ValueError as err:
        bad = next((name for name in fields_ if re.search(rf"\b{name}=", str(err))), None)
        raise ConfigError(f"{key}.{bad}" if bad else key, str(err)) from err


def _grown_by(config: Any, stage: GrowthStage, k: int, seed: int, tie_embeddings: bool, key: str) -> Any:
    """The litgpt ``Config`` of ``config`` grown by ``stage`` (a dry run: meta only); a refused growth names the size
    key it is about."""
    from lightning_sparkling.growth.plan import GrowthError, plan_growth

    try:
        return plan_growth(config, stage, seed=seed, stage_index=k, tied_embeddings=tie_embeddings).new_config
    except GrowthError as err:
        names = (["depth_map"] if stage.depth_map is not None else []) + list(stage.sizes)
        bad = next((name for name in names if re.search(rf"\b{name}\b", str(err))), None)
        raise ConfigError(f"{key}.{bad}" if bad else key, str(err)) from err


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
    except ValueError as err:
        k = next(i for i, s in enumerate(stages[:-1]) if s.changes_baseline)
        key = "rewarmup_scope" if stages[k].rewarmup_scope == "all" else "decay_speedup"
        raise ConfigError(f"growth.stages[{k}].{key}", str(err)) from err


def lr_decay_start(train: TrainArgs, steps: int) -> Optional[int]:
    """The first step of the WSD decay phase of a run of ``steps`` optimizer steps (``None`` under ``cosine``), as
    ``LitGPTPretrainModule`` builds it (warmup ``lr_warmup_steps``, else ``ceil(fraction * steps)``, default 0.03)."""
    if train.lr_schedule != "wsd":
        return None
    if train.lr_warmup_steps is not None:
        warmup = train.lr_warmup_steps
    else:
        warmup = math.ceil((0.03 if train.lr_warmup_fraction is None else train.lr_warmup_fraction) * steps)
    return wsd_decay_start(warmup_steps=min(warmup, steps), total_steps=steps, decay_fraction=train.lr_decay_fraction)


def _check_wsd_growth(stages: list[GrowthStage], keys: list[str], train: TrainArgs, steps: int) -> None:
    """Under ``train.lr_schedule: wsd``, refuse a growth inside the decay phase, naming the stage's step key."""
    start = lr_decay_start(train, steps)
    if start is None:
        return
    for stage, key in zip(stages, keys):
        try:
            check_growth_before_decay([stage.at_step], decay_start=start, total_steps=steps, names=[key],
                                      setting=f", train.lr_decay_fraction={train.lr_decay_fraction:g}")
        except ValueError as err:
            raise ConfigError(key, str(err).removeprefix(f"{key}: ")) from err
