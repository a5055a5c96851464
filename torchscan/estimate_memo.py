"""Module estimates computed once per distinct call of a formula that depends on nothing else.

A handler that declares ``memoize=True`` promises that its estimate depends only on what the key captures:

* the call's *structure*: the handler, the fields needed, the module's type, and `torchscan.values.call_key` of
  the call's arguments and output (tensor shapes and dtypes, which storage each shares: a view of the input is not
  a copy; scalars by type and value). The device is not: formulas read shapes only;
* the module's *configuration*: its plain public attributes (the training flag included) and the names, shapes and
  dtypes of its own parameters and buffers.

A call whose module or arguments hold anything else (an object, a nested tensor) is never memoized. Each later
call with an equal key replays the stored estimate: the tracer shares it until the record copies it, or copies it at
once when the call's estimate may still change or has diagnostics to re-address (`CallEstimate.copy`). The configuration
is read only once a second call shares a structure, and then once per module and analysis: a model that changes a
module's attributes between its calls within one forward pass is outside what the memo describes.
"""

from __future__ import annotations

import marshal
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from .estimation import CallEstimate
from .values import TENSOR_TYPES, Unkeyable, call_key


def module_configuration(module: nn.Module) -> tuple:
    """The module's type, public plain attributes (names and `_attributes_key` of the values), and own parameters'
    and buffers' names, shapes and dtypes; `Unkeyable` when an attribute is anything else (PyTorch's own state is
    underscored)."""
    state = module.__dict__
    public = _public_names(tuple(state))
    attributes = _attributes_key(tuple(map(state.__getitem__, public)))
    return type(module), public, attributes, _own_tensors(module._parameters), _own_tensors(module._buffers)


def _attributes_key(values: tuple) -> Hashable:
    """The key of a module's attribute values: their ``marshal`` bytes when marshal encodes them all, else
    `call_key` without tensors. Marshal writes each value's exact type (``1``, ``1.0`` and ``True`` differ; it
    refuses subclasses) in one C-level step, several times faster than `call_key`; its version 2 writes no
    back-references, which would make the bytes depend on which values are one object."""
    try:
        return marshal.dumps(values, 2)
    except ValueError:  # some value marshal cannot write
        return tuple(call_key(values, tensors=False))


@lru_cache(maxsize=4096)
def _public_names(names: tuple[str, ...]) -> tuple[str, ...]:
    """The attribute names that describe a module's configuration, once per distinct set of names (a layer's
    ``__dict__`` holds about thirty entries, two thirds of them PyTorch's private registries)."""
    return tuple(name for name in names if name[0] != "_")


def _own_tensors(tensors: dict[str, Any]) -> tuple:
    """Names, shapes and dtypes of a module's own parameters or buffers (``None`` entries too)."""
    return tuple([(name, None if tensor is None else _own_tensor(tensor)) for name, tensor in tensors.items()])


def _own_tensor(tensor: torch.Tensor) -> Hashable:
    if type(tensor) not in TENSOR_TYPES and is_lazy(tensor):  # a plain tensor is never lazy: one set lookup
        raise Unkeyable("an uninitialized lazy parameter")
    return tensor.shape, tensor.dtype


def call_structure(args: tuple, kwargs: Mapping[str, Any], output: Any) -> tuple:
    """The structure of one call (see the module docstring): the argument count and keyword names (they fix where
    each value's run starts), then `torchscan.values.call_key` of the arguments and the output, with which storage
    each tensor shares. Raises `Unkeyable` for what it cannot describe."""
    values = (*args, *kwargs.values(), output) if kwargs else (*args, output)
    return len(args), tuple(kwargs), *call_key(values, storages={})


@dataclass(slots=True)
class _First:
    """The one estimate stored under a structure that no other call has shared yet, with its module."""

    module: nn.Module
    estimate: CallEstimate


class EstimateMemo:
    """The estimates of one analysis, by call structure and then by configuration.

    Equal configurations share one small number; a module's number is read once per analysis (and again if its
    class changes, as a lazy module's does when it materializes).
    """

    __slots__ = ("configurations", "entries", "numbers")

    def __init__(self) -> None:
        self.entries: dict[Hashable, _First | dict[int, CallEstimate]] = {}
        self.configurations: dict[tuple[int, type], int | None] = {}  # (module id, class) -> number
        self.numbers: dict[tuple, int] = {}  # configuration -> number

    def structure(self, handler: Any, needed: frozenset[str], module: nn.Module, args: tuple,
                  kwargs: Mapping[str, Any], output: Any) -> Hashable | None:
        """The first part of the key of one call to ``handler``, or None when the call cannot be memoized."""
        try:
            return id(handler), needed, type(module), call_structure(args, kwargs, output)
        except Unkeyable:
            return None

    def configuration(self, module: nn.Module) -> int | None:
        """The number of the module's configuration (equal configurations, equal numbers); None: not memoizable."""
        identity = (id(module), type(module))
        if identity not in self.configurations:
            try:
                configuration = module_configuration(module)
            except Unkeyable:
                self.configurations[identity] = None
            else:
                self.configurations[identity] = self.numbers.setdefault(configuration, len(self.numbers))
        return self.configurations[identity]

    def replay(self, structure: Hashable, module: nn.Module) -> CallEstimate | None:
        """The estimate stored for this structure and the module's configuration (the memo's own object: copy it
        before anything edits it or a report holds it), or None when there is none."""
        entry = self.entries.get(structure)
        if entry is None:
            return None
        if isinstance(entry, _First):  # a second call shares the structure: the first is filed by configuration
            first = self.configuration(entry.module)
            entry = self.entries[structure] = {} if first is None else {first: entry.estimate}
        number = self.configuration(module)
        return None if number is None else entry.get(number)

    def store(self, structure: Hashable, module: nn.Module, estimate: CallEstimate, *, copy: bool = True) -> None:
        """Keep a computed estimate (after `replay` found none for the same call): a copy, unless the caller
        promises (``copy=False``) that nothing edits ``estimate`` or its results until the analysis ends."""
        kept = estimate.copy() if copy else estimate
        entry = self.entries.get(structure)
        if entry is None:
            self.entries[structure] = _First(module, kept)
            return
        number = self.configuration(module)
        if number is not None and type(entry) is dict:
            entry[number] = kept
