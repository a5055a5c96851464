"""Module-level task functions for the executor tests (a spawned worker imports them by name)."""

from __future__ import annotations

import os
import time


def add(a: int, b: int) -> int:
    return a + b


def boom() -> None:
    raise ValueError("boom")


def hang() -> None:
    time.sleep(600)


def die() -> None:
    os._exit(7)


def pid() -> int:
    return os.getpid()


def segfault() -> None:
    import ctypes

    ctypes.string_at(0)


def pid_after(path: str, seconds: float) -> int:
    """Write this process's id to ``path``, then sleep (the test kills the process meanwhile)."""
    with open(path, "w", encoding="utf-8") as file:
        file.write(str(os.getpid()))
    time.sleep(seconds)
    return os.getpid()


def import_from(folder: str, name: str) -> str:
    """Import module ``name`` from ``folder`` and return its VALUE (a registry factory's module, in small)."""
    import importlib
    import sys

    sys.path.insert(0, folder)
    return importlib.import_module(name).VALUE


def hang_job(job: dict) -> dict:
    """A registry run that never ends (the runner's per-entry timeout kills it)."""
    time.sleep(600)
    return {"status": "ok", "report": {}}
