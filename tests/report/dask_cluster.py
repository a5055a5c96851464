"""Shared pieces of the Dask tests: a loopback cluster of two worker processes (one declaring ``GPU=1``), the run
functions its workers execute, and the registries the tests build.

The run functions are module-level so that a spawned run process imports them by name (this folder is on the
path the workers hand to their children).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Kept small so that a run killing its worker every time is given up after two attempts.
ALLOWED_FAILURES = 1
CLUSTER_CONFIG = {"distributed.worker.daemon": False, "distributed.scheduler.allowed-failures": ALLOWED_FAILURES,
                  "distributed.scheduler.worker-saturation": 1.0}


@dataclass
class LoopbackCluster:
    address: str
    client: Any

    def gpu_worker(self) -> str:
        """The address of the one worker that declares ``GPU=1`` and ``MEMORY`` (it changes when it restarts)."""
        self.client.wait_for_workers(2, timeout=180)  # a killed worker is restarted by its nanny
        workers = self.client.scheduler_info(n_workers=-1)["workers"]
        return next(address for address, info in workers.items() if info.get("resources", {}).get("GPU"))


@contextlib.contextmanager
def loopback_cluster() -> Iterator[LoopbackCluster]:
    """Two Nanny-managed worker processes with one thread each on 127.0.0.1; the ``gpu`` one declares GPU=1 and
    MEMORY=2e9 (2 GB), the ``cpu`` one no resources."""
    import dask
    from distributed import Client, Nanny, Scheduler, SpecCluster

    worker = {"nthreads": 1, "host": "127.0.0.1", "dashboard_address": None, "dashboard": False,
              "silence_logs": logging.CRITICAL}
    with dask.config.set(CLUSTER_CONFIG):
        cluster = SpecCluster(
            scheduler={"cls": Scheduler, "options": {"host": "127.0.0.1", "port": 0, "dashboard_address": None,
                                                      "dashboard": False}},
            workers={"cpu": {"cls": Nanny, "options": worker},
                     "gpu": {"cls": Nanny, "options": {**worker, "resources": {"GPU": 1, "MEMORY": 2e9}}}},
            silence_logs=logging.CRITICAL)
        try:
            with Client(cluster) as client:
                client.wait_for_workers(2, timeout=120)
                yield LoopbackCluster(cluster.scheduler_address, client)
        finally:
            cluster.close(timeout=30)


# -- run functions (each called as function(job) in a fresh process on a worker) ---------------------------------


def _log_attempt(job: dict[str, Any]) -> int:
    """Append this process's pid to the run's log; returns how many attempts came before."""
    log = Path(job["kwargs"]["log"])
    before = len(log.read_text().splitlines()) if log.exists() else 0
    with log.open("a") as file:
        file.write(f"{os.getpid()}\n")
    return before


def lose_worker(job: dict[str, Any]) -> dict[str, Any]:
    """Kill the Dask worker running this run (its parent process), then hang: only a lost worker ends it.

    With ``once``, the run kills its worker on the first attempt only and succeeds when Dask retries it.
    """
    if _log_attempt(job) and job["kwargs"].get("once"):
        return {"status": "ok", "report": {"attempts": 2}}
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(600)
    return {"status": "ok", "report": {}}


def process_gone(pid: int, within: float = 15.0) -> bool:
    """Whether process ``pid`` ends within ``within`` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


# -- probes run on the workers or the scheduler (module-level here: this module does not import torch) -----------


def imported(module: str) -> bool:
    import sys

    return module in sys.modules


def child_processes() -> list[int]:
    import multiprocessing

    return [process.pid for process in multiprocessing.active_children()]


def scheduler_tasks(run_key: str, dask_scheduler: Any = None) -> list[Any]:
    """The keys of the runs (task keys starting with ``run_key``) the scheduler still knows about."""
    return [key for key in dask_scheduler.tasks if isinstance(key, tuple) and key[0] == run_key]


# -- registries ----------------------------------------------------------------------------------------------------

MODELS = '''
"""Tiny models built by the Dask tests' registries."""
import os
import time

import torch
from torch import nn


def tiny(width: int = 4):
    return nn.Sequential(nn.Conv2d(3, width, 3), nn.ReLU(), nn.Flatten())


def raises():
    raise RuntimeError("factory exploded on purpose")


def hangs(log: str = ""):
    if log:
        with open(log, "a", encoding="utf-8") as file:
            file.write(f"{os.getpid()}\\n")
    time.sleep(3600)


def exits():
    os._exit(3)
'''

#: Every outcome a run can have, built locally and on a cluster; the outputs must be byte-identical. The hanging
#: entry comes first, so that its timeout overlaps the other runs.
COMPARED_REGISTRY = '''
[catalog]
title = "Cluster zoo"

[[models]]
name = "hangs"
factory = "dask_models:hangs"
input_shape = [4]

[[models]]
name = "tiny"
factory = "dask_models:tiny"
input_shape = [3, 8, 8]
memory = "1GB"

[[models.variants]]
name = "w4"

[[models.variants]]
name = "w8"
kwargs = { width = 8 }

[[models]]
name = "raises"
factory = "dask_models:raises"
input_shape = [4]

[[models]]
name = "exits"
factory = "dask_models:exits"
input_shape = [4]
'''

#: A run that hangs (and logs its process id) and one that finishes, for the Ctrl-C test.
CTRL_C_REGISTRY = '''
[[models]]
name = "hangs"
factory = "dask_models:hangs"
kwargs = { log = "LOG" }
input_shape = [4]

[[models]]
name = "raises"
factory = "dask_models:raises"
input_shape = [4]
'''

CUDA_REGISTRY = '''
[[models]]
name = "big"
factory = "dask_models:tiny"
input_shape = [3, 8, 8]
memory = "1GB"

[[models]]
name = "gpu"
factory = "dask_models:tiny"
input_shape = [3, 8, 8]
device = "cuda"

[[models.variants]]
name = "w4"

[[models.variants]]
name = "w8"
kwargs = { width = 8 }
'''


def write_registry(folder: Path, text: str, models: str = MODELS, module: str = "dask_models") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{module}.py").write_text(models, encoding="utf-8")
    registry = folder / "models.toml"
    registry.write_text(text.replace("dask_models:", f"{module}:"), encoding="utf-8")
    return registry


def tree(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by relative path, with its bytes."""
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file()}
