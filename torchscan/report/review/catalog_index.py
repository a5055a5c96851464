"""The machine-readable list of a build's runs (``catalog.json``), and the two kinds of catalog a diff reads back.

A build writes ``catalog.json`` beside its site: every run, its outcome, and where its report (and a failed run's
last good report) lies. ``torchscan-report diff OLD NEW`` reads a catalog from a built site (through that file) or
from a plain folder of JSON reports (one run per file, named by the file's stem).
"""

from __future__ import annotations

import json
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...schema import SCHEMA_VERSION
from ..registry.jobs import LAST_GOOD_SUFFIX
from ..registry.sweeps import Sweep
from .catalog_view import CatalogView, RunSummary
from .sweep_record import sweep_stem

CATALOG_INDEX = "catalog.json"
#: Bumped when the index's layout changes.
INDEX_FORMAT = 1


class CatalogReadError(ValueError):
    """A diff side that is neither a built site nor a folder of reports, or a file in it that is not a report."""


@dataclass(frozen=True)
class CatalogRun:
    """One run of a catalog as a diff sees it: its report, or why it has none."""

    stem: str
    label: str
    report: dict[str, Any] | None
    reason: str = ""
    #: A sweep's point: its entry and size, and whether it is the declared point (the one budgets check unless they
    #: name another). Runs of other entries are their entry's declared runs.
    entry: str = ""
    size: int | None = None
    declared: bool = True
    #: A failed run's last good report, kept from an earlier build, and its path in the site (``reports/x.last-good
    #: .json``): a review compares it in place of the report the run no longer has.
    last_good: dict[str, Any] | None = None
    last_good_path: str = ""


@dataclass(frozen=True)
class Catalog:
    """The runs of one diff side, in catalog order, and where they were read from."""

    source: Path
    runs: tuple[CatalogRun, ...]
    #: The catalog's title (``[catalog] title``) when read from a built site.
    title: str = ""

    def by_stem(self) -> dict[str, CatalogRun]:
        return {run.stem: run for run in self.runs}


def catalog_index(catalog: CatalogView) -> str:
    """``catalog.json``: every run in registry order, as stable JSON (no timestamps)."""
    runs = [_run_record(run, entry.entry.sweep) for entry in catalog.entries for run in entry.runs]
    return json.dumps({"format": INDEX_FORMAT, "title": catalog.title, "runs": runs}, sort_keys=True, indent=1) + "\n"


def _run_record(run: RunSummary, sweep: Sweep | None) -> dict[str, Any]:
    last_good = None if run.last_good is None else {"key": run.last_good.key,
                                                    "report": f"reports/{run.last_good_stem}.json"}
    record: dict[str, Any] = {"stem": run.stem, "entry": run.run.entry, "variant": run.run.variant,
                              "outcome": run.outcome, "status": run.status,
                              "report": f"reports/{run.stem}.json" if run.report is not None else None,
                              "reason": run.reason, "last_good": last_good}
    if sweep is not None:  # only then: the index of a catalog without sweeps keeps its bytes
        record["sweep"] = {"quantity": sweep.name, "size": run.run.size, "default": sweep.default,
                           "json": f"reports/{sweep_stem(run.run.entry)}.json"}
    return record


def read_catalog(folder: Path) -> Catalog:
    """A built site (it has ``catalog.json``) or a folder of JSON reports, as the runs a diff compares."""
    if not folder.is_dir():
        raise CatalogReadError(f"{folder} is not a folder: expected a built site (with {CATALOG_INDEX}) or a folder "
                               "of JSON reports")
    if (folder / CATALOG_INDEX).is_file():
        return _read_site(folder)
    if (folder / "reports").is_dir() and not any(folder.glob("*.json")):
        raise CatalogReadError(f"{folder} has a reports/ folder but no {CATALOG_INDEX}: rebuild it with this version "
                               "of torchscan-report, or pass its reports/ folder")
    return _read_reports(folder)


def _read_site(folder: Path) -> Catalog:
    index = _index(folder)
    runs = []
    for record in index["runs"]:
        report = read_report(folder / record["report"]) if record["report"] else None
        kept = record.get("last_good") or {}
        point = record.get("sweep") or {}
        runs.append(CatalogRun(record["stem"], run_label(record), report, record["reason"], record["entry"],
                               point.get("size"), point.get("size") == point.get("default"),
                               read_report(folder / kept["report"]) if kept else None, kept.get("report", "")))
    title = index.get("title")
    return Catalog(folder, tuple(runs), title if isinstance(title, str) else "")


def _index(folder: Path) -> dict[str, Any]:
    """The site's ``catalog.json``, checked to be an index of this format."""
    try:
        index = json.loads((folder / CATALOG_INDEX).read_text(encoding="utf-8"))
        records = index["runs"] if index.get("format") == INDEX_FORMAT else None
    except (OSError, ValueError, KeyError, AttributeError) as error:
        raise CatalogReadError(f"{folder / CATALOG_INDEX} cannot be read: {error}") from None
    if not isinstance(records, list):
        raise CatalogReadError(f"{folder / CATALOG_INDEX} is not a catalog index of format {INDEX_FORMAT}")
    return index


def run_label(record: dict[str, Any]) -> str:
    """How the catalog names a run: its entry, and its variant after a dot (``tiny · w8``)."""
    return record["entry"] + (f" · {record['variant']}" if record["variant"] else "")


def report_name(path: Path) -> str:
    """What a review of the report at ``path`` is titled by: the name its catalog gives the run when the report lies
    in a built site's ``reports/`` (``tiny · w8``; ``tiny · w8 (last good report)`` for a kept copy), else the file's
    stem."""
    site = path.resolve().parent.parent
    with suppress(OSError, ValueError, KeyError, TypeError, AttributeError):
        records = json.loads((site / CATALOG_INDEX).read_text(encoding="utf-8"))["runs"]
        relative = path.resolve().relative_to(site).as_posix()
        for record in records:
            if record.get("report") == relative:
                return run_label(record)
            if (record.get("last_good") or {}).get("report") == relative:
                return f"{run_label(record)} (last good report)"
    return path.stem


def review_title(before: Path, after: Path) -> str:
    """The title of the review of two reports: the run's name (`report_name`) when both sides name the same run
    (the last good copy of a run counts as that run), ``before → after`` when they name two."""
    names = [report_name(path).removesuffix(" (last good report)") for path in (before, after)]
    return f"{names[1]}: before / after" if names[0] == names[1] else f"{names[0]} → {names[1]}"


def _read_reports(folder: Path) -> Catalog:
    """Every ``*.json`` report of the folder, by file stem (a site's last good copies are not runs of their own)."""
    paths = sorted(path for path in folder.glob("*.json") if not path.stem.endswith(LAST_GOOD_SUFFIX))
    if not paths:
        raise CatalogReadError(f"{folder} holds no JSON reports and no {CATALOG_INDEX}: expected a built site or a "
                               "folder of reports written by crawl_module")
    return Catalog(folder, tuple(CatalogRun(path.stem, path.stem, read_report(path)) for path in paths))


def read_report(path: Path) -> dict[str, Any]:
    """One JSON report; a clear error naming the file when it is missing or not a TorchScan report."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise CatalogReadError(f"cannot read the report {path}: {error}") from None
    if not isinstance(report, dict) or report.get("schema_version") != SCHEMA_VERSION or "layers" not in report:
        raise CatalogReadError(f"{path} is not a TorchScan report (schema_version {SCHEMA_VERSION})")
    return report
