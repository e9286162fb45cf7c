"""Running a program: every stage grown and checked (exactness, refusals, reload, counts, requires_grad,
determinism, rollback, the optimizer patch)."""

from __future__ import annotations

import copy
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch
from litgpt import GPT, Config

from fuzz.model import (
    Snapshot,
    build_model,
    build_optimizer,
    claims_kept,
    contract_exact,
    logits_of,
    rel_error,
    train_steps,
)
from fuzz.programs import RTOL, TOKENS, TWIN_EVERY, VOCAB, Program, draw_stage
from lightning_sparkling import GrowthError, GrowthStage, grow_model
from lightning_sparkling.growth import surgery
from lightning_sparkling.growth.axes import keeps_function
from lightning_sparkling.growth.compute import estimate_compute
from lightning_sparkling.growth.optim_state import plan_optimizer_patch


# ------------------------------------------------------------------------------------------------ the checker
@dataclass
class Failure:
    kind: str
    stage_index: int
    message: str


@dataclass
class CaseResult:
    program: Program
    stages: list[dict[str, Any]] = field(default_factory=list)
    failures: list[Failure] = field(default_factory=list)
    axes: Counter = field(default_factory=Counter)
    outcomes: Counter = field(default_factory=Counter)


def _axes_of(keys: dict[str, Any], old: Config, new: Config | None) -> list[str]:
    axes = [k for k in ("n_embd", "intermediate_size", "moe_intermediate_size") if k in keys]
    if "n_head" in keys or "n_query_groups" in keys:
        axes.append("heads")
    if "n_layer" in keys or "depth_map" in keys:
        axes.append("depth")
    if "mlp_class_name" in keys:
        axes.append("dense->moe")
    elif "n_expert" in keys or "n_expert_per_token" in keys:
        axes.append("experts")
    if "model_config" in keys:
        axes.append("target")
        if keys["model_config"].get("block_size") != old.block_size:
            axes.append("target-block_size")
    return axes


def run_program(program: Program, *, checks: bool = True) -> CaseResult:
    """Run ``program`` (drawing its stages from its seed when ``program.stages`` is None) and check every stage."""
    out = CaseResult(program)
    rng = random.Random(program.seed * 7919 + 17)
    try:
        model = build_model(program)
    except (ValueError, AssertionError, GrowthError) as err:  # a config litgpt refuses: not a growth case
        out.outcomes["bad-config"] += 1
        out.failures.append(Failure("fuzzer", -1, f"config refused by litgpt: {err}"))
        return out
    tokens = torch.randint(0, VOCAB, (4, TOKENS + 1), generator=torch.Generator().manual_seed(program.seed))
    optimizer = build_optimizer(model, program.optimizer)
    if optimizer is not None:
        train_steps(model, optimizer, tokens, steps=1)
    start = copy.deepcopy(model.config)
    applied: list[GrowthStage] = []
    phase_counts = [_counts(model)]
    n_stages = len(program.stages) if program.stages is not None else rng.choice((1, 1, 2, 3))
    for k in range(n_stages):
        keys = program.stages[k] if program.stages is not None else draw_stage(rng, model.config, k)
        out.stages.append(keys)
        old = copy.deepcopy(model.config)
        out.axes.update(_axes_of(keys, old, None))
        try:
            stage = GrowthStage.from_keys(10 * (k + 1), **copy.deepcopy(keys))
        except (ValueError, TypeError) as err:
            if not str(err):
                out.failures.append(Failure("refusal", k, f"GrowthStage refused with an empty message ({err!r})"))
            out.outcomes["stage-refused"] += 1
            continue
        grown = _grow_and_check(model, stage, k, program, tokens, optimizer, out)
        if grown:
            applied.append(stage)
            phase_counts.append(_counts(model))
    if checks and applied:  # every phase at once (estimate_compute counts each phase's config)
        _check_counts(start, applied, phase_counts, program.tied, len(out.stages) - 1, out)
    return out


def _counts(model: GPT) -> tuple[int, int]:
    """``(active, total)`` counted from the model's own parameters (tied once; a MoE block's skipped experts)."""
    params = {id(p): p for p in model.parameters()}
    total = sum(p.numel() for p in params.values())
    skipped = 0
    for block in model.transformer.h:
        experts = getattr(block.mlp, "experts", None)
        if experts is not None:
            per = sum(p.numel() for p in experts[0].parameters())
            skipped += per * (len(experts) - model.config.n_expert_per_token)
    return total - skipped, total


def _check_counts(start: Config, applied: list[GrowthStage], counts: list, tied: bool, k: int, out: CaseResult):
    try:
        est = estimate_compute(start, applied, total_steps=100, tokens_per_step=1, tie_embeddings=tied)
    except (ValueError, GrowthError) as err:
        out.failures.append(Failure("count", k, f"estimate_compute refused stages that grew: {err}"))
        return
    expected = list(zip(est.active_params, est.total_params))
    if expected != counts:
        out.failures.append(Failure("count", k, f"estimate_compute (active, total) per phase {expected} != the "
                                                f"models' {counts}"))


def _grow_and_check(model: GPT, stage: GrowthStage, k: int, program: Program, tokens: torch.Tensor,
                    optimizer: torch.optim.Optimizer | None, out: CaseResult) -> bool:
    """Grow ``model`` by ``stage`` and check it; ``True`` when it grew."""
    snap = Snapshot.of(model)
    before = logits_of(model, tokens)
    twin = copy.deepcopy(model) if (program.seed + k) % TWIN_EVERY == 0 else None  # determinism and rollback
    bias_ok = all((b >= 0).all() for n, b in model.named_buffers() if n.endswith("e_score_correction_bias"))
    tied_rows = any(torch.unique(p.detach(), dim=0).shape[0] < p.shape[0]
                    for n, p in model.named_parameters() if n.endswith("mlp.gate.weight"))
    opt_before = _optimizer_snapshot(optimizer)
    try:
        result = grow_model(model, stage, seed=program.seed, stage_index=k)
    except (GrowthError, ValueError) as err:
        out.outcomes["refused"] += 1
        if not str(err):
            out.failures.append(Failure("refusal", k, f"refused with an empty message ({type(err).__name__})"))
        diff = snap.differences(model)
        if diff:
            out.failures.append(Failure("refusal", k, f"refused ({err}) but the model changed: {diff}"))
        return False
    except Exception as err:
        out.outcomes["crash"] += 1
        out.failures.append(Failure("crash", k, f"{type(err).__name__}: {err}"))
        return False
    out.outcomes["grown"] += 1
    new_config = model.config
    after = logits_of(model, tokens)
    err = rel_error(after, before) if after.shape == before.shape else math.inf
    exact = contract_exact(stage, snap.config, new_config, bias_ok)
    if tied_rows and stage.n_expert is not None:  # old experts' router rows tie: topk's tie-break decides
        exact = False
    claimed = claims_kept(result, model)
    out.outcomes["exact-by-contract" if exact else "not-exact-by-contract"] += 1
    out.outcomes["claimed-kept"] += claimed
    if exact and err > RTOL:
        out.failures.append(Failure("exact", k, f"the contract keeps the function, logits moved by {err:.3g}"))
    # the experts' line speaks for the experts: checked where the stage's other axes keep the function
    claimed = claimed and contract_exact(stage, snap.config, new_config, bias_ok, experts=False)
    if claimed and err > RTOL:
        out.failures.append(Failure("claim", k, f"'function kept' printed, logits moved by {err:.3g}"))
    if keeps_function(result.plan, model) and err > RTOL:  # the growth log's "logits  function kept" line
        out.failures.append(Failure("claim", k, f"'logits  function kept' printed, logits moved by {err:.3g}"))
        claimed = True
    if exact or claimed:
        out.outcomes["exact-checked"] += 1
    _check_reload(model, tokens, k, out)
    _check_requires_grad(model, result, snap, k, out)
    if (program.seed + k) % TWIN_EVERY == 0:  # determinism and rollback: a growth each, on a share of the stages
        _check_twin(twin, model, stage, program, k, out)
    # False: the patch refused, the growth was rolled back
    return optimizer is None or _check_optimizer(optimizer, opt_before, result, stage, model, tokens, k, out)


def _check_reload(model: GPT, tokens: torch.Tensor, k: int, out: CaseResult) -> None:
    try:
        fresh = GPT(model.config)
        fresh.load_state_dict(model.state_dict(), strict=True)
    except Exception as err:
        out.failures.append(Failure("reload", k, f"GPT(model.config) does not load strictly: {err}"[:400]))
        return
    if fresh.max_seq_length != model.max_seq_length:
        out.failures.append(Failure("reload", k, f"max_seq_length {model.max_seq_length} != GPT(model.config)'s "
                                                 f"{fresh.max_seq_length} (block_size {model.config.block_size})"))
    mine, theirs = dict(model.named_buffers()), dict(fresh.named_buffers())
    if mine.keys() != theirs.keys():
        out.failures.append(Failure("reload", k, f"buffers differ: {sorted(set(mine) ^ set(theirs))}"))
    else:
        bad = [n for n in mine if not (mine[n].shape == theirs[n].shape and torch.allclose(mine[n], theirs[n]))]
        if bad:
            out.failures.append(Failure("reload", k, f"buffers {bad} differ from GPT(model.config)'s"))
    fresh.train(model.training)
    if rel_error(logits_of(fresh, tokens), logits_of(model, tokens)) > 1e-6:
        out.failures.append(Failure("reload", k, "GPT(model.config) with the state dict gives other logits"))
    full = torch.zeros((1, model.config.block_size), dtype=torch.long)
    try:
        with torch.no_grad():
            model(full)
    except Exception as err:
        out.failures.append(Failure("reload", k, f"the grown model refuses block_size={model.config.block_size} "
                                                 f"tokens: {err}"[:300]))


def _check_requires_grad(model: GPT, result, snap: Snapshot, k: int, out: CaseResult) -> None:
    wrong = []
    for name, p in model.named_parameters():
        spec = result.plan.tensors.get(name)
        source = spec.source_name if spec is not None else name
        if source not in snap.requires_grad:
            continue  # sourceless (a dense -> MoE router)
        if p.requires_grad != snap.requires_grad[source]:
            wrong.append(f"{name} requires_grad={p.requires_grad}, its source {source} {snap.requires_grad[source]}")
    if wrong:
        out.failures.append(Failure("requires_grad", k, f"{len(wrong)} parameters: {wrong[:3]}"))


class _Injected(RuntimeError):
    pass


def _check_twin(twin: GPT, model: GPT, stage: GrowthStage, program: Program, k: int, out: CaseResult) -> None:
    """On a copy of the pre-growth model: a fault at the end of the swap and ``rollback()`` restore it; the same
    seed then gives the same weights."""
    twin_snap = Snapshot.of(twin)
    if (program.seed + k) % (2 * TWIN_EVERY) == 0:  # half of those (each costs a growth)
        out.outcomes["fault-injected"] += 1
        real = surgery.derived_buffers

        def failing(*args, **kwargs):
            real(*args, **kwargs)  # the last step of the swap, then the fault
            raise _Injected("injected at the end of the swap")

        with mock.patch.object(surgery, "derived_buffers", failing):
            try:
                grow_model(twin, stage, seed=program.seed, stage_index=k)
                out.failures.append(Failure("fuzzer", k, "the injected fault was not reached (derived_buffers)"))
            except _Injected:
                pass
        diff = twin_snap.differences(twin)
        if diff:
            out.failures.append(Failure("rollback", k, f"a fault at the end of the swap left: {diff}"))
            return
    result = grow_model(twin, stage, seed=program.seed, stage_index=k)
    a, b = twin.state_dict(), model.state_dict()
    if a.keys() != b.keys() or any(not torch.equal(a[n], b[n]) for n in a) or twin.config != model.config:
        out.failures.append(Failure("determinism", k, "the same seed gave other weights"))
    result.rollback()
    diff = twin_snap.differences(twin)
    if diff:
        out.failures.append(Failure("rollback", k, f"GrowthResult.rollback() left: {diff}"))


# ------------------------------------------------------------------------------------------------ optimizer
def _optimizer_snapshot(optimizer):
    if optimizer is None:
        return None
    groups = [list(g["params"]) for g in optimizer.param_groups]
    state = {id(p): {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in s.items()}
             for p, s in optimizer.state.items()}
    return groups, state


def _check_optimizer(optimizer, before, result, stage: GrowthStage, model: GPT, tokens, k: int,
                     out: CaseResult) -> bool:
    """Patch ``optimizer`` for the growth and check it per element; ``False`` when the patch refused (the growth
    is then rolled back, as the callback does)."""
    groups_before, state_before = before
    recipe = stage.optimizer_state
    try:
        patch = plan_optimizer_patch(optimizer, result, recipe)
        patch.apply()
    except (GrowthError, ValueError) as err:
        out.outcomes["optimizer-refused"] += 1
        result.rollback()
        diff = []
        if [list(g["params"]) for g in optimizer.param_groups] != groups_before:
            diff.append("param groups changed")
        if diff:
            out.failures.append(Failure("optimizer", k, f"patch refused ({err}) and {diff}"))
        return False
    out.outcomes["optimizer-patched"] += 1
    problems = _optimizer_problems(optimizer, state_before, result, recipe, model)
    patch.undo()
    if [list(g["params"]) for g in optimizer.param_groups] != groups_before or any(
            not _same_state(optimizer.state.get(p), state_before.get(id(p))) for g in groups_before for p in g):
        problems.append("undo() did not restore the param groups and state")
    patch.apply()
    try:
        train_steps(model, optimizer, tokens, steps=1)
    except Exception as err:
        problems.append(f"a step after the patch fails: {type(err).__name__}: {err}"[:300])
    if problems:
        out.failures.append(Failure("optimizer", k, f"{type(optimizer).__name__} {recipe}: {problems[:3]}"))
    return True


def _same_state(a, b) -> bool:
    if not a and not b:
        return True
    if a is None or b is None or a.keys() != b.keys():
        return False
    return all(torch.equal(a[k], b[k]) if isinstance(a[k], torch.Tensor) else a[k] == b[k] for k in a)


def _optimizer_problems(optimizer, state_before, result, recipe: str, model: GPT) -> list[str]:
    problems = []
    where: dict[int, int] = Counter()
    for g in optimizer.param_groups:
        for p in g["params"]:
            where[id(p)] += 1
    group_of = {id(p): i for i, g in enumerate(optimizer.param_groups) for p in g["params"]}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            if where[id(p)]:
                problems.append(f"frozen {name} is in the optimizer")
            continue
        spec = result.plan.tensors.get(name)
        if name in result.added:
            source, _ = result.added[name]
            if where[id(p)] != 1 and where[id(source)] == 1:
                problems.append(f"new block's {name} is in {where[id(p)]} groups")
            elif where[id(p)] and group_of.get(id(p)) != _group_before(optimizer, result, source, group_of):
                problems.append(f"new block's {name} is not in its source's group")
            old_state = state_before.get(id(source))
            new_state = optimizer.state.get(p)
            if old_state and new_state:
                for key, value in old_state.items():
                    if not isinstance(value, torch.Tensor) or value.ndim == 0:
                        continue
                    if recipe in ("asymmetric", "asymmetric-scaled", "drop") and new_state[key].abs().max() != 0:
                        problems.append(f"new block's {name} {key} is not zero under {recipe}")
                    if recipe == "copy" and value.shape == new_state[key].shape and not torch.equal(value,
                                                                                                   new_state[key]):
                        problems.append(f"new block's {name} {key} is not its source's under copy")
            continue
        old = result.old_params.get(name)
        if old is None:
            continue  # not replaced
        if where[id(old)]:
            problems.append(f"the pre-growth {name} is still in the optimizer")
        if where[id(p)] != 1:
            problems.append(f"grown {name} is in the optimizer {where[id(p)]} times")
        old_state, new_state = state_before.get(id(old)), optimizer.state.get(p)
        if not old_state:
            continue
        if not new_state:
            problems.append(f"grown {name} lost its state")
            continue
        new_region = torch.zeros(p.shape, dtype=torch.bool)
        for piece in result.new_entries.get(name, []):
            new_region[piece] = True
        relaid = spec is not None and any(result.plan.channels[d.channel].layout is not None for d in spec.dims)
        for key, value in old_state.items():
            grown = new_state.get(key)
            if not isinstance(value, torch.Tensor) or value.ndim == 0:
                if isinstance(value, torch.Tensor) and not torch.equal(value, grown):
                    problems.append(f"{name} {key} changed")
                continue
            if grown is None or grown.shape != p.shape:
                problems.append(f"{name} {key} has shape {None if grown is None else tuple(grown.shape)}")
                continue
            new_part, old_part = grown[new_region], grown[~new_region]
            if recipe in ("asymmetric", "asymmetric-scaled", "drop") and new_part.numel() and new_part.abs().max():
                problems.append(f"{name} {key}: new entries not zero under {recipe}")
            if recipe == "drop" and grown.abs().max():
                problems.append(f"{name} {key}: not all zero under drop")
            if recipe in ("asymmetric", "copy"):
                if relaid or spec is None:
                    same = torch.equal(old_part.sort().values, value.flatten().sort().values)
                else:
                    same = torch.equal(grown[tuple(slice(0, n) for n in value.shape)], value)
                if not same:
                    problems.append(f"{name} {key}: old entries do not keep their state under {recipe}")
            if recipe == "copy" and new_part.numel() and not torch.isin(new_part, torch.cat(
                    [value.flatten(), torch.zeros(1, dtype=value.dtype)])).all():
                problems.append(f"{name} {key}: new entries are not copies of old state under copy")
    return problems


def _group_before(optimizer, result, source, group_of) -> int | None:
    """The group a new block's parameter should be in: its source's (the source may itself have been replaced)."""
    if id(source) in group_of:
        return group_of[id(source)]
    for name, old in result.old_params.items():
        if old is source:
            return group_of.get(id(result.new_params[name]))
    return None
