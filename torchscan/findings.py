"""Diagnostics as a reader needs them: one finding per cause, with every metric it affects.

A report keeps one diagnostic per affected metric (``unestimated_direct_work`` for MACs, FLOPs and DMAs is three
records) and per call (a module called in a loop gets the same diagnostic at every call); a reader wants one line:
where, what, which metrics. `findings` groups them, `causes` picks the ones that make numbers incomplete, and
`incomplete_message` turns them into the message of `IncompleteAnalysisError`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from .diagnostics import CODES
from .results import ROOT_LABEL, incomplete_metrics
from .wire import call_key

#: Short labels of the module-estimate fields, as table headers and in findings.
METRIC_LABELS = {"macs": "MACs", "module_flops": "FLOPs", "dmas": "DMAs", "receptive_field": "RF",
                 "effective_stride": "Stride", "effective_padding": "Padding"}
#: The same fields spelled out, for sentences and tooltips.
METRIC_NAMES = {"macs": "MACs", "module_flops": "module FLOPs", "dmas": "DMAs", "receptive_field": "receptive field",
                "effective_stride": "effective stride", "effective_padding": "effective padding",
                "operator_flops": "operator FLOPs"}
SEVERITY_ORDER = {"error": 0, "warning": 1, "info": 2}
#: Causes listed in an error message or a page admonition before "and N more".
SHOWN_CAUSES = 6
#: Call indices named by a finding that several calls of one layer share, before "…".
SHOWN_CALLS = 4


def layer_label(path: str, call_index: int) -> str:
    """``encoder.layers.0`` (first call) or ``encoder.layers.0 #2`` (third call); the root reads ``(root)``."""
    return (path or ROOT_LABEL) + (f" #{call_index}" if call_index else "")


def metric_sentence(names: list[str]) -> str:
    """``MACs, module FLOPs and DMAs``: metric field names spelled out for a sentence."""
    words = [METRIC_NAMES.get(name, name) for name in names]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1] if words else ""


@dataclass(frozen=True)
class Finding:
    """One cause: its code and severity, where it points, the metrics it affects and what it says."""

    severity: str
    code: str
    path: str | None
    call_index: int
    operator: str
    type_name: str
    metrics: tuple[str, ...]
    message: str
    #: The layer's calls that share this finding, when several do (a module called in a loop), in order.
    calls: tuple[int, ...] = ()

    @property
    def where(self) -> str:
        """``encoder.layers.0 (Linear)``, ``act (GELU) in 3 calls (#0, #1, #2)``, an operator name, or ``model``."""
        if self.path is None:
            return self.operator or "model"
        several = len(self.calls) > 1
        label = (self.path or ROOT_LABEL) if several else layer_label(self.path, self.call_index)
        typed = f"{label} ({self.type_name})" if self.type_name else label
        if not several:
            return typed
        shown = ", ".join(f"#{index}" for index in self.calls[:SHOWN_CALLS])
        more = f", … #{self.calls[-1]}" if len(self.calls) > SHOWN_CALLS else ""
        return f"{typed} in {len(self.calls)} calls ({shown}{more})"

    @property
    def metric_text(self) -> str:
        """``MACs, FLOPs, DMAs``; empty when the finding is not about particular metrics."""
        return ", ".join(METRIC_LABELS.get(name, "Op FLOPs" if name == "operator_flops" else name)
                         for name in self.metrics)

    @property
    def meaning(self) -> str:
        return CODES.get(self.code, ("", ""))[1]

    @property
    def summary(self) -> str:
        """One line: ``unsupported_module at 1 (Bessel) [MACs, FLOPs]: no formula supplies …``."""
        metrics = f" [{self.metric_text}]" if self.metrics else ""
        return f"{self.code} at {self.where}{metrics}: {self.message}"


def findings(report: dict[str, Any]) -> list[Finding]:
    """The report's diagnostics grouped by cause (code, location, message up to the metric), errors first."""
    types = {call_key(layer): layer["type"].rpartition(".")[2] for layer in report["layers"]}
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for item in report["diagnostics"]:
        metric = item.get("metric") or ""
        pattern = re.sub(rf"\b{re.escape(metric)}\b", "\0", item["message"]) if metric else item["message"]
        key = (item["code"], item["severity"], item.get("path"), item.get("call_index", 0), item.get("operator", ""),
               pattern)
        groups.setdefault(key, []).append(item)
    found = []
    for (code, severity, path, call_index, operator, pattern), items in groups.items():
        metrics = tuple(sorted({item["metric"] for item in items if item.get("metric")}, key=_metric_order))
        found.append(Finding(severity, code, path, call_index, operator, types.get((path, call_index), ""), metrics,
                             _merged_message(pattern, metrics)))
    return sorted(_one_per_text(found), key=lambda item: (SEVERITY_ORDER.get(item.severity, 3), item.path is None,
                                                          item.path or "", item.call_index, item.code, item.operator))


def _one_per_text(found: list[Finding]) -> list[Finding]:
    """Findings that differ only in the call of their layer (a module called in a loop, the same message at every
    call) as one that names the calls: a reader sees no line repeated."""
    groups: dict[tuple, list[Finding]] = {}
    for item in found:
        key = (item.severity, item.code, item.path, item.operator, item.type_name, item.metrics, item.message)
        groups.setdefault(key, []).append(item)
    return [items[0] if len(items) == 1 else
            replace(items[0], call_index=min(item.call_index for item in items),
                    calls=tuple(sorted({item.call_index for item in items})))
            for items in groups.values()]


def _metric_order(name: str) -> int:
    order = [*METRIC_LABELS, "operator_flops"]
    return order.index(name) if name in order else len(order)


def _merged_message(pattern: str, metrics: tuple[str, ...]) -> str:
    """The message with its metric name replaced by every grouped metric (``macs is`` -> ``MACs and DMAs are``)."""
    if "\0" not in pattern:
        return pattern
    if len(metrics) == 1:
        return pattern.replace("\0", metrics[0])
    merged = pattern.replace("\0 is a ", "\0 are ").replace("\0 is ", "\0 are ")
    merged = re.sub(r"(\0 are )lower bound\b", r"\1lower bounds", merged)
    return merged.replace("\0", metric_sentence(list(metrics)))


def causes(items: list[Finding]) -> list[Finding]:
    """The findings that can make a number incomplete (warnings and errors; notes are left out)."""
    return [item for item in items if item.severity != "info"]


def incomplete_summary(report: dict[str, Any]) -> str:
    """``MACs, module FLOPs and operator FLOPs totals are lower bounds or unavailable; 2 layer calls are incomplete``."""
    incomplete = incomplete_metrics(report)
    totals = sorted((name.removeprefix("totals.") for name in incomplete if name.startswith("totals.")),
                    key=_metric_order)
    calls = {name.rpartition(".")[0] for name in incomplete if not name.startswith("totals.")}
    parts = []
    if totals:
        parts.append(f"the {metric_sentence(totals)} total" + ("s are lower bounds or unavailable" if len(totals) > 1
                                                                 else " is a lower bound or unavailable"))
    if calls:
        parts.append(f"{len(calls)} layer call{'s' if len(calls) > 1 else ''} "
                     f"{'have' if len(calls) > 1 else 'has'} incomplete estimates")
    return "; ".join(parts)


def incomplete_message(report: dict[str, Any]) -> str:
    """The message of `IncompleteAnalysisError`: what is incomplete and why, naming layer types and operators."""
    found = causes(findings(report))
    incomplete = incomplete_metrics(report)
    shown = ", ".join(incomplete[:8]) + (f" and {len(incomplete) - 8} more" if len(incomplete) > 8 else "")
    lines = [f"strict analysis is incomplete: {incomplete_summary(report) or 'some metrics are incomplete'}.",
             f"Incomplete: {shown}."]
    if found:
        lines.append("Caused by:")
        lines += [f"  - {item.summary}" for item in found[:SHOWN_CAUSES]]
        if len(found) > SHOWN_CAUSES:
            lines.append(f"  - and {len(found) - SHOWN_CAUSES} more")
    lines.append("See report['diagnostics'] (the exception's .report) for every record.")
    return "\n".join(lines)


__all__ = ["METRIC_LABELS", "METRIC_NAMES", "Finding", "causes", "findings", "incomplete_message",
           "incomplete_summary", "layer_label", "metric_sentence"]
