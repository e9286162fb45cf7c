"""What a seeded comparison says, in the words every command uses (``plan``, ``plan --suggest``, ``measure``'s
summary, the README): ``paid``, ``no measurable difference`` or ``cost``.

A saving is claimed only beyond the seeds' spread: growth *paid* where every seed ended below scratch, or where the
mean Δ (growth minus scratch at equal FLOPs) is more than its sd below zero. *Cost* is the mirror image (every seed
above, or the mean more than its sd above zero). Anything else, a mean within its sd of zero with seeds on both
sides, is *no measurable difference*: no measured saving.

Example::

    >>> verdict(-0.084, 0.006, seeds=3, seeds_above=0)
    'paid'
    >>> verdict(-0.005, 0.026, seeds=3, seeds_above=1)
    'no measurable difference'
    >>> verdict(0.039, 0.018, seeds=3, seeds_above=3)
    'cost'
"""

from __future__ import annotations

__all__ = ["COST", "PAID", "TIE", "VERDICTS", "phrase", "verdict", "worse"]

PAID = "paid"
TIE = "no measurable difference"
COST = "cost"
VERDICTS = (COST, TIE, PAID)
"""Worst first."""


def verdict(delta: float, sd: float, seeds: int, seeds_above: int) -> str:
    """The verdict of a paired comparison: mean ``delta`` ± ``sd`` over ``seeds``, ``seeds_above`` of them above
    scratch.

    Args:
        delta: the mean over the seeds of growth's final val loss minus scratch's at equal FLOPs.
        sd: its standard deviation over the seeds (0 for one seed).
        seeds: how many seeds were paired.
        seeds_above: how many ended above scratch.
    """
    if delta < 0 and (seeds_above == 0 or delta < -sd):
        return PAID
    if delta > 0 and (seeds_above == seeds or delta > sd):
        return COST
    return TIE


def worse(a: str, b: str) -> str:
    """The worse of two verdicts (``cost`` < ``no measurable difference`` < ``paid``)."""
    return min(a, b, key=VERDICTS.index)


def phrase(word: str) -> str:
    """The verdict as the commands print it after a cell: ``growth paid there``, ``no measurable difference`` (no
    saving was measured), ``growth cost there``.

    Example::

        >>> phrase(TIE)
        'no measurable difference (no saving was measured)'
    """
    return {PAID: "growth paid there", TIE: f"{TIE} (no saving was measured)", COST: "growth cost there"}[word]
