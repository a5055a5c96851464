"""Builds on a Dask cluster: the client side of ``torchscan-report build --scheduler``.

`DaskSession` connects to a running scheduler (``tcp://host:8786``) or starts a ``LocalCluster`` (``local:N``),
checks that every worker has the client's torch and torchscan versions, optionally ships the registry's code, and
hands the unchanged runner a `DaskExecutor` whose tasks run `dask_task.run_isolated` on the workers, so each run
still gets a supervised process, timeout and crash handling. Dask's ``distributed`` is an optional extra, imported
only here and only when a scheduler is asked for.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import uuid
import zipfile
from collections.abc import Callable
from concurrent.futures import Executor, Future
from pathlib import Path
from typing import Any, Self

from ... import __version__
from ..registry.placement import dask_resources
from .isolated_executor import WorkerDied, import_object
from .result_cache import installed_torch_version
from .runner import reuses_workers

LOCAL_PREFIX = "local:"
SCHEDULER_HELP = ("a Dask scheduler address such as tcp://host:8786, or local:N to start a LocalCluster of N worker "
                  "processes on this machine")
#: Dask settings of a ``local:N`` cluster: workers that may start processes, and one run at a time per worker
#: thread (so a worker lost by one run takes no queued innocent run with it).
LOCAL_CONFIG = {"distributed.worker.daemon": False, "distributed.scheduler.worker-saturation": 1.0}
#: The shipped registry may hold Python sources only, and not too many of them.
SHIP_LIMIT_BYTES = 50 * 2**20
#: The first part of every run's task key: all runs form one Dask task group, so that a large build is queued on
#: the scheduler and handed out as worker threads free up.
RUN_KEY = "torchscan-run"
_ADDRESS = re.compile(r"^[a-z][a-z0-9+.-]*://\S+$")


class ClusterError(RuntimeError):
    """The cluster cannot run this build: the extra is missing, the scheduler unreachable, the workers mismatched."""


def parse_scheduler(text: str) -> str | int:
    """A scheduler address, or the worker count of ``local:N``; raises ValueError for anything else."""
    if text.startswith(LOCAL_PREFIX):
        count = text[len(LOCAL_PREFIX):]
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"expected local:N with N a positive number of worker processes, got {text!r}")
        return int(count)
    if not _ADDRESS.match(text):
        raise ValueError(f"expected {SCHEDULER_HELP}, got {text!r}")
    return text


def require_distributed() -> Any:
    """The ``distributed`` module, or a ClusterError naming the extra that provides it."""
    try:
        import distributed
    except ImportError as error:
        raise ClusterError("building on a Dask scheduler needs Dask's distributed package, an optional extra: "
                           f'pip install "torchscan[dask]" ({error})') from None
    return distributed


def client_environment() -> dict[str, str]:
    """The versions every worker must match (package metadata: reading them does not import torch)."""
    return {"torch": installed_torch_version(), "torchscan": __version__}


class DaskSession:
    """A scheduler connection for one build, opened when the first uncached run is submitted (a fully cached rebuild
    never connects), closed on exit; ``note`` receives one-line remarks for the user (the progress's)."""

    def __init__(self, scheduler: str | int, *, ship_from: Path | None = None,
                 note: Callable[[str], None] = print, connect_timeout: float = 60.0, isolation: str = "worker") -> None:
        reuses_workers(isolation)  # an unknown mode fails here, before any connection
        self.isolation = isolation
        self.scheduler = scheduler
        self.ship_from = ship_from
        self.note = note
        self.connect_timeout = connect_timeout
        self.client: Any = None
        self._stack = contextlib.ExitStack()
        self._executors: list[DaskExecutor] = []

    def __enter__(self) -> Self:
        require_distributed()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """End the warm processes of this session's builds on the workers, then the connection."""
        for executor in self._executors:
            executor.retire_warm_workers()
        self._executors.clear()
        self.client = None
        self._stack.close()

    def executor_factory(self, jobs: int, timeout: float) -> DaskExecutor:
        """The runner's ExecutorFactory; ``jobs`` is unused: the cluster's worker threads set the parallelism."""
        if self.client is None:
            self.connect()
        shipped = ship_registry(self.client, self.ship_from) if self.ship_from is not None else None
        executor = DaskExecutor(self.client, timeout, shipped=shipped, placement=not isinstance(self.scheduler, int),
                                note=self.note, isolation=self.isolation)
        self._executors.append(executor)
        return executor

    def connect(self) -> None:
        """Start or reach the scheduler, wait for a worker, and check every worker's environment."""
        distributed = require_distributed()
        try:
            client = (distributed.Client(self._local_cluster(distributed)) if isinstance(self.scheduler, int)
                      else distributed.Client(self.scheduler, timeout=self.connect_timeout))
            self.client = self._stack.enter_context(client)
            self.client.wait_for_workers(1, timeout=self.connect_timeout)
        except (OSError, TimeoutError) as error:
            self.close()
            raise ClusterError(f"cannot use the Dask scheduler {self.scheduler}: {error or type(error).__name__}"
                               + ("" if isinstance(self.scheduler, int) else
                                  f" (no scheduler reachable, or no worker joined within {self.connect_timeout:g} s)")
                               ) from None
        check_workers(self.client)

    def _local_cluster(self, distributed: Any) -> Any:
        import dask

        self._stack.enter_context(dask.config.set(LOCAL_CONFIG))
        cluster = distributed.LocalCluster(n_workers=self.scheduler, threads_per_worker=1, processes=True,
                                           host="127.0.0.1", dashboard_address=None, silence_logs=logging.ERROR)
        return self._stack.enter_context(cluster)


def _by_name(function: Callable[..., Any]) -> str | Callable[..., Any]:
    """A module-level function's import path (the worker then never imports it, only the run's process does)."""
    path = f"{function.__module__}:{function.__qualname__}"
    try:
        return path if import_object(path) is function else function
    except (ImportError, AttributeError):
        return function


def check_workers(client: Any) -> None:
    """Raise ClusterError when a connected worker's torch or torchscan version differs from the client's."""
    from .dask_task import environment, environment_problem

    try:
        found = client.run(environment)
    except Exception as error:  # noqa: BLE001 - a worker that cannot even import torchscan fails here
        raise ClusterError(f"the Dask workers cannot run TorchScan ({type(error).__name__}: {error}); install the "
                           "client's torch and torchscan on every worker") from None
    expected = client_environment()
    for address in sorted(found):
        problem = environment_problem(found[address], expected, f"the Dask worker {address}")
        if problem is not None:
            raise ClusterError(problem)


def registry_zip(folder: Path) -> bytes:
    """The registry folder's Python sources as a zip (hidden folders, caches and virtual environments left out)."""
    buffer = io.BytesIO()
    total = 0
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for root, folders, files in os.walk(folder):
            folders[:] = sorted(name for name in folders if _shipped_folder(Path(root, name)))
            for name in sorted(files):
                if name.endswith(".py"):
                    path = Path(root, name)
                    total += path.stat().st_size
                    if total > SHIP_LIMIT_BYTES:
                        raise ClusterError(f"{folder} holds more than {SHIP_LIMIT_BYTES // 2**20} MiB of Python "
                                           "sources; share the folder with the workers instead of shipping it")
                    archive.writestr(zipfile.ZipInfo(path.relative_to(folder).as_posix()), path.read_bytes())
    return buffer.getvalue()


def _shipped_folder(path: Path) -> bool:
    return not (path.name.startswith((".", "__pycache__")) or (path / "pyvenv.cfg").exists()
                or path.name == "site-packages")


def ship_registry(client: Any, folder: Path) -> str:
    """Upload the registry's code to every worker, present and future; returns the zip's file name on them."""
    from .dask_task import ShippedRegistry

    filename = f"torchscan-registry-{uuid.uuid4().hex[:12]}.zip"
    client.register_plugin(ShippedRegistry(filename, registry_zip(folder)), name=ShippedRegistry.name)
    return filename


class DaskExecutor(Executor):
    """Submits each run as one Dask task that runs it in a supervised process on a worker (`run_isolated`): a warm
    one shared by this executor's runs on that worker (``isolation="worker"``, retired on `shutdown`) or its own.
    With ``placement``, a run asks for the resources its entry needs (``GPU``, ``MEMORY``; a ``local:N`` cluster
    ignores them); ``placements`` maps each finished run's stem to the address of the worker that executed it."""

    def __init__(self, client: Any, timeout: float, *, shipped: str | None = None, placement: bool = True,
                 note: Callable[[str], None] = print, isolation: str = "worker") -> None:
        self._client = client
        self._isolation = isolation
        self._build = uuid.uuid4().hex  # names this build's warm processes on the workers
        self._retired = False
        self._timeout = timeout
        self._shipped = shipped
        self._placement = placement
        self._note = note
        self._expected = client_environment()
        self._pending: dict[tuple[str, str, str], Any] = {}  # task key (RUN_KEY, stem, unique) -> Dask future
        self._checked: set[tuple[str, float]] = set()
        self.placements: dict[str, str] = {}

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        from .dask_task import run_isolated

        if len(args) != 1 or kwargs or not isinstance(args[0], dict):
            raise TypeError("DaskExecutor.submit takes the run function and one job (a dict from Run.to_job)")
        job = args[0]
        key = (RUN_KEY, job["stem"], uuid.uuid4().hex)
        resources = dask_resources(job) if self._placement else {}
        self._warn_unplaceable(resources)
        timeout = job.get("timeout", self._timeout)  # the entry's own, else build --timeout
        task = self._client.submit(run_isolated, _by_name(fn), job, timeout, key, self._expected,
                                   self._shipped, self._isolation, self._build, key=key, pure=False,
                                   resources=resources or None)
        self._pending[key] = task
        future: Future = Future()
        task.add_done_callback(lambda done: self._settle(done, future, job["stem"]))
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        tasks = list(self._pending.values())
        if cancel_futures and tasks:
            self._client.cancel(tasks)
        elif wait and tasks:
            from distributed import wait as wait_for

            wait_for(tasks)
        self.retire_warm_workers()

    def retire_warm_workers(self) -> None:
        """Ask every worker to end this build's warm processes (a worker that is gone has none left); idempotent."""
        from .dask_task import retire_warm_workers

        if not reuses_workers(self._isolation) or self._retired:
            return
        self._retired = True
        with contextlib.suppress(Exception):  # a closing client or a lost worker: their processes end with them
            self._client.run(retire_warm_workers, self._build)

    def _settle(self, task: Any, future: Future, stem: str) -> None:
        self._pending.pop(task.key, None)
        if task.status == "cancelled" or not future.set_running_or_notify_cancel():
            future.cancel()
            return
        from distributed import KilledWorker

        try:
            address, result = task.result()
        except KilledWorker as error:
            future.set_exception(WorkerDied(
                f"the run lost its Dask worker {error.allowed_failures + 1} times (the scheduler allows "
                f"{error.allowed_failures} losses, distributed.scheduler.allowed-failures); it may crash the worker "
                "or exhaust its memory"))
        except BaseException as error:  # noqa: BLE001 - the runner records it as a failure
            future.set_exception(error)
        else:
            self.placements[stem] = address
            future.set_result(result)

    def _warn_unplaceable(self, resources: dict[str, float]) -> None:
        """Tell the user once per request when no connected worker offers it (such runs wait for one)."""
        for name, amount in resources.items():
            if (name, amount) in self._checked:
                continue
            self._checked.add((name, amount))
            workers = self._client.scheduler_info(n_workers=-1).get("workers", {}).values()
            if not any(worker.get("resources", {}).get(name, 0) >= amount for worker in workers):
                self._note(f"no connected Dask worker offers the resource {name}={amount:.0f}; runs that need it "
                           f"wait until a worker started with --resources {name}=... joins")
