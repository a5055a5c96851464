"""The wire format of a report: its version, the shipped JSON Schema, and validation (its types: `torchscan.wire`)."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import cache
from importlib import resources
from typing import Any, Final

from .results import METRIC_UNITS, ROOT_LABEL, SPATIAL_METRICS, SUMMABLE_METRICS, validation_error

#: Bumped only for changes that break consumers; additive fields keep the version (see docs/schema.md).
SCHEMA_VERSION: Final = 1  # Final: its type is Literal[1], the type of a `torchscan.wire.Report`'s version
SCHEMA_FILE = "report.schema.json"
#: The units of the optional memory totals (``crawl_module(..., memory=True)``), which are not estimate fields.
MEMORY_UNITS = {"forward_peak_bytes": "bytes", "activations": "activations"}
#: The unit each MetricResult field must have (operator FLOPs and anything else not listed: ``FLOPs``).
_UNITS = {**METRIC_UNITS, **MEMORY_UNITS, "kv_cache": "bytes", "operator_bytes": "bytes"}


@cache
def report_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) that every report satisfies, as shipped inside the package."""
    return json.loads(resources.files("torchscan").joinpath(SCHEMA_FILE).read_text(encoding="utf-8"))


@cache
def _validator() -> Any:
    import jsonschema

    return jsonschema.Draft202012Validator(report_schema())


@cache
def _compiled_validator() -> Any:
    """``jsonschema-rs``'s validator of the report schema when it is installed (a compiled validator, a few hundred
    times faster on a report of thousands of layer calls), else None."""
    try:
        import jsonschema_rs
    except ImportError:
        return None
    return jsonschema_rs.validator_for(report_schema())


def validate_report(report: Mapping[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` when ``report`` breaks the schema or a MetricResult invariant.

    JSON Schema checks the shape; the invariants it cannot express (a complete value equals its known value,
    counts are finite, each field has its own unit) are checked on every MetricResult afterwards. Needs the
    ``jsonschema`` package (the ``test`` extra). With ``jsonschema-rs`` installed too (also in the ``test`` extra),
    a report it accepts is not checked again; one it rejects is, by ``jsonschema``, whose error is raised.
    """
    import jsonschema

    compiled = _compiled_validator()
    if compiled is None or not compiled.is_valid(report):
        _validator().validate(report)
    for where, name, result in _metric_results(report):
        problem = validation_error(result, unit=_UNITS.get(name, "FLOPs"), spatial=name in SPATIAL_METRICS)
        if problem:
            raise jsonschema.ValidationError(f"{where}: {problem}")


def _metric_results(report: Mapping[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """Every MetricResult in a report with its location and field name (operator FLOPs use ``FLOPs``)."""
    for name, result in report["totals"].items():
        if name not in ("parameters", "buffers"):
            yield f"totals.{name}", name, result
    if "kv_cache" in report["inputs"]:
        yield "inputs.kv_cache.bytes", "kv_cache", report["inputs"]["kv_cache"]["bytes"]
    yield "operator_flops.total", "operator_flops", report["operator_flops"]["total"]
    yield from _operator_bytes_results(report.get("operator_bytes"))
    yield from _memory_results(report.get("memory"))
    for layer in report["layers"]:
        yield from _layer_results(layer)


def _layer_results(layer: Mapping[str, Any]) -> Iterator[tuple[str, str, Any]]:
    """The MetricResults of one layer record: estimates, operator FLOPs and bytes, memory, breakdown parts."""
    where = f"layers[{layer['path'] or ROOT_LABEL}, {layer['call_index']}]"
    for name, result in layer["metrics"].items():
        yield f"{where}.metrics.{name}", name, result
    for field in ("operator_flops", "operator_bytes"):
        for name, result in layer.get(field, {}).items():
            yield f"{where}.{field}.{name}", field, result
    for name, result in layer.get("memory", {}).items():
        yield f"{where}.memory.{name}", "forward_peak_bytes", result
    for index, part in enumerate(layer.get("breakdown", [])):
        for name in SUMMABLE_METRICS:
            if name in part:
                yield f"{where}.breakdown[{index}].{name}", name, part[name]


def _operator_bytes_results(section: dict[str, Any] | None) -> Iterator[tuple[str, str, Any]]:
    """The MetricResults of an ``operator_bytes`` section: its total, and each row's FLOPs and bytes."""
    if section is None:
        return
    yield "operator_bytes.total", "operator_bytes", section["total"]
    for row in section["by_operator"]:
        where = f"operator_bytes.by_operator[{row['operator']}, {row['dtype']}]"
        yield f"{where}.flops", "operator_flops", row["flops"]
        yield f"{where}.bytes", "operator_bytes", row["bytes"]


def _memory_results(memory: dict[str, Any] | None) -> Iterator[tuple[str, str, Any]]:
    """The MetricResults of a ``memory`` section: bytes, except the activation count."""
    if memory is None:
        return
    for name in ("peak", "peak_above_start"):
        yield f"memory.{name}", "forward_peak_bytes", memory[name]
    for name, result in memory["at_peak"].items():
        yield f"memory.at_peak.{name}", "forward_peak_bytes", result
    yield "memory.activations", "activations", memory["activations"]
