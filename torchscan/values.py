"""Call values: what the values that module and operator calls take and return are, and the walks over them.

A call value is a tensor, a *plain value* (``None``, a bool, int, float, complex, str or bytes, a dtype, device,
layout or memory format), a container of call values, or any other object. The containers are one policy, kept by
`container_items`: tuples, lists and named tuples, mappings (``transformers``-style output objects among them) and
dataclass instances. The type sets below are the vocabulary; every part of TorchScan that looks inside call values
walks them here, and nothing else recurses into arguments or outputs:

* `describe` (and `call_metadata`): the report's metadata of a value, its structure and never its contents;
* `tensors_in`, `objects_in`, `tensor_elements` and `map_tensors`: the tensors (or other objects) in a value, their
  elements, and the value with every tensor replaced (stand-ins, a device move), with `saved_state` and
  `restore_state` for what a forward changes in the values the stand-ins share with the caller's;
* `call_key`: the key by which the operator cache and the estimate memo price each distinct call once;
* `operand_dtypes`: the dtypes of the tensors among a call's operands, for the formulas' arithmetic kind.

The walks test exact types first (a set lookup) and fall back to ``isinstance`` only for subclasses: they run for
every layer call and every dispatched operator.
"""

from __future__ import annotations

import copy
import dataclasses
import enum
import operator
import types
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
    """A container's items, unless it encloses itself or nests too deep."""
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


def map_tensors(value: Any, function: Callable[[torch.Tensor], Any], *, objects: bool = False) -> Any:
    """``value`` with every tensor replaced by ``function(tensor)``; containers are rebuilt as their own type (a
    named tuple by its fields, a mapping or dataclass as a shallow copy with the new items), and a value with no
    tensor inside is returned as it is. A value held in several places is replaced once (its replacements stay one
    object); a container that holds itself is opened once, and nesting beyond ``MAX_DEPTH`` is not opened.

    With ``objects=True`` the attributes of other objects are opened too (`object_attributes`: a ``transformers``
    KV cache and its layers): an object that holds a tensor becomes a shallow copy (``copy.copy``) with its changed
    attributes set, and an attribute naming the device a replaced tensor came from (a cache layer's ``device``)
    names its replacement's. The original objects are not touched.

    Raises `Unmappable` (a ``TypeError``) naming where the value sits when an object or container holding a tensor
    cannot be rebuilt, when it holds itself (its copy would point back at the original), and for what ``function``
    itself refuses by raising `Unmappable`.
    """
    return _TensorMap(function, objects).mapped(value, ())


class Unmappable(TypeError):
    """A value that `map_tensors` cannot give replaced tensors: its type's name, why, and the steps from the mapped
    value down to it (``[0]``, ``['cache']``, ``.layers``), which `place` writes after the name of the root."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(f"{kind}: {reason}")
        self.kind = kind
        self.reason = reason
        self.steps: list[str] = []  # innermost first: each enclosing value adds its step on the way out

    def place(self, root: str) -> str:
        """Where the value sits, written from ``root``: ``kwargs['cache'].layers[3]``."""
        return root + "".join(reversed(self.steps))


#: Objects whose attributes are not call values: classes, functions, Python modules, enumeration members, and
#: ``nn.Module`` instances (a module's tensors are parameters and buffers; an argument that is a module is kept).
CLOSED_TYPES = (type, nn.Module, types.FunctionType, types.MethodType, types.BuiltinFunctionType, types.ModuleType,
                enum.Enum)


def object_attributes(value: Any) -> list[tuple[str, Any]] | None:
    """The attributes an object holds itself (its ``__dict__`` and its set ``__slots__``), or None for a tensor, a
    plain value, a container (`container_items`), a `CLOSED_TYPES` object and an object with neither (a C type)."""
    if isinstance(value, torch.Tensor) or type(value) in PLAIN_TYPES or isinstance(value, CLOSED_TYPES) \
            or container_items(value) is not None:
        return None
    own = _instance_dict(value)
    slots = _slot_values(value)
    if own is None and not slots:
        return None
    return [*(own or {}).items(), *slots.items()]


def _instance_dict(value: Any) -> dict[str, Any] | None:
    """``value.__dict__`` read without the class's ``__getattr__`` or ``__getattribute__``, or None."""
    try:
        own = object.__getattribute__(value, "__dict__")
    except AttributeError:
        return None
    return own if type(own) is dict else None


def _slot_values(value: Any) -> dict[str, Any]:
    """The set ``__slots__`` of ``value``'s classes by attribute name (``__x`` in class ``C`` is ``_C__x``)."""
    found: dict[str, Any] = {}
    for klass in type(value).__mro__:
        declared = klass.__dict__.get("__slots__", ())
        for name in (declared,) if isinstance(declared, str) else declared:
            if name in ("__dict__", "__weakref__"):
                continue
            attribute = f"_{klass.__name__.lstrip('_')}{name}" if name.startswith("__") and not name.endswith("__") \
                else name
            try:
                found[attribute] = object.__getattribute__(value, attribute)
            except AttributeError:  # declared, never set
                continue
    return found


class _TensorMap:
    """One `map_tensors` walk: the replacement of every value already mapped (by ``id``, beside the value itself,
    so that no id is reused while the walk runs), the devices replaced tensors moved between, and the values met
    again inside themselves."""

    def __init__(self, function: Callable[[torch.Tensor], Any], objects: bool) -> None:
        self.function = function
        self.objects = objects
        self.done: dict[int, tuple[Any, Any]] = {}
        self.devices: dict[torch.device, torch.device] = {}
        self.looped: set[int] = set()

    def mapped(self, value: Any, enclosing: tuple[int, ...]) -> Any:
        """``value`` with its tensors replaced, inside the values of ``enclosing`` (their ids)."""
        if type(value) in PLAIN_TYPES:
            return value
        key = id(value)
        if key not in self.done:
            if isinstance(value, torch.Tensor):
                self.done[key] = value, self._tensor(value)
            elif key in enclosing:
                self.looped.add(key)
                return value
            elif len(enclosing) >= MAX_DEPTH:
                return value
            else:
                self.done[key] = value, self._opened(value, (*enclosing, key))
        return self.done[key][1]

    def _opened(self, value: Any, inner: tuple[int, ...]) -> Any:
        """A container (or, with ``objects``, an object) with its items mapped: itself when none changed."""
        keyed = _keyed_items(value)
        attributes = object_attributes(value) if keyed is None and self.objects else None
        items = keyed if keyed is not None else attributes
        if items is None:
            return value
        changed = self._changed_items(value, items, inner)
        if not changed:
            return value
        if id(value) in self.looped:
            raise Unmappable(type(value).__qualname__, "it holds itself, so a copy with its tensors replaced would "
                                                       "still point back at the original")
        return _rebuilt(value, changed) if attributes is None else self._rebuilt_object(value, attributes, changed)

    def _changed_items(self, value: Any, items: Iterable[tuple[Any, Any]], inner: tuple[int, ...]) -> dict[Any, Any]:
        """The items of ``value`` whose mapping is a new object, by key; a refusal below adds its step here."""
        changed = {}
        for name, old in items:
            try:
                new = self.mapped(old, inner)
            except Unmappable as error:
                error.steps.append(_step(value, name))
                raise
            if new is not old:
                changed[name] = new
        return changed

    def _tensor(self, tensor: torch.Tensor) -> Any:
        new = self.function(tensor)
        if isinstance(new, torch.Tensor) and self.objects:
            self.devices[tensor.device] = new.device
        return new

    def _rebuilt_object(self, value: Any, attributes: list[tuple[str, Any]], changed: dict[str, Any]) -> Any:
        """A shallow copy of ``value`` with the ``changed`` attributes, and its device attributes following the
        tensors; refused when the copy fails or is not a separate object of the same type."""
        for name, item in attributes:
            if type(item) is torch.device and item in self.devices and name not in changed:
                changed[name] = self.devices[item]
        new = _separate_copy(value)
        _set_attributes(new, changed, type(value).__qualname__)
        return new


def _separate_copy(value: Any) -> Any:
    """``copy.copy(value)``, refused (`Unmappable`) when it fails or is not a separate object of the same type."""
    kind = type(value).__qualname__
    try:
        new = copy.copy(value)
    except Exception as error:  # any failure of the class's copy protocol is one refusal
        raise Unmappable(kind, f"copying it failed ({type(error).__name__}: {error})") from error
    own = _instance_dict(new)
    if new is value or type(new) is not type(value) or (own is not None and own is _instance_dict(value)):
        raise Unmappable(kind, "its copy is not a separate object of its type")
    return new


def _set_attributes(new: Any, changed: dict[str, Any], kind: str) -> None:
    """Set ``changed`` on the copy ``new``, past its class's ``__setattr__``; refused when one cannot be set."""
    own = _instance_dict(new)
    for name, item in changed.items():
        try:
            if own is not None and name in own:
                own[name] = item
            else:
                object.__setattr__(new, name, item)
        except Exception as error:  # a read-only attribute, a C type's slot
            raise Unmappable(kind, f"its attribute {name!r} cannot be set on a copy "
                                   f"({type(error).__name__}: {error})") from error


def _step(value: Any, key: Any) -> str:
    """The step from a container or object to one of its items: ``[0]``, ``['cache']``, ``.layers``."""
    if isinstance(value, (tuple, list)):
        return f"[{key}]"
    if isinstance(value, Mapping):
        return f"[{key!r}]" if isinstance(key, (str, int)) else f"[<{type(key).__name__} key>]"
    return f".{key}"


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
    assign = operator.setitem if isinstance(value, Mapping) else object.__setattr__
    try:
        new = copy.copy(value)
        for key, item in changed.items():
            assign(new, key, item)
    except Exception as error:
        raise Unmappable(kind.__qualname__, f"it cannot be rebuilt with its tensors replaced "
                                            f"({type(error).__name__}: {error})") from error
    return new


# -- state put back -----------------------------------------------------------------------------------------------


def saved_state(value: Any) -> list[tuple[Any, Any]]:
    """What the mutable parts of a call value hold now, for `restore_state`: the items of every ``list`` and
    ``dict`` in it and the attributes of every dataclass instance and every object `map_tensors` opens with
    ``objects=True``, each part once (nesting beyond ``MAX_DEPTH`` is not opened).

    A call's stand-ins share what holds no tensor with the caller's values (an empty cache layer, a list of flags
    beside a copied layer's tensors); the forward may fill them, and putting them back keeps the caller's values
    exactly as they were."""
    saved: list[tuple[Any, Any]] = []
    _save(value, saved, set(), 0)
    return saved


def _save(value: Any, saved: list[tuple[Any, Any]], seen: set[int], depth: int) -> None:
    if isinstance(value, torch.Tensor) or type(value) in PLAIN_TYPES or id(value) in seen or depth >= MAX_DEPTH:
        return
    seen.add(id(value))
    for item in _snapshot(value, saved):
        _save(item, saved, seen, depth + 1)


def _snapshot(value: Any, saved: list[tuple[Any, Any]]) -> Iterable[Any]:
    """Save what can be put back of ``value`` (a list's or dict's items, an object's attributes) and return what to
    look inside next."""
    kind = type(value)
    items = container_items(value)
    if kind is list or kind is dict:
        saved.append((value, kind(value)))
        return items or ()
    if items is not None and not _is_dataclass_instance(value):
        return items
    attributes = object_attributes(value) if items is None else None
    if items is None and attributes is None:
        return ()
    saved.append((value, _attribute_state(value)))
    return (items or ()) if attributes is None else [item for _, item in attributes]


def _attribute_state(value: Any) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """An object's ``__dict__`` (copied) and slot values, as `restore_state` puts them back."""
    own = _instance_dict(value)
    return None if own is None else dict(own), _slot_values(value)


def restore_state(saved: list[tuple[Any, Any]]) -> None:
    """Put back what `saved_state` saved, where the part changed since: list items, dict items, an object's
    ``__dict__`` (written directly, past the class's ``__setattr__``) and its slots."""
    for value, before in saved:
        kind = type(value)
        if kind is list:
            if _changed(value, before):
                value[:] = before
        elif kind is dict:
            if _changed(value, before) or _changed(value.values(), before.values()):
                value.clear()
                value.update(before)
        else:
            _restore_attributes(value, *before)


def _restore_attributes(value: Any, own_before: dict[str, Any] | None, slots_before: dict[str, Any]) -> None:
    own = _instance_dict(value)
    if own is not None and own_before is not None and (
            _changed(own, own_before) or _changed(own.values(), own_before.values())):
        own.clear()
        own.update(own_before)
    slots = _slot_values(value)
    for name in slots.keys() - slots_before.keys():
        object.__delattr__(value, name)
    for name, item in slots_before.items():
        if slots.get(name, _UNSET) is not item:
            object.__setattr__(value, name, item)


_UNSET = object()


def _changed(now: Iterable[Any], before: Iterable[Any]) -> bool:
    """Whether two sequences differ in length or in the identity of an item (keys, values)."""
    now, before = list(now), list(before)
    return len(now) != len(before) or any(item is not old for item, old in zip(now, before, strict=True))


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
