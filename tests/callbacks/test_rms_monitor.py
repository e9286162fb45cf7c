"""ActivationRMSMonitor: tags, steps, values, hook lifecycle, growth, layout."""

from __future__ import annotations

import copy
import math

import lightning.pytorch as L
import pytest
import torch
import torch.nn as nn
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from litgpt import Config
from litgpt.model import GPT
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.custom_scalar import layout_pb2
from tensorboard.util import tensor_util

from lightning_sparkling import ActivationRMSMonitor, GrowthStage, grow_model
from lightning_sparkling.callbacks.rms_monitor import RMSProbe, compute_rms, rms_tags
from lightning_sparkling.dashboards.tb_layout import (
    LAYOUT_TAG,
    rms_layout,
    write_layout,
)

VOCAB, SEQ, BATCH = 64, 16, 2



CONFIGS = {
    "llama": dict(mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm", bias=False, parallel_residual=False,
                  intermediate_size=64),
    "neox": dict(mlp_class_name="GptNeoxMLP", norm_class_name="LayerNorm", bias=True, parallel_residual=True,
                 rotary_percentage=0.25, intermediate_size=128),
    "gemma-postnorm": dict(mlp_class_name="GemmaMLP", norm_class_name="RMSNorm", bias=False, parallel_residual=False,
                           post_attention_norm=True, post_mlp_norm=True, scale_embeddings=True, intermediate_size=64),
}


def tiny_config(kind: str = "llama", n_embd: int = 32, n_layer: int = 2) -> Config:
    return Config(n_layer=n_layer, n_embd=n_embd, n_head=4, vocab_size=VOCAB, padded_vocab_size=VOCAB,
                  block_size=SEQ, **CONFIGS[kind])


def count_hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


class TinyLM(L.LightningModule):
    """A minimal LightningModule around a litgpt GPT; records hook counts seen inside training_step."""

    def __init__(self, config: Config, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.model = GPT(config)
        self.hooks_seen: list[tuple[int, int]] = []  # (global_step, number of hooks on the blocks)
        self.snapshots: dict[int, tuple[GPT, torch.Tensor]] = {}
        self.snapshot_steps: set[int] = set()

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        if self.global_step in self.snapshot_steps and self.global_step not in self.snapshots:
            self.snapshots[self.global_step] = (copy.deepcopy(self.model), batch.clone())
        logits = self.model(batch[:, :-1])
        self.hooks_seen.append((self.global_step, count_hooks(self.model)))  # after the forward, before backward
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1))
        self.log("train_loss", loss, on_step=True, on_epoch=False)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        g = torch.Generator().manual_seed(1)
        data = torch.randint(0, VOCAB, (64, SEQ + 1), generator=g)
        return torch.utils.data.DataLoader(data, batch_size=BATCH)


def fit(module: L.LightningModule, tmp_path, max_steps: int, callbacks: list, **kwargs) -> TensorBoardLogger:
    logger = TensorBoardLogger(str(tmp_path), name="run")
    trainer = L.Trainer(max_steps=max_steps, logger=logger, callbacks=callbacks, accelerator="cpu", devices=1,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        log_every_n_steps=1, num_sanity_val_steps=0, **kwargs)
    trainer.fit(module)
    return logger


def read_events(log_dir) -> EventAccumulator:
    ea = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "tensors": 0})
    ea.Reload()
    return ea


def scalar_steps(ea: EventAccumulator, tag: str) -> dict[int, float]:
    return {e.step: e.value for e in ea.Scalars(tag)}


def block_tags(n_layer: int) -> list[str]:
    return [f"rms/{q}/block_{i:02d}" for i in range(n_layer) for q in ("residual", "attn_ratio", "mlp_ratio")]


# ------------------------------------------------------------------------------------------------------------------
# manual reference: Block.forward replicated by calling the submodules directly, no hooks
# ------------------------------------------------------------------------------------------------------------------


def rms64(h: torch.Tensor) -> float:
    return h.double().pow(2).mean().sqrt().item()


@torch.no_grad()
def manual_rms(model: GPT, idx: torch.Tensor) -> dict[str, float]:
    cfg = model.config
    T = idx.size(1)
    cos, sin = model.cos[:T].unsqueeze(0), model.sin[:T].unsqueeze(0)
    x = model.transformer.wte(idx)
    if cfg.scale_embeddings:
        x = x * torch.tensor(cfg.n_embd**0.5, dtype=x.dtype)
    out: dict[str, float] = {}
    for i, block in enumerate(model.transformer.h):
        x_normed = block.norm_1(x)
        a = block.post_attention_norm(block.attn(x_normed, cos, sin, None, None, None))
        if cfg.parallel_residual:
            x_normed = x_normed if cfg.shared_attention_norm else block.norm_2(x)
            mid = x
        else:
            mid = a + x
            x_normed = block.norm_2(mid)
        m = block.post_mlp_norm(block.mlp(x_normed))
        out[f"rms/residual/block_{i:02d}"] = rms64(x)
        out[f"rms/attn_ratio/block_{i:02d}"] = rms64(a) / rms64(x)
        out[f"rms/mlp_ratio/block_{i:02d}"] = rms64(m) / rms64(mid)
        x = m + a + x
    out["rms/final_hidden"] = rms64(x)
    return out


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_compute_rms_matches_manual(kind):
    torch.manual_seed(0)
    model = GPT(tiny_config(kind, n_layer=3))
    with torch.no_grad():  # make branches and residual clearly different in scale
        for block in model.transformer.h:
            block.attn.proj.weight.mul_(3.0)
    idx = torch.randint(0, VOCAB, (BATCH, SEQ))
    got = compute_rms(model, idx)
    want = manual_rms(model, idx)
    assert set(got) == set(want) == set(rms_tags(model))
    for tag, value in want.items():
        assert math.isfinite(got[tag]) and got[tag] > 0
        assert got[tag] == pytest.approx(value, rel=1e-5), tag
    # the parallel/sequential distinction matters: ratios differ from the other residual reading
    assert count_hooks(model) == 0


def test_per_linear_gain_matches_eq3():
    torch.manual_seed(0)
    model = GPT(tiny_config("llama"))
    idx = torch.randint(0, VOCAB, (BATCH, SEQ))
    got = compute_rms(model, idx, per_linear=True)
    block = model.transformer.h[0]
    names = [n for n, m in block.named_modules() if isinstance(m, nn.Linear)]
    assert names == ["attn.qkv", "attn.proj", "mlp.fc_1", "mlp.fc_2", "mlp.proj"]
    for i in range(2):
        for n in names:
            assert f"rms/gain/block_{i:02d}/{n}" in got
    with torch.no_grad():
        x = model.transformer.wte(idx)
        xn = block.norm_1(x)
        want = rms64(block.attn.qkv(xn)) / rms64(xn)
        h = block.mlp.fc_1(block.norm_2(x + block.attn(xn, model.cos[:SEQ][None], model.sin[:SEQ][None])))
    assert got["rms/gain/block_00/attn.qkv"] == pytest.approx(want, rel=1e-5)
    assert got["rms/gain/block_00/mlp.fc_1"] > 0 and h.shape[-1] == 64


def test_hook_that_does_not_fire_leaves_tag_out():
    torch.manual_seed(0)
    model = GPT(tiny_config("llama"))
    probe = RMSProbe(model).attach()
    model.transformer.h[1].post_mlp_norm = nn.Identity()  # the hooked module is no longer called
    with torch.no_grad():
        model(torch.randint(0, VOCAB, (BATCH, SEQ)))
    probe.detach()
    values = probe.results()
    assert "rms/mlp_ratio/block_01" not in values
    expected = {"rms/mlp_ratio/block_00", "rms/residual/block_01", "rms/attn_ratio/block_01", "rms/final_hidden"}
    assert expected <= set(values)
    # the callback's cross-rank mean keeps only measured tags
    mon = ActivationRMSMonitor(every_n_steps=1)
    logged = mon._reduce(probe.tags, values, torch.device("cpu"))
    assert set(logged) == set(values)
    assert all(logged[t] == pytest.approx(values[t].item()) for t in values)


def test_cross_rank_mean_skips_ranks_where_a_tag_is_missing():
    from lightning_sparkling.callbacks.rms_monitor import _TagMean

    # rank 1's states, gathered in add_state order (total, count) by torchmetrics' sync
    other = iter([torch.tensor([3.0, 0.0, 0.0, 4.0]), torch.tensor([1.0, 0.0, 0.0, 1.0])])
    metric = _TagMean(4, distributed_available_fn=lambda: True,
                      dist_sync_fn=lambda t, group=None: [t, next(other)])
    nan = float("nan")
    metric.update(torch.tensor([1.0, 2.0, nan, float("inf")]), torch.tensor([True, True, False, True]))
    mean, count = metric.compute()
    assert count.tolist() == [2.0, 1.0, 0.0, 2.0]
    assert mean[:2].tolist() == [2.0, 2.0] and mean[2].isnan() and mean[3].isinf()  # a diverged value shows


def test_activation_checkpointing_and_compile_do_not_crash():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        checkpoint_wrapper,
    )

    torch.manual_seed(0)
    model = GPT(tiny_config("llama"))
    idx = torch.randint(0, VOCAB, (BATCH, SEQ))
    want = compute_rms(model, idx, per_linear=True)
    for i in range(len(model.transformer.h)):  # non-reentrant activation checkpointing, as FSDP/Lightning apply it
        model.transformer.h[i] = checkpoint_wrapper(model.transformer.h[i])
    probe = RMSProbe(model, per_linear=True).attach(lazy=True)
    loss = model(idx).float().pow(2).mean()
    probe.detach()  # as the callback does in on_before_backward: recomputation in backward fires nothing
    loss.backward()
    got = {t: v.item() for t, v in probe.results().items()}
    assert got.keys() == want.keys()  # same tags (wrapper prefixes stripped from linear names)
    assert all(got[t] == pytest.approx(want[t], rel=1e-6) for t in want)

    # torch.compile: hooks registered after compilation are not run by the compiled code -> empty, no crash
    torch.manual_seed(0)
    plain = GPT(tiny_config("llama"))
    compiled = torch.compile(plain, backend="eager")
    compiled(idx)
    probe = RMSProbe(plain).attach(lazy=True)
    compiled(idx)
    probe.detach()
    assert isinstance(probe.results(), dict) and count_hooks(plain) == 0


def test_errors_name_gpt():
    with pytest.raises(MisconfigurationException, match="every_n_steps"):
        ActivationRMSMonitor(every_n_steps=0)

    class NoGPT(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

    class TwoGPT(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.a, self.b = GPT(tiny_config()), GPT(tiny_config())

    from lightning_sparkling.callbacks.rms_monitor import find_gpt

    with pytest.raises(MisconfigurationException, match="GPT.*none found"):
        find_gpt(NoGPT())
    with pytest.raises(MisconfigurationException, match="exactly one `litgpt.model.GPT`.*found 2"):
        find_gpt(TwoGPT())


# ------------------------------------------------------------------------------------------------------------------
# end to end with a Trainer and TensorBoard
# ------------------------------------------------------------------------------------------------------------------


def test_tags_steps_values_hooks_and_layout(tmp_path):
    module = TinyLM(tiny_config("llama"))
    module.snapshot_steps = {4}
    monitor = ActivationRMSMonitor(every_n_steps=2)
    logger = fit(module, tmp_path, max_steps=7, callbacks=[monitor])
    ea = read_events(logger.log_dir)

    tags = set(ea.Tags()["scalars"])
    for tag in block_tags(2) + ["rms/final_hidden"]:
        assert tag in tags, tag
        steps = scalar_steps(ea, tag)
        assert sorted(steps) == [0, 2, 4, 6], (tag, sorted(steps))
        assert all(math.isfinite(v) and v > 0 for v in steps.values())
    assert not any(t.startswith("rms/gain/") for t in tags)  # per_linear off

    # the value at step 4 is the RMS of that step's forward (pre-update model, that batch)
    model4, batch4 = module.snapshots[4]
    want = manual_rms(model4, batch4[:, :-1])
    for tag, value in want.items():
        assert scalar_steps(ea, tag)[4] == pytest.approx(value, rel=1e-4), tag
    # same TensorBoard step as Lightning's train_loss of that batch
    assert 4 in scalar_steps(ea, "train_loss")

    # hooks exist only inside logging steps, and none remain after fit
    seen = dict(module.hooks_seen)
    assert {s for s, n in seen.items() if n} == {0, 2, 4, 6}
    assert all(seen[s] == 1 + 3 * 2 + 1 for s in (0, 2, 4, 6))  # GPT, 3 per block, ln_f
    assert count_hooks(module.model) == 0
    assert monitor.last_step == 6 and set(monitor.last_values) == set(block_tags(2)) | {"rms/final_hidden"}

    # custom-scalars layout present and overlaying all blocks per quantity
    assert LAYOUT_TAG in ea.Tags()["tensors"]
    raw = tensor_util.make_ndarray(ea.Tensors(LAYOUT_TAG)[0].tensor_proto).item()
    layout = layout_pb2.Layout.FromString(raw)
    regexes = {t for cat in layout.category for chart in cat.chart for t in chart.multiline.tag}
    for needed in (r"rms/residual/block_\d+$", r"rms/attn_ratio/block_\d+$", r"rms/mlp_ratio/block_\d+$",
                   "rms/final_hidden$", "lr-.*", "growth/lr_new/.*", "symmetry/.*", "growth/event$", "train_loss",
                   "val_loss"):
        assert needed in regexes, needed
    import re

    residual_chart = next(r for r in regexes if r.startswith("rms/residual"))
    assert all(re.match(residual_chart, t) for t in tags if t.startswith("rms/residual/"))
    assert not re.match(residual_chart, "rms/attn_ratio/block_00")


def test_gradient_accumulation_measures_first_micro_batch_only(tmp_path):
    module = TinyLM(tiny_config("neox"))
    monitor = ActivationRMSMonitor(every_n_steps=2, per_linear=True)
    logger = fit(module, tmp_path, max_steps=3, callbacks=[monitor], accumulate_grad_batches=2)
    ea = read_events(logger.log_dir)
    assert sorted(scalar_steps(ea, "rms/residual/block_01")) == [0, 2]
    assert sorted(scalar_steps(ea, "rms/gain/block_01/mlp.proj")) == [0, 2]
    # 6 micro-batches at global steps 0,0,1,1,2,2: hooks on the first micro-batch of steps 0 and 2 only
    assert [n > 0 for _, n in module.hooks_seen] == [True, False, False, False, True, False]


class GrowAt(L.Callback):
    """Simulated growth: widen in place with grow_model, then rebuild the blocks as new module objects."""

    def __init__(self, step: int, n_embd: int) -> None:
        self.step, self.n_embd = step, n_embd
        self.old_blocks: list[nn.Module] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == self.step and not self.old_blocks:
            model = pl_module.model
            grow_model(model, GrowthStage(self.step, n_embd=self.n_embd))
            self.old_blocks = list(model.transformer.h)
            model.transformer.h = copy.deepcopy(model.transformer.h)  # new module objects, same (grown) weights
            pl_module.log("growth/event", 1.0)


@pytest.mark.parametrize("grow_first", [True, False])
def test_follows_model_through_growth(tmp_path, grow_first):
    module = TinyLM(tiny_config("llama", n_embd=32))
    monitor = ActivationRMSMonitor(every_n_steps=2)
    grow = GrowAt(step=4, n_embd=64)
    callbacks = [grow, monitor] if grow_first else [monitor, grow]
    logger = fit(module, tmp_path, max_steps=8, callbacks=callbacks)
    assert module.model.config.n_embd == 64
    ea = read_events(logger.log_dir)
    for tag in block_tags(2) + ["rms/final_hidden"]:
        steps = scalar_steps(ea, tag)
        assert sorted(steps) == [0, 2, 4, 6], (tag, sorted(steps))
        assert all(math.isfinite(v) and v > 0 for v in steps.values())
    # the hooks were attached to the new block objects after the swap, and old ones are clean
    seen = dict(module.hooks_seen)
    assert all(seen[s] == 8 for s in (4, 6)) and all(seen[s] == 0 for s in (5, 7))
    assert all(count_hooks(b) == 0 for b in grow.old_blocks) and count_hooks(module.model) == 0
    # copy-copy growth is RMS preserving in the residual stream (hidden RMS keeps its scale)
    r2, r4 = scalar_steps(ea, "rms/residual/block_01")[2], scalar_steps(ea, "rms/residual/block_01")[4]
    assert 0.5 < r4 / r2 < 2.0


def test_write_layout_targets(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    layout = write_layout(tmp_path / "a", n_blocks=3, per_linear=True)  # a path: opened, written, closed
    assert "SPARKLING / linear RMS gain" in layout and len(layout["SPARKLING / linear RMS gain"]) == 3
    assert LAYOUT_TAG in read_events(tmp_path / "a").Tags()["tensors"]
    with SummaryWriter(str(tmp_path / "b")) as w:
        write_layout(w)
    assert LAYOUT_TAG in read_events(tmp_path / "b").Tags()["tensors"]
    assert rms_layout() == write_layout(TensorBoardLogger(str(tmp_path / "c")))
    with pytest.raises(TypeError, match="TensorBoardLogger"):
        write_layout(object())
