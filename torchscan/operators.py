"""Operator FLOPs observed through PyTorch dispatch, and ``measure_flops`` for owner-controlled workloads.

`OperatorRecorder` is a lean ``TorchDispatchMode``: for each dispatched operator it looks up the outcome of the
call's signature (priced by the formula of its overload packet on first sight, see `.operator_cache`) and adds it
to the active `OperatorScope` (the module call that is running): counted, ignored (zero-work) or uncounted.
Formulas follow PyTorch's ``FlopCounterMode`` contract, so a caller's ``custom_mapping`` is written exactly as for
PyTorch.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NamedTuple, Protocol

import torch
from torch._ops import HigherOrderOperator
from torch.utils import flop_counter
from torch.utils._python_dispatch import TorchDispatchMode

from .diagnostics import Diagnostic, Severity, diagnostic
from .direct_work import DirectWork
from .formulas.operators.table import OPERATOR_FORMULAS, ZERO_WORK_OPERATORS, operator_significance
from .operator_bytes import METHOD as BYTES_METHOD
from .operator_bytes import UNIT as BYTES_UNIT
from .operator_cache import COUNTED, IGNORED, UNCOUNTED, FormulaCache, Outcome
from .results import (
    DIRECT,
    INCLUSIVE,
    MODEL,
    OPERATOR_DISPATCH,
    MetricResult,
    Scope,
    complete,
    is_incomplete,
    lower_bound,
    plain_number,
)

UNIT = "FLOPs"
HIGHER_ORDER_PREFIX = "higher_order."


def operator_name(packet: Any) -> str:
    """``aten.mm`` for ``torch.ops.aten.mm`` (``higher_order.cond`` for a higher-order operator): stable names."""
    if isinstance(packet, HigherOrderOperator):
        return f"{HIGHER_ORDER_PREFIX}{packet.name()}"
    name = getattr(packet, "_qualified_op_name", None)
    return name.replace("::", ".") if name else str(packet)


def validate_custom_mapping(custom_mapping: Any) -> dict[Any, Callable[..., Any]]:
    """Check operator formulas before the model runs: packets (not overloads) mapped to callables."""
    if custom_mapping is None:
        return {}
    if not isinstance(custom_mapping, Mapping):
        raise TypeError(f"custom_mapping must be a mapping of operator packets (such as torch.ops.aten.sin) to "
                        f"formulas, got {type(custom_mapping).__name__}")
    for key, formula in custom_mapping.items():
        if isinstance(key, torch._ops.OpOverload):
            raise TypeError(f"custom_mapping keys must be operator packets such as {operator_name(key.overloadpacket)}"
                            f", not overloads such as {key}; use torch.ops.{operator_name(key.overloadpacket)}")
        if not isinstance(key, torch._ops.OpOverloadPacket):
            raise TypeError(f"custom_mapping keys must be operator packets such as torch.ops.aten.sin, "
                            f"got {type(key).__name__}")
        if not callable(formula):
            raise TypeError(f"custom_mapping[{operator_name(key)}] must be a callable formula, "
                            f"got {type(formula).__name__}")
    return dict(custom_mapping)


def build_formula_table(custom_mapping: Mapping[Any, Callable[..., Any]]) -> dict[Any, Callable[..., Any]]:
    """PyTorch's registry, under TorchScan's built-ins, under the caller's formulas (shape-wrapped as PyTorch does)."""
    caller = {packet: formula if getattr(formula, "_get_raw", False) else flop_counter.shape_wrapper(formula)
              for packet, formula in custom_mapping.items()}
    return {**flop_counter.flop_registry, **OPERATOR_FORMULAS, **caller}


class OperatorScope:
    """The operator FLOPs and bytes of one module call (or of everything outside any call), of the operators run
    directly in it and under it (its closed descendants' included), and whether some went uncounted or had unknown
    bytes (the figure is then a lower bound). Calls by operator are counted once per analysis, on the outcomes."""

    __slots__ = ("bytes", "bytes_unknown", "direct_work", "flops", "inclusive_bytes", "inclusive_bytes_unknown",
                 "inclusive_flops", "inclusive_uncounted", "uncounted")

    def __init__(self, direct_work: DirectWork | None = None) -> None:
        self.flops: int | float = 0
        self.uncounted = False
        self.bytes = 0
        self.bytes_unknown = False
        self.inclusive_flops: int | float = 0  # of closed descendants, until `close` adds the direct FLOPs
        self.inclusive_uncounted = False
        self.inclusive_bytes = 0  # the same of bytes
        self.inclusive_bytes_unknown = False
        self.direct_work = direct_work  # a DirectWork when the module view estimates this call's own operators

    def add(self, outcome: Outcome) -> None:
        """One call with ``outcome``: its FLOPs and bytes here, the call on the outcome."""
        self.flops += outcome.flops
        self.bytes += outcome.bytes
        outcome.calls += 1
        if outcome.incomplete:
            if outcome.uncounted:
                self.uncounted = True
            if outcome.bytes_unknown:
                self.bytes_unknown = True

    def close(self, parent: OperatorScope | None) -> None:
        """End the call: the inclusive figures take in the direct ones and also count for ``parent``. The scope is
        final from here on; its results are built with the record (`results`), after the forward."""
        self.inclusive_flops += self.flops
        self.inclusive_uncounted = self.inclusive_uncounted or self.uncounted
        self.inclusive_bytes += self.bytes
        self.inclusive_bytes_unknown = self.inclusive_bytes_unknown or self.bytes_unknown
        if parent is not None:
            parent.inclusive_flops += self.inclusive_flops
            parent.inclusive_uncounted = parent.inclusive_uncounted or self.inclusive_uncounted
            parent.inclusive_bytes += self.inclusive_bytes
            parent.inclusive_bytes_unknown = parent.inclusive_bytes_unknown or self.inclusive_bytes_unknown

    def results(self) -> tuple[dict[str, MetricResult], dict[str, MetricResult]]:
        """A closed call's operator FLOPs and operator bytes, each ``direct`` (the operators run in the call outside
        any child call) and ``inclusive`` (the call and everything under it)."""
        return ({DIRECT: flops_result(self.flops, DIRECT, self.uncounted),
                 INCLUSIVE: flops_result(self.inclusive_flops, INCLUSIVE, self.inclusive_uncounted)},
                {DIRECT: bytes_result(self.bytes, DIRECT, self.bytes_unknown),
                 INCLUSIVE: bytes_result(self.inclusive_bytes, INCLUSIVE, self.inclusive_bytes_unknown)})


class OperatorCount(NamedTuple):
    """The calls of one operator that its formula priced, and their FLOPs."""

    calls: int
    flops: int | float


NO_CALLS = OperatorCount(0, 0)


class OperatorTotals:
    """What every call counted in one recorder adds up to, by operator: read from its outcomes after the run."""

    __slots__ = ("outcomes",)

    def __init__(self, outcomes: list[Outcome]) -> None:
        self.outcomes = [outcome for outcome in outcomes if outcome.calls]

    @property
    def counted(self) -> dict[Any, OperatorCount]:
        """packet -> the calls its formula priced, and their FLOPs."""
        rows: dict[Any, OperatorCount] = {}
        for outcome in self.outcomes:
            if outcome.kind == COUNTED:
                calls, row = outcome.calls, rows.get(outcome.packet, NO_CALLS)
                rows[outcome.packet] = OperatorCount(row.calls + calls, row.flops + calls * outcome.flops)
        return rows

    def calls_of(self, kind: str) -> dict[Any, int]:
        """packet -> calls of one kind: ``IGNORED`` (operators that do no floating-point work) or ``UNCOUNTED``
        (calls that no formula priced: none exists, it declined, or it failed)."""
        rows: dict[Any, int] = {}
        for outcome in self.outcomes:
            if outcome.kind == kind:
                rows[outcome.packet] = rows.get(outcome.packet, 0) + outcome.calls
        return rows

    def result(self, scope: Scope) -> MetricResult:
        """The FLOPs every call's formula priced: a lower bound when some call was uncounted."""
        return flops_result(sum(outcome.calls * outcome.flops for outcome in self.outcomes), scope,
                            any(outcome.uncounted for outcome in self.outcomes))

    def bytes_result(self, scope: Scope) -> MetricResult:
        """The bytes every call read and wrote: a lower bound when some call's bytes are unknown."""
        return bytes_result(sum(outcome.calls * outcome.bytes for outcome in self.outcomes), scope,
                            any(outcome.bytes_unknown for outcome in self.outcomes))

    def by_operator_and_dtype(self) -> dict[tuple[Any, str | None], list[Outcome]]:
        """(packet, compute dtype) -> the outcomes of its calls."""
        rows: dict[tuple[Any, str | None], list[Outcome]] = {}
        for outcome in self.outcomes:
            rows.setdefault((outcome.packet, outcome.dtype), []).append(outcome)
        return rows


def flops_result(flops: float, scope: Scope, partial: bool) -> MetricResult:
    """Counted operator FLOPs as a result: a lower bound when ``partial`` (some operator was uncounted)."""
    value = flops if type(flops) is int else plain_number(flops)  # most counts are ints already
    return (lower_bound if partial else complete)(value, UNIT, scope, OPERATOR_DISPATCH)


def bytes_result(nbytes: int, scope: Scope, partial: bool) -> MetricResult:
    """Operator bytes as a result: a lower bound when ``partial`` (some operator's bytes were unknown)."""
    return (lower_bound if partial else complete)(nbytes, BYTES_UNIT, scope, BYTES_METHOD)


class _Pause:
    """The context of `OperatorRecorder.paused`: counting stops inside, and resumes when the outermost pause ends.

    It holds its depth, not the recorder (that would be a reference cycle, which keeps a whole analysis's caches
    alive until the cyclic collector runs)."""

    __slots__ = ("depth",)

    def __init__(self) -> None:
        self.depth = 0

    def __enter__(self) -> None:
        self.depth += 1

    def __exit__(self, *exc_info: object) -> None:
        self.depth -= 1


class OperatorListener(Protocol):
    """A feature that follows the operators a recorder counts (the memory timeline)."""

    def record(self, func: Any, args: tuple, kwargs: dict[str, Any], out: Any) -> None:
        """One dispatched operator and its result."""


class OperatorRecorder(TorchDispatchMode):
    """Counts every dispatched operator into the active scope (the innermost module call entered, else the root),
    and into its ``direct_work``, if any, for the module view's estimate of the call's own operators."""

    supports_higher_order_operators = True

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # PyTorch would otherwise wrap __torch_dispatch__ to import torch._dynamo on first use (about a second).
        return False

    def __init__(self, formulas: Mapping[Any, Callable[..., Any]]) -> None:
        super().__init__()
        self.cache = FormulaCache(formulas)
        self.scopes: list[OperatorScope] = [OperatorScope()]  # the root, then one scope per open call
        self._pause = _Pause()
        #: Told of every counted operator (``record(func, args, kwargs, out)``): the memory timeline, and any
        #: feature that follows operators (`listening`); the innermost open call is the tracer's.
        self.listeners: list[OperatorListener] = []

    @property
    def root(self) -> OperatorScope:
        """The scope of everything that ran outside any entered scope (`totals` counts every scope's calls)."""
        return self.scopes[0]

    def totals(self) -> OperatorTotals:
        """Every call counted so far, in any scope, by operator."""
        return OperatorTotals(self.cache.counted_under)

    def enter(self, scope: OperatorScope) -> None:
        """Count the operators that follow into ``scope`` until the matching `leave`."""
        self.scopes.append(scope)

    def leave(self) -> OperatorScope:
        """Close the innermost entered scope and return it; the root cannot be left."""
        if len(self.scopes) == 1:
            raise RuntimeError("OperatorRecorder.leave() without a matching enter(): only the root scope is open")
        return self.scopes.pop()

    @contextmanager
    def listening(self, listener: OperatorListener | None) -> Iterator[None]:
        """``listener`` is told of every operator counted inside the block (None: nothing is added)."""
        if listener is None:
            yield
            return
        self.listeners.append(listener)
        try:
            yield
        finally:
            self.listeners.remove(listener)

    def paused(self) -> _Pause:
        """A context in which nothing is counted (module estimates run there); pauses may nest."""
        return self._pause

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict[str, Any] | None = None
                           ) -> Any:
        kwargs = kwargs or {}
        cache = self.cache
        plan = cache.plans.get(id(func))
        if plan is None:  # first call of this overload (or a higher-order operator, which is never planned)
            if isinstance(func, HigherOrderOperator):
                return self._higher_order(func, args, kwargs)
            plan = cache.plan(func)
        out = plan.run(*args, **kwargs)
        if self._pause.depth:
            return out
        if self.listeners:
            for listener in self.listeners:
                listener.record(func, args, kwargs, out)
        outcome = plan.fixed or cache.outcome(plan, args, kwargs, out)
        scope = self.scopes[-1]
        scope.add(outcome)
        work = scope.direct_work
        if work is not None:
            work.add_estimate(plan.packet, cache.functional_estimate(plan, outcome, args, kwargs, out), out)
        return out

    def _higher_order(self, func: HigherOrderOperator, args: tuple, kwargs: dict) -> Any:
        """``torch.cond`` runs its taken branch under this mode, so its operators count as executed; any other
        higher-order operator runs unobserved and is listed as uncounted (never as zero work)."""
        if func is torch.ops.higher_order.cond and not self._pause.depth:
            predicate, true_branch, false_branch, operands = args
            if not (isinstance(predicate, torch.Tensor) and predicate.device.type == "meta"):
                with self:
                    return (true_branch if bool(predicate) else false_branch)(*operands)
        out = func(*args, **kwargs)
        if not self._pause.depth:
            scope = self.scopes[-1]
            scope.add(self.cache.uncounted(func))
            if scope.direct_work is not None:
                scope.direct_work.add_unestimated(func)
        return out


def operator_report(total: OperatorTotals, custom_mapping: Mapping[Any, Any], recorder: OperatorRecorder
                    ) -> tuple[dict[str, Any], list[Diagnostic]]:
    """The report's ``operator_flops`` section and its diagnostics, sorted by operator name."""
    section: dict[str, Any] = {
        "total": total.result(MODEL),
        "by_operator": sorted(({"operator": operator_name(p), "calls": row.calls, "flops": plain_number(row.flops)}
                               for p, row in total.counted.items()), key=lambda row: row["operator"]),
        "uncounted": sorted(({"operator": operator_name(p), "calls": c, "significance": operator_significance(p)}
                             for p, c in total.calls_of(UNCOUNTED).items()), key=lambda row: row["operator"]),
        "ignored": sorted(({"operator": operator_name(p), "calls": c, "reason": ZERO_WORK_OPERATORS[p]}
                           for p, c in total.calls_of(IGNORED).items()), key=lambda row: row["operator"]),
        "custom_formulas": sorted(operator_name(p) for p in custom_mapping),
    }
    errors = {operator_name(packet): error for packet, error in recorder.cache.formula_errors.items()}
    declined = {operator_name(packet) for packet in recorder.cache.declined}
    return section, [_uncounted_diagnostic(row, errors, declined) for row in section["uncounted"]]


def bytes_report(total: OperatorTotals) -> dict[str, Any]:
    """The report's ``operator_bytes`` section: the unfused model's bytes (`torchscan.operator_bytes`), and one row
    per operator and compute dtype with the calls, FLOPs and bytes of those calls (a roofline point per row), sorted
    by operator name then dtype. Operators that moved no bytes and did no work (views) have no row."""
    rows = []
    for (packet, dtype), outcomes in total.by_operator_and_dtype().items():
        group = OperatorTotals(outcomes)
        flops, nbytes = group.result(MODEL), group.bytes_result(MODEL)
        if flops["known_value"] or nbytes["known_value"] or is_incomplete(flops) or is_incomplete(nbytes):
            rows.append({"operator": operator_name(packet), "dtype": dtype,
                         "calls": sum(outcome.calls for outcome in outcomes), "flops": flops, "bytes": nbytes})
    rows.sort(key=lambda row: (row["operator"], row["dtype"] or ""))
    return {"method": BYTES_METHOD, "convention": "unfused", "total": total.bytes_result(MODEL), "by_operator": rows}


NOT_REQUESTED_BYTES = {"method": BYTES_METHOD, "convention": "unfused", "by_operator": []}


def _uncounted_diagnostic(row: dict[str, Any], errors: dict[str, str], declined: set[str]) -> Diagnostic:
    """Why one operator's calls are uncounted: its formula failed, declined some calls, it has no formula, or it is
    a higher-order operator whose inner work was not observed."""
    name, calls = row["operator"], row["calls"]
    if name in errors:
        return diagnostic("operator_formula_error", f"the FLOP formula of {name} failed ({errors[name]}); its "
                          f"{calls} call(s) are not counted", metric="operator_flops", operator=name)
    significant = row["significance"] == "significant"
    severity: Severity = "error" if significant else "warning"
    if name.startswith(HIGHER_ORDER_PREFIX):
        return diagnostic("higher_order_operator", f"{name} ran {calls} time(s) with the work inside it unobserved; "
                          "the operator FLOPs are a lower bound", metric="operator_flops", severity=severity,
                          operator=name)
    reason = ("with a formula that has no convention for some of these calls (dtype, layout or mode)"
              if name in declined else "without a FLOP formula")
    return diagnostic(
        "uncounted_operator", f"{name} ran {calls} uncounted time(s), {reason}"
        + (" (significant work such as a matmul, convolution or attention kernel)" if significant else "")
        + f"; to count it, pass a formula for it in custom_mapping={{torch.ops.{name}: formula}}",
        metric="operator_flops", severity=severity, operator=name)


class CompileSafeRecorder(OperatorRecorder):
    """The recorder PyTorch's compiler steps over through the wrapper PyTorch puts around ``__torch_dispatch__``
    (a few microseconds per operator): the fallback for a torch without per-code frame strategies."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return True

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict[str, Any] | None = None
                           ) -> Any:
        return OperatorRecorder.__torch_dispatch__(self, func, types, args, kwargs)


def new_recorder(formulas: Mapping[Any, Callable[..., Any]]) -> OperatorRecorder:
    """A recorder for one analysis. ``torch.cond`` compiles its branches, so once ``torch._dynamo`` is imported the
    compiler must step over ``__torch_dispatch__``: marked once where this torch allows, else wrapped per operator."""
    if "torch._dynamo" in sys.modules and not _skipped_by_the_compiler():
        return CompileSafeRecorder(formulas)
    return OperatorRecorder(formulas)


@functools.cache
def _skipped_by_the_compiler() -> bool:
    """Mark ``OperatorRecorder.__torch_dispatch__`` so that the compiler skips it and its callees; False when this
    torch has no way to."""
    try:
        from torch._dynamo.eval_frame import set_code_exec_strategy
        from torch._dynamo.types import FrameAction, FrameExecStrategy

        set_code_exec_strategy(OperatorRecorder.__torch_dispatch__.__code__,
                               FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP))
    except (ImportError, AttributeError, TypeError, RuntimeError):
        return False
    return True


def measure_flops(workload: Callable[[], Any], *, custom_mapping: Mapping[Any, Callable[..., Any]] | None = None
                  ) -> dict[str, Any]:
    """Count the operator FLOPs of ``workload()`` (a training step, a generate loop, any callable).

    Nothing about the workload is changed: no eval mode, no ``no_grad``, no seeding. Returns the operator report
    (``total`` as a MetricResult, per-operator rows, uncounted and ignored operators) plus its ``diagnostics``.
    """
    if not callable(workload):
        raise TypeError(f"workload must be a callable taking no arguments, got {type(workload).__name__}")
    mapping = validate_custom_mapping(custom_mapping)
    recorder = new_recorder(build_formula_table(mapping))
    with recorder:
        workload()
    section, diagnostics = operator_report(recorder.totals(), mapping, recorder)
    section["diagnostics"] = diagnostics
    return section
