"""The ``sparkling`` command line.

- ``sparkling pretrain --config FILE.yaml [--section.key value ...]``: pretrain a litgpt model on Lightning's
  ``Trainer`` and grow its width mid-run (SPARKLING); leaves litgpt checkpoint dirs (``out_dir/step-XXXXXXXX/``,
  ``out_dir/final/``), Lightning checkpoints for ``resume`` (``out_dir/checkpoints/``), TensorBoard logs
  (``out_dir/logs/``) and ``out_dir/summary.json``.
- ``sparkling plan --config FILE.yaml``: what the growth stages of that config do (widths, tensors, alpha,
  parameters, FLOPs saved), without training and without building a tokenizer, before the data or the tokenizer is
  on disk (each missing one is a note, ``pretrain will need PATH``); with ``--suggest``, the measured
  best growth for its schedule and token ratio as a ``growth:`` block
  (:mod:`~lightning_sparkling.pretrain.advice.suggest`).
- ``sparkling plot LOGDIR... --out FILE.png [--x step|tokens|flops] [--panels P,...]``: the dashboard figure
  (:mod:`lightning_sparkling.dashboards.plotting`).

This module parses the command line (:func:`build_parser`, :func:`parse`) and dispatches (:func:`main`). The
configuration schema is in :mod:`~lightning_sparkling.pretrain.config.schema` and its checks in
:mod:`~lightning_sparkling.pretrain.config.resolve`; ``plan`` is :mod:`~lightning_sparkling.pretrain.advice.planning`,
``pretrain`` :mod:`~lightning_sparkling.pretrain.training.run` (Trainer and callbacks:
:mod:`~lightning_sparkling.pretrain.training.trainer`,
summary: :mod:`~lightning_sparkling.pretrain.training.summary`). Their public names are importable from here as before.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lightning_sparkling.parallel.registry import cli_backend
from lightning_sparkling.pretrain.advice.planning import plan, run_recipe  # noqa: F401
from lightning_sparkling.pretrain.advice.run_plan import plan_run  # noqa: F401
from lightning_sparkling.pretrain.config.plugins import load_plugins, plugin_names
from lightning_sparkling.pretrain.config.resolve import ResolvedRun, resolve
from lightning_sparkling.pretrain.config.resume import check_out_dir
from lightning_sparkling.pretrain.config.schema import DataArgs, check_keys, pretrain_arguments
from lightning_sparkling.pretrain.errors import ConfigError, _one_line_error
from lightning_sparkling.pretrain.training.run import build_datamodule, build_module, pretrain  # noqa: F401
from lightning_sparkling.pretrain.training.summary import print_summary_table, resume_command  # noqa: F401
from lightning_sparkling.pretrain.training.trainer import _build_trainer, _callbacks_module, _strategy  # noqa: F401

__all__ = ["build_parser", "main", "parse", "plan", "pretrain"]

USAGE = """usage: sparkling {pretrain,plan,measure,plot} ...

  sparkling pretrain --config FILE.yaml [--train.max_steps 100 ...]   pretrain and grow (SPARKLING)
  sparkling plan     --config FILE.yaml [--map measure.json]          show what the growth stages do
                     [--suggest]                                      or the measured best growth block for it
  sparkling measure  --config FILE.yaml [--budgets 0.7,1,1.4,2]       does growth pay on this config? growth run
                     [--seeds N] [--jobs J]                           vs scratch at several budgets, measure.json
  sparkling plot     LOGDIR... --out FILE.png [--x step|tokens|flops] dashboard figure of runs
                     [--panels loss,lr,symmetry,rms,...]              (every TensorBoard chart by default)

`sparkling pretrain --help` lists every configuration key; `--print_config` prints the resolved configuration.
"""


# ------------------------------------------------------------------------------------------------------------ parsing
def build_parser(command: str = "pretrain"):
    """The jsonargparse parser of ``sparkling pretrain`` / ``sparkling plan`` (same keys: a plan reads the config
    a run would use)."""
    from jsonargparse import ActionConfigFile, ArgumentParser, set_docstring_parse_options

    class _Parser(ArgumentParser):
        """Errors as one ``error:`` line and nothing else: no usage line before it (the line names the key and the
        fix; ``--help`` lists every key), and jsonargparse's own multi-line messages joined."""

        def error(self, message: str, ex: Exception | None = None):
            return super().error(_one_line_error(str(message)), ex)

        def print_usage(self, file: Any = None) -> None:  # argparse prints it only before an error
            pass

    try:  # jsonargparse >= 4.39 (set_docstring_parse_options warns there, and goes in 5.0)
        from jsonargparse import set_parsing_settings

        set_parsing_settings(docstring_parse_attribute_docstrings=True)
    except ImportError:
        set_docstring_parse_options(attribute_docstrings=True)
    description = {
        "pretrain": "Pretrain a litgpt model on Lightning's Trainer, growing its width mid-run (SPARKLING).",
        "plan": "Show what the growth stages of a pretrain config do, without training (and without training a "
                "tokenizer: the vocabulary size comes from data.vocab_size, model_config.vocab_size or "
                "tokenizer_dir/tokenizer.json). A dry run: the data and the tokenizer need not be on disk yet "
                "(each missing one is a note).",
    }[command]
    parser = _Parser(prog=f"sparkling {command}", description=description, exit_on_error=True,
                     parser_mode=_litgpt_yaml_mode(),
                     allow_abbrev=False,  # --train.max_step is an unknown key, not --train.max_steps
                     usage=f"sparkling {command} --config FILE.yaml [--section.key VALUE ...]   "
                           f"(`sparkling {command} --help` lists every key)")
    parser.add_argument("--config", action=ActionConfigFile, help="a YAML file with the keys below")
    parser.add_function_arguments(pretrain_arguments, as_positional=False)
    return parser


LITGPT_YAML = "litgpt_yaml"
"""The parser mode of :func:`build_parser`: jsonargparse's YAML with litgpt's short forms (``data: TinyStories``)
expanded as litgpt's parser reads them
(:func:`~lightning_sparkling.pretrain.config.litgpt_compat.expand_litgpt_forms`)."""


def _litgpt_yaml_mode() -> str:
    """Register (once) and return :data:`LITGPT_YAML`: every config file and value is loaded by jsonargparse's YAML
    loader, then the litgpt forms of a configuration mapping are expanded before the keys are read."""
    import yaml
    from jsonargparse import get_loader, set_loader

    from lightning_sparkling.pretrain.config.litgpt_compat import expand_litgpt_forms

    load_yaml = get_loader("yaml")
    set_loader(LITGPT_YAML, lambda text: expand_litgpt_forms(load_yaml(text)), exceptions=(yaml.YAMLError,))
    return LITGPT_YAML


def parse(argv: Sequence[str], command: str = "pretrain", *, dry_run: bool | None = None,
          ) -> tuple[Any, ResolvedRun, str]:
    """Parse and check ``argv`` (the arguments after ``sparkling <command>``).

    Args:
        argv: the arguments.
        command: ``pretrain`` or ``plan`` (the parser's help; ``plan`` writes nothing, so ``out_dir`` is not checked).
        dry_run: whether data and tokenizer may be missing on disk (noted, not refused; default: ``command ==
            "plan"``, a plan is made before the data is prepared; ``sparkling measure`` plans then trains: ``False``).

    Returns:
        ``(namespace, resolved run, the configuration as YAML)``.

    Raises:
        SystemExit: (code 2, message on stderr naming the key) for unknown keys, wrong types and impossible values.
    """
    try:  # a user's axis or backend registers itself first: its stage keys and strategy are then known
        load_plugins(plugin_names(argv, _read_yaml))
    except ConfigError as err:
        build_parser(command).error(str(err))
    parser = build_parser(command)
    argv, optimizer = _take_optimizer_mapping(_rewrite_optimizer_args(_rewrite_data_args(list(argv))))
    try:
        argv, stage_keys = _take_stage_keys(argv)  # `--growth.stages.K.KEY VALUE`
    except ConfigError as err:
        parser.error(str(err))
    try:
        for path in _config_files(argv):
            check_keys(_read_yaml(path))
    except ConfigError as err:
        parser.error(f"{err} (in {path})")
    if stage_keys:
        argv = _with_stage_keys(parser, argv, stage_keys)
    argv = _with_data_init_args(parser, argv)  # litgpt's `--data.KEY VALUE`: an argument of the data module
    ns = parser.parse_args(argv)
    if optimizer is not None:  # `--optimizer '{class_path: ..., init_args: ...}'` replaces the whole optimizer
        ns.optimizer = optimizer
    try:
        run = resolve(ns, dry_run=command == "plan" if dry_run is None else dry_run)
        if command == "pretrain":  # plan writes nothing: its out_dir may be a path of another machine
            check_out_dir(run.out_dir)
    except ConfigError as err:
        parser.error(str(err))
    ns.optimizer = run.optimizer  # normalized: `--optimizer.lr` overrides moved into init_args
    entry = cli_backend(ns.strategy)
    if entry is not None:  # a backend's alias (`cli_aliases`) is saved as the value it stands for
        ns.strategy = entry.cli_strategy
    dumped = parser.dump(ns, skip_none=False, skip_validation=True)
    return ns, run, dumped


def _rewrite_data_args(argv: list[str]) -> list[str]:
    """``--data TinyStories`` (litgpt's short form, on the command line) -> ``--data.class_path
    litgpt.data.TinyStories --data.init_args null``: the data module replaced by that class with its defaults, as
    litgpt's parser reads it (a configuration file's ``data: TinyStories`` is expanded when it is loaded:
    :data:`LITGPT_YAML`). ``--data FILE.yaml`` (a file of ``data.*`` keys) stays.

    Example::

        >>> _rewrite_data_args(["--data", "TinyStories", "--train.max_steps", "5"])
        ['--data.class_path', 'litgpt.data.TinyStories', '--data.init_args', 'null', '--train.max_steps', '5']
    """
    from lightning_sparkling.pretrain.config.litgpt_compat import expand_data_short_form

    rest, i = [], 0
    while i < len(argv):
        value, width = _option_at(argv, i, "data")
        expanded = expand_data_short_form(value)
        if isinstance(expanded, dict):
            rest += ["--data.class_path", expanded["class_path"], "--data.init_args", "null"]
        else:
            rest.extend(argv[i:i + width])
        i += width
    return rest


def _option_at(argv: list[str], i: int, name: str) -> tuple[str | None, int]:
    """``(value, how many arguments)`` of ``--NAME VALUE`` or ``--NAME=VALUE`` at ``argv[i]``; ``(None, 1)`` else."""
    if argv[i] == f"--{name}" and i + 1 < len(argv):
        return argv[i + 1], 2
    if argv[i].startswith(f"--{name}="):
        return argv[i].split("=", 1)[1], 1
    return None, 1


def _rewrite_optimizer_args(argv: list[str]) -> list[str]:
    """``--optimizer.init_args.lr X`` -> ``--optimizer.lr X`` (jsonargparse cannot descend into the free-form
    optimizer dict; :func:`~lightning_sparkling.pretrain.model.optim.normalize_optimizer` moves such keys into
    ``init_args``)."""
    return [a.replace("--optimizer.init_args.", "--optimizer.", 1) if a.startswith("--optimizer.init_args.") else a
            for a in argv]


def _take_optimizer_mapping(argv: list[str]) -> tuple[list[str], dict | None]:
    """Take ``--optimizer '{class_path: ..., init_args: {...}}'`` (a YAML mapping) out of ``argv``: it replaces the
    whole optimizer, as ``--growth.stages`` replaces the list. jsonargparse would try to merge it into a config
    file's optimizer mapping and fail with a traceback. The last one given wins; a name (``--optimizer AdamW``)
    stays in ``argv``."""
    import yaml

    rest, given = [], None
    i = 0
    while i < len(argv):
        value, width = _option_at(argv, i, "optimizer")
        try:
            parsed = yaml.safe_load(value) if value is not None else None
        except yaml.YAMLError:
            parsed = None
        if isinstance(parsed, dict):
            given = parsed
        else:
            rest.extend(argv[i:i + width])
        i += width
    return rest, given


_STAGE_KEY = re.compile(r"--growth\.stages(?:\.(\d+)|\[(\d+)\])\.(\w+)(?:=(.*))?", re.S)


def _take_stage_keys(argv: list[str]) -> tuple[list[str], list[tuple[int, str, Any]]]:
    """Take ``--growth.stages.K.KEY VALUE`` (or ``--growth.stages[K].KEY VALUE``, ``=VALUE``) out of ``argv``: one key
    of stage ``K`` of the configuration, the stage's other keys kept (jsonargparse can only replace the whole list).
    Returns the rest of ``argv`` and ``(K, KEY, value read as YAML)`` in the order given.

    Example::

        >>> _take_stage_keys(["--config", "q.yaml", "--growth.stages.0.at_step", "50", "--growth.stages[0].init=null"])
        (['--config', 'q.yaml'], [(0, 'at_step', 50), (0, 'init', None)])

    Raises:
        ConfigError: a key given without a value, or a value that is not valid YAML.
    """
    import yaml

    rest, keys = [], []
    i = 0
    while i < len(argv):
        match = _STAGE_KEY.fullmatch(argv[i])
        if match is None:
            rest.append(argv[i])
            i += 1
            continue
        index, bracket, key, value = match.groups()
        k = int(index if index is not None else bracket)
        if value is None:
            if i + 1 >= len(argv):
                raise ConfigError(f"growth.stages[{k}].{key}", "expected a value after it")
            value, i = argv[i + 1], i + 1
        try:
            keys.append((k, key, yaml.safe_load(value)))
        except yaml.YAMLError as err:
            raise ConfigError(f"growth.stages[{k}].{key}", f"{value!r} is not a valid value: {err}") from err
        i += 1
    return rest, keys


def _with_stage_keys(parser: Any, argv: list[str], stage_keys: list[tuple[int, str, Any]]) -> list[str]:
    """``argv`` with the stage keys of :func:`_take_stage_keys` applied as one ``--growth.stages`` override at its
    end: the list the other arguments give (the configuration file's, or ``--growth.stages``'), each key set on its
    stage (:func:`_set_stage_keys`). The run, its saved configuration and ``--print_config`` then all see it."""
    import yaml

    first = parser.parse_args([a for a in argv if not a.startswith("--print_config")])
    try:
        stages = _set_stage_keys(first.growth.stages, stage_keys)
    except ConfigError as err:
        parser.error(str(err))
    merged = yaml.safe_dump(stages, default_flow_style=True, sort_keys=False, width=float("inf")).strip()
    return [*argv, "--growth.stages", merged]


def _set_stage_keys(stages: Any, stage_keys: list[tuple[int, str, Any]]) -> list[dict[str, Any]]:
    """The parsed ``growth.stages`` with each ``(K, KEY, value)`` of :func:`_take_stage_keys` set on stage ``K``, its
    other keys kept; unknown keys are refused by name when the stages are read.

    Raises:
        ConfigError: for a stage the configuration does not have.
    """
    stages = list(stages or [])
    for k, key, value in stage_keys:
        if k >= len(stages):
            have = ("growth.stages is empty" if not stages else "growth.stages has one stage (index 0)"
                    if len(stages) == 1 else f"growth.stages has {len(stages)} stages (index 0 to {len(stages) - 1})")
            raise ConfigError(f"growth.stages[{k}].{key}", f"{have}: add a stage with --growth.stages+ "
                                                           f"'{{at_step: ..., ...}}' or give the whole list with "
                                                           "--growth.stages '[...]'")
        stage = stages[k].as_dict() if hasattr(stages[k], "as_dict") else stages[k]
        if not isinstance(stage, dict):
            raise ConfigError(f"growth.stages[{k}]", f"expected a mapping of stage keys, got {stage!r}")
        stages[k] = {**stage, key: value}
    return stages


_DATA_KEY = re.compile(r"--data\.(init_args\.)?(\w+)(?:=(.*))?", re.S)


def _take_data_init_args(argv: list[str]) -> tuple[list[str], dict[str, Any]]:
    """Take litgpt's ``--data.KEY VALUE`` (``KEY`` not a ``data.*`` key of this schema) and ``--data.init_args.KEY
    VALUE`` out of ``argv``: an argument of the data module (``--data.train_data_path texts/``). Returns the rest of
    ``argv`` and ``{KEY: value read as YAML}``; a key without a value stays in ``argv`` (the parser names it).

    Example::

        >>> _take_data_init_args(["--data.train_data_path", "t/", "--data.init_args.num_workers=0", "--data.seed", "1"])
        (['--data.seed', '1'], {'train_data_path': 't/', 'num_workers': 0})
    """
    import yaml

    schema = {f.name for f in dataclasses.fields(DataArgs)}
    rest, keys, i = [], {}, 0
    while i < len(argv):
        match = _DATA_KEY.fullmatch(argv[i])
        if match is None or (match.group(1) is None and match.group(2) in schema):
            rest.append(argv[i])
            i += 1
            continue
        value = match.group(3)
        if value is None:
            if i + 1 >= len(argv):
                rest.append(argv[i])
                break
            value, i = argv[i + 1], i + 1
        try:
            keys[match.group(2)] = yaml.safe_load(value)
        except yaml.YAMLError:
            keys[match.group(2)] = value
        i += 1
    return rest, keys


def _with_data_init_args(parser: Any, argv: list[str]) -> list[str]:
    """``argv`` with the data module arguments of :func:`_take_data_init_args` merged into ``data.init_args`` (the
    configuration's, its other arguments kept) as one ``--data.init_args`` override at its end, as litgpt's parser
    reads ``--data.KEY``. Without a ``data.class_path`` they are left as given (the parser refuses an unknown
    ``data.*`` key by name)."""
    import yaml

    rest, keys = _take_data_init_args(argv)
    if not keys:
        return argv
    first = parser.parse_args([a for a in rest if not a.startswith("--print_config")])
    if first.data.class_path is None:
        return argv
    merged = {**(first.data.init_args or {}), **keys}
    return [*rest, "--data.init_args", yaml.safe_dump(merged, default_flow_style=True, width=float("inf")).strip()]


def _config_files(argv: list[str]) -> list[str]:
    files = []
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            files.append(argv[i + 1])
        elif arg.startswith("--config="):
            files.append(arg.split("=", 1)[1])
    return files


def _read_yaml(path: str) -> Any:
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            return yaml.safe_load(fh)
    except OSError:
        return None  # jsonargparse reports a missing file itself
    except yaml.YAMLError as err:
        raise ConfigError("config", f"{path} is not valid YAML: {err}") from err


# ------------------------------------------------------------------------------------------------------------ main
def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sparkling`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0
    if argv[0] in ("-V", "--version"):
        from lightning_sparkling import __version__

        print(f"lightning-sparkling {__version__}")
        return 0
    command, rest = argv[0], argv[1:]
    if command == "plot":
        from lightning_sparkling.dashboards.plotting import main_plot

        return int(main_plot(rest) or 0)
    if command == "measure":
        from lightning_sparkling.pretrain.measure.command import main_measure

        rest, maps = _take_maps(rest)  # --map FILE: the cells its summary may cite, as plan's
        # measure trains what it plans: the data and the tokenizer must be on disk, as for pretrain
        return main_measure(rest, functools.partial(parse, dry_run=False), cells=_read_maps(maps))
    if command not in ("pretrain", "plan"):
        print(f"sparkling: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    if not rest:  # one error line, as every refusal; it says what to give, where the usage line used to
        print(f"error: no configuration: give --config FILE.yaml and/or --section.key VALUE keys (`sparkling {command} "
              "--help` lists every key)", file=sys.stderr)
        return 2
    if command == "plan":
        rest, maps = _take_maps(rest)
        wants_suggestion = "--suggest" in rest
        rest = [arg for arg in rest if arg != "--suggest"]
        ns, run, _ = parse(rest, command)
        if wants_suggestion:  # the measured best growth for this run, as a growth: block to paste
            from lightning_sparkling.pretrain.advice.suggest import suggest

            print(suggest(ns, run, cells=_read_maps(maps)).message())
            return 0
        plan(run, cells=_read_maps(maps))
        return 0
    _, run, dumped = parse(rest, command)
    try:
        summary = pretrain(run, hparams_yaml=dumped, argv=rest)
    except KeyboardInterrupt:  # outside the fit (data preparation, final validation, export): nothing to save
        print("sparkling pretrain: interrupted (Ctrl-C)", file=sys.stderr)
        return 130
    finally:
        _shutdown_distributed()
    return 130 if summary.get("status") == "interrupted" else 0


def _take_maps(argv: list[str]) -> tuple[list[str], list[str]]:
    """Take ``--map FILE`` (repeatable: a ``measure.json`` of ``sparkling measure`` or a map of the package's format)
    out of ``plan``'s arguments."""
    rest, maps = [], []
    while argv:
        arg = argv.pop(0)
        if arg == "--map" or arg.startswith("--map="):
            value = arg.partition("=")[2] or (argv.pop(0) if argv else "")
            if not value:
                print("error: --map needs a file (a measure.json of `sparkling measure`)", file=sys.stderr)
                raise SystemExit(2)
            maps.append(value)
        else:
            rest.append(arg)
    return rest, maps


def _read_maps(paths: list[str]) -> tuple | None:
    """The package's measured cells and those of ``paths`` (``None`` without paths: the package's map alone)."""
    if not paths:
        return None
    from lightning_sparkling.pretrain.advice.measured import load_map

    cells = list(load_map())
    for path in paths:
        try:
            cells += load_map(Path(path))
        except (OSError, ValueError, KeyError, TypeError) as err:
            print(f"error: --map {path}: not a measured map ({type(err).__name__}: {err}); give the measure.json "
                  "that `sparkling measure` wrote", file=sys.stderr)
            raise SystemExit(2) from err
    return tuple(cells)


def _shutdown_distributed() -> None:
    """Destroy the process groups while the interpreter is fully alive: gloo worker threads still holding tensors
    at interpreter exit can abort a finished multi-process run (exit code -6, pytorch/pytorch#179291)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
