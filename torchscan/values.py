"""Call values: what the values that module and operator calls take and return are, and the walks over them.

A call value is a tensor, a *plain value* (``None``, a bool, int, float, complex, str or bytes, a dtype, device,
layout or memory format), a container of call values, or any other object. The containers are one policy, kept by
`container_items`: tuples, lists and named tuples, mappings (``transformers``-style output objects among them) and
dataclass instances. The type sets below are the vocabulary; every part of TorchScan that looks inside call values
walks them here, and nothing else recurses into arguments or outputs:

* `describe` (and `call_metadata`): the report's metadata of a value, its structure and never its contents;
* `tensors_in`, `tensor_elements` and `map_tensors`: the tensors in a value, their elements, and the value with
  every tensor replaced (stand-ins, a device move), containers rebuilt as their own type;
* `call_key`: a hashable key of everything a shape-reading formula can see in a call (tensor shapes and dtypes,
  plain values by type and value, containers item by item), with which storage each tensor shares when asked;
  the operator cache and the estimate memo price once per key;
* `operand_dtypes`: the dtypes of the tensors among a call's operands, for the formulas' arithmetic kind.

The walks test exact types first (a set lookup) and fall back to ``isinstance`` only for subclasses: they run for
every layer call and every dispatched operator.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import Any

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence

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
        if _is_dataclass_instance(value):
            return _describe_container(value, "dataclass", _enclosing)
        return {"kind": "object", "type": _type_name(value)}
    if isinstance(value, tuple) and hasattr(kind, "_fields"):
        return _describe_container(value, "namedtuple", _enclosing)
    return _describe_container(value, "sequence" if isinstance(value, (tuple, list)) else "mapping", _enclosing)


def _describe_container(value: Any, kind: str, _enclosing: tuple[int, ...]) -> dict[str, Any]:
    """A tuple, list, other sequence, namedtuple, mapping or dataclass: its items, unless it encloses itself or nests
    too deep."""
    if id(value) in _enclosing:
        return {"kind": "recursive", "type": _type_name(value)}
    if len(_enclosing) >= MAX_DEPTH:
        return {"kind": "truncated", "type": _type_name(value)}
    inner = (*_enclosing, id(value))
    if kind == "namedtuple" or kind == "dataclass":
        return {"kind": kind, "type": type(value).__qualname__,
                "items": [{"key": name, "value": describe(item, inner)} for name, item in _named_items(value)]}
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


# -- tensors -------------------------------------------------------------------------------------------------------


def _is_dataclass_instance(value: Any) -> bool:
    return hasattr(type(value), "__dataclass_fields__") and not isinstance(value, type)


def _named_items(value: Any) -> list[tuple[str, Any]]:
    """A named tuple's or a dataclass instance's fields and values, in declaration order."""
    if isinstance(value, tuple):
        return list(zip(type(value)._fields, value, strict=False))  # type: ignore[attr-defined]
    return [(field.name, getattr(value, field.name)) for field in dataclasses.fields(value)]


def container_items(value: Any) -> Iterable[Any] | None:
    """The items of a container call value, in order (a mapping's values), or None for anything else: the one
    container policy of every walk."""
    kind = type(value)
    if kind is tuple or kind is list or isinstance(value, (tuple, list)):
        return value
    if kind is dict or isinstance(value, Mapping):
        return value.values()
    if _is_dataclass_instance(value):
        return [item for _, item in _named_items(value)]
    return None


def tensors_in(value: Any) -> list[torch.Tensor]:
    """Every tensor in a call value, depth first, each occurrence (a container that holds itself is opened once;
    nesting beyond ``MAX_DEPTH`` is not opened). It runs for every dispatched operator of a memory trace: plain
    values and flat containers of tensors take the fast path."""
    kind = type(value)
    if kind in TENSOR_TYPES:
        return [value]
    if kind in PLAIN_TYPES:
        return []
    found: list[torch.Tensor] = []
    _collect(value, found, ())
    return found


def _collect(value: Any, found: list[torch.Tensor], enclosing: tuple[int, ...]) -> None:
    if isinstance(value, torch.Tensor):
        found.append(value)
        return
    if type(value) in PLAIN_TYPES or id(value) in enclosing or len(enclosing) >= MAX_DEPTH:
        return
    items = container_items(value)
    if items is None:
        return
    inner = (*enclosing, id(value))
    for item in items:
        kind = type(item)
        if kind in TENSOR_TYPES:
            found.append(item)
        elif kind not in PLAIN_TYPES:
            _collect(item, found, inner)


def objects_in(value: Any, accept: Callable[[Any], bool]) -> list[Any]:
    """Every object in a call value that ``accept`` picks (not looked inside), depth first, by the container policy
    of `tensors_in`: a KV cache inside a ``transformers`` output, say."""
    found: list[Any] = []
    _pick(value, accept, found, ())
    return found


def _pick(value: Any, accept: Callable[[Any], bool], found: list[Any], enclosing: tuple[int, ...]) -> None:
    if accept(value):
        found.append(value)
        return
    if isinstance(value, torch.Tensor) or type(value) in PLAIN_TYPES or id(value) in enclosing \
            or len(enclosing) >= MAX_DEPTH:
        return
    for item in container_items(value) or ():
        _pick(item, accept, found, (*enclosing, id(value)))


def tensor_elements(value: Any, _enclosing: tuple[int, ...] = ()) -> int:
    """The elements of every tensor in a call value; a ``PackedSequence`` counts its data, not its integer
    bookkeeping (batch sizes and sort indices). A container that holds itself is opened once, as in `tensors_in`."""
    if isinstance(value, PackedSequence):
        return value.data.numel()
    if isinstance(value, torch.Tensor):
        return value.numel()
    if type(value) in PLAIN_TYPES or id(value) in _enclosing or len(_enclosing) >= MAX_DEPTH:
        return 0
    items = container_items(value)
    inner = (*_enclosing, id(value))
    return 0 if items is None else sum(tensor_elements(item, inner) for item in items)


def map_tensors(value: Any, function: Callable[[torch.Tensor], Any], _enclosing: tuple[int, ...] = ()) -> Any:
    """``value`` with every tensor replaced by ``function(tensor)``; containers are rebuilt as their own type (a
    named tuple by its fields, a mapping or dataclass as a shallow copy with the new items), and a value with no
    tensor inside is returned as it is."""
    if isinstance(value, torch.Tensor):
        return function(value)
    if type(value) in PLAIN_TYPES or id(value) in _enclosing or len(_enclosing) >= MAX_DEPTH:
        return value
    keyed = _keyed_items(value)
    if keyed is None:
        return value
    inner = (*_enclosing, id(value))
    changed = {key: new for key, old in keyed if (new := map_tensors(old, function, inner)) is not old}
    return _rebuilt(value, changed) if changed else value


def _keyed_items(value: Any) -> Iterable[tuple[Any, Any]] | None:
    """A container's items with their keys (positions, mapping keys, field names), in `container_items`' policy."""
    if isinstance(value, (tuple, list)):
        return enumerate(value)
    if isinstance(value, Mapping):
        return value.items()
    if _is_dataclass_instance(value):
        return _named_items(value)
    return None


def _rebuilt(value: Any, changed: dict[Any, Any]) -> Any:
    """A container like ``value`` with the ``changed`` items: a sequence rebuilt as its type (a named tuple by its
    fields), a plain dict rebuilt, any other mapping or dataclass a shallow copy with the items assigned."""
    kind = type(value)
    if isinstance(value, (tuple, list)):
        items = [changed.get(index, item) for index, item in enumerate(value)]
        return kind(*items) if hasattr(kind, "_fields") else kind(items)
    if kind is dict:
        return {**value, **changed}
    assign = _set_item if isinstance(value, Mapping) else object.__setattr__
    try:
        new = copy.copy(value)
        for key, item in changed.items():
            assign(new, key, item)
    except Exception as error:
        raise TypeError(f"cannot rebuild a {kind.__qualname__} with its tensors replaced "
                        f"({type(error).__name__}: {error})") from error
    return new


def _set_item(mapping: Any, key: Any, item: Any) -> None:
    mapping[key] = item


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
