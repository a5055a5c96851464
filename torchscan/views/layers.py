"""The rows of the layer view: one per layer call in call-start (pre-)order, with subtree extents, sums, ownership
and the "of which" parts of subtree owners.

A composite call shows the sum over its subtree (``Σ``); a call whose metric a subtree owner counts reads
*covered*; a row shown where it does not sit under its module's parent (a module called from elsewhere) is named
by its full dotted path.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..findings import METRIC_LABELS, layer_label
from ..results import METRIC_UNITS, ROOT_LABEL, SUBTREE, SUMMABLE_METRICS, MetricResult, add_results
from ..wire import call_key, positions_by_call
from .breakdown import PartRow, part_rows
from .cells import EMPTY, Cell, metric_cell, parameter_cell
from .formatting import exact_count, format_percent
from .values import shape_text


@dataclass(frozen=True)
class Column:
    """One column of the layer view: its key (a `LayerRow.cell` key), header, whether it holds numbers, a tooltip,
    whether the HTML tree shows it before the reader chooses (``shown``; the others are one click away), and its
    ``priority``: where a page is too narrow, the tree drops the visible columns of lowest priority first (and its
    column chooser says how many are hidden), never clipping one silently."""

    key: str
    header: str
    numeric: bool = True
    title: str = ""
    shown: bool = True
    priority: int = 0


#: Every column of the layer view, in display order; each renderer shows a subset, cell for cell the same.
LAYER_COLUMNS = (
    Column("layer", "Layer", False, priority=100), Column("type", "Type", False, priority=90),
    Column("output", "Output", False, priority=50),
    Column("params", "Params", title="parameters of the module; Σ on a composite row: its whole subtree (a shared "
                                     "tensor once), at the module's first call", priority=80),
    Column("params_share", "% Params", title="the row's parameters as a share of the model's", shown=False,
           priority=30),
    Column("buffers", "Buffers", title="buffer elements of the module; Σ on a composite row: its whole subtree",
           shown=False, priority=25),
    Column("macs", "MACs", title="module view", priority=85),
    Column("macs_share", "% MACs", title="the row's MACs as a share of the model's total", priority=60),
    Column("module_flops", "FLOPs", title="module view", priority=70),
    Column("dmas", "DMAs", title="module view", priority=40),
    Column("receptive_field", "RF", title="receptive field", shown=False, priority=15),
    Column("effective_stride", "Stride", title="effective stride", shown=False, priority=10),
    Column("effective_padding", "Padding", title="effective padding", shown=False, priority=5),
    Column("op_direct", "Op FLOPs direct", title="operator FLOPs dispatched in this call, outside its children",
           shown=False, priority=20),
    Column("op_inclusive", "Op FLOPs incl.", title="operator FLOPs dispatched in this call and its children",
           priority=45),
    Column("ownership", "Ownership", False, "subtree owners and the calls they cover", priority=55),
)
COLUMNS_BY_KEY = {column.key: column for column in LAYER_COLUMNS}
#: The columns of the portable Markdown layer table: the five of highest priority, which fit a documentation
#: page's content column beside a table of contents (a stock MkDocs Material page at 1280 px); the standalone report
#: shows every column.
MARKDOWN_COLUMNS = tuple(column for column in LAYER_COLUMNS
                         if column in sorted(LAYER_COLUMNS, key=lambda column: -column.priority)[:5])
#: The columns the Markdown layer table leaves out, named under it.
MARKDOWN_LEFT_OUT = tuple(column for column in LAYER_COLUMNS if column not in MARKDOWN_COLUMNS)


@dataclass
class LayerRow:
    """One layer call as every renderer shows it."""

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
    ownership: Cell = EMPTY
    problems: int = 0
    problem_note: str = ""
    #: The name shown in the tree (`display_name`; the full path where the relative one would be misplaced).
    display_name: str = ""
    #: This call's own retained estimates of the summable metrics (covered and absent ones left out): what the
    #: charts add up, so a subtree owner counts once and its covered calls not at all.
    own: dict[str, Cell] = field(default_factory=dict)
    #: The parts of this owner's inclusive estimate ("of which" rows), when its handler reported them.
    parts: list[PartRow] = field(default_factory=list)
    #: The module's own parameters (not its subtree's), as the report attributes them: what per-type sums add up.
    own_parameters: int = 0
    #: Buffer elements (Σ over the subtree on a composite row) and the shares of the model's parameters and MACs.
    tensors: dict[str, Cell] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return layer_label(self.path, self.call_index)

    @property
    def title(self) -> str:
        """The name cell: the display name, with ``#k`` for a repeated call."""
        return self.display_name + (f" #{self.call_index}" if self.call_index else "")

    def cell(self, key: str) -> Cell:
        """The cell of column ``key`` (see `LAYER_COLUMNS`)."""
        if key == "layer":
            return Cell(self.title, "text", self.label)
        if key == "type":
            return Cell(self.type_name, "text", self.type_full)
        if key == "output":
            return Cell(self.output, "text")
        if key in self.metrics:
            return self.metrics[key]
        if key in ("buffers", "params_share", "macs_share"):
            return self.tensors.get(key, EMPTY)
        return {"params": self.params, "op_direct": self.op_direct, "op_inclusive": self.op_inclusive,
                "ownership": self.ownership}[key]


def layer_rows(report: dict[str, Any]) -> list[LayerRow]:
    """One row per layer call in call-start (pre-)order, with subtree extents for the collapsible tree."""
    layers = report["layers"]
    position = positions_by_call(layers)
    parents = [position.get((layer["parent"]["path"], layer["parent"]["call_index"])) if layer["parent"] else None
               for layer in layers]
    ends = subtree_ends(parents)
    sums = {name: _subtree_sums(layers, parents, name) for name in SUMMABLE_METRICS}
    problems = _problems(report["diagnostics"])
    model = ModelTotals.of(report)
    return [_row(index, layer, parents[index], ends[index], sums, problems.get(call_key(layer)),
                 model) for index, layer in enumerate(layers)]


@dataclass(frozen=True)
class ModelTotals:
    """What the Σ and share cells need from the whole report: each module's subtree parameters and buffers (by
    path, a shared tensor once) and the model's totals."""

    subtree: dict[str, tuple[int, int]]
    parameters: int
    macs: dict[str, Any]

    @classmethod
    def of(cls, report: dict[str, Any]) -> ModelTotals:
        """Each called module's own parameters and buffers (as the report attributes them: a tensor shared by
        several modules once, at the first) added to every module path above it; the root holds the model's
        totals, which include the modules that were never called."""
        own: dict[str, tuple[int, int]] = {}
        for layer in report["layers"]:
            own.setdefault(layer["path"], (layer["parameters"]["count"], layer["buffers"]["count"]))
        subtree: dict[str, tuple[int, int]] = {}
        for path, (params, buffers) in own.items():
            names = path.split(".") if path else []
            for depth in range(len(names) + 1):
                prefix = ".".join(names[:depth])
                above = subtree.get(prefix, (0, 0))
                subtree[prefix] = (above[0] + params, above[1] + buffers)
        totals = report["totals"]
        subtree[""] = (totals["parameters"]["total"], totals["buffers"]["total"])
        return cls(subtree, totals["parameters"]["total"], totals["macs"])


def _row(index: int, layer: dict[str, Any], parent: int | None, end: int, sums: dict[str, list[Any]],
         problems: list[str] | None, model: ModelTotals) -> LayerRow:
    label = layer_label(layer["path"], layer["call_index"])
    composite = end > index + 1
    metrics = _metric_cells(layer, sums, index, composite)
    params, tensors = _tensor_cells(layer, composite, model)
    tensors["macs_share"] = _macs_share(metrics["macs"], model.macs)
    return LayerRow(
        index=index, parent=parent, end=end, depth=layer["depth"], name=layer["name"] or ROOT_LABEL,
        path=layer["path"], call_index=layer["call_index"], type_name=layer["type"].rpartition(".")[2],
        type_full=layer["type"], output=shape_text(layer["output"]), params=params, metrics=metrics, tensors=tensors,
        op_direct=metric_cell(layer["operator_flops"]["direct"]),
        op_inclusive=metric_cell(layer["operator_flops"]["inclusive"]),
        ownership=_ownership_cell(layer), problems=len(problems or ()),
        problem_note="; ".join(sorted(set(problems or ()))), display_name=display_name(layer),
        own={name: metric_cell(layer["metrics"][name]) for name in SUMMABLE_METRICS if name in layer["metrics"]},
        parts=part_rows(label, layer["path"], layer.get("breakdown", [])), own_parameters=layer["parameters"]["count"])


def display_name(layer: dict[str, Any]) -> str:
    """The path relative to the parent row (``0``, or ``layers.3`` under a stack that calls its ModuleList's items
    directly), or the full path when the call is made from outside its module's parent."""
    if not layer["path"]:
        return ROOT_LABEL
    parent = layer["parent"]["path"] if layer["parent"] else ""
    return layer["path"].removeprefix(f"{parent}.") if parent else layer["path"]


def subtree_ends(parents: list[int | None]) -> list[int]:
    """``ends[i]``: one past the last descendant of row ``i`` (rows are in pre-order)."""
    ends = [index + 1 for index in range(len(parents))]
    for index in range(len(parents) - 1, -1, -1):
        parent = parents[index]
        if parent is not None:
            ends[parent] = max(ends[parent], ends[index])
    return ends


def _problems(diagnostics: list[dict[str, Any]]) -> dict[tuple[str, int], list[str]]:
    """The codes of the warnings and errors that point at each call."""
    found: dict[tuple[str, int], list[str]] = {}
    for item in diagnostics:
        if "path" in item and item["severity"] != "info":
            found.setdefault((item["path"], item.get("call_index", 0)), []).append(item["code"])
    return found


def _subtree_sums(layers: list[dict[str, Any]], parents: list[int | None], name: str) -> list[MetricResult | None]:
    """Per row, the sum of the retained estimates of ``name`` in its call and every call inside it."""
    parts: list[list[MetricResult]] = [[] for _ in layers]
    sums: list[MetricResult | None] = [None] * len(layers)
    for index in range(len(layers) - 1, -1, -1):
        own = layers[index]["metrics"].get(name)
        found = parts[index] + ([own] if own else [])
        if found:
            total = add_results(found, METRIC_UNITS[name], SUBTREE, "sum_of_layer_estimates")
            sums[index] = total
            parent = parents[index]
            if parent is not None:
                parts[parent].append(total)
    return sums


def _tensor_cells(layer: dict[str, Any], composite: bool, model: ModelTotals) -> tuple[Cell, dict[str, Cell]]:
    """The parameters cell, and the buffers and parameter-share cells: a leaf's own tensors, a composite's whole
    subtree (``Σ``), shown once per module, at its first call (a repeated call reuses them)."""
    if composite:
        params, buffers = model.subtree.get(layer["path"], (0, 0))
    else:
        params, buffers = layer["parameters"]["count"], layer["buffers"]["count"]
    where = "in this module and the modules inside it (a shared tensor once)" if composite else "of the module"
    if layer["call_index"]:
        note = f"{exact_count(params)} parameters {where}, counted at the module's first call"
        return Cell("", "empty", note if params else ""), {"buffers": EMPTY, "params_share": EMPTY}
    cells = {"buffers": _count_cell(buffers, composite, f"buffer elements {where}")}
    cells["params_share"] = (Cell(format_percent(100 * params / model.parameters), "complete",
                                  f"{exact_count(params)} of the model's {exact_count(model.parameters)} parameters",
                                  params / model.parameters) if params and model.parameters else EMPTY)
    return _count_cell(params, composite, f"parameters {where}"), cells


def _count_cell(count: int, composite: bool, what: str) -> Cell:
    """A parameter or buffer count (``Σ`` over a subtree on a composite row); empty when there is none."""
    if not count:
        return Cell("", "empty", "", 0)
    cell = parameter_cell(count, what)
    return replace(cell, text="Σ " + cell.text) if composite else cell


def _macs_share(cell: Cell, total: dict[str, Any]) -> Cell:
    """The row's MACs as a share of the model's: ``≥`` when the row's MACs are a lower bound; of the counted total
    (said in the tooltip) when the model's total is one."""
    known = total["value"] if total["status"] == "complete" else total["known_value"]
    if cell.status not in ("complete", "partial") or cell.sort is None or not known:
        return EMPTY
    share = 100 * cell.sort / known
    whole = "the model's total" if total["status"] == "complete" else "the model's counted total (a lower bound)"
    bound = "≥" if cell.status == "partial" and total["status"] == "complete" else ""
    status = "complete" if cell.status == total["status"] == "complete" else "partial"
    return Cell(bound + format_percent(share), status, f"{'at least ' if bound else ''}{exact_count(cell.sort)} "
                f"of {whole} of {exact_count(known)} MACs", share)


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
            mine = f"this call's own estimate of {metric_cell(own).note.split(';')[0]}, plus " if own is not None else ""
            cells[name] = replace(total, text="Σ " + total.text, note=f"sum of {mine}the calls inside: {total.note}")
        else:
            cells[name] = metric_cell(own)
    return cells


def owned_metrics(layer: dict[str, Any]) -> list[str]:
    """The labels of the metrics this call owns for its whole subtree."""
    ownership = layer.get("metric_ownership", {})
    return [label for name, label in METRIC_LABELS.items() if ownership.get(name) == "subtree"]


def _ownership_cell(layer: dict[str, Any]) -> Cell:
    """A compact badge (``owner``, ``covered`` or both); the full sentence is the tooltip."""
    owned = owned_metrics(layer)
    covered = _covered_text(layer)
    badges = [("owner", f"owns its subtree for {', '.join(owned)}")] if owned else []
    badges += [("covered", f"covered: {covered}")] if covered else []
    if not badges:
        return EMPTY
    return Cell(", ".join(word for word, _ in badges), badges[0][0], "; ".join(note for _, note in badges))


def _covered_text(layer: dict[str, Any]) -> str:
    by_owner: dict[str, list[str]] = {}
    for name, owner in layer.get("metric_owners", {}).items():
        by_owner.setdefault(layer_label(owner["path"], owner["call_index"]), []).append(METRIC_LABELS[name])
    return "; ".join(f"{', '.join(names)} in {owner}" for owner, names in sorted(by_owner.items()))
