"""Measure what an optimizer step did from the parameters themselves (not from the package's bookkeeping)."""

from __future__ import annotations

import copy

import torch
from lightning.pytorch.callbacks import Callback


class RecordSteps(Callback):
    """Records, per optimizer step: the global step it was taken at, each parameter before the step, its gradient,
    the parameter after it, and (``baseline=True``) the parameter after the same step taken by a hook-free clone of
    the optimizer (same state, same gradients, the param group's own learning rate): what the step would have done
    to every entry without the new-entry LR mechanism.

    ``on_before_optimizer_step`` runs after the step's last backward and before the update (inside
    ``optimizer.step`` under automatic optimization, whatever the accumulation), so ``before`` and the gradients
    are those the update uses. Place the recorder *before* the growth callback, so its ``on_train_batch_end`` sees
    the stepped, not yet grown, model. One optimizer only.
    """

    def __init__(self, baseline: bool = False) -> None:
        self.baseline = baseline
        self.records: list[dict] = []
        self._pending: dict | None = None

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        named = dict(pl_module.model.named_parameters())
        pending = {
            "step": trainer.global_step,
            "before": {n: p.detach().clone() for n, p in named.items()},
            "grad": {n: p.grad.detach().clone() for n, p in named.items() if p.grad is not None},
        }
        if self.baseline:
            pending["baseline"] = _baseline_step(optimizer, named)
        self._pending = pending

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self._pending is not None and trainer.global_step == self._pending["step"] + 1:
            self._pending["after"] = {n: p.detach().clone() for n, p in pl_module.model.named_parameters()}
            self.records.append(self._pending)
            self._pending = None


@torch.no_grad()
def _baseline_step(optimizer: torch.optim.Optimizer, named: dict[str, torch.nn.Parameter]) -> dict[str, torch.Tensor]:
    """The parameters after ``optimizer``'s step, taken on clones by a fresh optimizer of the same class without
    hooks (same param groups and hyperparameters, a deep copy of the state, the same gradients)."""
    name_of = {id(p): n for n, p in named.items()}
    clones: dict[str, torch.nn.Parameter] = {}
    groups = []
    for group in optimizer.param_groups:
        params = []
        for p in group["params"]:
            c = torch.nn.Parameter(p.detach().clone())
            c.grad = None if p.grad is None else p.grad.detach().clone()
            clones[name_of[id(p)]] = c
            params.append(c)
        groups.append({**{k: v for k, v in group.items() if k != "params"}, "params": params})
    twin = type(optimizer)(groups)
    state = copy.deepcopy(optimizer.state_dict()["state"])
    twin.load_state_dict({"state": state, "param_groups": twin.state_dict()["param_groups"]})
    twin.step()
    return {n: c.detach() for n, c in clones.items()}


def applied_lr(before: torch.Tensor, grad: torch.Tensor, after: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``-(after - before) / grad`` (plain SGD: the applied learning rate) on the entries of ``mask`` whose update
    is far above the rounding of the weight in its dtype."""
    g, w = grad[mask], before[mask]
    eps = torch.finfo(before.dtype).eps
    keep = (g.abs() * 1e-2) > 1e4 * eps * w.abs().clamp_min(1e-3)
    return -(after[mask] - w)[keep] / g[keep]
