"""The measured map's categories, its names for what a stage grows (``joint``, ``depth+width``, ``upcycle``, ...):
vocabulary of the results, kept out of the growth axes (``growth/axes/``), which grow models and know nothing of what
was measured. (The module keeps its name: it holds one category labeller per growth axis.)

One labeller per axis name, tried in rank order (experts alone, then depth, heads, width); the first that names the
stage names the cell. An axis registered by a plug-in names its cells with :func:`register_cell_label`.

Example::

    >>> cell_label({"n_embd", "intermediate_size"}, None, {"width"})
    'joint'
    >>> cell_label({"n_layer", "n_embd"}, None, {"depth", "width"})
    'depth+width'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lightning_sparkling.growth.stage import WIDTH_SIZE_KEYS

CellLabel = Callable[[set[str], Any, set[str]], "str | None"]
"""``(changed sizes, the stage, the names of the axes it grows) -> the cell's map category`` or ``None``."""


def _experts(keys: set[str], stage: Any, grown: set[str]) -> str | None:
    """``upcycle`` (dense -> MoE), ``experts+topk`` (more experts and a new ``n_expert_per_token``), ``experts``;
    ``...+<axis>`` for each other axis the stage grows (``upcycle+depth+width``: no cell measured)."""
    if "experts" not in grown:
        return None
    if getattr(stage, "mlp_class_name", None) is not None:
        label = "upcycle"
    elif getattr(stage, "n_expert_per_token", None) is not None:
        label = "experts+topk"
    else:
        label = "experts"
    return "+".join([label, *sorted(grown - {"experts"})])


def _depth(keys: set[str], stage: Any, grown: set[str]) -> str | None:
    """``depth`` (alone), ``depth+width`` (with other sizes)."""
    if "n_layer" not in keys:
        return None
    return "depth" if keys == {"n_layer"} else "depth+width"


def _heads(keys: set[str], stage: Any, grown: set[str]) -> str | None:
    """``hidden+heads`` (with ``n_embd`` alone), ``heads`` (alone), ``width+heads`` otherwise."""
    if not keys & {"n_head", "n_query_groups"}:
        return None
    widths = keys & set(WIDTH_SIZE_KEYS)
    return "hidden+heads" if widths == {"n_embd"} else ("heads" if not widths else "width+heads")


def _width(keys: set[str], stage: Any, grown: set[str]) -> str | None:
    """``joint`` (``n_embd`` and an MLP width), ``hidden`` (``n_embd``), ``inner`` (MLP widths)."""
    widths = keys & set(WIDTH_SIZE_KEYS)
    if not widths:
        return None
    if "n_embd" in widths:
        return "joint" if len(widths) > 1 else "hidden"
    return "inner"


_LABELS: dict[str, tuple[int, CellLabel]] = {"experts": (0, _experts), "depth": (1, _depth), "heads": (2, _heads),
                                             "width": (3, _width)}


def register_cell_label(axis: str, label: CellLabel, rank: int = 100) -> None:
    """Name the measured-map cells of a plug-in ``axis`` (lower ``rank`` first; the built-in ones are 0-3)."""
    _LABELS[axis] = (rank, label)


def unregister_cell_label(axis: str) -> None:
    """Forget a plug-in axis' labeller (the built-in ones stay)."""
    if axis not in ("experts", "depth", "heads", "width"):
        _LABELS.pop(axis, None)


def cell_label(keys: set[str], stage: Any, grown: set[str]) -> str:
    """The map category of a one-stage schedule whose changed sizes are ``keys`` and whose axes are ``grown``: the
    first labeller's (by rank) that names it, else the grown axes' own names joined by ``+`` (a registered axis
    without a labeller), else ``'none'``.

    Example::

        >>> cell_label({"rope_base"}, None, {"rope"}), cell_label(set(), None, set())
        ('rope', 'none')
    """
    for _, label in sorted(_LABELS.values(), key=lambda entry: entry[0]):
        name = label(keys, stage, grown)
        if name is not None:
            return name
    return "+".join(sorted(grown)) or "none"


def block_family(config: Any) -> str:
    """The block family of a litgpt ``Config``, the map's ``arch`` of a cell: ``llama`` (sequential residual,
    ``RMSNorm``, a gated ``LLaMAMLP`` or ``LLaMAMoE``), ``neox`` (pythia / GPT-NeoX: parallel residual, ``LayerNorm``,
    ``GptNeoxMLP``), ``phi`` (the same with one norm for both branches), ``gemma`` (``GemmaMLP``), else the three traits
    in words (``'sequential LayerNorm GptNeoxMLP'``, GPT-2's).

    Example::

        >>> from litgpt import Config
        >>> block_family(Config.from_name("pythia-160m")), block_family(Config.from_name("Llama-3.2-1B"))
        ('neox', 'llama')
    """
    mlp, norm, parallel = config.mlp_class_name, config.norm_class_name, bool(config.parallel_residual)
    if mlp in ("LLaMAMLP", "LLaMAMoE") and norm == "RMSNorm" and not parallel:
        return "llama"
    if mlp == "GptNeoxMLP" and norm == "LayerNorm" and parallel:
        return "phi" if getattr(config, "shared_attention_norm", False) else "neox"
    if mlp == "GemmaMLP":
        return "gemma"
    return f"{'parallel' if parallel else 'sequential'} {norm} {mlp}"
