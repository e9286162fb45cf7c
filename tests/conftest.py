"""Shared tiny litgpt configs and model helpers for the growth tests.

Everything here is a plain function (importable as ``from conftest import llama_config, make_gpt``) so that other
test files can reuse it. Configs are tiny (n_embd 32, 2 layers, vocab 100) so a growth takes milliseconds on CPU.
"""

from __future__ import annotations

import logging

from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.nn as nn
from litgpt import GPT, Config

# litgpt imports Lightning here, before pytest's log capture is on the root logger, and Lightning then stops its
# loggers propagating: the tests read its rank_zero_info lines with caplog, as when Lightning is imported in a test
for _name in ("lightning.pytorch", "lightning.fabric"):
    logging.getLogger(_name).propagate = True

VOCAB = 100


def _config(**kwargs: Any) -> Config:
    base: dict[str, Any] = dict(
        block_size=64,
        n_layer=2,
        n_embd=32,
        n_head=4,
        vocab_size=VOCAB,
        padded_vocab_size=VOCAB,
    )
    base.update(kwargs)
    return Config(**base)


def llama_config(**overrides: Any) -> Config:
    """LLaMA-style: gated SiLU MLP (``LLaMAMLP``), RMSNorm, grouped-query attention (4 heads, 2 groups), no bias,
    sequential residual, full RoPE."""
    kwargs: dict[str, Any] = dict(
        name="llama-tiny",
        n_query_groups=2,
        intermediate_size=64,
        mlp_class_name="LLaMAMLP",
        norm_class_name="RMSNorm",
        bias=False,
        parallel_residual=False,
        rotary_percentage=1.0,
    )
    kwargs.update(overrides)
    return _config(**kwargs)


def neox_config(**overrides: Any) -> Config:
    """GPT-NeoX/Pythia-style: ``GptNeoxMLP`` (GELU), LayerNorm with bias, parallel residual, biases everywhere
    including ``lm_head``, partial RoPE."""
    kwargs: dict[str, Any] = dict(
        name="neox-tiny",
        intermediate_size=64,
        mlp_class_name="GptNeoxMLP",
        norm_class_name="LayerNorm",
        bias=True,
        lm_head_bias=True,
        parallel_residual=True,
        rotary_percentage=0.25,
    )
    kwargs.update(overrides)
    return _config(**kwargs)


def moe_config(**overrides: Any) -> Config:
    """Mixture of experts (``LLaMAMoE``): 4 routed experts (2 per token), a shared expert of twice the expert size
    (``n_shared_expert=2``), the first block dense (``first_k_dense_replace=1``, a ``LLaMAMLP`` of
    ``intermediate_size``)."""
    kwargs: dict[str, Any] = dict(
        name="moe-tiny",
        n_query_groups=2,
        intermediate_size=64,
        moe_intermediate_size=16,
        mlp_class_name="LLaMAMoE",
        n_expert=4,
        n_expert_per_token=2,
        n_shared_expert=2,
        first_k_dense_replace=1,
        norm_class_name="RMSNorm",
        bias=False,
        parallel_residual=False,
        rotary_percentage=1.0,
    )
    kwargs.update(overrides)
    return _config(**kwargs)


def pure_moe_config(**overrides: Any) -> Config:
    """Every block a ``LLaMAMoE`` (no dense block, no shared expert)."""
    kwargs: dict[str, Any] = dict(n_shared_expert=None, first_k_dense_replace=None)
    kwargs.update(overrides)
    return moe_config(**kwargs)


def gemma_config(**overrides: Any) -> Config:
    """Gemma-2-style: the name contains "Gemma" (so RMSNorm has ``add_unit_offset``), ``scale_embeddings``,
    post-attention and post-MLP norms, ``GemmaMLP`` (tanh GELU), a head size that is not ``n_embd / n_head``,
    multi-query attention and soft-capping."""
    kwargs: dict[str, Any] = dict(
        name="Gemma-tiny",
        n_head=4,
        head_size=16,
        n_query_groups=1,
        intermediate_size=64,
        mlp_class_name="GemmaMLP",
        gelu_approximate="tanh",
        norm_class_name="RMSNorm",
        bias=False,
        parallel_residual=False,
        scale_embeddings=True,
        post_attention_norm=True,
        post_mlp_norm=True,
        attention_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
        rotary_percentage=1.0,
    )
    kwargs.update(overrides)
    return _config(**kwargs)


def olmo_config(**overrides: Any) -> Config:
    """OLMo-1-style: the name contains "OLMo" so litgpt's LayerNorm is non-affine (no weight, no bias)."""
    kwargs: dict[str, Any] = dict(name="OLMo-tiny", norm_class_name="LayerNorm")
    kwargs.update(overrides)
    return llama_config(**kwargs)


def olmo2_config(**overrides: Any) -> Config:
    """LLaMA-style with OLMo-2 query/key norms over the whole projection (``norm_qk_type="olmo2"``)."""
    kwargs: dict[str, Any] = dict(name="olmo2-tiny", norm_qk=True, norm_qk_type="olmo2")
    kwargs.update(overrides)
    return llama_config(**kwargs)


def qk_norm_config(**overrides: Any) -> Config:
    """LLaMA-style with per-head query/key norms (``norm_qk_type="default"``, Qwen-3 style)."""
    kwargs: dict[str, Any] = dict(name="qknorm-tiny", norm_qk=True, norm_qk_type="default")
    kwargs.update(overrides)
    return llama_config(**kwargs)


def latent_attention_config(**overrides: Any) -> Config:
    """DeepSeek-style multi-head latent attention (``latent_attention`` dict), built by hand."""
    kwargs: dict[str, Any] = dict(
        name="mla-tiny",
        n_query_groups=4,
        latent_attention=dict(q_lora_rank=16, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8,
                              v_head_dim=8),
    )
    kwargs.update(overrides)
    return llama_config(**kwargs)


def randomize_norms(model: nn.Module, generator: torch.Generator) -> None:
    """Give every norm weight and every bias non-trivial random values (in place).

    Norm weights become ``1 + 0.3 N(0, 1)`` (or ``0.3 N(0, 1)`` for a Gemma-style unit-offset RMSNorm, whose
    effective weight is ``1 + w``); biases (norms and linears) become ``0.1 N(0, 1)``. With ones and zeros a
    wrong norm or bias expansion could pass unnoticed.
    """
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            module = model.get_submodule(name.rsplit(".", 1)[0])
            noise = torch.randn(p.shape, generator=generator).to(p.dtype)
            if leaf == "bias":
                p.copy_(0.1 * noise)
            elif p.ndim == 1 and leaf == "weight":  # a norm weight
                offset = 0.0 if getattr(module, "add_unit_offset", False) else 1.0
                p.copy_(offset + 0.3 * noise)


def make_gpt(config: Config, seed: int = 0, *, tie_embeddings: bool = False) -> GPT:
    """``GPT(config)`` with litgpt's ``_init_weights`` (normal, std 0.02) and random norm weights and biases.

    Uses its own RNG (``torch.random.fork_rng``): the global RNG state is left as it was.
    With ``tie_embeddings`` the model's ``transformer.wte.weight`` *is* ``lm_head.weight``.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = GPT(config)
        model.apply(model._init_weights)
        randomize_norms(model, torch.Generator().manual_seed(seed + 10_000))
    if tie_embeddings:
        model.transformer.wte.weight = model.lm_head.weight
    return model


def make_tokens(config: Config, batch: int = 2, length: int = 12, seed: int = 0) -> torch.Tensor:
    """Random token ids ``(batch, length)`` below ``config.vocab_size`` (own generator)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, config.vocab_size, (batch, length), generator=g)


MODULE_SIZE_ATTRS = ("in_features", "out_features", "embedding_dim", "normalized_shape", "intermediate_size")


@dataclass
class ModelSnapshot:
    """Everything a refused or failed growth must leave untouched."""

    params: dict[str, nn.Parameter]  # the Parameter objects themselves
    values: dict[str, torch.Tensor]  # cloned values
    config: Config
    configs: dict[str, object]  # id of each module's `config` attribute, by module name
    attrs: dict[tuple[str, str], object]
    tied: bool
    structure: str


def snapshot(model: nn.Module) -> ModelSnapshot:
    """Record parameter objects, values, config objects and module size attributes of ``model``."""
    params = dict(model.named_parameters(remove_duplicate=False))
    attrs = {}
    configs = {}
    for name, module in model.named_modules():
        for attr in MODULE_SIZE_ATTRS:
            if attr in module.__dict__:
                attrs[(name, attr)] = module.__dict__[attr]
        if "config" in module.__dict__:
            configs[name] = module.__dict__["config"]
    return ModelSnapshot(
        params=params,
        values={n: p.detach().clone() for n, p in params.items()},
        config=model.config,
        configs=configs,
        attrs=attrs,
        tied=getattr(model, "lm_head", None) is not None
        and model.lm_head.weight is model.transformer.wte.weight,
        structure=str(model),
    )


def assert_unchanged(model: nn.Module, snap: ModelSnapshot) -> None:
    """The model has the very same Parameter objects with the same values, config objects and size attributes."""
    assert model.config is snap.config
    params = dict(model.named_parameters(remove_duplicate=False))
    assert params.keys() == snap.params.keys()
    for name, p in params.items():
        assert p is snap.params[name], f"{name} was replaced"
        assert torch.equal(p.detach(), snap.values[name]), f"{name} changed value"
    for name, module in model.named_modules():
        if name in snap.configs:
            assert module.__dict__["config"] is snap.configs[name], f"{name}.config changed"
        for attr in MODULE_SIZE_ATTRS:
            if (name, attr) in snap.attrs:
                assert module.__dict__[attr] == snap.attrs[(name, attr)], f"{name}.{attr} changed"
    if snap.tied:
        assert model.lm_head.weight is model.transformer.wte.weight
    assert str(model) == snap.structure


@pytest.fixture(autouse=True, scope="session")
def single_thread():
    """Every test runs with one intra-op thread (restored afterwards).

    The models here are tiny: with several OpenMP threads on a loaded 2-core machine each matmul waits on thread
    barriers and a forward pass takes 100x longer.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def llama_model() -> GPT:
    return make_gpt(llama_config(), seed=0)


@pytest.fixture
def neox_model() -> GPT:
    return make_gpt(neox_config(), seed=0)


@pytest.fixture
def moe_model() -> GPT:
    return make_gpt(moe_config(), seed=0)


#: The test files that take longest (``--durations`` of the full suite, 2026-11-29), heaviest first: multi-process
#: and end-to-end runs. Under ``-n 2 --dist loadfile`` xdist would order files by their number of tests, which puts
#: these few-test files last, where one of them can run alone while the other worker idles. Scheduling them first
#: (longest first) and the many quick files after them keeps both workers busy to the end.
HEAVY_FIRST = (
    "tests/distributed/test_ddp.py", "tests/distributed/test_depth_distributed.py",
    "tests/distributed/test_heads_distributed.py", "tests/distributed/test_experts_distributed.py",
    "tests/benchmarks/test_throughput_vs_litgpt.py", "tests/benchmarks/test_campaign.py",
    "tests/growth/test_depth_operating_points.py", "tests/benchmarks/test_reproduce_harness.py",
    "tests/distributed/test_experts_with_widths_distributed.py", "tests/distributed/test_fsdp1.py",
    "tests/distributed/test_experts_dense_first_distributed.py", "tests/pretrain/test_litgpt_compat.py",
    "tests/pretrain/test_litgpt_config_hub.py", "tests/callbacks/test_user_module.py", "tests/growth/test_fuzz.py",
    "tests/pretrain/test_gpu_path.py", "tests/pretrain/test_measure.py",
    "tests/distributed/test_due_at_once_distributed.py", "tests/pretrain/test_atomic_checkpoints.py",
    "tests/benchmarks/test_gpu_checks.py", "tests/pretrain/test_recipe_name.py", "tests/pretrain/test_cli.py",
    "tests/pretrain/test_examples.py", "tests/growth/test_baselines.py", "tests/dashboards/test_plot_panels.py",
    "tests/callbacks/test_rewarmup.py", "tests/benchmarks/test_growth_cost.py",
    "tests/distributed/test_runtime_distributed.py", "tests/pretrain/test_cli_interrupt.py",
)


def pytest_configure(config: pytest.Config) -> None:
    """Under xdist, schedule files in collection order (see :data:`HEAVY_FIRST`) rather than by their test count."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """The files of :data:`HEAVY_FIRST` first, in its order; every other file after them in collection order. The sort
    is stable, so a file's tests stay together and in their own order (module-scoped fixtures are built once)."""
    rank = {path: i for i, path in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
