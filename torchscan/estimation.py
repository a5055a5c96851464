"""Choosing the module estimates of one completed call: caller handler, built-in handler, direct work.

Field by field: a caller's handler wins for every field it supplies; omitted fields fall back to the built-in
handler (closest class in the MRO); fields no handler supplies come from the call's observed direct work (summable
metrics) or are delegated to descendants (composites) or unavailable (unsupported leaves).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .breakdown import BreakdownError, validate_breakdown
from .diagnostics import Diagnostic, diagnostic
from .direct_work import DirectWork
from .direct_work import FIELDS as SUMMABLE_FIELDS
from .formulas.aten import operator_significance
from .handlers import ModuleCall, ModuleHandler, ValidatedEstimates, validate_estimates
from .operators import operator_name
from .results import METRIC_UNITS, MetricResult, is_incomplete, partial, unavailable

FIELD_ORDER = tuple(METRIC_UNITS)


@dataclass
class CallEstimate:
    """The outcome for one call: metrics by field, who supplied them, what was delegated, and diagnostics."""

    metrics: dict[str, MetricResult] = field(default_factory=dict)
    ownership: dict[str, str] = field(default_factory=dict)
    builtin_owned: set[str] = field(default_factory=set)  # fields a built-in inclusive formula covers
    delegated: list[str] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    breakdown: list[dict[str, Any]] = field(default_factory=list)  # the parts of the estimate (torchscan.breakdown)


@dataclass
class CallContext:
    """What the estimator needs to know about a call besides its objects."""

    path: str
    call_index: int
    type_name: str
    leaf: bool
    caller: ModuleHandler | None
    builtin: ModuleHandler | None
    needed: frozenset[str]
    expanded: bool
    direct: DirectWork | None
    opened_by: str | None = None  # the caller-registered descendant type that opened a built-in owner


def estimate_call(context: CallContext, call: ModuleCall | None) -> CallEstimate:
    """Estimates for the ``needed`` fields of one call; ``call`` is None when the forward raised."""
    estimate = CallEstimate()
    where = {"path": context.path, "call_index": context.call_index}
    if call is None:
        _mark_failed(context, estimate, where)
        return estimate
    if context.caller is not None:
        _apply_handler(context.caller, call, context.needed, estimate, where, builtin=False)
    remaining = context.needed - estimate.metrics.keys()
    if context.builtin is not None and remaining:
        if context.expanded and context.caller is None:
            _mark_expanded(context, remaining, estimate, where)
        else:
            _apply_handler(context.builtin, call, remaining, estimate, where, builtin=True)
            estimate.builtin_owned = {name for name in remaining & estimate.metrics.keys()
                                      if name in context.builtin.subtree_metrics}
    _fill_unhandled(context, estimate, where)
    estimate.metrics = {name: estimate.metrics[name] for name in FIELD_ORDER if name in estimate.metrics}
    return estimate


def _apply_handler(handler: ModuleHandler, call: ModuleCall, needed: frozenset[str], estimate: CallEstimate,
                   where: dict[str, Any], builtin: bool) -> None:
    label = handler.label if builtin else handler.caller_label
    try:
        raw = handler.callback(call)
    except Exception as error:  # a failing estimate must not fail the analysis; it is reported instead
        estimate.diagnostics.append(diagnostic(
            "handler_exception", f"{label} raised {type(error).__name__}; its fields are unavailable", **where))
        for name in sorted(needed):
            _set(estimate, handler, name, unavailable(METRIC_UNITS[name], handler.scope(name), label))
        return
    validated = validate_estimates(raw, handler, needed, builtin=builtin)
    for name, problem in validated.problems:
        estimate.diagnostics.append(diagnostic("invalid_handler_result", f"{label}: {problem}", metric=name, **where))
    for name, result in validated.metrics.items():
        _set(estimate, handler, name, result)
        if is_incomplete(result) and not any(n == name for n, _ in validated.problems) and not validated.invalid_whole:
            estimate.diagnostics.append(_incomplete_result(label, name, result, builtin, where))
    _keep_breakdown(validated, call, estimate, label, where)
    if not validated.invalid_whole:
        for name in sorted((handler.subtree_metrics & needed) - validated.metrics.keys()):
            _set(estimate, handler, name, unavailable(METRIC_UNITS[name], "subtree", label))
            estimate.diagnostics.append(diagnostic(
                "incomplete_handler_estimate", f"{label} owns {name} for its subtree but did not supply it; the "
                "descendants stay covered and the result is unavailable", metric=name, **where))


def _keep_breakdown(validated: ValidatedEstimates, call: ModuleCall, estimate: CallEstimate, label: str,
                    where: dict[str, Any]) -> None:
    """The handler's parts of its estimate, when it gave some that describe it; otherwise none, and a diagnostic
    says why."""
    if validated.breakdown is None or validated.invalid_whole:
        return
    try:
        estimate.breakdown = validate_breakdown(validated.breakdown, estimate.metrics, call.module, label)
    except BreakdownError as error:
        estimate.diagnostics.append(diagnostic("invalid_handler_result", f"{label}: its breakdown is left out: "
                                               f"{error}", **where))


def _incomplete_result(label: str, name: str, result: MetricResult, builtin: bool, where: dict[str, Any]
                       ) -> Diagnostic:
    """A built-in's incomplete result means the call is outside what its formula justifies; a caller's is theirs."""
    article = "an" if result["status"] == "unavailable" else "a"
    detail = "" if result["method"] == label else f" (method {result['method']})"
    if builtin:
        return diagnostic("unsupported_configuration",
                          f"{label} returned {article} {result['status']} {name} estimate{detail}: this call is "
                          "outside what the built-in formula justifies (see the counting conventions)",
                          metric=name, **where)
    return diagnostic("incomplete_handler_estimate", f"{label} returned {article} {result['status']} {name} "
                      f"estimate{detail}", metric=name, **where)


def _set(estimate: CallEstimate, handler: ModuleHandler, name: str, result: MetricResult) -> None:
    estimate.metrics[name] = result
    estimate.ownership[name] = handler.scope(name)


def _mark_failed(context: CallContext, estimate: CallEstimate, where: dict[str, Any]) -> None:
    for name in sorted(context.needed):
        estimate.metrics[name] = unavailable(METRIC_UNITS[name], "module_call", "module_forward_error")
    estimate.diagnostics.append(forward_error(context.type_name, **where))


def forward_error(type_name: str, path: str, call_index: int) -> Diagnostic:
    """A call whose forward raised inside an enclosing module that caught the error and went on."""
    return diagnostic("module_forward_error", f"the forward of {type_name} raised; the enclosing module caught it "
                      "and continued, so this call has no output and no estimates", path=path, call_index=call_index)


def _mark_expanded(context: CallContext, remaining: frozenset[str], estimate: CallEstimate,
                   where: dict[str, Any]) -> None:
    builtin = context.builtin
    assert builtin is not None
    for name in sorted(remaining):  # the call's own work is unknown; its descendants keep their estimates
        estimate.metrics[name] = unavailable(METRIC_UNITS[name], "module_call", builtin.label)
    estimate.diagnostics.append(diagnostic(
        "expanded_atomic_boundary", f"the registered descendant {context.opened_by} opened {context.type_name}: "
        "its inclusive built-in formula is dropped and the descendant counts are a lower bound; register "
        f"{context.type_name} too to supply its own work", **where))


def _unsupported_leaf_result(name: str, direct: DirectWork | None) -> MetricResult:
    unit = METRIC_UNITS[name]
    if name in SUMMABLE_FIELDS and direct is not None and direct.operators:
        return partial(direct.known(name), unit, "module_call", "unsupported_module")
    return unavailable(unit, "module_call", "unsupported_module")


def _fill_unhandled(context: CallContext, estimate: CallEstimate, where: dict[str, Any]) -> None:
    remaining = [name for name in FIELD_ORDER if name in context.needed and name not in estimate.metrics]
    if not remaining:
        return
    direct = context.direct
    unsupported = []
    for name in remaining:
        if context.leaf and context.builtin is None:
            # No formula covers this leaf: what dispatch observed is a lower bound (work in numpy or an extension
            # is invisible to it), and nothing observed is no evidence of zero work.
            estimate.metrics[name] = _unsupported_leaf_result(name, direct)
            unsupported.append(name)
        elif name in SUMMABLE_FIELDS and direct is not None and direct.operators:
            estimate.metrics[name] = direct.result(name)
        elif context.leaf:
            estimate.metrics[name] = unavailable(METRIC_UNITS[name], "module_call", "unsupported_module")
            unsupported.append(name)
        else:
            estimate.delegated.append(name)
    if unsupported:
        estimate.diagnostics.append(diagnostic(
            "unsupported_module", f"no formula supplies {', '.join(unsupported)} for {context.type_name}, a leaf "
            "module: counts are lower bounds from the operators observed in its call (unavailable when none "
            "was observed) and receptive fields are unavailable; register a ModuleHandler for it in "
            "custom_modules", **where))
    if direct is not None and direct.unestimated:
        names = ", ".join(f"{operator_name(p)} x{n}" for p, n in sorted(direct.unestimated.items(),
                                                                         key=lambda item: operator_name(item[0])))
        significant = any(operator_significance(p) == "significant" for p in direct.unestimated)
        for name in (n for n in remaining if n in SUMMABLE_FIELDS):
            estimate.diagnostics.append(diagnostic(
                "unestimated_direct_work", f"{context.type_name} executed {names} directly, with no module-view "
                f"formula; {name} is a lower bound", metric=name, severity="error" if significant else "warning",
                **where))

