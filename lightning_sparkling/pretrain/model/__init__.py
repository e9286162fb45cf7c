"""The model of a run, what the configuration checks and the training builds: its litgpt ``Config``
(:mod:`~lightning_sparkling.pretrain.model.model_config`), the ``GPT`` (:mod:`~lightning_sparkling.pretrain.model.gpt`),
its optimizers and LR schedules (:mod:`~lightning_sparkling.pretrain.model.optim`) and its checkpoints, written
atomically (:mod:`~lightning_sparkling.pretrain.model.checkpointing`). Imports only ``pretrain.errors`` of
``pretrain``.
"""
