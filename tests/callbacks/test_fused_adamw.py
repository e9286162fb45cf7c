"""Fused AdamW under growth: the optimizer-state patch and the new entries' learning rate give the same parameters
with the fused kernel as with ``foreach``, within float tolerance, on the paths users take (gradient accumulation 1
and 2, two stages on different widths, each with a re-warmup of its new entries); on the CPU, and on CUDA when one
is there. The update rule itself (``foreach``) is checked against closed forms in ``test_rewarmup.py``."""

from __future__ import annotations

import pytest
import torch

from lightning_sparkling import GrowthStage, WidthGrowthCallback

from _tiny import TinyModule, make_trainer

pytestmark = pytest.mark.slow

MAX_STEPS = 16
# stage 0 grows n_embd 32 -> 48 and the MLP 64 -> 128; stage 1 the MLP again, 128 -> 192; both re-warm their new
# entries (RewarmupRescale's hooks around the fused step), the first with the fan-in-scaled state recipe
STAGES = (dict(at_step=5, n_embd=48, intermediate_size=128, rewarmup_ratio=1.5, rewarmup_steps=4,
               optimizer_state="asymmetric-scaled"),
          dict(at_step=10, intermediate_size=192, rewarmup_ratio=2.0, rewarmup_steps=3))


class _AdamW(TinyModule):
    """AdamW with weight decay over two param groups (matrices with decay, the rest without), ``fused`` or
    ``foreach``, under the tiny module's warmup-cosine schedule."""

    def __init__(self, fused: bool, **kwargs) -> None:
        super().__init__(**kwargs)
        self.fused = fused

    def configure_optimizers(self):
        decay = [p for p in self.model.parameters() if p.ndim == 2]
        rest = [p for p in self.model.parameters() if p.ndim < 2]
        impl = {"fused": True} if self.fused else {"foreach": True}
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                                lr=self.lr, betas=(0.9, 0.95), **impl)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": self._schedule(opt), "interval": "step"}}


def _run(fused: bool, accumulate: int, device: str, precision: str):
    module = _AdamW(fused, max_steps=MAX_STEPS, accumulate=accumulate)
    growth = WidthGrowthCallback([GrowthStage(**s) for s in STAGES])
    trainer = make_trainer([growth], max_steps=MAX_STEPS, accumulate=accumulate, precision=precision,
                           accelerator=device, deterministic=device == "cpu")
    trainer.fit(module)
    return module, trainer.optimizers[0]


def _check_fused_matches_foreach(accumulate: int, device: str, precision: str, rtol: float, atol: float) -> None:
    initial = {n: p.detach().clone() for n, p in _AdamW(True).model.named_parameters()}
    fused, fused_opt = _run(True, accumulate, device, precision)
    foreach, foreach_opt = _run(False, accumulate, device, precision)
    assert all(g["fused"] for g in fused_opt.param_groups)
    assert not any(g["fused"] for g in foreach_opt.param_groups)
    assert (fused.model.config.n_embd, fused.model.config.intermediate_size) == (48, 192)  # both stages grew
    got = dict(fused.model.named_parameters())
    want = dict(foreach.model.named_parameters())
    assert got.keys() == want.keys()
    for name, p in got.items():
        assert p.device.type == device
        # the fused optimizer steps every grown parameter: its patched state has the grown shape, on its device
        state = fused_opt.state[p]
        assert state["exp_avg"].shape == p.shape and state["exp_avg_sq"].shape == p.shape, name
        assert state["step"].device == p.device and int(state["step"]) == MAX_STEPS, name
        moved = (p.detach().cpu()[tuple(slice(0, s) for s in initial[name].shape)] - initial[name]).abs().max()
        assert moved > 1e-4, f"{name} did not train"
        torch.testing.assert_close(p.detach(), want[name].detach(), rtol=rtol, atol=atol, msg=lambda m: f"{name}: {m}")


@pytest.mark.parametrize("accumulate", [1, 2])
def test_fused_adamw_grows_like_foreach_on_cpu(accumulate):
    """float64 on the CPU: fused and foreach AdamW, each grown twice with the state patch and the new entries'
    re-warmup, end at the same parameters to within float64 rounding."""
    _check_fused_matches_foreach(accumulate, "cpu", "64-true", rtol=1e-9, atol=1e-12)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("accumulate", [1, 2])
def test_fused_adamw_grows_like_foreach_on_cuda(accumulate):
    """The same on CUDA in float32 (fused: litgpt's default there), where the two kernels round differently."""
    _check_fused_matches_foreach(accumulate, "cuda", "32-true", rtol=1e-4, atol=1e-5)
