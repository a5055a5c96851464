"""Display cells: one number as every renderer shows it, next to the status it came from: exact numbers plain,
lower bounds with ``≥``, unavailable ones as ``n/a`` (never 0). `legend` explains the markers a table uses."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .formatting import exact_count, format_metric, format_parameters

STATUS_WORDS = {"complete": "complete", "partial": "lower bound", "unavailable": "unavailable",
                "not_requested": "not requested", "not_applicable": "not applicable"}
STATUS_RANK = {"complete": 0, "not_applicable": 0, "not_requested": 1, "partial": 2, "unavailable": 3}

#: Every marker a table may show, with its one-line meaning (the order of the legend).
MARKERS = {
    "≥": "lower bound: at least this much, some work could not be counted",
    "n/a": "unavailable: nothing could be counted (never a zero)",
    "n/a*": "not applicable: the metric has no meaning for this call",
    "—": "not requested (structure mode)",
    "Σ": "sum over the calls inside this one (its own estimate included); for parameters and buffers, the module "
         "and the modules inside it, a shared tensor once",
    "covered": "counted by an enclosing subtree owner, whose estimate includes this call",
    "owner": "owns its subtree: its estimate includes the calls inside it",
    "of which": "part of a subtree owner's estimate, already included in it (never added again)",
    "⚠": "a diagnostic points at this call (see the findings)",
    "#k": "the k-th call of the same module (k from 0)",
}
#: Cell status -> the marker it shows.
STATUS_MARKERS = {"partial": "≥", "unavailable": "n/a", "not_applicable": "n/a*", "not_requested": "—",
                  "covered": "covered"}
#: The status of a breakdown row's name cell: a part of its owner's estimate, styled apart from the layer rows.
PART_STATUS = "part"


@dataclass(frozen=True)
class Cell:
    """One displayed value: ``text`` as shown, ``status`` for styling, ``note`` for a tooltip, ``sort`` key."""

    text: str
    status: str = "empty"
    note: str = ""
    sort: float | None = None

    @property
    def lower_bound(self) -> bool:
        return self.status == "partial"


EMPTY = Cell("")


def metric_cell(result: dict[str, Any] | None) -> Cell:
    """A MetricResult as a cell; the sort key of a lower bound is its known part (the templates mark it)."""
    if result is None:
        return EMPTY
    status = result["status"]
    number = result["value"] if status == "complete" else result["known_value"]
    sort = float(number) if isinstance(number, (int, float)) else None
    note = f"{_exact_text(result, number)}; method {result['method']}; scope {result['scope']}"
    return Cell(format_metric(result), status, note, sort)


def _exact_text(result: dict[str, Any], number: Any) -> str:
    """The exact value for a hover title: ``1,814,073,856 MACs (complete)``, ``at least 12 FLOPs (lower bound)``."""
    status = STATUS_WORDS.get(result["status"], result["status"])
    if isinstance(number, list):
        return f"{'×'.join(str(item) for item in number)} {result['unit']} ({status})"
    if not isinstance(number, (int, float)):
        return status
    bound = "at least " if result["status"] == "partial" else ""
    return f"{bound}{exact_count(number)} {result['unit']} ({status})"


def counted(result: dict[str, Any] | None) -> float:
    """The counted part of a MetricResult (0 when nothing was counted or there is none): what ranks the calls."""
    number = None if result is None else result["known_value"]
    return float(number) if isinstance(number, (int, float)) else 0.0


def parameter_cell(count: int, what: str = "parameters") -> Cell:
    """A parameter count in model-card style (``124M``), the exact number in the tooltip."""
    return Cell(format_parameters(count), "complete", f"{exact_count(count)} {what}", count)


def worst_status(results: Iterable[dict[str, Any] | None]) -> str:
    """The least complete status among ``results`` (complete when there are none)."""
    statuses = [result["status"] for result in results if result]
    return max(statuses, key=lambda status: STATUS_RANK.get(status, 3)) if statuses else "complete"


def cell_markers(cell: Cell) -> set[str]:
    """The legend markers one cell shows."""
    found = {STATUS_MARKERS[cell.status]} if cell.status in STATUS_MARKERS else set()
    if cell.text.startswith("Σ"):
        found.add("Σ")
    return found


def legend(markers: Iterable[str]) -> list[tuple[str, str]]:
    """``(marker, meaning)`` for each marker in ``markers``, in the fixed legend order."""
    present = set(markers)
    return [(marker, meaning) for marker, meaning in MARKERS.items() if marker in present]
