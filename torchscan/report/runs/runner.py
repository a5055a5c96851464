"""The batch runner: submit one pure function per registry run to an Executor and collect every result.

The default executor runs the runs in supervised worker processes with a timeout (`IsolatedProcessExecutor`); any
other ``concurrent.futures.Executor`` (a cluster's, a thread pool in a test) works unchanged, with timeouts then
left to that executor. A run that raises, hangs or kills its process becomes a recorded failure; the others go on.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from concurrent.futures import Executor, Future, as_completed
from pathlib import Path
from typing import Any

from ..registry.jobs import Run
from .isolated_executor import IsolatedProcessExecutor, NamedFunction, TaskRaised, TaskTimeout, WorkerDied
from .progress import Progress
from .result_cache import ResultCache, cache_key, installed_torch_version

ExecutorFactory = Callable[[int, float], Executor]
#: The runner's pure function, by import path.
ANALYZE_RUN = "torchscan.report.runs.worker:analyze_run"


def default_jobs() -> int:
    return os.cpu_count() or 1


#: ``--isolation``: ``worker`` runs many runs in each warm worker process (its state reset between runs), ``run``
#: starts a fresh process for every run.
ISOLATION_MODES = ("worker", "run")


def isolated_executor(jobs: int, timeout: float, isolation: str = "worker") -> IsolatedProcessExecutor:
    """``jobs`` supervised worker processes, warm (``isolation="worker"``) or one per run (``"run"``)."""
    return IsolatedProcessExecutor(max_workers=jobs, timeout=timeout, reuse=reuses_workers(isolation))


def reuses_workers(isolation: str) -> bool:
    """Whether an ``--isolation`` mode keeps worker processes warm; anything but a known mode is an error."""
    if isolation not in ISOLATION_MODES:
        raise ValueError(f"isolation must be one of {', '.join(ISOLATION_MODES)}, got {isolation!r}")
    return isolation == "worker"


def executor_factory(isolation: str) -> ExecutorFactory:
    """The runner's ExecutorFactory for an ``--isolation`` mode (checked now, not at the first uncached run)."""
    reuses_workers(isolation)
    return functools.partial(isolated_executor, isolation=isolation)


def run_all(runs: list[Run], folder: Path, cache: ResultCache, progress: Progress, *, jobs: int,
            timeout: float, executor_factory: ExecutorFactory = isolated_executor,
            function: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> dict[str, dict[str, Any]]:
    """Results of every run, keyed by the run's stem; cached ones are reused without starting a worker. ``timeout``
    is the seconds a run may take when its entry sets no ``timeout`` of its own."""
    torch_version = installed_torch_version()
    results: dict[str, dict[str, Any]] = {}
    pending: list[tuple[Run, dict[str, Any], str]] = []
    progress.start(len(runs))
    for run in runs:
        job = run.to_job(folder)
        key = cache_key(job, folder, torch_version)
        cached = cache.load(key, run.timeout or timeout)
        if cached is not None:
            results[run.stem] = _reused(cached, cache, key, run.stem, progress, run.timeout or timeout)
        else:
            pending.append((run, job, key))
    if pending:
        executor = executor_factory(min(jobs, len(pending)), timeout)
        results.update(_execute(pending, cache, progress, executor, function or default_function(executor), timeout))
    cache.close()
    progress.stop()
    return results


def _reused(cached: dict[str, Any], cache: ResultCache, key: str, stem: str, progress: Progress, timeout: float
            ) -> dict[str, Any]:
    """A previous build's result, kept for the next one: a success, or a timeout (shown with its last good result)."""
    cache.keep(key, cached, stem, timeout)
    if cached["status"] == "ok":
        progress.finished(stem, "cached", cached)
        return cached
    result = with_last_good(cached, cache, stem)
    progress.finished(stem, f"{_short(result)}, cached: not run again until its inputs change, a longer timeout or "
                      "--retry-failed", result)
    return result


def default_function(executor: Executor) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """`torchscan.report.runs.worker.analyze_run`, imported only for an uncached run (it imports torch): local worker
    processes get it by its import path, so that this process never imports torch; other executors the function."""
    if isinstance(executor, IsolatedProcessExecutor):
        return NamedFunction(ANALYZE_RUN)
    from .worker import analyze_run

    return analyze_run


def _execute(pending: list[tuple[Run, dict[str, Any], str]], cache: ResultCache, progress: Progress,
             executor: Executor, function: Callable[[dict[str, Any]], dict[str, Any]], timeout: float
             ) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    futures: dict[Future, tuple[Run, str]] = {}
    try:
        for run, job, key in pending:
            futures[_submit(executor, function, job, run.timeout or timeout)] = (run, key)
            progress.submitted(run.stem)
        for future in as_completed(futures):
            run, key = futures[future]
            result = outcome_of(future)
            cache.store(key, result, run.stem, run.timeout or timeout)
            result = results[run.stem] = with_last_good(result, cache, run.stem)
            progress.finished(run.stem, result["status"] if result["status"] == "ok" else _short(result), result)
    except BaseException:
        if isinstance(executor, IsolatedProcessExecutor):
            executor.kill_all()
        else:
            executor.shutdown(wait=False, cancel_futures=True)
        raise
    executor.shutdown(wait=True)
    return results


def _submit(executor: Executor, function: Callable[[dict[str, Any]], dict[str, Any]], job: dict[str, Any],
            timeout: float) -> Future:
    """Submit one run with its timeout: the local executor takes it per call, a Dask executor reads the job's
    ``timeout`` (the entry's own), and any other executor keeps its own timeouts."""
    if isinstance(executor, IsolatedProcessExecutor):
        return executor.submit_timed(timeout, function, job)
    return executor.submit(function, job)


def with_last_good(result: dict[str, Any], cache: ResultCache, stem: str) -> dict[str, Any]:
    """A failed run's record with its last good result (``last_good``: the inputs' hash it was built from, as
    ``key``, and its ``report``), kept in the cache until a new good result replaces it; others unchanged."""
    kept = None if result["status"] == "ok" else cache.carry_last_good(stem)
    if kept is None:
        return result
    key, previous = kept
    return {**result, "last_good": {"key": key, "report": previous["report"]}}


def outcome_of(future: Future) -> dict[str, Any]:
    """The future's result, or a recorded failure for whatever went wrong around the function."""
    try:
        result = future.result()
    except TaskTimeout as error:
        return _failure("timeout", "TimeoutError", str(error))
    except WorkerDied as error:
        return _failure("worker", "WorkerDied", str(error))
    except TaskRaised as error:
        return _failure("worker", "WorkerError", str(error))
    except Exception as error:  # noqa: BLE001 - a foreign executor may fail in its own ways
        return _failure("worker", type(error).__name__, str(error))
    if not isinstance(result, dict) or result.get("status") not in ("ok", "failed"):
        return _failure("worker", "TypeError", "the worker returned something other than a result record")
    return result


def _failure(stage: str, kind: str, message: str) -> dict[str, Any]:
    return {"status": "failed", "error": {"stage": stage, "type": kind, "message": message}}


def _short(result: dict[str, Any]) -> str:
    error = result["error"]
    return f"failed ({error['stage']}: {error['type']})"
