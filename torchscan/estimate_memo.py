"""Module estimates computed once per distinct call of a formula that depends on nothing else.

Repeated blocks (ResNet stages, MobileNet's inverted residuals, the 80 layers of a LLaMA) call the same layer
types with the same configuration on the same shapes again and again. A handler that declares ``memoize=True``
promises that its estimate depends only on what `call_key` captures:

* the module's type, its plain attributes (numbers, strings, flags, dtypes and tuples of them, the training flag
  included) and the names, shapes and dtypes of its own parameters and buffers (``None`` entries too);
* the call's positional and keyword arguments and its output, as structure: for each tensor its shape, dtype
  and which argument's storage it shares (a view of the input is not a copy); for each scalar its type and value
  (``stride=2`` and ``is_causal=True`` are part of the key). The device is not: formulas read shapes only, and
  count alike on ``meta``.

A call whose module or arguments hold anything else (an object, a callable, a nested tensor) is never memoized.
The estimate is then computed once per key and replayed for every later call with that key: each record gets its
own copies of the results, and diagnostics are re-addressed to the call they are about.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from .estimation import CallEstimate

#: Values that describe themselves: their type and value are the key (``True``, ``1`` and ``1.0`` differ).
SIMPLE_TYPES = (bool, int, float, complex, str, type(None), torch.dtype)
_EXACTLY_SIMPLE = frozenset(SIMPLE_TYPES)


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
    """The module's type, public plain attributes, and own parameters' and buffers' shapes and dtypes."""
    attributes = []
    for name, value in module.__dict__.items():  # a loop, not a generator: it runs once per module per analysis
        if name[0] != "_":
            kind = type(value)
            attributes.append((name, kind, value) if kind in _EXACTLY_SIMPLE else (name, _plain(value)))
    tensors = [(name, _own_tensor(tensor)) for name, tensor in module._parameters.items()]
    if module._buffers:
        tensors.extend((name, _own_tensor(tensor)) for name, tensor in module._buffers.items())
    return type(module), tuple(attributes), tuple(tensors)


def _own_tensor(tensor: torch.Tensor | None) -> Hashable:
    if tensor is None:
        return None
    if is_lazy(tensor):
        raise NotMemoizable("an uninitialized lazy parameter")
    return tensor.shape, tensor.dtype


class _Structure:
    """Describes call values for the key, numbering tensor storages in order of appearance."""

    __slots__ = ("storages",)

    def __init__(self) -> None:
        self.storages: dict[int, int] = {}

    def describe(self, value: Any) -> Hashable:
        kind = type(value)
        if kind is torch.Tensor or kind is nn.Parameter:
            return self._tensor(value)
        if kind is tuple or kind is list:
            return kind, tuple([self.describe(item) for item in value])
        if kind is dict:
            return kind, tuple([(key, self.describe(item)) for key, item in value.items()])
        if kind in _EXACTLY_SIMPLE:
            return kind, value
        return self._subclassed(value, kind)

    def _subclassed(self, value: Any, kind: type) -> Hashable:
        """Tensor subclasses, subclasses of the simple types and containers, other mappings; else NotMemoizable."""
        if isinstance(value, torch.Tensor):
            return self._tensor(value)
        if isinstance(value, SIMPLE_TYPES):
            return kind, value
        if isinstance(value, (tuple, list)):
            return kind, tuple([self.describe(item) for item in value])
        if isinstance(value, Mapping):
            return kind, tuple([(key, self.describe(item)) for key, item in value.items()])
        raise NotMemoizable(kind.__name__)

    def _tensor(self, tensor: torch.Tensor) -> Hashable:
        if tensor.is_nested:
            raise NotMemoizable("nested tensor")
        root = tensor._base if tensor._base is not None else tensor
        storage = self.storages.setdefault(id(root), len(self.storages))
        return tensor.shape, tensor.dtype, storage


class EstimateMemo:
    """The estimates of one analysis, by call key.

    A module's configuration is read at its first call in the analysis (and again if its class changes, as a lazy
    module's does when it materializes); equal configurations share one small number in the keys.
    """

    __slots__ = ("configurations", "entries", "hits", "numbers")

    def __init__(self) -> None:
        self.entries: dict[Hashable, CallEstimate] = {}
        self.configurations: dict[tuple[int, type], int | None] = {}  # (module id, class) -> number
        self.numbers: dict[tuple, int] = {}  # configuration -> number
        self.hits = 0

    def key(self, handler: Any, needed: frozenset[str], module: nn.Module, args: tuple, kwargs: Mapping[str, Any],
            output: Any) -> Hashable | None:
        """The memo key of one call to ``handler``, or None when the call cannot be memoized."""
        configuration = self._configuration(module)
        if configuration is None:
            return None
        structure = _Structure()
        try:
            return (id(handler), needed, configuration, structure.describe(args), structure.describe(kwargs),
                    structure.describe(output))
        except NotMemoizable:
            return None

    def _configuration(self, module: nn.Module) -> int | None:
        identity = (id(module), type(module))
        if identity not in self.configurations:
            try:
                configuration = module_configuration(module)
            except NotMemoizable:
                self.configurations[identity] = None
            else:
                self.configurations[identity] = self.numbers.setdefault(configuration, len(self.numbers))
        return self.configurations[identity]

    def replay(self, key: Hashable | None, where: dict[str, Any]) -> CallEstimate | None:
        """A copy of the estimate stored under ``key``, its diagnostics about the call at ``where``."""
        if key is None:
            return None
        stored = self.entries.get(key)
        if stored is None:
            return None
        self.hits += 1
        return _copied(stored, where)

    def store(self, key: Hashable | None, estimate: CallEstimate) -> None:
        if key is not None:
            self.entries[key] = _copied(estimate, None)


def _copied(estimate: CallEstimate, where: dict[str, Any] | None) -> CallEstimate:
    """An independent copy (results, lists, diagnostics and breakdown parts), re-addressed to ``where`` when given."""
    metrics = {name: _copied_result(result) for name, result in estimate.metrics.items()}
    diagnostics = [{**item, **where} if where is not None else dict(item) for item in estimate.diagnostics]
    breakdown = [{key: dict(value) if isinstance(value, Mapping) else value for key, value in part.items()}
                 for part in estimate.breakdown]
    return CallEstimate(metrics=metrics, ownership=dict(estimate.ownership), builtin_owned=estimate.builtin_owned,
                        delegated=list(estimate.delegated), diagnostics=diagnostics,  # type: ignore[arg-type]
                        breakdown=breakdown)


def _copied_result(result: dict[str, Any]) -> dict[str, Any]:
    copy = result.copy()
    if type(copy["value"]) is list or type(copy["known_value"]) is list:  # per-dimension receptive fields
        copy["value"], copy["known_value"] = (list(v) if type(v) is list else v
                                              for v in (copy["value"], copy["known_value"]))
    return copy
