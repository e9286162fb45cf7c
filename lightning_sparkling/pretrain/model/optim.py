"""Optimizers from litgpt-style specs (``"AdamW"``, ``"torch.optim.Muon"`` or ``{class_path, init_args}``): the
spec normalized and checked before a run (:func:`normalize_optimizer`, :func:`_optimizer_info`,
:func:`_check_fresh_bias_correction`), resolved to a class (:func:`resolve_optimizer`) and built over a GPT (Muon for
the block matrices plus AdamW for the rest: :func:`build_optimizers`), with the step-interval LR schedule of each
(:func:`lr_schedule_steps`, :func:`schedule_configs`) and global-norm clipping (:func:`clip_global_norm`). Adam and
AdamW run fused where their parameters allow it (:func:`fused_kwargs`), as litgpt's pretrain does on CUDA.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn

from lightning_sparkling.growth.schedules import WarmupStableDecay
from lightning_sparkling.pretrain.errors import ConfigError

if TYPE_CHECKING:
    from lightning.pytorch.utilities.types import OptimizerLRSchedulerConfig
    from litgpt import GPT

    from lightning_sparkling.growth.stage import GrowthStage

__all__ = ["DEFAULT_MIN_LR_RATIO", "DEFAULT_WARMUP_FRACTION", "build_optimizers", "clip_global_norm", "fused_kwargs",
           "is_muon", "lr_schedule_steps", "min_lr_ratio_of", "normalize_optimizer", "resolve_optimizer",
           "schedule_configs"]

DEFAULT_WARMUP_FRACTION = 0.03
"""Warmup length when neither ``lr_warmup_steps`` nor ``lr_warmup_fraction`` is given (the paper: 3% of steps)."""

DEFAULT_MIN_LR_RATIO = 0.01
"""``min_lr / lr`` when ``min_lr`` is not given (the paper: final LR ratio 0.01)."""


# ---------------------------------------------------------------------------------------------------------- spec
def resolve_optimizer(optimizer: str | dict) -> tuple[type[torch.optim.Optimizer], dict[str, Any]]:
    """Resolve a litgpt-style optimizer spec into ``(class, init_args)``.

    Args:
        optimizer: a class name in ``torch.optim`` (``"AdamW"``), a dotted path (``"torch.optim.Muon"``), or
            ``{"class_path": ..., "init_args": {...}}``.

    Example::

        >>> resolve_optimizer({"class_path": "torch.optim.AdamW", "init_args": {"lr": 1e-3}})
        (<class 'torch.optim.adamw.AdamW'>, {'lr': 0.001})
        >>> resolve_optimizer("SGD")[0].__name__
        'SGD'
    """
    if isinstance(optimizer, str):
        class_path, init_args = optimizer, {}
    elif isinstance(optimizer, dict):
        if "class_path" not in optimizer:
            raise ValueError(f"optimizer spec {optimizer!r} needs a 'class_path'")
        unknown = set(optimizer) - {"class_path", "init_args"}
        if unknown:
            raise ValueError(f"optimizer spec has unknown keys {sorted(unknown)}: use class_path and init_args")
        class_path, init_args = optimizer["class_path"], copy.deepcopy(dict(optimizer.get("init_args") or {}))
    else:
        raise TypeError(f"optimizer must be a name or a {{'class_path', 'init_args'}} dict, got {optimizer!r}")
    module_name, _, class_name = class_path.rpartition(".")
    module_name = module_name or "torch.optim"
    try:
        module = __import__(module_name, fromlist=[class_name])
        cls = getattr(module, class_name)
    except (ImportError, AttributeError) as err:
        raise ValueError(f"optimizer: cannot import {class_name!r} from {module_name!r}") from err
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)):
        raise ValueError(f"optimizer: {class_path!r} is not a torch.optim.Optimizer")
    if "betas" in init_args and isinstance(init_args["betas"], list):
        init_args["betas"] = tuple(init_args["betas"])
    return cls, init_args


def is_muon(cls: type) -> bool:
    muon = getattr(torch.optim, "Muon", None)
    return (muon is not None and issubclass(cls, muon)) or cls.__name__ == "Muon"


def normalize_optimizer(spec: Any) -> str | dict:
    """litgpt's optimizer spec as ``"Name"`` or ``{"class_path": ..., "init_args": {...}}``. Keys given next to
    ``class_path`` (what ``--optimizer.lr 0.01`` or ``--optimizer.init_args.lr 0.01`` produce on the command line)
    are moved into ``init_args``; their values are parsed as YAML (``"0.01"`` -> ``0.01``)."""
    import yaml

    if hasattr(spec, "as_dict"):
        spec = spec.as_dict()
    if isinstance(spec, str) or spec is None:
        return spec or "AdamW"
    if not isinstance(spec, dict):
        raise ConfigError("optimizer", f"expected a name or {{class_path, init_args}}, got {spec!r}")
    spec = dict(spec)
    if "class_path" not in spec:
        raise ConfigError("optimizer.class_path", f"missing (got {sorted(spec)}): give e.g. torch.optim.AdamW")
    init_args = dict(spec.pop("init_args", None) or {})
    class_path = spec.pop("class_path")
    for key, value in spec.items():
        init_args[key] = yaml.safe_load(value) if isinstance(value, str) else value
    return {"class_path": class_path, "init_args": init_args}


def _optimizer_info(spec: str | dict) -> tuple[str, bool, float]:
    """``(class name, is Muon, peak lr)``: the optimizer is built on a dummy parameter so that a wrong class or
    ``init_args`` fails here, naming the key."""
    try:
        cls, init_args = resolve_optimizer(spec)
    except (ValueError, TypeError) as err:
        raise ConfigError("optimizer", str(err)) from err
    try:
        opt = cls([torch.nn.Parameter(torch.zeros(2, 2))], **init_args)
    except TypeError as err:
        raise ConfigError("optimizer.init_args", f"{cls.__name__} rejects them: {err}") from err
    except ValueError as err:
        raise ConfigError("optimizer.init_args", str(err)) from err
    lr = float(opt.defaults.get("lr", opt.param_groups[0]["lr"]))
    if not lr > 0:
        raise ConfigError("optimizer.init_args.lr", f"must be positive, got {lr}")
    return cls.__name__, is_muon(cls), lr


def _optimizer_defaults(spec: str | dict) -> dict[str, Any]:
    """The hyperparameters (``defaults``) of the optimizer ``spec`` builds (already checked by ``_optimizer_info``)."""
    cls, init_args = resolve_optimizer(spec)
    return dict(cls([torch.nn.Parameter(torch.zeros(2, 2))], **init_args).defaults)


def _check_fresh_bias_correction(stages: list[GrowthStage], spec: str | dict, optimizer_name: str,
                                 uses_muon: bool) -> None:
    """``bias_correction: fresh`` redoes Adam's bias correction: refuse it for an optimizer without ``betas``."""
    fresh = next((k for k, s in enumerate(stages) if s.bias_correction == "fresh"), None)
    if fresh is not None and (uses_muon or "betas" not in _optimizer_defaults(spec)):
        raise ConfigError(f"growth.stages[{fresh}].bias_correction",
                          f"'fresh' redoes Adam's bias correction, but the optimizer {optimizer_name} "
                          f"{'(Muon for matrices) ' if uses_muon else ''}has no betas: use AdamW or Adam, or "
                          "bias_correction: shared")


# ---------------------------------------------------------------------------------------------------------- build
#: the devices whose fused Adam(W) kernel a run uses by default: CUDA (litgpt's pretrain) and the CPU, where the
#: fused step measured 4-7x faster than ``foreach`` (docs/ARCHITECTURE.md, "Fused AdamW")
FUSED_DEVICES = ("cuda", "cpu")
_FUSED_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def fused_kwargs(cls: type[torch.optim.Optimizer], init_args: dict[str, Any],
                 params: Sequence[torch.Tensor]) -> dict[str, bool]:
    """``{"fused": True}`` where the fused kernel can run the optimizer, else ``{}``: ``cls`` is Adam or AdamW
    (the optimizers whose state the growth patches; litgpt's pretrain passes ``fused`` the same way), the spec
    chooses no implementation itself (``fused``, ``foreach``, ``differentiable`` not in ``init_args``), and every
    parameter is a floating tensor on a device of :data:`FUSED_DEVICES` (DTensors of FSDP2 included).

    Args:
        cls: the optimizer class.
        init_args: its arguments from the spec.
        params: the parameters it will optimize.

    Example::

        >>> p = torch.nn.Parameter(torch.zeros(2))
        >>> fused_kwargs(torch.optim.AdamW, {"lr": 1e-3}, [p]), fused_kwargs(torch.optim.AdamW, {"foreach": True}, [p])
        ({'fused': True}, {})
        >>> fused_kwargs(torch.optim.SGD, {}, [p])
        {}
    """
    if not issubclass(cls, (torch.optim.Adam, torch.optim.AdamW)):
        return {}
    if {"fused", "foreach", "differentiable"} & set(init_args) or not params:
        return {}
    if all(p.device.type in FUSED_DEVICES and p.dtype in _FUSED_DTYPES for p in params):
        return {"fused": True}
    return {}


#: the param-group flags that choose an optimizer's kernel; a checkpoint's groups carry the saving run's
KERNEL_FLAGS = ("fused", "foreach")


def keep_kernel_on_load(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """Make ``optimizer`` keep the kernel it was built with across ``load_state_dict``: torch restores each param
    group from the checkpoint, ``fused`` and ``foreach`` included, so a resume would run the saving run's kernel
    whatever this run's spec and precision chose (and ``_step_supports_amp_scaling``, set at construction, would
    disagree with the groups). A post-hook sets the flags back to ``optimizer.defaults`` and hosts each ``step``
    where that kernel keeps it (on the parameter's device, float32, for fused or capturable; on the CPU otherwise,
    as torch's own init does), and says once, on rank 0, when the checkpoint ran another kernel.

    Args:
        optimizer: the optimizer to protect (returned, for chaining).

    Example::

        >>> p = torch.nn.Parameter(torch.zeros(2))
        >>> foreach = torch.optim.AdamW([p], foreach=True)
        >>> p.grad = torch.ones(2); foreach.step()
        >>> fused = keep_kernel_on_load(torch.optim.AdamW([p], fused=True))
        >>> fused.load_state_dict(foreach.state_dict())
        >>> fused.param_groups[0]["fused"], fused.param_groups[0]["foreach"]
        (True, None)
    """
    optimizer.register_load_state_dict_pre_hook(_note_saved_kernel)
    optimizer.register_load_state_dict_post_hook(_restore_kernel)
    return optimizer


def _kernel_name(group: dict[str, Any]) -> str:
    return "fused" if group.get("fused") else "foreach" if group.get("foreach") else "the default (for-loop or foreach)"


def _note_saved_kernel(optimizer: torch.optim.Optimizer, state_dict: dict[str, Any]) -> None:
    """Remember the checkpoint's kernel (for the post-hook's note); changes nothing."""
    groups = state_dict.get("param_groups") or [{}]
    optimizer._sparkling_saved_kernel = _kernel_name(groups[0])  # type: ignore[attr-defined]


def _restore_kernel(optimizer: torch.optim.Optimizer) -> None:
    """The post-hook of :func:`keep_kernel_on_load`."""
    for group in optimizer.param_groups:
        for flag in KERNEL_FLAGS:
            if flag in optimizer.defaults:
                group[flag] = optimizer.defaults[flag]
        on_device = bool(group.get("fused") or group.get("capturable"))
        for p in group["params"]:
            step = optimizer.state.get(p, {}).get("step")
            if isinstance(step, torch.Tensor):
                device = p.device if on_device else torch.device("cpu")
                optimizer.state[p]["step"] = step.to(dtype=torch.float32, device=device)
    saved = getattr(optimizer, "_sparkling_saved_kernel", None)
    ours = _kernel_name(optimizer.defaults)
    if saved is not None and saved != ours:
        from lightning.pytorch.utilities.rank_zero import rank_zero_info

        rank_zero_info(f"[sparkling] note: the checkpoint's {type(optimizer).__name__} ran {saved}; this run's "
                       f"optimizer spec chooses {ours}, and the run goes on with it (the moments and step carry over)")


def _split_muon_params(model: GPT) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    """``(muon, adamw)``: the trainable 2-D weights of the transformer blocks, and every other trainable parameter
    (embeddings, ``lm_head``, norms, biases), each parameter once (tied weights too)."""
    matrix_ids = {id(p) for p in model.transformer.h.parameters() if p.ndim == 2}
    muon: list[nn.Parameter] = []
    adamw: list[nn.Parameter] = []
    seen: set[int] = set()
    for p in model.parameters():
        if id(p) in seen or not p.requires_grad:
            continue
        seen.add(id(p))
        (muon if id(p) in matrix_ids else adamw).append(p)
    return muon, adamw


def build_optimizers(model: GPT, optimizer_spec: str | dict, uses_muon: bool,
                      muon_adamw: dict[str, Any]) -> list[torch.optim.Optimizer]:
    """The optimizer of ``optimizer_spec`` over the trainable parameters of ``model``; with Muon, Muon over the
    block matrices and AdamW (Muon's ``lr`` and ``weight_decay``, ``betas=(0.9, 0.95)``, ``eps=1e-8``, updated by
    ``muon_adamw``) over the rest, in that order. Adam and AdamW are fused where :func:`fused_kwargs` allows it, and
    keep that kernel across a resume (:func:`keep_kernel_on_load`).

    Args:
        model: the GPT.
        optimizer_spec: a spec for :func:`resolve_optimizer`.
        uses_muon: whether that spec is Muon.
        muon_adamw: AdamW ``init_args`` overrides (Muon only).
    """
    cls, init_args = resolve_optimizer(optimizer_spec)
    if not uses_muon:
        params = [p for p in model.parameters() if p.requires_grad]
        fused = fused_kwargs(cls, init_args, params)
        # mypy checks the keywords against the base Optimizer(params, defaults), not against the class given
        return [keep_kernel_on_load(cls(params, **init_args, **fused))]  # type: ignore[arg-type]
    muon_params, adamw_params = _split_muon_params(model)
    main = cls(muon_params, **init_args)
    aux_args = {"lr": main.defaults["lr"], "betas": (0.9, 0.95), "eps": 1e-8,
                "weight_decay": main.defaults.get("weight_decay", 0.0)}
    aux_args.update(muon_adamw)
    if isinstance(aux_args.get("betas"), list):
        aux_args["betas"] = tuple(aux_args["betas"])
    aux_args.update(fused_kwargs(torch.optim.AdamW, aux_args, adamw_params))
    return [main, keep_kernel_on_load(torch.optim.AdamW(adamw_params, **aux_args))]


def clip_global_norm(optimizers: list[Any], max_norm: float | None) -> None:
    """Clip the gradients of every parameter of ``optimizers`` to one global norm ``max_norm`` (falsy: no-op)."""
    if max_norm:
        params = [p for opt in optimizers for g in opt.param_groups for p in g["params"] if p.grad is not None]
        torch.nn.utils.clip_grad_norm_(params, max_norm)


# ---------------------------------------------------------------------------------------------------------- schedule
def warmup_steps(total: int, lr_warmup_steps: int | None, lr_warmup_fraction: float | None) -> int:
    """The warmup length of a run of ``total`` steps: ``lr_warmup_steps``, else ``ceil(fraction * total)``
    (fraction default :data:`DEFAULT_WARMUP_FRACTION`).

    Example::

        >>> warmup_steps(200, None, None), warmup_steps(200, 5, None), warmup_steps(200, None, 0.1)
        (6, 5, 20)
    """
    if lr_warmup_steps is not None:
        return lr_warmup_steps
    fraction = DEFAULT_WARMUP_FRACTION if lr_warmup_fraction is None else lr_warmup_fraction
    return math.ceil(fraction * total)


def lr_schedule_steps(max_steps: int | None, trainer_max_steps: int | None, lr_warmup_steps: int | None,
                      lr_warmup_fraction: float | None) -> tuple[int, int]:
    """``(warmup_steps, total_steps)`` of the LR schedule: total is ``max_steps``, else the Trainer's; warmup is
    ``lr_warmup_steps``, else ``ceil(fraction * total)`` (fraction default :data:`DEFAULT_WARMUP_FRACTION`).

    Example::

        >>> lr_schedule_steps(200, None, None, None), lr_schedule_steps(None, 100, 5, None)
        ((6, 200), (5, 100))
    """
    total = max_steps
    if total is None:
        if trainer_max_steps is None or trainer_max_steps < 1:
            raise ValueError("max_steps is not set: give LitGPTPretrainModule(max_steps=...) or "
                             "Trainer(max_steps=...)")
        total = trainer_max_steps
    warmup = warmup_steps(total, lr_warmup_steps, lr_warmup_fraction)
    if warmup > total:
        raise ValueError(f"lr_warmup_steps={warmup} is larger than max_steps={total}")
    return int(warmup), int(total)


def min_lr_ratio_of(min_lr: float | None, base_lr: float) -> float:
    """``min_lr / base_lr`` (:data:`DEFAULT_MIN_LR_RATIO` when ``min_lr`` is ``None``), checking both LRs.

    Example::

        >>> min_lr_ratio_of(None, 1e-3), min_lr_ratio_of(1e-4, 1e-3)
        (0.01, 0.1)
    """
    if base_lr <= 0:
        raise ValueError(f"optimizer lr={base_lr} must be positive")
    if min_lr is None:
        return DEFAULT_MIN_LR_RATIO
    if min_lr > base_lr:
        raise ValueError(f"min_lr={min_lr} is larger than the optimizer's lr={base_lr}")
    return min_lr / base_lr


def schedule_configs(optimizers: list[torch.optim.Optimizer],
                     schedule: Callable[[], WarmupStableDecay]) -> list[OptimizerLRSchedulerConfig]:
    """One Lightning optimizer config per optimizer, each with its own step-interval ``LambdaLR(schedule())`` (a
    registered schedule: :func:`~lightning_sparkling.growth.schedules.build_schedule`)."""
    configs: list[OptimizerLRSchedulerConfig] = []
    for opt in optimizers:
        scheduler = torch.optim.lr_scheduler.LambdaLR(opt, schedule())
        configs.append({"optimizer": opt, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}})
    return configs
