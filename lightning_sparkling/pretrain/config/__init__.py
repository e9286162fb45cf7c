"""The configuration of a run: its keys (:mod:`~lightning_sparkling.pretrain.config.schema`), plug-ins
(:mod:`~lightning_sparkling.pretrain.config.plugins`), growth stages
(:mod:`~lightning_sparkling.pretrain.config.stages`), resume checks
(:mod:`~lightning_sparkling.pretrain.config.resume`), litgpt's pretrain keys
(:mod:`~lightning_sparkling.pretrain.config.litgpt_compat`) and ``resolve``
(:mod:`~lightning_sparkling.pretrain.config.resolve`: the ``ResolvedRun``). Imports ``data`` and ``model``, never the
layers above (``advice``, ``training``, ``measure``).
"""
