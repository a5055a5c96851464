"""Inputs of one analysis: generated tensors, device/dtype inference, and recursive value metadata.

Metadata describes structure, never values: tensors give shape, dtype, device and gradient requirement; scalars
give their type only; mapping keys are kept only when they are identifiers (a file path is not).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch import nn


def _is_shape(value: Any) -> bool:
    return isinstance(value, (tuple, list, torch.Size)) and all(
        isinstance(dim, int) and not isinstance(dim, bool) for dim in value)


def normalize_shapes(input_shape: Any) -> list[tuple[int, ...]]:
    """One shape (a sequence of ints) or a list of shapes, as a list of shapes without the batch dimension."""
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


def normalize_dtypes(dtype: Any, count: int, default: torch.dtype) -> list[torch.dtype]:
    """One dtype for every generated input, or an iterable with exactly one dtype per shape."""
    if dtype is None:
        return [default] * count
    if isinstance(dtype, torch.dtype):
        return [dtype] * count
    if isinstance(dtype, (str, bytes)) or not isinstance(dtype, Iterable):
        raise TypeError(f"dtype must be a torch.dtype or an iterable of torch.dtype, got {_describe(dtype)}")
    dtypes = list(dtype)
    if not all(isinstance(item, torch.dtype) for item in dtypes):
        raise TypeError(f"dtype must contain only torch.dtype values, got {[_describe(d) for d in dtypes]}")
    if len(dtypes) != count:
        raise ValueError(f"dtype has {len(dtypes)} entries but input_shape has {count} shapes; lengths must match")
    return dtypes


def normalize_device(device: Any) -> torch.device | None:
    if device is None:
        return None
    try:
        return torch.device(device)
    except (RuntimeError, TypeError) as error:
        raise ValueError(f"device must be a torch.device or a device string such as 'cpu', 'cuda:0' or 'meta', "
                         f"got {_describe(device)}") from error


def infer_device_and_dtype(model: nn.Module) -> tuple[torch.device, torch.dtype]:
    """The first parameter's device and dtype, then the first buffer's, then CPU and float32."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device, tensor.dtype
    return torch.device("cpu"), torch.float32


def generate_inputs(shapes: list[tuple[int, ...]], dtypes: list[torch.dtype], device: torch.device
                    ) -> tuple[torch.Tensor, ...]:
    """Batch-1 inputs; floats from a private generator so the global random state never advances."""
    return tuple(_generate(shape, dtype, device) for shape, dtype in zip(shapes, dtypes))


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


MAX_DEPTH = 32


def value_metadata(value: Any, _enclosing: tuple[int, ...] = ()) -> dict[str, Any]:
    """Recursive, value-free description of an argument or output.

    A container that holds itself (directly or deeper) is described once and then marked ``recursive``; nesting
    beyond ``MAX_DEPTH`` levels is marked ``truncated``, so no input can make the hooks fail.
    """
    if isinstance(value, torch.Tensor):
        return tensor_metadata(value)
    if value is None:
        return {"kind": "none"}
    if isinstance(value, (bool, int, float, complex, str, bytes)):
        return {"kind": "scalar", "type": type(value).__name__}
    if not isinstance(value, (tuple, list, Mapping)):
        return {"kind": "object", "type": _type_name(value)}
    if id(value) in _enclosing:
        return {"kind": "recursive", "type": _type_name(value)}
    if len(_enclosing) >= MAX_DEPTH:
        return {"kind": "truncated", "type": _type_name(value)}
    inner = (*_enclosing, id(value))
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):
        return {"kind": "namedtuple", "type": type(value).__qualname__,
                "items": [{"key": name, "value": value_metadata(item, inner)}
                          for name, item in zip(value._fields, value)]}
    if isinstance(value, (tuple, list)):
        return {"kind": type(value).__name__ if type(value) in (tuple, list) else "sequence",
                "items": [value_metadata(item, inner) for item in value]}
    return {"kind": "mapping", "items": [{"key": _safe_key(key), "value": value_metadata(item, inner)}
                                         for key, item in value.items()]}


def tensor_metadata(tensor: torch.Tensor) -> dict[str, Any]:
    if tensor.is_nested:  # a nested tensor has no single shape: record its rank and number of components
        return {"kind": "nested_tensor", "dim": tensor.dim(), "components": tensor.size(0),
                "dtype": str(tensor.dtype).removeprefix("torch."), "device": tensor.device.type,
                "requires_grad": bool(tensor.requires_grad)}
    return {"kind": "tensor", "shape": list(tensor.shape), "dtype": str(tensor.dtype).removeprefix("torch."),
            "device": tensor.device.type, "requires_grad": bool(tensor.requires_grad)}


def call_metadata(args: tuple, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    return {"args": [value_metadata(arg) for arg in args],
            "kwargs": [{"key": _safe_key(key), "value": value_metadata(item)} for key, item in kwargs.items()]}


FAILED_OUTPUT = {"kind": "failed"}


def _safe_key(key: Any) -> str | None:
    """Identifier keys are structure; anything else (a path, a sentence) could be data and is withheld."""
    return key if isinstance(key, str) and key.isidentifier() else None


def _type_name(value: Any) -> str:
    kind = type(value)
    name = kind.__qualname__
    return name if name.replace(".", "").replace("_", "").isalnum() else "object"


def _describe(value: Any) -> str:
    """A short description for error messages: the type, plus the value for small literals."""
    if isinstance(value, (int, float, str, tuple, list)) and len(repr(value)) <= 60:
        return f"{type(value).__name__} {value!r}"
    return type(value).__name__
