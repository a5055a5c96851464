"""Call values: what the values that module and operator calls take and return are, and the three walks over them.

A call value is a tensor, a *plain value* (``None``, a bool, int, float, complex, str or bytes, a dtype, device,
layout or memory format), a container of call values (tuple, list, named tuple, mapping), or any other object.
The type sets below are the vocabulary; every part of TorchScan that looks inside call values walks them here:

* `describe` (and `call_metadata`): the report's metadata of a value, its structure and never its contents;
* `call_key`: a hashable key of everything a shape-reading formula can see in a call (tensor shapes and dtypes,
  plain values by type and value, containers item by item), with which storage each tensor shares when asked;
  the operator cache and the estimate memo price once per key;
* `operand_dtypes`: the dtypes of the tensors among a call's operands, for the formulas' arithmetic kind.

The walks test exact types first (a set lookup) and fall back to ``isinstance`` only for subclasses: they run for
every layer call and every dispatched operator.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any

import torch
from torch import nn

#: The exact types of plain tensors (subclasses may override attributes such as ``device``).
PLAIN_TENSORS = (torch.Tensor, nn.Parameter)
TENSOR_TYPES = frozenset(PLAIN_TENSORS)
#: Scalars a report describes by type (never by value).
SCALAR_TYPES = (bool, int, float, complex, str, bytes)
#: Values that a formula reads by type and value: scalars, ``None`` and PyTorch's enumerations.
PLAIN_TYPES = frozenset({*SCALAR_TYPES, type(None), torch.dtype, torch.device, torch.layout, torch.memory_format})
#: Whether every type of an iterable is a plain value type (a C-level frozenset test).
only_plain_value_types = PLAIN_TYPES.issuperset
#: Nesting beyond this many levels is described as ``truncated``, so that no value can make the hooks fail.
MAX_DEPTH = 32
FAILED_OUTPUT = {"kind": "failed"}


# -- description ---------------------------------------------------------------------------------------------------


def describe(value: Any, _enclosing: tuple[int, ...] = ()) -> dict[str, Any]:
    """Recursive, value-free description of an argument or output (a new dict every time).

    A container that holds itself (directly or deeper) is described once and then marked ``recursive``; nesting
    beyond ``MAX_DEPTH`` levels is marked ``truncated``.
    """
    kind = type(value)
    if kind in TENSOR_TYPES or isinstance(value, torch.Tensor):
        return describe_tensor(value)
    if kind is tuple or kind is list:
        return _describe_container(value, kind.__name__, _enclosing)
    if value is None:
        return {"kind": "none"}
    if isinstance(value, SCALAR_TYPES):
        return {"kind": "scalar", "type": kind.__name__}
    if not isinstance(value, (tuple, list, Mapping)):
        return {"kind": "object", "type": _type_name(value)}
    if isinstance(value, tuple) and hasattr(kind, "_fields"):
        return _describe_container(value, "namedtuple", _enclosing)
    return _describe_container(value, "sequence" if isinstance(value, (tuple, list)) else "mapping", _enclosing)


def _describe_container(value: Any, kind: str, _enclosing: tuple[int, ...]) -> dict[str, Any]:
    """A tuple, list, other sequence, namedtuple or mapping: its items, unless it encloses itself or nests too deep."""
    if id(value) in _enclosing:
        return {"kind": "recursive", "type": _type_name(value)}
    if len(_enclosing) >= MAX_DEPTH:
        return {"kind": "truncated", "type": _type_name(value)}
    inner = (*_enclosing, id(value))
    if kind == "namedtuple":
        return {"kind": kind, "type": type(value).__qualname__,
                "items": [{"key": name, "value": describe(item, inner)}
                          for name, item in zip(value._fields, value, strict=False)]}
    if kind == "mapping":
        return {"kind": kind, "items": [{"key": safe_key(key), "value": describe(item, inner)}
                                        for key, item in value.items()]}
    return {"kind": kind, "items": [describe(item, inner) for item in value]}


def describe_tensor(tensor: torch.Tensor) -> dict[str, Any]:
    """Shape, dtype, device type and gradient requirement; a nested tensor's rank and number of components."""
    if tensor.is_nested:  # no single shape
        return {"kind": "nested_tensor", "dim": tensor.dim(), "components": tensor.size(0),
                "dtype": dtype_name(tensor.dtype), "device": device_type(tensor),
                "requires_grad": bool(tensor.requires_grad)}
    dtype = tensor.dtype
    return {"kind": "tensor", "shape": list(tensor.shape), "dtype": _DTYPE_NAMES.get(dtype) or dtype_name(dtype),
            "device": device_type(tensor), "requires_grad": bool(tensor.requires_grad)}


def call_metadata(args: Iterable[Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The descriptions of a call's positional and keyword arguments."""
    return {"args": [describe(arg) for arg in args],
            "kwargs": [{"key": safe_key(key), "value": describe(item)} for key, item in kwargs.items()] if kwargs else []}


_DTYPE_NAMES: dict[torch.dtype, str] = {}


def dtype_name(dtype: torch.dtype) -> str:
    """``float32`` for ``torch.float32`` (cached: it runs for every tensor described)."""
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).removeprefix("torch.")
    return name


def device_type(tensor: torch.Tensor) -> str:
    """``tensor.device.type``; for plain tensors from the ``is_cpu``/``is_meta`` flags, as ``tensor.device`` builds
    a new ``torch.device`` on every access (subclasses may override ``device``, so they are asked)."""
    if type(tensor) in TENSOR_TYPES:
        if tensor.is_cpu:
            return "cpu"
        if tensor.is_meta:
            return "meta"
    return tensor.device.type


def safe_key(key: Any) -> str | None:
    """Identifier keys are structure; anything else (a path, a sentence) could be data and is withheld."""
    return key if isinstance(key, str) and key.isidentifier() else None


def _type_name(value: Any) -> str:
    name = type(value).__qualname__
    return name if name.replace(".", "").replace("_", "").isalnum() else "object"


# -- keys ----------------------------------------------------------------------------------------------------------


class Unkeyable(Exception):
    """A value whose influence on a formula no key can capture (an object, a nested tensor): never memoized."""


def call_key(values: Iterable[Any], storages: dict[int, int] | None = None, *, tensors: bool = True) -> list[Any]:
    """The key of a call's values, flat: each value adds a run (a plain tensor: its shape and dtype; a plain value:
    its type and value; a list or tuple of plain values: its type, their types, their values) or one nested key.

    With ``storages``, every tensor also adds the number of its storage (in the order first seen), so that a view
    of an argument and a copy of it differ. Raises `Unkeyable` for what no key captures, and with ``tensors=False``
    for any tensor (values that must be plain).
    """
    key: list[Any] = []
    append = key.append
    try:
        for value in values:
            kind = type(value)
            if kind in TENSOR_TYPES:
                if not tensors:
                    raise Unkeyable("tensor")
                append(value.shape)  # a strided nested tensor has the plain type but no single shape: RuntimeError
                append(value.dtype)
                if storages is not None:  # `storage_number`, inline: it runs for every tensor of a memoized call
                    base = value._base
                    append(storages.setdefault(id(value if base is None else base), len(storages)))
            elif kind in PLAIN_TYPES:
                append(kind)  # typed: True, 1 and 1.0 are equal keys but not always equal arguments
                append(value)
            elif (kind is list or kind is tuple) and only_plain_value_types(kinds := tuple(map(type, value))):
                append(kind)  # a list and a tuple of the same items are different arguments
                append(kinds)
                append(tuple(value))
            else:
                append(nested_key(value, storages, tensors=tensors))
    except RuntimeError:
        raise Unkeyable("nested tensor") from None
    return key


def nested_key(value: Any, storages: dict[int, int] | None = None, *, tensors: bool = True) -> Hashable:
    """The key of one value of any depth, opened by its type, for `call_key` (which also turns the ``RuntimeError``
    of a strided nested tensor's shape into `Unkeyable`); with ``tensors=False`` only plain values and containers
    of them have one (a module's configuration: a tensor attribute may be read for its values)."""
    kind = type(value)
    if tensors and isinstance(value, torch.Tensor):
        if kind not in TENSOR_TYPES and value.is_nested:
            raise Unkeyable("nested tensor")
        number = None if storages is None else storage_number(value, storages)
        return torch.Tensor, value.shape, value.dtype, number  # a strided nested tensor: RuntimeError (see call_key)
    if kind in PLAIN_TYPES or isinstance(value, SCALAR_TYPES):
        return kind, value
    if isinstance(value, (tuple, list)):
        return kind, tuple([nested_key(item, storages, tensors=tensors) for item in value])
    if isinstance(value, Mapping):
        return kind, tuple([(key, nested_key(item, storages, tensors=tensors)) for key, item in value.items()])
    raise Unkeyable(kind.__name__)


def storage_number(tensor: torch.Tensor, storages: dict[int, int]) -> int:
    """The number of the tensor's storage among ``storages`` (a view shares its base's)."""
    base = tensor._base
    return storages.setdefault(id(tensor if base is None else base), len(storages))


# -- operands ------------------------------------------------------------------------------------------------------


def operand_dtypes(values: Iterable[Any]) -> tuple[set[torch.dtype], bool]:
    """The dtypes of the tensors among a call's operands (also inside lists and tuples), each once, and whether some
    operand is a complex scalar."""
    dtypes: set[torch.dtype] = set()
    complex_scalar = False
    for value in values:
        kind = type(value)
        if kind in TENSOR_TYPES:
            dtypes.add(value.dtype)
        elif kind in PLAIN_TYPES:
            complex_scalar = complex_scalar or kind is complex
        elif isinstance(value, (tuple, list)):  # mostly sizes and strides: items read only if some is not plain
            if not only_plain_value_types(map(type, value)):
                dtypes.update(item.dtype for item in value if isinstance(item, torch.Tensor))
        elif isinstance(value, torch.Tensor):
            dtypes.add(value.dtype)
        elif isinstance(value, complex):
            complex_scalar = True
    return dtypes, complex_scalar
