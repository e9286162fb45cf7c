"""Gradient clipping with fused AdamW under mixed precision (issue 45). Lightning's mixed-precision plugin refused it
("does not allow for gradient clipping because it performs unscaling of gradients internally"), so every bf16-mixed
run of the package's module, whose default is fused AdamW clipped at 1.0, failed at step 1. Checked here on the
package's own module (``LitGPTPretrainModule``), read from the parameters and the gradients the optimizer saw:

- ``bf16-mixed`` (no scaler): fused clips to the same norm and takes the same step as ``foreach``;
- ``16-mixed`` with a ``GradScaler`` (built on the CPU): unscale, clip, step, as ``foreach`` does, and an overflow
  step is skipped (parameters unchanged, scale halved);
- a user's module with fused AdamW and ``Trainer(gradient_clip_val=...)``: ``GrowthCallback`` explains the setup and
  its two fixes at fit start, before step 1; the fix it names (``clip_gradients`` in ``configure_gradient_clipping``)
  trains and grows.
"""

from __future__ import annotations

import lightning as L
import pytest
import torch
from lightning.pytorch.plugins.precision import MixedPrecision

from lightning_sparkling import GrowthCallback, GrowthStage
from lightning_sparkling.callbacks import clip_gradients
from lightning_sparkling.growth.errors import GrowthError
from lightning_sparkling.pretrain.training.module import LitGPTPretrainModule

from _tiny import TinyModule, make_trainer

CONFIG = dict(n_embd=32, n_head=4, n_layer=2, block_size=16, vocab_size=64, padded_vocab_size=64,
              mlp_class_name="LLaMAMLP", intermediate_size=64, norm_class_name="RMSNorm", bias=False)
STEPS = 3
MAX_NORM = 0.05  # far below the raw gradient norm of this model (~1-3), so every step is clipped


def _spec(kernel: str) -> dict:
    init = {"lr": 1e-2, "weight_decay": 0.1, "betas": [0.9, 0.95]}
    if kernel == "foreach":
        init["foreach"] = True
    return {"class_path": "torch.optim.AdamW", "init_args": init}


class _GradNorms(L.Callback):
    """The global norm of the gradients each optimizer step used, read after the step (a step post-hook: the
    gradients are the clipped ones then; a pre-hook runs before Lightning's closure and sees stale ones)."""

    def __init__(self) -> None:
        self.norms: list[float] = []
        self.fused: list[bool] = []

    def on_fit_start(self, trainer, pl_module) -> None:
        opt = trainer.optimizers[0]
        self.fused = [bool(g.get("fused")) for g in opt.param_groups]

        def record(optimizer, args, kwargs):
            grads = [p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
            self.norms.append(float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g)
                                                                          for g in grads]))))

        opt.register_step_post_hook(record)


def _fit(kernel: str, max_norm: float | None, *, precision: str = "bf16-mixed", plugins=None, callbacks=()):
    module = LitGPTPretrainModule(CONFIG, _spec(kernel), max_steps=STEPS, lr_warmup_steps=1, max_norm=max_norm)
    norms = _GradNorms()
    kwargs = dict(plugins=plugins) if plugins else dict(precision=precision)
    trainer = L.Trainer(max_steps=STEPS, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[norms, *callbacks],
                        **kwargs)
    data = torch.utils.data.DataLoader(torch.randint(0, 64, (4 * STEPS, 17),
                                                     generator=torch.Generator().manual_seed(0)),
                                       batch_size=4)
    trainer.fit(module, data)
    assert trainer.global_step == STEPS
    return module, norms, trainer


def _params(module) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in module.model.named_parameters()}


def test_fused_adamw_clips_under_bf16_mixed_like_foreach():
    fused, fused_norms, _ = _fit("fused", MAX_NORM)
    foreach, foreach_norms, _ = _fit("foreach", MAX_NORM)
    assert all(fused_norms.fused) and not any(foreach_norms.fused)  # the kernels the specs asked for
    # every step was clipped to the global norm MAX_NORM, with either kernel
    assert fused_norms.norms == pytest.approx([MAX_NORM] * STEPS, rel=1e-4)
    assert foreach_norms.norms == pytest.approx([MAX_NORM] * STEPS, rel=1e-4)
    got, want = _params(fused), _params(foreach)
    for name in got:
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-6, msg=lambda m: f"{name}: {m}")
    # the control: unclipped, the same run ends elsewhere (so the comparison above saw the clipping)
    unclipped, unclipped_norms, _ = _fit("fused", None)
    assert max(unclipped_norms.norms) > 10 * MAX_NORM
    assert any((unclipped.model.get_parameter(n) - p).abs().max() > 1e-3 for n, p in got.items())


class _Overflow(L.Callback):
    """Puts an inf into one gradient at step ``at`` (after the backward, where the scaled gradients are), and keeps
    the parameters before and after that step."""

    def __init__(self, at: int) -> None:
        self.at = at
        self.before: dict[str, torch.Tensor] = {}
        self.after: dict[str, torch.Tensor] = {}
        self.scales: list[float] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.at:
            self.before = _params(pl_module)

    def on_after_backward(self, trainer, pl_module) -> None:
        if trainer.global_step == self.at:
            next(pl_module.model.parameters()).grad.view(-1)[0] = float("inf")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.scales.append(float(trainer.precision_plugin.scaler.get_scale()))
        if trainer.global_step == self.at + 1:
            self.after = _params(pl_module)


@pytest.mark.parametrize("kernel", ["fused", "foreach"])
def test_16_mixed_with_a_scaler_unscales_clips_and_skips_an_overflow_step(kernel):
    """On the CPU Lightning maps ``16-mixed`` to bf16, so the scaler is built here, as a GPU run builds it."""
    overflow = _Overflow(at=1)
    module, norms, trainer = _fit(kernel, MAX_NORM, plugins=[MixedPrecision("16-mixed", "cpu")], callbacks=[overflow])
    assert trainer.precision_plugin.scaler is not None
    # steps 0 and 2: unscaled, then clipped to the true norm (a scaled norm would be ~65536x larger); foreach's
    # overflow step never reaches the optimizer (GradScaler skips it), fused's runs the kernel, which skips it
    assert len(norms.norms) == (3 if kernel == "fused" else 2)
    assert norms.norms[0] == pytest.approx(MAX_NORM, rel=1e-3) and norms.norms[-1] == pytest.approx(MAX_NORM, rel=1e-3)
    # step 1 overflowed: the optimizer step was skipped, and the scale halved
    for name, p in overflow.before.items():
        assert torch.equal(p, overflow.after[name]), name
    assert overflow.scales[1] == overflow.scales[0] / 2


def test_16_mixed_fused_takes_the_foreach_steps():
    got = _params(_fit("fused", MAX_NORM, plugins=[MixedPrecision("16-mixed", "cpu")])[0])
    want = _params(_fit("foreach", MAX_NORM, plugins=[MixedPrecision("16-mixed", "cpu")])[0])
    for name in got:
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-6, msg=lambda m: f"{name}: {m}")


# ------------------------------------------------------------------------------------------------ a user's module
class _FusedUser(TinyModule):
    """A user's module: fused AdamW, Lightning's clipping (``Trainer(gradient_clip_val=...)``)."""

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.model.parameters(), lr=self.lr, fused=True)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": self._schedule(opt), "interval": "step"}}


class _FusedUserClipping(_FusedUser):
    """The same module with the fix the error names."""

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        clip_gradients(self, optimizer, gradient_clip_val, gradient_clip_algorithm)


def _user_fit(module):
    growth = GrowthCallback(GrowthStage(2, n_embd=48, rewarmup_steps=1))
    trainer = make_trainer([growth], max_steps=8, precision="bf16-mixed", gradient_clip_val=1.0)
    trainer.fit(module)
    return trainer


def test_growth_callback_explains_a_fused_optimizer_lightning_will_not_clip_before_step_1():
    module = _FusedUser(max_steps=8)
    with pytest.raises(GrowthError) as info:
        _user_fit(module)
    message = str(info.value)
    assert "gradient_clip_val=1.0" in message and "bf16-mixed" in message and "fused AdamW" in message
    assert "foreach=True" in message and "clip_gradients(self, optimizer" in message
    assert module.trainer.global_step == 0  # before any optimizer step
    assert module.model.config.n_embd == 32


def test_the_named_fix_trains_and_grows_with_fused_adamw():
    module = _FusedUserClipping(max_steps=8)
    trainer = _user_fit(module)
    assert trainer.global_step == 8 and module.model.config.n_embd == 48
    assert all(g["fused"] for g in trainer.optimizers[0].param_groups)
