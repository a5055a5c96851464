"""Per-analysis memo of operator formulas: each distinct call signature is priced once.

A FLOP formula is a function of what it reads from a call. TorchScan's built-in formulas and functional estimates
read only shapes, dtypes, nestedness and non-tensor arguments, and PyTorch's shape-wrapped formulas (the
``FlopCounterMode`` contract that ``custom_mapping`` follows) receive nothing else. So the outcome of one call is
the outcome of every call with the same *signature*: the overload, every argument's shape and dtype (tensors) or
type and value (scalars, strings, dtypes, devices, nested lists and tuples), and the same of the output (an operator
such as ``nonzero`` has an output shape its inputs do not determine). Repeated blocks (ResNet stages, Transformer
layers, the 80 layers of a 70B model) hit the same signatures.

Calls are priced directly, every time, when their signature cannot be read reliably: a nested tensor (its sizes
are data), an argument of any other type, or a *raw* formula (``_get_raw``: PyTorch's and callers' raw formulas
receive the tensors themselves and may read anything in them). A memo belongs to one analysis, so a caller's
formula never answers for another analysis.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch.utils import flop_counter

from .formulas.operators.functional import FUNCTIONAL_ESTIMATES
from .formulas.operators.table import OPERATOR_FORMULAS, ZERO_WORK_OPERATORS
from .operator_bytes import byte_plan, compute_dtype
from .results import is_count
from .values import Unkeyable, call_key

COUNTED, IGNORED, UNCOUNTED = "counted", "ignored", "uncounted"
#: A memo stops growing here (a model calling an operator with ever-new float arguments must not grow it forever).
MAX_SIGNATURES = 1 << 16

_BUILTIN_FORMULAS = frozenset(id(formula) for formula in OPERATOR_FORMULAS.values())
_SHAPE_WRAPPED_CODE = flop_counter.shape_wrapper(lambda: 0).__code__


def signature(func: Any, args: tuple, kwargs: Mapping[str, Any], out: Any) -> tuple | None:
    """The call's signature (see the module docstring), or ``None`` when some argument has none: the overload, the
    argument count and keyword names (they fix where each value's run starts), then `torchscan.values.call_key` of
    the arguments and the output."""
    try:
        key = call_key((*args, *kwargs.values(), out) if kwargs else (*args, out))
    except Unkeyable:
        return None
    return id(func), len(args), tuple(kwargs), *key


class Outcome:
    """What calls with one signature contribute: their operator's packet, how they count, FLOPs and bytes per call
    (`torchscan.operator_bytes`), and the dtype they compute in.

    ``key`` is the signature (``None``: priced directly); ``work`` caches the signature's functional estimate;
    ``calls`` counts the calls with this outcome, from which the model's operator totals are read at the end.
    ``bytes`` is 0 with ``bytes_unknown`` when some tensor has no plain size; ``incomplete`` says whether either
    figure is a lower bound (one test per call in the recorder)."""

    __slots__ = ("bytes", "bytes_unknown", "calls", "dtype", "flops", "incomplete", "key", "kind", "packet",
                 "uncounted", "work")

    def __init__(self, packet: Any, kind: str, flops: float = 0, key: tuple | None = None,
                 nbytes: int | None = 0, dtype: str | None = None) -> None:
        self.packet = packet
        self.kind = kind
        self.uncounted = kind == UNCOUNTED  # its calls make their scope's FLOPs a lower bound
        self.flops = flops
        self.bytes_unknown = nbytes is None  # its calls make their scope's bytes a lower bound
        self.bytes = 0 if nbytes is None else nbytes
        self.incomplete = self.uncounted or self.bytes_unknown
        self.dtype = dtype
        self.key = key
        self.calls = 0
        self.work: Any = _NOT_ESTIMATED


_NOT_ESTIMATED = object()


class Plan:
    """How calls of one overload are priced: a fixed outcome (no formula and no bytes: a view), or per signature by
    its formula (or its fixed kind, ``IGNORED`` or ``UNCOUNTED``, when it has none) and its byte plan."""

    __slots__ = ("bytes", "estimator", "fixed", "formula", "func", "kind", "memoized", "packet", "run")

    def __init__(self, func: Any, packet: Any, formula: Callable[..., Any] | None, kind: str) -> None:
        self.func = func  # held, so that the id() in signatures stays this overload's for the memo's life
        self.run = _runner(func)
        self.packet = packet
        self.formula = formula
        self.kind = kind  # the kind of every call when there is no formula
        # the byte rules read shapes and dtypes only, so calls without a formula are priced by signature too
        self.memoized = formula is None or id(formula) in _BUILTIN_FORMULAS or _shape_wrapped(formula)
        self.bytes = byte_plan(func)
        self.fixed: Outcome | None = None  # set by the cache for calls that need no pricing at all
        self.estimator = FUNCTIONAL_ESTIMATES.get(packet)


def _runner(func: Any) -> Callable[..., Any]:
    """What calling the overload runs: a plain ``OpOverload``'s ``__call__`` only forwards to its ``_op``, so the
    recorder calls that directly (one Python frame less per operator); subclasses keep their own ``__call__``."""
    if type(func) is torch._ops.OpOverload and type(func).__call__ is _PLAIN_CALL:
        return func._op
    return func


_PLAIN_CALL = torch._ops.OpOverload.__call__


def _shape_wrapped(formula: Callable[..., Any]) -> bool:
    """PyTorch's ``shape_wrapper`` output: the formula receives shapes and non-tensor arguments only."""
    return isinstance(formula, types.FunctionType) and formula.__code__ is _SHAPE_WRAPPED_CODE


class FormulaCache:
    """One analysis's operator pricing: overload plans, outcomes by signature, and what went wrong.

    Every outcome a call can be counted under is made here, once, and listed in ``counted_under`` (the recorder
    counts calls on them; signature holders of functional estimates are never counted and are not listed)."""

    def __init__(self, formulas: Mapping[Any, Callable[..., Any]]) -> None:
        self.formulas = formulas
        self.plans: dict[int, Plan] = {}  # id(overload) -> plan
        self.counted_under: list[Outcome] = []
        self.outcomes: dict[tuple, Outcome] = {}
        self.by_signature: dict[tuple, Outcome] = {}  # holders of functional estimates of signature-free outcomes
        self.interned: dict[tuple, Outcome] = {}  # outcomes of calls priced directly, shared by equal results
        self.formula_errors: dict[Any, str] = {}  # packet -> type of the first exception its formula raised
        self.declined: set[Any] = set()  # packets whose formula had no convention for some call

    def plan(self, func: Any) -> Plan:
        """The plan of overload ``func`` (built on its first call)."""
        plan = self.plans.get(id(func))
        if plan is None:
            packet = func._overloadpacket
            formula = self.formulas.get(packet)
            kind = COUNTED if formula is not None else IGNORED if packet in ZERO_WORK_OPERATORS else UNCOUNTED
            plan = Plan(func, packet, formula, kind)
            if formula is None and plan.bytes.free:  # a view or a metadata query: one outcome for every call
                plan.fixed = self._listed(Outcome(packet, kind))
            self.plans[id(func)] = plan
        return plan

    def outcome(self, plan: Plan, args: tuple, kwargs: dict, out: Any) -> Outcome:
        """The outcome of one call of a formulated operator: memoized by signature where that is sound."""
        key = signature(plan.func, args, kwargs, out) if plan.memoized else None
        try:
            found = None if key is None else self.outcomes.get(key)
        except TypeError:  # a symbolic size in the shape: unhashable
            key = found = None
        if found is not None:
            return found
        kind, flops = self._evaluate(plan, args, kwargs, out)
        nbytes, dtype = plan.bytes.bytes(args, kwargs, out), compute_dtype(args, kwargs, out)
        if key is None or len(self.outcomes) >= MAX_SIGNATURES:  # priced, and shared by equal results only
            return self._intern(plan.packet, kind, flops, nbytes, dtype)
        found = self.outcomes[key] = self._listed(Outcome(plan.packet, kind, flops, key, nbytes, dtype))
        return found

    def _listed(self, outcome: Outcome) -> Outcome:
        self.counted_under.append(outcome)
        return outcome

    def _evaluate(self, plan: Plan, args: tuple, kwargs: dict, out: Any) -> tuple[str, int | float]:
        # Inside __torch_dispatch__ the mode is off, so a formula's own tensor work is never counted.
        if plan.formula is None:
            return plan.kind, 0
        try:
            flops = plan.formula(*args, **kwargs, out_val=out)
            if flops is not None and not (type(flops) is int and flops >= 0) and not is_count(flops):
                raise ValueError("a FLOP formula must return a finite non-negative number or None")
        except Exception as error:  # noqa: BLE001 -- a broken formula must not break the model's forward
            self.formula_errors.setdefault(plan.packet, type(error).__name__)
            flops = None
        if flops is None:  # no stated convention for this call (a dtype, a mode): uncounted, never zero
            self.declined.add(plan.packet)
            return UNCOUNTED, 0
        return COUNTED, flops

    def _intern(self, packet: Any, kind: str, flops: float, nbytes: int | None, dtype: str | None) -> Outcome:
        key = (id(packet), kind, type(flops), flops, nbytes, dtype)
        found = self.interned.get(key)
        if found is None:
            found = self.interned[key] = self._listed(Outcome(packet, kind, flops, None, nbytes, dtype))
        return found

    def uncounted(self, operator: Any) -> Outcome:
        """The outcome of an operator that ran unobserved (a higher-order operator other than ``cond``): neither
        its FLOPs nor its bytes are known."""
        return self._intern(operator, UNCOUNTED, 0, None, None)

    def functional_estimate(self, plan: Plan, outcome: Outcome, args: tuple, kwargs: dict, out: Any) -> Any:
        """The module-view ``(flops, macs, dmas)`` of one call (``None``: no estimate), memoized by signature.

        Functional estimators are built-ins: a signature determines them even where the operator's FLOP formula is
        raw, so calls whose outcome is shared by all signatures look theirs up separately.
        """
        estimator = plan.estimator
        if estimator is None:
            return None
        holder = outcome if outcome.key is not None else self._signature_holder(plan, args, kwargs, out)
        if holder is None:
            return estimator(args, kwargs, out)
        if holder.work is _NOT_ESTIMATED:
            holder.work = estimator(args, kwargs, out)
        return holder.work

    def _signature_holder(self, plan: Plan, args: tuple, kwargs: dict, out: Any) -> Outcome | None:
        key = signature(plan.func, args, kwargs, out)
        if key is None:
            return None
        try:
            holder = self.by_signature.get(key)
        except TypeError:  # a symbolic size in the shape: unhashable
            return None
        if holder is None and len(self.by_signature) < MAX_SIGNATURES:
            holder = self.by_signature[key] = Outcome(plan.packet, UNCOUNTED, key=key)
        return holder
