"""The FLOPs per micro-batch that ``litgpt pretrain`` logs for a config, by litgpt's own lines (the reference the
package's ``flops_per_batch`` is checked against; not the package's code)."""

from __future__ import annotations

import torch
from lightning.fabric.utilities.throughput import measure_flops
from litgpt import GPT, Config
from litgpt.utils import chunked_cross_entropy


def litgpt_measured_flops(config: Config, micro_batch_size: int) -> int:
    """``measured_flops`` of ``litgpt/pretrain.py`` (``fit``): a meta-device ``GPT(config)`` fed ``micro_batch_size``
    sequences of ``block_size`` tokens, forward and backward."""
    with torch.device("meta"):
        meta_model = GPT(config)
        x = torch.randint(0, 1, (micro_batch_size, meta_model.max_seq_length))
        model_fwd = lambda: meta_model(x)
        model_loss = lambda y: chunked_cross_entropy(y, x, chunk_size=0)
        return measure_flops(meta_model, model_fwd, model_loss)
