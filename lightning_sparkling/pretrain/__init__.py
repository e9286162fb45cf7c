"""The pretraining application built on the library: the ``sparkling`` CLI (:mod:`~lightning_sparkling.pretrain.cli`)
over six sub-packages, each a layer that imports only the layers below it (and the flat ``errors`` and
``formatting``), bottom to top:

- :mod:`~lightning_sparkling.pretrain.data`: the embedded corpus, its tokenizer, token windows, litgpt data modules;
- :mod:`~lightning_sparkling.pretrain.model`: the run's litgpt ``Config``, ``GPT``, optimizers, atomic checkpoints;
- :mod:`~lightning_sparkling.pretrain.config`: the keys, growth stages, resume checks, ``resolve`` -> ``ResolvedRun``;
- :mod:`~lightning_sparkling.pretrain.advice`: the measured map, the run plan (``RunPlan``), ``plan``, ``--suggest``;
- :mod:`~lightning_sparkling.pretrain.training`: the ``LightningModule``, callbacks, ``Trainer``, summary, the run;
- :mod:`~lightning_sparkling.pretrain.measure`: ``sparkling measure``.

docs/ARCHITECTURE.md, "Layout", lists every module; ``tests/pretrain/test_import_graph.py`` checks the order.
"""
