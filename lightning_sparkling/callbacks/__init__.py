from lightning_sparkling.callbacks.rms_monitor import ActivationRMSMonitor

__all__ = ["ActivationRMSMonitor"]
