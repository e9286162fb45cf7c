"""Adam's bias correction for new entries: how much larger a fresh optimizer's update is than that of an entry
sharing its tensor's step count (``bias_correction='fresh'``)."""

from __future__ import annotations

import math

__all__ = ["fresh_bias_factor"]


def fresh_bias_factor(k: int, t: int, betas: tuple[float, float]) -> float:
    """How much larger a fresh Adam's update is than the update of an entry whose tensor has taken ``t`` steps,
    for an entry whose moments started at zero ``k`` steps ago (``1 <= k <= t``).

    Adam's bias correction divides the first moment by ``1 - beta1^t`` and the second by ``1 - beta2^t``, with one
    step count ``t`` per tensor. New entries of a grown tensor start at zero state (``S' = [S, 0]``) but share the
    tensor's ``t``, so their moments are corrected as if they were mature:
    ``m_k / (1 - beta1^t) / sqrt(v_k / (1 - beta2^t))`` instead of a fresh optimizer's
    ``m_k / (1 - beta1^k) / sqrt(v_k / (1 - beta2^k))``. The ratio of the two (``eps`` aside) is

    ``(1 - beta1^t) / (1 - beta1^k) * sqrt((1 - beta2^k) / (1 - beta2^t))``.

    With ``betas=(0.9, 0.95)`` the first update after growth is ``2.24x`` the shared-step one (the shared step
    gives ``0.45`` of a fresh optimizer's), the factor dips to ``0.91`` near ``k = 20`` and tends to 1.

    Example::

        >>> round(fresh_bias_factor(1, 1000, (0.9, 0.95)), 3), round(fresh_bias_factor(200, 1000, (0.9, 0.95)), 3)
        (2.236, 1.0)
    """
    if not 1 <= k <= t:
        raise ValueError(f"fresh_bias_factor needs 1 <= k <= t, got k={k}, t={t}")
    beta1, beta2 = betas
    return (1.0 - beta1**t) / (1.0 - beta1**k) * math.sqrt((1.0 - beta2**k) / (1.0 - beta2**t))
