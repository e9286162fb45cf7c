"""One recipe resolution for the CLI and the Python API.

A :class:`~lightning_sparkling.growth.stage.GrowthStage` carries a ``recipe``: ``auto`` (the default) or a name of
:data:`RECIPES`. A named recipe fills the keys the stage did not set when the stage
is built. ``auto`` is resolved once the run's learning-rate schedule is known, to the recipe the seeded comparisons
found best under it (:data:`SCHEDULE_RECIPES`):

- ``sparkling pretrain`` / ``plan``: by ``train.lr_schedule`` (:func:`schedule_recipe`);
- ``GrowthCallback``: by the schedule the module's scheduler runs (:func:`schedule_of`): a ``LambdaLR`` of a
  registered schedule (``WSDLambda``, ``WarmupCosineLambda``) is that schedule; a plain ``LambdaLR``,
  ``CosineAnnealingLR``, any other scheduler or none counts as ``cosine``.

Both end in :func:`resolve_recipe`, so the same stage under the same schedule gets the same recipe on either path.
Until then an ``auto`` stage's fields hold :class:`GrowthStage`'s documented defaults (the paper's recipe), which is
what :func:`~lightning_sparkling.growth.surgery.grow_model` and ``plan_growth`` use when called on it directly.

The named recipes themselves are :data:`RECIPES` (a stage's keys completed by :func:`apply_recipe`). What a
resolved stage's recipe is called, by the measured map (the name its cells are matched on) and for a reader (the
recipe it grew by, and why the two differ), is :func:`recipe_facts`: ``sparkling measure``, ``sparkling plan`` and the
growth log all name it there.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from lightning_sparkling.growth.axes import HEAD_SIZE_KEYS, WIDTH_SIZE_KEYS
from lightning_sparkling.growth.errors import StageError
from lightning_sparkling.growth.schedules import SCHEDULES, baseline_of

__all__ = ["AUTO", "PAPER_KEYS", "RECIPES", "RECIPE_DEFAULT", "RECIPE_KEYS", "SCHEDULE_RECIPES", "WIDTH_ONLY_RECIPES",
           "RecipeFacts", "apply_recipe", "check_same_stages", "grows_channels", "recipe_facts", "recipe_keys",
           "recipe_line", "resolve_recipe", "same_keys", "schedule_of", "schedule_recipe", "stage_differences"]

RECIPES: dict[str, dict[str, Any]] = {
    # GrowthStage's field defaults (PAPER_KEYS for the recipe keys): the SPARKLING recipe as published (copy-copy,
    # RMS-preserving scale, asymmetric state, new entries re-warmed to 1.3x over rewarmup_steps).
    "paper": {},
    # What the seeded comparisons of docs/BENCHMARKS.md ("Making growth pay") found best over the token ratios
    # measured: the paper's function-preserving copy-copy growth plus the closed loop on the symmetry lock (the new
    # entries' LR is doubled every 10 steps, up to 8x, while the copies' cosine to their sources is above 0.5, then
    # held).
    "recommended": {"symmetry_target": 0.5, "symmetry_max_boost": 8.0, "symmetry_release": "hold"},
    # New channels with no source (random fan-out, zero fan-in: they write nothing at first) and a 10x re-warmup:
    # the best at the smallest token ratio measured (2.8 per parameter), behind "recommended" at 11 and 17.
    "random-zero": {"init": "random-zero", "rewarmup_ratio": 10.0},
    # For warmup-stable-decay schedules: sourceless new channels with the paper's own 1.3x re-warmup, no loop. Under
    # WSD the new entries' re-warmed LR is held at the stable peak until the decay, so the 8x / 10x multipliers of
    # "recommended" / "random-zero" ended above scratch there; this one ended below it (docs/BENCHMARKS.md, "Where
    # growth pays: the scan"). Depth-only stages are unchanged by it (their new blocks follow ``depth_init``).
    "wsd": {"init": "random-zero", "rewarmup_ratio": 1.3},
    # The default under a cosine schedule: sourceless new channels (random fan-out, zero fan-in) re-warmed to 3x, no
    # loop. At 2.8 tokens per parameter it ended furthest below same-FLOPs scratch of every recipe measured, with the
    # largest speed-up at equal loss, and it keeps the activation RMS near scratch's, where "recommended"'s loop (8x,
    # never released while the copies stay alike) drove the final hidden RMS to ~5x scratch's (docs/BENCHMARKS.md,
    # "Compute to reach the same loss, and signal health").
    "random-zero-3x": {"init": "random-zero", "rewarmup_ratio": 3.0},
}
"""Named recipes: :class:`.GrowthStage` keys a stage gets unless it sets them itself (:func:`apply_recipe`)."""

RECIPE_KEYS: frozenset[str] = frozenset(key for keys in RECIPES.values() for key in keys)
"""The :class:`.GrowthStage` keys some named recipe sets (``init``, ``rewarmup_ratio``, the symmetry loop's): those
that tell recipes apart (:func:`recipe_facts`)."""

PAPER_KEYS: dict[str, Any] = {"init": "copy-copy", "rewarmup_ratio": 1.3, "symmetry_target": None,
                              "symmetry_max_boost": 8.0, "symmetry_release": "hold"}
"""The paper's value of each :data:`RECIPE_KEYS` key: what a :class:`.GrowthStage` holds for a recipe key that
neither the stage nor its recipe sets (``recipe='paper'`` sets none)."""

if set(PAPER_KEYS) != RECIPE_KEYS:  # a recipe key GrowthStage cannot tell unset from set, or a stale one
    raise RuntimeError(f"PAPER_KEYS ({sorted(PAPER_KEYS)}) must name exactly the keys the recipes set "
                       f"({sorted(RECIPE_KEYS)}): give a new recipe key its paper value here and the RECIPE_DEFAULT "
                       "default in GrowthStage")


class _RecipeDefault:
    """The type of :data:`RECIPE_DEFAULT`, one object: copies and pickles of it are it."""

    def __repr__(self) -> str:
        return "<recipe>"

    def __reduce__(self) -> str:
        return "RECIPE_DEFAULT"  # pickled by name: the one object


RECIPE_DEFAULT: Any = _RecipeDefault()
"""The default of each :class:`.GrowthStage` field a recipe may fill (:data:`RECIPE_KEYS`; prints ``<recipe>``): a
key left at it was not given, so the stage's recipe fills it (``auto``: once the run's schedule is known), else
:data:`PAPER_KEYS` does. Passing it (``dataclasses.replace(stage, init=RECIPE_DEFAULT)``) leaves a key to the recipe.
"""

SCHEDULE_RECIPES: dict[str, str] = {name: kind.recipe for name, kind in SCHEDULES.items()}
"""The recipe the seeded comparisons found best under each LR schedule (docs/BENCHMARKS.md, "Where growth pays"):
what ``growth.recipe: auto``, the CLI's default, resolves to; read from the schedule registry
(:data:`~lightning_sparkling.growth.schedules.SCHEDULES`). A schedule not in it gets ``SCHEDULE_RECIPES["cosine"]``
(the CLI refuses such a schedule by its own key first)."""

_SYMMETRY_KEYS = ("symmetry_target", "symmetry_interval", "symmetry_max_boost", "symmetry_release")


def grows_channels(keys: dict[str, Any]) -> bool:
    """Whether a stage of ``keys`` (:class:`.GrowthStage` keys) adds width channels or heads, the entries its ``init``
    pair and a recipe's symmetry loop act on: a width, a head count, or a named target (``model_name`` /
    ``model_config``); a stage that only adds blocks (``n_layer``) does not.

    Example::

        >>> grows_channels({"n_embd": 128}), grows_channels({"n_layer": 12}), grows_channels({"model_name": "x"})
        (True, False, True)
    """
    return any(keys.get(key) is not None for key in (*WIDTH_SIZE_KEYS, *HEAD_SIZE_KEYS, "model_name", "model_config"))


def apply_recipe(recipe: str, keys: dict[str, Any]) -> dict[str, Any]:
    """``keys`` (a stage's own :class:`.GrowthStage` keys) completed by the recipe ``recipe``: a key the stage sets
    wins. The symmetry loop of a recipe is left out of a stage it cannot apply to (an ``init`` with no copied side,
    ``rewarmup_ratio=None``, or ``rewarmup_scope='all'``, where every entry follows one LR): there is no new-entry
    LR to boost or no lock to break there, and the stage said so itself. A stage that grows only ``n_layer`` does
    not get the loop either: copied blocks under the loop lost most of the gain of a depth growth in the seeded
    comparison (docs/BENCHMARKS.md, "Depth growth"); set ``symmetry_target`` on the stage to have it anyway. Nor
    does it get the recipe's ``init``, which acts on new width channels only (new blocks follow ``depth_init``).

    Raises:
        ValueError: for an unknown recipe, naming the known ones.

    Example::

        >>> apply_recipe("random-zero", {"n_embd": 128, "init": "copy-copy"})
        {'n_embd': 128, 'init': 'copy-copy', 'rewarmup_ratio': 10.0}
        >>> apply_recipe("recommended", {"n_embd": 128, "init": "random-random"})
        {'n_embd': 128, 'init': 'random-random'}
        >>> apply_recipe("recommended", {"n_layer": 12})
        {'n_layer': 12}
        >>> apply_recipe("wsd", {"n_layer": 12})
        {'n_layer': 12, 'rewarmup_ratio': 1.3}
        >>> apply_recipe("random-zero-3x", {"n_layer": 12})
        {'n_layer': 12}
    """
    if recipe not in RECIPES:
        raise StageError(f"recipe={recipe!r}: choose one of {', '.join(RECIPES)}", key="recipe")
    extra = {k: v for k, v in RECIPES[recipe].items() if k not in keys}
    init = keys.get("init", extra.get("init", "copy-copy"))
    # the loop's keys go to stages whose width copies it unlocks (widths, heads, a named target); copied blocks
    # alone do not get it: measured, it cost a depth growth most of its gain (docs/BENCHMARKS.md, depth growth)
    widths = grows_channels(keys)
    copies = widths and isinstance(init, str) and "copy" in init.split("-")
    no_rewarmup = "rewarmup_ratio" in keys and keys["rewarmup_ratio"] is None
    if not copies or no_rewarmup or keys.get("rewarmup_scope") == "all":
        extra = {k: v for k, v in extra.items() if k not in _SYMMETRY_KEYS}
    if not widths:  # an init pair acts on new width channels only; new blocks follow depth_init
        extra.pop("init", None)
        if recipe in WIDTH_ONLY_RECIPES:
            extra = {}
    return {**keys, **extra}


WIDTH_ONLY_RECIPES = frozenset({"random-zero-3x"})
"""Recipes measured on width growth only: a stage that grows only ``n_layer`` keeps the paper's keys under them (the
depth cells of the measured map were taken with those), so the default recipe changes nothing for depth growth."""


AUTO = "auto"
"""The recipe a :class:`GrowthStage` gets by default: the one measured best under the run's schedule."""


def schedule_recipe(schedule: str) -> str:
    """The recipe ``auto`` stands for under the registered schedule ``schedule`` (a name of
    :data:`~lightning_sparkling.growth.schedules.SCHEDULES`; another name counts as ``cosine``).

    Example::

        >>> schedule_recipe("cosine"), schedule_recipe("wsd")
        ('random-zero-3x', 'wsd')
    """
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
    (:func:`apply_recipe` on :attr:`GrowthStage.given_keys`); ``{}`` for ``auto``.

    Raises:
        StageError: for an unknown recipe name, naming the choices.
    """
    if stage.recipe == AUTO:
        return {}
    if not isinstance(stage.recipe, str) or stage.recipe not in RECIPES:
        raise StageError(f"GrowthStage(recipe={stage.recipe!r}): choose {AUTO} (the recipe measured best "
                         f"under the run's schedule) or one of {', '.join(RECIPES)}",
                         key="recipe")
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
    return all(getattr(a, f.name) == getattr(b, f.name) for f in fields(a) if f.compare and f.name != "recipe")


def stage_differences(a: Any, b: Any, *, recipe: bool = True) -> list[tuple[str, Any, Any]]:
    """``(key, a's value, b's value)`` of every field two stages differ in (``recipe=False``: ``recipe`` left out,
    as :func:`same_keys` leaves it out).

    Example::

        >>> from lightning_sparkling.growth.stage import GrowthStage
        >>> stage_differences(GrowthStage(5, n_embd=64), GrowthStage(5, n_embd=48))
        [('n_embd', 64, 48)]
    """
    return [(f.name, getattr(a, f.name), getattr(b, f.name)) for f in fields(a)
            if f.compare and (recipe or f.name != "recipe") and getattr(a, f.name) != getattr(b, f.name)]


def recipe_line(stage: Any, plan: Any, *, auto_schedule: str | None = None) -> str:
    """The growth log's recipe line: the recipe ``stage`` grew by, named as ``sparkling plan`` and ``measure`` name
    it (:func:`recipe_facts`: where the measured map names its keys another recipe's, a note says so), and why
    (``auto_schedule``: ``recipe='auto'`` resolved under that schedule); none for a ``plan`` that added no entries."""
    if not plan.adds_entries:
        return "none applies: the stage adds no new entries (no init, new-entry optimizer state or re-warmup)"
    name = recipe_facts([stage])
    why = f" (recipe auto under the {auto_schedule} schedule)" if auto_schedule is not None else ""
    note = f"; the measured map names it {name.key}" if name.reason else ""
    return f"{name.label}{why}: init {stage.init}, rewarmup_ratio {stage.rewarmup_ratio}{note}"


def check_same_stages(applied: Sequence[Any], given: Sequence[Any], *, fraction: bool = False) -> None:
    """Refuse resuming a checkpoint grown by ``applied`` stages with other ``given`` ones (a checkpoint written
    before stages named their recipe, ``recipe='auto'`` as recorded, is matched on its keys alone: :func:`same_keys`).

    Args:
        applied: the stages the checkpoint applied, as it recorded them. given: the run's, resolved alike.
        fraction: some given stage took its step from ``at_fraction`` (its step follows ``max_steps``).

    Raises:
        ValueError: one line naming each key that differs, with both values, and the fix.
    """
    def exact(a: Any) -> bool:
        return "recipe" in a.given_keys and a.recipe != AUTO

    if all(a == b if exact(a) else same_keys(a, b) for a, b in zip(applied, given)):
        return
    diff = "; ".join(f"stage {k} {key}: checkpoint {x!r}, callback {y!r}"
                     for k, (a, b) in enumerate(zip(applied, given))
                     for key, x, y in stage_differences(a, b, recipe=exact(a)))
    raise ValueError(
        f"the checkpoint was grown by different stages than this GrowthCallback has ({diff}): give GrowthCallback "
        "the stages the run was started with, or start a new run from its weights "
        "(lightning_sparkling.load_grown_checkpoint)"
        + ("; an at_fraction stage takes its step from trainer.max_steps, so resume with the max_steps the run was "
           "started with" if fraction else "")
        + ("; GrowthStage's default recipe is now 'auto' (the CLI's): a checkpoint grown by the paper's defaults "
           "resumes with GrowthStage(..., recipe='paper')" if any(a.recipe == AUTO for a in applied) else "")
    )


@dataclass(frozen=True)
class RecipeFacts:
    """What the recipe of resolved stages is called, as facts (:func:`recipe_facts`; the advice puts them in words).

    Attributes:
        key: the measured map's name of the stages' keys, always a name of :data:`RECIPES`: the ``recipe`` of the
            cell ``sparkling measure`` writes and the name ``sparkling plan`` matches the map's cells on.
        label: the recipe they grew by (``growth.recipe`` resolved, or the stages' own ``recipe``).
        reason: why ``key`` is not ``label``: ``"several"`` (the stages name several recipes), ``"own-keys"`` (they
            set recipe keys themselves), ``"same-as"`` (``label`` grows them as ``key`` does); ``None``: no note.
        named: whether ``key`` is a named recipe's keys (``False``: keys of no named recipe, named ``paper``).
        recipes: the recipes the stages name, sorted.
        own_keys: the recipe keys the stages set themselves, sorted.
        n_stages: how many stages.
    """

    key: str
    label: str
    reason: str | None = None
    named: bool = True
    recipes: tuple[str, ...] = ()
    own_keys: tuple[str, ...] = ()
    n_stages: int = 1


def recipe_facts(stages: Sequence[Any]) -> RecipeFacts:
    """The one name of the recipe of resolved ``stages`` (:class:`.GrowthStage` objects whose ``recipe`` is no
    longer ``auto``: :func:`resolve_recipe`), for ``sparkling measure``, ``sparkling plan`` and the growth log, so a
    cell measured for a run is found for it.

    The ``key`` is ``paper`` when every stage keeps the paper's value of every recipe key, else another recipe of
    :data:`RECIPES` whose keys every stage has, else ``paper``. The ``label`` is the recipe the stages name (the
    ``key`` when they name several, none yet, or add no width channels or heads, the only entries a recipe's init
    and loop act on: there every recipe giving them the ``key``'s keys grows them alike, one plan and one name).

    Args:
        stages: the stages of one run (one stage: that stage alone), resolved.

    Example::

        >>> from lightning_sparkling.growth.stage import GrowthStage
        >>> recipe_facts([GrowthStage(100, n_layer=8, recipe="wsd")])  # wsd grows new layers as paper does
        RecipeFacts(key='paper', label='paper', reason=None, named=True, recipes=('wsd',), own_keys=(), n_stages=1)
        >>> recipe_facts([GrowthStage(100, n_embd=128, recipe="recommended", rewarmup_scope="all")]).reason
        'same-as'
    """
    stages = list(stages)
    key, named = _map_name(stages)
    recipes = tuple(sorted({s.recipe for s in stages}))
    facts = RecipeFacts(key, key, None, named, recipes, (), len(stages))
    if len(recipes) > 1:
        return replace(facts, reason="several")
    if not recipes or recipes[0] == AUTO:  # no stage, or one not resolved yet: its keys are all there is
        return facts
    (label,) = recipes
    own = tuple(sorted({k for s in stages for k in _own_recipe_keys(s)}))
    if own:
        return replace(facts, label=label, own_keys=own, reason="own-keys" if key != label or not named else None)
    if key == label or not any(grows_channels(s.to_dict()) for s in stages):
        # a recipe's init and symmetry loop act on new width channels and heads only: stages that add none (layers,
        # experts) grow under it exactly as under ``key``, one plan, so one name
        return facts
    return replace(facts, label=label, reason="same-as")


def _map_name(stages: Sequence[Any]) -> tuple[str, bool]:
    """The measured map's name of the recipe keys of ``stages``, and whether it is theirs (``False``: keys of no
    named recipe, named ``paper``)."""
    if stages and all(_has_keys_of(s, "paper", strict=True) for s in stages):
        return "paper", True
    for recipe in (name for name in RECIPES if name != "paper"):
        if stages and all(_has_keys_of(s, recipe) for s in stages):
            return recipe, True
    return "paper", not stages


def _has_keys_of(stage: Any, recipe: str, *, strict: bool = False) -> bool:
    """Whether ``stage`` has ``recipe``'s keys (``strict``: and the paper's value of every other recipe key). A stage
    that grows no width is not judged by ``init``, which does nothing there."""
    expected = dict(RECIPES[recipe])
    if strict:
        expected = {**PAPER_KEYS, **expected}
    if not grows_channels(stage.to_dict()):
        expected.pop("init", None)
    return all(getattr(stage, key) == value for key, value in expected.items())


def _own_recipe_keys(stage: Any) -> set[str]:
    """The recipe keys of ``stage`` that are not what its recipe gives a stage growing the same (set by the stage
    itself); those it was built with where the recipe cannot take the stage without them."""
    kept = {f.name: getattr(stage, f.name) for f in fields(stage) if f.name not in RECIPE_KEYS | {"recipe"}}
    try:
        twin = type(stage)(recipe=stage.recipe, **kept)
    except ValueError:  # e.g. split='uneven' under a sourceless init: the stage's own init made it possible
        return set(RECIPE_KEYS & stage.given_keys) or set(RECIPE_KEYS)
    differ = {key for key in RECIPE_KEYS if getattr(stage, key) != getattr(twin, key)}
    return (differ & stage.given_keys) or differ

