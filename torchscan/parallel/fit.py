"""``fit_devices``: the per-device peak of a sharded training step at each of several world sizes, and the smallest
world size whose devices hold it.

Each world size is one `torchscan.parallel.step.sharded_step` of the same plan (PyTorch's FSDP2 over a fake process
group of that size, on fake-tensor stand-ins); the steady-state per-device peak is compared with the device's
memory less a stated headroom (allocator caching and fragmentation, the communication library's buffers and the
CUDA context are not traced: the headroom is where they go).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
from torch import nn

from ..calls.inputs import resolve_call
from .plan import parse_plan
from .step import sharded_step

#: Byte units a device memory may be written in: powers of 1000 and of 1024.
BYTE_UNITS = {"B": 1, "kB": 10**3, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
              "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]+)\s*$")


def fit_devices(model: nn.Module, input_shape: Any = None, dtype: Any = None, *, args: tuple | list | None = None,
                kwargs: Mapping[str, Any] | None = None, device: torch.device | str | None = None,
                loss: Callable[[Any], torch.Tensor] | None = None,
                optimizer: str | Callable[[list[torch.Tensor]], torch.optim.Optimizer] = "adamw",
                parallel: Mapping[str, Any], world_sizes: Iterable[int], device_memory: int | str = "80GB",
                headroom: float = 0.1) -> dict[str, Any]:
    """The steady-state per-device peak of ``model``'s training step under ``parallel`` at each of ``world_sizes``,
    and the smallest world size that fits ``device_memory`` with ``headroom`` left free.

    The call (``input_shape``/``dtype`` or ``args``/``kwargs``, on ``device``) is one device's batch, as in
    `torchscan.crawl_training_step`; ``parallel`` is a plan (its ``world_size`` is replaced by each of
    ``world_sizes``); ``device_memory`` is bytes (an int) or a size such as ``"80GB"`` or ``"80GiB"``; ``headroom``
    is the fraction of it kept free (0.1: a peak fits in 90%). Returns ``points`` (one ``{"world_size",
    "per_device_peak", "at_peak", "phase_at_peak"}`` each: the peak a MetricResult in bytes, what is live at it by
    category as in ``per_device.at_peak``, the phase it is reached in), ``smallest_world_size`` (None, with a ``reason``,
    when no world size given fits), ``device_memory`` and ``usable`` in bytes, and ``headroom``.
    """
    sizes = _world_sizes(world_sizes)
    capacity = device_bytes(device_memory)
    _check_headroom(headroom)
    spec = dict(parallel) if isinstance(parallel, Mapping) else parallel
    parse_plan({**spec, "world_size": sizes[0]})  # the plan's errors before anything runs
    call_args, call_kwargs, _ = resolve_call(model, input_shape, dtype, args, kwargs, device)
    sections = {size: sharded_step(model, call_args, call_kwargs, loss, optimizer, {**spec, "world_size": size})
                for size in sizes}
    return fit_summary(sections, capacity, headroom)


def fit_summary(sections: Mapping[int, Mapping[str, Any]], device_memory: int | str, headroom: float = 0.1
                ) -> dict[str, Any]:
    """`fit_devices`'s result from sharded steps already run: ``sections`` maps each world size to its
    ``training.parallel`` section (`torchscan.parallel.step.sharded_step`). A registry build uses it to size the
    other world sizes beside the declared one, which its training step has already analyzed."""
    capacity = device_bytes(device_memory)
    _check_headroom(headroom)
    usable = int(capacity * (1 - headroom))
    points = [fit_point(size, sections[size]) for size in sorted(sections)]
    fitting = [point["world_size"] for point in points if _fits(point["per_device_peak"], usable)]
    return {
        "points": points,
        "smallest_world_size": min(fitting) if fitting else None,
        "reason": None if fitting else _none_fits(points, usable),
        "device_memory": capacity,
        "headroom": headroom,
        "usable": usable,
    }


def fit_point(world_size: int, section: Mapping[str, Any]) -> dict[str, Any]:
    """One world size's point: the steady-state per-device peak, what is live at it by category, and the phase it
    is reached in (the chart of a model page stacks the categories against the world size)."""
    device = section["per_device"]
    return {"world_size": world_size, "per_device_peak": dict(device["peak"]),
            "at_peak": {name: dict(result) for name, result in device["at_peak"].items()},
            "phase_at_peak": device["phase_at_peak"]}


def _check_headroom(headroom: Any) -> None:
    if isinstance(headroom, bool) or not (isinstance(headroom, (int, float)) and 0 <= headroom < 1):
        raise ValueError(f"headroom must be a fraction in [0, 1), got {headroom!r}")


def device_bytes(value: int | str) -> int:
    """``device_memory`` in bytes: an int, or a number and a unit (``"80GB"``, ``"80 GiB"``, ``"141GB"``)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"device_memory must be bytes (an int) or a size such as '80GB', got {type(value).__name__}")
    if isinstance(value, int):
        number: float = value
    else:
        match = _SIZE.match(value)
        if match is None or match.group(2) not in BYTE_UNITS:
            raise ValueError(f"device_memory must be a size such as '80GB' or '80GiB' (units: {', '.join(BYTE_UNITS)}),"
                             f" got {value!r}")
        number = float(match.group(1)) * BYTE_UNITS[match.group(2)]
    if number <= 0:
        raise ValueError(f"device_memory must be more than 0 bytes, got {value!r}")
    return int(number)


def _world_sizes(world_sizes: Any) -> list[int]:
    try:
        sizes = list(world_sizes)
    except TypeError:
        raise TypeError(f"world_sizes must be a list of ints >= 1, got {type(world_sizes).__name__}") from None
    if not sizes or not all(isinstance(size, int) and not isinstance(size, bool) and size >= 1 for size in sizes):
        raise ValueError(f"world_sizes must be a non-empty list of ints >= 1, got {world_sizes!r}")
    return sorted(set(sizes))


def _fits(peak: Mapping[str, Any], usable: int) -> bool:
    """A complete peak at most ``usable``; a lower bound never proves a fit."""
    return peak["status"] == "complete" and peak["value"] <= usable


def _none_fits(points: list[dict[str, Any]], usable: int) -> str:
    largest = points[-1]
    peak = largest["per_device_peak"]
    if peak["status"] != "complete":
        return (f"the per-device peak at world size {largest['world_size']} is {peak['status']}: a fit cannot be "
                "shown")
    return (f"even at world size {largest['world_size']} one device holds {peak['value']:,} bytes at its peak, above "
            f"the {usable:,} usable bytes")
