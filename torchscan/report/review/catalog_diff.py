"""View objects of a catalog review: every entry of two catalogs (built sites or report folders) side by side.

Each entry present on both sides is compared with the before/after review of two reports (`diff_view`), so its
deltas, percentages and budget checks are exactly those of ``torchscan-report diff BEFORE.json AFTER.json``, its
training step's and memory totals included. An entry is *added*, *removed*, *changed* or *unchanged*; one whose
new analysis failed is *failed* (a budget that applies to it cannot be checked), and is compared with the last
good report its site kept from an earlier build when there is one; one whose old analysis failed and new one
succeeded is *fixed*. Budgets are checked only where there is a before and an after: added and fixed entries
have no change to check.

The review is written for a pull-request comment: the verdict, the failed budget checks, then only the entries
that changed or broke, each with the totals that moved; the unchanged entries are counted and named at the end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .budgets import Budget
from .catalog_index import Catalog, CatalogRun
from .report_diff import VERDICT_STYLES, BudgetRow, DeltaRow, DiffView, diff_view, one_side_rows, unscoped
from .wording import count_text, plural

#: The order of the counts on the verdict line and of the review's sections: every change an entry can have.
CHANGES = ("changed", "added", "removed", "failed", "fixed", "unchanged")
#: The status class that colours each change in the HTML review.
CHANGE_CLASSES = {"failed": "s-failed", "removed": "s-failed", "changed": "s-partial", "added": "s-complete",
                  "fixed": "s-complete", "unchanged": "s-info"}
#: How many failing budgets the verdict line names before it says "and N more".
NAMED_FAILURES = 5


@dataclass(frozen=True)
class EntryRow:
    """One entry (a run stem) of the catalog review."""

    stem: str
    label: str
    change: str
    #: The entry's totals as the two-report review compares them (training step and memory rows included).
    totals: tuple[DeltaRow, ...] = ()
    budgets: tuple[BudgetRow, ...] = ()
    reason: str = ""
    #: The two sides' model types differ (a changed model behind one name).
    other_model: bool = False
    #: A side that is not its build's own report: the kept last good report a failed (or fixed) entry is compared
    #: with, by its path in the site.
    last_good: str = ""
    #: The layer calls changed, added and removed (``2 changed, 0 added, 0 removed``), for an entry on both sides.
    layers: str = ""

    @property
    def budget_failed(self) -> bool:
        return any(row.failed for row in self.budgets)

    @property
    def change_text(self) -> str:
        """The change as the review names it: ``changed (another model type)`` flags a different model."""
        return f"{self.change} (another model type)" if self.other_model else self.change

    @property
    def moved(self) -> list[DeltaRow]:
        """The totals the entry's section shows: those that moved (every total of an added or removed entry)."""
        return [row for row in self.totals if row.change != "unchanged"]

    @property
    def steady(self) -> str:
        """The totals that did not move, named in one line (``DMAs, Activations``); empty when all moved."""
        return ", ".join(row.name for row in self.totals if row.change == "unchanged")

    @property
    def budget_text(self) -> str:
        """``met`` / ``exceeded: macs>+5%`` / ``cannot be checked: dmas>0`` / empty when none applied."""
        failing = [row for row in self.budgets if row.failed]
        if not failing:
            return f"{plural(len(self.budgets), 'budget')} met" if self.budgets else ""
        return "; ".join(f"{row.verdict}: {row.check}" for row in failing)


@dataclass
class CatalogDiffView:
    title: str
    before: str
    after: str
    rows: list[EntryRow]
    budgets: list[Budget] = field(default_factory=list)

    def count(self, change: str) -> int:
        return sum(row.change == change for row in self.rows)

    def entries(self, change: str) -> list[EntryRow]:
        """The entries with this change, in catalog order (a section of the review)."""
        return [row for row in self.rows if row.change == change]

    @property
    def sections(self) -> list[tuple[str, list[EntryRow]]]:
        """The review's sections of entries that changed or broke: ``(change, entries)``, empty ones left out."""
        return [(change, self.entries(change)) for change in CHANGES if change != "unchanged" and self.count(change)]

    @property
    def unchanged(self) -> str:
        """The unchanged entries, named in one line (the review folds them)."""
        return ", ".join(row.label for row in self.entries("unchanged"))

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
    def budget_summary(self) -> str:
        """``2 of 3 checked entries within budget``; empty without budgets."""
        if not self.budgets:
            return ""
        checked = [row for row in self.rows if row.budgets]
        within = count_text(len(checked) - len(self.failing))
        return f"{within} of {plural(len(checked), 'checked entry', 'checked entries')} within budget"

    @property
    def change_summary(self) -> str:
        """``1 changed, 1 added, 0 removed, 3 unchanged`` (failed and fixed only when some are)."""
        return ", ".join(f"{count_text(self.count(change))} {change}" for change in CHANGES
                         if self.count(change) or change in ("changed", "added", "removed", "unchanged"))

    @property
    def verdict_details(self) -> str:
        """``2 of 3 checked entries within budget (a: exceeded: macs>+5%); 1 changed, 1 added, …``: the terminal's
        line, which names the failing entries (the review lists them under the verdict instead)."""
        budgets = self.budget_summary + _named_failures(self.failing) if self.budgets else ""
        return "; ".join(part for part in (budgets, self.change_summary) if part)

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
    return CatalogDiffView(title=title or f"{after.title or before.title or 'Catalog'}: before / after",
                           before=str(before.source), after=str(after.source), rows=rows, budgets=list(budgets))


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
    if new is None:
        totals = one_side_rows(side.report, "removed") if side.report is not None else []
        return EntryRow(side.stem, side.label, "removed", tuple(totals), reason=side.reason)
    if new.report is None:
        return _failed(old, new, applying)
    if old is None or old.report is None:
        return _added_or_fixed(old, new, new.report)
    view = diff_view(old.report, new.report, budgets=applying)
    return EntryRow(new.stem, new.label, "unchanged" if view.unchanged else "changed", tuple(view.totals),
                    tuple(view.budgets), other_model=not view.same_model, layers=_layers(view))


def _added_or_fixed(old: CatalogRun | None, new: CatalogRun, report: dict[str, Any]) -> EntryRow:
    """An added entry, or one whose old analysis failed (compared with the old site's last good report when it
    kept one): no change to check a budget against."""
    if old is None or old.last_good is None:
        return EntryRow(new.stem, new.label, "added" if old is None else "fixed", tuple(one_side_rows(report, "added")))
    view = diff_view(old.last_good, report)
    return EntryRow(new.stem, new.label, "fixed", tuple(view.totals), other_model=not view.same_model,
                    last_good=old.last_good_path, layers=_layers(view))


def _failed(old: CatalogRun | None, new: CatalogRun, applying: list[Budget]) -> EntryRow:
    """An entry whose new analysis failed: its budgets cannot be checked (when it has a before), and its totals
    are those of the last good report the new site kept, compared with the old report."""
    unknown = tuple(BudgetRow(budget.text, "unknown", "cannot be checked", "the new analysis failed",
                              unscoped(budget)) for budget in applying if old is not None and old.report is not None)
    kept, layers, other = new.last_good, "", False
    if kept is None:
        totals: list[DeltaRow] = []
    elif old is None or old.report is None:
        totals = one_side_rows(kept, "added")
    else:
        view = diff_view(old.report, kept)
        totals, layers, other = view.totals, _layers(view), not view.same_model
    return EntryRow(new.stem, new.label, "failed", tuple(totals), unknown, new.reason, other,
                    new.last_good_path if kept is not None else "", layers)


def _layers(view: DiffView) -> str:
    """``2 changed, 0 added, 0 removed`` layer calls; empty when none moved."""
    return view.layer_counts if view.changed or view.added or view.removed else ""
