"""The charts of a sweep: one point per analyzed size, equal metrics drawn once, the exact formulas in the caption,
lower bounds marked, and the KV cache of decode steps in a chart of its own (in bytes)."""

from __future__ import annotations

import re
from typing import Any

from torchscan.curves.cost_curve import fit_curves
from torchscan.report.output.charts.sweep_curves import sweep_charts
from torchscan.report.review.sweep_record import fitted_counts, point_record
from torchscan.views.sweep import sweep_view

SIZES = (128, 256, 512, 1024, 2048)


def result(value: int, unit: str = "MACs", status: str = "complete") -> dict[str, Any]:
    known = value
    return {"status": status, "value": value if status == "complete" else None, "known_value": known,
            "unit": unit, "scope": "model", "method": "test"}


def record(partial_dmas: bool = False, kv_cache: bool = False) -> dict[str, Any]:
    """A sweep JSON as a build writes it, from report-shaped totals (quadratic MACs, linear FLOPs in both views)."""
    points = []
    for size in SIZES:
        report = {"totals": {"macs": result(3 * size * size + 5 * size), "module_flops": result(7 * size, "FLOPs"),
                             "operator_flops": result(7 * size, "FLOPs"),
                             "dmas": result(11 * size, "DMAs", "partial" if partial_dmas else "complete")},
                  "inputs": {"kv_cache": {"bytes": result(4096 * size, "bytes")}} if kv_cache else {}}
        points.append(point_record(size, report))
    return {"quantity": "seq_len", "default": 512, "sizes": list(SIZES), "points": points,
            "curves": fit_curves(list(SIZES), [fitted_counts(point) for point in points])}


def test_one_chart_of_every_cost_with_its_exact_formulas() -> None:
    (chart,) = sweep_charts(sweep_view(record()))
    assert chart.title == "Cost against seq_len" and chart.svg.startswith("<svg")
    assert "MACs = 3·L² + 5·L" in chart.summary and "Module FLOPs = 7·L" in chart.summary
    # The two FLOP views have the same points: drawn once, named together in the legend.
    assert "Module FLOPs = Operator FLOPs" in chart.svg
    assert len(re.findall(r'<use xlink:href="#[^"]+" x="', chart.svg)) == 3 * len(SIZES)
    # The x ticks are the analyzed sizes; the table holds every number.
    for size in SIZES:
        assert f">{size:,}</text>" in chart.svg
    assert chart.headers == ("seq_len", "MACs", "Module FLOPs", "Operator FLOPs", "DMAs")
    assert [row[0] for row in chart.rows] == [f"{size:,}" for size in SIZES]


def test_lower_bounds_are_marked_and_have_no_formula() -> None:
    (chart,) = sweep_charts(sweep_view(record(partial_dmas=True)))
    assert "≥ lower bound" in chart.svg and "DMAs: partial at size 128" in chart.summary
    assert "DMAs =" not in chart.summary and chart.rows[0][4].startswith("≥")


def test_decode_steps_get_a_kv_cache_chart_in_bytes() -> None:
    view = sweep_view(record(kv_cache=True))
    assert view.headers[-1] == "KV cache" and view.points[0].cells[-1].text == "524kB"
    costs, cache = sweep_charts(view)
    assert "KV cache" not in costs.summary and cache.title == "KV cache against seq_len"
    assert "KV cache = 4,096·L" in cache.summary and cache.headers == ("seq_len", "KV cache")
    assert re.search(r">\d+(\.\d+)?[kMG]B</text>", cache.svg)  # the y ticks are bytes
