from lightning_sparkling.callbacks.growth import GrowthCallback
from lightning_sparkling.callbacks.rms_monitor import ActivationRMSMonitor

__all__ = ["ActivationRMSMonitor", "GrowthCallback"]


def __getattr__(name: str):
    """``WidthGrowthCallback``: the old name of :class:`GrowthCallback` (the same class), with a warning."""
    from lightning_sparkling import _deprecated

    if name in _deprecated.RENAMED:
        _deprecated.warn_renamed(f"lightning_sparkling.callbacks.{name}", _deprecated.RENAMED[name])
        return globals()[_deprecated.RENAMED[name]]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
