"""View objects of a before/after review (built on `torchscan.compare_reports`), shared by HTML and Markdown.

A delta is shown as a number only when both sides are complete; otherwise it reads "unknown", because a
difference involving a lower bound has no bound of its own. Every known delta has its percent change beside it.
The title names the models, and two reports of different models are flagged, not silently compared.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...compare import compare_reports, metric_delta
from ...views import EMPTY, Cell, layer_label, metric_cell, parameter_cell, shape_text
from ...views.formatting import (
    PARAMETER_SCALES,
    format_bytes,
    format_count,
    format_parameters,
    format_percent,
    format_seconds,
    format_signed,
    format_signed_bytes,
)
from ...views.parallel import plan_text
from ...views.timing import latency_cell, measured_comparison
from .budgets import BYTE_METRICS, MEASURED, Budget, BudgetCheck, check_budgets, percent_change
from .wording import count_text, plural

#: The compared totals in the catalog's column order (Module FLOPs, Operator FLOPs, then DMAs), which every review
#: keeps: the two-report diff, the catalog review and the catalog page list them alike.
TOTAL_LABELS = (("parameters", "Parameters", "structure"), ("macs", "MACs", "module view"),
                ("module_flops", "FLOPs", "module view"), ("operator_flops", "FLOPs", "operator view"),
                ("dmas", "DMAs", "module view"))
#: The training step's totals a review compares when both reports have one (``crawl_training_step``'s section).
TRAINING_LABELS = (("forward", "Training forward"), ("backward", "Backward"), ("optimizer", "Optimizer step"),
                   ("step", "Training step"))
TRAINING_VIEW = "training step"
LAYER_METRIC_LABELS = {"macs": "MACs", "module_flops": "FLOPs", "dmas": "DMAs", "receptive_field": "receptive field",
                       "effective_stride": "stride", "effective_padding": "padding"}
#: The memory totals a review compares when either report traced memory (`torchscan.compare.MEMORY_TOTALS`).
MEMORY_LABELS = (("forward_peak_bytes", "Forward peak", "memory"), ("activations", "Activations", "memory"),
                 ("training_peak_bytes", "Training peak", "memory"),
                 ("per_device_peak_bytes", "Per-device peak", "memory, sharded"))
#: The measured forward's row and budget label (`torchscan.views.timing.measured_comparison`).
MEASURED_LABEL = ("Measured forward time", "measured")
BUDGET_LABELS = {name: f"{label} ({view})" for name, label, view in (*TOTAL_LABELS, *MEMORY_LABELS)}
BUDGET_LABELS[MEASURED] = f"{MEASURED_LABEL[0]} ({MEASURED_LABEL[1]})"
BUDGET_VERDICTS = {"met": "met", "exceeded": "exceeded", "unknown": "cannot be checked"}
#: By `DiffView.verdict_status`: the first words of a review's verdict line, the status class that colours them and
#: the colour of the line's border (a variable of the report's style sheet).
VERDICT_STYLES = {"failed": ("Budgets not met", "s-failed", "--bad"), "met": ("Budgets met", "s-complete", "--ok"),
                  "changed": ("Changed", "s-partial", "--warn"), "unchanged": ("No changes", "s-info", "--line")}


@dataclass(frozen=True)
class DeltaRow:
    label: str
    view: str
    before: Cell
    after: Cell
    delta: str
    change: str
    #: The delta relative to ``before`` (``+5.0%``); ``new`` from zero, ``unknown`` when the delta is.
    percent: str = ""
    #: The compared total (``macs``, ``forward_peak_bytes``); empty for the training step's rows.
    key: str = ""

    @property
    def name(self) -> str:
        """The total named without a View column (``Module FLOPs``), as a catalog review's entry table names it."""
        label = _short_label(self)
        return label[:1].upper() + label[1:]

    @property
    def change_text(self) -> str:
        """``+320 (+100.0%)``; ``new`` / ``removed`` for a total only one side has; the delta alone otherwise."""
        if self.percent and self.percent not in ("unknown", "new") and self.delta != self.percent:
            return f"{self.delta} ({self.percent})"
        return self.delta


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
    ``percent`` is the exact relative change (``new`` for an added call), or empty when it is not known.
    """

    label: str
    type_name: str
    change: str
    before: Cell
    after: Cell
    status: str
    value: float | None
    percent: str = ""


@dataclass(frozen=True)
class BudgetRow:
    """One ``--fail-if`` budget as checked: ``verdict`` in words, ``observed`` the change it was checked against."""

    budget: str
    status: str
    verdict: str
    observed: str
    #: The budget without its ``ENTRY:`` (or ``ENTRY@SIZE:``) prefix, as the entry's own section writes it.
    check: str = ""

    @property
    def failed(self) -> bool:
        return self.status != "met"


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
    #: The model types of both sides (``context.model_type``), and whether they are the same model.
    models: tuple[str, str] = ("", "")
    #: What a reviewer must know before reading the numbers (two different models, for one).
    warnings: list[str] = field(default_factory=list)
    #: The ``--fail-if`` budgets, checked against this comparison, in the order given.
    budgets: list[BudgetRow] = field(default_factory=list)

    @property
    def unchanged(self) -> bool:
        return not (self.added or self.removed or self.changed) and all(row.change == "unchanged"
                                                                        for row in self.totals)

    @property
    def same_model(self) -> bool:
        return self.models[0] == self.models[1]

    @property
    def layer_counts(self) -> str:
        """``2 changed, 0 added, 0 removed``: the layer calls that moved."""
        return ", ".join(f"{count_text(len(rows))} {word}" for rows, word in
                         ((self.changed, "changed"), (self.added, "added"), (self.removed, "removed")))

    @property
    def budget_failed(self) -> bool:
        return any(row.failed for row in self.budgets)

    @property
    def verdict_status(self) -> str:
        """``failed`` (a budget exceeded or unknown), ``met`` (every budget met), else ``changed`` or ``unchanged``."""
        if self.budgets:
            return "failed" if self.budget_failed else "met"
        return "unchanged" if self.unchanged else "changed"

    @property
    def verdict_style(self) -> tuple[str, str, str]:
        """(headline, status class, border colour variable) of the verdict."""
        return VERDICT_STYLES[self.verdict_status]

    @property
    def verdict_details(self) -> str:
        """The budgets' outcome, the totals that moved and the layer calls that did."""
        met = count_text(sum(not row.failed for row in self.budgets))
        parts = [f"{met} of {plural(len(self.budgets), 'budget')} met"] if self.budgets else []
        moved = [f"{_short_label(row)} {row.percent or row.delta}" for row in self.totals if row.change != "unchanged"]
        parts.append(", ".join(moved) if moved else "every total unchanged")
        parts.append(f"layer calls: {self.layer_counts}")
        return "; ".join(parts)

    @property
    def verdict(self) -> str:
        """The review on one line: ``Budgets met: 2 of 2 budgets met; MACs +2.5%; layer calls: …``."""
        return f"{self.verdict_style[0]}: {self.verdict_details}"


def _short_label(row: DeltaRow) -> str:
    """``MACs``, ``parameters``, ``module FLOPs``: a total named without its table's View column."""
    if row.view == TRAINING_VIEW:
        return row.label.lower() + " FLOPs"
    if row.label == "FLOPs":
        return f"{row.view.split()[0]} FLOPs"
    return "parameters" if row.label == "Parameters" else row.label


def signed(value: float | list) -> str:
    """``+1.20 M`` / ``−3`` / ``0``; per-dimension values (receptive fields) element by element."""
    if isinstance(value, list):
        return "×".join(signed(item) for item in value)
    return format_signed(value)


def percent_text(before: Any, delta: Any) -> str:
    """``+5.0%``, ``−0.013%``, ``0%``; ``new`` when growing from zero; empty for per-dimension values."""
    if not isinstance(before, (int, float)) or not isinstance(delta, (int, float)):
        return ""
    percent = percent_change(before, delta)
    return "new" if math.isinf(percent) else format_percent(percent, signed=True)


def diff_view(before: dict[str, Any], after: dict[str, Any], title: str = "",
              budgets: Sequence[Budget] = ()) -> DiffView:
    """The review of ``before`` → ``after``; ``title`` defaults to one naming both models."""
    comparison = compare_reports(before, after)
    measured = measured_comparison(before, after)
    sides = comparison["context"]["before"], comparison["context"]["after"]
    models = (sides[0].get("model_type") or "", sides[1].get("model_type") or "")
    layers = comparison["layers"]
    return DiffView(
        title=title or default_title(*models),
        context=_context(*sides),
        totals=[_total_row(comparison["totals"][name], label, view, name) for name, label, view in TOTAL_LABELS]
        + training_rows(before, after) + memory_rows(comparison["totals"]) + measured_rows(measured),
        added=[_identity(item) for item in layers["added"]],
        removed=[_identity(item) for item in layers["removed"]],
        changed=[LayerChange(layer_label(item["path"], item["call_index"]), item["type"].rpartition(".")[2],
                             _details(item["changes"])) for item in layers["changed"]],
        cost_deltas={name: _cost_deltas(layers, name) for name in ("macs", "module_flops")},
        models=models,
        warnings=_warnings(*models) + plan_warnings(before, after),
        budgets=[_budget_row(check) for check in check_budgets(budgets, comparison, measured)],
    )


def default_title(before: str, after: str) -> str:
    """``ResNet: before / after`` for one model, ``ResNet → VisionTransformer`` for two (qualified if needed)."""
    short = before.rpartition(".")[2], after.rpartition(".")[2]
    if not (before and after):
        return "Before / after"
    if before == after:
        return f"{short[0]}: before / after"
    return f"{short[0]} → {short[1]}" if short[0] != short[1] else f"{before} → {after}"


def _warnings(before: str, after: str) -> list[str]:
    if before == after:
        return []
    return [(f"The two reports are of different models: before is {before or 'unknown'}, after is "
             f"{after or 'unknown'}. The deltas compare two models, not two versions of one model.")]


def plan_warnings(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """A warning when both reports have a sharded step but of different plans: their per-device peaks then compare
    two plans (8 devices against 16, say), not two versions of one model on the same devices."""
    plans = [report.get("training", {}).get("parallel", {}).get("plan") for report in (before, after)]
    if plans[0] is None or plans[1] is None or plans[0] == plans[1]:
        return []
    return [(f"The sharded training steps follow different plans: before {plan_text(plans[0])}, after "
             f"{plan_text(plans[1])}. The per-device peaks compare the two plans.")]


def _budget_row(check: BudgetCheck) -> BudgetRow:
    budget = check.budget
    label = BUDGET_LABELS[budget.metric]
    if check.status == "unknown" or check.delta is None:  # an unknown status is a missing delta
        observed = f"{label}: the delta is unknown (a side is incomplete or was not requested)"
    else:
        percent = percent_text(check.before, check.delta)
        amount, delta = _budget_numbers(budget.metric, check.delta)
        observed = f"{label}: {amount(check.before)} → {amount(check.after)} ({delta}, {percent})"
    return BudgetRow(budget.text, check.status, BUDGET_VERDICTS[check.status], observed, unscoped(budget))


def unscoped(budget: Budget) -> str:
    """``macs>+5%`` for ``resnet18:macs>+5%``: the check without the entry it is scoped to."""
    return budget.text.partition(":")[2] if budget.entry else budget.text


def _budget_numbers(metric: str, delta: float) -> tuple[Callable[[Any], str], str]:
    """How a total's values are written (parameters model-card style, bytes with ``B``) and its written delta."""
    if metric == "parameters":
        return format_parameters, format_signed(delta, PARAMETER_SCALES)
    if metric in BYTE_METRICS:
        return format_bytes, format_signed_bytes(delta)
    if metric == MEASURED:
        return format_seconds, ("+" if delta > 0 else "−" if delta < 0 else "") + format_seconds(abs(delta))
    return format_count, signed(delta)


def measured_rows(measured: dict[str, Any] | None) -> list[DeltaRow]:
    """The measured forward's row when both reports were measured: a change within the combined interquartile
    ranges reads ``unchanged`` (noise, not a regression); times from two machines are not compared."""
    if measured is None:
        return []
    before, after = (latency_cell(side) for side in measured["sides"])
    label, view = MEASURED_LABEL
    if measured["delta"]["status"] != "complete":
        machines = " → ".join(measured["machines"])
        return [DeltaRow(label, view, before, after, f"unknown (measured on different machines: {machines})",
                         "unknown", "unknown", MEASURED)]
    delta = measured["delta"]["value"]
    _, written = _budget_numbers(MEASURED, delta)
    spread = format_seconds(measured["spread"])
    noise = measured["within_noise"]
    shown = f"{written} (within the IQRs, {spread}: noise)" if noise else f"{written} (beyond the IQRs, {spread})"
    return [DeltaRow(label, view, before, after, shown, "unchanged" if noise else _direction(delta),
                     percent_text(measured["before"], delta), MEASURED)]


def memory_rows(totals: dict[str, Any]) -> list[DeltaRow]:
    """Rows of the memory totals that either report traced (`torchscan.compare_reports` compares only those); a
    side without the total shows "—" and leaves the delta unknown."""
    return [_total_row(totals[name], label, view, name) for name, label, view in MEMORY_LABELS if name in totals]


def _cost_deltas(layers: dict[str, list[dict[str, Any]]], name: str) -> list[LayerDelta]:
    """The calls whose own ``name`` estimate differs: added and removed calls count from or down to nothing."""
    deltas = []
    for change, sign in (("added", 1), ("removed", -1)):
        for item in layers[change]:
            result = item.get("metrics", {}).get(name)
            if result is None:
                continue
            delta = _added_or_removed(item, change, sign, metric_cell(result))
            if delta is not None:
                deltas.append(delta)
    for item in layers["changed"]:
        entry = item["changes"].get("metrics", {}).get(name)
        if entry is None:
            continue
        known = entry["delta"]["status"] == "complete"
        deltas.append(LayerDelta(layer_label(item["path"], item["call_index"]), item["type"].rpartition(".")[2],
                                 "changed", metric_cell(entry["before"]), metric_cell(entry["after"]),
                                 "complete" if known else "unavailable", entry["delta"]["value"] if known else None,
                                 percent_text(entry["before"]["value"], entry["delta"]["value"]) if known else ""))
    return deltas


def _added_or_removed(item: dict[str, Any], change: str, sign: int, cell: Cell) -> LayerDelta | None:
    """An added call counts from nothing (``new``), a removed one down to nothing (−100% when exact)."""
    status = cell.status if cell.status in ("complete", "partial") else "unavailable"
    value = None if status == "unavailable" else sign * (cell.sort or 0)
    if status == "complete" and not value:
        return None
    before, after = (EMPTY, cell) if sign > 0 else (cell, EMPTY)
    percent = "" if status != "complete" else "new" if sign > 0 else "−100.0%"
    return LayerDelta(layer_label(item["path"], item["call_index"]), item["type"].rpartition(".")[2], change,
                      before, after, status, value, percent)


def _context(before: dict[str, Any], after: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(key.replace("_", " "), _text(before.get(key)), _text(after.get(key))) for key in {**before, **after}]


def _text(value: Any) -> str:
    return "—" if value is None else str(value)


#: A side of a total that side does not have: an entry only the other catalog has.
ABSENT = Cell("—", "not_applicable", "not in this catalog")


def one_side_rows(report: dict[str, Any], change: str) -> list[DeltaRow]:
    """The totals of an entry only one catalog has, as review rows: ``added`` (the after side only, each ``new``) or
    ``removed`` (the before side only). The same rows as a two-report review: the compared totals, the training
    step's when the report has one, and the memory totals the report traced."""
    totals = report["totals"]
    training = report.get("training", {}).get("totals", {})
    cells = [(key, label, view, parameter_cell(totals["parameters"]["total"]) if key == "parameters"
              else metric_cell(totals[key])) for key, label, view in TOTAL_LABELS]
    cells += [("", label, TRAINING_VIEW, metric_cell(training[key])) for key, label in TRAINING_LABELS
              if key in training and training[key]["status"] != "not_requested"]
    memory = {**totals, **training}
    cells += [(key, label, view, metric_cell(memory[key])) for key, label, view in MEMORY_LABELS if key in memory]
    return [DeltaRow(label, view, ABSENT if change == "added" else cell, cell if change == "added" else ABSENT,
                     "new" if change == "added" else "removed", change, "", key)
            for key, label, view, cell in cells]


def training_rows(before: dict[str, Any], after: dict[str, Any]) -> list[DeltaRow]:
    """Rows of the training step's totals (operator FLOPs) when both reports have a ``training`` section, else none:
    a forward-only report has no training cost to compare against. The optimizer row is left out when neither
    step ran one."""
    if "training" not in before or "training" not in after:
        return []
    sides = before["training"]["totals"], after["training"]["totals"]
    return [_total_row({"before": sides[0][name], "after": sides[1][name],
                        "delta": metric_delta(sides[0][name], sides[1][name])}, label, TRAINING_VIEW)
            for name, label in TRAINING_LABELS
            if {sides[0][name]["status"], sides[1][name]["status"]} != {"not_requested"}]


def _total_row(entry: dict[str, Any], label: str, view: str, key: str = "") -> DeltaRow:
    delta = entry["delta"]
    if label == "Parameters":
        return DeltaRow(label, view, parameter_cell(entry["before"]), parameter_cell(entry["after"]),
                        format_signed(delta, PARAMETER_SCALES),
                        _direction(delta), percent_text(entry["before"], delta), key)
    before, after = _side_cell(entry["before"]), _side_cell(entry["after"])
    if delta["status"] != "complete":
        why = "a side did not trace memory" if None in (entry["before"], entry["after"]) else "a side is incomplete"
        return DeltaRow(label, view, before, after, f"unknown ({why})", "unknown", "unknown", key)
    _, written = _budget_numbers(key, delta["value"])
    return DeltaRow(label, view, before, after, written, _direction(delta["value"]),
                    percent_text(entry["before"]["value"], delta["value"]), key)


def _side_cell(result: dict[str, Any] | None) -> Cell:
    """One side of a compared total; a memory total that side did not trace reads "—" (not requested)."""
    return metric_cell(result) if result is not None else Cell("—", "not_requested", "memory was not traced")


def _direction(delta: float) -> str:
    return "unchanged" if delta == 0 else "increased" if delta > 0 else "decreased"


def _identity(item: dict[str, Any]) -> LayerChange:
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
        details.append(f"parameters {format_parameters(numbers['before'])} → {format_parameters(numbers['after'])} "
                       f"({_signed_with_percent(numbers['before'], numbers['delta'])})")
    if "output" in changes:
        details.append(f"output {shape_text(changes['output']['before'])} → {shape_text(changes['output']['after'])}")
    for name, entry in changes.get("metrics", {}).items():
        old = metric_cell(entry["before"])
        new = metric_cell(entry["after"])
        delta = entry["delta"]
        shown = (_signed_with_percent(entry["before"]["value"], delta["value"]) if delta["status"] == "complete"
                 else "delta unknown")
        details.append(f"{LAYER_METRIC_LABELS.get(name, name)} {old.text or 'none'} → {new.text or 'none'} ({shown})")
    return details


def _signed_with_percent(before: Any, delta: Any) -> str:
    """``−136, −50.0%``; per-dimension deltas have no single percentage and show the delta alone."""
    percent = percent_text(before, delta)
    return f"{signed(delta)}, {percent}" if percent else signed(delta)
