"""MetricResult: one number together with how much of it is known.

Every count in a report is a MetricResult so that a consumer can never mistake a lower bound or a missing
estimate for an exact value. The constructors here are the only places that build one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from numbers import Real
from operator import itemgetter
from types import MappingProxyType
from typing import Any, Final, Literal, TypedDict

Status = Literal["complete", "partial", "unavailable", "not_requested", "not_applicable"]
Scope = Literal["module_call", "subtree", "direct", "inclusive", "model", "part"]
Value = float | int | list[float | int] | None

#: The root call's ``path`` in a report, and how it is named wherever a reader (or an error message) sees a call.
ROOT_PATH: Final = ""
ROOT_LABEL: Final = "(root)"

#: The method labels more than one place writes: operator FLOPs observed through dispatch, the work a call did
#: directly priced by the functional-op formulas, what is known of a module no formula covers, traced memory, and
#: the model totals summed from the layer calls.
OPERATOR_DISPATCH: Final = "operator_dispatch"
FUNCTIONAL_OPS: Final = "functional_ops"
UNSUPPORTED_MODULE: Final = "unsupported_module"
TRACED_LIVE_TENSOR_BYTES: Final = "traced_live_tensor_bytes"
SUM_OF_LAYER_ESTIMATES: Final = "sum_of_layer_estimates"

#: Statuses that make a requested analysis incomplete (what ``strict=True`` rejects).
INCOMPLETE_STATUSES = frozenset({"partial", "unavailable"})
#: The statuses whose results a sum counts (``not_applicable`` and ``not_requested`` contribute nothing).
COUNTED_STATUSES = frozenset({"complete", "partial", "unavailable"})
ALL_STATUSES = frozenset({"complete", "partial", "unavailable", "not_requested", "not_applicable"})

#: Where a number applies: one module call, a call with its whole subtree (an inclusive owner), the operators run
#: directly in a call or inclusively under it, the whole model, or one part of a call's estimate (a breakdown,
#: never added again). The report schema enumerates exactly these.
SCOPES: tuple[Scope, ...] = ("module_call", "subtree", "direct", "inclusive", "model", "part")
MODULE_CALL, SUBTREE, DIRECT, INCLUSIVE, MODEL, PART = SCOPES

#: The unit of every module-estimate field, in report order.
METRIC_UNITS: dict[str, str] = {
    "module_flops": "FLOPs",
    "macs": "MACs",
    "dmas": "DMAs",
    "receptive_field": "elements",
    "effective_stride": "elements",
    "effective_padding": "elements",
}
#: The estimate fields that add up across layer calls.
SUMMABLE_METRICS = ("module_flops", "macs", "dmas")
#: The estimate fields that describe a call locally and are never summed.
SPATIAL_METRICS = ("receptive_field", "effective_stride", "effective_padding")
#: The spatial fields of an operation that maps every position to itself (elementwise, per token, per feature).
POINTWISE_SPATIAL: Mapping[str, int] = MappingProxyType(
    {"receptive_field": 1, "effective_stride": 1, "effective_padding": 0})
METRIC_RESULT_KEYS = frozenset({"status", "value", "known_value", "unit", "scope", "method"})


@dataclass(frozen=True, slots=True)
class Incomplete:
    """A formula's answer for a field it cannot count completely: ``known`` is a lower bound of the true value (a
    partial result) or ``None`` (an unavailable one); ``reason``, quoted by the field's diagnostic, says what is
    missing."""

    known: Value = None
    reason: str | None = None


class _NotApplicable:
    """The type of `NOT_APPLICABLE`."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_APPLICABLE"


#: A handler's value for a spatial field that has no meaning for the call (a receptive field through Flatten).
NOT_APPLICABLE: Final = _NotApplicable()


class MetricResult(TypedDict):
    """The wire form of one metric: exactly these six keys."""

    status: Status
    value: Value
    known_value: Value
    unit: str
    scope: Scope
    method: str


def complete(value: Value, unit: str, scope: Scope, method: str) -> MetricResult:
    """An exact count (a legitimate zero included); a per-dimension list is held twice, as two lists."""
    known = list(value) if type(value) is list else value
    return {"status": "complete", "value": value, "known_value": known, "unit": unit, "scope": scope,
            "method": method}


def lower_bound(known_value: Value, unit: str, scope: Scope, method: str) -> MetricResult:
    """A lower bound: the true value is at least ``known_value``."""
    return {"status": "partial", "value": None, "known_value": known_value, "unit": unit, "scope": scope,
            "method": method}


def unavailable(unit: str, scope: Scope, method: str) -> MetricResult:
    """Nothing is known; never read as zero."""
    return {"status": "unavailable", "value": None, "known_value": None, "unit": unit, "scope": scope,
            "method": method}


def not_requested(unit: str, scope: Scope, method: str = "not_requested") -> MetricResult:
    """The analysis mode did not ask for this metric (``mode="structure"``)."""
    return {"status": "not_requested", "value": None, "known_value": None, "unit": unit, "scope": scope,
            "method": method}


def not_applicable(unit: str, scope: Scope, method: str) -> MetricResult:
    """The metric has no meaning for this call (a receptive field through ``Flatten``, for instance)."""
    return {"status": "not_applicable", "value": None, "known_value": None, "unit": unit, "scope": scope,
            "method": method}


def copied(result: MetricResult) -> MetricResult:
    """A result of its own, equal to ``result`` (per-dimension lists copied too)."""
    copy = result.copy()
    if type(copy["value"]) is list:
        copy["value"] = list(copy["value"])
    if type(copy["known_value"]) is list:
        copy["known_value"] = list(copy["known_value"])
    return copy


def is_count(value: Any) -> bool:
    """A finite, non-negative real number that is not a boolean."""
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value) and float(value) >= 0


def is_spatial_value(value: Any) -> bool:
    """A count, or a non-empty per-dimension list of counts (receptive-field fields)."""
    if isinstance(value, (list, tuple)):
        return len(value) > 0 and all(is_count(item) for item in value)
    return is_count(value)


def plain_number(value: Any) -> Value:
    """Normalize a count (or per-dimension counts) to JSON-friendly ``int``/``float``."""
    if type(value) is int:
        return value
    if isinstance(value, (list, tuple)):
        return [plain_number(item) for item in value]  # type: ignore[misc]
    if isinstance(value, int) or (hasattr(value, "is_integer") and not isinstance(value, float)
                                  and hasattr(value, "__index__")):
        return int(value)  # exact, however large (a 70B model's FLOPs exceed 2**53)
    number = float(value)
    return int(number) if number.is_integer() and abs(number) < 2**53 else number


def validation_error(result: Any, unit: str | None = None, spatial: bool = False,
                     statuses: frozenset[str] = ALL_STATUSES) -> str | None:
    """Why ``result`` is not a valid MetricResult (with one of ``statuses``), or ``None`` when it is."""
    if not isinstance(result, Mapping):
        return f"expected a mapping with keys {sorted(METRIC_RESULT_KEYS)}, got {type(result).__name__}"
    keys = set(result)
    if keys != METRIC_RESULT_KEYS:
        missing, extra = sorted(METRIC_RESULT_KEYS - keys), sorted(keys - METRIC_RESULT_KEYS)
        return f"a MetricResult needs exactly the keys {sorted(METRIC_RESULT_KEYS)} (missing {missing}, extra {extra})"
    for key in ("scope", "method", "unit"):
        if not isinstance(result[key], str) or not result[key]:
            return f"{key!r} must be a non-empty string"
    if unit is not None and result["unit"] != unit:
        return f"unit must be {unit!r}, got {result['unit']!r}"
    if result["status"] not in statuses:
        return f"status must be one of {sorted(statuses)}, got {result['status']!r:.40}"
    return _values_error(result["status"], result["value"], result["known_value"], spatial)


def _values_error(status: str, value: Any, known: Any, spatial: bool) -> str | None:
    """Why ``value`` and ``known_value`` do not fit ``status`` (a number for a field, or a list for a spatial one)."""
    check = is_spatial_value if spatial else is_count
    if status == "complete":
        if not (check(value) and check(known)) or plain_number(value) != plain_number(known):
            return "a complete result needs equal finite non-negative numeric value and known_value"
    elif status == "partial":
        if value is not None or not check(known):
            return "a partial result needs value=None and a finite non-negative numeric known_value"
    elif value is not None or known is not None:
        return f"an {status} result needs value=None and known_value=None"
    return None


def normalized(result: Mapping[str, Any]) -> MetricResult:
    """A validated result with plain numbers (``torch`` or ``numpy`` scalars become ``int``/``float``)."""
    out = dict(result)
    for key in ("value", "known_value"):
        if out[key] is not None:
            out[key] = plain_number(out[key])
    return out  # type: ignore[return-value]


def add_results(results: Iterable[MetricResult], unit: str, scope: Scope, method: str) -> MetricResult:
    """Sum results: complete only if every part is; a lower bound if any part is incomplete.

    ``not_applicable`` and ``not_requested`` parts contribute nothing. A sum with no known part at all is
    unavailable rather than a made-up zero, unless there were no parts to add (an empty sum is an exact zero).
    """
    results = list(results)
    statuses = set(map(_STATUS, results))
    if statuses <= COMPLETE_ONLY:  # every part exact (or no part: an exact zero)
        return complete(plain_number(sum(map(_KNOWN_VALUE, results))), unit, scope, method)
    counted = [result for result in results if result["status"] in COUNTED_STATUSES]
    if not counted and "not_requested" in statuses:
        return not_requested(unit, scope)
    known: list[Any] = [result["known_value"] for result in counted if result["known_value"] is not None]
    total = plain_number(sum(known))
    if not statuses & INCOMPLETE_STATUSES:
        return complete(total, unit, scope, method)
    return lower_bound(total, unit, scope, method) if known else unavailable(unit, scope, method)


_STATUS, _KNOWN_VALUE = itemgetter("status"), itemgetter("known_value")
COMPLETE_ONLY = frozenset({"complete"})


def is_incomplete(result: Mapping[str, Any]) -> bool:
    """Whether ``strict=True`` rejects this result."""
    return result["status"] in INCOMPLETE_STATUSES


def as_lower_bound(result: MetricResult) -> MetricResult:
    """The same result, known to miss some work: a complete value becomes a partial lower bound."""
    if result["status"] != "complete":
        return result
    return lower_bound(result["known_value"], result["unit"], result["scope"], result["method"])


def incomplete_metrics(report: dict[str, Any]) -> list[str]:
    """Where a report is incomplete: totals and per-call metrics whose status is partial or unavailable."""
    found = [f"totals.{name}" for name, result in report["totals"].items()
             if isinstance(result, dict) and "status" in result and is_incomplete(result)]
    for layer in report["layers"]:
        for name, result in layer.get("metrics", {}).items():
            if is_incomplete(result):
                found.append(f"{layer['path'] or ROOT_LABEL}[{layer['call_index']}].{name}")
    return found
