"""What the ``sparkling`` CLI prints, formatted: the rich console (:func:`_console`: 130 columns when not a
terminal), numbers (:func:`_fmt_int`: ``1.23M``, :func:`_fmt_flops`), the one-line model description
(:func:`_model_line`) and the rank-zero ``[sparkling]`` log line (:func:`_info`).
"""

from __future__ import annotations

import sys


def _console():
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 130, file=sys.stdout)


def _fmt_int(n: float) -> str:
    n = float(n)
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= div:
            return f"{n / div:.2f}{unit}"
    return f"{n:.0f}"


def _fmt_flops(n: float) -> str:
    return f"{float(n):.3e}"


def _model_line(config) -> str:
    moe = (f", {config.n_expert} experts (top-{config.n_expert_per_token}), moe_intermediate_size "
           f"{config.moe_intermediate_size}" if config.mlp_class_name == "LLaMAMoE" else "")
    return (f"{config.mlp_class_name}, n_layer {config.n_layer}, n_embd {config.n_embd}, n_head {config.n_head} "
            f"(head_size {config.head_size}, n_query_groups {config.n_query_groups}), intermediate_size "
            f"{config.intermediate_size}{moe}, vocab {config.padded_vocab_size}, block_size {config.block_size}")


def _info(message: str) -> None:
    from lightning.pytorch.utilities.rank_zero import rank_zero_info

    rank_zero_info(f"[sparkling] {message}")
