"""lightning-sparkling: progressive pretraining (SPARKLING's width growth, plus depth, heads and experts) for PyTorch
Lightning and litgpt.

Example::

    from lightning_sparkling import GrowthCallback, GrowthStage

    trainer = L.Trainer(max_steps=2000, callbacks=[GrowthCallback(GrowthStage(1000, n_embd=1024))])

Layers (each imports only those before it): :mod:`~lightning_sparkling.growth` (the paper: pure torch and litgpt),
:mod:`~lightning_sparkling.parallel` (one growth backend per strategy), :mod:`~lightning_sparkling.callbacks`
(Lightning callbacks), then the applications :mod:`~lightning_sparkling.pretrain` (the ``sparkling`` CLI) and
:mod:`~lightning_sparkling.dashboards` (plots, TensorBoard layout).
"""

from lightning_sparkling.growth.compute import ComputeEstimate, estimate_compute
from lightning_sparkling.growth.plan import GrowthError, GrowthPlan, plan_growth
from lightning_sparkling.growth.scaling import copy_source_index, fan_in_scale
from lightning_sparkling.growth.schedules import rewarmup_lr, warmup_cosine_lr
from lightning_sparkling.growth.stage import GrowthStage, StageError
from lightning_sparkling.growth.surgery import GrowthResult, grow_model

__version__ = "0.1.0"

__all__ = [
    "ActivationRMSMonitor",
    "ComputeEstimate",
    "GrowthCallback",
    "GrowthError",
    "GrowthPlan",
    "GrowthResult",
    "GrowthStage",
    "StageError",
    "WidthGrowthCallback",
    "copy_source_index",
    "estimate_compute",
    "fan_in_scale",
    "grow_model",
    "load_grown_checkpoint",
    "plan_growth",
    "rewarmup_lr",
    "warmup_cosine_lr",
]


def __getattr__(name: str):  # callbacks import lightning; keep `import lightning_sparkling` light for the math
    if name in ("GrowthCallback", "WidthGrowthCallback"):  # WidthGrowthCallback: the design card's name of it
        from lightning_sparkling.callbacks.growth import GrowthCallback

        return GrowthCallback
    if name == "load_grown_checkpoint":
        from lightning_sparkling.callbacks.grown_checkpoint import load_grown_checkpoint

        return load_grown_checkpoint
    if name == "ActivationRMSMonitor":
        from lightning_sparkling.callbacks.rms_monitor import ActivationRMSMonitor

        return ActivationRMSMonitor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
