"""``measure_time``: the wall-clock time of an owner-controlled workload on one named device, with its spread.

A measured time is only worth its conditions: the result names the device (for a CPU, its model name and the number
of threads PyTorch's operators use), how many untimed warm-up runs preceded the timed ones, how many were timed,
and the spread of those (the interquartile range and the extremes), beside the median. On an accelerator the device
is synchronized before and after each timed run, so a run's time covers the kernels it queued rather than their
launch. Nothing global is left changed: the cyclic garbage collector, paused while a run is timed (as ``timeit``
does), is restored to its previous state, also when the workload raises.
"""

from __future__ import annotations

import gc
import platform
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any, Final

import torch

from ..calls.inputs import require_available

METHOD = "wall_clock"
UNIT = "seconds"
#: The defaults of `measure_time` (a ``crawl_module(..., time=True)`` analysis has its own, `torchscan.timing.profiled`).
WARMUP, REPEATS = 2, 10


def measure_time(workload: Callable[[], Any], *, device: torch.device | str | None = None, warmup: int = WARMUP,
                 repeats: int = REPEATS) -> dict[str, Any]:
    """Run ``workload()`` ``warmup`` times untimed, then ``repeats`` times timed, and report the wall-clock statistics.

    ``device`` names the device the workload runs on: ``"cpu"``, or an accelerator (``"cuda"``, ``"cuda:1"``, the
    device of ``torch.accelerator``), which is synchronized before and after every timed run. ``None`` means the CPU on
    a machine without an accelerator; where an accelerator is present it must be named (``device="cpu"`` included), so
    that an unsynchronized accelerator workload is never timed by mistake. ``meta`` runs nothing and has no time.
    Bad arguments raise ``TypeError`` or ``ValueError`` naming the argument, before the workload runs.

    Returns ``{"device", "device_name", "threads", "method": "wall_clock", "unit": "seconds", "warmup", "repeats",
    "median", "q1", "q3", "iqr", "min", "max", "samples"}``: ``samples`` are the timed runs in order, ``q1`` and ``q3``
    their quartiles (inclusive method; both equal the one sample when ``repeats`` is 1) and ``iqr`` = ``q3 - q1``.
    ``threads`` is ``torch.get_num_threads()`` on a CPU and ``None`` on an accelerator.
    """
    if not callable(workload):
        raise TypeError(f"workload must be a callable taking no arguments, got {type(workload).__name__}")
    check_counts(warmup=warmup, repeats=repeats)
    target = timed_device(device)
    samples = time_runs(workload, target, warmup, repeats)
    return {**describe_device(target), "method": METHOD, "unit": UNIT, "warmup": warmup, "repeats": repeats,
            **spread(samples), "samples": samples}


def check_counts(*, warmup: Any, repeats: Any) -> None:
    """``warmup`` a non-negative and ``repeats`` a positive integer (errors name the argument)."""
    for name, count, least in (("warmup", warmup, 0), ("repeats", repeats, 1)):
        if isinstance(count, bool) or not isinstance(count, int):
            raise TypeError(f"{name} must be an int, got {type(count).__name__}")
        if count < least:
            raise ValueError(f"{name} must be at least {least}, got {count}")


def timed_device(device: Any, argument: str = "device") -> torch.device:
    """``device`` as the one device a time names: ``cpu`` (any CPU device), or an accelerator with its index explicit.

    ``None`` is the CPU when this machine has no accelerator. ``meta`` and devices this machine lacks raise
    ``ValueError`` naming ``argument``.
    """
    if device is None:
        if torch.accelerator.is_available():
            accelerator = torch.accelerator.current_accelerator()
            raise ValueError(f"{argument} must be named on a machine with an accelerator: pass {argument}='cpu' or "
                             f"{argument}={getattr(accelerator, 'type', 'cuda')!r} (an accelerator is synchronized "
                             "around each timed run, the CPU is not)")
        return torch.device("cpu")
    try:
        target = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"{argument} must be 'cpu' or an accelerator device, got {device!r}") from error
    if target.type == "cpu":
        return torch.device("cpu")
    if target.type == "meta":
        raise ValueError(f"{argument}='meta' runs no kernels and has no time: measure on the device the model runs on")
    require_available(target, argument)
    accelerator = torch.accelerator.current_accelerator() if torch.accelerator.is_available() else None
    if accelerator is None or accelerator.type != target.type:
        raise ValueError(f"{argument}={str(target)!r} is neither the CPU nor this machine's accelerator "
                         f"({'none' if accelerator is None else accelerator.type}): its kernels cannot be "
                         "synchronized")
    index = torch.accelerator.current_device_index() if target.index is None else target.index
    return torch.device(target.type, index)


def synchronize(device: torch.device) -> None:
    """Wait for the kernels queued on ``device`` (nothing to wait for on the CPU)."""
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def time_runs(workload: Callable[[], Any], device: torch.device, warmup: int, repeats: int) -> list[float]:
    """The seconds of each of ``repeats`` timed runs of ``workload`` after ``warmup`` untimed ones, the device
    synchronized around each run and the cyclic garbage collector paused while one is timed."""
    for _ in range(warmup):
        workload()
    synchronize(device)
    samples = []
    for _ in range(repeats):
        with collector_paused():
            start = time.perf_counter_ns()
            workload()
            synchronize(device)
            samples.append((time.perf_counter_ns() - start) / 1e9)
    return samples


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused for the block, as ``timeit`` times; its previous state restored."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


#: ``statistics.quantiles``'s method: quartiles of the samples themselves (the extremes are 0% and 100%).
QUARTILE_METHOD: Final = "inclusive"


def spread(samples: Sequence[float]) -> dict[str, float]:
    """``median``, ``q1``, ``q3`` (quartiles, inclusive method), ``iqr`` and the extremes of non-empty ``samples``."""
    ordered = sorted(samples)
    if len(ordered) == 1:
        q1 = q3 = ordered[0]
    else:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method=QUARTILE_METHOD)
    return {"median": statistics.median(ordered), "q1": q1, "q3": q3, "iqr": q3 - q1, "min": ordered[0],
            "max": ordered[-1]}


def describe_device(device: torch.device) -> dict[str, Any]:
    """``device`` (``cpu`` or ``cuda:0``), its ``device_name`` (the CPU's model, an accelerator's product name) and,
    on a CPU, the ``threads`` PyTorch's operators use (``torch.get_num_threads()``)."""
    if device.type == "cpu":
        return {"device": "cpu", "device_name": cpu_name(), "threads": torch.get_num_threads()}
    module = getattr(torch, device.type, None)
    get_name = getattr(module, "get_device_name", None)
    name = str(get_name(device)) if callable(get_name) else device.type
    return {"device": str(device), "device_name": name, "threads": None}


@cache
def cpu_name() -> str:
    """This machine's CPU model (``/proc/cpuinfo``'s ``model name`` on Linux), else what ``platform`` knows."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return value.strip()
    return platform.processor() or platform.machine() or "unknown CPU"
