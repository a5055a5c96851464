"""The JSON of a swept entry (``reports/<entry>.sweep.json``): its points' totals and their exact curves.

A build analyzes each point of a ``[models.sweep]`` as a run of its own (with the runner's isolation, cache and
scheduling); this module joins the results into the versioned object of `torchscan.cost_curve` (``schema_version``,
``sizes``, ``points``, ``curves``: those four fields alone are a valid cost curve) and adds what only the registry
knows beside them: the entry, the swept quantity, the declared point, each point's report stem (``stems``), and the
points whose analysis failed (``missing``, with the reason; the curves are fitted on the analyzed points only).
"""

from __future__ import annotations

from typing import Any

from ...curves.cost_curve import CURVE_SCHEMA_VERSION, fit_curves
from ..registry.parsing import Entry


def sweep_stem(entry: str) -> str:
    """The file stem of an entry's sweep JSON: ``reports/<entry>.sweep.json``."""
    return entry + ".sweep"


def sweep_record(entry: Entry, results: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The sweep JSON of a swept ``entry`` from the build's results (keyed by run stem)."""
    if entry.sweep is None:
        raise ValueError(f"entry {entry.name!r} has no [models.sweep]")
    points, missing, stems = [], [], {}
    for run in entry.runs:
        report = results.get(run.stem, {}).get("report")
        if report is None:
            missing.append({"size": run.size, "stem": run.stem, "reason": failure_text(results.get(run.stem, {}))})
        else:
            points.append(point_record(run.size or 0, report))
            stems[str(run.size)] = run.stem
    sizes = [point["size"] for point in points]
    curves = fit_curves(sizes, [fitted_counts(point) for point in points]) if points else {}
    return {"schema_version": CURVE_SCHEMA_VERSION, "sizes": sizes, "points": points, "curves": curves,
            "entry": entry.name, "quantity": entry.sweep.name, "default": entry.sweep.default, "stems": stems,
            "missing": missing}


def point_record(size: int, report: dict[str, Any]) -> dict[str, Any]:
    """One analyzed point as `torchscan.cost_curve` writes it (a decode step's with the KV cache it reads)."""
    point = {"size": size, "totals": report["totals"]}
    if "kv_cache" in report["inputs"]:
        point["kv_cache"] = report["inputs"]["kv_cache"]
    return point


def fitted_counts(point: dict[str, Any]) -> dict[str, Any]:
    """What the curves are fitted on, as `torchscan.cost_curve` fits them (a decode step's KV cache included)."""
    return {**point["totals"], "kv_cache": point["kv_cache"]["bytes"]} if "kv_cache" in point else point["totals"]


def failure_text(result: dict[str, Any]) -> str:
    """Why a run has no report, on one line: the stage, the exception type and the first line of its message."""
    error = result.get("error")
    if not error:
        return "not analyzed"
    return f"{error['stage']} stage, {error['type']}: {(error['message'].splitlines() or [''])[0]}"
