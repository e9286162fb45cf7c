"""The ``sparkling pretrain`` / ``sparkling plan`` configuration: its schema (dataclasses that jsonargparse turns into
``--config FILE.yaml`` keys and ``--section.key value`` overrides, as litgpt's CLI does) and :func:`resolve`, which
checks every value and derives what a run needs (model ``Config``, steps, gradient accumulation, growth stages)
*before* anything starts: no tokenizer is trained and no weight is allocated here.

Keys follow ``litgpt pretrain``: every key of the installed litgpt's ``litgpt.pretrain.setup`` is accepted with
litgpt's meaning or refused by name (``model_name`` / ``model_config``, ``out_dir``, ``precision``,
``initial_checkpoint_dir``, ``resume``, ``data`` (also litgpt data modules by ``class_path``), ``train.*``, ``eval.*``,
``log.*``, ``optimizer``, ``devices``, ``num_nodes``, ``tokenizer_dir``, ``logger_name``, ``seed``; see
:mod:`lightning_sparkling.litgpt_compat`), plus ``accelerator``, ``strategy``, ``num_threads``, ``growth`` and
``rms_monitor``. Every error names the key it is about (:class:`ConfigError`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Union

from lightning_sparkling.growth.schedules import WSD_DECAY_SHAPES, check_growth_before_decay, wsd_decay_start
from lightning_sparkling.growth.stage import GrowthStage, check_rewarmup_fits

__all__ = [
    "ConfigError",
    "DataArgs",
    "EvalArgs",
    "GrowthArgs",
    "LogArgs",
    "RMSMonitorArgs",
    "ResolvedRun",
    "StageArgs",
    "TrainArgs",
    "check_keys",
    "check_out_dir",
    "check_resume_checkpoint",
    "find_resume_checkpoint",
    "pretrain_arguments",
    "resolve",
]

PRECISIONS = ("32-true", "32", "bf16-mixed", "bf16-true", "16-mixed", "16-true", "64-true")
STRATEGIES = ("auto", "ddp", "fsdp2", "fsdp")


class ConfigError(ValueError):
    """An impossible or unsupported configuration value; ``key`` is its dotted path (``train.global_batch_size``)."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"{key}: {message}")


# ------------------------------------------------------------------------------------------------------------ schema
@dataclass
class DataArgs:
    """The training text: the embedded corpus (this machine's Python standard library, optionally every installed
    package) or a directory of your own text, tokenized by a byte-level BPE trained on it (cached); or a litgpt data
    module given by ``class_path`` (``litgpt.data.TextFiles``, ``LitData``, ``TinyStories``, ``OpenWebText``, any
    ``LightningDataModule`` with litgpt's ``connect``) and its ``init_args``, as in litgpt's configs."""

    class_path: Optional[str] = None
    """A litgpt data module (``litgpt.data.TextFiles``, or a short name ``TextFiles``; any importable
    ``LightningDataModule`` with litgpt's ``connect(tokenizer, batch_size, max_seq_length)``) used instead of the
    embedded corpus; the other ``data.*`` keys are then the corpus's and must be left unset."""
    init_args: Optional[dict[str, Any]] = None
    """Arguments of ``class_path`` (``train_data_path``, ``num_workers``, ...), checked against its signature."""

    source: str = "stdlib"
    """``stdlib``: the Python standard library's ``*.py`` (~12 MB); ``stdlib+site-packages``: also every installed
    package's ``*.py`` (~10x bigger). Ignored when ``data_dir`` is set."""
    data_dir: Optional[Path] = None
    """Use every ``*.txt``, ``*.py`` and ``*.md`` file below this directory instead of ``source``."""
    include_tests: bool = False
    """Keep ``test``/``tests`` folders of the Python sources (left out by default: repetitive fixtures)."""
    vocab_size: int = 4096
    """BPE vocabulary size to train (ignored with ``tokenizer_dir``). Also the model's ``vocab_size`` unless
    ``model_config.vocab_size`` is set."""
    val_percent: float = 5.0
    """Share of files (percent, chosen by a hash of the file name) held out for validation."""
    seq_len: Optional[int] = None
    """Tokens per training sequence (``null``: ``train.max_seq_length``, else the ``block_size`` of ``model_name`` /
    ``model_config`` / ``initial_checkpoint_dir``, else 512). Must not exceed the model's ``block_size`` (which
    defaults to it)."""
    max_files: Optional[int] = None
    """Use at most this many files (quick runs and tests)."""
    max_bytes: Optional[int] = None
    """Use at most this many bytes of text (quick runs and tests)."""
    cache_dir: Optional[Path] = None
    """Where the tokenizer and the tokenized corpus are cached (default ``~/.cache/lightning_sparkling``)."""
    num_workers: int = 0
    """DataLoader worker processes."""
    seed: Optional[int] = None
    """Seed of the training window order (default: the top-level ``seed``)."""


@dataclass
class TrainArgs:
    """Training length, batch and optimization settings (litgpt's ``train.*``)."""

    global_batch_size: int = 64
    """Sequences per optimizer step, over all devices and nodes."""
    micro_batch_size: int = 4
    """Sequences per device per forward pass; gradient accumulation =
    ``global_batch_size / (micro_batch_size * devices * num_nodes)`` (must divide exactly)."""
    max_tokens: Optional[int] = None
    """Tokens to train on; steps = ``max_tokens // (global_batch_size * seq_len)``. Give this or ``max_steps``."""
    max_steps: Optional[int] = None
    """Optimizer steps to train (wins over ``max_tokens`` when both are set). Also the end of the LR schedule."""
    lr_warmup_steps: Optional[int] = None
    """Linear LR warmup, in optimizer steps (exclusive with ``lr_warmup_fraction``)."""
    lr_warmup_fraction: Optional[float] = None
    """Warmup as a fraction of the run. Neither set: 0.03 (the paper)."""
    min_lr: Optional[float] = None
    """LR at the end of the cosine decay (default ``0.01 * lr``, the paper)."""
    lr_schedule: str = "cosine"
    """``cosine`` (warmup, then cosine to ``min_lr``: the paper) or ``wsd`` (warmup-stable-decay: warmup, the peak held,
    then a decay to ``min_lr`` over the last ``lr_decay_fraction`` of the run; a growth must fall before the decay)."""
    lr_decay_fraction: float = 0.2
    """``wsd`` only: the share of the run spent decaying, in ``(0, 1]``."""
    lr_decay_shape: str = "linear"
    """``wsd`` only: the decay's shape, ``linear`` or ``cosine`` (litgpt has no WSD schedule to follow)."""
    max_norm: Optional[float] = 1.0
    """Clip gradients to this global norm (``null`` or 0: no clipping)."""
    epochs: Optional[int] = None
    """litgpt's key; ``litgpt pretrain`` refuses any value, and so does this package: the run length must be known
    before the data is read (LR schedule, growth steps). Give ``max_tokens`` or ``max_steps``."""
    max_time: Optional[float] = None
    """Stop training after this many seconds (Lightning's ``Trainer(max_time=...)``); ``final/`` is still written.
    The LR schedule and the growth steps keep the ``max_tokens`` / ``max_steps`` horizon."""
    max_seq_length: Optional[int] = None
    """Tokens per training sequence (litgpt's key; the model input length). Sets ``data.seq_len`` when that is
    unset; both set must agree."""
    tie_embeddings: Optional[bool] = False
    """Share the input embedding and the output head (``wte.weight = lm_head.weight``); ``null``: ``false``."""
    log_interval: int = 1
    """Log train metrics (and ``tokens`` / ``flops``) every this many optimizer steps."""
    save_interval: Optional[int] = 1000
    """Write ``out_dir/step-XXXXXXXX/`` (litgpt) and ``out_dir/checkpoints/step-XXXXXXXX.ckpt`` (Lightning, for
    ``resume``) every this many steps; ``null``: only ``final/`` and the last ``.ckpt``."""
    keep_last_checkpoints: Optional[int] = None
    """Keep only this many newest Lightning ``.ckpt`` files (``null``: keep all)."""


@dataclass
class EvalArgs:
    """Validation (logs ``val_loss`` and ``val_ppl``)."""

    interval: Optional[int] = 100
    """Validate every this many optimizer steps (and always at the end); ``null``: only at the end."""
    max_iters: Optional[int] = 100
    """Validation batches per evaluation (per device): a fixed, seeded sample of ``max_iters * micro_batch_size *
    devices`` windows spread over the whole validation split, the same at every evaluation and on resume (``null``:
    the whole split)."""
    initial_validation: bool = False
    """Also validate before the first step."""
    final_validation: bool = True
    """Validate after the last step when the interval did not just do it (the summary's final val loss)."""
    max_new_tokens: Optional[int] = None
    """Generate this many tokens (greedy) after each evaluation from the start of a validation sequence, print the
    text and log it (TensorBoard ``text``), as litgpt's ``generate_example``; ``null``: no sample."""
    evaluate_example: Union[str, int] = "first"
    """Which validation sequence prompts that sample: ``first``, ``random`` (seeded by the step) or its index in
    the validation batches of that evaluation."""


@dataclass
class LogArgs:
    """Logger settings (litgpt's ``log.*``): ``project``, ``run``, ``group`` for ``logger_name: wandb``; the others
    for ``logger_name: litlogger``. A value its logger does not use is refused."""

    project: Optional[str] = None
    """WandB project name (default: ``pretrain-<model name>``)."""
    run: Optional[str] = None
    """WandB run name."""
    group: Optional[str] = None
    """WandB group name."""
    teamspace: Optional[str] = None
    """LitLogger teamspace."""
    metadata: Optional[dict] = None
    """LitLogger metadata."""
    log_model: bool = False
    """LitLogger: log model checkpoints as artifacts."""
    save_logs: bool = True
    """LitLogger: upload terminal logs."""
    checkpoint_name: Optional[str] = None
    """LitLogger: base name of logged checkpoints."""


@dataclass
class StageArgs:
    """One growth. Exactly one of ``at_step`` / ``at_tokens``; the other keys are :class:`GrowthStage`'s."""

    at_step: Optional[int] = None
    """Grow after this many optimizer steps (before step ``at_step + 1``)."""
    at_tokens: Optional[int] = None
    """Grow once this many tokens have been seen: ``at_step = ceil(at_tokens / (global_batch_size * seq_len))``."""
    n_embd: Optional[int] = None
    """New hidden (residual stream) size. Heads and head size are unchanged."""
    intermediate_size: Optional[int] = None
    """New dense MLP inner size."""
    moe_intermediate_size: Optional[int] = None
    """New MoE expert inner size (every expert)."""
    init: str = "copy-copy"
    """``<fan_out>-<fan_in>`` init of the new channels, each side ``copy``, ``random`` or ``zero``."""
    rms_preserving: bool = True
    """Scale fan-in weights by alpha so activation RMS is kept (``false``: naive growth)."""
    optimizer_state: str = "asymmetric"
    """``asymmetric`` (new entries start at zero state), ``copy``, ``drop``, ``asymmetric-scaled`` or ``scaled``
    (copied state, scaled like the weights: the paper's "Scaled Optimizer States" baseline)."""
    rewarmup_ratio: Optional[float] = 1.3
    """New entries' LR re-warms from the LR at growth to this multiple of it (``null``: no re-warmup)."""
    rewarmup_steps: int = 250
    """Length of the new entries' linear LR re-warmup, in optimizer steps; must end before the last step
    (``at_step + rewarmup_steps < max_steps``)."""
    n_layer: Optional[int] = None
    """New number of blocks (depth growth); may be combined with widths in one stage."""
    depth_init: str = "copy-zero"
    """How a new block starts: ``copy-zero`` (its source's weights, output projections zeroed: function
    preserving), ``copy`` (its source's weights: G_stack) or ``random-zero`` (litgpt's init, output projections
    zeroed)."""
    depth_order: str = "stack"
    """Where new blocks go and which old block each copies: ``stack`` (new block ``L + i`` copies ``i % L``),
    ``interleave`` (every block followed by its copies) or ``middle`` (the middle blocks duplicated in place)."""
    n_head: Optional[int] = None
    """New number of query heads, of the same head size (new heads copy heads of their key/value group)."""
    n_query_groups: Optional[int] = None
    """New number of key/value groups (default: unchanged under GQA, new heads join the groups; MHA stays MHA)."""
    model_name: Optional[str] = None
    """Grow into this litgpt config (e.g. ``pythia-160m``): every size change is derived from it; other
    differences (head size, vocabulary, norm or MLP class, ...) are refused."""
    model_config: Optional[dict[str, Any]] = None
    """Grow into a litgpt config given by its fields (as ``model_name``)."""
    split: str = "even"
    """Paper baseline "Uneven Splitting": ``even``, ``uneven`` (source : copy shares ``split_ratio : 1 -
    split_ratio``) or ``random`` (a ratio per channel from [0.1, 0.5]); fan-in side ``copy`` only."""
    split_ratio: float = 1 / 3
    """The source's part ``r`` of ``r : 1 - r`` for ``split: uneven``, in (0, 1); 1/3 is the paper's 1:2."""
    perturb: float = 0.0
    """Paper baseline "Perturb": +delta on each copied fan-in column's source, -delta on the copy (standard
    deviation relative to the RMS of those columns); 0: off. Fan-in side ``copy`` only."""
    rewarmup_scope: str = "new"
    """``new`` (only new entries re-warm) or ``all`` (every parameter follows the re-warmup: "Re-warmup All")."""
    decay_speedup: float = 0.0
    """Paper baseline "faster decay": the baseline schedule's remaining decay runs in ``1 - decay_speedup`` of the
    remaining steps, then holds its final LR; in [0, 1), 0: off."""
    bias_correction: str = "shared"
    """``shared`` (new entries share their tensor's Adam step count) or ``fresh`` (their updates follow a fresh Adam's
    bias correction from the growth on; needs ``rewarmup_ratio`` and Adam/AdamW)."""
    symmetry_target: Optional[float] = None
    """Double the new entries' LR every ``symmetry_interval`` steps while their copies' mean cosine to their sources
    is above this (in (0, 1)), then stop (see ``symmetry_release``); ``null``: off."""
    symmetry_interval: int = 10
    """Optimizer steps between two symmetry checks (``symmetry_target`` only)."""
    symmetry_max_boost: float = 8.0
    """Largest multiplier of the new entries' LR under ``symmetry_target`` (>= 1)."""
    symmetry_release: str = "hold"
    """Once the copies' cosine is below ``symmetry_target``: ``hold`` the boost reached, or drop it (``schedule``)."""


@dataclass
class GrowthArgs:
    """Width growth (SPARKLING). No stages: plain pretraining."""

    stages: list[dict[str, Any]] = field(default_factory=list)
    """Growth stages, in increasing step order; each a mapping of :class:`StageArgs` keys (``at_step`` or
    ``at_tokens``, widths, recipe). A ``--growth.stages '[...]'`` override replaces the whole list."""
    seed: int = 0
    """Seed of the copy maps and random inits (identical on every rank)."""
    min_lr: Optional[float] = None
    """LR the new entries' re-warmup decays to at the last step (default: the baseline schedule's final LR)."""
    recipe: str = "recommended"
    """Keys every stage gets unless it sets them: ``recommended`` (the paper's copy-copy growth plus the closed loop
    on the symmetry lock: what the project's seeded comparisons found best, docs/BENCHMARKS.md), ``random-zero``
    (sourceless new channels re-warmed to 10x: best at the smallest token ratio measured) or ``paper`` (SPARKLING as
    published: GrowthStage's own defaults)."""


@dataclass
class RMSMonitorArgs:
    """Per-block activation RMS in TensorBoard (``rms/...`` tags)."""

    every_n_steps: int = 50
    """Measure one micro-batch every this many optimizer steps."""
    per_linear: bool = False
    """Also log the RMS gain of every linear layer (many tags)."""


def pretrain_arguments(
    model_name: Optional[str] = None,
    model_config: Optional[dict[str, Any]] = None,
    out_dir: Path = Path("out/sparkling"),
    precision: Optional[str] = None,
    initial_checkpoint_dir: Optional[Path] = None,
    resume: Union[bool, Literal["auto"], Path] = False,
    data: DataArgs = DataArgs(),
    train: TrainArgs = TrainArgs(),
    eval: EvalArgs = EvalArgs(),
    log: LogArgs = LogArgs(),
    optimizer: Union[str, dict] = "AdamW",
    devices: Union[int, str] = "auto",
    num_nodes: int = 1,
    accelerator: str = "auto",
    strategy: str = "auto",
    tokenizer_dir: Optional[Path] = None,
    logger_name: str = "tensorboard",
    seed: int = 42,
    num_threads: Optional[int] = None,
    growth: GrowthArgs = GrowthArgs(),
    rms_monitor: Optional[RMSMonitorArgs] = RMSMonitorArgs(),
) -> None:
    """Pretrain a litgpt model on Lightning's Trainer, growing its width mid-run (SPARKLING).

    Args:
        model_name: a litgpt model name (``litgpt.Config.from_name``); ``model_config`` keys override its fields.
        model_config: litgpt ``Config`` fields as a dict (``n_embd``, ``n_layer``, ``mlp_class_name``, ...).
            ``vocab_size`` defaults to the tokenizer's, ``block_size`` to ``data.seq_len``.
        out_dir: where checkpoints (``step-XXXXXXXX/``, ``final/``, ``checkpoints/``), TensorBoard logs (``logs/``)
            and ``summary.json`` go.
        precision: Lightning precision (``32-true``, ``bf16-mixed``, ``bf16-true``, ``16-mixed``); default
            ``bf16-mixed`` on a bf16 GPU, ``16-mixed`` on another GPU, ``32-true`` on CPU.
        initial_checkpoint_dir: start from the weights of this litgpt checkpoint dir (``lit_model.pth``,
            ``model_config.yaml``; e.g. a ``final/`` of this package, a grown one included): its config is the model's
            unless ``model_name`` / ``model_config`` are given (they must then match it), and its tokenizer is used
            unless ``tokenizer_dir`` is given. Fresh optimizer, schedule and step count; growth steps count from 0.
        resume: ``false``; ``auto`` (the newest ``out_dir/checkpoints/step-*.ckpt`` if any, else start fresh);
            ``true`` (the newest, an error if none); or a ``.ckpt`` path. The checkpoint is checked before anything
            starts (readable, same growth stages and model).
        data: the corpus (see ``data.*``), or a litgpt data module: ``{class_path: litgpt.data.TextFiles,
            init_args: {train_data_path: ...}}``.
        train: training length and optimization (see ``train.*``).
        eval: validation (see ``eval.*``).
        log: logger settings (see ``log.*``).
        optimizer: ``AdamW``, ``torch.optim.Muon`` or ``{class_path: ..., init_args: {lr: ..., ...}}`` (litgpt's
            format). With Muon, 2-D block weights use Muon and everything else AdamW.
        devices: devices per node (an int, or ``auto``: every GPU, or 1 CPU process).
        num_nodes: number of nodes.
        accelerator: ``auto``, ``cpu``, ``gpu``/``cuda``.
        strategy: ``auto`` (one device, or DDP for several), ``ddp``, ``fsdp2`` (``ModelParallelStrategy``,
            data parallel only), ``fsdp`` (FSDP1: ``FSDPStrategy(use_orig_params=True)``, CUDA GPUs only).
            DeepSpeed and tensor parallelism are refused.
        tokenizer_dir: use the ``tokenizer.json`` in this folder (e.g. a litgpt checkpoint dir) instead of training
            a BPE on the corpus; with a litgpt data module, the tokenizer it prepares its data with (as in litgpt).
        logger_name: ``tensorboard`` (the RMS dashboard's custom-scalars layout needs it), ``csv``, ``wandb`` or
            ``mlflow`` (when installed), as in litgpt. Logs go to ``out_dir/logs``.
        seed: model init and data order seed.
        num_threads: torch intra-op CPU threads (``torch.set_num_threads``); ``null``: torch's default (all cores).
            ``1`` is often much faster for small models on a busy machine.
        growth: growth stages and recipe (see ``growth.*``).
        rms_monitor: activation RMS dashboard settings; ``null`` disables it.
    """


# ------------------------------------------------------------------------------------------------------------ keys
_SECTIONS = {"data": DataArgs, "train": TrainArgs, "eval": EvalArgs, "log": LogArgs, "growth": GrowthArgs,
             "rms_monitor": RMSMonitorArgs}


def _suggest(key: str, known: list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(key, known, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_keys(raw: Any) -> None:
    """Refuse unknown keys of a configuration file, naming each by its full path (``growth.stages[0].n_embdd``).

    Raises:
        ConfigError: for the first unknown key.
    """
    import inspect

    if raw is None:
        return
    if not isinstance(raw, dict):
        raise ConfigError("config", f"a configuration file must hold a mapping of keys, got {type(raw).__name__}")
    top = [p for p in inspect.signature(pretrain_arguments).parameters] + ["config"]
    for key, value in raw.items():
        if key not in top:
            raise ConfigError(str(key), f"unknown key{_suggest(str(key), top)}; known keys: {', '.join(top[:-1])}")
        cls = _SECTIONS.get(key)
        if cls is not None and isinstance(value, dict):
            _check_dataclass_keys(cls, value, key)


def _check_dataclass_keys(cls: type, value: dict, path: str) -> None:
    known = [f.name for f in dataclasses.fields(cls)]
    for key, item in value.items():
        if key not in known:
            raise ConfigError(f"{path}.{key}", f"unknown key{_suggest(str(key), known)}; {path} takes "
                                               f"{', '.join(known)}")
        if cls is GrowthArgs and key == "stages" and isinstance(item, list):
            for k, stage in enumerate(item):
                if isinstance(stage, dict):
                    _check_dataclass_keys(StageArgs, stage, f"{path}.stages[{k}]")


# ------------------------------------------------------------------------------------------------------------ resolve
@dataclass
class ResolvedRun:
    """Everything a run needs, derived and checked from the parsed configuration (no side effects)."""

    model_config: Any  # litgpt.Config of the starting model
    stages: list[GrowthStage]
    steps: int
    tokens_per_step: int
    seq_len: int
    micro_batch_size: int
    accumulate: int
    devices: Union[int, str]
    num_devices: int
    num_nodes: int
    world_size: int
    accelerator: str
    strategy: str  # "auto" | "ddp" | "fsdp2" | "fsdp"
    precision: str
    optimizer: Union[str, dict]
    optimizer_name: str
    uses_muon: bool
    lr: float
    out_dir: Path
    resume: Union[bool, str, Path]
    resume_path: Optional[Path]
    tokenizer_dir: Optional[Path]
    data_vocab_size: int
    data: DataArgs
    train: TrainArgs
    eval: EvalArgs
    growth: GrowthArgs
    rms_monitor: Optional[RMSMonitorArgs]
    seed: int
    num_threads: Optional[int] = None
    notes: list[str] = field(default_factory=list)
    initial_checkpoint_dir: Optional[Path] = None  # the litgpt checkpoint dir the weights come from
    initial_weights: Optional[Path] = None  # its lit_model.pth
    logger_name: str = "tensorboard"
    log: Any = None  # LogArgs

    @property
    def litgpt_data(self) -> bool:
        """Whether the data is a litgpt data module (``data.class_path``) rather than the embedded corpus."""
        return self.data.class_path is not None

    @property
    def total_tokens(self) -> int:
        return self.steps * self.tokens_per_step


def _get(ns: Any, key: str, default: Any = None) -> Any:
    if ns is None:
        return default
    if isinstance(ns, dict):
        return ns.get(key, default)
    return getattr(ns, key, default)


def _as(cls: type, value: Any) -> Any:
    """A jsonargparse Namespace / dict / dataclass instance of ``cls`` as an instance of ``cls``."""
    if value is None or isinstance(value, cls):
        return value
    values = value.as_dict() if hasattr(value, "as_dict") else dict(value)
    values.pop("__path__", None)
    names = {f.name for f in dataclasses.fields(cls)}
    if cls is GrowthArgs:
        from lightning_sparkling.growth.stage import RECIPES, apply_recipe

        recipe = values.get("recipe", GrowthArgs.recipe)
        if recipe not in RECIPES:
            raise ConfigError("growth.recipe", f"unknown recipe {recipe!r}: choose one of {', '.join(RECIPES)}")
        stages = []
        for k, s in enumerate(values.get("stages") or []):
            s = s.as_dict() if hasattr(s, "as_dict") else s
            if not isinstance(s, (dict, StageArgs)):
                raise ConfigError(f"growth.stages[{k}]", f"expected a mapping of stage keys, got {s!r}")
            if isinstance(s, dict):
                _check_dataclass_keys(StageArgs, s, f"growth.stages[{k}]")
                s = apply_recipe(recipe, s)  # the recipe fills what the stage does not set
            stages.append(_as(StageArgs, s))
        values["stages"] = stages
    return cls(**{k: v for k, v in values.items() if k in names})


def _check_stage_sequence(stages: list[GrowthStage]) -> None:
    """``rewarmup_scope: all`` and ``decay_speedup`` only on the last stage (they redefine the rest of the run)."""
    from lightning_sparkling.growth.stage import check_stage_sequence

    try:
        check_stage_sequence(stages)
    except ValueError as err:
        k = next(i for i, s in enumerate(stages[:-1]) if s.changes_baseline)
        key = "rewarmup_scope" if stages[k].rewarmup_scope == "all" else "decay_speedup"
        raise ConfigError(f"growth.stages[{k}].{key}", str(err)) from err


def _positive_int(key: str, value: Any, *, allow_none: bool = False, minimum: int = 1) -> None:
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(key, f"must be an integer >= {minimum}, got {value!r}")


def tokenizer_vocab_size(tokenizer_dir: Path) -> int:
    """Vocabulary size of ``tokenizer_dir/tokenizer.json`` (read from the file; nothing is loaded or trained)."""
    path = Path(tokenizer_dir) / "tokenizer.json"
    spec = json.loads(path.read_text(encoding="utf-8"))
    ids = list((spec.get("model") or {}).get("vocab", {}).values()) + [t["id"] for t in spec.get("added_tokens", [])]
    return max(ids) + 1 if ids else 0


def model_config_from(model_name: Optional[str], model_config: Optional[dict], *, vocab_size: Optional[int],
                      seq_len: int):
    """The litgpt ``Config`` a run starts from: ``Config.from_name(model_name, **model_config)`` or
    ``Config(**model_config)``; ``vocab_size`` (and the derived ``padded_vocab_size``) from the tokenizer unless
    given, ``block_size`` = ``seq_len`` unless given (or set by the named model)."""
    from litgpt import Config

    overrides = dict(model_config or {})
    known = {f.name for f in dataclasses.fields(Config)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise ConfigError(f"model_config.{unknown[0]}", f"not a litgpt Config field (unknown keys: {unknown})")
    if "vocab_size" not in overrides and vocab_size is not None:  # None: the named model's (or Config's) own
        overrides["vocab_size"] = vocab_size
        overrides.setdefault("padded_vocab_size", None)  # re-derived from vocab_size and padding_multiple
    if model_name is None and "block_size" not in overrides:
        overrides["block_size"] = seq_len
    if model_name is not None:
        try:
            Config.from_name(model_name)
        except ValueError as err:
            raise ConfigError("model_name", f"{err} (see `litgpt pretrain list`)") from err
    elif not model_config:
        raise ConfigError("model_config", "give model_name (a litgpt model name) or model_config (Config fields)")
    try:
        if model_name is not None:
            return Config.from_name(model_name, **overrides)
        return Config(**overrides)
    except (ValueError, TypeError, AssertionError, ZeroDivisionError) as err:
        key, reason = _config_rejection(err)
        raise ConfigError(key, f"litgpt Config rejected it: {reason}") from err


_CONFIG_HINTS = {  # failed litgpt check (the fields it names) -> (the key to blame, the message)
    ("n_embd", "n_head"): ("n_embd", "n_embd={n_embd} is not divisible by n_head={n_head}: give an n_embd that is a "
                                     "multiple of n_head, or set model_config.head_size"),
    ("n_head", "n_query_groups"): ("n_query_groups", "n_head={n_head} is not divisible by "
                                                     "n_query_groups={n_query_groups}: give an n_query_groups that "
                                                     "divides n_head"),
}


def _config_rejection(err: BaseException) -> tuple[str, str]:
    """``(key, reason)`` for an exception of ``litgpt.Config(...)``. litgpt checks many fields with bare ``assert``
    statements (an empty message): the failed check is then read from the traceback, with the values of the fields it
    names (``assert self.n_embd % self.n_head == 0`` -> ``model_config.n_embd``, ``n_embd=66 is not divisible by
    n_head=4 ...``)."""
    import traceback

    if str(err).strip():
        return "model_config", f"{type(err).__name__}: {err}"
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    line = traceback.extract_tb(err.__traceback__)[-1].line if err.__traceback__ is not None else ""
    owner = tb.tb_frame.f_locals.get("self") if tb is not None else None
    names = list(dict.fromkeys(re.findall(r"self\.(\w+)", line or "")))
    values = {n: getattr(owner, n, "?") for n in names}
    key = f"model_config.{names[0]}" if names else "model_config"
    hint = _CONFIG_HINTS.get(tuple(names))
    if hint is not None:
        return f"model_config.{hint[0]}", hint[1].format(**values)
    shown = ", ".join(f"{n}={v!r}" for n, v in values.items())
    return key, (f"its check `{line}` failed" + (f" ({shown})" if shown else "")
                 + ": fix those model_config fields (see litgpt's Config)")


def normalize_optimizer(spec: Any) -> Union[str, dict]:
    """litgpt's optimizer spec as ``"Name"`` or ``{"class_path": ..., "init_args": {...}}``. Keys given next to
    ``class_path`` (what ``--optimizer.lr 0.01`` or ``--optimizer.init_args.lr 0.01`` produce on the command line)
    are moved into ``init_args``; their values are parsed as YAML (``"0.01"`` -> ``0.01``)."""
    import yaml

    if hasattr(spec, "as_dict"):
        spec = spec.as_dict()
    if isinstance(spec, str) or spec is None:
        return spec or "AdamW"
    if not isinstance(spec, dict):
        raise ConfigError("optimizer", f"expected a name or {{class_path, init_args}}, got {spec!r}")
    spec = dict(spec)
    if "class_path" not in spec:
        raise ConfigError("optimizer.class_path", f"missing (got {sorted(spec)}): give e.g. torch.optim.AdamW")
    init_args = dict(spec.pop("init_args", None) or {})
    class_path = spec.pop("class_path")
    for key, value in spec.items():
        init_args[key] = yaml.safe_load(value) if isinstance(value, str) else value
    return {"class_path": class_path, "init_args": init_args}


def _optimizer_info(spec: Union[str, dict]) -> tuple[str, bool, float]:
    """``(class name, is Muon, peak lr)``: the optimizer is built on a dummy parameter so that a wrong class or
    ``init_args`` fails here, naming the key."""
    import torch

    from lightning_sparkling.pretrain.module import _is_muon, resolve_optimizer

    try:
        cls, init_args = resolve_optimizer(spec)
    except (ValueError, TypeError) as err:
        raise ConfigError("optimizer", str(err)) from err
    try:
        opt = cls([torch.nn.Parameter(torch.zeros(2, 2))], **init_args)
    except TypeError as err:
        raise ConfigError("optimizer.init_args", f"{cls.__name__} rejects them: {err}") from err
    except ValueError as err:
        raise ConfigError("optimizer.init_args", str(err)) from err
    lr = float(opt.defaults.get("lr", opt.param_groups[0]["lr"]))
    if not lr > 0:
        raise ConfigError("optimizer.init_args.lr", f"must be positive, got {lr}")
    return cls.__name__, _is_muon(cls), lr


def _optimizer_defaults(spec: Union[str, dict]) -> dict[str, Any]:
    """The hyperparameters (``defaults``) of the optimizer ``spec`` builds (already checked by ``_optimizer_info``)."""
    import torch

    from lightning_sparkling.module import resolve_optimizer

    cls, init_args = resolve_optimizer(spec)
    return dict(cls([torch.nn.Parameter(torch.zeros(2, 2))], **init_args).defaults)


def _resolve_devices(accelerator: str, devices: Union[int, str], num_nodes: int) -> tuple[str, int]:
    import torch

    acc = str(accelerator).lower()
    if acc not in ("auto", "cpu", "gpu", "cuda", "mps"):
        raise ConfigError("accelerator", f"expected auto, cpu, gpu, cuda or mps, got {accelerator!r}")
    if acc == "auto":
        acc = "cuda" if torch.cuda.is_available() else "cpu"
    if acc == "gpu":
        acc = "cuda"
    if isinstance(devices, str):
        if devices in ("auto", "-1"):
            n = (torch.cuda.device_count() or 1) if acc == "cuda" else 1
        elif devices.isdigit() and int(devices) > 0:
            n = int(devices)
        else:
            raise ConfigError("devices", f"expected a positive integer or 'auto', got {devices!r}")
    elif isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise ConfigError("devices", f"expected a positive integer or 'auto', got {devices!r}")
    else:
        n = devices
    _positive_int("num_nodes", num_nodes)
    return acc, n


def _default_precision(accelerator: str) -> str:
    import torch

    if accelerator == "cuda" and torch.cuda.is_available():
        return "bf16-mixed" if torch.cuda.is_bf16_supported() else "16-mixed"
    return "32-true"


_STEP_RE = re.compile(r"step-(\d+)")


def _step_checkpoints(out_dir: Path) -> list[Path]:
    """``out_dir/checkpoints/step-*.ckpt`` (files, or directories for sharded FSDP checkpoints), newest (highest
    step) first. Hidden names (the temporaries of unfinished writes, ``.step-*.ckpt.*.tmp``) are left out."""
    folder = Path(out_dir) / "checkpoints"
    found = []
    for path in folder.iterdir() if folder.is_dir() else []:
        match = _STEP_RE.fullmatch(path.name.removesuffix(".ckpt"))
        if match and path.name.endswith(".ckpt") and not path.name.startswith("."):
            found.append((int(match.group(1)), path.stat().st_mtime, path))
    return [path for *_, path in sorted(found, reverse=True)]


def find_resume_checkpoint(out_dir: Path) -> Optional[Path]:
    """The newest Lightning checkpoint ``out_dir/checkpoints/step-*.ckpt`` (highest step; files, or directories
    for sharded FSDP2 checkpoints), or ``None``."""
    found = _step_checkpoints(out_dir)
    return found[0] if found else None


def newest_readable_checkpoint(out_dir: Path) -> tuple[Optional[Path], list[str]]:
    """The newest ``out_dir/checkpoints/step-*.ckpt`` that can be read (what ``resume: auto`` takes), and the newer
    ones skipped because they cannot (``"path (reason)"``: truncated, corrupt, a sharded directory without
    ``meta.pt``). Hidden temporaries of unfinished writes (``.step-*.ckpt.*.tmp``) are never candidates."""
    skipped: list[str] = []
    for path in _step_checkpoints(out_dir):
        try:
            _read_checkpoint(path)
        except Exception as err:  # noqa: BLE001 - torch/pickle raise anything on a corrupt file
            skipped.append(f"{path} ({_read_failure(err)})")
            continue
        return path, skipped
    return None, skipped


def _read_failure(err: BaseException) -> str:
    """The first line of why a checkpoint could not be read, e.g. ``RuntimeError: PytorchStreamReader failed``."""
    return f"{type(err).__name__}: {err}".strip().splitlines()[0].split(". ")[0].rstrip(":. ")


GROWTH_STATE_KEY = "WidthGrowthCallback"
"""``checkpoint["callbacks"]`` key of :class:`~lightning_sparkling.callbacks.growth.WidthGrowthCallback`'s state."""

_IGNORED_CONFIG_FIELDS = ("name", "hf_config")  # labels: they do not change the model


def _older_checkpoints(path: Path) -> list[Path]:
    """Other ``step-*.ckpt`` beside ``path``, newest first (what to resume from instead of a broken one)."""
    found = []
    for other in path.parent.iterdir() if path.parent.is_dir() else []:
        match = _STEP_RE.fullmatch(other.name.removesuffix(".ckpt"))
        if match and other.name.endswith(".ckpt") and other != path:
            found.append((int(match.group(1)), other))
    return [p for _, p in sorted(found, reverse=True)]


def _read_checkpoint(path: Path) -> tuple[dict[str, Any], Optional[dict[str, tuple[int, ...]]], str]:
    """``(checkpoint without tensors loaded, parameter name -> shape or None, what kind)`` of a Lightning checkpoint:
    a ``.ckpt`` file (memory-mapped: no tensor is read) or a sharded directory (FSDP2/FSDP1: ``meta.pt`` plus the
    ``torch.distributed.checkpoint`` metadata, which lists every tensor's global shape)."""
    import torch

    if path.is_dir():
        meta = path / "meta.pt"
        if not meta.is_file():
            raise ValueError("a directory without meta.pt (not a sharded Lightning checkpoint)")
        checkpoint = torch.load(meta, map_location="cpu", weights_only=False)
        shapes: Optional[dict[str, tuple[int, ...]]] = None
        try:
            from torch.distributed.checkpoint import FileSystemReader
            from torch.distributed.checkpoint.metadata import TensorStorageMetadata

            metadata = FileSystemReader(str(path)).read_metadata().state_dict_metadata
            shapes = {}
            for name, item in metadata.items():
                prefix = next((p for p in ("state_dict.", "model.") if name.startswith(p)), None)
                if prefix is not None and isinstance(item, TensorStorageMetadata):
                    shapes[name[len(prefix):]] = tuple(item.size)
        except Exception:  # noqa: BLE001 - an unreadable shard index: checked when Lightning loads it
            shapes = None
        return checkpoint, shapes, "sharded"
    checkpoint = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise ValueError("not a Lightning checkpoint (no state_dict)")
    shapes = {name: tuple(t.shape) for name, t in checkpoint["state_dict"].items() if hasattr(t, "shape")}
    return checkpoint, shapes, "file"


def _clean_name(name: str) -> str:
    """A checkpoint parameter name as a plain ``litgpt.GPT`` state_dict name (no module or wrapper prefixes)."""
    from lightning_sparkling.growth.surgery import clean_name

    return clean_name(name).removeprefix("model.")


def _expected_shapes(config: Any) -> dict[str, tuple[int, ...]]:
    """Parameter names and shapes of ``litgpt.GPT(config)``, built on the meta device (nothing allocated)."""
    import torch
    from litgpt import GPT

    with torch.device("meta"):
        model = GPT(config)
    return {name: tuple(t.shape) for name, t in model.state_dict().items()}


def check_resume_checkpoint(path: Path, config: Any, stages: list[GrowthStage], *, tie_embeddings: bool,
                            num_optimizers: Optional[int] = None) -> list[str]:
    """Check, before anything starts, that the run can resume from the Lightning checkpoint ``path``: it is
    readable, its growth was done by a prefix of ``stages`` (the same stages, none skipped), and its model is the
    configured one grown by those stages (litgpt ``Config`` fields, parameter names and shapes, tied embeddings,
    number of optimizers).

    Args:
        path: a ``.ckpt`` file or a sharded checkpoint directory (FSDP2/FSDP1, with ``meta.pt``).
        config: the run's starting ``litgpt.Config``.
        stages: the run's growth stages.
        tie_embeddings: the run's ``train.tie_embeddings``.
        num_optimizers: how many optimizers the run builds (2 with Muon: Muon + AdamW), or ``None`` not to check.

    Returns:
        notes on what was checked (e.g. a sharded directory's shapes could not be read).

    Raises:
        ConfigError: (key ``resume``) naming the file, what differs and the fix.
    """
    from dataclasses import asdict

    from lightning_sparkling.growth.plan import GrowthError, plan_growth

    path = Path(path)
    older = _older_checkpoints(path) if not path.is_dir() else []
    instead = (f"resume from an older one (--resume {older[0]})" if older else "start afresh (--resume false)")
    try:
        checkpoint, shapes, kind = _read_checkpoint(path)
    except Exception as err:  # noqa: BLE001 - torch/pickle raise anything on a corrupt file
        reason = _read_failure(err)
        raise ConfigError("resume", f"cannot read the checkpoint {str(path)!r} ({reason}): it is corrupt, truncated "
                                    f"(a write that did not finish?) or not a `sparkling pretrain` checkpoint; "
                                    f"{instead}") from err
    notes: list[str] = []
    fresh = "or start a fresh out_dir (--out_dir NEW, or --resume false)"
    step = int(checkpoint.get("global_step", 0) or 0)

    # ---------------------------------------------------------------- growth stages
    state = (checkpoint.get("callbacks") or {}).get(GROWTH_STATE_KEY) or {}
    grown = int(state.get("grown", 0) or 0)
    try:
        applied = [GrowthStage(**s) for s in (state.get("stages") or [])[:grown]]
    except (TypeError, ValueError) as err:
        raise ConfigError("resume", f"{str(path)!r} holds growth stages this version cannot read ({err})") from err
    if grown > len(stages):
        raise ConfigError("resume", f"{str(path)!r} was grown by {grown} stage(s) but growth.stages has "
                                    f"{len(stages)}: resume with the growth.stages it was trained with "
                                    f"({[s.to_dict() for s in applied]}), {fresh}")
    for k, (done, given) in enumerate(zip(applied, stages)):
        if done != given:
            diff = ", ".join(f"{f}: checkpoint {getattr(done, f)!r}, config {getattr(given, f)!r}"
                             for f in done.to_dict() if getattr(done, f) != getattr(given, f))
            from lightning_sparkling.growth.stage import RECIPES

            differing = {f for f in done.to_dict() if getattr(done, f) != getattr(given, f)}
            recipe = ("; only the recipe's keys differ: growth.recipe: paper (the recipe of runs started before "
                      "recipes existed) or the recipe it was trained with"
                      if differing <= {k for keys in RECIPES.values() for k in keys} else "")
            raise ConfigError("resume", f"{str(path)!r} was grown by another growth.stages[{k}] than the config's "
                                        f"({diff}): resume with the stages it was trained with{recipe}, {fresh}")
    if grown < len(stages) and stages[grown].at_step < step:
        raise ConfigError("resume", f"{str(path)!r} is at step {step} and was not grown by growth.stages[{grown}] "
                                    f"(at_step={stages[grown].at_step}): that growth would happen late, at step "
                                    f"{step}; resume with the growth.stages it was trained with, {fresh}")

    # ---------------------------------------------------------------- architecture
    expected = config
    try:
        for k, stage in enumerate(stages[:grown]):
            expected = plan_growth(expected, stage, seed=0, stage_index=k, tied_embeddings=tie_embeddings).new_config
    except GrowthError as err:  # already checked by resolve(); kept for direct callers
        raise ConfigError("resume", str(err)) from err
    hparams = checkpoint.get("hyper_parameters") or {}
    if "tie_embeddings" in hparams and bool(hparams["tie_embeddings"]) != bool(tie_embeddings):
        raise ConfigError("resume", f"{str(path)!r} was trained with train.tie_embeddings={hparams['tie_embeddings']}, "
                                    f"the config gives {tie_embeddings}: resume with the same setting, {fresh}")
    saved = checkpoint.get("model_config")
    if isinstance(saved, dict):
        want = asdict(expected)
        differ = [f for f in want if f in saved and f not in _IGNORED_CONFIG_FIELDS and saved[f] != want[f]]
        if differ:
            detail = ", ".join(f"{f}: checkpoint {saved[f]!r}, config {want[f]!r}" for f in differ[:4])
            grown_by = f" grown by its {grown} applied stage(s)" if grown else ""
            raise ConfigError("resume", f"{str(path)!r} holds another model than model_config{grown_by} ({detail}"
                                        f"{', ...' if len(differ) > 4 else ''}): resume with the model_config it was "
                                        f"trained with, {fresh}")
    if shapes is not None:
        found = {_clean_name(n): s for n, s in shapes.items()}
        want_shapes = _expected_shapes(expected)
        tied_names = {"lm_head.weight", "transformer.wte.weight"} if tie_embeddings else set()
        missing = sorted(n for n in set(want_shapes) - set(found) if n not in tied_names)
        extra = sorted(set(found) - set(want_shapes))
        wrong = [f"{n}: checkpoint {found[n]}, config {s}" for n, s in want_shapes.items()
                 if n in found and found[n] != s]
        if missing or extra or wrong:
            detail = "; ".join(([f"missing {', '.join(missing[:3])}"] if missing else [])
                               + ([f"unexpected {', '.join(extra[:3])}"] if extra else []) + wrong[:3])
            raise ConfigError("resume", f"{str(path)!r} does not hold the parameters of model_config (after "
                                        f"{grown} growth stage(s)): {detail}; resume with the model_config it was "
                                        f"trained with, {fresh}")
    else:
        notes.append(f"resume: {path} is a sharded checkpoint whose tensor index could not be read: its growth "
                     "stages and model_config were checked, parameter shapes are checked when it loads")
    if num_optimizers is not None and kind == "file" and "optimizer_states" in checkpoint:
        have = len(checkpoint["optimizer_states"])
        if have != num_optimizers:
            raise ConfigError("resume", f"{str(path)!r} holds {have} optimizer state(s) and this run builds "
                                        f"{num_optimizers} (Muon runs have 2: Muon + AdamW): resume with the "
                                        f"optimizer it was trained with, {fresh}")
    return notes


def _resolve_hardware(ns: Any) -> tuple[str, int, str, int, int, str]:
    """``(strategy, num_nodes, accelerator, num_devices, world size, precision)`` of a run."""
    # ---------------------------------------------------------------- hardware
    strategy = str(_get(ns, "strategy", "auto") or "auto")
    if strategy not in STRATEGIES:
        unsupported = ("deepspeed" in strategy.lower() or "tensor" in strategy.lower()
                       or strategy.lower() in ("tp", "model_parallel"))
        why = (" (DeepSpeed and tensor parallelism cannot be grown in place: the callback rebuilds plain, DDP or "
               "FSDP-sharded litgpt modules only)" if unsupported else "")
        raise ConfigError("strategy", f"{strategy!r} is not supported{why}; use auto, ddp, fsdp2 (FSDP2 sharding) or "
                                      "fsdp (FSDP1, CUDA only)")
    num_nodes = _get(ns, "num_nodes", 1)
    accelerator, num_devices = _resolve_devices(_get(ns, "accelerator", "auto"), _get(ns, "devices", "auto"),
                                                num_nodes)
    if strategy == "fsdp" and accelerator != "cuda":
        raise ConfigError("strategy", f"'fsdp' (FSDP1, Lightning's FSDPStrategy) runs on CUDA GPUs only, and the "
                                      f"accelerator here is {accelerator!r}: use 'fsdp2' (FSDP2 sharding, CPU or GPU) "
                                      "or 'ddp'")
    world = num_devices * num_nodes
    if strategy == "auto" and world > 1:
        strategy = "ddp"
    precision = _get(ns, "precision") or _default_precision(accelerator)
    precision = str(precision)
    if precision not in PRECISIONS:
        raise ConfigError("precision", f"expected one of {', '.join(PRECISIONS)}, got {precision!r}")
    return strategy, num_nodes, accelerator, num_devices, world, precision


def _check_litgpt_keys(ns: Any, train: TrainArgs, evaluation: EvalArgs, log: LogArgs, notes: list[str]) -> str:
    """Refuse litgpt keys that have no equivalent here; returns the logger name (notes are appended to ``notes``)."""
    from lightning_sparkling.pretrain import litgpt_compat

    # ---------------------------------------------------------------- litgpt keys without an equivalent
    if train.epochs is not None:
        raise ConfigError("train.epochs", "cannot be honoured: the run length must be known before the data is read "
                                          "(LR schedule, growth steps), and `litgpt pretrain` refuses it too; give "
                                          "train.max_tokens (or train.max_steps) and remove train.epochs")
    if train.max_time is not None and not (isinstance(train.max_time, (int, float)) and train.max_time > 0):
        raise ConfigError("train.max_time", f"must be a positive number of seconds, got {train.max_time!r}")
    _positive_int("train.max_seq_length", train.max_seq_length, allow_none=True)
    _positive_int("eval.max_new_tokens", evaluation.max_new_tokens, allow_none=True)
    example = evaluation.evaluate_example
    if not (example in ("first", "random") or (isinstance(example, int) and not isinstance(example, bool)
                                                and example >= 0)):
        raise ConfigError("eval.evaluate_example", f"expected 'first', 'random' or an index >= 0, got {example!r}")
    logger_name = str(_get(ns, "logger_name", "tensorboard") or "tensorboard")
    notes += litgpt_compat.check_logger(logger_name, log)
    return logger_name


def _read_initial_checkpoint(ns: Any) -> tuple[Path | None, Any, Any, Path | None]:
    """``(initial_checkpoint_dir, its litgpt Config, its tensor shapes, its weights file)`` (all ``None`` without one)."""
    from lightning_sparkling.pretrain import litgpt_compat

    # ---------------------------------------------------------------- initial checkpoint
    initial_dir = _get(ns, "initial_checkpoint_dir")
    initial_config = initial_shapes = initial_weights = None
    if initial_dir is not None:
        initial_config, initial_shapes, initial_weights = litgpt_compat.read_initial_checkpoint(Path(str(initial_dir)))
        initial_dir = initial_weights.parent
    return initial_dir, initial_config, initial_shapes, initial_weights


def _resolve_data(ns: Any, data: DataArgs, train: TrainArgs, initial_dir: Path | None, initial_config: Any,
                  notes: list[str]) -> tuple[Any, Path | None, int | None]:
    """``(litgpt data class or None, tokenizer_dir, vocabulary size the data needs or None)``."""
    from lightning_sparkling.pretrain import litgpt_compat

    # ---------------------------------------------------------------- data
    data_class = None
    if data.class_path is not None:
        corpus_keys = [f.name for f in dataclasses.fields(DataArgs)
                       if f.name not in ("class_path", "init_args") and getattr(data, f.name) != f.default]
        if corpus_keys:
            raise ConfigError(f"data.{corpus_keys[0]}", f"is a key of the embedded corpus, and data.class_path "
                                                        f"{data.class_path!r} is given: put the data module's "
                                                        "arguments in data.init_args (the sequence length is "
                                                        "train.max_seq_length)")
        data_class = litgpt_compat.resolve_data_class(data.class_path)
        litgpt_compat.check_data_init_args(data_class, data.init_args)
    elif data.init_args is not None:
        raise ConfigError("data.init_args", "is only read with data.class_path (a litgpt data module)")
    if data.source not in ("stdlib", "stdlib+site-packages"):
        raise ConfigError("data.source", f"expected 'stdlib' or 'stdlib+site-packages', got {data.source!r} (for your "
                                         "own text set data.data_dir)")
    _positive_int("data.seq_len", data.seq_len, allow_none=True)
    _positive_int("data.vocab_size", data.vocab_size, minimum=2)
    if not 0 < data.val_percent < 100:
        raise ConfigError("data.val_percent", f"must be in (0, 100), got {data.val_percent}")
    _positive_int("data.max_files", data.max_files, allow_none=True, minimum=2)
    _positive_int("data.max_bytes", data.max_bytes, allow_none=True)
    _positive_int("data.num_workers", data.num_workers, minimum=0)
    _check_data_dir(data)
    if (data.seq_len is not None and train.max_seq_length is not None and data.seq_len != train.max_seq_length):
        raise ConfigError("train.max_seq_length", f"{train.max_seq_length} differs from data.seq_len={data.seq_len}: "
                                                  "give one of them")
    tokenizer_dir, tokenizer = _get(ns, "tokenizer_dir"), None
    if tokenizer_dir is None and initial_dir is not None and (initial_dir / "tokenizer.json").is_file():
        tokenizer_dir = initial_dir  # the model's own tokenizer: its token ids are what its weights were trained on
        notes.append(f"tokenizer: {initial_dir} (the initial checkpoint's)")
    if tokenizer_dir is None and data_class is not None and litgpt_compat.needs_tokenizer(data_class):
        raise ConfigError("tokenizer_dir", f"{data.class_path} tokenizes its text with the tokenizer of tokenizer_dir "
                                           "(as in litgpt): give tokenizer_dir (a folder with tokenizer.json, e.g. a "
                                           "litgpt checkpoint dir)")
    if tokenizer_dir is not None:
        tokenizer_dir = litgpt_compat.extend_checkpoint_dir(Path(str(tokenizer_dir)))
        if not (tokenizer_dir / "tokenizer.json").is_file():
            raise ConfigError("tokenizer_dir", f"{str(tokenizer_dir)!r} holds no tokenizer.json (a Hugging Face "
                                               "`tokenizers` file, as in litgpt checkpoint dirs)")
        try:
            data_vocab = tokenizer_vocab_size(tokenizer_dir)
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise ConfigError("tokenizer_dir", f"cannot read {tokenizer_dir / 'tokenizer.json'}: {err}") from err
        tokenizer = _check_tokenizer(tokenizer_dir, data_class)
    elif data_class is not None or initial_config is not None:
        data_vocab = None  # the model's own vocabulary (litgpt: model_name / model_config; or the checkpoint's)
    else:
        data_vocab = data.vocab_size
    if data_class is not None:
        litgpt_compat.check_litgpt_data(data_class, data.init_args, tokenizer, tokenizer_dir)
    return data_class, tokenizer_dir, data_vocab


def _check_data_dir(data: DataArgs) -> None:
    """``data.data_dir`` must be a folder whose text files (``*.txt``, ``*.py``, ``*.md`` below it, not empty) fill
    both splits, as the data module will list and split them once the run has started."""
    if data.data_dir is None:
        return
    if not Path(data.data_dir).expanduser().is_dir():
        raise ConfigError("data.data_dir", f"{str(data.data_dir)!r} is not a directory")
    from lightning_sparkling.pretrain.data import corpus_splits

    try:
        corpus_splits(data.source, Path(data.data_dir).expanduser(), data.include_tests, data.val_percent,
                      data.max_files, data.max_bytes)
    except (OSError, ValueError) as err:
        raise ConfigError("data.data_dir", f"{err}") from err


def _check_tokenizer(tokenizer_dir: Path, data_class: Any) -> Any:
    """litgpt's ``Tokenizer`` of ``tokenizer_dir`` (it must load); with the embedded corpus it must have the EOS token
    that ends every file (``<|endoftext|>`` when it names none). A litgpt data module's needs are checked by
    :func:`~lightning_sparkling.pretrain.litgpt_compat.check_litgpt_data`."""
    from lightning_sparkling.pretrain import litgpt_compat

    tokenizer = litgpt_compat.load_tokenizer(tokenizer_dir)
    if data_class is None and tokenizer.eos_id is None and tokenizer.processor.token_to_id("<|endoftext|>") is None:
        litgpt_compat.check_special_token(tokenizer, tokenizer_dir, "eos", "the corpus of data.data_dir / "
                                          "data.source ends every file with one (or <|endoftext|>, absent too)")
    return tokenizer


def _resolve_model(ns: Any, data: DataArgs, train: TrainArgs, evaluation: EvalArgs, initial_config: Any,
                   initial_shapes: Any, data_vocab: int | None, tokenizer_dir: Path | None,
                   data_class: Any) -> tuple[Any, int]:
    """``(litgpt Config of the initial model, sequence length)``."""
    # ---------------------------------------------------------------- model
    model_name = _get(ns, "model_name")
    model_config = _get(ns, "model_config")
    if hasattr(model_config, "as_dict"):
        model_config = model_config.as_dict()
    seq_key = "train.max_seq_length" if train.max_seq_length is not None else "data.seq_len"
    seq_len = train.max_seq_length if train.max_seq_length is not None else data.seq_len
    if initial_config is not None:
        config = _initial_model_config(initial_config, initial_shapes, model_name, model_config)
        if data_vocab is not None and config.padded_vocab_size < data_vocab:
            raise ConfigError("tokenizer_dir", f"its vocabulary ({data_vocab}) is larger than the initial checkpoint's "
                                               f"padded_vocab_size={config.padded_vocab_size}")
    else:
        config = model_config_from(model_name, model_config, vocab_size=data_vocab, seq_len=seq_len or 512)
    if seq_len is None:
        seq_len = config.block_size if (model_name is not None or initial_config is not None
                                        or "block_size" in (model_config or {})) else 512
    if data_vocab is not None and config.padded_vocab_size < data_vocab:
        raise ConfigError("model_config.vocab_size",
                          f"the model's padded_vocab_size={config.padded_vocab_size} is smaller than the tokenizer's "
                          f"vocabulary ({data_vocab})")
    if seq_len > config.block_size:
        raise ConfigError(seq_key, f"{seq_len} is longer than the model's block_size={config.block_size}")
    if evaluation.max_new_tokens is not None and tokenizer_dir is None and data_class is not None:
        raise ConfigError("eval.max_new_tokens", "the sample is decoded with the tokenizer of tokenizer_dir, and none "
                                                 "is given: give tokenizer_dir or remove eval.max_new_tokens")
    return config, seq_len


def _resolve_length(ns: Any, train: TrainArgs, evaluation: EvalArgs, num_devices: int, num_nodes: int,
                    world: int, seq_len: int, notes: list[str]) -> tuple[int, int, int]:
    """``(gradient accumulation, tokens per optimizer step, optimizer steps)`` of the run."""
    # ---------------------------------------------------------------- batch and length
    _positive_int("train.micro_batch_size", train.micro_batch_size)
    _positive_int("train.global_batch_size", train.global_batch_size)
    per_step = train.micro_batch_size * world
    if train.global_batch_size % per_step:
        raise ConfigError("train.global_batch_size",
                          f"{train.global_batch_size} is not divisible by micro_batch_size * devices * num_nodes = "
                          f"{train.micro_batch_size} * {num_devices} * {num_nodes} = {per_step}")
    accumulate = train.global_batch_size // per_step
    tokens_per_step = train.global_batch_size * seq_len
    if train.max_steps is not None:
        _positive_int("train.max_steps", train.max_steps)
        steps = train.max_steps
        if train.max_tokens is not None:
            notes.append(f"train.max_steps={steps} wins over train.max_tokens={train.max_tokens}")
    elif train.max_tokens is not None:
        _positive_int("train.max_tokens", train.max_tokens)
        steps = train.max_tokens // tokens_per_step
        if steps < 1:
            raise ConfigError("train.max_tokens", f"{train.max_tokens} is less than one optimizer step "
                                                  f"({tokens_per_step} tokens = global_batch_size * seq_len)")
    else:
        raise ConfigError("train.max_steps", "give train.max_steps or train.max_tokens")
    if train.lr_warmup_steps is not None and train.lr_warmup_fraction is not None:
        raise ConfigError("train.lr_warmup_steps", "give lr_warmup_steps or lr_warmup_fraction, not both")
    if train.lr_warmup_steps is not None:
        _positive_int("train.lr_warmup_steps", train.lr_warmup_steps, minimum=0)
        if train.lr_warmup_steps > steps:
            raise ConfigError("train.lr_warmup_steps", f"{train.lr_warmup_steps} is longer than the run ({steps} "
                                                       "steps)")
    if train.lr_warmup_fraction is not None and not 0 <= train.lr_warmup_fraction <= 1:
        raise ConfigError("train.lr_warmup_fraction", f"must be in [0, 1], got {train.lr_warmup_fraction}")
    _check_lr_schedule(train)
    if train.max_norm is not None and train.max_norm < 0:
        raise ConfigError("train.max_norm", f"must be >= 0, got {train.max_norm}")
    _positive_int("train.log_interval", train.log_interval)
    _positive_int("train.save_interval", train.save_interval, allow_none=True)
    _positive_int("train.keep_last_checkpoints", train.keep_last_checkpoints, allow_none=True)
    _positive_int("num_threads", _get(ns, "num_threads"), allow_none=True)
    _positive_int("eval.interval", evaluation.interval, allow_none=True)
    _positive_int("eval.max_iters", evaluation.max_iters, allow_none=True)
    return accumulate, tokens_per_step, steps


def _check_lr_schedule(train: TrainArgs) -> None:
    """``train.lr_schedule``, ``train.lr_decay_fraction`` and ``train.lr_decay_shape`` (issue 23: WSD)."""
    if train.lr_schedule not in ("cosine", "wsd"):
        raise ConfigError("train.lr_schedule", f"choose cosine or wsd, got {train.lr_schedule!r}")
    fraction = train.lr_decay_fraction
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
        raise ConfigError("train.lr_decay_fraction", f"must be in (0, 1] (the share of the run spent decaying), "
                                                     f"got {fraction!r}")
    if train.lr_decay_shape not in WSD_DECAY_SHAPES:
        raise ConfigError("train.lr_decay_shape", f"choose one of {', '.join(WSD_DECAY_SHAPES)}, got "
                                                  f"{train.lr_decay_shape!r}")


def lr_decay_start(train: TrainArgs, steps: int) -> Optional[int]:
    """The first step of the WSD decay phase of a run of ``steps`` optimizer steps (``None`` under ``cosine``), as
    ``LitGPTPretrainModule`` builds it (warmup ``lr_warmup_steps``, else ``ceil(fraction * steps)``, default 0.03)."""
    if train.lr_schedule != "wsd":
        return None
    if train.lr_warmup_steps is not None:
        warmup = train.lr_warmup_steps
    else:
        warmup = math.ceil((0.03 if train.lr_warmup_fraction is None else train.lr_warmup_fraction) * steps)
    return wsd_decay_start(warmup_steps=min(warmup, steps), total_steps=steps, decay_fraction=train.lr_decay_fraction)


def _check_wsd_growth(stages: list[GrowthStage], keys: list[str], train: TrainArgs, steps: int) -> None:
    """Under ``train.lr_schedule: wsd``, refuse a growth inside the decay phase, naming the stage's step key."""
    start = lr_decay_start(train, steps)
    if start is None:
        return
    for stage, key in zip(stages, keys):
        try:
            check_growth_before_decay([stage.at_step], decay_start=start, total_steps=steps, names=[key],
                                      setting=f", train.lr_decay_fraction={train.lr_decay_fraction:g}")
        except ValueError as err:
            raise ConfigError(key, str(err).removeprefix(f"{key}: ")) from err


def _resolve_optimizer(ns: Any, train: TrainArgs, strategy: str, precision: str) -> tuple[dict, str, bool, float]:
    """``(normalized optimizer spec, its name, whether it uses Muon, its lr)``."""
    # ---------------------------------------------------------------- optimizer
    spec = normalize_optimizer(_get(ns, "optimizer", "AdamW"))
    optimizer_name, uses_muon, lr = _optimizer_info(spec)
    if train.min_lr is not None:
        if train.min_lr < 0:
            raise ConfigError("train.min_lr", f"must be >= 0, got {train.min_lr}")
        if train.min_lr > lr:
            raise ConfigError("train.min_lr", f"{train.min_lr} is larger than the optimizer's lr={lr}")
    if uses_muon and strategy == "fsdp":
        raise ConfigError("optimizer", "Muon orthogonalizes whole 2-D matrices, and FSDP1 ('fsdp') hands the optimizer "
                                       "flattened 1-D shards: use strategy 'fsdp2' or 'ddp' with Muon, or AdamW")
    if uses_muon and precision in ("16-mixed", "16"):
        raise ConfigError("precision", "16-mixed (gradient scaling) is not supported with Muon: use bf16-mixed, "
                                       "bf16-true or 32-true")
    return spec, optimizer_name, uses_muon, lr


def _target_with_run_vocabulary(stage: GrowthStage, config: Any, key: str, notes: list[str]) -> GrowthStage:
    """A ``model_name`` / ``model_config`` stage whose target takes the run's vocabulary, as the starting model does
    (``vocab_size`` from the tokenizer): the named config's fields with the model's ``vocab_size`` and
    ``padded_vocab_size``, as ``model_config``. A ``model_config`` that sets ``vocab_size`` itself is kept (a
    different vocabulary is then refused by the dry run, naming both values)."""
    from lightning_sparkling.growth.plan import GrowthError, target_config

    if stage.model_name is None and (stage.model_config is None or "vocab_size" in stage.model_config):
        return stage
    try:
        target = target_config(stage)
    except GrowthError as err:
        raise ConfigError(f"{key}.{'model_name' if stage.model_name else 'model_config'}", str(err)) from err
    fields_ = {f.name: getattr(target, f.name) for f in dataclasses.fields(target) if f.init}
    if (target.vocab_size, target.padded_vocab_size) != (config.vocab_size, config.padded_vocab_size):
        notes.append(f"{key}: the target {target.name} takes the run's vocabulary (vocab_size {config.vocab_size}, "
                     f"padded {config.padded_vocab_size}) instead of its own ({target.vocab_size}), as the starting "
                     "model does")
    fields_.update(vocab_size=config.vocab_size, padded_vocab_size=config.padded_vocab_size)
    return dataclasses.replace(stage, model_name=None, model_config=fields_)


def _resolve_stages(growth: GrowthArgs, config: Any, train: TrainArgs, steps: int, tokens_per_step: int,
                    strategy: str, num_devices: int, num_nodes: int, notes: list[str] | None = None
                    ) -> list[GrowthStage]:
    """The ``GrowthStage`` list of ``growth.stages`` (``at_tokens`` turned into steps), each dry-run on the model
    (a named target takes the run's vocabulary: :func:`_target_with_run_vocabulary`)."""
    # ---------------------------------------------------------------- growth
    from lightning_sparkling.growth.plan import GrowthError, plan_growth

    if growth.min_lr is not None and (growth.min_lr < 0 or not math.isfinite(growth.min_lr)):
        raise ConfigError("growth.min_lr", f"must be a finite number >= 0, got {growth.min_lr}")
    stages: list[GrowthStage] = []
    step_keys: list[str] = []  # growth.stages[k].at_step or .at_tokens, as given
    current = config
    for k, s in enumerate(growth.stages):
        key = f"growth.stages[{k}]"
        if (s.at_step is None) == (s.at_tokens is None):
            raise ConfigError(f"{key}.at_step", "give exactly one of at_step or at_tokens")
        if s.at_tokens is not None:
            _positive_int(f"{key}.at_tokens", s.at_tokens, minimum=0)
            at_step = math.ceil(s.at_tokens / tokens_per_step)
            where = f"{key}.at_tokens"
        else:
            _positive_int(f"{key}.at_step", s.at_step, minimum=0)
            at_step, where = s.at_step, f"{key}.at_step"
        if at_step >= steps:
            raise ConfigError(where, f"growth at step {at_step} is at or past the end of the run (max_steps={steps}): "
                                     "the grown model would never train")
        if stages and at_step <= stages[-1].at_step:
            raise ConfigError(where, f"step {at_step} is not after the previous stage's step {stages[-1].at_step}: "
                                     "stages must grow in increasing step order")
        fields_ = {f.name: getattr(s, f.name) for f in dataclasses.fields(GrowthStage) if f.name != "at_step"}
        try:
            stage = GrowthStage(at_step, **fields_)
        except ValueError as err:
            bad = next((name for name in fields_ if re.search(rf"\b{name}=", str(err))), None)
            raise ConfigError(f"{key}.{bad}" if bad else key, str(err)) from err
        stage = _target_with_run_vocabulary(stage, current, key, notes if notes is not None else [])
        try:
            current = plan_growth(current, stage, seed=growth.seed, stage_index=k,
                                  tied_embeddings=train.tie_embeddings).new_config
        except GrowthError as err:
            bad = next((name for name in stage.sizes if re.search(rf"\b{name}\b", str(err))), None)
            raise ConfigError(f"{key}.{bad}" if bad else key, str(err)) from err
        try:
            check_rewarmup_fits([stage], steps, names=[key])
        except ValueError as err:
            raise ConfigError(f"{key}.rewarmup_steps", str(err).removeprefix(f"{key}: ")) from err
        stages.append(stage)
        step_keys.append(where)
    _check_wsd_growth(stages, step_keys, train, steps)
    _check_stage_sequence(stages)
    if stages and strategy == "fsdp2" and num_devices * num_nodes < 1:
        raise ConfigError("devices", "fsdp2 needs at least one device")
    return stages


def _check_fresh_bias_correction(stages: list[GrowthStage], spec: Union[str, dict], optimizer_name: str,
                                 uses_muon: bool) -> None:
    """``bias_correction: fresh`` redoes Adam's bias correction: refuse it for an optimizer without ``betas``."""
    fresh = next((k for k, s in enumerate(stages) if s.bias_correction == "fresh"), None)
    if fresh is not None and (uses_muon or "betas" not in _optimizer_defaults(spec)):
        raise ConfigError(f"growth.stages[{fresh}].bias_correction",
                          f"'fresh' redoes Adam's bias correction, but the optimizer {optimizer_name} "
                          f"{'(Muon for matrices) ' if uses_muon else ''}has no betas: use AdamW or Adam, or "
                          "bias_correction: shared")


def _resolve_resume(ns: Any, initial_dir: Path | None, config: Any, stages: list[GrowthStage], train: TrainArgs,
                    uses_muon: bool, notes: list[str]) -> tuple[Path, Any, Path | None]:
    """``(out_dir, resume setting, checkpoint to resume or None)``; the checkpoint is checked against the run."""
    # ---------------------------------------------------------------- resume
    out_dir = Path(str(_get(ns, "out_dir", "out/sparkling"))).expanduser()
    resume = _get(ns, "resume", False)
    resume_path = None
    if initial_dir is not None and resume not in (False, None, "false", "False", "auto"):
        raise ConfigError("resume", "give resume or initial_checkpoint_dir, not both (as litgpt): resume continues a "
                                    "run of this out_dir, initial_checkpoint_dir starts a new one from weights; "
                                    "resume: auto resumes when out_dir has a checkpoint, else starts from "
                                    "initial_checkpoint_dir")
    if resume in ("auto", True, "true", "True"):
        resume_path = _newest_to_resume(out_dir, notes)
        if resume_path is None and resume != "auto":
            raise ConfigError("resume", f"no checkpoint to resume from in {out_dir / 'checkpoints'}")
    elif resume not in (False, None, "false", "False"):
        resume_path = Path(str(resume)).expanduser()
        if not resume_path.exists():
            raise ConfigError("resume", f"{str(resume_path)!r} does not exist")
        if (resume_path / "lit_model.pth").is_file() or resume_path.name == "lit_model.pth":
            raise ConfigError("resume", f"{str(resume_path)!r} is a litgpt checkpoint (lit_model.pth), not a Lightning "
                                        "checkpoint of `sparkling pretrain` (out_dir/checkpoints/step-*.ckpt): start "
                                        "from its weights with initial_checkpoint_dir instead")
    if resume_path is not None and initial_dir is not None:
        notes.append(f"resume: auto found {resume_path}: resuming it (initial_checkpoint_dir is not read)")
    if resume_path is not None:
        notes += check_resume_checkpoint(resume_path, config, stages, tie_embeddings=train.tie_embeddings,
                                         num_optimizers=2 if uses_muon else 1)
    return out_dir, resume, resume_path


def check_out_dir(out_dir: Path) -> None:
    """Refuse an ``out_dir`` that cannot be created or written to, before anything is written. A temporary folder is
    created (and removed) in ``out_dir``, or in its nearest existing parent when it does not exist yet: nothing is
    left behind, whatever the outcome.

    Raises:
        ConfigError: (``out_dir``) naming the folder, why and the fix.
    """
    import shutil
    import tempfile

    path = Path(out_dir).expanduser().absolute()
    fix = "give a folder you can write to (--out_dir PATH)"
    try:
        existing = next(p for p in (path, *path.parents) if p.exists())
    except OSError as err:
        raise ConfigError("out_dir", f"cannot check {str(out_dir)!r} ({err.strerror or err}): {fix}") from err
    if not existing.is_dir():
        where = "it is a file" if existing == path else f"{str(existing)!r} is a file"
        raise ConfigError("out_dir", f"cannot create the folder {str(out_dir)!r}: {where}, not a folder: {fix}")
    try:
        probe = tempfile.mkdtemp(prefix=".sparkling-write-check-", dir=existing)
    except OSError as err:
        why = err.strerror or str(err)
        what = (f"cannot write in {str(out_dir)!r} ({why})" if existing == path else
                f"cannot create {str(out_dir)!r}: creating a folder in {str(existing)!r} fails ({why})")
        raise ConfigError("out_dir", f"{what}: {fix}") from err
    shutil.rmtree(probe, ignore_errors=True)


def _newest_to_resume(out_dir: Path, notes: list[str]) -> Optional[Path]:
    """``resume: auto`` / ``true``: the newest readable checkpoint of ``out_dir`` (``None`` when there is none); newer
    unreadable ones (a write killed by a preemption) are skipped with a warning in ``notes``.

    Raises:
        ConfigError: (``resume``) there are checkpoints, and none is readable.
    """
    path, skipped = newest_readable_checkpoint(out_dir)
    if skipped and path is None:
        raise ConfigError("resume", f"no checkpoint in {out_dir / 'checkpoints'} can be read ({'; '.join(skipped)}): "
                                    "they are corrupt, truncated or not `sparkling pretrain` checkpoints; move them "
                                    "away to start afresh, or give another out_dir")
    if skipped:
        notes.append(f"warning: resume: skipped {len(skipped)} unreadable checkpoint(s), newest first: "
                     f"{'; '.join(skipped)}; resuming from the newest readable one, {path}")
    return path


def resolve(ns: Any) -> ResolvedRun:
    """Check a parsed configuration and derive the run from it.

    Args:
        ns: the jsonargparse ``Namespace`` of :func:`pretrain_arguments` (or a dict with the same keys).

    Raises:
        ConfigError: naming the key, for anything impossible or unsupported.
    """
    data = _as(DataArgs, _get(ns, "data")) or DataArgs()
    train = _as(TrainArgs, _get(ns, "train")) or TrainArgs()
    evaluation = _as(EvalArgs, _get(ns, "eval")) or EvalArgs()
    log = _as(LogArgs, _get(ns, "log")) or LogArgs()
    growth = _as(GrowthArgs, _get(ns, "growth")) or GrowthArgs()
    rms_monitor = _as(RMSMonitorArgs, _get(ns, "rms_monitor"))
    if train.tie_embeddings is None:  # litgpt's TrainArgs default
        train.tie_embeddings = False
    notes: list[str] = []
    strategy, num_nodes, accelerator, num_devices, world, precision = _resolve_hardware(ns)
    logger_name = _check_litgpt_keys(ns, train, evaluation, log, notes)
    initial_dir, initial_config, initial_shapes, initial_weights = _read_initial_checkpoint(ns)
    data_class, tokenizer_dir, data_vocab = _resolve_data(ns, data, train, initial_dir, initial_config, notes)
    config, seq_len = _resolve_model(ns, data, train, evaluation, initial_config, initial_shapes, data_vocab,
                                     tokenizer_dir, data_class)
    accumulate, tokens_per_step, steps = _resolve_length(ns, train, evaluation, num_devices, num_nodes, world, seq_len,
                                                         notes)
    spec, optimizer_name, uses_muon, lr = _resolve_optimizer(ns, train, strategy, precision)
    stages = _resolve_stages(growth, config, train, steps, tokens_per_step, strategy, num_devices, num_nodes, notes)
    _check_fresh_bias_correction(stages, spec, optimizer_name, uses_muon)
    out_dir, resume, resume_path = _resolve_resume(ns, initial_dir, config, stages, train, uses_muon, notes)

    return ResolvedRun(
        model_config=config, stages=stages, steps=steps, tokens_per_step=tokens_per_step, seq_len=seq_len,
        micro_batch_size=train.micro_batch_size, accumulate=accumulate, devices=_get(ns, "devices", "auto"),
        num_devices=num_devices, num_nodes=num_nodes, world_size=world, accelerator=accelerator, strategy=strategy,
        precision=precision, optimizer=spec, optimizer_name=optimizer_name, uses_muon=uses_muon, lr=lr,
        out_dir=out_dir, resume=resume, resume_path=resume_path, tokenizer_dir=tokenizer_dir,
        data_vocab_size=data_vocab if data_vocab is not None else config.vocab_size, data=data, train=train, eval=evaluation, growth=growth, rms_monitor=rms_monitor,
        seed=int(_get(ns, "seed", 42)), num_threads=_get(ns, "num_threads"), notes=notes,
        initial_checkpoint_dir=initial_dir if resume_path is None else None,
        initial_weights=initial_weights if resume_path is None else None, logger_name=logger_name, log=log,
    )


def _initial_model_config(saved: Any, shapes: dict[str, tuple[int, ...]], model_name: Optional[str],
                          model_config: Optional[dict]):
    """The starting ``Config`` of a run from ``initial_checkpoint_dir``: the checkpoint's own, or (litgpt's way)
    ``model_name`` / ``model_config`` (``model_config`` alone overrides fields of the checkpoint's config), which must
    then build exactly the checkpoint's parameters."""
    from litgpt import Config

    if model_name is None and not model_config:
        config = saved
    else:
        overrides = dict(model_config or {})
        known = {f.name for f in dataclasses.fields(Config)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(f"model_config.{unknown[0]}", f"not a litgpt Config field (unknown keys: {unknown})")
        try:
            if model_name is not None:
                config = Config.from_name(model_name, **overrides)
            else:
                config = Config(**{**dataclasses.asdict(saved), **overrides})
        except (ValueError, TypeError, AssertionError, ZeroDivisionError) as err:
            key, reason = _config_rejection(err)
            raise ConfigError(key, f"litgpt Config rejected it: {reason}") from err
    want = _expected_shapes(config)
    missing = sorted(set(want) - set(shapes))
    wrong = [f"{n}: checkpoint {shapes[n]}, config {s}" for n, s in want.items() if n in shapes and shapes[n] != s]
    extra = sorted(set(shapes) - set(want))
    if missing or wrong or extra:
        detail = "; ".join(([f"missing {', '.join(missing[:3])}"] if missing else []) + wrong[:3]
                           + ([f"unexpected {', '.join(extra[:3])}"] if extra else []))
        given = "model_name / model_config" if (model_name is not None or model_config) else "its model_config.yaml"
        raise ConfigError("initial_checkpoint_dir", f"its lit_model.pth does not fit the model of {given} ({detail}): "
                                                    "leave model_name and model_config out to use the checkpoint's "
                                                    "own config")
    return config
