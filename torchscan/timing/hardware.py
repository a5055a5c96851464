"""Devices for a roofline bound: published peaks (`HARDWARE`) and this machine's, measured (`measure_hardware`).

A device is plain data (`Hardware`): dense peak FLOP/s per compute dtype, memory bandwidth in bytes per second,
memory and last-level cache sizes, and where the figures come from. Published figures are the vendors' datasheet
numbers for **dense** math (a datasheet's "with sparsity" figure is twice the dense one and describes 2:4 sparse
matrices only). The peak keys are ``float32`` (the non-tensor-core FP32 rate: what ``torch.matmul`` gets in float32
unless TF32 is allowed), ``tf32`` (float32 matrix products on tensor cores), ``bfloat16``, ``float16`` and
``float8``; a dtype a device has no published figure for is absent, and a bound in it is then a lower bound.

`measure_hardware` measures the device at hand instead: matrix-multiply FLOP/s per dtype, streaming (copy)
bandwidth on buffers well above the last-level cache, and that cache's size, read from the operating system.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Literal, NotRequired, TypedDict

#: The keys of `Hardware.peak_flops`, in table order.
PEAK_KEYS: Final = ("float32", "tf32", "bfloat16", "float16", "float8")

TERA, GIGA = 1e12, 1e9


class Measurement(TypedDict):
    """How `measure_hardware` measured: the matrix size and repeats of the products, the bytes each copy moved (read
    plus written), the torch threads it ran with, and where the cache size came from."""

    matmul_size: int
    repeats: int
    copy_bytes: int
    threads: int
    cache_source: str


class Hardware(TypedDict):
    """One device: dense peak FLOP/s per compute dtype (`PEAK_KEYS`), memory bandwidth (bytes/s), memory and
    last-level cache sizes in bytes (``None``: not published or not found), and the source of the figures (a
    datasheet's name and address, or ``"measured"``)."""

    name: str
    kind: Literal["gpu", "cpu"]
    peak_flops: dict[str, float]
    memory_bandwidth: float
    memory_bytes: int | None
    last_level_cache_bytes: int | None
    source: str
    notes: str
    measurement: NotRequired[Measurement]


def _published(name: str, peaks_tflops: dict[str, float], bandwidth_gbs: float, memory_gb: int, cache_mb: int,
               source: str, notes: str) -> Hardware:
    return {"name": name, "kind": "gpu", "peak_flops": {key: value * TERA for key, value in peaks_tflops.items()},
            "memory_bandwidth": bandwidth_gbs * GIGA, "memory_bytes": memory_gb * 10**9,
            "last_level_cache_bytes": cache_mb * 2**20, "source": source, "notes": notes}


#: Published dense peaks of common accelerators, by name. Each entry names its datasheet.
HARDWARE: Final[dict[str, Hardware]] = {
    "H100 SXM": _published(
        "H100 SXM", {"float32": 67, "tf32": 494.7, "bfloat16": 989.4, "float16": 989.4, "float8": 1978.9},
        3350, 80, 50,
        "NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column), "
        "https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet",
        "tensor-core rates are the datasheet's sparsity figures halved (989 TF32, 1,979 BF16/FP16, 3,958 FP8 "
        "with sparsity); 50 MB L2"),
    "A100 SXM 80GB": _published(
        "A100 SXM 80GB", {"float32": 19.5, "tf32": 156, "bfloat16": 312, "float16": 312},
        2039, 80, 40,
        "NVIDIA A100 Tensor Core GPU datasheet (A100 80GB SXM column), "
        "https://www.nvidia.com/content/dam/en-zz/Solutions/Data-Center/a100/pdf/"
        "nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf",
        "dense figures (the datasheet's starred figures are with sparsity); no FP8; 40 MB L2"),
    "L4": _published(
        "L4", {"float32": 30.3, "tf32": 60, "bfloat16": 121, "float16": 121, "float8": 242.5},
        300, 24, 48,
        "NVIDIA L4 Tensor Core GPU datasheet, https://www.nvidia.com/en-us/data-center/l4/",
        "tensor-core rates are the datasheet's sparsity figures halved (120 TF32, 242 BF16/FP16, 485 FP8); "
        "48 MB L2"),
    "RTX 4090": _published(
        "RTX 4090", {"float32": 82.6, "tf32": 82.6, "bfloat16": 165.2, "float16": 165.2, "float8": 330.3},
        1008, 24, 72,
        "NVIDIA Ada GPU Architecture whitepaper (v2.1), Appendix A, GeForce RTX 4090 column, "
        "https://images.nvidia.com/aem-dam/Solutions/geforce/ada/nvidia-ada-gpu-architecture.pdf",
        "dense tensor rates with FP32 accumulation, what PyTorch's bfloat16/float16 matrix products use (FP16 with "
        "FP16 accumulation is 330.3); 72 MB L2"),
    "MI300X": _published(
        "MI300X", {"float32": 163.4, "tf32": 653.7, "bfloat16": 1307.4, "float16": 1307.4, "float8": 2614.9},
        5300, 192, 256,
        "AMD Instinct MI300X accelerator data sheet, "
        "https://www.amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/"
        "amd-instinct-mi300x-data-sheet.pdf",
        "dense figures (the data sheet lists sparsity figures separately); float32 is the vector (and matrix) "
        "FP32 rate; last-level cache: 256 MB AMD Infinity Cache"),
}


# -- this machine ---------------------------------------------------------------------------------------------------


def measure_hardware(device: Any = "cpu", *, repeats: int = 5) -> Hardware:
    """Measure ``device`` (``"cpu"`` or a CUDA device) on the spot and return it as a `Hardware` entry.

    Matrix-multiply FLOP/s per dtype (float32 always; bfloat16 where the CPU has bfloat16 instructions, and bfloat16
    and float16 on CUDA), the streaming bandwidth of a copy between two buffers at least four times the last-level
    cache (bytes read plus written per second), and the last-level cache size, read from sysfs,
    ``os.sysconf`` or ``lscpu`` (``measurement.cache_source`` says which). Each figure is the best of at least
    ``repeats`` runs and half a second of runs, after a warm-up: a peak, not a typical rate. Takes a few seconds; the torch thread count, grad mode, default dtype and
    random generators are left as they were (inputs are filled, never drawn).
    """
    import torch

    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
    target = torch.device(device)
    if target.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be 'cpu' or a CUDA device, got {device!r}")
    if target.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r}: this machine has no CUDA device")
    with torch.no_grad():
        return _measure_cuda(target, repeats) if target.type == "cuda" else _measure_cpu(target, repeats)


def _measure_cpu(device: Any, repeats: int) -> Hardware:
    import torch

    cache, cache_source = cpu_last_level_cache()
    dtypes = [torch.float32] + ([torch.bfloat16] if _cpu_has_bfloat16() else [])
    size = 1024
    peaks = {_key(dtype): _matmul_rate(dtype, device, size, repeats, _no_sync) for dtype in dtypes}
    copy_bytes, bandwidth = _copy_rate(device, cache, repeats, _no_sync)
    return {"name": f"this machine: {cpu_model()}", "kind": "cpu", "peak_flops": peaks,
            "memory_bandwidth": bandwidth, "memory_bytes": _physical_memory(), "last_level_cache_bytes": cache,
            "source": "measured",
            "notes": f"{torch.get_num_threads()} torch thread(s); float32 and bfloat16 (when the CPU has bfloat16 "
                     "instructions) matrix products; copy bandwidth counts bytes read plus written",
            "measurement": {"matmul_size": size, "repeats": repeats, "copy_bytes": copy_bytes,
                            "threads": torch.get_num_threads(), "cache_source": cache_source}}


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # a platform without these names
        return None


def _measure_cuda(device: Any, repeats: int) -> Hardware:
    import torch

    properties = torch.cuda.get_device_properties(device)
    cache = int(getattr(properties, "L2_cache_size", 0)) or None
    size = 4096
    sync = functools.partial(torch.cuda.synchronize, device)
    peaks = {_key(dtype): _matmul_rate(dtype, device, size, repeats, sync)
             for dtype in (torch.float32, torch.bfloat16, torch.float16)}
    copy_bytes, bandwidth = _copy_rate(device, cache, repeats, sync, minimum=1 << 30)
    return {"name": f"this machine: {properties.name}", "kind": "gpu", "peak_flops": peaks,
            "memory_bandwidth": bandwidth, "memory_bytes": int(properties.total_memory),
            "last_level_cache_bytes": cache, "source": "measured",
            "notes": "float32 (as torch.backends.cuda.matmul.allow_tf32 is set), bfloat16 and float16 matrix "
                     "products; copy bandwidth counts bytes read plus written",
            "measurement": {"matmul_size": size, "repeats": repeats, "copy_bytes": copy_bytes, "threads": 1,
                            "cache_source": "torch.cuda.get_device_properties().L2_cache_size"}}


def _no_sync() -> None:
    """A CPU operation has finished when it returns."""


def _key(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _best_seconds(run: Callable[[], Any], repeats: int, sync: Callable[[], None], at_least: float = 0.5) -> float:
    """The least time of ``run`` over at least ``repeats`` runs and at least ``at_least`` seconds of running (a
    peak is a maximum rate: more tries can only find it, and a busy moment spoils a few runs, not all)."""
    run()  # warm-up: first-use costs (thread pools, kernel selection) are not the device's rate
    sync()
    best, spent, runs = float("inf"), 0.0, 0
    while runs < repeats or (spent < at_least and runs < MOST_RUNS):
        start = time.perf_counter()
        run()
        sync()
        elapsed = time.perf_counter() - start
        best, spent, runs = min(best, elapsed), spent + elapsed, runs + 1
    return best


#: The most runs `_best_seconds` makes to fill its time.
MOST_RUNS = 200


def _matmul_rate(dtype: Any, device: Any, size: int, repeats: int, sync: Callable[[], None]) -> float:
    """FLOP/s of a square ``size`` matrix product (2 * size**3 FLOPs), its best run (`_best_seconds`)."""
    import torch

    a = torch.full((size, size), 0.5, dtype=dtype, device=device)
    b = torch.full((size, size), 0.25, dtype=dtype, device=device)
    out = torch.empty((size, size), dtype=dtype, device=device)
    return 2 * size**3 / _best_seconds(lambda: torch.mm(a, b, out=out), repeats, sync)


def _copy_rate(device: Any, cache: int | None, repeats: int, sync: Callable[[], None],
               minimum: int = 256 << 20) -> tuple[int, float]:
    """Bytes per copy (read plus written) and the best bytes/s of copying a buffer of at least four times the
    last-level cache (and at least ``minimum`` bytes) into another."""
    import torch

    size = max(minimum, 4 * (cache or 0))
    source = torch.ones(size // 4, dtype=torch.float32, device=device)
    target = torch.empty_like(source)
    seconds = _best_seconds(lambda: target.copy_(source), repeats, sync)
    moved = 2 * source.numel() * source.element_size()
    return moved, moved / seconds


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else ``platform.processor()``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _cpu_has_bfloat16() -> bool:
    """Whether the CPU has bfloat16 matrix instructions (AVX-512 BF16 or AMX), from ``/proc/cpuinfo``'s flags;
    without them PyTorch emulates bfloat16 products and a peak would describe the emulation."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return False
    return re.search(r"\b(avx512_bf16|amx_bf16)\b", text) is not None


def cpu_last_level_cache() -> tuple[int | None, str]:
    """The last-level cache's size in bytes and where it was read: sysfs (the highest cache level of cpu0), else
    ``os.sysconf`` (level 3, then 2), else ``lscpu``; ``(None, "not found")`` when none says."""
    found = _sysfs_cache()
    if found is not None:
        return found, "sysfs: /sys/devices/system/cpu/cpu0/cache"
    for level in ("SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE"):
        try:
            size = os.sysconf(level)
        except (ValueError, OSError, AttributeError):
            continue
        if size > 0:
            return size, f"os.sysconf({level})"
    found = _lscpu_cache()
    if found is not None:
        return found, "lscpu"
    return None, "not found"


def _sysfs_cache() -> int | None:
    best: tuple[int, int] | None = None
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            level = int((index / "level").read_text().strip())
            kind = (index / "type").read_text().strip()
            size = parse_size((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
        if kind != "Instruction" and size is not None and (best is None or level > best[0]):
            best = (level, size)
    return None if best is None else best[1]


def _lscpu_cache() -> int | None:
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=5, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    sizes = {}
    for line in text.splitlines():
        match = re.match(r"\s*L(\d)\s*cache:\s*([\d.]+\s*[KMG]i?B?)", line)
        if match:
            size = parse_size(match.group(2))
            if size is not None:
                sizes[int(match.group(1))] = size
    return sizes[max(sizes)] if sizes else None


def parse_size(text: str) -> int | None:
    """Bytes of a cache size as sysfs and lscpu write it: ``"16384K"``, ``"16 MiB"``, ``"512 KiB"``."""
    match = re.fullmatch(r"\s*([\d.]+)\s*([KMG]?)i?B?\s*", text)
    if not match:
        return None
    scale = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[match.group(2)]
    return int(float(match.group(1)) * scale)
