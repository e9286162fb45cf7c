"""The pretraining application built on the library: the ``sparkling`` CLI (:mod:`~lightning_sparkling.pretrain.cli`),
its configuration (:mod:`~lightning_sparkling.pretrain.schema`, checked by :mod:`~lightning_sparkling.pretrain.config`),
the ``LightningModule`` for litgpt (:mod:`~lightning_sparkling.pretrain.module`), the embedded corpus and tokenizer
(:mod:`~lightning_sparkling.pretrain.data`) and litgpt's own pretrain options (:mod:`~lightning_sparkling.pretrain.litgpt_compat`).
One job per module: docs/ARCHITECTURE.md, "Layout".
"""
