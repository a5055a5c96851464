"""The terminal table: the layer view of `torchscan.views`, cell for cell what the Markdown and HTML reports show,
then the totals, a legend of the markers used and the findings (`torchscan.summary` prints it)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .layers import COLUMNS_BY_KEY, LAYER_COLUMNS
from .report import ReportView, TreeItem, report_view

#: The terminal table's columns after the layer name by default (see `column_keys`).
COLUMNS = ("type", "output", "params", "macs", "macs_share", "module_flops", "dmas")
#: torchinfo's ``col_names`` that have a column here, so a torchinfo habit works as it reads.
TORCHINFO_NAMES = {"output_size": "output", "num_params": "params", "params_percent": "params_share",
                   "mult_adds": "macs"}
#: Findings listed under the table before "and N more".
SHOWN_FINDINGS = 8


def check_limit(name: str, value: Any, lowest: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int or None, got {type(value).__name__}")
    if value < lowest:
        raise ValueError(f"{name} must be at least {lowest}, got {value}")


def column_keys(col_names: Iterable[str] | None) -> tuple[str, ...]:
    """The terminal columns after the layer name: `COLUMNS` by default, else ``col_names`` in the order given (keys
    of `torchscan.views.LAYER_COLUMNS`, or torchinfo's names of the same columns); a clear error otherwise."""
    if col_names is None:
        return COLUMNS
    valid = [column.key for column in LAYER_COLUMNS if column.key != "layer"]
    if isinstance(col_names, str) or not isinstance(col_names, Iterable):
        raise TypeError(f"col_names must be a sequence of column names (such as {COLUMNS!r}), got "
                        f"{type(col_names).__name__}")
    keys: list[str] = []
    for name in col_names:
        key = TORCHINFO_NAMES.get(name, name) if isinstance(name, str) else name
        if key not in valid:
            raise ValueError(f"col_names: unknown column {name!r}; expected some of {', '.join(valid)} (or "
                             f"torchinfo's {', '.join(TORCHINFO_NAMES)})")
        if key not in keys:
            keys.append(key)
    if not keys:
        raise ValueError(f"col_names must name at least one column; expected some of {', '.join(valid)}")
    return tuple(keys)


def render_table(report: dict[str, Any], max_depth: int | None = None, max_rows: int | None = None,
                 col_names: Iterable[str] | None = None) -> str:
    """The report as an aligned text table, then its totals, the legend of its markers and its findings."""
    check_limit("max_depth", max_depth, 0)
    check_limit("max_rows", max_rows, 1)
    keys = ("layer", *column_keys(col_names))
    view = report_view(report)
    shown, notes = _visible(view.tree, max_depth, max_rows)
    rows = [_cells(item, keys) for item in shown]
    headers = tuple(COLUMNS_BY_KEY[key].header for key in keys)
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]
    rule = "-" * (sum(widths) + 2 * (len(widths) - 1))
    lines = [_line(keys, headers, widths), rule, *(_line(keys, row, widths) for row in rows), *notes, rule]
    lines += _totals_lines(view) + _legend_lines(view, keys, [item.row for item in shown]) + _finding_lines(view)
    return "\n".join(lines)


def _visible(tree: list[TreeItem], max_depth: int | None, max_rows: int | None) -> tuple[list[TreeItem], list[str]]:
    """The rows within ``max_depth`` and ``max_rows``, and a note for each limit that hid some."""
    items = [item for item in tree if max_depth is None or item.depth <= max_depth]
    notes = []
    if max_rows is not None and len(items) > max_rows:
        notes.append(f"… {len(items) - max_rows} more rows (max_rows={max_rows})")
        items = items[:max_rows]
    hidden = sum(1 for item in tree if max_depth is not None and item.depth > max_depth)
    if hidden:
        notes.append(f"… {hidden} rows deeper than max_depth={max_depth} are hidden; their costs are in the Σ of "
                     "the rows above")
    return items, notes


def _cells(item: TreeItem, keys: tuple[str, ...]) -> tuple[str, ...]:
    marker = " ⚠" if item.part is None and item.row.problems else ""
    name = "  " * item.depth + item.cell("layer").text + marker
    return (name, *(item.cell(key).text for key in keys[1:]))


def _line(keys: tuple[str, ...], cells: tuple[str, ...], widths: list[int]) -> str:
    parts = [cell.rjust(width) if COLUMNS_BY_KEY[key].numeric else cell.ljust(width)
             for key, cell, width in zip(keys, cells, widths, strict=True)]
    return "  ".join(parts).rstrip()


def _totals_lines(view: ReportView) -> list[str]:
    totals = {(row.label, row.view): row for row in view.totals}
    params = totals[("Parameters", "structure")].cell.text
    trainable, frozen = totals[("Trainable / frozen", "structure")].cell.text.split(" / ")
    memory = totals[("Parameter memory", "structure")].cell.text

    def shown(label: str, kind: str) -> str:
        cell = totals[(label, kind)].cell
        return f"{label} {cell.text} [{cell.status}]"

    module_view = "   ".join(shown(label, "module view") for label in ("MACs", "FLOPs", "DMAs"))
    return [
        f"Parameters: {params} ({trainable} trainable, {frozen} frozen), {memory}",
        f"Module view:   {module_view}",
        f"Operator view: {shown('FLOPs', 'operator view')}",
    ]


def _legend_lines(view: ReportView, keys: tuple[str, ...], rows: list[Any]) -> list[str]:
    entries = view.legend(keys, rows)
    if not entries:
        return []
    width = max(len(marker) for marker, _ in entries)
    return ["Legend:", *(f"  {marker.ljust(width)}  {meaning}" for marker, meaning in entries)]


def _finding_lines(view: ReportView) -> list[str]:
    problems = view.causes
    if not problems:
        return []
    lines = [f"Findings: {len(problems)} (grouped; every record is in report['diagnostics'])"]
    lines += [f"  {item.severity}: {item.summary}" for item in problems[:SHOWN_FINDINGS]]
    if len(problems) > SHOWN_FINDINGS:
        lines.append(f"  … and {len(problems) - SHOWN_FINDINGS} more")
    return lines
