"""The terminal table printed by `summary`: one row per layer call, then the totals."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from .crawler import crawl_module
from .formatting import format_count, format_metric

COLUMNS = ("Layer", "Type", "Output", "Params", "MACs", "FLOPs")


def summary(model: Any, input_shape: Any = None, dtype: Any = None, *, file: TextIO | None = None,
            **options: Any) -> dict[str, Any]:
    """Run `crawl_module` with the same arguments, print the layer table, and return the report."""
    report = crawl_module(model, input_shape, dtype, **options)
    print(render_table(report), file=file or sys.stdout)
    return report


def render_table(report: dict[str, Any], max_rows: int | None = None) -> str:
    """The report as an aligned text table (covered estimates show their owner, lower bounds show ``≥``)."""
    rows = [_row(layer) for layer in report["layers"]]
    if max_rows is not None and len(rows) > max_rows:
        rows = rows[:max_rows] + [("…", f"{len(rows) - max_rows} more calls", "", "", "", "")]
    widths = [max(len(str(cell)) for cell in column) for column in zip(COLUMNS, *rows)]
    rule = "-" * (sum(widths) + 2 * (len(widths) - 1))
    lines = [_line(COLUMNS, widths), rule, *(_line(row, widths) for row in rows), rule]
    lines.extend(_totals_lines(report))
    return "\n".join(lines)


def _row(layer: dict[str, Any]) -> tuple[str, ...]:
    label = "  " * layer["depth"] + _display_name(layer) + (f" #{layer['call_index']}" if layer["call_index"] else "")
    metrics = layer.get("metrics", {})
    owners = layer.get("metric_owners", {})
    counted_here = layer["call_index"] == 0 and layer["parameters"]["count"]  # a repeated call reuses them
    return (label, layer["type"].rpartition(".")[2], _shape(layer["output"]),
            format_count(layer["parameters"]["count"]) if counted_here else "",
            _cell(metrics, owners, "macs"), _cell(metrics, owners, "module_flops"))


def _display_name(layer: dict[str, Any]) -> str:
    """The attribute name under its parent row, or the full path when the call is made from elsewhere."""
    if not layer["path"]:
        return "(root)"
    parent = layer["parent"]["path"] if layer["parent"] else ""
    return layer["name"] if layer["path"] == f"{parent}.{layer['name']}".lstrip(".") else layer["path"]


def _cell(metrics: dict[str, Any], owners: dict[str, Any], name: str) -> str:
    if name in metrics:
        return format_metric(metrics[name])
    if name in owners:
        return f"(in {owners[name]['path'] or 'root'})"
    return ""


def _shape(meta: dict[str, Any] | None) -> str:
    if not meta:
        return ""
    if meta["kind"] == "tensor":
        return "[" + ", ".join(str(d) for d in meta["shape"]) + "]"
    if meta["kind"] in ("tuple", "list"):
        return "(" + ", ".join(_shape(item) for item in meta["items"][:3]) + (", …" if len(meta["items"]) > 3 else "") + ")"
    return meta["kind"]


def _line(cells: tuple[str, ...], widths: list[int]) -> str:
    return "  ".join(str(cell).ljust(width) for cell, width in zip(cells, widths)).rstrip()


def _totals_lines(report: dict[str, Any]) -> list[str]:
    totals = report["totals"]
    params = totals["parameters"]
    lines = [
        f"Parameters: {format_count(params['total'])} ({format_count(params['trainable'])} trainable, "
        f"{format_count(params['frozen'])} frozen), {format_count(params['bytes'])}B",
        f"Module view:   MACs {format_metric(totals['macs'])} [{totals['macs']['status']}]   "
        f"FLOPs {format_metric(totals['module_flops'])} [{totals['module_flops']['status']}]   "
        f"DMAs {format_metric(totals['dmas'])} [{totals['dmas']['status']}]",
        f"Operator view: FLOPs {format_metric(totals['operator_flops'])} [{totals['operator_flops']['status']}]",
    ]
    problems = [item for item in report["diagnostics"] if item["severity"] != "info"]
    if problems:
        lines.append(f"Diagnostics: {len(problems)} (see report['diagnostics'])")
    return lines
