"""The growth layer's errors: one module, imported by every part of :mod:`lightning_sparkling.growth` and above.

``GrowthError`` is also importable from its old home, :mod:`lightning_sparkling.growth.plan`, and from the package.
"""

from __future__ import annotations

__all__ = ["GrowthError"]


class GrowthError(ValueError):
    """A model or stage that cannot be grown; raised before anything is modified."""
