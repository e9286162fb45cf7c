"""lightning-sparkling: width-progressive pretraining (SPARKLING) for PyTorch Lightning and litgpt.

Example::

    from lightning_sparkling import GrowthStage, WidthGrowthCallback

    trainer = L.Trainer(max_steps=2000, callbacks=[WidthGrowthCallback(GrowthStage(1000, n_embd=1024))])
"""

from lightning_sparkling.compute import ComputeEstimate, estimate_compute
from lightning_sparkling.plan import GrowthError, GrowthPlan, plan_growth
from lightning_sparkling.scaling import copy_source_index, fan_in_scale
from lightning_sparkling.schedules import rewarmup_lr, warmup_cosine_lr
from lightning_sparkling.stage import GrowthStage
from lightning_sparkling.surgery import GrowthResult, grow_model

__version__ = "0.1.0"

__all__ = [
    "ActivationRMSMonitor",
    "ComputeEstimate",
    "GrowthError",
    "GrowthPlan",
    "GrowthResult",
    "GrowthStage",
    "WidthGrowthCallback",
    "copy_source_index",
    "estimate_compute",
    "fan_in_scale",
    "grow_model",
    "plan_growth",
    "rewarmup_lr",
    "warmup_cosine_lr",
]


def __getattr__(name: str):  # callbacks import lightning; keep `import lightning_sparkling` light for the math
    if name == "WidthGrowthCallback":
        from lightning_sparkling.callbacks.growth import WidthGrowthCallback

        return WidthGrowthCallback
    if name == "ActivationRMSMonitor":
        from lightning_sparkling.callbacks.rms_monitor import ActivationRMSMonitor

        return ActivationRMSMonitor
    raise AttributeError(f"module 'lightning_sparkling' has no attribute {name!r}")
