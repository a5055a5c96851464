"""`summary`: analyze a model and print the terminal table of `torchscan.views.text`."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any, TextIO

from .crawler import crawl_module
from .views.text import check_limit, column_keys, render_table


def summary(model: Any, input_shape: Any = None, dtype: Any = None, *, file: TextIO | None = None,
            max_depth: int | None = None, max_rows: int | None = None, col_names: Iterable[str] | None = None,
            **options: Any) -> dict[str, Any]:
    """Run `crawl_module` with the same arguments, print the layer table, and return the report.

    ``max_depth`` hides the calls nested deeper than that many levels below the root (their costs and parameters
    stay in the ``Σ`` of the rows above); ``max_rows`` cuts the table after that many rows; ``col_names`` chooses
    the columns after the layer name (see `column_keys`). None of them changes the report.
    """
    check_limit("max_depth", max_depth, 0)
    check_limit("max_rows", max_rows, 1)
    columns = column_keys(col_names)
    report = crawl_module(model, input_shape, dtype, **options)
    print(render_table(report, max_depth=max_depth, max_rows=max_rows, col_names=columns), file=file or sys.stdout)
    return report
