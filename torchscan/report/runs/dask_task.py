"""What a Dask worker does for one registry run: the run in a supervised ``spawn`` process, exactly as a local build.

A Dask task cannot be killed in its worker thread, so the thread only supervises: `run_isolated` hands the run to
an `IsolatedProcessExecutor`, which enforces ``--timeout`` and turns a crash into a recorded failure, and converts
the outcome with the runner's own `outcome_of`, so every failure reads as in a local build. With ``--isolation
worker`` every Dask worker keeps one warm executor per build, which the client retires when its build ends
(`retire_warm_workers`). When the client cancels the task (Ctrl-C), the run's process is killed. This module is
imported on the workers (and by the client, to name the function it submits).
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable
from concurrent.futures import wait
from pathlib import Path
from typing import Any

from distributed import WorkerPlugin, get_worker

from ... import __version__
from .isolated_executor import IsolatedProcessExecutor, NamedFunction
from .result_cache import installed_torch_version
from .runner import outcome_of, reuses_workers

#: How often a running task checks whether the client still wants it.
POLL_SECONDS = 0.5
#: The warm executors of this Dask worker process, one per build (the client's `DaskExecutor` names it).
_WARM: dict[str, IsolatedProcessExecutor] = {}
_WARM_LOCK = threading.Lock()


def environment() -> dict[str, Any]:
    """The versions a result depends on, and whether this process may start the runs' processes."""
    return {"torch": installed_torch_version(), "torchscan": __version__,
            "daemon": multiprocessing.current_process().daemon}


def environment_problem(found: dict[str, Any], expected: dict[str, Any], where: str) -> str | None:
    """Why runs cannot execute in the environment ``found`` at ``where``, or None when they can: torch must be the
    same release, but its build label (``+cpu``, ``+cu128``) may differ, so that a client without a GPU can use GPU
    workers."""
    if (_release(found["torch"]), found["torchscan"]) != (_release(expected["torch"]), expected["torchscan"]):
        return (f"{where} has torch {found['torch']} and torchscan {found['torchscan']}, but the client has torch "
                f"{expected['torch']} and torchscan {expected['torchscan']}; install the same versions on the "
                "workers (the cache key and every report's context depend on them)")
    if found["daemon"]:
        return (f"{where} runs as a daemonic process, which cannot start the process each run needs; start the "
                "workers with DASK_DISTRIBUTED__WORKER__DAEMON=False in their environment (or with --no-nanny)")
    return None


def _release(version: str) -> str:
    return version.partition("+")[0]


def run_isolated(function: str | Callable[[dict[str, Any]], dict[str, Any]], job: dict[str, Any], timeout: float,
                 key: Any, expected: dict[str, Any], shipped: str | None, isolation: str = "run",
                 build: str = "") -> tuple[str, dict[str, Any]]:
    """Run ``function(job)`` in a supervised process on this worker; returns the worker's address and the result.
    ``function`` may be an import path (``module:name``), imported by the run's process only; ``shipped`` names the
    registry's zip (`ShippedRegistry`) the run imports the registry's modules from; ``isolation`` is
    ``--isolation``, and warm processes are shared by the runs of the build named ``build``."""
    worker = get_worker()
    problem = environment_problem(environment(), expected, f"the Dask worker {worker.address}")
    if problem is not None:
        return worker.address, {"status": "failed", "error": {"stage": "worker", "type": "EnvironmentMismatch",
                                                              "message": problem}}
    if shipped is not None:
        job = {**job, "folder": os.path.join(worker.local_directory, shipped)}
    warm = reuses_workers(isolation)
    executor = _warm_executor(build, timeout, worker.state.nthreads) if warm else \
        IsolatedProcessExecutor(max_workers=1, timeout=timeout)
    future = executor.submit_timed(timeout, NamedFunction(function) if isinstance(function, str) else function, job)
    if not warm:
        executor.shutdown(wait=False)
    while not future.done():
        wait([future], timeout=POLL_SECONDS)
        if not future.done() and not _still_wanted(worker, key):
            executor.kill(future)
            wait([future])
    if not warm:
        executor.shutdown(wait=True)
    return worker.address, outcome_of(future)


def _warm_executor(build: str, timeout: float, slots: int) -> IsolatedProcessExecutor:
    """This worker's warm executor for the build, started by the build's first run here."""
    with _WARM_LOCK:
        if build not in _WARM:
            _WARM[build] = IsolatedProcessExecutor(max_workers=max(1, slots), timeout=timeout, reuse=True)
        return _WARM[build]


def retire_warm_workers(build: str) -> None:
    """End this worker's warm processes of ``build`` once their runs are over (called on every worker at its end)."""
    with _WARM_LOCK:
        executor = _WARM.pop(build, None)
    if executor is not None:
        executor.shutdown(wait=False, cancel_futures=True)  # idle processes end now, busy ones after their run


def _still_wanted(worker: Any, key: str) -> bool:
    """False once the client cancelled or released this task (the worker then marks it cancelled or forgets it)."""
    task = worker.state.tasks.get(key)
    return task is not None and task.state != "cancelled"


class ShippedRegistry(WorkerPlugin):
    """Writes the registry's Python files (a zip made by the client) into each worker's local directory; registered
    under one name, so a later build replaces it, and handed to every worker that joins later."""

    name = "torchscan-registry"

    def __init__(self, filename: str, data: bytes) -> None:
        self.filename = filename
        self.data = data

    def setup(self, worker: Any) -> None:
        Path(worker.local_directory, self.filename).write_bytes(self.data)
