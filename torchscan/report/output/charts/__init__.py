"""Static charts of where the cost goes, drawn from the view objects the templates use, as inline SVG strings.

Per report: cost and parameters by layer type, the most expensive layer calls, and the cost profile along execution
order. Per catalog: parameters against MACs for every model, and MACs per model. Per diff: the layer calls whose
cost changed most. The tables' honesty rules hold in the pictures too: a lower bound is drawn hatched and labelled
``≥``, an unavailable value is never drawn as zero (it is marked and listed as n/a), and a subtree owner's estimate is
drawn at the owner while the calls it covers are skipped, so nothing is counted twice.

Modules: ``style`` (shared colours and sizes), ``amounts`` (values with their status), ``chart`` (the data type
and its HTML figure), ``canvas`` and ``bar_plots`` (drawing), ``measure`` (label widths, so that no label is cut),
``svg_output`` (deterministic SVG for inline use), and one module per document kind: ``cost_breakdown`` (a report), ``catalog_comparison`` (a catalog),
``cost_changes`` (a diff). Every chart carries a text alternative (a caption and its numbers as a table), which
is all that remains when matplotlib is not installed.
"""

from .amounts import Amount, total_of
from .catalog_comparison import catalog_charts
from .chart import Chart
from .cost_breakdown import report_charts
from .cost_changes import diff_charts

__all__ = ["Amount", "Chart", "catalog_charts", "diff_charts", "report_charts", "total_of"]
