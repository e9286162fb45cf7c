"""``sparkling pretrain``: the ``LightningModule`` (:mod:`~lightning_sparkling.pretrain.training.module`), the run's
callbacks (:mod:`~lightning_sparkling.pretrain.training.run_callbacks`), the ``Trainer``
(:mod:`~lightning_sparkling.pretrain.training.trainer`), the summary
(:mod:`~lightning_sparkling.pretrain.training.summary`) and the run itself
(:mod:`~lightning_sparkling.pretrain.training.run`). Imports ``advice`` and the layers below it: it runs the plan that
layer computed.
"""
