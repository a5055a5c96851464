"""Module estimates computed once per distinct call of a formula that depends on nothing else.

Repeated blocks (ResNet stages, MobileNet's inverted residuals, the 80 layers of a LLaMA) call the same layer
types with the same configuration on the same shapes again and again. A handler that declares ``memoize=True``
promises that its estimate depends only on what the key captures:

* the call's *structure*: the handler, the fields needed, the module's type, and the call's positional and keyword
  arguments and its output, as structure: for each tensor its shape, dtype and which argument's storage it shares
  (a view of the input is not a copy); for each scalar its type and value (``stride=2`` and ``is_causal=True`` are
  part of the key). The device is not: formulas read shapes only, and count alike on ``meta``;
* the module's *configuration*: its plain attributes (numbers, strings, flags, dtypes and tuples of them, the
  training flag included) and the names, shapes and dtypes of its own parameters and buffers (``None`` entries too).

A call whose module or arguments hold anything else (an object, a callable, a nested tensor) is never memoized.
The estimate is then computed once per key and replayed for every later call with that key: each record gets its
own copy of the results, and diagnostics are re-addressed to the call they are about.

The structure is cheap and read at every call. The configuration walks every attribute and tensor of the module,
so it is read only once a second call shares a structure (most calls of a CNN have a structure of their own, and
their configuration is never needed), and then once per module and analysis: a model that changes a module's
attributes between its calls within one forward pass is outside what the memo describes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from functools import lru_cache
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from .estimation import CallEstimate
from .inputs import PLAIN_TENSORS, only_plain_tensor_types
from .results import copied, plain_copy

#: Values that describe themselves: their type and value are the key (``True``, ``1`` and ``1.0`` differ).
SIMPLE_TYPES = (bool, int, float, complex, str, type(None), torch.dtype)
_EXACTLY_SIMPLE = frozenset(SIMPLE_TYPES)
_simple_only = _EXACTLY_SIMPLE.issuperset


class NotMemoizable(Exception):
    """The call holds a value whose influence on the estimate the key cannot capture."""


def _plain(value: Any) -> Hashable:
    """A module attribute as a key part (tuples and lists of plain values included)."""
    kind = type(value)
    if kind in _EXACTLY_SIMPLE or isinstance(value, SIMPLE_TYPES):
        return kind, value
    if isinstance(value, (tuple, list)):
        return kind, tuple(_plain(item) for item in value)
    raise NotMemoizable(kind.__name__)


def module_configuration(module: nn.Module) -> tuple:
    """The module's type, public plain attributes, and own parameters' and buffers' shapes and dtypes.

    Read in C-level steps where the attributes allow: a layer's ``__dict__`` holds about thirty entries, two thirds
    of them PyTorch's private registries, and this runs for most modules of a model. The tuple of the public
    values' types selects (once per distinct tuple) a picker of the tuple-typed values, whose items' types are
    then read with ``map``; anything that is neither a simple scalar nor a tuple is described value by value.
    """
    state = module.__dict__
    names = _public_names(tuple(state))
    values = tuple(map(state.__getitem__, names))
    kinds = tuple(map(type, values))
    tuples_at = _tuples_picker(kinds)
    if tuples_at is None:
        attributes: tuple = names, tuple([_plain(value) for value in values])
    else:  # tuples of scalars (kernel_size, stride, ...) also need their items' types: True, 1 and 1.0 differ
        tuples = tuples_at(values)
        items = tuple(map(type, chain.from_iterable(tuples))) if tuples else ()
        attributes = names, kinds, values, items if _simple_only(items) else tuple([_plain(item) for item in tuples])
    return type(module), attributes, _own_tensors(module._parameters), _own_tensors(module._buffers)


@lru_cache(maxsize=4096)
def _public_names(keys: tuple[str, ...]) -> tuple[str, ...]:
    """The attribute names that describe a module's configuration (PyTorch's own state is underscored)."""
    return tuple(name for name in keys if name[0] != "_")


@lru_cache(maxsize=4096)
def _tuples_picker(kinds: tuple[type, ...]) -> Callable[[tuple], tuple] | None:
    """For attribute values of these types: a picker of the tuple-typed values (always as a tuple); None when some
    value is neither a simple scalar nor a tuple."""
    if not _simple_or_tuple(kinds):
        return None
    positions = [index for index, kind in enumerate(kinds) if kind is tuple]
    if len(positions) == 1:
        position = positions[0]
        return lambda values: (values[position],)
    return itemgetter(*positions) if positions else _no_values


def _no_values(values: tuple) -> tuple:
    return ()


_simple_or_tuple = frozenset({*SIMPLE_TYPES, tuple}).issuperset
_SHAPE_AND_DTYPE = attrgetter("shape", "dtype")


def _own_tensors(tensors: dict[str, Any]) -> tuple:
    """Names, shapes and dtypes of a module's own parameters or buffers (``None`` entries too)."""
    if not tensors:
        return ()
    if only_plain_tensor_types(map(type, tensors.values())):  # the common case: no None entry, no lazy tensor
        return tuple(zip(tensors, map(_SHAPE_AND_DTYPE, tensors.values())))
    return tuple((name, None if tensor is None else _own_tensor(tensor)) for name, tensor in tensors.items())


def _own_tensor(tensor: torch.Tensor) -> Hashable:
    if type(tensor) in PLAIN_TENSORS:  # not an uninitialized lazy parameter or buffer
        return tensor.shape, tensor.dtype
    if is_lazy(tensor):
        raise NotMemoizable("an uninitialized lazy parameter")
    return tensor.shape, tensor.dtype


def call_structure(args: tuple, kwargs: Mapping[str, Any], output: Any) -> tuple:
    """The structure of one call (see the module docstring); raises `NotMemoizable` for what it cannot describe.

    Flat, for speed (it runs at every call of a memoizing formula): the argument count and keyword names fix where
    each value's entries start, and each value adds a run that its first entry identifies: a plain tensor its
    ``torch.Size``, dtype and storage number; a scalar its type and value; anything else one nested description
    (a tuple opened by a type). The most common call, one plain tensor in and one out, takes `_one_in_one_out`.
    """
    if len(args) == 1 and not kwargs:
        structure = _one_in_one_out(args[0], output)
        if structure is not None:
            return structure
    storages: dict[int, int] = {}
    key: list[Any] = [len(args), tuple(kwargs) if kwargs else ()]
    append = key.append
    for value in (*args, *kwargs.values(), output) if kwargs else (*args, output):
        kind = type(value)
        if kind is torch.Tensor or kind is nn.Parameter:
            append(_shape(value))
            append(value.dtype)
            base = value._base
            append(storages.setdefault(id(value if base is None else base), len(storages)))
        elif kind in _EXACTLY_SIMPLE:
            append(kind)
            append(value)
        else:
            append(_nested(value, storages))
    return tuple(key)


def _one_in_one_out(value: Any, output: Any) -> tuple | None:
    """The structure of a call of one plain tensor that returns one (None for any other call): both shapes and
    dtypes, and whether the output shares the input's storage (a view or the input itself, not a copy). It starts
    with a ``torch.Size`` where every other structure starts with the argument count, so the two never meet."""
    if type(value) not in PLAIN_TENSORS or type(output) not in PLAIN_TENSORS:
        return None
    base, output_base = value._base, output._base
    shared = (value if base is None else base) is (output if output_base is None else output_base)
    return _shape(value), value.dtype, _shape(output), output.dtype, shared


def _shape(tensor: torch.Tensor) -> torch.Size:
    try:
        return tensor.shape
    except RuntimeError:  # a strided nested tensor has no single shape
        raise NotMemoizable("nested tensor") from None


def _nested(value: Any, storages: dict[int, int]) -> tuple:
    """Containers, tensor subclasses and subclasses of the simple types, each opened by a type; else NotMemoizable."""
    kind = type(value)
    if isinstance(value, torch.Tensor):
        if value.is_nested:
            raise NotMemoizable("nested tensor")
        root = value._base if value._base is not None else value
        return torch.Tensor, value.shape, value.dtype, storages.setdefault(id(root), len(storages))
    if isinstance(value, SIMPLE_TYPES):
        return kind, value
    if isinstance(value, (tuple, list)):
        return kind, tuple([_nested(item, storages) for item in value])
    if isinstance(value, Mapping):
        return kind, tuple([(key, _nested(item, storages)) for key, item in value.items()])
    raise NotMemoizable(kind.__name__)


class _First:
    """The one estimate stored under a structure that no other call has shared yet, with its module."""

    __slots__ = ("estimate", "module")

    def __init__(self, module: nn.Module, estimate: CallEstimate) -> None:
        self.module = module
        self.estimate = estimate


class EstimateMemo:
    """The estimates of one analysis, by call structure and then by configuration.

    Equal configurations share one small number; a module's number is read once per analysis (and again if its
    class changes, as a lazy module's does when it materializes).
    """

    __slots__ = ("configurations", "entries", "hits", "numbers")

    def __init__(self) -> None:
        self.entries: dict[Hashable, _First | dict[int, CallEstimate]] = {}
        self.configurations: dict[tuple[int, type], int | None] = {}  # (module id, class) -> number
        self.numbers: dict[tuple, int] = {}  # configuration -> number
        self.hits = 0

    def structure(self, handler: Any, needed: frozenset[str], module: nn.Module, args: tuple,
                  kwargs: Mapping[str, Any], output: Any) -> Hashable | None:
        """The first part of the key of one call to ``handler``, or None when the call cannot be memoized."""
        try:
            return id(handler), needed, type(module), call_structure(args, kwargs, output)
        except NotMemoizable:
            return None

    def key(self, handler: Any, needed: frozenset[str], module: nn.Module, args: tuple, kwargs: Mapping[str, Any],
            output: Any) -> Hashable | None:
        """The whole key of one call (structure, configuration number), or None when it cannot be memoized: two
        calls share an estimate exactly when their keys are equal."""
        structure = self.structure(handler, needed, module, args, kwargs, output)
        number = None if structure is None else self.configuration(module)
        return None if number is None else (structure, number)

    def configuration(self, module: nn.Module) -> int | None:
        """The number of the module's configuration (equal configurations, equal numbers); None: not memoizable."""
        identity = (id(module), type(module))
        if identity not in self.configurations:
            try:
                configuration = module_configuration(module)
            except NotMemoizable:
                self.configurations[identity] = None
            else:
                self.configurations[identity] = self.numbers.setdefault(configuration, len(self.numbers))
        return self.configurations[identity]

    def replay(self, structure: Hashable | None, module: nn.Module, path: str, call_index: int
               ) -> CallEstimate | None:
        """A copy of the estimate stored for this structure and the module's configuration, its diagnostics about
        the call at ``path`` and ``call_index``; None when there is none."""
        if structure is None:
            return None
        entry = self.entries.get(structure)
        if entry is None:
            return None
        if type(entry) is _First:
            entry = self.entries[structure] = self._by_configuration(entry)
        number = self.configuration(module)
        stored = None if number is None else entry.get(number)
        if stored is None:
            return None
        self.hits += 1
        return _copied(stored, {"path": path, "call_index": call_index})

    def _by_configuration(self, first: _First) -> dict[int, CallEstimate]:
        number = self.configuration(first.module)
        return {} if number is None else {number: first.estimate}

    def store(self, structure: Hashable | None, module: nn.Module, estimate: CallEstimate, *, copy: bool = True
              ) -> None:
        """Keep a computed estimate (after `replay` found none for the same call): a copy, unless the caller
        promises (``copy=False``) that nothing edits ``estimate`` or its results until the analysis ends."""
        if structure is None:
            return
        kept = _copied(estimate, None) if copy else estimate
        entry = self.entries.get(structure)
        if entry is None:
            self.entries[structure] = _First(module, kept)
            return
        number = self.configuration(module)
        if number is not None and type(entry) is dict:
            entry[number] = kept


def _copied(estimate: CallEstimate, where: dict[str, Any] | None) -> CallEstimate:
    """The estimate of one more call: its own results and breakdown (a report shares no object between two
    records), and its diagnostics re-addressed to ``where`` when given."""
    metrics = {name: copied(result) for name, result in estimate.metrics.items()}
    copy = CallEstimate(metrics, dict(estimate.ownership), estimate.builtin_owned,
                        list(estimate.delegated), breakdown=plain_copy(estimate.breakdown))
    if estimate.diagnostics:
        copy.diagnostics = ([{**item, **where} for item in estimate.diagnostics] if where is not None
                            else list(estimate.diagnostics))
    return copy
