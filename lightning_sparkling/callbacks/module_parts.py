"""What a growth callback reads from what Lightning hands it: the litgpt ``GPT`` inside the LightningModule
(:func:`find_gpt`) and the token tensor of a batch (:func:`token_batch`, for the post-growth loss check)."""

from __future__ import annotations

from typing import Any

import torch

from lightning_sparkling.growth.errors import GrowthError

__all__ = ["find_gpt", "token_batch"]


def find_gpt(pl_module: torch.nn.Module):
    """The single litgpt ``GPT`` inside ``pl_module`` (looking through ``torch.compile`` wrappers).

    Raises:
        GrowthError: when there is no ``GPT`` or more than one.
    """
    from litgpt.model import GPT

    found = {id(m): (name, m) for name, m in pl_module.named_modules() if isinstance(m, GPT)}
    if len(found) != 1:
        names = ", ".join(repr(n or "<root>") for n, _ in found.values()) or "none"
        raise GrowthError(
            f"GrowthCallback needs exactly one litgpt GPT inside the LightningModule, found {len(found)} "
            f"({names}); hold the model to grow as one `litgpt.GPT` attribute (e.g. `self.model = GPT(config)`)"
        )
    return next(iter(found.values()))[1]


def token_batch(batch: Any) -> torch.Tensor | None:
    """The first 2-D integer tensor of a batch (tensor, tuple/list or dict): litgpt pretraining batches."""
    if isinstance(batch, torch.Tensor):
        return batch if batch.ndim == 2 and not batch.is_floating_point() else None
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else []
    for item in items:
        found = token_batch(item)
        if found is not None:
            return found
    return None
