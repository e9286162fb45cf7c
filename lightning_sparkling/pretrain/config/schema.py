"""The schema of ``sparkling pretrain`` / ``sparkling plan``: dataclasses that jsonargparse turns into ``--config
FILE.yaml`` keys and ``--section.key value`` overrides (as litgpt's CLI does), the top-level keys
(:func:`pretrain_arguments`), the refusal of unknown keys by their full path (:func:`check_keys`), and the parsed
namespace read back into those dataclasses (:func:`_get`, :func:`_as`).

Keys follow ``litgpt pretrain``: every key of the installed litgpt's ``litgpt.pretrain.setup`` is accepted with
litgpt's meaning or refused by name (``model_name`` / ``model_config``, ``out_dir``, ``precision``,
``initial_checkpoint_dir``, ``resume``, ``data`` (also litgpt data modules by ``class_path``), ``train.*``, ``eval.*``,
``log.*``, ``optimizer``, ``devices``, ``num_nodes``, ``tokenizer_dir``, ``logger_name``, ``seed``; see
:mod:`lightning_sparkling.pretrain.config.litgpt_compat`), plus ``accelerator``, ``strategy``, ``num_threads``,
``compile``, ``activation_checkpointing``, ``growth`` and ``rms_monitor``. What the values mean for a run is checked by
:func:`lightning_sparkling.pretrain.config.resolve.resolve`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Optional

from lightning_sparkling.growth.stage import stage_key_fields
from lightning_sparkling.parallel.registry import cli_strategies
from lightning_sparkling.pretrain.errors import ConfigError

__all__ = [
    "DataArgs",
    "EvalArgs",
    "GrowthArgs",
    "LogArgs",
    "PRECISIONS",
    "RMSMonitorArgs",
    "STRATEGIES",
    "StageArgs",
    "TrainArgs",
    "check_keys",
    "pretrain_arguments",
    "stage_args",
]

if TYPE_CHECKING:  # computed on each access by the module's __getattr__ (the axes and backends registered now)
    StageArgs: type
    STRATEGIES: tuple[str, ...]

PRECISIONS = ("32-true", "32", "bf16-mixed", "bf16-true", "16-mixed", "16-true", "64-true")


@dataclass
class DataArgs:
    """The training text: the embedded corpus (this machine's Python standard library, optionally every installed
    package) or a directory of your own text, tokenized by a byte-level BPE trained on it (cached); or a litgpt data
    module given by ``class_path`` (``litgpt.data.TextFiles``, ``LitData``, ``TinyStories``, ``OpenWebText``, any
    ``LightningDataModule`` with litgpt's ``connect``) and its ``init_args``, as in litgpt's configs."""

    class_path: str | None = None
    """A litgpt data module (``litgpt.data.TextFiles``, or a short name ``TextFiles``; any importable
    ``LightningDataModule`` with litgpt's ``connect(tokenizer, batch_size, max_seq_length)``) used instead of the
    embedded corpus; the other ``data.*`` keys are then the corpus's and must be left unset."""
    init_args: dict[str, Any] | None = None
    """Arguments of ``class_path`` (``train_data_path``, ``num_workers``, ...), checked against its signature."""

    source: str = "stdlib"
    """``stdlib``: the Python standard library's ``*.py`` (~12 MB); ``stdlib+site-packages``: also every installed
    package's ``*.py`` (~10x bigger). Ignored when ``data_dir`` is set."""
    data_dir: Path | None = None
    """Use every ``*.txt``, ``*.py`` and ``*.md`` file below this directory instead of ``source``."""
    include_tests: bool = False
    """Keep ``test``/``tests`` folders of the Python sources (left out by default: repetitive fixtures)."""
    vocab_size: int = 4096
    """BPE vocabulary size to train (ignored with ``tokenizer_dir``). Also the model's ``vocab_size`` unless
    ``model_config.vocab_size`` is set."""
    val_percent: float = 5.0
    """Share of files (percent, chosen by a hash of the file name) held out for validation."""
    seq_len: int | None = None
    """Tokens per training sequence (``null``: ``train.max_seq_length``, else the ``block_size`` of ``model_name`` /
    ``model_config`` / ``initial_checkpoint_dir``, else 512). Must not exceed the model's ``block_size`` (which
    defaults to it)."""
    max_files: int | None = None
    """Use at most this many files (quick runs and tests)."""
    max_bytes: int | None = None
    """Use at most this many bytes of text (quick runs and tests)."""
    cache_dir: Path | None = None
    """Where the tokenizer and the tokenized corpus are cached (default ``~/.cache/lightning_sparkling``)."""
    num_workers: int = 0
    """DataLoader worker processes."""
    seed: int | None = None
    """Seed of the training window order (default: the top-level ``seed``)."""


@dataclass
class TrainArgs:
    """Training length, batch and optimization settings (litgpt's ``train.*``)."""

    global_batch_size: int = 64
    """Sequences per optimizer step, over all devices and nodes."""
    micro_batch_size: int = 4
    """Sequences per device per forward pass; gradient accumulation =
    ``global_batch_size / (micro_batch_size * devices * num_nodes)`` (must divide exactly)."""
    max_tokens: int | None = None
    """Tokens to train on; steps = ``max_tokens // (global_batch_size * seq_len)``. Give this or ``max_steps``."""
    max_steps: int | None = None
    """Optimizer steps to train (wins over ``max_tokens`` when both are set). Also the end of the LR schedule."""
    lr_warmup_steps: int | None = None
    """Linear LR warmup, in optimizer steps (exclusive with ``lr_warmup_fraction``)."""
    lr_warmup_fraction: float | None = None
    """Warmup as a fraction of the run. Neither set: 0.03 (the paper)."""
    min_lr: float | None = None
    """LR at the end of the cosine decay (default ``0.01 * lr``, the paper)."""
    lr_schedule: str = "cosine"
    """``cosine`` (warmup, then cosine to ``min_lr``: the paper) or ``wsd`` (warmup-stable-decay: warmup, the peak held,
    then a decay to ``min_lr`` over the last ``lr_decay_fraction`` of the run; a growth must fall before the decay)."""
    lr_decay_fraction: float = 0.2
    """``wsd`` only: the share of the run spent decaying, in ``(0, 1]``."""
    lr_decay_shape: str | None = None
    """``wsd`` only: the decay's shape, ``linear`` (default), ``cosine`` or ``sqrt`` (``1 - sqrt``: lr = peak * (1 -
    sqrt(p))); refused under ``cosine``, whose decay is cosine (litgpt has no WSD schedule to follow)."""
    max_norm: float | None = 1.0
    """Clip gradients to this global norm (``null`` or 0: no clipping)."""
    epochs: int | None = None
    """litgpt's key; ``litgpt pretrain`` refuses any value, and so does this package: the run length must be known
    before the data is read (LR schedule, growth steps). Give ``max_tokens`` or ``max_steps``."""
    max_time: float | None = None
    """Stop training after this many seconds (Lightning's ``Trainer(max_time=...)``); ``final/`` is still written.
    The LR schedule and the growth steps keep the ``max_tokens`` / ``max_steps`` horizon."""
    max_seq_length: int | None = None
    """Tokens per training sequence (litgpt's key; the model input length). Sets ``data.seq_len`` when that is
    unset; both set must agree."""
    tie_embeddings: bool | None = False
    """Share the input embedding and the output head (``wte.weight = lm_head.weight``); ``null``: ``false``."""
    log_interval: int = 1
    """Log train metrics (and ``tokens`` / ``flops``) every this many optimizer steps."""
    save_interval: int | None = 1000
    """Write ``out_dir/step-XXXXXXXX/`` (litgpt) and ``out_dir/checkpoints/step-XXXXXXXX.ckpt`` (Lightning, for
    ``resume``) every this many steps; ``null``: only ``final/`` and the last ``.ckpt``."""
    keep_last_checkpoints: int | None = None
    """Keep only this many newest Lightning ``.ckpt`` files (``null``: keep all)."""


@dataclass
class EvalArgs:
    """Validation (logs ``val_loss`` and ``val_ppl``)."""

    interval: int | None = 100
    """Validate every this many optimizer steps (and always at the end); ``null``: only at the end."""
    max_iters: int | None = 100
    """Validation batches per evaluation (per device): a fixed, seeded sample of ``max_iters * micro_batch_size *
    devices`` windows spread over the whole validation split, the same at every evaluation and on resume (``null``:
    the whole split)."""
    initial_validation: bool = False
    """Also validate before the first step."""
    final_validation: bool = True
    """Validate after the last step when the interval did not just do it (the summary's final val loss)."""
    max_new_tokens: int | None = None
    """Generate this many tokens (greedy) after each evaluation from the start of a validation sequence, print the
    text and log it (TensorBoard ``text``), as litgpt's ``generate_example``; ``null``: no sample."""
    evaluate_example: str | int = "first"
    """Which validation sequence prompts that sample: ``first``, ``random`` (seeded by the step) or its index in
    the validation batches of that evaluation."""


@dataclass
class LogArgs:
    """Logger settings (litgpt's ``log.*``): ``project``, ``run``, ``group`` for ``logger_name: wandb``; the others
    for ``logger_name: litlogger``. A value its logger does not use is refused."""

    project: str | None = None
    """WandB project name (default: ``pretrain-<model name>``)."""
    run: str | None = None
    """WandB run name."""
    group: str | None = None
    """WandB group name."""
    teamspace: str | None = None
    """LitLogger teamspace."""
    metadata: dict | None = None
    """LitLogger metadata."""
    log_model: bool = False
    """LitLogger: log model checkpoints as artifacts."""
    save_logs: bool = True
    """LitLogger: upload terminal logs."""
    checkpoint_name: str | None = None
    """LitLogger: base name of logged checkpoints."""


_OPTIONAL_INT = Optional[int]  # noqa: UP045  # a runtime value jsonargparse reads as a key's type, kept as it was


def _stage_args() -> type:
    """The keys of one ``growth.stages`` entry: ``at_step`` / ``at_tokens``, then every stage key with its type and
    default (:func:`~lightning_sparkling.growth.stage.stage_key_fields`: ``GrowthStage``'s fields, then the registered
    axes' own keys, flat; a field added to ``GrowthStage`` is a stage key with no second edit)."""
    keys: list[tuple[str, Any, Any]] = [("at_step", _OPTIONAL_INT, field(default=None)),
                                        ("at_tokens", _OPTIONAL_INT, field(default=None))]
    for f in stage_key_fields():
        if f.name == "at_step" or not f.init:
            continue
        if f.default is not dataclasses.MISSING:
            default = field(default=f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = field(default_factory=f.default_factory)
        else:  # a field GrowthStage requires is still optional here: its own check names it when missing
            default = field(default=None)
        keys.append((f.name, f.type, default))
    return dataclasses.make_dataclass("StageArgs", keys, bases=(_StageArgsBase,), namespace={
        "__module__": __name__, "__doc__": (
        "One growth. Exactly one of ``at_step`` (grow after this many optimizer steps) / ``at_tokens`` "
        "(grow once this many tokens have been seen: ``at_step = ceil(at_tokens / (global_batch_size * "
        "seq_len))``) / ``at_fraction`` (grow after this fraction of the run: ``at_step = ceil(at_fraction "
        "* max_steps)``); the other keys are :class:`~lightning_sparkling.growth.stage.GrowthStage`'s "
        "fields, with its defaults (a recipe's keys fill those a stage does not set: ``growth.recipe``).")})


class _StageArgsBase:
    """The base of every :func:`stage_args` class (one per set of stage keys), for ``isinstance`` checks."""


_derived: tuple[tuple[dataclasses.Field, ...], type] | None = None
"""The last :func:`stage_args` class and the ``GrowthStage`` fields it was derived from."""


def stage_args() -> type:
    """The keys of one ``growth.stages`` entry as a dataclass (``StageArgs``, :func:`_stage_args`), derived again
    whenever ``GrowthStage``'s fields changed: an axis registered (or unregistered) after this module was imported
    (:func:`~lightning_sparkling.growth.axes.register_axis`) has its stage keys here, and in every configuration the
    CLI reads from then on. ``StageArgs``, a module attribute, is this function's class."""
    global _derived
    fields = stage_key_fields()  # the registered axes' keys change with the registry
    if _derived is None or len(_derived[0]) != len(fields) or any(a is not b for a, b in zip(_derived[0], fields)):
        _derived = (fields, _stage_args())
    return _derived[1]


def progressive_args() -> type:
    """The keys a ``growth.progressive`` mapping takes: every ``growth.stages`` key (:func:`stage_args`) and
    ``at_fraction``, as a dataclass for the key check (the values are checked when the schedule is expanded)."""
    keys = [(f.name, Any, field(default=None)) for f in dataclasses.fields(stage_args())]
    return dataclasses.make_dataclass("ProgressiveArgs", keys, namespace={"__module__": __name__})


def _expand_progressive(block: Any, stages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``growth.stages`` entries of ``growth.progressive`` (:func:`~lightning_sparkling.growth.progressive.
    expand_progressive`), its keys checked by name; refused next to a non-empty ``growth.stages``."""
    from lightning_sparkling.growth.progressive import ProgressiveError, expand_progressive

    block = block.as_dict() if hasattr(block, "as_dict") else block
    if stages:
        raise ConfigError("growth.progressive", "give growth.stages or growth.progressive, not both: the schedule "
                                                "expands into growth.stages (set --growth.stages '[]' to use it, or "
                                                "--growth.progressive null to keep the stages)")
    if isinstance(block, dict):
        _check_dataclass_keys(progressive_args(), block, "growth.progressive")
    try:
        return expand_progressive(block)
    except ProgressiveError as err:
        key = f"growth.progressive.{err.key}" if err.key else "growth.progressive"
        raise ConfigError(key, str(err).removeprefix(f"{err.key}: ")) from err


def __getattr__(name: str) -> Any:
    """``StageArgs``: :func:`stage_args` (the stage keys of the axes registered now); ``STRATEGIES``: the
    ``strategy`` choices, ``auto`` and each growth backend's registered now
    (:func:`~lightning_sparkling.parallel.registry.cli_strategies`; deprecated aliases are not listed)."""
    if name == "StageArgs":
        return stage_args()
    if name == "STRATEGIES":
        return cli_strategies()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@dataclass
class GrowthArgs:
    """Growth mid-run (SPARKLING's width growth; depth, heads and experts too). No stages: plain pretraining."""

    stages: list[dict[str, Any]] = field(default_factory=list)
    """Growth stages, in increasing step order; each a mapping of :class:`StageArgs` keys (``at_step``,
    ``at_tokens`` or ``at_fraction``, widths, recipe). ``--growth.stages.0.at_step 50`` (or
    ``--growth.stages[0].at_step 50``) sets one key of one stage and keeps its others;
    ``--growth.stages+ '{at_step: 200, n_layer: 8}'`` adds a stage; ``--growth.stages '[...]'`` replaces the whole
    list."""
    progressive: dict[str, Any] | None = None
    """A multi-stage progressive schedule as one entry, expanded into ``growth.stages`` (give one or the other): one
    timing list (``at_fraction``, ``at_step`` or ``at_tokens``, one entry per growth), one or more size lists (the
    model's size first, then the size after each growth: ``n_layer: [1, 2, 4, 8]`` with ``at_fraction: [0.4, 0.6,
    0.8]``; several size keys grow width x depth), and any other stage key, shared by every growth (or a list of one
    value per growth). ``--growth.progressive.n_layer '[2, 4, 8]'`` sets one key; ``sparkling plan`` prints the
    stages it expands into (:mod:`lightning_sparkling.growth.progressive`)."""
    seed: int = 0
    """Seed of the copy maps and random inits (identical on every rank)."""
    min_lr: float | None = None
    """LR the new entries' re-warmup decays to at the last step (default: the baseline schedule's final LR)."""
    recipe: str = "auto"
    """Keys every stage gets unless it sets them. ``auto`` (default): the recipe measured best under the run's
    ``train.lr_schedule``, ``random-zero-3x`` under ``cosine`` and ``wsd`` under ``wsd`` (docs/BENCHMARKS.md,
    "Compute to reach the same loss, and signal health"). ``random-zero-3x``: sourceless new channels (``init:
    random-zero``) re-warmed to 3x, no loop. ``recommended``: the paper's copy-copy growth plus the closed loop on the
    symmetry lock (the new entries' LR doubled up to 8x while the copies stay alike; it drives the activation RMS to
    several times scratch's). ``wsd``: sourceless new channels (``init:
    random-zero``) at the paper's 1.3x re-warmup, no loop (under WSD the 8x boost is held at the peak LR and ended
    above scratch). ``random-zero``: sourceless new channels re-warmed to 10x (best at the smallest token ratio
    measured under cosine). ``paper``: SPARKLING as published (GrowthStage's own defaults)."""


@dataclass
class RMSMonitorArgs:
    """Per-block activation RMS in TensorBoard (``rms/...`` tags)."""

    every_n_steps: int = 50
    """Measure one micro-batch every this many optimizer steps."""
    per_linear: bool = False
    """Also log the RMS gain of every linear layer (many tags)."""


def pretrain_arguments(
    model_name: str | None = None,
    model_config: dict[str, Any] | None = None,
    out_dir: Path = Path("out/sparkling"),
    precision: str | None = None,
    initial_checkpoint_dir: Path | None = None,
    resume: bool | Literal["auto"] | Path = False,
    data: DataArgs = DataArgs(),
    train: TrainArgs = TrainArgs(),
    eval: EvalArgs = EvalArgs(),
    log: LogArgs = LogArgs(),
    optimizer: str | dict = "AdamW",
    devices: int | str = "auto",
    num_nodes: int = 1,
    accelerator: str = "auto",
    strategy: str = "auto",
    tokenizer_dir: Path | None = None,
    logger_name: str = "tensorboard",
    seed: int = 42,
    num_threads: int | None = None,
    compile: bool | Literal["auto", "blocks"] = "auto",
    activation_checkpointing: bool = False,
    growth: GrowthArgs = GrowthArgs(),
    rms_monitor: RMSMonitorArgs | None = RMSMonitorArgs(),
    plugins: list[str] | str | None = None,
) -> None:
    """Pretrain a litgpt model on Lightning's Trainer, growing its width mid-run (SPARKLING).

    Args:
        model_name: a litgpt model name (``litgpt.Config.from_name``); ``model_config`` keys override its fields.
            With a ``model_config``, a name that is not litgpt's is not looked up (the model is ``model_config``'s,
            as in litgpt).
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
            init_args: {train_data_path: ...}}``, or litgpt's short form ``TinyStories`` (``{class_path:
            litgpt.data.TinyStories}``).
        train: training length and optimization (see ``train.*``).
        eval: validation (see ``eval.*``).
        log: logger settings (see ``log.*``).
        optimizer: ``AdamW``, ``torch.optim.Muon`` or ``{class_path: ..., init_args: {lr: ..., ...}}`` (litgpt's
            format). With Muon, 2-D block weights use Muon and everything else AdamW.
        devices: devices per node (an int, or ``auto``: every GPU, or 1 CPU process).
        num_nodes: number of nodes.
        accelerator: ``auto``, ``cpu``, ``gpu``/``cuda``.
        strategy: ``auto`` (one device, or DDP for several), ``ddp``, ``fsdp2`` (``ModelParallelStrategy``,
            data parallel only), ``fsdp1`` (FSDP1: ``FSDPStrategy(use_orig_params=True)``, CUDA GPUs only), or a
            registered growth backend's value. DeepSpeed and tensor
            parallelism are refused.
        tokenizer_dir: use the ``tokenizer.json`` in this folder (e.g. a litgpt checkpoint dir) instead of training
            a BPE on the corpus; with a litgpt data module, the tokenizer it prepares its data with (as in litgpt).
        logger_name: ``tensorboard`` (the RMS dashboard's custom-scalars layout needs it), ``csv``, ``wandb`` or
            ``mlflow`` (when installed), as in litgpt. Logs go to ``out_dir/logs``.
        seed: model init and data order seed.
        num_threads: torch intra-op CPU threads (``torch.set_num_threads``); ``null``: torch's default (all cores).
            ``1`` is often much faster for small models on a busy machine.
        compile: ``torch.compile`` the model (inductor): ``auto`` (on CUDA, not on CPU), ``true``, ``false`` or
            ``blocks``. ``true``: the whole GPT as one graph, as ``litgpt pretrain`` does; a growth recompiles all of
            it. ``blocks``: each block compiled, the blocks sharing one graph (torchtitan's way): the first compile
            and a width growth's recompile cost one block's graph, a depth growth's nothing; on CPU its steady step
            is 6-11% slower. Under ``fsdp2`` always per block. Only the model's graphs are dropped at a growth; the
            first step after it is timed in the log. Not with ``strategy: fsdp1``.
        activation_checkpointing: recompute every block's activations in the backward instead of keeping them
            (less memory, about one more forward of compute); a growth's new blocks too. Not with ``strategy: fsdp1``.
        growth: growth stages and recipe (see ``growth.*``).
        rms_monitor: activation RMS dashboard settings; ``null`` disables it.
        plugins: modules to import before the configuration is read (on ``PYTHONPATH``; one name, ``--plugins
            my_axis``, or a list, ``[a, b]``): a user's growth axis or backend that registers itself when imported,
            whose stage keys and ``strategy`` value this configuration may then use
            (:mod:`~lightning_sparkling.pretrain.config.plugins`; installed packages can use the
            ``lightning_sparkling.plugins`` entry-point group instead).
    """


# ------------------------------------------------------------------------------------------------------------ keys
_SECTIONS = {"data": DataArgs, "train": TrainArgs, "eval": EvalArgs, "log": LogArgs, "growth": GrowthArgs,
             "rms_monitor": RMSMonitorArgs}


def _suggest(key: str, known: list[str]) -> str:
    import difflib

    name, colon, value = key.partition(":")
    if colon and name.strip() in known:  # YAML reads {at_step:15} as the key 'at_step:15' (no space after the colon)
        return (f" (YAML needs a space after the colon: write {name.strip()}: {value.strip()}, as in "
                f"{{{name.strip()}: {value.strip()}}})")
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
    top = [*inspect.signature(pretrain_arguments).parameters, "config"]
    for key, value in raw.items():
        if key not in top:
            raise ConfigError(str(key), f"unknown key{_suggest(str(key), top)}; known keys: {', '.join(top[:-1])}")
        cls = _SECTIONS.get(key)
        if cls is not None and isinstance(value, dict):
            _check_dataclass_keys(cls, value, key)


def _check_dataclass_keys(cls: type, value: dict, path: str, *, stage: bool = False) -> None:
    """Refuse a key of ``value`` (the mapping at ``path``) that is not a field of ``cls``; a growth stage's
    (``stage``) unknown key says how to make an axis' key known (``plugins:``) instead of listing every stage key.

    Raises:
        ConfigError: for the first unknown key, by its full path.
    """
    known = [f.name for f in dataclasses.fields(cls)]
    for key, item in value.items():
        if key not in known and stage:
            raise ConfigError(f"{path}.{key}", f"unknown key{_suggest(str(key), known)}: not a GrowthStage key, nor "
                                               "a key of a registered growth axis; a key of your own axis is known "
                                               "once its module is loaded: add plugins: [MODULE] to the "
                                               "configuration (or --plugins MODULE, the module on PYTHONPATH); "
                                               "`sparkling pretrain --help` lists the stage keys")
        if key not in known:
            raise ConfigError(f"{path}.{key}", f"unknown key{_suggest(str(key), known)}; {path} takes "
                                               f"{', '.join(known)}")
        if cls is GrowthArgs and key == "stages" and isinstance(item, list):
            for k, entry in enumerate(item):
                if isinstance(entry, dict):
                    _check_dataclass_keys(stage_args(), entry, f"{path}.stages[{k}]", stage=True)
        if cls is GrowthArgs and key == "progressive" and isinstance(item, dict):
            _check_dataclass_keys(progressive_args(), item, f"{path}.progressive")


# ------------------------------------------------------------------------------------------------------------ namespace
def _get(ns: Any, key: str, default: Any = None) -> Any:
    if ns is None:
        return default
    if isinstance(ns, dict):
        return ns.get(key, default)
    return getattr(ns, key, default)


def _as(cls: type, value: Any, *, lr_schedule: str = "cosine") -> Any:
    """A jsonargparse Namespace / dict / dataclass instance of ``cls`` as an instance of ``cls``. For
    :class:`GrowthArgs`, ``growth.recipe: auto`` becomes the recipe of ``lr_schedule``, and each stage a mapping of the
    keys it sets (checked by name; the recipe fills the others when the stage is built:
    :func:`~lightning_sparkling.pretrain.config.stages._resolve_stages`)."""
    if value is None or (isinstance(value, cls) and cls is not GrowthArgs):  # GrowthArgs: stages normalized
        return value
    values = (dataclasses.asdict(value) if dataclasses.is_dataclass(value) and not isinstance(value, type) else
              value.as_dict() if hasattr(value, "as_dict") else dict(value))
    values.pop("__path__", None)
    names = {f.name for f in dataclasses.fields(cls)}
    if cls is GrowthArgs:
        from lightning_sparkling.growth.recipes import AUTO, schedule_recipe
        from lightning_sparkling.growth.stage import RECIPES

        recipe = values.get("recipe", GrowthArgs.recipe)
        if recipe == AUTO:  # the callback's resolution too; an unknown schedule is refused by train.lr_schedule
            recipe = values["recipe"] = schedule_recipe(lr_schedule)
        if recipe not in RECIPES:
            raise ConfigError("growth.recipe", f"unknown recipe {recipe!r}: choose auto or one of "
                                               f"{', '.join(RECIPES)}")
        stages = []
        for k, s in enumerate(values.get("stages") or []):
            s = s.as_dict() if hasattr(s, "as_dict") else s
            if isinstance(s, _StageArgsBase):  # every key given: the recipe fills nothing
                s = dataclasses.asdict(s)  # type: ignore[call-overload]  # a make_dataclass subclass
            if not isinstance(s, dict):
                raise ConfigError(f"growth.stages[{k}]", f"expected a mapping of stage keys, got {s!r}")
            _check_dataclass_keys(stage_args(), s, f"growth.stages[{k}]", stage=True)
            stages.append(dict(s))
        values["stages"] = stages
        if values.get("progressive") is not None:
            values["stages"] = _expand_progressive(values["progressive"], stages)
    return cls(**{k: v for k, v in values.items() if k in names})
