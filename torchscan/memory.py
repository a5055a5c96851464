"""``measure_peak_memory``: the peak memory of an owner-controlled workload on one device."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def measure_peak_memory(workload: Callable[[], Any], *, device: torch.device | str) -> dict[str, Any]:
    """Run ``workload()`` once and report the peak bytes allocated on ``device`` above the starting level.

    CPU uses the profiler's memory records (allocations and frees in order); CUDA uses the caching allocator's
    peak statistics. Other devices raise ``ValueError``: no number is better than a wrong one.
    """
    if not callable(workload):
        raise TypeError(f"workload must be a callable taking no arguments, got {type(workload).__name__}")
    try:
        target = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"device must be 'cpu' or a CUDA device, got {device!r}") from error
    if target.type == "cpu":
        peak = _cpu_peak(workload)
        method = "profiler_memory_records"
    elif target.type == "cuda":
        peak = _cuda_peak(workload, target)
        method = "cuda_allocator_peak"
    else:
        raise ValueError(f"measure_peak_memory supports 'cpu' and 'cuda' devices, got {target.type!r}")
    return {"device": str(target), "peak_bytes": peak, "unit": "bytes", "method": method}


def _cpu_peak(workload: Callable[[], Any]) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        workload()
    events = sorted((event for event in prof.events() if event.self_cpu_memory_usage != 0),
                    key=lambda event: event.time_range.start)
    level = peak = 0
    for event in events:
        level += event.self_cpu_memory_usage
        peak = max(peak, level)
    return int(peak)


def _cuda_peak(workload: Callable[[], Any], device: torch.device) -> int:
    torch.cuda.synchronize(device)
    start = torch.cuda.memory_allocated(device)
    torch.cuda.reset_peak_memory_stats(device)
    workload()
    torch.cuda.synchronize(device)
    return int(torch.cuda.max_memory_allocated(device) - start)
