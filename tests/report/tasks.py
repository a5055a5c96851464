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
