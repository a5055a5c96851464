"""The bytes one dispatched operator reads and writes: an unfused model of memory traffic, priced per overload.

Every operator is taken as one kernel that reads each of its tensor arguments from memory and writes each tensor it
creates, with nothing kept in caches or registers between operators (no fusion). Fused kernels are operators of
their own (``_scaled_dot_product_flash_attention`` reads q, k and v and writes its output and log-sum-exp), so they
are priced by their own arguments. The rules, from the overload's schema:

* a tensor argument is read once per argument position (``x * x`` reads ``x`` twice: a kernel is handed it twice);
* a tensor the operator creates (a return that aliases no argument) is written once;
* a mutated argument (in place, ``add_``) is read and written once, its return not again; an ``out=`` argument and
  the target of an overwrite (``copy_``, ``fill_``, ``zero_``, random fills) are written, not read;
* a view (every tensor return aliases an argument without writing it: ``view``, ``transpose``, ``expand``,
  ``split``), metadata queries and uninitialized allocations (``empty``) move no bytes;
* allocations and random fills (``zeros``, ``full_like``, ``normal_``) write their output and read nothing;
* gathers (``embedding``, ``index_select``, ``gather``, ``index``) read their indices and, of the source, only the
  elements they return; in-place scatters (``index_copy_``, ``index_put_``, ``scatter_``) write, and the
  accumulating ones also read, only the elements they scatter.

A tensor's bytes are ``numel * element_size``, on ``meta`` as on a real device. A tensor that is not strided (sparse,
nested) has no such figure: the call's bytes are unknown, and every total over it becomes a lower bound.

The compute dtype of a call is the dtype of its first floating-point (or complex) tensor argument, else of its first
such output: the dtype its arithmetic runs in (under ``autocast`` a matrix product's arguments are already cast).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterator
from typing import Any, Final

import torch

from .formulas.operators.calls import packets
from .formulas.operators.zero_work import ZERO_WORK_OPERATORS
from .values import dtype_name

#: The method label and unit of operator bytes in a report.
METHOD: Final = "operator_tensor_bytes"
UNIT: Final = "bytes"

#: Zero-work reasons whose operators move no bytes (views alias their input; metadata reads no tensor element).
BYTE_FREE_REASONS = frozenset({"view", "metadata", "bookkeeping"})
#: Allocations that leave their memory uninitialized, and storage metadata changes: no bytes.
UNINITIALIZED = frozenset(packets(["empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
                                   "new_empty_strided", "resize_", "resize_as_", "set_"]))
#: Operators that write their output (or overwrite a mutated argument) without reading any tensor element.
WRITE_ONLY = frozenset(packets([
    "zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "fill_", "zero_", "new_zeros", "new_ones",
    "new_full", "arange", "scalar_tensor", "fill", "eye", "linspace", "logspace", "_foreach_zero", "_foreach_zero_",
    "rand", "randn", "randint", "rand_like", "randn_like", "randint_like", "randperm", "uniform_", "normal_",
    "bernoulli_", "exponential_", "geometric_", "cauchy_", "log_normal_", "random_"]))
#: Operators whose mutated argument is overwritten, not read (a copy's destination).
OVERWRITES = frozenset(packets(["copy_", "_foreach_copy_"]))
#: Gathers: the first argument is read only as far as the output (the rows an embedding looks up).
GATHERS = frozenset(packets(["embedding", "index_select", "gather", "index", "_unsafe_index"]))
#: In-place scatters: the first argument is written only where values land; accumulating ones also read there.
SCATTERS = frozenset(packets(["index_copy_", "index_put_", "scatter_"]))
ACCUMULATING_SCATTERS = frozenset(packets(["index_add_", "scatter_add_", "scatter_reduce_"]))

#: How a schema argument counts: read, read and written (mutated), or written only.
READ, READ_WRITE, WRITE = 1, 2, 3
#: A call's bytes when some tensor has no ``numel * element_size`` figure (sparse, nested, symbolic sizes).
UNKNOWN: Final = None
#: Overload -> its `BytePlan` (weak: an operator library that goes away takes its plans with it).
_BYTE_PLANS: weakref.WeakKeyDictionary[Any, BytePlan] = weakref.WeakKeyDictionary()


def byte_plan(func: Any) -> BytePlan:
    """The `BytePlan` of overload ``func``: a function of its schema alone, so it is read once per process."""
    plan = _BYTE_PLANS.get(func)
    if plan is None:
        plan = _BYTE_PLANS[func] = BytePlan(func, func._overloadpacket)
    return plan


class BytePlan:
    """How the calls of one overload move bytes, read from its schema once: ``free`` (no bytes at all), or the
    role of each argument (by position and by keyword), which returns are created (written), which arguments the
    schema types as tensors (the generic rule reads only those), and the family rule (`WRITE_ONLY`, `GATHERS`,
    `SCATTERS`) that replaces the generic one."""

    __slots__ = ("__weakref__", "free", "fresh_returns", "keyword_roles", "keyword_tensors", "positional_tensors",
                 "roles", "rule")

    def __init__(self, func: Any, packet: Any) -> None:
        schema = func._schema
        arguments = schema.arguments
        self.roles = tuple(_role(argument, packet) for argument in arguments)
        self.keyword_roles = {argument.name: role for argument, role in zip(arguments, self.roles, strict=True)}
        # (position, times counted) of each tensor argument: a mutated one is read and written
        tensors = [(index, argument.name, 2 if role == READ_WRITE else 1)
                   for index, (argument, role) in enumerate(zip(arguments, self.roles, strict=True))
                   if "Tensor" in str(argument.type)]
        self.positional_tensors = tuple((index, times) for index, _, times in tensors)
        self.keyword_tensors = {name: times for _, name, times in tensors}
        self.fresh_returns = tuple(ret.alias_info is None for ret in schema.returns)
        self.free = _moves_nothing(schema, packet, self.roles)
        self.rule = _family_rule(packet)

    def bytes(self, args: tuple, kwargs: dict[str, Any], out: Any) -> int | None:
        """The bytes one call reads and writes (`UNKNOWN` when a tensor has no plain size)."""
        if self.free:
            return 0
        try:
            return self._bytes(args, kwargs, out)
        except _NoSize:
            return UNKNOWN

    def _bytes(self, args: tuple, kwargs: dict[str, Any], out: Any) -> int:
        written = 0
        if self.fresh_returns:
            returned = out if isinstance(out, tuple) and len(self.fresh_returns) > 1 else (out,)
            written = sum(_size(value) for fresh, value in zip(self.fresh_returns, returned, strict=False) if fresh)
        if self.rule is None:
            return written + self._generic_reads(args, kwargs)
        return self.rule(written, list(self._arguments(args, kwargs)))

    def _generic_reads(self, args: tuple, kwargs: dict[str, Any]) -> int:
        """The generic rule's argument bytes: each tensor argument read once, a mutated one read and written (plain
        loops over the schema's tensor arguments only: this runs for every new signature of every analysis)."""
        total, given = 0, len(args)
        for index, times in self.positional_tensors:
            if index < given:
                total += _size(args[index]) * times
        if kwargs:
            keyword_tensors = self.keyword_tensors
            for name, value in kwargs.items():
                counted = keyword_tensors.get(name)
                if counted is not None:
                    total += _size(value) * counted
        return total

    def _arguments(self, args: tuple, kwargs: dict[str, Any]) -> Iterator[tuple[int, Any]]:
        """``(role, tensor)`` of every tensor argument (inside lists too), positional then keyword."""
        roles = self.roles
        for index, value in enumerate(args):
            role = roles[index] if index < len(roles) else READ
            yield from _tensors(role, value)
        for name, value in kwargs.items():
            yield from _tensors(self.keyword_roles.get(name, READ), value)


def _moves_nothing(schema: Any, packet: Any, roles: tuple[int, ...]) -> bool:
    """A view (every tensor return aliases an argument it does not write), a metadata query, an uninitialized
    allocation."""
    views = bool(schema.returns) and all(ret.alias_info is not None and not ret.alias_info.is_write
                                         for ret in schema.returns)
    return (ZERO_WORK_OPERATORS.get(packet) in BYTE_FREE_REASONS or packet in UNINITIALIZED
            or (views and all(role == READ for role in roles)))


def _family_rule(packet: Any) -> Callable[[int, list[tuple[int, Any]]], int] | None:
    """The family rule that replaces the generic one, if any."""
    for family, rule in ((WRITE_ONLY, _write_only), (GATHERS, _gather), (SCATTERS, _scatter),
                         (ACCUMULATING_SCATTERS, functools.partial(_scatter, reads_target=True))):
        if packet in family:
            return rule
    return None


def _write_only(written: int, arguments: list[tuple[int, Any]]) -> int:
    """Fills: what is created or overwritten, nothing read."""
    return written + sum(_size(value) for role, value in arguments if role != READ)


def _gather(written: int, arguments: list[tuple[int, Any]]) -> int:
    """The source (first argument) read as far as the output; the indices in full; the output written."""
    return written * 2 + sum(_size(value) for _, value in arguments[1:])


def _scatter(written: int, arguments: list[tuple[int, Any]], reads_target: bool = False) -> int:
    """The target (first argument) written where the values land (and read there too when accumulating); indices
    and values read."""
    target, others = arguments[0][1], [value for _, value in arguments[1:]]
    return sum(map(_size, others)) + _scattered(target, others) * (2 if reads_target else 1)


def _role(argument: Any, packet: Any) -> int:
    info = argument.alias_info
    if info is None or not info.is_write:
        return READ
    if getattr(argument, "is_out", False) or packet in OVERWRITES or packet in WRITE_ONLY:
        return WRITE
    return READ_WRITE


def _tensors(role: int, value: Any) -> Iterator[tuple[int, Any]]:
    if isinstance(value, torch.Tensor):
        yield role, value
    elif isinstance(value, (list, tuple)):
        for item in value:
            if isinstance(item, torch.Tensor):
                yield role, item


class _NoSize(Exception):
    """A tensor without a plain ``numel * element_size`` (sparse, nested, symbolic)."""


def _size(value: Any) -> int:
    """``numel * element_size`` of a strided tensor (0 for anything that is not a tensor)."""
    if isinstance(value, torch.Tensor):
        if value.layout is not torch.strided or value.is_nested:
            raise _NoSize
        try:
            nbytes = value.nbytes
        except (TypeError, RuntimeError, ValueError):  # a size without a value
            raise _NoSize from None
        if type(nbytes) is not int:  # a symbolic size
            raise _NoSize
        return nbytes
    return sum(map(_size, value)) if isinstance(value, (list, tuple)) else 0


def _scattered(target: Any, others: list[Any]) -> int:
    """The bytes of the target that a scatter writes: its values' size (a tensor of the target's dtype), else as many
    elements of the target as the index has (a scalar scattered)."""
    if not isinstance(target, torch.Tensor):
        return 0
    floating = [value for value in others if value.dtype == target.dtype]
    if floating:
        return _size(floating[-1])
    if others:
        index = others[-1]
        _size(index)
        return int(index.numel()) * target.element_size()
    return 0


def compute_dtype(args: tuple, kwargs: dict[str, Any], out: Any) -> str | None:
    """The dtype a call's arithmetic runs in: its first floating-point (or complex) tensor argument's, else its first
    such output's; ``None`` when it has none (integer or boolean work)."""
    for value in (*args, *kwargs.values(), out):
        if isinstance(value, torch.Tensor):
            if value.is_floating_point() or value.is_complex():
                return dtype_name(value.dtype)
        elif isinstance(value, (list, tuple)):
            for item in value:
                if isinstance(item, torch.Tensor) and (item.is_floating_point() or item.is_complex()):
                    return dtype_name(item.dtype)
    return None
