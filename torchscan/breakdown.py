"""Breakdowns: how a handler's estimate of one call splits into parts, kept beside the estimate and never added again.

A handler may return ``"breakdown"`` next to its fields: a list of parts, each naming what it is (``part``), where
it happens (``module``, relative to the call's module) and its share of some summable metrics, given as fields are.
`validate_breakdown` is the one place that checks a breakdown, by the rules of docs/schema.md ("Breakdowns"): the
parts of a metric add up to the call's estimate of it, and a complete estimate has complete parts only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from torch import nn

from .results import (
    COUNTED_STATUSES,
    METRIC_UNITS,
    PART,
    SUMMABLE_METRICS,
    Incomplete,
    MetricResult,
    Value,
    complete,
    is_count,
    lower_bound,
    normalized,
    plain_number,
    unavailable,
    validation_error,
)

BREAKDOWN_KEY = "breakdown"


class BreakdownError(ValueError):
    """A breakdown that does not describe the estimate it accompanies; the message says why."""


def validate_breakdown(raw: Any, metrics: Mapping[str, MetricResult], module: nn.Module, method: str
                       ) -> list[dict[str, Any]]:
    """The wire form of a handler's breakdown, checked against the call's validated ``metrics``.

    Raises `BreakdownError` when it is not a list of parts, a part is malformed or names no submodule of
    ``module``, or the parts of a metric do not add up to the call's estimate of it. Metrics the call does not
    estimate (an enclosing owner counts them) are left out of the parts.
    """
    if isinstance(raw, (str, bytes, Mapping)) or not isinstance(raw, Sequence) or not raw:
        raise BreakdownError(f"breakdown must be a non-empty list of parts, got {type(raw).__name__}")
    parts = [_part(index, item, module, method) for index, item in enumerate(raw)]
    for name in SUMMABLE_METRICS:
        _check_metric(name, parts, metrics.get(name))
    return without_metrics(parts, set(SUMMABLE_METRICS) - metrics.keys())


def _check_metric(name: str, parts: list[dict[str, Any]], estimate: MetricResult | None) -> None:
    """A metric is split by every part or by none, and its parts add up to the call's estimate of it."""
    covered = [part[name] for part in parts if name in part]
    if covered and len(covered) != len(parts):
        raise BreakdownError(f"{name} is given for {len(covered)} of {len(parts)} parts; give it for every part or "
                             "for none")
    if covered and estimate is not None:
        _check_sum(name, covered, estimate)


def without_metrics(parts: list[dict[str, Any]], dropped: set[str]) -> list[dict[str, Any]]:
    """The parts without ``dropped`` metrics (ones an enclosing owner counts); none when no metric is left."""
    kept = [{key: value for key, value in part.items() if key not in dropped} for part in parts]
    return kept if kept and any(name in kept[0] for name in SUMMABLE_METRICS) else []


def _part(index: int, item: Any, module: nn.Module, method: str) -> dict[str, Any]:
    where = f"breakdown[{index}]"
    if not isinstance(item, Mapping):
        raise BreakdownError(f"{where} must be a mapping, got {type(item).__name__}")
    unknown = sorted(str(key) for key in item if key not in {"part", "module", *SUMMABLE_METRICS})
    if unknown:
        raise BreakdownError(f"{where} has unsupported keys {unknown}; expected part, module and a subset of "
                             f"{list(SUMMABLE_METRICS)}")
    fields = {"part": None, "module": "", **item}
    name, path = fields["part"], fields["module"]
    if not isinstance(name, str) or not name.strip():
        raise BreakdownError(f"{where}.part must be a non-empty string")
    if not isinstance(path, str) or (path and not _is_submodule(module, path)):
        raise BreakdownError(f"{where}.module must be the dotted path of a submodule ('' for the module itself), "
                             f"got {path!r}")
    part: dict[str, Any] = {"part": name, "module": path}
    for metric in SUMMABLE_METRICS:
        if metric in item:
            part[metric] = _result(f"{where}.{metric}", metric, item[metric], method)
    return part


def _is_submodule(module: nn.Module, path: str) -> bool:
    try:
        module.get_submodule(path)
    except AttributeError:
        return False
    return True


def _result(where: str, metric: str, value: Any, method: str) -> MetricResult:
    """A part's value as a MetricResult of scope ``part``, with the handler's method."""
    unit = METRIC_UNITS[metric]
    if isinstance(value, Incomplete):  # a lower bound, or nothing known
        if value.known is None:
            return unavailable(unit, PART, method)
        if not is_count(value.known):
            raise BreakdownError(f"{where}: the known part must be a finite non-negative number")
        return lower_bound(plain_number(value.known), unit, PART, method)
    if value is None:
        return unavailable(unit, PART, method)
    if isinstance(value, Mapping):
        problem = validation_error(value, unit=unit, statuses=COUNTED_STATUSES)
        if problem:
            raise BreakdownError(f"{where}: {problem}")
        return {**normalized(value), "scope": PART, "method": method}
    if is_count(value):
        return complete(plain_number(value), unit, PART, method)
    raise BreakdownError(f"{where} must be a finite non-negative number, None, Incomplete or a MetricResult, "
                         f"got {type(value).__name__}")


def _count(value: Value) -> int | float:
    """A summable result's known value, 0 when nothing is known."""
    return value if isinstance(value, int | float) else 0


def _check_sum(name: str, parts: list[MetricResult], estimate: MetricResult) -> None:
    """The parts' known values add up to the estimate's, and an exact estimate has exact parts."""
    known = sum(_count(part["known_value"]) for part in parts)
    total = _count(estimate["known_value"])
    if not math.isclose(known, total, rel_tol=1e-9, abs_tol=1e-9):
        raise BreakdownError(f"the parts of {name} add up to {known}, not to the estimate's {total}")
    if estimate["status"] == "complete" and any(part["status"] != "complete" for part in parts):
        raise BreakdownError(f"{name} is complete, so each of its parts must be complete")
