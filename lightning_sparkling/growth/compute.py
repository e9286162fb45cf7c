"""``estimate_compute``: parameters per phase and training FLOPs (``6 N_active D``, the paper's accounting), of growth
stages or of the phases' configs when they are planned already (:func:`phase_compute`); G_stack's fitted growth timing
(:func:`gstack_growth_tokens`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch

from lightning_sparkling.growth.plan import (
    _check_model_kind,
    build_meta_gpt,
    stage_config,
)
from lightning_sparkling.growth.stage import GrowthStage


@dataclass(frozen=True)
class ComputeEstimate:
    """Parameters and FLOPs of a progressive run.

    Attributes:
        configs: litgpt ``Config`` of each phase (before growth, after each stage).
        active_params / total_params: one entry per phase. Active counts the experts a token uses
            (``n_expert_per_token`` routed experts, shared experts, router); embeddings included, once when tied.
        phase_steps: optimizer steps trained in each phase.
        flops: ``sum_k 6 * active_params[k] * tokens_per_step * phase_steps[k]``.
        flops_from_scratch: ``6 * active_params[-1] * tokens_per_step * total_steps`` (the final width throughout).
        flops_saved: the fraction saved, ``1 - flops / flops_from_scratch`` (the paper's "FLOPs Saved").
    """

    configs: tuple
    active_params: tuple[int, ...]
    total_params: tuple[int, ...]
    phase_steps: tuple[int, ...]
    flops: float
    flops_from_scratch: float
    flops_saved: float

    @property
    def ceiling(self) -> float:
        """The speed-up this schedule reaches if the grown run matched scratch token for token: ``flops_from_scratch /
        flops`` (scratch's FLOPs over the same steps / the growth run's). A grown run that reaches a lower loss than
        same-steps scratch saves more; one that trails it saves less.

        Example::

            >>> from litgpt import Config
            >>> from lightning_sparkling.growth.stage import GrowthStage
            >>> cfg = Config(n_layer=2, n_embd=32, n_head=2, head_size=16, intermediate_size=128, vocab_size=1024,
            ...              padded_vocab_size=1024, mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm", bias=False)
            >>> stages = [GrowthStage(500, n_layer=4), GrowthStage(750, n_layer=8)]
            >>> round(estimate_compute(cfg, stages, total_steps=1000, tokens_per_step=1024).ceiling, 2)
            1.5
        """
        return self.flops_from_scratch / self.flops


def active_parameter_count(model: torch.nn.Module) -> int:
    """Parameters a token uses in one forward pass: every unique parameter (tied weights once; DTensor shards
    counted at their global size), less the routed experts a token skips in litgpt MoE blocks
    (``n_expert - n_expert_per_token`` experts per MoE layer). The package's one active-parameter count
    (:func:`count_params` applies it to a config's meta model).

    Example::

        >>> from litgpt import Config
        >>> active_parameter_count(build_meta_gpt(Config(n_embd=8, n_head=2, n_layer=1, intermediate_size=16,
        ...     vocab_size=10, padded_vocab_size=10, mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm", bias=False)))
        824
    """
    total = sum(p.numel() for p in model.parameters())
    inactive = 0
    for module in model.modules():
        experts = getattr(module, "experts", None)
        config = getattr(module, "config", None)
        if isinstance(experts, torch.nn.ModuleList) and len(experts) and config is not None:
            per_expert = sum(p.numel() for p in experts[0].parameters())
            inactive += per_expert * (len(experts) - int(getattr(config, "n_expert_per_token", len(experts))))
    return total - inactive


def count_params(config, *, tie_embeddings: bool = False) -> tuple[int, int]:
    """``(active, total)`` parameter counts of ``GPT(config)`` (built on the meta device; active:
    :func:`active_parameter_count`).

    Example::

        >>> from litgpt import Config
        >>> cfg = Config(n_embd=8, n_head=2, n_layer=1, intermediate_size=16, vocab_size=10, padded_vocab_size=10,
        ...              mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm", bias=False)
        >>> count_params(cfg)   # wte 80 + lm_head 80 + ln_f 8 + norms 16 + qkv 192 + proj 64 + mlp 384
        (824, 824)
    """
    model = build_meta_gpt(config)
    if tie_embeddings:
        model.lm_head.weight = model.transformer.wte.weight  # counted once
    return active_parameter_count(model), sum(p.numel() for p in model.parameters())


def estimate_compute(config, stages: GrowthStage | Sequence[GrowthStage], *, total_steps: int, tokens_per_step: int,
                     tie_embeddings: bool = False) -> ComputeEstimate:
    """Training FLOPs of a run that grows by ``stages``, against training the final shape (width and depth) from
    scratch.

    Args:
        config: litgpt ``Config`` of the starting model.
        stages: growth stages in ``at_step`` order (an ``at_fraction`` stage grows at its fraction of
            ``total_steps``, :meth:`~lightning_sparkling.growth.stage.GrowthStage.resolved`).
        total_steps: optimizer steps of the whole run.
        tokens_per_step: tokens per optimizer step (global batch size x sequence length).
        tie_embeddings: ``lm_head`` and ``wte`` share a weight (counted once).

    Example::

        >>> from litgpt import Config
        >>> cfg = Config(n_embd=64, n_head=4, n_layer=2, intermediate_size=128, vocab_size=256,
        ...              mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm", bias=False)
        >>> est = estimate_compute(cfg, GrowthStage(500, intermediate_size=256), total_steps=1000,
        ...                        tokens_per_step=4096)
        >>> 0 < est.flops_saved < 0.5
        True
    """
    stages = [stages] if isinstance(stages, GrowthStage) else list(stages)
    stages = [s.resolved(total_steps) for s in stages]  # at_fraction: a fraction of total_steps
    at_steps = [cast(int, s.at_step) for s in stages]  # resolved: every at_step is set
    configs = [config]
    for k, stage in enumerate(stages):
        if k and at_steps[k] <= at_steps[k - 1]:
            raise ValueError(f"stages must have increasing at_step, got {at_steps}")
        if at_steps[k] > total_steps:
            raise ValueError(f"GrowthStage(at_step={stage.at_step}) is past total_steps={total_steps}")
        _check_model_kind(configs[-1], stage)
        configs.append(stage_config(configs[-1], stage))  # a model_name / model_config stage resolved
    return phase_compute(configs, at_steps, total_steps=total_steps, tokens_per_step=tokens_per_step,
                         tie_embeddings=tie_embeddings)


def phase_compute(configs: Sequence, at_steps: Sequence[int], *, total_steps: int, tokens_per_step: int,
                  tie_embeddings: bool = False, counts: Sequence[tuple[int, int]] | None = None) -> ComputeEstimate:
    """The :class:`ComputeEstimate` of a run whose model is ``configs[0]`` until step ``at_steps[0]``, ``configs[k]``
    from ``at_steps[k - 1]`` on, and ``configs[-1]`` to ``total_steps``: :func:`estimate_compute` once the phases'
    configs are known (a caller that planned the stages passes their configs, not the stages to plan again).

    Args:
        configs: litgpt ``Config`` of each phase (one more than ``at_steps``).
        at_steps: the step of each growth, increasing, at most ``total_steps``.
        counts: each config's ``(active, total)`` parameter counts (:func:`count_params`) when the caller has them;
            ``None``: counted here.

    Example::

        >>> from litgpt import Config
        >>> cfg = Config(n_layer=2, n_embd=32, n_head=2, head_size=16, intermediate_size=128, vocab_size=1024,
        ...              padded_vocab_size=1024, mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm", bias=False)
        >>> grown = stage_config(cfg, GrowthStage(500, n_layer=4))
        >>> est = phase_compute([cfg, grown], [500], total_steps=1000, tokens_per_step=1024)
        >>> est.phase_steps, round(est.ceiling, 2)
        ((500, 500), 1.14)
    """
    if len(configs) != len(at_steps) + 1:
        raise ValueError(f"phase_compute: {len(configs)} configs for {len(at_steps)} growths (one more config needed)")
    bounds = [0, *at_steps, total_steps]
    phase_steps = tuple(b - a for a, b in zip(bounds[:-1], bounds[1:]))
    counts = [count_params(c, tie_embeddings=tie_embeddings) for c in configs] if counts is None else list(counts)
    active = tuple(a for a, _ in counts)
    total = tuple(t for _, t in counts)
    flops = float(sum(6 * n * tokens_per_step * steps for n, steps in zip(active, phase_steps)))
    scratch = float(6 * active[-1] * tokens_per_step * total_steps)
    return ComputeEstimate(configs=tuple(configs), active_params=active, total_params=total, phase_steps=phase_steps,
                           flops=flops, flops_from_scratch=scratch,
                           flops_saved=1.0 - flops / scratch if scratch else 0.0)


GSTACK_TIMING_FIT: tuple[float, float, float] = (0.88, 163.27, -5.74)
"""G_stack's growth-timing fit ``(a, b, c)`` of ``log10 d = a log10 N + b / log10 C + c`` (Du et al. 2024, "Stacking
Your Transformers", arXiv 2405.15319, the guideline on growth timing; also in their prts README)."""


def gstack_growth_tokens(n_params: float, flops: float) -> float:
    """The tokens ``d`` to train the small model before stacking it, by G_stack's fitted timing rule:
    ``log10 d = 0.88 log10 N + 163.27 / log10 C - 5.74``, with ``N`` the parameter count of the model *after* growth
    (the target model) and ``C`` the compute budget in FLOPs of training that model, ``6 N D`` for ``D`` training
    tokens. This is the paper's fit on its own runs (LLMs up to 7B parameters after a 4x stack), not something this
    package measured; far from those sizes it extrapolates.

    Raises:
        ValueError: for ``N <= 0`` or ``C <= 1`` (``log10 C`` must be positive).

    Example::

        >>> round(gstack_growth_tokens(7e9, 6 * 7e9 * 2e12) / 1e9, 2)  # Llama2-7B, 2T tokens: 11.11B in the paper
        11.11
        >>> round(gstack_growth_tokens(8e9, 6 * 8e9 * 15e12) / 1e9, 2)  # Llama3-8B, 15T tokens: 6.58B
        6.58
    """
    if not n_params > 0 or not flops > 1:
        raise ValueError(f"G_stack's timing rule needs N > 0 parameters and C > 1 FLOPs, got N={n_params}, C={flops}")
    a, b, c = GSTACK_TIMING_FIT
    return 10 ** (a * math.log10(n_params) + b / math.log10(flops) + c)
