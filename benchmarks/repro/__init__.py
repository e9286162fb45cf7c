"""Does growth pay? The paper's comparisons, with seeds: a grid of ``sparkling pretrain`` runs and its tables.

    python benchmarks/reproduce.py --quick                      # the CPU subset (3 seeds, joint 2x, 18 runs)
    python benchmarks/reproduce.py --size cpu --jobs 2           # the full CPU grid (every axis, every row)
    python benchmarks/reproduce.py --size gpu                    # the same grid sized for one GPU
    python benchmarks/reproduce.py --size cpu --dry-run          # list the runs (and refused rows) without training
    python benchmarks/reproduce.py --quick --set train.max_steps=4000   # the same rows on 4x the tokens
    python benchmarks/reproduce.py --quick --scan --dry-run      # the map of issue 23: list its cells and runs
    python benchmarks/reproduce.py --quick --scan --scan-ratios 1 --scan-schedules wsd --scan-axes joint,depth \
        --out /tmp/scan --scan-export /tmp/wsd_cells.json      # a part of it, its cells in measured.json's format

Every run is ``sparkling pretrain --config <generated>.yaml`` in a subprocess (one torch thread each; ``--jobs``
runs in parallel, every row of seed 1 first), in ``--out/<size>/<axis>/<row>/seed<k>/``, trained by the loop of
``sparkling measure`` (``lightning_sparkling.pretrain.measure.measure_runs.train_runs``). A finished run
(``summary.json`` with status ``completed`` next to an identical ``config.yaml``) is reused, so an interrupted grid
continues where it stopped, and rows whose configurations are identical (e.g. the ablation's "RMS only" and naive growth
under copy-copy at 2x) train once. Results: ``<results>/reproduce_<size>.json`` (every run, every curve),
``reproduce_<size>.md`` (the tables) and ``reproduce_<size>_<axis>.png`` (validation loss against tokens and against
FLOPs, growth marked); with ``--tag NAME``: ``reproduce_<size>_<NAME>.{json,md,png}`` (one PNG, a row per axis), so a
grid's results can go straight into ``benchmarks/results`` next to the size's own. Paths inside the repository are
written relative to it (``benchmarks/results/...``).

Axes: ``inner`` / ``hidden`` / ``joint`` (MLP, n_embd, both 2x at half the run), ``two-stage``, ``joint-5`` /
``joint-25`` / ``joint-75``, the depth axes (``depth``, ``depth-5``, ``depth-50``, ``depth+width``) and ``hidden+heads``
(the ``hidden`` axis' stage with ``n_head`` and ``n_query_groups`` grown by the same ratio at the same ``head_size``, so
the attention is as wide as the new hidden size; its scratch rows train that shape). The experts axes (issue 30):
``upcycle-25`` / ``upcycle-5`` (the dense small model becomes an ``LLaMAMoE`` of 4 experts, top-2, each the MLP's
inner size, at 25% / 5%; ``upcycle-e8-25``: of 8 experts, top-2, at 25%; rows ``upcycle copy`` / ``upcycle
drop-upcycle`` / ``upcycle random``, each compared with the MoE from scratch and the dense model continued, both on its
FLOPs) and ``experts-2x`` (an E=4, K=2 MoE small
model to E=8 at 25%; rows ``experts 2x n_expert`` and ``experts 2x n_expert + K`` (K=4), each compared with the E=8
MoE of its K from scratch on its FLOPs). In the scan they report, per row, the Δ against each comparison, the
experts' load from the final checkpoint, the copies' cosine and the growth's seconds and peak memory:

    python benchmarks/reproduce.py --quick --scan --scan-ratios 1 --scan-schedules cosine --scan-axes upcycle-25 \
        --scan-rows "upcycle copy,upcycle drop-upcycle,upcycle random" --tag upcycle-25

A row is a plain dict, so a row for an option the installed package does not have yet is a one-line change:

- ``"stage": {...}``: :class:`~lightning_sparkling.GrowthStage` keys merged into every growth stage of the axis
  (on top of the axis' widths, ``at_step`` and the size's ``rewarmup_steps``);
- ``"set": {"dotted.key": value}``: any other configuration key (``optimizer.init_args.lr``, ``growth.seed``, ...);
- ``"model": "small" | "large"`` with no stage: training from scratch; ``"iso_compute": "<row>"`` sets its
  steps so that its FLOPs (``6 N D``) equal that growth row's (its own warmup and cosine over those steps).

A row whose keys the package refuses (``sparkling pretrain`` exits with a configuration error) is reported as
"not available in this version", with the package's message, and the rest of the grid runs.

The scan (``--scan``, issue 23: where growth pays) runs the map from one command. A cell is a token ratio
(``--scan-ratios``: ``train.max_steps`` multipliers of the size; at ``--size quick`` 1, 4 and 8 are about 2.8, 11
and 23 training tokens per grown parameter on the joint axis), a schedule (``--scan-schedules``: ``cosine``, or
``wsd``, set on every run of the cell, scratch included, so growth is compared with scratch on the same schedule; a
timing whose growth is not before the decay phase, ``1 - train.lr_decay_fraction``, is skipped), a growth timing and
axis (``--scan-axes``: ``joint-25`` / ``joint`` / ``joint-75`` with the "recommended recipe" row, ``depth-5`` /
``depth`` / ``depth-50`` with "depth stack copy-zero"; ``--scan-rows`` for other rows), each paired with "scratch
large (iso-FLOPs)". Each ratio and schedule trains in ``--out/x<ratio>-<schedule>/`` (a cell in its ``<size>/<axis>/``
below it), finished runs are reused, ``--dry-run`` lists the cells and run counts. The result is one line per cell
(paired Δ mean ± sd against that scratch, seeds above it, tokens per grown parameter, growth_at) in
``reproduce_<size>_scan[_<tag>].{json,md}``, and the cells of 2 seeds or more in the format of
``lightning_sparkling/pretrain/advice/measured.json`` (printed; ``--scan-export PATH`` writes them as a JSON list).

Statistics: per row the mean and sample standard deviation of the final validation loss over seeds; against
SPARKLING the per-seed difference (same seed = same initial small model, same data order, same validation
batches), its mean, its standard deviation and a 95% t-interval.
"""


from .sizes import *  # noqa: F403
from .rows import *  # noqa: F403
from .grid import *  # noqa: F403
from .tables import *  # noqa: F403
from .scan import *  # noqa: F403
from .export import *  # noqa: F403
from .cli import *  # noqa: F403
from .cli import main  # noqa: F401
