"""The recipe of a run's stages in words: its measured-map name, the recipe it grew by, and why the two differ.

:func:`~lightning_sparkling.growth.recipes.recipe_facts` finds the names; this module writes the note ``sparkling
measure``, ``sparkling plan`` and the growth summary print beside them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lightning_sparkling.growth.recipes import RecipeFacts, recipe_facts

__all__ = ["RecipeName", "recipe_name", "recipe_note"]


@dataclass(frozen=True)
class RecipeName:
    """What the recipe of resolved stages is called (:func:`recipe_name`).

    Attributes:
        key: the measured map's name of the stages' keys (:attr:`.RecipeFacts.key`).
        label: the recipe they grew by, for a reader.
        note: in words, why ``key`` is not ``label`` (``None`` when they are the same recipe).
    """

    key: str
    label: str
    note: str | None = None

    def describe(self) -> str:
        """``'wsd'``, or the label and its note: ``'wsd (the stage sets ...)'``."""
        return f"{self.label} ({self.note})" if self.note else self.label


def recipe_note(facts: RecipeFacts) -> str | None:
    """Why ``facts.key`` is not ``facts.label``, in words (``None``: no reason to say).

    Example::

        >>> from lightning_sparkling.growth.recipes import RecipeFacts
        >>> recipe_note(RecipeFacts("paper", "recommended", "same-as", recipes=("recommended",)))
        'recommended grows this stage as paper does, so the measured map names it paper'
    """
    if facts.reason is None:
        return None
    one = facts.n_stages == 1
    it, its = ("it", "its") if one else ("them", "their")
    names = f"the measured map names {it} {facts.key}" + ("" if facts.named else f" ({its} keys are no named recipe's)")
    if facts.reason == "several":
        return f"the stages name the recipes {', '.join(facts.recipes)}; {names}"
    if facts.reason == "own-keys":
        the = "the stage sets" if one else "the stages set"
        return f"{the} {', '.join(facts.own_keys)} itself, so {names}"
    these = "this stage" if one else "these stages"
    return f"{facts.label} grows {these} as {facts.key} does, so {names}"


def recipe_name(stages: Sequence[Any]) -> RecipeName:
    """The recipe of resolved ``stages`` named for the measured map and for a reader, with the note in words.

    Args:
        stages: the stages of one run (:class:`.GrowthStage` objects), resolved.

    Example::

        >>> from lightning_sparkling.growth.stage import GrowthStage
        >>> recipe_name([GrowthStage(100, n_layer=8, recipe="wsd")])  # wsd grows new layers as paper does
        RecipeName(key='paper', label='paper', note=None)
        >>> recipe_name([GrowthStage(100, n_embd=128, recipe="wsd", rewarmup_ratio=10.0)]).note
        'the stage sets rewarmup_ratio itself, so the measured map names it random-zero'
    """
    facts = recipe_facts(stages)
    return RecipeName(facts.key, facts.label, recipe_note(facts))
