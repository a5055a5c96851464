"""View objects of one report: what every renderer shows, computed once (Markdown and HTML render the same views).

A view holds display-ready text next to the status it came from, so no template ever formats a number or decides
how a lower bound reads: partial values read as lower bounds (``≥``), unavailable ones as unavailable, never as 0.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..diagnostics import CODES
from ..formatting import format_count, format_metric
from ..results import METRIC_UNITS, SUMMABLE_METRICS, add_results

METRIC_LABELS = {"macs": "MACs", "module_flops": "FLOPs", "dmas": "DMAs", "receptive_field": "Receptive field",
                 "effective_stride": "Stride", "effective_padding": "Padding"}
STATUS_WORDS = {"complete": "complete", "partial": "lower bound", "unavailable": "unavailable",
                "not_requested": "not requested", "not_applicable": "not applicable"}
STATUS_RANK = {"complete": 0, "not_applicable": 0, "not_requested": 1, "partial": 2, "unavailable": 3}
FIXED_METHODS = {
    "sum_of_layer_estimates": "Model totals: the sum of the retained per-call module estimates, each counted once.",
    "operator_dispatch": "Operator FLOPs: PyTorch operators observed through dispatch during the same forward pass.",
    "functional_ops": "Module view of work a module did directly (residual additions, functional calls), estimated "
                      "with the functional-op formulas.",
    "unsupported_module": "No handler exists for the module type: the estimate is unavailable, never a zero.",
}


@dataclass(frozen=True)
class Cell:
    """One displayed number: ``text`` as shown, ``status`` for styling, ``note`` for a tooltip, ``sort`` key."""

    text: str
    status: str = "empty"
    note: str = ""
    sort: float | None = None


EMPTY = Cell("")


@dataclass(frozen=True)
class TotalRow:
    label: str
    view: str
    cell: Cell
    method: str = ""


@dataclass
class LayerRow:
    index: int
    parent: int | None
    end: int
    depth: int
    name: str
    path: str
    call_index: int
    type_name: str
    type_full: str
    output: str
    params: Cell
    metrics: dict[str, Cell]
    op_direct: Cell
    op_inclusive: Cell
    ownership: str = ""
    covered_by: str = ""
    problems: int = 0
    #: This call's own retained estimates of the summable metrics (covered and absent ones left out): what the
    #: charts add up, so a subtree owner counts once and its covered calls not at all.
    own: dict[str, Cell] = field(default_factory=dict)

    @property
    def has_children(self) -> bool:
        return self.end > self.index + 1

    @property
    def label(self) -> str:
        return layer_label(self.path, self.call_index)


@dataclass(frozen=True)
class OwnerView:
    owner: str
    type_name: str
    metrics: str
    covered: list[str]


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
    diagnostics: list[dict[str, str]]
    codes: list[tuple[str, str]]
    methods: list[tuple[str, str]]
    context: list[tuple[str, str]]
    inputs: list[tuple[str, str]]
    extra: dict[str, Any] = field(default_factory=dict)
    #: The cost charts (``torchscan.report.charts.Chart``), drawn once on demand by the documents that show them.
    charts: list[Any] | None = None


def layer_label(path: str, call_index: int) -> str:
    """``encoder.layers.0`` (first call) or ``encoder.layers.0 #2`` (third call); the root reads ``(root)``."""
    return (path or "(root)") + (f" #{call_index}" if call_index else "")


def metric_cell(result: dict[str, Any] | None) -> Cell:
    if result is None:
        return EMPTY
    status = result["status"]
    number = result["value"] if status == "complete" else result["known_value"]
    sort = float(number) if isinstance(number, (int, float)) else None
    note = f"{STATUS_WORDS.get(status, status)}; method {result['method']}; scope {result['scope']}"
    text = format_metric(result)
    if status == "unavailable":
        text = "unavailable"
    return Cell(text, status, note, sort)


def worst_status(results: list[dict[str, Any] | None]) -> str:
    statuses = [result["status"] for result in results if result]
    return max(statuses, key=lambda status: STATUS_RANK.get(status, 3)) if statuses else "complete"


def report_view(report: dict[str, Any], title: str = "", description: str = "") -> ReportView:
    """Everything the report templates show, in display order."""
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
        by_operator=[{"operator": row["operator"], "calls": row["calls"], "flops": format_count(row["flops"])}
                     for row in operators["by_operator"]],
        uncounted=list(operators["uncounted"]),
        ignored=list(operators["ignored"]),
        custom_formulas=list(report["context"].get("custom_formulas", [])),
        custom_handlers=[{"type": row["type"], "method": row["method"],
                          "subtree": ", ".join(METRIC_LABELS.get(m, m) for m in row["subtree_metrics"]) or "—"}
                         for row in report["context"].get("custom_modules", [])],
        diagnostics=diagnostic_rows(report["diagnostics"]),
        codes=sorted({(item["code"], CODES.get(item["code"], ("", ""))[1]) for item in report["diagnostics"]}),
        methods=method_rows(report),
        context=context_rows(report["context"]),
        inputs=input_rows(report["inputs"]),
    )


def total_rows(totals: dict[str, Any]) -> list[TotalRow]:
    params = totals["parameters"]
    plain = "structure"
    rows = [
        TotalRow("Parameters", plain, Cell(format_count(params["total"]), "complete", f"{params['total']:,} "
                                           "parameters (shared tensors counted once)", params["total"])),
        TotalRow("Trainable / frozen", plain, Cell(f"{format_count(params['trainable'])} / "
                                                   f"{format_count(params['frozen'])}", "complete")),
        TotalRow("Parameter memory", plain, Cell(format_count(params["bytes"]) + "B", "complete",
                                                 f"{params['bytes']:,} bytes", params["bytes"])),
        TotalRow("Buffers", plain, Cell(f"{format_count(totals['buffers']['total'])} "
                                        f"({format_count(totals['buffers']['bytes'])}B)", "complete")),
    ]
    for name, label, view in (("macs", "MACs", "module view"), ("module_flops", "FLOPs", "module view"),
                              ("dmas", "DMAs", "module view"), ("operator_flops", "FLOPs", "operator view")):
        rows.append(TotalRow(label, view, metric_cell(totals[name]), totals[name]["method"]))
    return rows


def layer_rows(report: dict[str, Any]) -> list[LayerRow]:
    """One row per layer call in call-start (pre-)order, with subtree extents for the collapsible tree."""
    layers = report["layers"]
    position = {(layer["path"], layer["call_index"]): index for index, layer in enumerate(layers)}
    parents = [position.get((layer["parent"]["path"], layer["parent"]["call_index"])) if layer["parent"] else None
               for layer in layers]
    ends = _subtree_ends(parents)
    sums = {name: _subtree_sums(layers, parents, name) for name in SUMMABLE_METRICS}
    problems: dict[tuple[str, int], int] = {}
    for item in report["diagnostics"]:
        if "path" in item and item["severity"] != "info":
            key = (item["path"], item.get("call_index", 0))
            problems[key] = problems.get(key, 0) + 1
    rows = []
    for index, layer in enumerate(layers):
        key = (layer["path"], layer["call_index"])
        rows.append(LayerRow(
            index=index, parent=parents[index], end=ends[index], depth=layer["depth"], name=layer["name"] or "(root)",
            path=layer["path"], call_index=layer["call_index"], type_name=layer["type"].rpartition(".")[2],
            type_full=layer["type"], output=shape_text(layer["output"]),
            params=_params_cell(layer), metrics=_metric_cells(layer, sums, index, ends[index] > index + 1),
            op_direct=metric_cell(layer["operator_flops"]["direct"]),
            op_inclusive=metric_cell(layer["operator_flops"]["inclusive"]),
            ownership=_ownership_text(layer), covered_by=_covered_text(layer), problems=problems.get(key, 0),
            own={name: metric_cell(layer["metrics"][name]) for name in SUMMABLE_METRICS if name in layer["metrics"]}))
    return rows


def _subtree_ends(parents: list[int | None]) -> list[int]:
    """``ends[i]``: one past the last descendant of row ``i`` (rows are in pre-order)."""
    ends = [index + 1 for index in range(len(parents))]
    for index in range(len(parents) - 1, -1, -1):
        parent = parents[index]
        if parent is not None:
            ends[parent] = max(ends[parent], ends[index])
    return ends


def _subtree_sums(layers: list[dict[str, Any]], parents: list[int | None], name: str) -> list[dict[str, Any] | None]:
    """Per row, the sum of the retained estimates of ``name`` in its call and every call inside it."""
    parts: list[list[dict[str, Any]]] = [[] for _ in layers]
    sums: list[dict[str, Any] | None] = [None] * len(layers)
    for index in range(len(layers) - 1, -1, -1):
        own = layers[index]["metrics"].get(name)
        found = parts[index] + ([own] if own else [])
        if found:
            sums[index] = add_results(found, METRIC_UNITS[name], "subtree", "sum_of_layer_estimates")
            if parents[index] is not None:
                parts[parents[index]].append(sums[index])
    return sums


def _params_cell(layer: dict[str, Any]) -> Cell:
    count = layer["parameters"]["count"]
    return Cell(format_count(count), "complete", f"{count:,} parameters", count) if count else Cell("", "empty", "", 0)


def _metric_cells(layer: dict[str, Any], sums: dict[str, list[Any]], index: int, has_children: bool
                  ) -> dict[str, Cell]:
    """Own estimates for leaf calls; for a call with calls inside, the sum over its subtree (marked Σ)."""
    cells = {}
    owners = layer.get("metric_owners", {})
    delegated = layer.get("delegated_metrics", [])
    for name in METRIC_LABELS:
        own = layer["metrics"].get(name)
        subtree = sums[name][index] if name in sums else None
        if name in owners:
            owner = layer_label(owners[name]["path"], owners[name]["call_index"])
            cells[name] = Cell("covered", "covered", f"counted by {owner}")
        elif has_children and subtree is not None and (name in delegated or own is not None):
            total = metric_cell(subtree)
            mine = f"this call's own estimate {metric_cell(own).text}, plus " if own is not None else ""
            cells[name] = Cell("Σ " + total.text, total.status, f"sum of {mine}the calls inside: {total.note}",
                               total.sort)
        else:
            cells[name] = metric_cell(own)
    return cells


def _ownership_text(layer: dict[str, Any]) -> str:
    owned = [METRIC_LABELS[name] for name, kind in layer.get("metric_ownership", {}).items() if kind == "subtree"]
    return "owns subtree: " + ", ".join(owned) if owned else ""


def _covered_text(layer: dict[str, Any]) -> str:
    by_owner: dict[str, list[str]] = {}
    for name, owner in layer.get("metric_owners", {}).items():
        by_owner.setdefault(layer_label(owner["path"], owner["call_index"]), []).append(METRIC_LABELS[name])
    return "; ".join(f"{', '.join(names)} in {owner}" for owner, names in sorted(by_owner.items()))


def owner_views(report: dict[str, Any], rows: list[LayerRow]) -> list[OwnerView]:
    """Each subtree owner with the metrics it owns and the rows it covers."""
    covered: dict[tuple[str, int], list[str]] = {}
    for layer in report["layers"]:
        for owner in {(ref["path"], ref["call_index"]) for ref in layer.get("metric_owners", {}).values()}:
            covered.setdefault(owner, []).append(layer_label(layer["path"], layer["call_index"]))
    views = []
    for layer, row in zip(report["layers"], rows):
        if row.ownership:
            key = (layer["path"], layer["call_index"])
            views.append(OwnerView(row.label, row.type_name, row.ownership.removeprefix("owns subtree: "),
                                   covered.get(key, [])))
    return views


def diagnostic_rows(diagnostics: list[dict[str, Any]]) -> list[dict[str, str]]:
    rows = []
    for item in diagnostics:
        where = item.get("operator", "")
        if "path" in item:
            where = layer_label(item["path"], item.get("call_index", 0)) + (f" ({where})" if where else "")
        rows.append({"severity": item["severity"], "code": item["code"], "metric": item.get("metric") or "",
                     "where": where or "model", "message": item["message"]})
    return rows


def method_rows(report: dict[str, Any]) -> list[tuple[str, str]]:
    """Every method label that appears in the report, with what it means."""
    labels = {report["totals"][name]["method"] for name in (*SUMMABLE_METRICS, "operator_flops")}
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
    ]


def input_rows(inputs: dict[str, Any]) -> list[tuple[str, str]]:
    rows = [(f"args[{position}]", value_text(value)) for position, value in enumerate(inputs["args"])]
    rows += [(f"kwargs[{item['key'] or '?'}]", value_text(item["value"])) for item in inputs["kwargs"]]
    return [("source", inputs.get("source", "provided")), *rows]


def value_text(meta: dict[str, Any]) -> str:
    """``float32[1, 3, 224, 224] cpu`` for a tensor; containers recursively."""
    if meta["kind"] == "tensor":
        return f"{meta['dtype']}[{', '.join(map(str, meta['shape']))}] {meta['device']}"
    return shape_text(meta, limit=8, detailed=True)


def shape_text(meta: dict[str, Any] | None, limit: int = 3, detailed: bool = False) -> str:
    """A short description of an output: ``[1, 64, 56, 56]``, ``([1, 8], [1, 8])``, ``failed``."""
    if not meta:
        return ""
    kind = meta["kind"]
    if kind == "tensor":
        shape = "[" + ", ".join(str(dim) for dim in meta["shape"]) + "]"
        return f"{meta['dtype']}{shape}" if detailed else shape
    if kind in ("tuple", "list", "sequence", "namedtuple", "mapping"):
        items = meta.get("items", [])
        parts = [shape_text(item.get("value", item), limit, detailed) for item in items[:limit]]
        more = ", …" if len(items) > limit else ""
        opener, closer = ("{", "}") if kind == "mapping" else ("[", "]") if kind == "list" else ("(", ")")
        return opener + ", ".join(parts) + more + closer
    if kind in ("scalar", "object"):
        return meta.get("type", kind)
    return kind
