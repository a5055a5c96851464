"""Choosing the module estimates of one completed call: caller handler, built-in handler, direct work.

Field by field: a caller's handler wins for every field it supplies; omitted fields fall back to the built-in
handler (closest class in the MRO); fields no handler supplies come from the call's observed direct work (summable
metrics) or are delegated to descendants (composites) or unavailable (unsupported leaves).
"""

from __future__ import annotations

from copy import deepcopy
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .breakdown import BreakdownError, validate_breakdown
from .diagnostics import Diagnostic, diagnostic
from .direct_work import DirectWork
from .formulas.operators.table import operator_significance
from .handlers import ModuleCall, ModuleHandler, ValidatedEstimates, validate_estimates
from .operators import operator_name
from .results import (
    METRIC_UNITS,
    MODULE_CALL,
    SUBTREE,
    SUMMABLE_METRICS,
    UNSUPPORTED_MODULE,
    MetricResult,
    copied,
    is_incomplete,
    lower_bound,
    unavailable,
)

FIELD_ORDER = tuple(METRIC_UNITS)


@dataclass(slots=True)
class CallEstimate:
    """The outcome for one call: metrics by field, who supplied them, what was delegated, and diagnostics."""

    metrics: dict[str, MetricResult] = field(default_factory=dict)
    ownership: dict[str, str] = field(default_factory=dict)
    builtin_owned: frozenset[str] = frozenset()  # fields a built-in inclusive formula covers
    delegated: list[str] = field(default_factory=list)
    diagnostics: list[Diagnostic] = field(default_factory=list)
    breakdown: list[dict[str, Any]] = field(default_factory=list)  # the parts of the estimate (torchscan.breakdown)

    def copy(self, where: dict[str, Any] | None = None) -> CallEstimate:
        """An estimate of its own, equal to this one: its results, parts and lists copied (a memoized estimate
        replayed for another call; reports share no mutable object), its diagnostics re-addressed to ``where``."""
        breakdown = deepcopy(self.breakdown) if self.breakdown else []  # mostly none: no deep copy to start
        replay = CallEstimate({name: copied(result) for name, result in self.metrics.items()}, dict(self.ownership),
                              self.builtin_owned, list(self.delegated), breakdown=breakdown)
        if self.diagnostics:
            replay.diagnostics = ([{**item, **where} for item in self.diagnostics]  # type: ignore[typeddict-item]
                                  if where is not None else list(self.diagnostics))
        return replay


class CallContext(NamedTuple):
    """What the estimator needs to know about a call besides its objects (built by keyword)."""

    path: str
    call_index: int
    type_name: str
    leaf: bool
    caller: ModuleHandler | None
    builtin: ModuleHandler | None
    needed: frozenset[str]
    expanded: bool = False  # a registered descendant opened this built-in inclusive owner
    direct: DirectWork | None = None  # the operators the call ran directly, when the module view needs them
    opened_by: str | None = None  # the caller-registered descendant type that opened a built-in owner

    @property
    def where(self) -> dict[str, Any]:
        return {"path": self.path, "call_index": self.call_index}


def estimate_call(context: CallContext, call: ModuleCall | None) -> CallEstimate:
    """Estimates for the ``needed`` fields of one call; ``call`` is None when the forward raised."""
    estimate = CallEstimate()
    if call is not None:
        _estimate_fields(context, call, estimate)
        return estimate
    for name in sorted(context.needed):
        estimate.metrics[name] = unavailable(METRIC_UNITS[name], MODULE_CALL, "module_forward_error")
    estimate.diagnostics.append(forward_error(context.type_name, **context.where))
    return estimate


def _estimate_fields(context: CallContext, call: ModuleCall, estimate: CallEstimate) -> None:
    """Field by field: the caller's handler, then the built-in one, then observed direct work or delegation."""
    if context.caller is not None:
        _apply_handler(context.caller, call, context.needed, estimate, context.where, builtin=False)
    remaining = context.needed - estimate.metrics.keys() if estimate.metrics else context.needed
    if context.builtin is not None and remaining:
        _apply_builtin(context, context.builtin, call, remaining, estimate)
    if len(estimate.metrics) < len(context.needed):
        unhandled = [name for name in FIELD_ORDER if name in context.needed and name not in estimate.metrics]
        unsupported = _choose_unhandled(context, unhandled, estimate)
        _report_unhandled(context, unhandled, unsupported, estimate)
    estimate.metrics = _in_field_order(estimate.metrics)


def plain_container(caller: ModuleHandler | None, builtin: ModuleHandler | None, leaf: bool,
                    direct: DirectWork | None) -> bool:
    """Whether a completed call is a composite that no formula covers and that ran no operator directly (the
    common composite): each of its fields is its descendants' work. The tracer asks before it builds a context."""
    return (caller is None and builtin is None and not leaf
            and (direct is None or (direct.operators == 0 and not direct.unestimated)))


def delegated_estimate(needed: frozenset[str]) -> CallEstimate:
    """The estimate of a `plain_container`: each needed field, in field order, delegated."""
    return CallEstimate(delegated=[name for name in FIELD_ORDER if name in needed])


def _in_field_order(metrics: dict[str, MetricResult]) -> dict[str, MetricResult]:
    if tuple(metrics) == FIELD_ORDER:  # all six, in order: the common case
        return metrics
    return {name: metrics[name] for name in FIELD_ORDER if name in metrics}


def _apply_builtin(context: CallContext, builtin: ModuleHandler, call: ModuleCall, remaining: frozenset[str],
                   estimate: CallEstimate) -> None:
    """The built-in handler supplies the fields no caller handler did, unless a registered descendant opened it
    (its inclusive formula is then dropped); a formula that declares its operators checks them against those that
    ran (`ModuleHandler.verify`: third-party and inherited formulas)."""
    if context.expanded and context.caller is None:
        _mark_expanded(context, builtin, remaining, estimate)
        return
    _apply_handler(builtin, call, remaining, estimate, context.where, builtin=True)
    builtin.verify(call, context.direct, remaining, estimate, context.where)
    if builtin.subtree_metrics:
        estimate.builtin_owned = frozenset(remaining & builtin.subtree_metrics & estimate.metrics.keys())


def _apply_handler(handler: ModuleHandler, call: ModuleCall, needed: frozenset[str], estimate: CallEstimate,
                   where: dict[str, Any], builtin: bool) -> None:
    label = handler.label if builtin else handler.caller_label
    try:
        raw = handler.callback(call)
    except Exception as error:  # noqa: BLE001 -- a failing estimate must not fail the analysis; it is reported
        estimate.diagnostics.append(diagnostic(
            "handler_exception", f"{label} raised {type(error).__name__}; its fields are unavailable", **where))
        for name in sorted(needed):
            _set(estimate, handler, name, unavailable(METRIC_UNITS[name], handler.scope(name), label))
        return
    validated = validate_estimates(raw, handler, needed, builtin=builtin)
    for field_name, problem in validated.problems:
        estimate.diagnostics.append(diagnostic("invalid_handler_result", f"{label}: {problem}", metric=field_name,
                                               **where))
    for name, result in validated.metrics.items():
        estimate.metrics[name] = result
        estimate.ownership[name] = result["scope"]  # the handler's scope of the field
        if is_incomplete(result) and not validated.invalid_whole and not _rejected(validated, name):
            estimate.diagnostics.append(_incomplete_result(label, name, result, builtin, where,
                                                           validated.reasons.get(name)))
    _keep_breakdown(validated, call, estimate, label, where)
    if handler.subtree_metrics and not validated.invalid_whole:
        _mark_omitted_owned(handler, needed, validated, estimate, label, where)


def _rejected(validated: ValidatedEstimates, name: str) -> bool:
    """The field's value was invalid (its diagnostic already says why it is unavailable)."""
    return any(field_name == name for field_name, _ in validated.problems)


def _mark_omitted_owned(handler: ModuleHandler, needed: frozenset[str], validated: ValidatedEstimates,
                        estimate: CallEstimate, label: str, where: dict[str, Any]) -> None:
    """Fields a handler owns for its subtree but did not supply: unavailable, and the descendants stay covered."""
    for name in sorted((handler.subtree_metrics & needed) - validated.metrics.keys()):
        _set(estimate, handler, name, unavailable(METRIC_UNITS[name], SUBTREE, label))
        estimate.diagnostics.append(diagnostic(
            "incomplete_handler_estimate", f"{label} owns {name} for its subtree but did not supply it; the "
            "descendants stay covered and the result is unavailable", metric=name, **where))


def _keep_breakdown(validated: ValidatedEstimates, call: ModuleCall, estimate: CallEstimate, label: str,
                    where: dict[str, Any]) -> None:
    """The handler's parts of the fields it estimated, when it gave some that describe them; otherwise none, and a
    diagnostic says why. A caller's parts stand, as its fields do: the built-in fallback's parts are then left out."""
    if validated.breakdown is None or validated.invalid_whole or estimate.breakdown:
        return
    try:
        estimate.breakdown = validate_breakdown(validated.breakdown, validated.metrics, call.module, label)
    except BreakdownError as error:
        estimate.diagnostics.append(diagnostic("invalid_handler_result", f"{label}: its breakdown is left out: "
                                               f"{error}", **where))


def _incomplete_result(label: str, name: str, result: MetricResult, builtin: bool, where: dict[str, Any],
                       reason: str | None) -> Diagnostic:
    """A built-in's incomplete result means the call is outside what its formula justifies; a caller's is theirs.

    ``reason`` is what the formula said is missing; it replaces the generic explanation of a built-in's result.
    """
    article = "an" if result["status"] == "unavailable" else "a"
    detail = "" if result["method"] == label else f" (method {result['method']})"
    returned = f"{label} returned {article} {result['status']} {name} estimate{detail}"
    if builtin:
        why = reason or ("this call is outside what the built-in formula justifies (see the counting "
                         "conventions)")
        return diagnostic("unsupported_configuration", f"{returned}: {why}", metric=name, **where)
    return diagnostic("incomplete_handler_estimate", f"{returned}: {reason}" if reason else returned, metric=name,
                      **where)


def _set(estimate: CallEstimate, handler: ModuleHandler, name: str, result: MetricResult) -> None:
    estimate.metrics[name] = result
    estimate.ownership[name] = handler.scope(name)


def forward_error(type_name: str, path: str, call_index: int) -> Diagnostic:
    """A call whose forward raised inside an enclosing module that caught the error and went on."""
    return diagnostic("module_forward_error", f"the forward of {type_name} raised; the enclosing module caught it "
                      "and continued, so this call has no output and no estimates", path=path, call_index=call_index)


def _mark_expanded(context: CallContext, builtin: ModuleHandler, remaining: frozenset[str], estimate: CallEstimate
                   ) -> None:
    for name in sorted(remaining):  # the call's own work is unknown; its descendants keep their estimates
        estimate.metrics[name] = unavailable(METRIC_UNITS[name], MODULE_CALL, builtin.label)
    estimate.diagnostics.append(diagnostic(
        "expanded_atomic_boundary", f"the registered descendant {context.opened_by} opened {context.type_name}: "
        "its inclusive built-in formula is dropped and the descendant counts are a lower bound; register "
        f"{context.type_name} too to supply its own work", **context.where))


# -- fields no handler supplied ----------------------------------------------------------------------------------


def _choose_unhandled(context: CallContext, unhandled: list[str], estimate: CallEstimate) -> list[str]:
    """The result of each field no handler supplied; returns the fields left unsupported on a leaf.

    An unsupported leaf's counts are lower bounds from the operators observed in its call (work in numpy or an
    extension is invisible to dispatch, and nothing observed is no evidence of zero work). A composite's
    summable fields come from its observed direct work; its other fields are delegated to its descendants.
    """
    unsupported = []
    unsupported_leaf = context.leaf and context.builtin is None  # no formula covers it at all
    direct = context.direct if context.direct is not None and context.direct.operators > 0 else None
    for name in unhandled:
        unit = METRIC_UNITS[name]
        observed = direct if name in SUMMABLE_METRICS else None  # the module view can price its operators
        if unsupported_leaf:
            estimate.metrics[name] = (lower_bound(observed.known(name), unit, MODULE_CALL, UNSUPPORTED_MODULE)
                                      if observed is not None else unavailable(unit, MODULE_CALL, UNSUPPORTED_MODULE))
            unsupported.append(name)
        elif observed is not None:
            estimate.metrics[name] = observed.result(name)
        elif context.leaf:
            estimate.metrics[name] = unavailable(unit, MODULE_CALL, UNSUPPORTED_MODULE)
            unsupported.append(name)
        else:
            estimate.delegated.append(name)
    return unsupported


def _report_unhandled(context: CallContext, unhandled: list[str], unsupported: list[str],
                      estimate: CallEstimate) -> None:
    """The diagnostics of the fields no handler supplied: an unsupported leaf, and direct work without formula."""
    if unsupported:
        estimate.diagnostics.append(diagnostic(
            "unsupported_module", f"no formula supplies {', '.join(unsupported)} for {context.type_name}, a leaf "
            "module: counts are lower bounds from the operators observed in its call (unavailable when none "
            "was observed) and receptive fields are unavailable; register a ModuleHandler for it in "
            "custom_modules (the crawl_module argument, or the models.toml key of the same name)", **context.where))
    direct = context.direct
    if direct is None or not direct.unestimated:
        return
    names = ", ".join(f"{operator_name(p)} x{n}" for p, n in sorted(direct.unestimated.items(),
                                                                     key=lambda item: operator_name(item[0])))
    significant = any(operator_significance(p) == "significant" for p in direct.unestimated)
    for name in (n for n in unhandled if n in SUMMABLE_METRICS):
        estimate.diagnostics.append(diagnostic(
            "unestimated_direct_work", f"{context.type_name} executed {names} directly, with no module-view "
            f"formula; {name} is a lower bound", metric=name, severity="error" if significant else "warning",
            **context.where))
