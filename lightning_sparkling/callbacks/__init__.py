from lightning_sparkling.callbacks.clipping import clip_gradients
from lightning_sparkling.callbacks.grown_checkpoint import load_grown_checkpoint
from lightning_sparkling.callbacks.growth import GrowthCallback, WidthGrowthCallback
from lightning_sparkling.callbacks.rms_monitor import ActivationRMSMonitor

__all__ = ["ActivationRMSMonitor", "GrowthCallback", "WidthGrowthCallback", "clip_gradients", "load_grown_checkpoint"]
