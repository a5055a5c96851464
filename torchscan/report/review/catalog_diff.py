"""View objects of a catalog review: every entry of two catalogs (built sites or report folders) side by side.

Each entry present on both sides is compared with the before/after review of two reports (`diff_view`), so its
deltas, percentages and budget checks are exactly those of ``torchscan-report diff BEFORE.json AFTER.json``. An
entry is *added*, *removed*, *changed* or *unchanged*; one whose new analysis failed is *failed* (it has no numbers,
and a budget that applies to it cannot be checked), one whose old analysis failed and new one succeeded is *fixed*.
Budgets are checked only where there is a before and an after: added and fixed entries have no change to check.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ...views import EMPTY, Cell
from .budgets import Budget
from .catalog_index import Catalog, CatalogRun
from .report_diff import MEMORY_LABELS, TOTAL_LABELS, VERDICT_STYLES, BudgetRow, DiffView, diff_view, total_cells
from .wording import count_text, plural

#: The order of the counts on the verdict line, and every change an entry can have.
CHANGES = ("changed", "added", "removed", "failed", "fixed", "unchanged")
#: Column headings of the per-entry table by compared total; the memory columns show when some entry traced memory.
COLUMNS = {name: label if label != "FLOPs" else f"{view.split()[0].capitalize()} FLOPs"
           for name, label, view in TOTAL_LABELS}
MEMORY_COLUMNS = {name: label for name, label, _ in MEMORY_LABELS}
ALL_COLUMNS = (*COLUMNS, *MEMORY_COLUMNS)
#: The status class that colours each change in the HTML table.
CHANGE_CLASSES = {"failed": "s-failed", "removed": "s-failed", "changed": "s-partial", "added": "s-complete",
                  "fixed": "s-complete", "unchanged": "s-info"}
#: How many failing budgets the verdict line names before it says "and N more".
NAMED_FAILURES = 5


@dataclass(frozen=True)
class TotalChange:
    """One total of one entry: the new value (the old one for a removed entry) and its change, when known."""

    value: Cell
    delta: str = ""
    percent: str = ""

    @property
    def moved(self) -> bool:
        return bool(self.delta) and self.delta not in ("0", "0B")  # "0B": an unchanged byte total


@dataclass(frozen=True)
class EntryRow:
    """One entry (a run stem) of the catalog review."""

    stem: str
    label: str
    change: str
    #: By compared total (`COLUMNS` and `MEMORY_COLUMNS` keys).
    totals: dict[str, TotalChange]
    budgets: tuple[BudgetRow, ...] = ()
    reason: str = ""
    #: The two sides' model types differ (a changed model behind one name).
    other_model: bool = False

    @property
    def budget_failed(self) -> bool:
        return any(row.failed for row in self.budgets)

    @property
    def change_text(self) -> str:
        """The change as the table shows it: ``changed (another model type)`` flags a different model behind a name."""
        return f"{self.change} (another model type)" if self.other_model else self.change

    @property
    def budget_text(self) -> str:
        """``met`` / ``exceeded: macs>+5%`` / ``cannot be checked: dmas>0`` / empty when none applied."""
        failing = [row for row in self.budgets if row.failed]
        if not failing:
            return f"{plural(len(self.budgets), 'budget')} met" if self.budgets else ""
        return "; ".join(f"{row.verdict}: {row.budget}" for row in failing)


@dataclass
class CatalogDiffView:
    title: str
    before: str
    after: str
    rows: list[EntryRow]
    budgets: list[Budget] = field(default_factory=list)

    @property
    def columns(self) -> dict[str, str]:
        """The table's headings by total: every compared total, and a memory total when some entry has it."""
        shown = {name: label for name, label in MEMORY_COLUMNS.items()
                 if any(row.totals[name].value.text for row in self.rows)}
        return COLUMNS | shown

    def count(self, change: str) -> int:
        return sum(row.change == change for row in self.rows)

    @property
    def failing(self) -> list[EntryRow]:
        """The entries that fail the gate: a budget exceeded or unknown."""
        return [row for row in self.rows if row.budget_failed]

    @property
    def budget_failed(self) -> bool:
        return bool(self.failing)

    @property
    def failed_checks(self) -> list[tuple[EntryRow, BudgetRow]]:
        """Every budget check that failed, by entry: the review lists these, and counts the others."""
        return [(row, budget) for row in self.failing for budget in row.budgets if budget.failed]

    @property
    def met_text(self) -> str:
        """``34 other checks met.`` (``other`` when some failed): the checks the review does not list one by one."""
        met = sum(not budget.failed for row in self.rows for budget in row.budgets)
        other = "other " if self.failed_checks else ""
        return f"{plural(met, other + 'check')} met."

    @property
    def same_model(self) -> bool:
        return not any(row.other_model for row in self.rows)

    @property
    def verdict_status(self) -> str:
        if self.budgets:
            return "failed" if self.budget_failed else "met"
        return "unchanged" if self.count("unchanged") == len(self.rows) else "changed"

    @property
    def verdict_style(self) -> tuple[str, str, str]:
        return VERDICT_STYLES[self.verdict_status]

    @property
    def verdict_details(self) -> str:
        """``2 of 3 checked entries within budget (a: macs>+5% exceeded); 1 changed, 1 added, …``."""
        parts = []
        if self.budgets:
            checked = [row for row in self.rows if row.budgets]
            within = count_text(len(checked) - len(self.failing))
            parts.append(f"{within} of {plural(len(checked), 'checked entry', 'checked entries')} within budget"
                         + _named_failures(self.failing))
        parts.append(", ".join(f"{count_text(self.count(change))} {change}" for change in CHANGES
                               if self.count(change) or change in ("changed", "added", "removed", "unchanged")))
        return "; ".join(parts)

    @property
    def verdict(self) -> str:
        return f"{self.verdict_style[0]}: {self.verdict_details}"


def _named_failures(rows: list[EntryRow]) -> str:
    if not rows:
        return ""
    named = [f"{row.label}: {row.budget_text}" for row in rows[:NAMED_FAILURES]]
    more = f", and {count_text(len(rows) - NAMED_FAILURES)} more" if len(rows) > NAMED_FAILURES else ""
    return " (" + ", ".join(named) + more + ")"


def catalog_diff_view(before: Catalog, after: Catalog, budgets: Sequence[Budget] = (), title: str = ""
                      ) -> CatalogDiffView:
    """Every entry of ``after`` in its order, then the entries only ``before`` has, each compared."""
    unknown = sorted({budget.entry for budget in budgets if budget.entry} - _names(before, after))
    if unknown:
        raise ValueError(f"--fail-if names no entry of either catalog: {', '.join(unknown)}; the entries are "
                         f"{', '.join(sorted(_names(before, after)))}")
    _check_points(budgets, before, after)
    old, new = before.by_stem(), after.by_stem()
    rows = [entry_row(old.get(run.stem), run, budgets) for run in after.runs]
    rows += [entry_row(run, None, budgets) for run in before.runs if run.stem not in new]
    return CatalogDiffView(title=title or "Catalog: before / after", before=str(before.source),
                           after=str(after.source), rows=rows, budgets=list(budgets))


def _check_points(budgets: Sequence[Budget], *catalogs: Catalog) -> None:
    """A budget naming a sweep point (``entry@512:``) must find that point on one side."""
    for budget in budgets:
        if budget.point is None:
            continue
        sizes = sorted({run.size for catalog in catalogs for run in catalog.runs
                        if run.entry == budget.entry and run.size is not None})
        if budget.point not in sizes:
            raise ValueError(f"--fail-if {budget.text}: {budget.entry!r} has no sweep point {budget.point}; "
                             + (f"its points are {', '.join(map(str, sizes))}" if sizes else
                                "it is not a swept entry of either catalog (a built site's catalog.json says which "
                                "entries are swept)"))


def _names(*catalogs: Catalog) -> set[str]:
    """Every stem, and every entry name a stem's variants share (``tiny`` for ``tiny.w8``)."""
    stems = {run.stem for catalog in catalogs for run in catalog.runs}
    return stems | {stem.split(".")[0] for stem in stems}


def entry_row(old: CatalogRun | None, new: CatalogRun | None, budgets: Sequence[Budget]) -> EntryRow:
    """One entry's row; ``old`` or ``new`` is ``None`` when the entry is only on the other side."""
    side = new if new is not None else old
    if side is None:
        raise ValueError("an entry of a catalog review needs a before or an after")
    applying = [budget for budget in budgets if budget.applies_to(side.stem, side.size, side.declared)]
    if new is None or new.report is None:
        return _without_after(side, old, new, applying)
    if old is None or old.report is None:
        return _without_before(old, new, new.report)
    view = diff_view(old.report, new.report, budgets=applying)
    return EntryRow(new.stem, new.label, "unchanged" if view.unchanged else "changed", _total_changes(view),
                    tuple(view.budgets), other_model=not view.same_model)


def _total_changes(view: DiffView) -> dict[str, TotalChange]:
    """The review's totals by column key (a memory total neither side traced is empty)."""
    changes = {row.key: TotalChange(row.after, row.delta, row.percent) for row in view.totals if row.key}
    return {name: changes.get(name, TotalChange(EMPTY)) for name in ALL_COLUMNS}


def _without_before(old: CatalogRun | None, new: CatalogRun, report: dict[str, Any]) -> EntryRow:
    """An added entry, or one whose old analysis failed: new values, no change to check a budget against."""
    return EntryRow(new.stem, new.label, "added" if old is None else "fixed",
                    {name: TotalChange(cell, "new" if cell.text else "") for name, cell in total_cells(report).items()})


def _without_after(side: CatalogRun, old: CatalogRun | None, new: CatalogRun | None, applying: list[Budget]
                   ) -> EntryRow:
    """A removed entry (its old values), or one whose new analysis failed (no values; its budgets unknown)."""
    if new is None:
        cells = total_cells(side.report) if side.report is not None else dict.fromkeys(ALL_COLUMNS, EMPTY)
        return EntryRow(side.stem, side.label, "removed",
                        {name: TotalChange(cell, "removed" if cell.text else "") for name, cell in cells.items()})
    unknown = tuple(BudgetRow(budget.text, "unknown", "cannot be checked", "the new analysis failed")
                    for budget in applying if old is not None and old.report is not None)
    return EntryRow(side.stem, side.label, "failed", {name: TotalChange(EMPTY) for name in ALL_COLUMNS}, unknown,
                    reason=new.reason)

