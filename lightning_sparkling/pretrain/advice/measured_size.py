"""The size a measured cell was measured at: parameters, active parameters, the embedding's share, the device, the
precision and the corpus, computed from the model configuration the runs trained (never typed in).

Every cell of ``measured.json`` (and every ``measure.json`` that ``sparkling measure`` writes) carries these fields,
so the advice can say how far a run is from the evidence ("measured at 0.59M parameters, 187x smaller than this
run's 110M").

Example::

    >>> from litgpt import Config
    >>> cfg = Config(n_embd=8, n_head=2, n_layer=1, intermediate_size=16, vocab_size=10, padded_vocab_size=10,
    ...              mlp_class_name="LLaMAMLP", norm_class_name="RMSNorm", bias=False)
    >>> size = cell_size(cfg, device="cpu", precision="32-true", corpus="stdlib")
    >>> size["params"], size["active_params"], size["embedding_share"]
    (824, 824, 0.194)
    >>> format_params(1_311_872), format_params(110_000_000), format_params(131_000)
    ('1.31M', '110M', '0.13M')
"""

from __future__ import annotations

from typing import Any

SIZE_KEYS = ("params", "active_params", "embedding_share", "device", "precision", "corpus")
"""The fields every measured cell records about the model and the setup it was measured with."""


def cell_size(config: Any, *, device: str, precision: str, corpus: str,
              tie_embeddings: bool = False) -> dict[str, Any]:
    """The size fields (:data:`SIZE_KEYS`) of a cell whose grown model is ``GPT(config)``.

    Args:
        config: the grown model's ``litgpt.Config`` (what the growth run ends as and its scratch runs train).
        device: ``"cpu"`` or the GPU's name (``torch.cuda.get_device_name()``).
        precision: Lightning's precision string the runs trained in (``"32-true"``, ``"bf16-mixed"``).
        corpus: the data source (``data.source``: ``"stdlib"``, ``"stdlib+site-packages"``, a path).
        tie_embeddings: whether ``lm_head`` shares ``wte``'s weight (then counted once).

    Returns:
        ``params`` (total), ``active_params`` (an MoE counts its top-K experts), ``embedding_share`` (the share of
        ``params`` in the token embedding and the output head, 3 decimals), ``device``, ``precision``, ``corpus``.
    """
    from lightning_sparkling.growth.compute import count_params

    active, total = count_params(config, tie_embeddings=tie_embeddings)
    embedding = config.padded_vocab_size * config.n_embd * (1 if tie_embeddings else 2)
    return {"params": int(total), "active_params": int(active), "embedding_share": round(embedding / total, 3),
            "device": device, "precision": precision, "corpus": corpus}


def format_params(n: float) -> str:
    """A parameter count as a reader says it: ``'0.13M'``, ``'1.31M'``, ``'110M'``, ``'1.5B'``."""
    if n >= 1e9:
        return f"{n / 1e9:.3g}B"
    if n >= 1e8:
        return f"{n / 1e6:.0f}M"
    return f"{n / 1e6:.3g}M" if n >= 1e6 else f"{n / 1e6:.2f}M"
