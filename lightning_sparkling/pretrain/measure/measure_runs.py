"""The runs of a measurement and the one loop that trains runs: the config's growth run and the grown shape trained
from scratch at several budgets, per seed, each ``sparkling pretrain --config <its config>.yaml`` in a subprocess,
``jobs`` at a time, a finished run (``summary.json`` completed next to the identical saved config) never trained
again. :func:`train_runs` trains any :class:`TrainingRun` (``benchmarks/repro``'s grid runs go through it too).

Example::

    runs = plan_runs(config, grown_config, growth_flops=2e12, flops_per_step=4e9, seeds=[1, 2],
                     budgets=[0.7, 1.0, 1.4], out=Path("out/measure"))
    train_runs(runs, jobs=2)           # prints "[3/6] scratch x1 seed 1: ok, 41 s (overall 2.1 min, ~2.0 min left)"
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import yaml

from lightning_sparkling.pretrain.measure.placement import Placement, place_jobs

#: the command that trains one run; ``--config <file>`` is appended (tests put a stand-in here)
PRETRAIN: tuple[str, ...] = (sys.executable, "-m", "lightning_sparkling.pretrain.cli", "pretrain")


class TrainingRun:
    """What :func:`train_runs` needs of a run: its ``name`` (progress lines), ``run_dir``, full pretrain ``config``
    (``out_dir`` = ``run_dir``), planned ``flops`` (the estimate of time left), the file the config is saved to in
    ``run_dir`` and :meth:`finished`, whether a saved run is this one, done."""

    name: str
    config: dict[str, Any]
    run_dir: Path
    flops: float
    config_file: ClassVar[str] = "config.yaml"

    def finished(self, summary: dict[str, Any], saved: Any) -> bool:
        """Whether a run whose ``summary.json`` is ``summary`` and saved config ``saved`` is this run, completed."""
        return summary.get("status") == "completed" and saved == self.config


@dataclass(frozen=True)
class MeasureRun(TrainingRun):
    """One training run of a measurement: ``kind`` ``"growth"`` or ``"scratch"``, its ``budget`` (a multiple of the
    growth run's FLOPs; 1.0 for the growth run), ``seed``, the full pretrain ``config`` (``out_dir`` = ``run_dir``)
    and ``flops`` planned."""

    kind: str
    budget: float
    seed: int
    config: dict[str, Any]
    run_dir: Path
    flops: float
    config_file: ClassVar[str] = "measure_config.yaml"

    @property
    def name(self) -> str:  # type: ignore[override]  # derived; train_runs only reads a run's name
        """``'growth seed 1'``, ``'scratch x1.4 seed 2'``."""
        return f"growth seed {self.seed}" if self.kind == "growth" else f"scratch x{self.budget:g} seed {self.seed}"


def plan_runs(config: dict[str, Any], grown: dict[str, Any], *, growth_flops: float, flops_per_step: float,
              seeds: Sequence[int], budgets: Sequence[float], out: Path) -> list[MeasureRun]:
    """The runs of a measurement, seed by seed (a stopped measurement is still paired).

    Args:
        config: the parsed pretrain configuration (as ``sparkling pretrain`` dumps it) of the growth run.
        grown: the ``model_config`` of the grown shape (every litgpt ``Config`` field).
        growth_flops: the growth run's training FLOPs (``6 N D`` per phase).
        flops_per_step: the grown shape's training FLOPs per optimizer step.
        seeds: the seeds (``config['seed']`` is replaced, the data order and initial model with it).
        budgets: the scratch budgets as multiples of ``growth_flops`` (steps rounded to the nearest).
        out: the folder of the runs (``growth/seed<k>``, ``scratch-x<b>/seed<k>``).
    """
    runs = []
    for seed in seeds:
        base = copy.deepcopy(config)
        base.update(seed=seed, resume=False)
        run_dir = out / "growth" / f"seed{seed}"
        runs.append(MeasureRun("growth", 1.0, seed, {**base, "out_dir": str(run_dir)}, run_dir, growth_flops))
        for budget in budgets:
            scratch = copy.deepcopy(base)
            scratch.update(model_name=None, model_config=dict(grown), initial_checkpoint_dir=None)
            scratch["growth"] = {**scratch.get("growth", {}), "stages": [], "progressive": None}
            steps = max(1, round(budget * growth_flops / flops_per_step))
            scratch["train"] = {**scratch["train"], "max_steps": steps, "max_tokens": None, "epochs": None}
            run_dir = out / f"scratch-x{budget:g}" / f"seed{seed}"
            runs.append(MeasureRun("scratch", budget, seed, {**scratch, "out_dir": str(run_dir)}, run_dir,
                                   steps * flops_per_step))
    return runs


def is_done(run: TrainingRun) -> bool:
    """Whether ``run`` finished (``summary.json`` status ``completed``) with exactly this configuration
    (:meth:`TrainingRun.finished` of its ``summary.json`` and saved config)."""
    summary, saved = run.run_dir / "summary.json", run.run_dir / run.config_file
    if not (summary.is_file() and saved.is_file()):
        return False
    try:
        return bool(run.finished(json.loads(summary.read_text()), yaml.safe_load(saved.read_text())))
    except (OSError, ValueError, AttributeError, yaml.YAMLError):
        return False


def read_result(run: MeasureRun) -> dict[str, float]:
    """``{"loss", "flops", "seconds"}`` of a finished run: its final val loss, FLOPs and seconds: its steady steps'
    (each model phase's median step time times its steps: ``steady_seconds``), else its fit's."""
    summary = json.loads((run.run_dir / "summary.json").read_text())
    if summary.get("val_loss") is None:
        raise ValueError(f"{run.run_dir}/summary.json has no val_loss: measure needs eval.final_validation: true")
    return {"loss": float(summary["val_loss"]), "flops": float(summary.get("flops") or run.flops),
            "seconds": float(summary.get("steady_seconds") or summary.get("fit_seconds")
                             or summary.get("wall_clock_seconds") or 0.0)}


def prepare_data(run: Any) -> None:
    """Build the data cache of a resolved run (tokenizer and token files) once, before its runs start side by side:
    ``jobs`` runs starting at once would otherwise each train the same tokenizer."""
    from lightning_sparkling.pretrain.training.run import build_datamodule

    build_datamodule(run).prepare_data()


def train_runs(runs: Sequence[TrainingRun], jobs: int = 1, log: Callable[[str], None] = print,
               env: dict[str, str] | None = None, *, deadline: float | None = None,
               on_done: Callable[[TrainingRun], None] | None = None,
               placement: Placement | None = None) -> list[TrainingRun]:
    """Train every unfinished run, in order, ``jobs`` at a time; returns the runs that failed (their ``run.log``
    says why). A run's directory is emptied before it starts (an unfinished or stale run trains from the start).

    Each line of progress names the run, its result and seconds, and the overall count, elapsed time and an estimate
    of what is left. ``SIGTERM`` or Ctrl-C stops the running subprocesses too (:func:`_stop`; their runs are trained
    again next time) and is raised again as ``KeyboardInterrupt``: the caller stops, with a non-zero exit.

    Args:
        env: variables added to the subprocesses' environment.
        deadline: a ``time.time()`` past which no run starts and the running ones are stopped (unfinished: trained
            again next time); a line then says how many runs finished, failed, were stopped and never started, and
            the failed runs are returned as when every run ends (a deadline is no interrupt: nothing is raised);
            ``None``: no deadline.
        on_done: called with each run that finished (e.g. to append it to a results file).
        placement: where each of the ``jobs`` slots runs (:func:`~.placement.place_jobs`: on GPUs its own
            ``CUDA_VISIBLE_DEVICES``; its own ``MASTER_PORT``); a run takes a free slot's variables (over ``env``)
            and gives the slot back when it ends. ``None``: the CPU's (distinct master ports only).
    """
    placement = placement or place_jobs(jobs, 1, "cpu")
    if placement.jobs != jobs:
        raise ValueError(f"a placement of {placement.jobs} slots for {jobs} jobs: place as many slots as jobs")
    free_slots = list(range(jobs))
    slot_of: dict[int, int] = {}  # id(process) -> its slot
    todo = [r for r in runs if not is_done(r)]
    log(f"{len(runs)} runs, {len(runs) - len(todo)} already finished, {len(todo)} to train ({jobs} at a time)")
    running: list[tuple[subprocess.Popen, TrainingRun, Any, float]] = []
    failed: list[TrainingRun] = []
    t0, done = time.perf_counter(), 0
    flops_left = sum(r.flops for r in todo)
    flops_done = 0.0
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        while todo or running:
            if deadline is not None and time.time() >= deadline:  # not an interrupt: stop, and return normally
                not_started = len(todo)
                if todo:
                    log(f"deadline: {not_started} run(s) not started")
                todo.clear()
                stopped = _stop(running, log)
                log(f"deadline: {done - len(failed)} run(s) finished, {len(failed)} failed, {stopped} stopped "
                    f"(trained again next time), {not_started} not started")
                break
            while todo and len(running) < jobs:
                run, slot = todo.pop(0), free_slots.pop(0)
                running.append((*_start(run, {**(env or {}), **placement.env(slot)}), run.flops))
                slot_of[id(running[-1][0])] = slot
                log(f"start {running[-1][1].name} ({running[-1][1].run_dir})")
            _wait_any(running, timeout=1.0)
            for item in list(running):
                proc, run, logf, flops = item
                if proc.poll() is None:
                    continue
                running.remove(item)
                free_slots.append(slot_of.pop(id(proc)))
                logf.close()
                done += 1
                flops_done += flops
                ok = proc.returncode == 0 and is_done(run)
                if not ok:
                    failed.append(run)
                elif on_done is not None:
                    on_done(run)
                elapsed = time.perf_counter() - t0
                left = elapsed * (flops_left - flops_done) / flops_done if flops_done else 0.0
                status = "ok" if ok else (f"FAILED (exit {proc.returncode}: {_first_error(run.run_dir)}; see "
                                          f"{run.run_dir / 'run.log'})")
                log(f"[{done}/{done + len(todo) + len(running)}] {run.name}: {status}, "
                    f"{_seconds(run.run_dir)} (overall {elapsed / 60:.1f} min, ~{left / 60:.1f} min left)")
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: stop the subprocesses, then stop the caller too
        _stop(running, log)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    return failed


def _wait_any(running: list[tuple[subprocess.Popen, TrainingRun, Any, float]], timeout: float) -> None:
    """Return once a running subprocess has exited, or after ``timeout`` seconds (a poll every 20 ms: a run that
    ends at once, e.g. one refused by its config check, does not hold its slot for the whole second)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if any(proc.poll() is not None for proc, *_ in running):
            return
        time.sleep(0.02)


#: seconds a stopped run has to exit after its ``SIGTERM`` before it is killed: Lightning notices a ``SIGTERM`` only
#: between steps, so a run that is compiling (a minute on a GPU) would otherwise hold the stop that long
STOP_GRACE_S = 5.0


def _stop(running: list[tuple[subprocess.Popen, TrainingRun, Any, float]], log: Callable[[str], None]) -> int:
    """Stop the running subprocesses (their runs are unfinished: trained again next time) and empty ``running``:
    ``SIGTERM`` to every one at once, ``SIGKILL`` to those still running :data:`STOP_GRACE_S` seconds later. A
    ``SIGINT`` or ``SIGTERM`` that arrives meanwhile is held until every subprocess is gone, then raised as
    ``KeyboardInterrupt`` (a second Ctrl-C cannot leave a run behind). Returns how many were stopped."""
    held: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        held.append(signum)

    previous = {sig: signal.signal(sig, hold) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for proc, _, _, _ in running:
            if proc.poll() is None:
                proc.terminate()
        end = time.monotonic() + STOP_GRACE_S
        for proc, run, logf, _ in running:
            try:
                proc.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            logf.close()
            log(f"stopped: {run.name} (unfinished, trained again next time)")
        stopped = len(running)
        running.clear()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if held:
        raise KeyboardInterrupt
    return stopped


def _start(run: TrainingRun, env: dict[str, str] | None) -> tuple[subprocess.Popen, TrainingRun, Any]:
    if run.run_dir.exists():  # an unfinished or stale run: from the start
        shutil.rmtree(run.run_dir)
    run.run_dir.mkdir(parents=True)
    config = run.run_dir / run.config_file
    config.write_text(yaml.safe_dump(run.config, sort_keys=False))
    logf = open(run.run_dir / "run.log", "w")  # noqa: SIM115 - open while the subprocess runs
    proc = subprocess.Popen([*PRETRAIN, "--config", str(config)], stdout=logf, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})})
    return proc, run, logf


def _first_error(run_dir: Path) -> str:
    """The line of ``run.log`` that says what went wrong
    (:func:`~lightning_sparkling.pretrain.errors.first_error_line`)."""
    from lightning_sparkling.pretrain.errors import first_error_line

    try:
        return first_error_line((run_dir / "run.log").read_text(errors="replace")) or "no error line in the log"
    except OSError:
        return "no run.log"


def _seconds(run_dir: Path) -> str:
    try:
        return f"{json.loads((run_dir / 'summary.json').read_text())['wall_clock_seconds']:.0f} s"
    except (OSError, ValueError, KeyError, TypeError):
        return "no summary"


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
