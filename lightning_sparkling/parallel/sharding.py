"""Sharding a litgpt ``GPT`` the way the growth backends expect: FSDP2 (:func:`shard_gpt`, for
``ModelParallelStrategy``) and FSDP1 (:func:`wrap_gpt`, for ``FSDPStrategy(use_orig_params=True)``), one unit per
block, then the GPT. Call them in ``LightningModule.configure_model``; the backends call ``configure_model`` again on
a grown GPT, so both are idempotent.

Example::

    from lightning_sparkling.parallel import shard_gpt, wrap_gpt

    def configure_model(self):
        if self.device_mesh is not None:  # ModelParallelStrategy
            shard_gpt(self.model, self.device_mesh)
        elif isinstance(self.trainer.strategy, FSDPStrategy):
            self.model = wrap_gpt(self.model)
"""

from __future__ import annotations

from typing import Any

__all__ = ["shard_gpt", "wrap_gpt"]


def shard_gpt(model: Any, mesh: Any, **fully_shard_kwargs: Any) -> Any:
    """FSDP2-shard a ``litgpt.GPT``: ``torch.distributed.fsdp.fully_shard`` on each block of
    ``model.transformer.h``, then on ``model`` itself. Modules already sharded (``FSDPModule``) are skipped, so calling
    it again (e.g. after a growth callback rebuilt some of the model) is safe.

    Args:
        model: the GPT (plain, or partly sharded).
        mesh: a ``DeviceMesh``; a mesh with a ``"data_parallel"`` dimension (Lightning's ``ModelParallelStrategy``)
            shards over that dimension.
        fully_shard_kwargs: passed to ``fully_shard`` (``reshard_after_forward``, ``mp_policy``, ...).

    Returns:
        ``model`` (sharded in place).

    Example::

        # in LightningModule.configure_model under ModelParallelStrategy
        shard_gpt(self.model, self.device_mesh)
    """
    from torch.distributed.fsdp import FSDPModule, fully_shard

    names = getattr(mesh, "mesh_dim_names", None) or ()
    if "data_parallel" in names and len(names) > 1:
        mesh = mesh["data_parallel"]
    for block in model.transformer.h:
        if not isinstance(block, FSDPModule):
            fully_shard(block, mesh=mesh, **fully_shard_kwargs)
    if not isinstance(model, FSDPModule):
        fully_shard(model, mesh=mesh, **fully_shard_kwargs)
    return model


def wrap_gpt(model: Any) -> Any:
    """FSDP1-wrap a ``litgpt.GPT`` for ``FSDPStrategy``: each block of ``model.transformer.h`` becomes an FSDP unit,
    then the GPT itself (embedding, final norm, head) is wrapped. Uses ``torch.distributed.fsdp.wrap.wrap``, so the
    strategy's settings apply: call it in ``LightningModule.configure_model``, which Lightning runs inside
    ``strategy.model_sharded_context()``. An already wrapped model is returned as it is, so calling it again (a
    growth callback re-applies ``configure_model`` to the grown GPT) is safe. Outside that context nothing is
    wrapped.

    Args:
        model: the GPT, or its FSDP wrapper.

    Returns:
        The FSDP wrapper of the GPT (assign it back: ``self.model = wrap_gpt(self.model)``).

    Example::

        # in LightningModule.configure_model under FSDPStrategy(use_orig_params=True)
        self.model = wrap_gpt(self.model)
    """
    from torch.distributed.fsdp import FullyShardedDataParallel
    from torch.distributed.fsdp.wrap import wrap

    if isinstance(model, FullyShardedDataParallel):
        return model
    for i, block in enumerate(model.transformer.h):
        if not isinstance(block, FullyShardedDataParallel):
            model.transformer.h[i] = wrap(block)
    return wrap(model)
