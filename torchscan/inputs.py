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


_SCALAR_TYPES = frozenset({bool, int, float, complex, str, bytes})
_SCALAR_NAMES = {kind: {"kind": "scalar", "type": kind.__name__} for kind in _SCALAR_TYPES}


def value_metadata(value: Any, _enclosing: tuple[int, ...] = ()) -> dict[str, Any]:
    """Recursive, value-free description of an argument or output.

    A container that holds itself (directly or deeper) is described once and then marked ``recursive``; nesting
    beyond ``MAX_DEPTH`` levels is marked ``truncated``, so no input can make the hooks fail. It runs twice per
    layer call (inputs and output), so exact built-in types take the shortest path.
    """
    kind = type(value)
    if kind is torch.Tensor or kind is nn.Parameter or isinstance(value, torch.Tensor):
        return tensor_metadata(value)
    if kind is tuple or kind is list:
        return _container_metadata(value, kind.__name__, _enclosing)
    if value is None:
        return {"kind": "none"}
    scalar = _SCALAR_NAMES.get(kind)
    if scalar is not None:
        return dict(scalar)
    return _other_metadata(value, kind, _enclosing)


def _other_metadata(value: Any, kind: type, _enclosing: tuple[int, ...]) -> dict[str, Any]:
    """Subclasses of scalars and containers, mappings, and any other object (by its type name only)."""
    if isinstance(value, (bool, int, float, complex, str, bytes)):
        return {"kind": "scalar", "type": kind.__name__}
    if not isinstance(value, (tuple, list, Mapping)):
        return {"kind": "object", "type": _type_name(value)}
    if isinstance(value, tuple) and hasattr(kind, "_fields"):
        return _container_metadata(value, "namedtuple", _enclosing)
    return _container_metadata(value, "sequence" if isinstance(value, (tuple, list)) else "mapping", _enclosing)


def _container_metadata(value: Any, kind: str, _enclosing: tuple[int, ...]) -> dict[str, Any]:
    """A tuple, list, other sequence, namedtuple or mapping: its items, unless it encloses itself or nests too deep."""
    if id(value) in _enclosing:
        return {"kind": "recursive", "type": _type_name(value)}
    if len(_enclosing) >= MAX_DEPTH:
        return {"kind": "truncated", "type": _type_name(value)}
    inner = (*_enclosing, id(value))
    if kind == "namedtuple":
        return {"kind": kind, "type": type(value).__qualname__,
                "items": [{"key": name, "value": value_metadata(item, inner)}
                          for name, item in zip(value._fields, value)]}
    if kind == "mapping":
        return {"kind": kind, "items": [{"key": _safe_key(key), "value": value_metadata(item, inner)}
                                        for key, item in value.items()]}
    return {"kind": kind, "items": [value_metadata(item, inner) for item in value]}


_DTYPE_NAMES: dict[torch.dtype, str] = {}


def dtype_name(dtype: torch.dtype) -> str:
    """``float32`` for ``torch.float32`` (cached: it runs for every tensor described)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def tensor_metadata(tensor: torch.Tensor) -> dict[str, Any]:
    if type(tensor) in PLAIN_TENSORS and tensor.is_cpu and not tensor.is_nested:  # the common case, kept cheap
        dtype = tensor.dtype
        return {"kind": "tensor", "shape": list(tensor.shape), "dtype": _DTYPE_NAMES.get(dtype) or dtype_name(dtype),
                "device": "cpu", "requires_grad": tensor.requires_grad}
    if tensor.is_nested:  # a nested tensor has no single shape: record its rank and number of components
        return {"kind": "nested_tensor", "dim": tensor.dim(), "components": tensor.size(0),
                "dtype": dtype_name(tensor.dtype), "device": device_type(tensor),
                "requires_grad": bool(tensor.requires_grad)}
    return {"kind": "tensor", "shape": list(tensor.shape), "dtype": dtype_name(tensor.dtype),
            "device": device_type(tensor), "requires_grad": bool(tensor.requires_grad)}


#: The exact types of plain tensors (subclasses may override attributes such as ``device``).
PLAIN_TENSORS = (torch.Tensor, nn.Parameter)
#: Whether every type of an iterable is a plain tensor type (a C-level frozenset test, for tuples of values).
only_plain_tensor_types = frozenset(PLAIN_TENSORS).issuperset


def device_type(tensor: torch.Tensor) -> str:
    """``tensor.device.type``; for plain tensors from the ``is_cpu``/``is_meta`` flags, as ``tensor.device`` builds
    a new ``torch.device`` on every access (subclasses may override ``device``, so they are asked)."""
    if type(tensor) in PLAIN_TENSORS:
        if tensor.is_cpu:
            return "cpu"
        if tensor.is_meta:
            return "meta"
    return tensor.device.type


def call_metadata(args: tuple, kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The metadata of a call's positional and keyword arguments (a loop: it runs for every layer call, and a
    comprehension is one more function call)."""
    described = []
    for arg in args:
        described.append(value_metadata(arg))
    return {"args": described,
            "kwargs": [{"key": _safe_key(key), "value": value_metadata(item)} for key, item in kwargs.items()]
            if kwargs else []}


def positional_metadata(args: tuple) -> dict[str, Any]:
    """``call_metadata(args, {})``, as every layer call's pre-hook describes its input: a single plain tensor (the
    common call) takes the shortest path."""
    if len(args) == 1 and type(args[0]) in PLAIN_TENSORS:
        return {"args": [tensor_metadata(args[0])], "kwargs": []}
    return call_metadata(args, {})


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
