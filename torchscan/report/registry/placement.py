"""Where a run may execute: its ``device`` and ``memory`` requests, as the registry states them and as Dask sees them.

A ``device = "cuda"`` run, or an ``as_device = "cuda"`` one (stand-ins choose a GPU's kernels only where one is
usable), asks a cluster for the ``GPU`` resource (workers started with ``--resources GPU=1``), and fails in stage
``build`` anywhere without CUDA. ``memory = "16GB"`` becomes the ``MEMORY`` resource (in bytes); a local build
ignores it. This module imports neither torch nor Dask: the registry validates with it.
"""

from __future__ import annotations

import re
from typing import Any

DEVICES = ("cpu", "meta", "cuda")
GPU_RESOURCE = "GPU"
MEMORY_RESOURCE = "MEMORY"
MEMORY_HELP = 'a size such as "16GB", "512MiB" or "2.5 TB" (B, kB/KB, MB, GB, TB or KiB, MiB, GiB, TiB)'

_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"^\s*(?P<number>\d+(\.\d+)?)\s*(?P<unit>[A-Za-z]+)\s*$")


def parse_memory(value: Any) -> int:
    """Bytes of a size written like ``"16GB"``; raises ValueError naming the accepted forms."""
    match = _SIZE.match(value) if isinstance(value, str) else None
    unit = _UNITS.get(match.group("unit").lower()) if match else None
    if match is None or unit is None:
        shown = f'"{value}"' if isinstance(value, str) else type(value).__name__
        raise ValueError(f"expected {MEMORY_HELP}, got {shown}")
    size = int(float(match.group("number")) * unit)
    if size <= 0:
        raise ValueError(f"expected a positive size, got \"{value}\"")
    return size


def dask_resources(job: dict[str, Any]) -> dict[str, float]:
    """The Dask resources one run asks for (empty for a CPU run without a memory request)."""
    resources: dict[str, float] = {}
    if job["device"] == "cuda" or job.get("as_device") == "cuda":  # stand-ins of a GPU need one to choose kernels
        resources[GPU_RESOURCE] = 1
    if job.get("memory"):
        resources[MEMORY_RESOURCE] = job["memory"]
    return resources


def require_device(device: str) -> None:
    """Fail before building the model when its device cannot exist here (called inside the run's process)."""
    if device != "cuda":
        return
    import torch

    if torch.version.cuda is None:
        raise RuntimeError(f'device = "cuda", but this torch build ({torch.__version__}) has no CUDA support; run '
                           "the entry on a machine or Dask worker with a CUDA build of torch and a GPU")
    if not torch.cuda.is_available():
        raise RuntimeError('device = "cuda", but no CUDA device is visible to this process; run the entry on a '
                           "machine or Dask worker with a GPU (workers started with --resources GPU=1)")
