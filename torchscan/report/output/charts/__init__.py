"""Static charts of where the cost goes, drawn from the view objects the templates use, as inline SVG strings:
``cost_breakdown`` draws a report's, ``catalog_comparison`` a catalog's, ``cost_changes`` a diff's.

The tables' honesty rules hold in the pictures too: a lower bound is drawn hatched and labelled ``≥``, an unavailable
value is never drawn as zero (it is marked and listed as n/a), and a subtree owner's estimate is drawn at the owner
while the calls it covers are skipped, so nothing is counted twice. Every chart carries a text alternative (a caption
and its numbers as a table), which is all that remains when matplotlib is not installed.
"""

from .amounts import Amount, total_of
from .catalog_comparison import catalog_charts
from .chart import Chart
from .cost_breakdown import report_charts
from .cost_changes import diff_charts

__all__ = ["Amount", "Chart", "catalog_charts", "diff_charts", "report_charts", "total_of"]
