"""The view of one report, in display order: display-ready text next to the status it came from, so no renderer
formats a number or decides how a lower bound reads."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ..diagnostics import CODES
from ..findings import METRIC_LABELS, Finding, causes, findings, incomplete_summary
from ..results import ROOT_LABEL, SUMMABLE_METRICS
from ..wire import call_key
from .breakdown import PartRow
from .cells import PART_STATUS, Cell, cell_markers, legend, metric_cell, parameter_cell, worst_status
from .formatting import exact_count, format_bytes, format_count, format_parameters
from .layers import MARKDOWN_COLUMNS, MARKDOWN_LEFT_OUT, Column, LayerRow, layer_label, layer_rows, owned_metrics
from .memory import MemoryView, memory_view
from .parallel import ParallelView, parallel_view
from .timing import TimeView
from .training import TrainingView, training_view
from .values import value_text

FIXED_METHODS = {
    "sum_of_layer_estimates": "Model totals: the sum of the retained per-call module estimates, each counted once.",
    "operator_dispatch": "Operator FLOPs: PyTorch operators observed through dispatch during the same forward pass.",
    "functional_ops": "Module view of work a module did directly (residual additions, functional calls), estimated "
                      "with the functional-op formulas.",
    "unsupported_module": "No handler exists for the module type: the estimate is unavailable, never a zero.",
    "traced_live_tensor_bytes": "Memory: the bytes of live tensors, each storage followed from the operator that "
                                "creates it to its release (no allocator caching, fragmentation or kernel workspaces).",
    "fvcore_activation_count": "Activations: the elements of the outputs of counted operators, in fvcore's convention "
                               "(the one timm's model cards use); a count, not bytes.",
}
#: The memory totals of a report analyzed with ``memory=True``: key, label.
MEMORY_TOTALS = (("forward_peak_bytes", "Forward peak memory"), ("activations", "Activations"))


@dataclass(frozen=True)
class TotalRow:
    label: str
    view: str
    cell: Cell
    method: str = ""


@dataclass(frozen=True)
class OwnerView:
    owner: str
    type_name: str
    metrics: str
    covered: list[str]


@dataclass(frozen=True)
class TreeItem:
    """One row of the collapsible tree: a layer call, or an "of which" part right under its owner.

    ``position`` is the row's index in the tree and ``end`` one past its last descendant, so a renderer (and the
    tree's script) can fold a subtree by index range.
    """

    position: int
    end: int
    depth: int
    #: The tree position of the enclosing row ("" for the root), which a filter shows as a match's context.
    parent: int | str
    row: LayerRow
    part: PartRow | None = None

    @property
    def has_children(self) -> bool:
        return self.end > self.position + 1

    def cell(self, key: str) -> Cell:
        if self.part is None:
            return self.row.cell(key)
        if key == "layer":
            text = f"of which {self.part.part}" if self.part.path == self.row.path else self.part.label
            return Cell(text, PART_STATUS, f"{self.part.path or ROOT_LABEL}: {self.part.part}, part of {self.part.owner}'s "
                        "estimate (already included in it)")
        return self.part.cell(key)


@dataclass
class ReportView:
    title: str
    description: str
    status: str
    totals: list[TotalRow]
    layers: list[LayerRow]
    owners: list[OwnerView]
    by_operator: list[dict[str, Any]]
    uncounted: list[dict[str, Any]]
    ignored: list[dict[str, Any]]
    custom_formulas: list[str]
    custom_handlers: list[dict[str, str]]
    findings: list[Finding]
    codes: list[tuple[str, str]]
    methods: list[tuple[str, str]]
    context: list[tuple[str, str]]
    inputs: list[tuple[str, str]]
    #: What is incomplete, in one sentence ("" for a complete report).
    incomplete: str = ""
    training: TrainingView | None = None
    memory: MemoryView | None = None
    parallel: ParallelView | None = None
    #: The forward's bound on a named device and its measured time (`torchscan.views.timing.time_view`: the site
    #: sets it from the registry entry's ``hardware`` and the report's ``time``), else None.
    time: TimeView | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def causes(self) -> list[Finding]:
        """The findings that make numbers incomplete (what a partial page's admonition names)."""
        return causes(self.findings)

    @property
    def markdown_columns(self) -> tuple[Column, ...]:
        """The columns of the portable Markdown layer table."""
        return MARKDOWN_COLUMNS

    @property
    def markdown_left_out(self) -> str:
        """The columns the portable Markdown layer table leaves out, for the sentence under it."""
        return ", ".join(column.header for column in MARKDOWN_LEFT_OUT)

    @cached_property
    def tree(self) -> list[TreeItem]:
        return tree_items(self.layers)

    def legend(self, columns: Iterable[str], items: Iterable[LayerRow] | None = None) -> list[tuple[str, str]]:
        """The markers the layer table shows in ``columns`` (over ``items``, default every row), explained."""
        keys = list(columns)
        markers: set[str] = set()
        for row in self.layers if items is None else items:
            for key in keys:
                markers |= cell_markers(row.cell(key))
                markers |= {"owner"} if key == "ownership" and row.ownership.status == "owner" else set()
            markers |= ({"⚠"} if row.problems else set()) | ({"#k"} if row.call_index else set())
            markers |= {"of which"} if row.parts else set()
        return legend(markers)


def report_view(report: dict[str, Any], title: str = "", description: str = "") -> ReportView:
    """Everything the report renderers show, in display order."""
    totals = report["totals"]
    layers = layer_rows(report)
    operators = report["operator_flops"]
    return ReportView(
        title=title or report["context"]["model_type"].rpartition(".")[2],
        description=description,
        status=worst_status([totals[name] for name in (*SUMMABLE_METRICS, "operator_flops")]),
        totals=total_rows(totals),
        layers=layers,
        owners=owner_views(report, layers),
        by_operator=[{"operator": row["operator"], "calls": format_count(row["calls"]),
                      "flops": format_count(row["flops"]), "exact": f"{exact_count(row['flops'])} FLOPs in "
                      f"{exact_count(row['calls'])} calls"} for row in operators["by_operator"]],
        uncounted=[{**row, "calls": format_count(row["calls"])} for row in operators["uncounted"]],
        ignored=[{**row, "calls": format_count(row["calls"])} for row in operators["ignored"]],
        custom_formulas=list(report["context"].get("custom_formulas", [])),
        custom_handlers=[{"type": row["type"], "method": row["method"],
                          "subtree": ", ".join(_metric_labels(row["subtree_metrics"])) or "—"}
                         for row in report["context"].get("custom_modules", [])],
        findings=findings(report),
        codes=sorted({(item["code"], CODES.get(item["code"], ("", ""))[1]) for item in report["diagnostics"]}),
        methods=method_rows(report),
        context=context_rows(report["context"]),
        inputs=input_rows(report["inputs"]),
        incomplete=incomplete_summary(report),
        training=training_view(report),
        memory=memory_view(report),
        parallel=parallel_view(report),
    )


def _metric_labels(names: Iterable[str]) -> list[str]:
    return [METRIC_LABELS.get(name, name) for name in names]


def total_rows(totals: dict[str, Any]) -> list[TotalRow]:
    params = totals["parameters"]
    plain = "structure"
    rows = [
        TotalRow("Parameters", plain, parameter_cell(params["total"], "parameters (shared tensors counted once)")),
        TotalRow("Trainable / frozen", plain, Cell(f"{format_parameters(params['trainable'])} / "
                                                   f"{format_parameters(params['frozen'])}", "complete",
                                                   f"{exact_count(params['trainable'])} trainable, "
                                                   f"{exact_count(params['frozen'])} frozen")),
        TotalRow("Parameter memory", plain, Cell(format_bytes(params["bytes"]), "complete",
                                                 f"{exact_count(params['bytes'])} bytes", params["bytes"])),
        TotalRow("Buffers", plain, Cell(f"{format_parameters(totals['buffers']['total'])} "
                                        f"({format_bytes(totals['buffers']['bytes'])})", "complete",
                                        f"{exact_count(totals['buffers']['total'])} elements, "
                                        f"{exact_count(totals['buffers']['bytes'])} bytes")),
    ]
    for name, label, view in (("macs", "MACs", "module view"), ("module_flops", "FLOPs", "module view"),
                              ("dmas", "DMAs", "module view"), ("operator_flops", "FLOPs", "operator view")):
        rows.append(TotalRow(label, view, metric_cell(totals[name]), totals[name]["method"]))
    rows += [TotalRow(label, "memory", metric_cell(totals[name]), totals[name]["method"])
             for name, label in MEMORY_TOTALS if name in totals]
    return rows


def tree_items(rows: list[LayerRow]) -> list[TreeItem]:
    """The layer rows in pre-order with tree extents, each followed by the "of which" parts shown under it."""
    hosted = hosted_parts(rows)
    starts: list[int] = []
    position = 0
    for parts in hosted:
        starts.append(position)
        position += 1 + len(parts)
    items = []
    for row, start, parts in zip(rows, starts, hosted, strict=True):
        end = starts[row.end] if row.end < len(rows) else position
        items.append(TreeItem(start, end, row.depth, "" if row.parent is None else starts[row.parent], row))
        items += [TreeItem(start + 1 + offset, start + 2 + offset, row.depth + 1, start, row, part)
                  for offset, part in enumerate(parts)]
    return items


def hosted_parts(rows: list[LayerRow]) -> list[list[PartRow]]:
    """Which "of which" parts each row shows: an owner's part sits under the call of the module it belongs to (the
    first one inside the owner's subtree), or under the owner itself when no such call ran (a fused kernel)."""
    shown: list[list[PartRow]] = [[] for _ in rows]
    for row in rows:
        if not row.parts:
            continue
        inside = {rows[index].path: index for index in range(row.end - 1, row.index, -1)}
        for part in row.parts:
            shown[inside.get(part.path, row.index)].append(part)
    return shown


def owner_views(report: dict[str, Any], rows: list[LayerRow]) -> list[OwnerView]:
    """Each subtree owner with the metrics it owns and the rows it covers (``rows``: one per layer of the report)."""
    covered: dict[tuple[str, int], list[str]] = {}
    for layer in report["layers"]:
        for owner in {call_key(ref) for ref in layer.get("metric_owners", {}).values()}:
            covered.setdefault(owner, []).append(layer_label(layer["path"], layer["call_index"]))
    return [OwnerView(row.label, row.type_name, ", ".join(owned), covered.get(call_key(layer), []))
            for layer, row in zip(report["layers"], rows, strict=True) if (owned := owned_metrics(layer))]


def method_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """Every method label that appears in the report, with what it means."""
    labels = {report["totals"][name]["method"] for name in (*SUMMABLE_METRICS, "operator_flops")}
    labels |= {report["totals"][name]["method"] for name, _ in MEMORY_TOTALS if name in report["totals"]}
    for layer in report["layers"]:
        labels.update(result["method"] for result in layer["metrics"].values())
    custom = {row["method"] for row in report["context"].get("custom_modules", [])}
    return [(label, describe_method(label, custom)) for label in sorted(labels)]


def describe_method(label: str, custom: set[str]) -> str:
    if label in custom:
        return "A custom module handler passed to this analysis (custom_modules)."
    if label in FIXED_METHODS:
        return FIXED_METHODS[label]
    if label.startswith("formula:"):
        return f"Built-in module formula of the {label.partition(':')[2]} family (see the counting conventions)."
    return "A method label reported by the analysis."


def context_rows(context: dict[str, Any]) -> list[tuple[str, str]]:
    execution = context["execution"]
    prior = context["prior_training"]
    return [
        ("Model type", context["model_type"]),
        ("torchscan", context["torchscan"]), ("torch", context["torch"]), ("Python", context["python"]),
        ("Analysis mode", context["analysis_mode"]),
        ("Execution", f"{execution['mode']} mode, {execution['grad']}, {execution['forward_passes']} forward pass(es)"),
        ("Training flags before", (f"root {'training' if prior['root'] else 'eval'}; {prior['training_modules']} of "
                                   f"{prior['modules']} modules in training mode (restored afterwards)")),
        ("Devices", ", ".join(context["devices"]) or "none (no parameters or buffers)"),
        ("Dtypes", ", ".join(context["dtypes"]) or "none"),
        *(("Warning", f"{item['category']}: {item['message']}") for item in context.get("warnings", [])),
    ]


def input_rows(inputs: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [(f"args[{position}]", value_text(value)) for position, value in enumerate(inputs["args"])]
    rows += [(f"kwargs[{item['key'] or '?'}]", value_text(item["value"])) for item in inputs["kwargs"]]
    return [("source", inputs.get("source", "provided")), *rows]
