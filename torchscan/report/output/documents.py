"""The documents torchscan-report writes, each a pure function of its data: JSON, standalone HTML, Markdown.

Markdown comes in two forms from the same templates and views: the portable snippet files under ``markdown/`` that
other sites include section by section (plain tables and text), and the pages of the generated site, which add
what only that site can show (status badges, the collapsible layer tree, sort keys, admonitions).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from markupsafe import Markup

from ...views import LAYER_COLUMNS, ReportView, report_view
from ..review.catalog_diff import CHANGE_CLASSES, CatalogDiffView
from ..review.catalog_view import CatalogView, EntrySummary, RunSummary
from ..review.report_diff import DiffView, diff_view
from ..review.sweep_record import sweep_stem
from .charts import Chart, catalog_charts, diff_charts, report_charts
from .charts.sweep_curves import sweep_charts
from .charts.training_step import training_chart
from .templates import render

#: Where `entry_files` and `catalog_files` put the generated site's pages (paths under it are relative to the
#: site's ``docs_dir``); every other path is relative to the output folder.
SITE_PAGES = "site/"
#: A tree with at most this many rows opens fully; a larger one shows the root and its children (one click away).
OPEN_ALL_ROWS = 400


def report_json(report: dict[str, Any]) -> str:
    """The report as stable JSON: sorted keys, compact separators (the fast C encoder), a final newline."""
    return json.dumps(report, sort_keys=True, separators=(",", ":")) + "\n"


def open_depth(view: ReportView) -> int:
    deepest = max((row.depth for row in view.layers), default=0)
    return deepest if len(view.tree) <= OPEN_ALL_ROWS else min(deepest, 1)


def report_html(view: ReportView, templates: Path | None = None, charts: list[Chart] | None = None) -> str:
    """The standalone HTML report, with the view's cost charts (drawn here unless given)."""
    return render("report.html.j2", templates, view=view, charts=report_charts(view) if charts is None else charts,
                  open_depth=open_depth(view), columns=LAYER_COLUMNS)


def report_markdown(view: ReportView, templates: Path | None = None) -> str:
    return render("report.md.j2", templates, view=view, charts=[], site=False, tree=None, named=f": {view.title}")


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
    charts = diff_charts(view, drawn=kind == "html")
    return render("diff.html.j2" if kind == "html" else "diff.md.j2", templates, view=view, charts=charts,
                  code=code_span)


def catalog_diff_document(view: CatalogDiffView, kind: str, templates: Path | None = None) -> str:
    """A catalog review as ``html`` or ``md`` (``diff OLD NEW`` of two built sites or report folders)."""
    return render(f"catalog_diff.{'html' if kind == 'html' else 'md'}.j2", templates, view=view,
                  change_classes=CHANGE_CLASSES, code=code_span)


def code_span(text: str) -> Markup:
    """``text`` as a Markdown code span, literal whatever it holds (``macs>+5%``, ``<lambda>``): the text a reader
    copies from the review is the text itself, never an HTML entity or a backslash escape. Not for table cells (a
    ``|`` would still split one)."""
    flat = " ".join(str(text).split())
    fence = "`" * (max((len(run) for run in re.findall("`+", flat)), default=0) + 1)
    pad = " " if flat.startswith("`") or flat.endswith("`") else ""
    return Markup(f"{fence}{pad}{flat}{pad}{fence}")


def run_callouts(entry: EntrySummary, templates: Path | None = None, report_prefix: str = "../reports/") -> Markup:
    """The notices at the top of a model page: each failed run, then each incomplete one (runs with the same
    causes share one notice), then the Python warnings a run raised, as HTML blocks that Material styles as
    admonitions. A failed run's notice links its last good report under ``report_prefix``."""
    named = len(entry.runs) > 1
    blocks = [render("failure_callout.html.j2", templates, run=run, named=named, report_prefix=report_prefix)
              for run in entry.runs if run.failed]
    for runs in _incomplete_groups(entry.runs):
        variants = ", ".join(run.label for run in runs) if named else ""
        blocks.append(render("callout.html.j2", templates, view=runs[0].view, variants=variants))
    blocks += [render("warnings_callout.html.j2", templates, run=run, named=named)
               for run in entry.runs if run.report is not None and run.report["context"].get("warnings")]
    return Markup("\n".join(block.rstrip("\n") for block in blocks))


def _incomplete_groups(runs: list[RunSummary]) -> list[list[RunSummary]]:
    """The runs that are partial or unavailable (and not failed), grouped by the causes they share."""
    groups: dict[tuple[str, ...], list[RunSummary]] = {}
    for run in runs:
        if not run.failed and run.view is not None and run.view.status in ("partial", "unavailable"):
            groups.setdefault(tuple(item.summary for item in run.view.causes), []).append(run)
    return list(groups.values())


def entry_markdown(entry: EntrySummary, report_prefix: str, templates: Path | None = None, site: bool = False,
                   charts: list[Chart] | None = None, sweep: list[Chart] | None = None) -> str:
    """A model's page: the site's (``site``) or the portable snippet file under ``markdown/``, with the primary
    run's cost charts (drawn here unless given) and, for a swept entry, its cost against the swept quantity."""
    view = entry.primary.view
    if charts is None:
        charts = [] if view is None else report_charts(view)
    if sweep is None and entry.sweep is not None:
        sweep = sweep_charts(entry.sweep)
    tree = (Markup(render("tree.html.j2", templates, view=view, open_depth=open_depth(view), columns=LAYER_COLUMNS))
            if site and view is not None else None)  # the collapsible layer tree (tree.js and site.css drive it)
    return render("model.md.j2", templates, entry=entry, report_prefix=report_prefix, site=site, tree=tree,
                  callouts=run_callouts(entry, templates, report_prefix), named="" if site else f": {entry.name}",
                  charts=charts, training_charts=training_charts(entry) if site else {}, sweep_charts=sweep or [],
                  sweep_json=sweep_stem(entry.name) + ".json")


def training_charts(entry: EntrySummary) -> dict[str, Chart]:
    """The top-backward-calls chart of each run that has a training step, by run stem (the site draws them; the
    portable snippet shows the same rows as a table)."""
    return {run.stem: training_chart(run.training) for run in entry.runs if run.training is not None}


def catalog_markdown(catalog: CatalogView, page_prefix: str, report_prefix: str, templates: Path | None = None,
                     site: bool = False, charts: list[Chart] | None = None) -> str:
    """The catalog page, with its charts (drawn here unless given)."""
    return render("catalog.md.j2", templates, catalog=catalog, page_prefix=page_prefix, report_prefix=report_prefix,
                  site=site, charts=catalog_charts(catalog) if charts is None else charts)


def entry_files(entry: EntrySummary, templates: Path | None = None) -> dict[str, str]:
    """Every file drawn from one entry, by path: its runs' reports (JSON, HTML, last good copies), its portable page
    and its site page (under `SITE_PAGES`); the charts are drawn once, for a run's HTML report and the model's pages."""
    charts = {run.stem: report_charts(run.view) for run in entry.runs if run.view is not None}
    files: dict[str, str] = {}
    for run in entry.runs:
        if run.view is not None and run.report is not None:
            files[f"reports/{run.stem}.json"] = report_json(run.report)
            files[f"reports/{run.stem}.html"] = report_html(run.view, templates, charts[run.stem])
        else:
            files[f"reports/{run.stem}.html"] = render("failure.html.j2", templates, run=run)
        if run.last_good is not None:
            files[f"reports/{run.last_good_stem}.json"] = report_json(run.last_good.report)
            files[f"reports/{run.last_good_stem}.html"] = report_html(run.last_good.view, templates)
    if entry.sweep_json is not None:
        files[f"reports/{sweep_stem(entry.name)}.json"] = report_json(entry.sweep_json)
    primary = charts.get(entry.primary.stem, [])
    sweep = sweep_charts(entry.sweep) if entry.sweep is not None else []
    files[f"markdown/{entry.name}.md"] = entry_markdown(entry, "../reports/", templates, charts=primary, sweep=sweep)
    files[f"{SITE_PAGES}models/{entry.name}.md"] = entry_markdown(entry, "../reports/", templates, site=True,
                                                                 charts=primary, sweep=sweep)
    return files


def catalog_files(catalog: CatalogView, catalog_page: str, templates: Path | None = None) -> dict[str, str]:
    """The catalog's portable page and its site page at ``catalog_page`` (``index.md`` of a standalone site, or
    ``models/catalog.md`` beside an existing site's pages), with its charts drawn once."""
    charts = catalog_charts(catalog)
    at_root = "/" not in catalog_page
    site_page = catalog_markdown(catalog, "models/" if at_root else "", "reports/" if at_root else "../reports/",
                                 templates, site=True, charts=charts)
    return {"markdown/catalog.md": catalog_markdown(catalog, "", "../reports/", templates, charts=charts),
            SITE_PAGES + catalog_page: site_page}
