"""Counts agree with their nouns in every message (``1 entry``, ``2 entries``, ``0 runs``) and are written in full
with thousands separators (``1,000 runs``, never ``1k runs``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from catalogs import synthetic_registry

from torchscan.report.output.charts.amounts import counted
from torchscan.report.output.documents import catalog_markdown
from torchscan.report.review.catalog_view import catalog_view
from torchscan.report.review.wording import count_text, plural


@pytest.mark.parametrize("count, singular, many, text", [
    (1, "entry", "entries", "1 entry"), (2, "entry", "entries", "2 entries"), (0, "run", "", "0 runs"),
    (1, "run", "", "1 run"),
])
def test_plural(count: int, singular: str, many: str, text: str) -> None:
    assert plural(count, singular, many) == text


def test_a_large_count_is_written_in_full_with_thousands_separators() -> None:
    assert plural(12_500, "check") == "12,500 checks"
    assert count_text(1_000) == "1,000"


def test_the_catalog_of_a_thousand_entries_counts_them_in_full(tmp_path: Path) -> None:
    """The count line, the closing sentence and the filter's count of a 1,000-entry catalog read ``1,000``."""
    registry = synthetic_registry(tmp_path, 1000)
    failed = {"status": "failed", "error": {"stage": "forward", "type": "RuntimeError", "message": "synthetic"}}
    catalog = catalog_view(registry, {run.stem: failed for run in registry.runs}, strict=False)
    page = catalog_markdown(catalog, "models/", "reports/", site=True, charts=[])
    assert "1,000 runs: 0 complete, 0 partial, 1,000 failed" in page
    assert "1,000 models, 1,000 runs" in page
    assert "1,000 of 1,000 entries shown" in page
    assert "1k" not in page


def test_chart_captions_count_in_full() -> None:
    """``The numbers (1,000 rows)`` under a 1,000-point chart, never ``1000 rows``."""
    assert counted(1_000, "row") == "1,000 rows" and counted(1, "call") == "1 call"
