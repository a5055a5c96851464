"""View objects of a before/after review (built on `torchscan.compare_reports`), shared by HTML and Markdown.

A delta is shown as a number only when both sides are complete; otherwise it reads "unknown", because a
difference involving a lower bound has no bound of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..compare import compare_reports
from ..formatting import format_count
from ..views import EMPTY, Cell, layer_label, metric_cell, shape_text

TOTAL_LABELS = (("parameters", "Parameters", "structure"), ("macs", "MACs", "module view"),
                ("module_flops", "FLOPs", "module view"), ("dmas", "DMAs", "module view"),
                ("operator_flops", "FLOPs", "operator view"))
LAYER_METRIC_LABELS = {"macs": "MACs", "module_flops": "FLOPs", "dmas": "DMAs", "receptive_field": "receptive field",
                       "effective_stride": "stride", "effective_padding": "padding"}


@dataclass(frozen=True)
class DeltaRow:
    label: str
    view: str
    before: Cell
    after: Cell
    delta: str
    change: str


@dataclass(frozen=True)
class LayerChange:
    label: str
    type_name: str
    details: list[str]


@dataclass(frozen=True)
class LayerDelta:
    """One layer call's change of a summable estimate, as a number for the charts.

    ``status`` is ``complete`` (``value`` is the exact delta), ``partial`` (an added or removed call whose estimate is
    a lower bound: the delta is at least ``value`` in magnitude, in its direction) or ``unavailable`` (unknown).
    """

    label: str
    type_name: str
    change: str
    before: Cell
    after: Cell
    status: str
    value: float | None


@dataclass
class DiffView:
    title: str
    context: list[tuple[str, str, str]]
    totals: list[DeltaRow]
    added: list[LayerChange]
    removed: list[LayerChange]
    changed: list[LayerChange]
    #: Per summable metric, every layer call whose own estimate changed (added, removed, changed), for the charts.
    cost_deltas: dict[str, list[LayerDelta]] = field(default_factory=dict)
    #: The charts (``torchscan.report.charts.Chart``), drawn once on demand by the documents that show them.
    charts: list[Any] | None = None

    @property
    def unchanged(self) -> bool:
        return not (self.added or self.removed or self.changed) and all(row.change == "unchanged"
                                                                        for row in self.totals)


def signed(value: float | list) -> str:
    """``+1.20 M`` / ``−3`` / ``0``; per-dimension values (receptive fields) element by element."""
    if isinstance(value, list):
        return "×".join(signed(item) for item in value)
    if value == 0:
        return "0"
    return ("+" if value > 0 else "−") + format_count(abs(value))


def diff_view(before: dict[str, Any], after: dict[str, Any], title: str = "Before / after") -> DiffView:
    comparison = compare_reports(before, after)
    layers = comparison["layers"]
    return DiffView(
        title=title,
        context=_context(comparison["context"]["before"], comparison["context"]["after"]),
        totals=[_total_row(comparison["totals"][name], label, view) for name, label, view in TOTAL_LABELS],
        added=[_identity(item, "added") for item in layers["added"]],
        removed=[_identity(item, "removed") for item in layers["removed"]],
        changed=[LayerChange(layer_label(item["path"], item["call_index"]), item["type"].rpartition(".")[2],
                             _details(item["changes"])) for item in layers["changed"]],
        cost_deltas={name: _cost_deltas(layers, name) for name in ("macs", "module_flops")},
    )


def _cost_deltas(layers: dict[str, list[dict[str, Any]]], name: str) -> list[LayerDelta]:
    """The calls whose own ``name`` estimate differs: added and removed calls count from or down to nothing."""
    deltas = []
    for change, sign in (("added", 1), ("removed", -1)):
        for item in layers[change]:
            result = item.get("metrics", {}).get(name)
            if result is None:
                continue
            cell = metric_cell(result)
            status = result["status"] if result["status"] in ("complete", "partial") else "unavailable"
            value = None if status == "unavailable" else sign * (cell.sort or 0)
            if status == "complete" and not value:
                continue
            before, after = (EMPTY, cell) if sign > 0 else (cell, EMPTY)
            deltas.append(LayerDelta(layer_label(item["path"], item["call_index"]), item["type"].rpartition(".")[2],
                                     change, before, after, status, value))
    for item in layers["changed"]:
        entry = item["changes"].get("metrics", {}).get(name)
        if entry is None:
            continue
        known = entry["delta"]["status"] == "complete"
        deltas.append(LayerDelta(layer_label(item["path"], item["call_index"]), item["type"].rpartition(".")[2],
                                 "changed", metric_cell(entry["before"]) if entry["before"] else EMPTY,
                                 metric_cell(entry["after"]) if entry["after"] else EMPTY,
                                 "complete" if known else "unavailable", entry["delta"]["value"] if known else None))
    return deltas


def _context(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, str, str]]:
    keys = [*before, *(key for key in after if key not in before)]
    return [(key.replace("_", " "), _text(before.get(key)), _text(after.get(key))) for key in keys]


def _text(value: Any) -> str:
    return "—" if value is None else str(value)


def _total_row(entry: dict[str, Any], label: str, view: str) -> DeltaRow:
    if label == "Parameters":
        delta = entry["delta"]
        return DeltaRow(label, view, Cell(format_count(entry["before"]), "complete", sort=entry["before"]),
                        Cell(format_count(entry["after"]), "complete", sort=entry["after"]), signed(delta),
                        _direction(delta))
    delta = entry["delta"]
    if delta["status"] != "complete":
        return DeltaRow(label, view, metric_cell(entry["before"]), metric_cell(entry["after"]),
                        "unknown (a side is incomplete)", "unknown")
    return DeltaRow(label, view, metric_cell(entry["before"]), metric_cell(entry["after"]), signed(delta["value"]),
                    _direction(delta["value"]))


def _direction(delta: float) -> str:
    return "unchanged" if delta == 0 else "increased" if delta > 0 else "decreased"


def _identity(item: dict[str, Any], change: str) -> LayerChange:
    metrics = item.get("metrics", {})
    details = [f"{LAYER_METRIC_LABELS[name]} {metric_cell(metrics[name]).text}" for name in ("macs", "module_flops")
               if name in metrics]
    return LayerChange(layer_label(item["path"], item["call_index"]), item["type"].rpartition(".")[2], details)


def _details(changes: dict[str, Any]) -> list[str]:
    details = []
    if "type" in changes:
        details.append(f"type {changes['type']['before']} → {changes['type']['after']}")
    if "parameters" in changes:
        numbers = changes["parameters"]
        details.append(f"parameters {format_count(numbers['before'])} → {format_count(numbers['after'])} "
                       f"({signed(numbers['delta'])})")
    if "output" in changes:
        details.append(f"output {shape_text(changes['output']['before'])} → {shape_text(changes['output']['after'])}")
    for name, entry in changes.get("metrics", {}).items():
        old = metric_cell(entry["before"]) if entry["before"] else EMPTY
        new = metric_cell(entry["after"]) if entry["after"] else EMPTY
        delta = entry["delta"]
        shown = signed(delta["value"]) if delta["status"] == "complete" else "delta unknown"
        details.append(f"{LAYER_METRIC_LABELS.get(name, name)} {old.text or 'none'} → {new.text or 'none'} ({shown})")
    return details
