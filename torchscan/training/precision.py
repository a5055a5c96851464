"""Mixed precision in a training step: the caller's autocast region, PyTorch's recipe for it, and the precision
policy the report states.

Called inside ``torch.autocast(...)``, a step follows PyTorch's automatic mixed precision recipe: the forward and
the loss run under autocast, the backward and the optimizer step outside it, and autocast's cache of low-precision
weight copies is cleared where a loop's ``with torch.autocast(...)`` block would end, after the loss (the copies
autograd saved for the backward live on until the backward frees them). Without autocast, a model whose
parameters are all bfloat16 or float16 trains in pure low precision; both are stated in ``training.precision``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch

from ..memory.timeline import MemoryTimeline
from ..memory.training_step import WEIGHT_COPIES
from ..values import dtype_name

#: The device types whose autocast state a step reads (those this torch build can enable autocast for).
AUTOCAST_DEVICE_TYPES = ("cpu", "cuda")
_TO_COPY = torch.ops.aten._to_copy.default

Autocast = tuple[tuple[str, torch.dtype], ...]  # (device type, dtype) of every enabled autocast region


def caller_autocast() -> Autocast:
    """The autocast regions enabled where the analysis was called, with their dtypes."""
    return tuple((device_type, torch.get_autocast_dtype(device_type)) for device_type in AUTOCAST_DEVICE_TYPES
                 if torch.is_autocast_enabled(device_type))


@contextmanager
def outside_autocast(regions: Autocast) -> Iterator[None]:
    """The backward and the optimizer step, outside the caller's autocast (as in PyTorch's recipe)."""
    with ExitStack() as stack:
        for device_type, _ in regions:
            stack.enter_context(torch.autocast(device_type, enabled=False))
        yield


def end_forward_region(regions: Autocast) -> None:
    """Where a loop's autocast block ends: autocast drops its cached weight copies."""
    if regions:
        torch.clear_autocast_cache()


class WeightCopies:
    """Labels autocast's cached weight copies on a memory timeline: the casts of leaf tensors that require grad
    (autocast caches exactly those), listened to through the forward and the loss."""

    def __init__(self, timeline: MemoryTimeline) -> None:
        self.timeline = timeline

    def record(self, func: Any, args: tuple, kwargs: dict[str, Any], out: Any) -> None:
        if func is _TO_COPY and isinstance(out, torch.Tensor):
            source = args[0]
            if isinstance(source, torch.Tensor) and source.is_leaf and source.requires_grad:
                self.timeline.label(out, WEIGHT_COPIES)


def precision_section(regions: Autocast, parameters: Iterable[torch.Tensor], gradients: Iterable[torch.Tensor],
                      optimizer_state: Iterable[torch.Tensor]) -> dict[str, Any]:
    """The training section's ``precision``: the policy seen and the dtypes of the trainable parameters, their
    gradients, the optimizer's state (its scalar step counters left out) and the compute."""
    parameter_dtypes = _floating_dtypes(parameters)
    if regions:
        policy = "autocast"
    elif len(parameter_dtypes) > 1:
        policy = "mixed_parameters"
    elif parameter_dtypes and parameter_dtypes[0] in ("bfloat16", "float16"):
        policy = "pure_low_precision"
    else:
        policy = "uniform"
    return {
        "policy": policy,
        "autocast": [{"device_type": device_type, "dtype": dtype_name(dtype)} for device_type, dtype in regions],
        "parameters": parameter_dtypes,
        "gradients": _floating_dtypes(gradients),
        "optimizer_state": _floating_dtypes(tensor for tensor in optimizer_state if tensor.dim() > 0),
        "compute": sorted({dtype_name(dtype) for _, dtype in regions}) if regions else list(parameter_dtypes),
    }


def _floating_dtypes(tensors: Iterable[torch.Tensor]) -> list[str]:
    return sorted({dtype_name(tensor.dtype) for tensor in tensors if tensor.is_floating_point()})
