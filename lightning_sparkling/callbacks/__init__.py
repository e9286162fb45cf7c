from lightning_sparkling.callbacks.clipping import clip_gradients
from lightning_sparkling.callbacks.growth import GrowthCallback
from lightning_sparkling.callbacks.rms_monitor import ActivationRMSMonitor

__all__ = ["ActivationRMSMonitor", "GrowthCallback", "clip_gradients"]


def __getattr__(name: str):
    """``WidthGrowthCallback``: the old name of :class:`GrowthCallback` (the same class), with a warning."""
    from lightning_sparkling._deprecated import moved_attribute

    return moved_attribute(__name__, name)
