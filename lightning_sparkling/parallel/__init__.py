"""The parallel backends of a growth: how the model is grown, re-wrapped or re-sharded under each strategy
(:mod:`~lightning_sparkling.parallel.fsdp2` for DDP and FSDP2, :mod:`~lightning_sparkling.parallel.fsdp1` for FSDP1,
:mod:`~lightning_sparkling.parallel.testing` for FSDP1 on CPU ranks)."""
