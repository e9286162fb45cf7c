"""The paper's growth, as pure functions of torch tensors and litgpt models (no Lightning import here).

- :mod:`~lightning_sparkling.growth.stage`: ``GrowthStage``, one growth and its recipe, checked at construction;
- :mod:`~lightning_sparkling.growth.recipes`: ``recipe='auto'`` resolved by the run's schedule (CLI and callback);
- :mod:`~lightning_sparkling.growth.scaling`: the RMS-preserving fan-in scale and copy index maps;
- :mod:`~lightning_sparkling.growth.operators`: fan-out / fan-in / norm expansion of one tensor;
- :mod:`~lightning_sparkling.growth.plan`: litgpt ``Config`` + stage -> ``GrowthPlan`` (shapes only);
- :mod:`~lightning_sparkling.growth.surgery`: ``grow_model`` applies a plan to a ``GPT`` in place;
- :mod:`~lightning_sparkling.growth.optim_state`: the optimizer patch and the new-entry learning rate;
- :mod:`~lightning_sparkling.growth.schedules` and :mod:`~lightning_sparkling.growth.baselines`: the re-warmup and
  the paper's comparison schedules;
- :mod:`~lightning_sparkling.growth.symmetry`: how alike copied channels still are;
- :mod:`~lightning_sparkling.growth.compute`: parameter and FLOPs accounting.
"""
