"""The documents torchscan-report writes, each a pure function of its data: JSON, standalone HTML, Markdown."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .catalog import CatalogView, EntrySummary, RunSummary
from .charts import catalog_charts, diff_charts, report_charts
from .diff_view import DiffView, diff_view
from .render import render
from .views import ReportView, report_view

#: A tree with at most this many rows opens fully; a larger one shows the root and its children (one click away).
OPEN_ALL_ROWS = 400


def report_json(report: dict[str, Any]) -> str:
    """The report as stable JSON: sorted keys, compact separators (the fast C encoder), a final newline."""
    return json.dumps(report, sort_keys=True, separators=(",", ":")) + "\n"


def open_depth(view: ReportView) -> int:
    deepest = max((row.depth for row in view.layers), default=0)
    return deepest if len(view.layers) <= OPEN_ALL_ROWS else min(deepest, 1)


def with_charts(view: ReportView) -> ReportView:
    """The view with its cost charts drawn (once: the HTML report and the model page share them)."""
    if view.charts is None:
        view.charts = report_charts(view)
    return view


def report_html(view: ReportView, templates: Path | None = None) -> str:
    return render("report.html.j2", templates, view=with_charts(view), open_depth=open_depth(view))


def report_markdown(view: ReportView, templates: Path | None = None) -> str:
    return render("report.md.j2", templates, view=view, for_site=False)


def render_report_file(report: dict[str, Any], kind: str, title: str = "", templates: Path | None = None) -> str:
    """One report as ``html`` or ``md`` (the ``render`` command)."""
    view = report_view(report, title=title)
    return report_html(view, templates) if kind == "html" else report_markdown(view, templates)


def render_diff_file(before: dict[str, Any], after: dict[str, Any], kind: str, title: str = "",
                     templates: Path | None = None) -> str:
    """The before/after review as ``html`` or ``md``; the title defaults to one naming both models."""
    return diff_document(diff_view(before, after, title=title), kind, templates)


def diff_document(view: DiffView, kind: str, templates: Path | None = None) -> str:
    """A review view as ``html`` or ``md`` (the ``diff`` command, which also reads the view's budget verdicts)."""
    view.charts = diff_charts(view, drawn=kind == "html")
    return render("diff.html.j2" if kind == "html" else "diff.md.j2", templates, view=view)


def failure_html(run: RunSummary, templates: Path | None = None) -> str:
    return render("failure.html.j2", templates, run=run)


def entry_markdown(entry: EntrySummary, report_prefix: str, templates: Path | None = None) -> str:
    if entry.primary.view is not None:
        with_charts(entry.primary.view)
    return render("model.md.j2", templates, entry=entry, report_prefix=report_prefix)


def catalog_markdown(catalog: CatalogView, page_prefix: str, report_prefix: str, templates: Path | None = None
                     ) -> str:
    if catalog.charts is None:
        catalog.charts = catalog_charts(catalog)
    return render("catalog.md.j2", templates, catalog=catalog, page_prefix=page_prefix, report_prefix=report_prefix)


def build_documents(catalog: CatalogView, templates: Path | None = None) -> dict[str, str]:
    """Every file of a build except the site itself, by path relative to the output folder."""
    files: dict[str, str] = {}
    for entry in catalog.entries:
        for run in entry.runs:
            if run.view is not None and run.report is not None:
                files[f"reports/{run.stem}.json"] = report_json(run.report)
                files[f"reports/{run.stem}.html"] = report_html(run.view, templates)
            else:
                files[f"reports/{run.stem}.html"] = failure_html(run, templates)
        files[f"markdown/{entry.name}.md"] = entry_markdown(entry, "../reports/", templates)
    files["markdown/catalog.md"] = catalog_markdown(catalog, "", "../reports/", templates)
    return files
