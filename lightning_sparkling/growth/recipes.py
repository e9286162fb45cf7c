"""One recipe resolution for the CLI and the Python API.

A :class:`~lightning_sparkling.growth.stage.GrowthStage` carries a ``recipe``: ``auto`` (the default) or a name of
:data:`~lightning_sparkling.growth.stage.RECIPES`. A named recipe fills the keys the stage did not set when the stage
is built. ``auto`` is resolved once the run's learning-rate schedule is known, to the recipe the seeded comparisons
found best under it (:data:`~lightning_sparkling.growth.stage.SCHEDULE_RECIPES`):

- ``sparkling pretrain`` / ``plan``: by ``train.lr_schedule`` (:func:`schedule_recipe`);
- ``GrowthCallback``: by the schedule the module's scheduler runs (:func:`schedule_of`): a ``LambdaLR`` of a
  registered schedule (``WSDLambda``, ``WarmupCosineLambda``) is that schedule; a plain ``LambdaLR``,
  ``CosineAnnealingLR``, any other scheduler or none counts as ``cosine``.

Both end in :func:`resolve_recipe`, so the same stage under the same schedule gets the same recipe on either path.
Until then an ``auto`` stage's fields hold :class:`GrowthStage`'s documented defaults (the paper's recipe), which is
what :func:`~lightning_sparkling.growth.surgery.grow_model` and ``plan_growth`` use when called on it directly.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields
from typing import Any

from lightning_sparkling.growth.schedules import baseline_of

AUTO = "auto"
"""The recipe a :class:`GrowthStage` gets by default: the one measured best under the run's schedule."""


def schedule_recipe(schedule: str) -> str:
    """The recipe ``auto`` stands for under the registered schedule ``schedule`` (a name of
    :data:`~lightning_sparkling.growth.schedules.SCHEDULES`; another name counts as ``cosine``).

    Example::

        >>> schedule_recipe("cosine"), schedule_recipe("wsd")
        ('random-zero-3x', 'wsd')
    """
    from lightning_sparkling.growth.stage import SCHEDULE_RECIPES

    return SCHEDULE_RECIPES.get(schedule, SCHEDULE_RECIPES["cosine"])


def schedule_of(schedulers: Iterable[Any]) -> str:
    """The registry name of the schedule ``schedulers`` (torch LR schedulers driving the trained optimizers) run:
    the registered schedule of a ``LambdaLR`` whose multiplier is one (``WSDLambda`` -> ``wsd``), else ``cosine``
    (a plain ``LambdaLR``, ``CosineAnnealingLR``, any other scheduler, or no scheduler at all).

    Raises:
        ValueError: when the schedulers run different registered schedules, naming them (the stage must then name
            its recipe).

    Example::

        >>> import torch
        >>> from lightning_sparkling.growth.schedules import WSDLambda
        >>> opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
        >>> schedule_of([torch.optim.lr_scheduler.LambdaLR(opt, WSDLambda(10, 100))])
        'wsd'
        >>> schedule_of([torch.optim.lr_scheduler.CosineAnnealingLR(opt, 100)]), schedule_of([])
        ('cosine', 'cosine')
    """
    found: set[str] = set()
    for scheduler in schedulers:
        for fn in getattr(scheduler, "lr_lambdas", ()):
            kind = baseline_of(fn)
            if kind is not None:
                found.add(kind.kind.name)
    if len(found) > 1:
        raise ValueError(f"the module's schedulers run different schedules ({', '.join(sorted(found))}), so "
                         "recipe='auto' has no single meaning; give each GrowthStage a recipe (e.g. recipe='wsd')")
    return found.pop() if found else "cosine"


def recipe_keys(stage: Any) -> dict[str, Any]:
    """The keys the named recipe ``stage.recipe`` gives ``stage`` beyond those it set itself
    (:func:`~lightning_sparkling.growth.stage.apply_recipe` on :attr:`GrowthStage.given_keys`); ``{}`` for ``auto``.

    Raises:
        StageError: for an unknown recipe name, naming the choices.
    """
    from lightning_sparkling.growth.stage import RECIPES, StageError, apply_recipe

    if stage.recipe == AUTO:
        return {}
    if not isinstance(stage.recipe, str) or stage.recipe not in RECIPES:
        raise StageError("recipe", f"GrowthStage(recipe={stage.recipe!r}): choose {AUTO} (the recipe measured best "
                                   f"under the run's schedule) or one of {', '.join(RECIPES)}")
    given = {key: getattr(stage, key) for key in stage.given_keys if key != "recipe"}
    return {key: value for key, value in apply_recipe(stage.recipe, given).items() if key not in given}


def resolve_recipe(stage: Any, schedule: str) -> Any:
    """``stage`` under a run of the registered schedule ``schedule``: an ``auto`` stage becomes the stage of
    :func:`schedule_recipe` (its own keys, the recipe's for the others); a stage with a named recipe is returned as
    it is.

    Example::

        >>> from lightning_sparkling.growth.stage import GrowthStage
        >>> stage = resolve_recipe(GrowthStage(100, n_embd=128), "cosine")
        >>> stage.recipe, stage.init, stage.rewarmup_ratio
        ('random-zero-3x', 'random-zero', 3.0)
        >>> resolve_recipe(GrowthStage(100, n_embd=128, init="copy-copy"), "cosine").init  # a key it sets wins
        'copy-copy'
        >>> resolve_recipe(GrowthStage(100, n_embd=128, recipe="paper"), "cosine").init
        'copy-copy'
    """
    if stage.recipe != AUTO:
        return stage
    given = {key: getattr(stage, key) for key in stage.given_keys if key != "recipe"}
    return type(stage)(recipe=schedule_recipe(schedule), **given)


def same_keys(a: Any, b: Any) -> bool:
    """Whether two stages grow alike, whatever recipe name they carry (every field but ``recipe`` equal): how a
    checkpoint written before stages named their recipe is matched."""
    return all(getattr(a, f.name) == getattr(b, f.name) for f in fields(a) if f.name != "recipe")


__all__ = ["AUTO", "recipe_keys", "resolve_recipe", "same_keys", "schedule_of", "schedule_recipe"]
