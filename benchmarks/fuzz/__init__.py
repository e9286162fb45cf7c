"""Growth fuzzer: seeded random growth programs over every block family, checked against the growth contract.

A *program* is a tiny litgpt config of one block family (llama, NeoX, Falcon, Qwen, q/k-norm, OLMo 2, OLMo, Gemma,
Gemma 3, MoE, MoE with ``GroupedTopkRouter``), tied or not, some parameters frozen, an optimizer with state (or
none), and 1-3 :class:`~lightning_sparkling.GrowthStage` s drawn over every axis (widths, heads, depth, experts,
dense -> MoE, ``model_config`` targets) with random init pairs and recipe keys. Each stage is grown with
:func:`~lightning_sparkling.grow_model` and checked:

- ``exact``: the logits stay within 1e-4 (relative to their largest) where the contract makes the growth exact
  (:func:`contract_exact`: copy-copy RMS-preserving widths and heads at integer ratios, ``copy-zero`` /
  ``random-zero`` depth without ``depth_scaling``, copied experts at ``m x E`` / ``m x K``, dense -> MoE copies)
  or where the growth log says ``function kept`` (``claim``);
- ``refusal``: a ``GrowthError`` / ``ValueError`` with a message leaves the model bit-identical (parameters,
  buffers, config, ``requires_grad``); any other exception is a ``crash``;
- ``reload``: ``GPT(model.config)`` loads the state dict strictly, has the same buffers and ``max_seq_length``,
  gives the same logits, and the grown model runs a ``block_size``-long sequence;
- ``count``: the parameter counts of every phase equal ``estimate_compute``'s;
- ``determinism``: growing a copy of the model with the same seed gives bit-identical weights;
- ``requires_grad``: every parameter keeps its source's flag (a new entry: the tensor it is planned from);
- ``rollback``: a fault injected at the end of the swap, and ``GrowthResult.rollback()``, restore everything;
- ``optimizer``: the patch of AdamW, grouped AdamW or SGD with momentum is right per element (old entries keep
  their state, new entries follow ``optimizer_state``; new blocks join their source's group) and its undo
  restores the optimizer.

Each failure comes with a minimal reproduction (:func:`shrink`: the fewest stages and keys that still fail).

Example::

    python benchmarks/fuzz_growth.py --seeds 0:200                        # the rate, counts and failures
    python benchmarks/fuzz_growth.py --seeds 0:20000 --out benchmarks/results/fuzz_growth.json
    python benchmarks/fuzz_growth.py --repro '{"family": ..., "config": ..., "stages": [...]}'
"""

from fuzz.checks import CaseResult, Failure, run_program  # noqa: F401
from fuzz.model import Snapshot, build_model, contract_exact  # noqa: F401
from fuzz.programs import FAMILIES, FAMILY_NAMES, Program, draw_program, draw_stage  # noqa: F401
from fuzz.report import (  # noqa: F401
    KNOWN,
    describe_failure,
    known_case,
    main,
    markdown,
    merge_reports,
    reproduction,
    run_seeds,
    shrink,
)
