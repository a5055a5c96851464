"""Inputs of one analysis: the arguments that describe them (shapes, dtypes, device), checked, and the generated
tensors. (How a call's values are described in the report is `torchscan.values`.)"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import chain
from typing import Any

import torch
from torch import nn


def _is_shape(value: Any) -> bool:
    return isinstance(value, (tuple, list, torch.Size)) and all(
        isinstance(dim, int) and not isinstance(dim, bool) for dim in value)


def normalize_shapes(input_shape: Any) -> list[tuple[int, ...]]:
    """One shape (a sequence of ints) or a list of shapes, as a list of shapes without the batch dimension.

    An empty list is refused: it reads as "no inputs" as much as "one scalar input", and guessing would analyze a
    call the caller did not describe. A per-sample scalar is the empty tuple ``()`` (or ``[()]``).
    """
    if isinstance(input_shape, list) and not input_shape:
        raise ValueError("input_shape is an empty list: pass at least one shape without the batch dimension, such "
                         "as (3, 224, 224); for a per-sample scalar input pass () (generated as shape (1,)); for a "
                         "model that takes no inputs pass args=()")
    if _is_shape(input_shape):
        shapes = [tuple(input_shape)]
    elif isinstance(input_shape, (list, tuple)) and input_shape and all(_is_shape(s) for s in input_shape):
        shapes = [tuple(s) for s in input_shape]
    else:
        raise TypeError("input_shape must be a shape without the batch dimension, such as (3, 224, 224), or a list "
                        f"of such shapes, got {_describe(input_shape)}")
    for shape in shapes:
        if any(dim < 0 for dim in shape):
            raise ValueError(f"input_shape dimensions must be non-negative, got {shape}")
    return shapes


def resolve_call(model: nn.Module, input_shape: Any, dtype: Any, args: Any, kwargs: Any, device: Any
                 ) -> tuple[tuple, dict[str, Any], str]:
    """The call of an analysis: the caller's own (``"provided"``) or batch-1 inputs generated from ``input_shape``
    (``"generated"``), checked (errors name the argument)."""
    provided = args is not None or kwargs is not None
    if provided and input_shape is not None:
        raise ValueError("input_shape and args/kwargs are mutually exclusive: pass generated shapes or the complete "
                         "call, not both")
    if provided and (dtype is not None or device is not None):
        raise ValueError("dtype and device only configure generated inputs; with args/kwargs, create the tensors "
                         "with the dtype and device you want")
    if provided:
        return *_provided_call(args, kwargs), "provided"
    if input_shape is None:
        raise TypeError("crawl_module needs input_shape (shapes without the batch dimension) or the complete call "
                        "as args/kwargs")
    shapes = normalize_shapes(input_shape)
    inferred_device, inferred_dtype = infer_device_and_dtype(model)
    dtypes = normalize_dtypes(dtype, len(shapes), inferred_dtype)
    target = normalize_device(device) or inferred_device
    return generate_inputs(shapes, dtypes, target), {}, "generated"


def _provided_call(args: Any, kwargs: Any) -> tuple[tuple, dict[str, Any]]:
    """The caller's own call, checked: a tuple (or list) of positional arguments and a mapping of keywords."""
    if args is not None and not isinstance(args, (tuple, list)):
        raise TypeError(f"args must be a tuple of positional arguments, got {type(args).__name__}")
    if kwargs is not None and not (isinstance(kwargs, Mapping) and all(isinstance(k, str) for k in kwargs)):
        raise TypeError(f"kwargs must be a mapping of argument names to values, got {type(kwargs).__name__}")
    return tuple(args or ()), dict(kwargs or {})


def normalize_dtypes(dtype: Any, count: int, default: torch.dtype) -> list[torch.dtype]:
    """One dtype for every generated input, or an iterable with exactly one dtype per shape."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return [default if dtype is None else dtype] * count
    if isinstance(dtype, (str, bytes)) or not isinstance(dtype, Iterable):
        raise TypeError(f"dtype must be a torch.dtype or an iterable of torch.dtype, got {_describe(dtype)}")
    dtypes = list(dtype)
    if not all(isinstance(item, torch.dtype) for item in dtypes):
        raise TypeError(f"dtype must contain only torch.dtype values, got {[_describe(d) for d in dtypes]}")
    if len(dtypes) != count:
        raise ValueError(f"dtype has {len(dtypes)} entries but input_shape has {count} shapes; lengths must match")
    return dtypes


def normalize_device(device: Any) -> torch.device | None:
    """``device`` as a ``torch.device`` this torch can use, or ``None`` when not given.

    Refused with a ``ValueError`` naming the argument: a value that is not a device, and a device this torch
    build or machine does not have (``"cuda"`` on a CPU-only torch), which torch itself would only report later
    as a bare ``AssertionError`` from inside the model's forward.
    """
    if device is None:
        return None
    try:
        target = torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"device must be a torch.device or a device string such as 'cpu', 'cuda:0' or 'meta', "
                         f"got {_describe(device)}") from error
    require_available(target)
    return target


def require_available(device: torch.device, argument: str = "device") -> None:
    """Raise ``ValueError`` naming ``argument`` when ``device``'s backend reports it unavailable on this machine.

    Backends with an ``is_available()``/``device_count()`` pair in ``torch`` (CUDA, MPS, XPU) are checked without
    allocating anything; other device types (``cpu``, ``meta``, out-of-tree backends) are accepted as given.
    """
    backend = getattr(torch, device.type, None) if device.type not in ("cpu", "meta") else None
    is_available = getattr(backend, "is_available", None)
    if not callable(is_available):
        return
    if not is_available():
        raise ValueError(f"{argument}={str(device)!r} is not available: this torch ({torch.__version__}) reports no "
                         f"{device.type} device (torch.{device.type}.is_available() is False)")
    count = getattr(backend, "device_count", None)
    if device.index is not None and callable(count) and device.index >= count():
        raise ValueError(f"{argument}={str(device)!r} is not available: this machine has {count()} {device.type} "
                         f"device(s), numbered from 0")


def infer_device_and_dtype(model: nn.Module) -> tuple[torch.device, torch.dtype]:
    """The first parameter's device and dtype, then the first buffer's, then CPU and float32."""
    first = next(chain(model.parameters(), model.buffers()), None)
    return (torch.device("cpu"), torch.float32) if first is None else (first.device, first.dtype)


def generate_inputs(shapes: list[tuple[int, ...]], dtypes: list[torch.dtype], device: torch.device
                    ) -> tuple[torch.Tensor, ...]:
    """Batch-1 inputs; floats from a private generator so the global random state never advances."""
    return tuple(_generate(shape, dtype, device) for shape, dtype in zip(shapes, dtypes, strict=True))


def _generate(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    full_shape = (1, *shape)
    if device.type == "meta":
        return torch.empty(full_shape, dtype=dtype, device=device)
    if dtype == torch.bool:
        return torch.ones(full_shape, dtype=dtype, device=device)
    if not (dtype.is_floating_point or dtype.is_complex):
        return torch.zeros(full_shape, dtype=dtype, device=device)
    generator = torch.Generator(device="cpu").manual_seed(0)
    values = torch.rand(full_shape, generator=generator, dtype=dtype if dtype.itemsize >= 4 else torch.float32)
    return values.to(device=device, dtype=dtype)


def _describe(value: Any) -> str:
    """A short description for error messages: the type, plus the value for small literals."""
    if isinstance(value, (int, float, str, tuple, list)) and len(repr(value)) <= 60:
        return f"{type(value).__name__} {value!r}"
    return type(value).__name__
