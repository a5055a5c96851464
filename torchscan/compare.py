"""``compare_reports``: a before/after comparison of two reports, joined by layer identity ``(path, call_index)``.

A difference involving a lower bound or an unavailable value is never shown as an exact number. The comparison
is independent data: it shares no object with either report, nor between its own parts, so editing it (a review
tool annotating rows, say) can never change a report or another row.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .results import SUMMABLE_METRICS, MetricResult, plain_number
from .schema import SCHEMA_VERSION
from .wire import CallKey, index_by_call

COMPARED_TOTALS = (*SUMMABLE_METRICS, "operator_flops")
#: Memory totals, compared when either report traced memory (``crawl_module(..., memory=True)``): the forward's in
#: ``totals``, the training step's in ``training.totals``. A side without one reads as not requested.
MEMORY_TOTALS = ("forward_peak_bytes", "activations")
TRAINING_MEMORY_TOTALS = ("training_peak_bytes",)
#: The sharded step's per-device peak (``training.parallel.per_device.peak``, the steady state on one device of the
#: plan's world size), compared when either report has a ``training.parallel`` section.
PARALLEL_MEMORY_TOTALS = ("per_device_peak_bytes",)
#: The fields that say what a total measures; two totals that differ in one of them are not comparable.
MEASURE_KEYS = ("unit", "scope", "method")


def compare_reports(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """Totals with deltas and statuses, and layer calls that were added, removed or changed. Memory totals
    (``forward_peak_bytes``, ``activations``, ``training_peak_bytes``, and ``per_device_peak_bytes`` of a sharded
    step) are compared when either side has them.

    Raises ``TypeError`` when a side is not a report, and ``ValueError`` naming the first incompatibility: a
    schema version this version does not read, two layer records with one ``(path, call_index)``, or a total
    whose ``unit``, ``scope`` or ``method`` differs between the sides (a metric that was not requested on one
    side has no method to compare).
    """
    old_layers = _checked_layers("before", before)
    new_layers = _checked_layers("after", after)
    for name in COMPARED_TOTALS:
        _check_same_measure(name, before["totals"][name], after["totals"][name])
    totals = {name: _compare_metric(before["totals"][name], after["totals"][name]) for name in COMPARED_TOTALS}
    totals["parameters"] = _compare_numbers(before["totals"]["parameters"]["total"],
                                            after["totals"]["parameters"]["total"])
    totals.update(_compare_memory(before, after))
    comparison = {"schema_version": SCHEMA_VERSION, "totals": totals,
                  "layers": _compare_layers(old_layers, new_layers),
                  "context": {"before": _brief(before), "after": _brief(after)}}
    return _detached(comparison)


def _compare_memory(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The memory totals either side has, each compared (a side that did not trace memory has none: ``None``)."""
    sides = [memory_totals(report) for report in (before, after)]
    compared = {}
    for name in (*MEMORY_TOTALS, *TRAINING_MEMORY_TOTALS, *PARALLEL_MEMORY_TOTALS):
        old, new = (side.get(name) for side in sides)
        if old is None and new is None:
            continue
        if old is not None and new is not None:
            _check_same_measure(name, old, new)
        compared[name] = _compare_metric(old, new)
    return compared


def memory_totals(report: dict[str, Any]) -> dict[str, Any]:
    """A report's memory totals by name: the forward's (``totals``), the training step's (``training.totals``) and
    the sharded step's per-device peak (``training.parallel.per_device.peak``), those it has."""
    training = report.get("training", {})
    found = {name: report["totals"][name] for name in MEMORY_TOTALS if name in report["totals"]}
    found.update((name, training["totals"][name]) for name in TRAINING_MEMORY_TOTALS
                 if name in training.get("totals", {}))
    if "parallel" in training:
        found["per_device_peak_bytes"] = training["parallel"]["per_device"]["peak"]
    return found


def _checked_layers(name: str, report: Any) -> dict[CallKey, dict[str, Any]]:
    """The report's layer records by identity, after checking that it is a report this version can compare."""
    if not isinstance(report, dict) or "layers" not in report or "totals" not in report:
        raise TypeError(f"{name} must be a report returned by crawl_module (a dict with 'layers' and 'totals')")
    if report.get("schema_version") != SCHEMA_VERSION:
        raise ValueError(f"{name} has schema_version {report.get('schema_version')!r}; this version reads "
                         f"{SCHEMA_VERSION}")
    try:
        return index_by_call(report["layers"])
    except ValueError as error:
        raise ValueError(f"{name} has {error}: layer calls are matched by that identity, so it must be "
                         "unique") from None


def _check_same_measure(name: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
    requested = before["status"] != "not_requested" and after["status"] != "not_requested"
    for key in MEASURE_KEYS if requested else ("unit",):
        if before[key] != after[key]:
            raise ValueError(f"totals.{name}: the {key} differs (before {before[key]!r}, after {after[key]!r}); "
                             "totals measured differently have no meaningful difference")


def _detached(value: Any) -> Any:
    """A fresh copy of a JSON-like value: unlike ``copy.deepcopy``, an object met twice is copied twice."""
    if isinstance(value, dict):
        return {key: _detached(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_detached(item) for item in value)
    return value


def _brief(report: dict[str, Any]) -> dict[str, Any]:
    context = report.get("context", {})
    return {key: context.get(key) for key in ("model_type", "torch", "torchscan", "analysis_mode")}


def _compare_numbers(before: int, after: int) -> dict[str, Any]:
    return {"before": before, "after": after, "delta": after - before}


def _compare_metric(before: MetricResult | None, after: MetricResult | None) -> dict[str, Any]:
    return {"before": before, "after": after, "delta": metric_delta(before, after)}


def metric_delta(before: MetricResult | None, after: MetricResult | None) -> dict[str, Any]:
    """``after - before`` (may be negative): known only when both sides are complete, else ``unavailable``.

    A difference involving a lower bound has no bound of its own, so it is never shown as a number. Per-dimension
    values subtract element-wise; values of different dimensionality have no difference (``not_applicable``).
    """
    known = after or before
    unit = known["unit"] if known is not None else ""
    if before is None or after is None or before["status"] != "complete" or after["status"] != "complete":
        return {"status": "unavailable", "value": None, "unit": unit}
    old, new = before["value"], after["value"]
    if isinstance(old, int | float) and isinstance(new, int | float):
        return {"status": "complete", "value": plain_number(new - old), "unit": unit}
    return _per_dimension_delta(old, new, unit)


def _per_dimension_delta(old: Any, new: Any, unit: str) -> dict[str, Any]:
    """Per-dimension values (receptive fields) differ element-wise, when both have the same dimensionality."""
    if not (isinstance(old, list) and isinstance(new, list) and len(old) == len(new)):
        return {"status": "not_applicable", "value": None, "unit": unit}
    return {"status": "complete", "value": [plain_number(b - a) for a, b in zip(old, new, strict=True)], "unit": unit}


def _compare_layers(old: dict[CallKey, dict[str, Any]], new: dict[CallKey, dict[str, Any]]
                    ) -> dict[str, list[dict[str, Any]]]:
    added = [_identity(new[key]) for key in new if key not in old]
    removed = [_identity(old[key]) for key in old if key not in new]
    changed = [{**_identity(layer), "changes": differences} for key, layer in new.items()
               if key in old and (differences := _layer_differences(old[key], layer))]
    return {"added": added, "removed": removed, "changed": changed}


def _identity(layer: dict[str, Any]) -> dict[str, Any]:
    return {"path": layer["path"], "call_index": layer["call_index"], "type": layer["type"],
            "metrics": layer.get("metrics", {})}


def _layer_differences(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    if before["type"] != after["type"]:
        changes["type"] = {"before": before["type"], "after": after["type"]}
    if before["parameters"]["count"] != after["parameters"]["count"]:
        changes["parameters"] = _compare_numbers(before["parameters"]["count"], after["parameters"]["count"])
    if before.get("output") != after.get("output"):
        changes["output"] = {"before": before.get("output"), "after": after.get("output")}
    for name in sorted(set(before.get("metrics", {})) | set(after.get("metrics", {}))):
        old, new = before.get("metrics", {}).get(name), after.get("metrics", {}).get(name)
        if old != new:
            changes.setdefault("metrics", {})[name] = _compare_metric(old, new)
    return changes
