"""Where runs that train side by side go: on GPUs, each job its own slice of the visible GPUs
(``CUDA_VISIBLE_DEVICES``) sized by the run's ``devices``, and every job its own ``MASTER_PORT``.

``sparkling measure --jobs``, ``benchmarks/campaign.py`` and ``benchmarks/gpu_examples.py`` place their runs with
:func:`place_jobs`. The visible GPUs are those ``CUDA_VISIBLE_DEVICES`` lists, when it is set (a slice of the node
handed to this process: it is sliced further), else ``0 .. torch.cuda.device_count() - 1``.

* ``jobs x devices`` within the visible GPUs: job ``k`` gets GPUs ``k*devices .. (k+1)*devices - 1`` of them, alone
  (:attr:`Placement.alone`: its seconds count only its own work, so a wall-clock ratio of the runs means something).
* beyond them: refused (:class:`PlacementError`, the numbers and the fix), or, with ``share=True`` (the benchmark
  scripts, which put several small runs on one GPU on purpose), the slices taken in turn: job ``k`` on slice
  ``k mod (visible // devices)``, not alone.
* ``devices: auto`` (or ``-1``) on GPUs takes every visible GPU: fine for one job, refused for more (each run would
  take the whole node): give ``devices`` as a number.
* on the CPU nothing is sliced; each job still gets its own master port (several ``devices: 2`` runs start gloo
  process groups at once). ``alone`` only for one job: CPU runs side by side share the cores.
* one job keeps the environment's ``MASTER_PORT`` (a cluster's, say): no other run of ours can collide with it.

Example::

    placement = place_jobs(4, 2, "cuda")       # on 8 GPUs: "0,1", "2,3", "4,5", "6,7"
    placement.env(1)                           # {"CUDA_VISIBLE_DEVICES": "2,3", "MASTER_PORT": "41873"}
    place_jobs(5, 2, "cuda")                   # PlacementError: --jobs 5 x devices 2 = 10 GPUs, 8 visible: ...
"""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import dataclass


class PlacementError(ValueError):
    """The jobs do not fit the visible GPUs; the message names the numbers and the fix."""


@dataclass(frozen=True)
class Placement:
    """Where each job slot runs: ``gpus[k]`` the ``CUDA_VISIBLE_DEVICES`` entries of slot ``k`` (``None``: not sliced,
    the environment's own), ``ports[k]`` its ``MASTER_PORT``; ``alone``: no slot shares a device with another."""

    gpus: tuple[tuple[str, ...] | None, ...]
    ports: tuple[int, ...]
    alone: bool

    @property
    def jobs(self) -> int:
        """The number of slots (runs at a time)."""
        return len(self.ports)

    def env(self, slot: int) -> dict[str, str]:
        """The variables a run started in ``slot`` gets: on GPUs ``CUDA_VISIBLE_DEVICES``, and its ``MASTER_PORT``
        when several run at a time (one job keeps the environment's own, e.g. a cluster's)."""
        env = {"MASTER_PORT": str(self.ports[slot])} if self.jobs > 1 else {}
        if (gpus := self.gpus[slot]) is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus)
        return env

    def describe(self) -> list[str | None]:
        """Each slot's GPUs as ``CUDA_VISIBLE_DEVICES`` writes them (``None``: not sliced), e.g. ``["0,1", "2,3"]``."""
        return [None if g is None else ",".join(g) for g in self.gpus]


def visible_gpus() -> list[str]:
    """The GPUs this process may use: ``CUDA_VISIBLE_DEVICES``' entries when it is set, else
    ``0 .. torch.cuda.device_count() - 1`` (none when CUDA is not available)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [entry.strip() for entry in listed.split(",") if entry.strip()]
    import torch

    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def on_gpu(accelerator: str) -> bool:
    """Whether a run of ``accelerator`` (a config's value or a resolved one) trains on CUDA GPUs."""
    acc = str(accelerator).lower()
    if acc != "auto":
        return acc in ("gpu", "cuda")
    import torch  # only for auto: a CPU caller need not start torch

    return torch.cuda.is_available()


def place_jobs(jobs: int, devices: int | str, accelerator: str, *, share: bool = False,
               gpus: Sequence[str] | None = None) -> Placement:
    """The placement of ``jobs`` runs at a time, each with ``devices`` devices on ``accelerator``.

    Args:
        jobs: runs at a time.
        devices: each run's ``devices`` (a number, or ``auto`` / ``-1``: every visible GPU).
        accelerator: the runs' accelerator (``auto`` is CUDA when it is available).
        share: past the visible GPUs, take the slices in turn (several runs on a GPU) instead of refusing.
        gpus: the visible GPUs (default :func:`visible_gpus`).

    Returns:
        One slot per job (:class:`Placement`), each with its own free port.

    Raises:
        PlacementError: ``jobs x devices`` beyond the visible GPUs (without ``share``), or ``devices: auto`` with
            more than one job on GPUs.
    """
    if not on_gpu(accelerator):
        return Placement(gpus=(None,) * jobs, ports=free_ports(jobs), alone=jobs == 1)
    visible = list(visible_gpus() if gpus is None else gpus)
    listed = os.environ.get("CUDA_VISIBLE_DEVICES") if gpus is None else None
    where = f" (CUDA_VISIBLE_DEVICES={listed})" if listed is not None else ""
    if str(devices) in ("auto", "-1"):
        if jobs == 1:
            return Placement(gpus=(None,), ports=free_ports(1), alone=True)
        per_job = len(visible) // jobs
        fix = (f"--devices {per_job} (--jobs {jobs} x devices {per_job} fits)" if per_job >= 1
               else f"--devices 1 --jobs {len(visible)}")
        raise PlacementError(f"--jobs {jobs} with devices {devices}: each run would take all {len(visible)} visible "
                             f"GPUs{where}; give devices as a number, e.g. {fix}")
    per_run = int(devices)
    slices = len(visible) // per_run
    if jobs * per_run > len(visible) and not (share and slices >= 1):
        fix = (f"use --jobs {slices}" if slices >= 1
               else f"use devices {len(visible)} or fewer" if visible else "make GPUs visible or use --accelerator cpu")
        raise PlacementError(f"--jobs {jobs} x devices {per_run} = {jobs * per_run} GPUs, {len(visible)} visible"
                             f"{where}: {fix}")
    slots = tuple(tuple(visible[(k % slices) * per_run:(k % slices + 1) * per_run]) for k in range(jobs))
    return Placement(gpus=slots, ports=free_ports(jobs), alone=jobs <= slices)


def free_ports(n: int) -> tuple[int, ...]:
    """``n`` distinct ports free now (each bound at once, then released for the run to take)."""
    with ExitStack() as stack:
        ports = []
        for _ in range(n):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("", 0))  # every interface, as the TCPStore listens; held until all n are taken: n different
            ports.append(sock.getsockname()[1])
    return tuple(ports)

