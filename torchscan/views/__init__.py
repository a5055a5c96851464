"""The view model: what every renderer of a report shows, computed once from the report and importing no template
engine.

The terminal table (`torchscan.views.text`), the Markdown documents, the MkDocs pages and the standalone HTML report of
``torchscan-report`` all render these objects, so they cannot disagree on a cell: how a number reads, which rows are
covered by a subtree owner, what a marker means and which findings explain an incomplete number.
"""

from __future__ import annotations

from ..findings import METRIC_LABELS, METRIC_NAMES, Finding, findings, incomplete_message, layer_label
from .breakdown import PartRow
from .cells import EMPTY, Cell, legend, metric_cell, parameter_cell, worst_status
from .layers import COLUMNS_BY_KEY, LAYER_COLUMNS, MARKDOWN_COLUMNS, Column, LayerRow, layer_rows
from .report import OwnerView, ReportView, TotalRow, TreeItem, report_view
from .values import shape_text, value_text

__all__ = [
    "COLUMNS_BY_KEY", "EMPTY", "LAYER_COLUMNS", "MARKDOWN_COLUMNS", "METRIC_LABELS", "METRIC_NAMES", "Cell", "Column", "Finding",
    "LayerRow", "OwnerView", "PartRow", "ReportView", "TotalRow", "TreeItem", "findings", "incomplete_message",
    "layer_label", "layer_rows", "legend", "metric_cell", "parameter_cell", "report_view", "shape_text", "value_text",
    "worst_status",
]
