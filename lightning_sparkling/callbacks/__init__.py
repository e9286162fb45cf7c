from lightning_sparkling.callbacks.growth import GrowthCallback, WidthGrowthCallback
from lightning_sparkling.callbacks.rms_monitor import ActivationRMSMonitor

__all__ = ["ActivationRMSMonitor", "GrowthCallback", "WidthGrowthCallback"]
