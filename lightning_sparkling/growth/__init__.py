"""The paper's growth, as pure functions of torch tensors and litgpt models (no Lightning import here).

- :mod:`~lightning_sparkling.growth.stage`: ``GrowthStage``, one growth and its recipe, checked at construction; its
  own keys' checks :mod:`~lightning_sparkling.growth.stage_checks`, how it keeps the keys it was given on every
  path (replace, copy, pickle, jsonargparse) :mod:`~lightning_sparkling.growth.stage_keys`, the stages' timing and
  schedule rules :mod:`~lightning_sparkling.growth.timing`;
- :mod:`~lightning_sparkling.growth.progressive`: a multi-stage progressive schedule (size lists, one timing list)
  expanded into ordinary stage keys;
- :mod:`~lightning_sparkling.growth.recipes`: the named recipes, and ``recipe='auto'`` resolved by the run's schedule
  (CLI and callback);
- :mod:`~lightning_sparkling.growth.axes`: the growth axes (plug-ins: width, heads, depth, experts), each owning its
  stage keys, behind one protocol and one registry (:func:`register_axis`);
- :mod:`~lightning_sparkling.growth.types`: the types the plan and the axes share (``TensorPlan``, ``ChannelChange``,
  ...);
- :mod:`~lightning_sparkling.growth.errors`: ``GrowthError`` and ``StageError``;
- :mod:`~lightning_sparkling.growth.scaling`: the RMS-preserving fan-in scale and copy index maps;
- :mod:`~lightning_sparkling.growth.operators`: fan-out / fan-in / norm expansion of one tensor;
- :mod:`~lightning_sparkling.growth.depth_maps` and :mod:`~lightning_sparkling.growth.head_layout`: the depth maps and
  the fused-qkv head layout (integers and names; the depth and heads axes turn them into tensor plans);
- :mod:`~lightning_sparkling.growth.depth_scaling`: the depth-aware rule of a depth growth (depth-muP's branch
  multiplier folded into the output projections);
- :mod:`~lightning_sparkling.growth.plan`: litgpt ``Config`` + stage -> ``GrowthPlan`` (shapes only);
- :mod:`~lightning_sparkling.growth.surgery`: ``grow_model`` applies a plan to a ``GPT`` in place;
- :mod:`~lightning_sparkling.growth.optim_state`: the optimizer patch and the new-entry learning rate;
- :mod:`~lightning_sparkling.growth.schedules`: the schedule registry and its ``LambdaLR`` multipliers; the LR
  formulas :mod:`~lightning_sparkling.growth.lr_formulas`; the new entries' re-warmup scheduler
  :mod:`~lightning_sparkling.growth.rewarmup_schedule`; :mod:`~lightning_sparkling.growth.schedule_checks` (a growth
  inside the WSD decay); :mod:`~lightning_sparkling.growth.bias_correction` (Adam's, for new entries);
- :mod:`~lightning_sparkling.growth.baselines`: the paper's comparison schedules;
- :mod:`~lightning_sparkling.growth.record`: ``StageRecord``, the checkpointed state of one applied stage;
- :mod:`~lightning_sparkling.growth.symmetry`: how alike copied channels still are;
- :mod:`~lightning_sparkling.growth.compute`: parameter and FLOPs accounting.

The measured map of where growth pays is results, not growth math: :mod:`lightning_sparkling.pretrain.advice.measured`.
"""

from lightning_sparkling.growth.axes import BaseAxis, GrowthAxis, register_axis, registered_axes, unregister_axis

__all__ = ["BaseAxis", "GrowthAxis", "register_axis", "registered_axes", "unregister_axis"]
