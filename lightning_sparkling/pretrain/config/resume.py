"""Resuming a ``sparkling pretrain`` run, checked before anything starts: finding its Lightning checkpoints
(``out_dir/checkpoints/step-*.ckpt``: :func:`find_resume_checkpoint`, :func:`newest_readable_checkpoint`), checking
that one fits the configured run (:func:`check_resume_checkpoint`: readable, grown by a prefix of the growth stages,
the same model and optimizers), and checking that ``out_dir`` can be written (:func:`check_out_dir`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from lightning_sparkling.growth.record import growth_state
from lightning_sparkling.growth.stage import GrowthStage
from lightning_sparkling.pretrain.errors import ConfigError
from lightning_sparkling.pretrain.model.model_config import _expected_shapes

__all__ = ["check_out_dir", "check_resume_checkpoint", "find_resume_checkpoint", "newest_readable_checkpoint"]

# ------------------------------------------------------------------------------------------------------------ finding
_STEP_RE = re.compile(r"step-(\d+)")


def _step_checkpoints(out_dir: Path) -> list[Path]:
    """``out_dir/checkpoints/step-*.ckpt`` (files, or directories for sharded FSDP checkpoints), newest (highest
    step) first. Hidden names (the temporaries of unfinished writes, ``.step-*.ckpt.*.tmp``) are left out, except a
    checkpoint swapped aside by a replacement that a kill interrupted (``.step-*.ckpt.old-*`` with no
    ``step-*.ckpt``): the only copy of that step, read where it is (the next save renames it back)."""
    from lightning_sparkling.pretrain.model.checkpointing import orphaned_original

    folder = Path(out_dir) / "checkpoints"
    found = []
    for path in folder.iterdir() if folder.is_dir() else []:
        name = path.name
        if name.startswith(".") and (original := orphaned_original(path)) is not None:
            name = original.name
        match = _STEP_RE.fullmatch(name.removesuffix(".ckpt"))
        if match and name.endswith(".ckpt") and not name.startswith("."):
            found.append((int(match.group(1)), path.stat().st_mtime, path))
    return [path for *_, path in sorted(found, reverse=True)]


def find_resume_checkpoint(out_dir: Path) -> Path | None:
    """The newest Lightning checkpoint ``out_dir/checkpoints/step-*.ckpt`` (highest step; files, or directories
    for sharded FSDP2 checkpoints), or ``None``."""
    found = _step_checkpoints(out_dir)
    return found[0] if found else None


def newest_readable_checkpoint(out_dir: Path) -> tuple[Path | None, list[str]]:
    """The newest ``out_dir/checkpoints/step-*.ckpt`` that can be read (what ``resume: auto`` takes), and the newer
    ones skipped because they cannot (``"path (reason)"``: truncated, corrupt, a sharded directory without
    ``meta.pt``). Hidden temporaries of unfinished writes (``.step-*.ckpt.*.tmp``) are never candidates."""
    skipped: list[str] = []
    for path in _step_checkpoints(out_dir):
        try:
            _read_checkpoint(path)
        except Exception as err:
            skipped.append(f"{path} ({_read_failure(err)})")
            continue
        return path, skipped
    return None, skipped


def _read_failure(err: BaseException) -> str:
    """The first line of why a checkpoint could not be read, e.g. ``RuntimeError: PytorchStreamReader failed``."""
    return f"{type(err).__name__}: {err}".strip().splitlines()[0].split(". ")[0].rstrip(":. ")


def _newest_to_resume(out_dir: Path, notes: list[str]) -> Path | None:
    """``resume: auto`` / ``true``: the newest readable checkpoint of ``out_dir`` (``None`` when there is none); newer
    unreadable ones (a write killed by a preemption) are skipped with a warning in ``notes``.

    Raises:
        ConfigError: (``resume``) there are checkpoints, and none is readable.
    """
    path, skipped = newest_readable_checkpoint(out_dir)
    if skipped and path is None:
        raise ConfigError("resume", f"no checkpoint in {out_dir / 'checkpoints'} can be read ({'; '.join(skipped)}): "
                                    "they are corrupt, truncated or not `sparkling pretrain` checkpoints; move them "
                                    "away to start afresh, or give another out_dir")
    if skipped:
        notes.append(f"warning: resume: skipped {len(skipped)} unreadable checkpoint(s), newest first: "
                     f"{'; '.join(skipped)}; resuming from the newest readable one, {path}")
    return path


# ------------------------------------------------------------------------------------------------------------ checks
_IGNORED_CONFIG_FIELDS = ("name", "hf_config")  # labels: they do not change the model


def _older_checkpoints(path: Path) -> list[Path]:
    """Other ``step-*.ckpt`` beside ``path``, newest first (what to resume from instead of a broken one)."""
    found = []
    for other in path.parent.iterdir() if path.parent.is_dir() else []:
        match = _STEP_RE.fullmatch(other.name.removesuffix(".ckpt"))
        if match and other.name.endswith(".ckpt") and other != path:
            found.append((int(match.group(1)), other))
    return [p for _, p in sorted(found, reverse=True)]


def _read_checkpoint(path: Path) -> tuple[dict[str, Any], dict[str, tuple[int, ...]] | None, str]:
    """``(checkpoint without tensors loaded, parameter name -> shape or None, what kind)`` of a Lightning checkpoint:
    a ``.ckpt`` file (memory-mapped: no tensor is read) or a sharded directory (FSDP2/FSDP1: ``meta.pt`` plus the
    ``torch.distributed.checkpoint`` metadata, which lists every tensor's global shape)."""
    import torch

    if path.is_dir():
        meta = path / "meta.pt"
        if not meta.is_file():
            raise ValueError("a directory without meta.pt (not a sharded Lightning checkpoint)")
        checkpoint = torch.load(meta, map_location="cpu", weights_only=False)
        return checkpoint, _sharded_shapes(path), "sharded"
    checkpoint = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ValueError("not a Lightning checkpoint (no state_dict)")
    shapes = {name: tuple(t.shape) for name, t in checkpoint["state_dict"].items() if hasattr(t, "shape")}
    return checkpoint, shapes, "file"


def _sharded_shapes(path: Path) -> dict[str, tuple[int, ...]] | None:
    """Parameter name -> global shape of a sharded checkpoint directory, from its ``torch.distributed.checkpoint``
    metadata (``None`` when that index cannot be read: the shapes are then checked when Lightning loads it)."""
    try:
        from torch.distributed.checkpoint import FileSystemReader
        from torch.distributed.checkpoint.metadata import TensorStorageMetadata

        metadata = FileSystemReader(str(path)).read_metadata().state_dict_metadata
        shapes = {}
        for name, item in metadata.items():
            prefix = next((p for p in ("state_dict.", "model.") if name.startswith(p)), None)
            if prefix is not None and isinstance(item, TensorStorageMetadata):
                shapes[name[len(prefix):]] = tuple(item.size)
        return shapes
    except Exception:
        return None


def _clean_name(name: str) -> str:
    """A checkpoint parameter name as a plain ``litgpt.GPT`` state_dict name (no module or wrapper prefixes)."""
    from lightning_sparkling.growth.surgery import clean_name

    return clean_name(name).removeprefix("model.")


def check_resume_checkpoint(path: Path, config: Any, stages: list[GrowthStage], *, tie_embeddings: bool,
                            num_optimizers: int | None = None, configs: Sequence[Any] | None = None) -> list[str]:
    """Check, before anything starts, that the run can resume from the Lightning checkpoint ``path``: it is
    readable, its growth was done by a prefix of ``stages`` (the same stages, none skipped), and its model is the
    configured one grown by those stages (litgpt ``Config`` fields, parameter names and shapes, tied embeddings,
    number of optimizers).

    Args:
        path: a ``.ckpt`` file or a sharded checkpoint directory (FSDP2/FSDP1, with ``meta.pt``).
        config: the run's starting ``litgpt.Config``.
        stages: the run's growth stages.
        tie_embeddings: the run's ``train.tie_embeddings``.
        num_optimizers: how many optimizers the run builds (2 with Muon: Muon + AdamW), or ``None`` not to check.
        configs: the model's config before each stage and after the last, when the caller planned the stages
            (``resolve``: its dry runs' configs); ``None``: the stages the checkpoint applied are planned here.

    Returns:
        notes on what was checked (e.g. a sharded directory's shapes could not be read).

    Raises:
        ConfigError: (key ``resume``) naming the file, what differs and the fix.
    """
    path = Path(path)
    checkpoint, shapes, kind = _readable_checkpoint(path)
    notes: list[str] = []
    grown = _check_resumed_stages(path, checkpoint, stages)
    expected = configs[grown] if configs is not None else _grown_config(config, stages[:grown], tie_embeddings)
    _check_resumed_config(path, checkpoint, expected, grown, tie_embeddings)
    if shapes is not None:
        _check_resumed_shapes(path, shapes, expected, grown, tie_embeddings)
    else:
        notes.append(f"resume: {path} is a sharded checkpoint whose tensor index could not be read: its growth "
                     "stages and model_config were checked, parameter shapes are checked when it loads")
    if num_optimizers is not None and kind == "file" and "optimizer_states" in checkpoint:
        _check_resumed_optimizers(path, checkpoint, num_optimizers)
    return notes


_FRESH = "or start a fresh out_dir (--out_dir NEW, or --resume false)"
"""The way out every refusal of :func:`check_resume_checkpoint` ends with."""


def _readable_checkpoint(path: Path) -> tuple[dict[str, Any], dict[str, tuple[int, ...]] | None, str]:
    """:func:`_read_checkpoint` of ``path``, or a :class:`ConfigError` naming an older checkpoint to resume from."""
    older = _older_checkpoints(path) if not path.is_dir() else []
    instead = (f"resume from an older one (--resume {older[0]})" if older else "start afresh (--resume false)")
    try:
        return _read_checkpoint(path)
    except Exception as err:
        reason = _read_failure(err)
        raise ConfigError("resume", f"cannot read the checkpoint {str(path)!r} ({reason}): it is corrupt, truncated "
                                    f"(a write that did not finish?) or not a `sparkling pretrain` checkpoint; "
                                    f"{instead}") from err


def _check_resumed_stages(path: Path, checkpoint: dict[str, Any], stages: list[GrowthStage]) -> int:
    """The number of growth stages the checkpoint was grown by, checked to be the first of ``stages`` (the same
    stages, none skipped, and the next one not due before the checkpoint's step)."""
    step = int(checkpoint.get("global_step", 0) or 0)
    state = growth_state(checkpoint.get("callbacks")) or {}
    grown = int(state.get("grown", 0) or 0)
    try:
        applied = [GrowthStage(**s) for s in (state.get("stages") or [])[:grown]]
    except (TypeError, ValueError) as err:
        raise ConfigError("resume", f"{str(path)!r} holds growth stages this version cannot read ({err})") from err
    if grown > len(stages):
        raise ConfigError("resume", f"{str(path)!r} was grown by {grown} stage(s) but growth.stages has "
                                    f"{len(stages)}: resume with the growth.stages it was trained with "
                                    f"({[s.to_dict() for s in applied]}), {_FRESH}")
    from lightning_sparkling.growth.recipes import same_keys

    for k, (done, given) in enumerate(zip(applied, stages)):
        named = "recipe" in (state["stages"][k] or {})  # checkpoints before stages named their recipe: keys alone
        if (done != given) if named else not same_keys(done, given):
            _refuse_other_stage(path, k, done, given)
    if grown < len(stages) and cast(int, stages[grown].at_step) < step:
        raise ConfigError("resume", f"{str(path)!r} is at step {step} and was not grown by growth.stages[{grown}] "
                                    f"(at_step={stages[grown].at_step}): that growth would happen late, at step "
                                    f"{step}; resume with the growth.stages it was trained with, {_FRESH}")
    return grown


def _refuse_other_stage(path: Path, k: int, done: GrowthStage, given: GrowthStage) -> None:
    """Refuse a checkpoint grown by another ``growth.stages[k]`` than the config's, naming the fields that differ
    (and the recipe, when only a recipe's keys differ)."""
    from dataclasses import fields

    from lightning_sparkling.growth.stage import RECIPES

    differing = [f.name for f in fields(done) if f.compare and getattr(done, f.name) != getattr(given, f.name)]
    diff = ", ".join(f"{f}: checkpoint {getattr(done, f)!r}, config {getattr(given, f)!r}" for f in differing)
    trained = done.recipe if done.recipe != "auto" else "paper (the recipe of runs started before recipes existed)"
    recipe = (f"; only the recipe's keys differ: growth.recipe: {trained}"
              + (" or the recipe it was trained with" if done.recipe == "auto" else "")
              if set(differing) <= {"recipe", *(k for keys in RECIPES.values() for k in keys)} else "")
    raise ConfigError("resume", f"{str(path)!r} was grown by another growth.stages[{k}] than the config's "
                                f"({diff}): resume with the stages it was trained with{recipe}, {_FRESH}")


def _grown_config(config: Any, applied: list[GrowthStage], tie_embeddings: bool) -> Any:
    """The litgpt ``Config`` of ``config`` grown by the ``applied`` stages (the model the checkpoint must hold)."""
    from lightning_sparkling.growth.plan import GrowthError, plan_growth

    expected = config
    try:
        for k, stage in enumerate(applied):
            expected = plan_growth(expected, stage, seed=0, stage_index=k, tied_embeddings=tie_embeddings).new_config
    except GrowthError as err:  # already checked by resolve(); kept for direct callers
        raise ConfigError("resume", str(err)) from err
    return expected


def _check_resumed_config(path: Path, checkpoint: dict[str, Any], expected: Any, grown: int,
                          tie_embeddings: bool) -> None:
    """The checkpoint's ``train.tie_embeddings`` and litgpt ``Config`` fields are the run's (``expected``: the
    configured model grown by its ``grown`` applied stages)."""
    from dataclasses import asdict

    hparams = checkpoint.get("hyper_parameters") or {}
    if "tie_embeddings" in hparams and bool(hparams["tie_embeddings"]) != bool(tie_embeddings):
        raise ConfigError("resume", f"{str(path)!r} was trained with train.tie_embeddings={hparams['tie_embeddings']}, "
                                    f"the config gives {tie_embeddings}: resume with the same setting, {_FRESH}")
    saved = checkpoint.get("model_config")
    if not isinstance(saved, dict):
        return
    want = asdict(expected)
    differ = [f for f in want if f in saved and f not in _IGNORED_CONFIG_FIELDS and saved[f] != want[f]]
    if differ:
        detail = ", ".join(f"{f}: checkpoint {saved[f]!r}, config {want[f]!r}" for f in differ[:4])
        grown_by = f" grown by its {grown} applied stage(s)" if grown else ""
        raise ConfigError("resume", f"{str(path)!r} holds another model than model_config{grown_by} ({detail}"
                                    f"{', ...' if len(differ) > 4 else ''}): resume with the model_config it was "
                                    f"trained with, {_FRESH}")


def _check_resumed_shapes(path: Path, shapes: dict[str, tuple[int, ...]], expected: Any, grown: int,
                          tie_embeddings: bool) -> None:
    """The checkpoint holds exactly the parameters (names and shapes) of ``expected``."""
    found = {_clean_name(n): s for n, s in shapes.items()}
    want_shapes = _expected_shapes(expected)
    tied_names = {"lm_head.weight", "transformer.wte.weight"} if tie_embeddings else set()
    missing = sorted(n for n in set(want_shapes) - set(found) if n not in tied_names)
    extra = sorted(set(found) - set(want_shapes))
    wrong = [f"{n}: checkpoint {found[n]}, config {s}" for n, s in want_shapes.items()
             if n in found and found[n] != s]
    if missing or extra or wrong:
        detail = "; ".join(([f"missing {', '.join(missing[:3])}"] if missing else [])
                           + ([f"unexpected {', '.join(extra[:3])}"] if extra else []) + wrong[:3])
        raise ConfigError("resume", f"{str(path)!r} does not hold the parameters of model_config (after "
                                    f"{grown} growth stage(s)): {detail}; resume with the model_config it was "
                                    f"trained with, {_FRESH}")


def _check_resumed_optimizers(path: Path, checkpoint: dict[str, Any], num_optimizers: int) -> None:
    """The checkpoint holds as many optimizer states as the run builds."""
    have = len(checkpoint["optimizer_states"])
    if have != num_optimizers:
        raise ConfigError("resume", f"{str(path)!r} holds {have} optimizer state(s) and this run builds "
                                    f"{num_optimizers} (Muon runs have 2: Muon + AdamW): resume with the "
                                    f"optimizer it was trained with, {_FRESH}")


# ------------------------------------------------------------------------------------------------------------ out_dir
def check_out_dir(out_dir: Path) -> None:
    """Refuse an ``out_dir`` that cannot be created or written to, before anything is written. A temporary folder is
    created (and removed) in ``out_dir``, or in its nearest existing parent when it does not exist yet: nothing is
    left behind, whatever the outcome.

    Raises:
        ConfigError: (``out_dir``) naming the folder, why and the fix.
    """
    import shutil
    import tempfile

    path = Path(out_dir).expanduser().absolute()
    fix = "give a folder you can write to (--out_dir PATH)"
    try:
        existing = next(p for p in (path, *path.parents) if p.exists())
    except OSError as err:
        raise ConfigError("out_dir", f"cannot check {str(out_dir)!r} ({err.strerror or err}): {fix}") from err
    if not existing.is_dir():
        where = "it is a file" if existing == path else f"{str(existing)!r} is a file"
        raise ConfigError("out_dir", f"cannot create the folder {str(out_dir)!r}: {where}, not a folder: {fix}")
    try:
        probe = tempfile.mkdtemp(prefix=".sparkling-write-check-", dir=existing)
    except OSError as err:
        why = err.strerror or str(err)
        what = (f"cannot write in {str(out_dir)!r} ({why})" if existing == path else
                f"cannot create {str(out_dir)!r}: creating a folder in {str(existing)!r} fails ({why})")
        raise ConfigError("out_dir", f"{what}: {fix}") from err
    shutil.rmtree(probe, ignore_errors=True)
