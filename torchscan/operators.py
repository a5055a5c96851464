"""Operator FLOPs observed through PyTorch dispatch, and ``measure_flops`` for owner-controlled workloads.

`OperatorRecorder` is a lean ``TorchDispatchMode``: for each dispatched operator it looks up the formula of
its overload packet, adds the count to the active `OperatorScope` (the module call that is running), and
otherwise files the operator as ignored (zero-work) or uncounted. Formulas follow PyTorch's ``FlopCounterMode``
contract, so a caller's ``custom_mapping`` is written exactly as for PyTorch.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch._ops import HigherOrderOperator
from torch.utils import flop_counter
from torch.utils._python_dispatch import TorchDispatchMode

from .diagnostics import Diagnostic, diagnostic
from .formulas.operators.table import OPERATOR_FORMULAS, ZERO_WORK_OPERATORS, operator_significance
from .results import MODEL, MetricResult, complete, is_count, lower_bound, plain_number

UNIT = "FLOPs"
METHOD = "operator_dispatch"
OpPacket = torch._ops.OpOverloadPacket


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
        if not isinstance(key, OpPacket):
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
    """Operator counts of one module call (or of a whole workload): FLOPs by operator, ignored and uncounted."""

    __slots__ = ("counted", "direct_work", "flops", "ignored", "uncounted")

    def __init__(self) -> None:
        self.flops = 0
        self.direct_work: Any = None  # a DirectWork when the module view estimates this call's own operators
        self.counted: dict[Any, list] = {}  # packet -> [calls, flops]
        self.ignored: dict[Any, int] = {}
        self.uncounted: dict[Any, int] = {}

    def result(self, scope: str) -> MetricResult:
        if self.uncounted:
            return lower_bound(plain_number(self.flops), UNIT, scope, METHOD)
        return complete(plain_number(self.flops), UNIT, scope, METHOD)

    def merge(self, other: OperatorScope) -> None:
        self.flops += other.flops
        for packet, (calls, flops) in other.counted.items():
            entry = self.counted.setdefault(packet, [0, 0])
            entry[0] += calls
            entry[1] += flops
        for packet, calls in other.ignored.items():
            self.ignored[packet] = self.ignored.get(packet, 0) + calls
        for packet, calls in other.uncounted.items():
            self.uncounted[packet] = self.uncounted.get(packet, 0) + calls


class _Pause:
    """The context of `OperatorRecorder.paused`: counting stops inside, and resumes when the outermost pause ends."""

    __slots__ = ("depth", "recorder")

    def __init__(self, recorder: OperatorRecorder) -> None:
        self.recorder = recorder
        self.depth = 0

    def __enter__(self) -> None:
        self.depth += 1
        self.recorder.suspended = True

    def __exit__(self, *exc_info: object) -> None:
        self.depth -= 1
        self.recorder.suspended = self.depth > 0


class OperatorRecorder(TorchDispatchMode):
    """Counts every dispatched operator into the active scope: the innermost module call entered, else the root.

    The recorder owns its stack of scopes: `enter` a module call's scope when the call starts, `leave` it when the
    call ends, and run estimates inside `paused` so that their own tensor work is not counted. A scope with a
    ``direct_work`` accumulator also feeds it each operator, so the module view can estimate work that a module
    performs directly.
    """

    supports_higher_order_operators = True

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # PyTorch would otherwise wrap __torch_dispatch__ to import torch._dynamo on first use (about a second).
        return False

    def __init__(self, formulas: Mapping[Any, Callable[..., Any]], root: OperatorScope | None = None) -> None:
        super().__init__()
        self.formulas = formulas
        self.scopes: list[OperatorScope] = [root or OperatorScope()]  # the root, then one scope per open call
        self.suspended = False  # set only through paused()
        self._pause = _Pause(self)
        self.formula_errors: dict[Any, str] = {}
        self.declined: set[Any] = set()  # operators whose formula had no convention for some call

    @property
    def root(self) -> OperatorScope:
        """The scope of everything that ran outside any entered scope (the whole workload for measure_flops)."""
        return self.scopes[0]

    def enter(self, scope: OperatorScope) -> None:
        """Count the operators that follow into ``scope`` until the matching `leave`."""
        self.scopes.append(scope)

    def leave(self) -> OperatorScope:
        """Close the innermost entered scope and return it; the root cannot be left."""
        if len(self.scopes) == 1:
            raise RuntimeError("OperatorRecorder.leave() without a matching enter(): only the root scope is open")
        return self.scopes.pop()

    def paused(self) -> _Pause:
        """A context in which nothing is counted (module estimates run there); pauses may nest."""
        return self._pause

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if isinstance(func, HigherOrderOperator):
            return self._higher_order(func, args, kwargs)
        out = func(*args, **kwargs)
        if self.suspended:
            return out
        packet = func._overloadpacket
        scope = self.scopes[-1]
        formula = self.formulas.get(packet)
        if formula is not None:
            self._count(scope, packet, formula, args, kwargs, out)
        elif packet in ZERO_WORK_OPERATORS:
            scope.ignored[packet] = scope.ignored.get(packet, 0) + 1
        else:
            scope.uncounted[packet] = scope.uncounted.get(packet, 0) + 1
        work = scope.direct_work
        if work is not None:
            work.add(packet, args, kwargs, out)
        return out

    def _higher_order(self, func: HigherOrderOperator, args: tuple, kwargs: dict) -> Any:
        """``torch.cond`` runs its taken branch under this mode, so its operators count as executed; any other
        higher-order operator runs unobserved and is listed as uncounted (never as zero work)."""
        if func is torch.ops.higher_order.cond and not self.suspended:
            predicate, true_branch, false_branch, operands = args
            if not (isinstance(predicate, torch.Tensor) and predicate.device.type == "meta"):
                with self:
                    return (true_branch if bool(predicate) else false_branch)(*operands)
        out = func(*args, **kwargs)
        if not self.suspended:
            scope = self.scopes[-1]
            scope.uncounted[func] = scope.uncounted.get(func, 0) + 1
            if scope.direct_work is not None:
                scope.direct_work.add_unestimated(func)
        return out

    def _count(self, scope: OperatorScope, packet: Any, formula: Callable[..., Any], args: tuple, kwargs: dict,
               out: Any) -> None:
        # Inside __torch_dispatch__ the mode is off, so a formula's own tensor work is never counted.
        try:
            flops = formula(*args, **kwargs, out_val=out)
            if flops is not None and not (type(flops) is int and flops >= 0) and not is_count(flops):
                raise ValueError("a FLOP formula must return a finite non-negative number or None")
        except Exception as error:  # a broken formula must not break the model's forward
            self.formula_errors.setdefault(packet, type(error).__name__)
            flops = None
        if flops is None:  # no stated convention for this call (a dtype, a mode): uncounted, never zero
            self.declined.add(packet)
            scope.uncounted[packet] = scope.uncounted.get(packet, 0) + 1
            return
        scope.flops += flops
        entry = scope.counted.get(packet)
        if entry is None:
            scope.counted[packet] = [1, flops]
        else:
            entry[0] += 1
            entry[1] += flops


def operator_report(total: OperatorScope, custom_mapping: Mapping[Any, Any], recorder: OperatorRecorder
                    ) -> tuple[dict[str, Any], list[Diagnostic]]:
    """The report's ``operator_flops`` section and its diagnostics, sorted by operator name."""
    section = {
        "total": total.result(MODEL),
        "by_operator": sorted(({"operator": operator_name(p), "calls": c, "flops": plain_number(f)}
                               for p, (c, f) in total.counted.items()), key=lambda row: row["operator"]),
        "uncounted": sorted(({"operator": operator_name(p), "calls": c, "significance": operator_significance(p)}
                             for p, c in total.uncounted.items()), key=lambda row: row["operator"]),
        "ignored": sorted(({"operator": operator_name(p), "calls": c, "reason": ZERO_WORK_OPERATORS[p]}
                           for p, c in total.ignored.items()), key=lambda row: row["operator"]),
        "custom_formulas": sorted(operator_name(p) for p in custom_mapping),
    }
    errors = {operator_name(packet): error for packet, error in recorder.formula_errors.items()}
    declined = {operator_name(packet) for packet in recorder.declined}
    return section, [_uncounted_diagnostic(row, errors, declined) for row in section["uncounted"]]


def _uncounted_diagnostic(row: dict[str, Any], errors: dict[str, str], declined: set[str]) -> Diagnostic:
    """Why one operator's calls are uncounted: its formula failed, declined some calls, it has no formula, or it is
    a higher-order operator whose inner work was not observed."""
    name, calls = row["operator"], row["calls"]
    if name in errors:
        return diagnostic("operator_formula_error", f"the FLOP formula of {name} failed ({errors[name]}); its "
                          f"{calls} call(s) are not counted", metric="operator_flops", operator=name)
    significant = row["significance"] == "significant"
    severity = "error" if significant else "warning"
    if name.startswith(HIGHER_ORDER_PREFIX):
        return diagnostic("higher_order_operator", f"{name} ran {calls} time(s) with the work inside it unobserved; "
                          "the operator FLOPs are a lower bound", metric="operator_flops", severity=severity,
                          operator=name)
    reason = ("with a formula that has no convention for some of these calls (dtype, layout or mode)"
              if name in declined else "without a FLOP formula")
    return diagnostic(
        "uncounted_operator", f"{name} ran {calls} uncounted time(s), {reason}"
        + (" (significant work such as a matmul, convolution or attention kernel)" if significant else ""),
        metric="operator_flops", severity=severity, operator=name)


class CompileSafeRecorder(OperatorRecorder):
    """The recorder PyTorch's compiler can step over (``torch.cond`` and other higher-order operators compile
    their branches eagerly, and must skip a dispatch mode's frame). Used once ``torch._dynamo`` is imported, when
    the wrapper that PyTorch puts around ``__torch_dispatch__`` costs nothing."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return OperatorRecorder.__torch_dispatch__(self, func, types, args, kwargs)


def new_recorder(formulas: Mapping[Any, Callable[..., Any]]) -> OperatorRecorder:
    """A recorder for one analysis: the lean one, unless the compiler is already loaded in this process."""
    kind = CompileSafeRecorder if "torch._dynamo" in sys.modules else OperatorRecorder
    return kind(formulas)


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
    section, diagnostics = operator_report(recorder.root, mapping, recorder)
    section["diagnostics"] = diagnostics
    return section
