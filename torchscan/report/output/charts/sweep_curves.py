"""The chart of a sweep: every metric against the swept quantity, one point per analysis.

Drawn from `torchscan.views.sweep.SweepView`. Each metric is a colour; its analyzed points are dots joined by thin
straight segments that only guide the eye (no value between two points is claimed: the exact formula in the caption
and the curves table say what holds, and on which sizes), a lower bound a hollow triangle. The axes are logarithmic
where the values span a wide range, so a quadratic term shows as a steeper slope; the x ticks are the analyzed sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ....views.sweep import KV_CACHE, SWEPT_METRICS, SweepView
from .amounts import Amount, amount_of
from .bar_plots import value_grid
from .canvas import Canvas, no_ticks
from .chart import Chart
from .style import FONT, INK, PALETTE, WIDTH
from .svg_output import draw

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: A wide range gets a logarithmic axis (a factor of more than this between the smallest and largest value).
LOG_RANGE = 4.0
#: The most x ticks written (more analyzed sizes keep their points but not every label).
MAX_TICKS = 12
Series = tuple[str, str, list[tuple[int, Amount]]]


def sweep_charts(view: SweepView) -> list[Chart]:
    """The costs against the quantity; for a sweep of decode steps, also the KV cache they read (in bytes)."""
    charts = [metric_chart(view, [key for key, _ in SWEPT_METRICS], f"Cost against {view.quantity}",
                           f"sweep-{view.quantity}")]
    if KV_CACHE in view.metrics:
        charts.append(metric_chart(view, [KV_CACHE[0]], f"KV cache against {view.quantity}",
                                   f"sweep-{view.quantity}-kv-cache", unit="bytes"))
    return charts


def metric_chart(view: SweepView, keys: Sequence[str], title: str, key: str, unit: str = "") -> Chart:
    """The metrics ``keys`` of ``view`` against its quantity; their exact formulas are the caption, the points the
    table."""
    series = _series(view, keys)
    columns = [index for index, (metric, _) in enumerate(view.metrics) if metric in keys]
    rows = [(point.size_text, *(point.cells[index].text for index in columns)) for point in view.points]
    chart = Chart(key, title, _caption(view, keys), (view.quantity, *(view.headers[index] for index in columns)), rows,
                  [f"Not analyzed: {item}." for item in view.missing])

    def paint() -> Canvas:
        canvas = Canvas(WIDTH, 330)
        axes = canvas.axes(62, 44, WIDTH - 90, 250)
        canvas.title(title + (f" ({unit})" if unit else ""))
        paint_series(canvas, axes, series, view.quantity, "B" if unit == "bytes" else "")
        partial = any(amount.status == "partial" for _, _, points in series for _, amount in points)
        canvas.legend([("fill", colour, label) for label, colour, _ in series]
                      + ([("triangle-open", INK, "≥ lower bound")] if partial else []))
        canvas.footnote(chart.notes)
        return canvas

    return draw(chart, paint)


def _caption(view: SweepView, keys: Sequence[str]) -> str:
    """What the chart shows, with the exact formula of each metric and why the others have none."""
    curves = [curve for curve in view.curves if curve.metric in keys]
    formulas = [formula for curve in curves if curve.exact for formula in curve.formulas]
    inexact = [f"{curve.label}: {curve.why_not_exact}" for curve in curves if curve.why_not_exact]
    exact = f"Exact curves ({view.symbol_text}): " + "; ".join(formulas) + "." if formulas else "No exact curve."
    return (f"One point per analyzed {view.quantity}; the segments between points only guide the eye. {exact}"
            + (" Not exact: " + "; ".join(inexact) + "." if inexact else ""))


def _series(view: SweepView, keys: Sequence[str]) -> list[Series]:
    """Per metric of ``keys``: its label, colour and drawable points (unavailable values left out); metrics with the
    same points are one series (``Module FLOPs = Operator FLOPs``), so that none hides behind another."""
    series: list[Series] = []
    for index, (metric, label) in enumerate(view.metrics):
        points = [(point.size, amount) for point in view.points
                  if (amount := amount_of(point.cells[index])) is not None and amount.drawn and amount.known > 0]
        if not points or metric not in keys:
            continue
        same = next((number for number, (*_, other) in enumerate(series) if other == points), None)
        if same is None:
            series.append((label, PALETTE[index % len(PALETTE)], points))
        else:
            series[same] = (f"{series[same][0]} = {label}", series[same][1], points)
    return series


def paint_series(canvas: Canvas, axes: Axes, series: Sequence[Series], quantity: str, suffix: str = "") -> None:
    """The series on ``axes``, with the analyzed sizes as x ticks; ``suffix`` follows each y tick (``B``)."""
    if not series:
        canvas.text(0.5, 0.5, "no analyzed point has a number to draw", axes.transAxes, anchor="middle")
        return
    sizes = sorted({size for _, _, points in series for size, _ in points})
    values = [amount.known for _, _, points in series for _, amount in points]
    _axes_limits(canvas, axes, sizes, values, suffix)
    for _, colour, points in series:
        _paint_metric(axes, colour, points)
    canvas.text(0.5, 0, quantity, axes.transAxes, dy=-22, anchor="middle", size=FONT - 0.5)


def _paint_metric(axes: Axes, colour: str, points: Sequence[tuple[int, Amount]]) -> None:
    """One metric: a thin guide through its points, exact points as dots, lower bounds as hollow triangles."""
    axes.plot([size for size, _ in points], [amount.known for _, amount in points], color=colour, linewidth=0.9,
              alpha=0.7, clip_on=False)
    styles: tuple[tuple[str, dict[str, Any]], ...] = (
        ("complete", {"marker": "o", "s": 22, "linewidths": 0, "color": colour}),
        ("partial", {"marker": "^", "s": 30, "facecolors": "none", "edgecolors": colour, "linewidths": 1.1}))
    for status, style in styles:
        chosen = [(size, amount.known) for size, amount in points if amount.status == status]
        if chosen:
            axes.scatter([size for size, _ in chosen], [value for _, value in chosen], zorder=3, clip_on=False, **style)


def _axes_limits(canvas: Canvas, axes: Axes, sizes: Sequence[int], values: Sequence[float], suffix: str) -> None:
    """Limits with room around the points, log scales for wide ranges, value grid on y and the sizes on x."""
    from matplotlib.ticker import LogLocator

    log_x = max(sizes) > LOG_RANGE * min(sizes)
    log_y = max(values) > LOG_RANGE * min(values)
    if log_x:
        axes.set_xscale("log")
    if log_y:
        axes.set_yscale("log")
    no_ticks(axes)
    pad_x = (max(sizes) - min(sizes)) * 0.04 or 1.0
    axes.set_xlim(*((min(sizes) / 1.15, max(sizes) * 1.15) if log_x else (min(sizes) - pad_x, max(sizes) + pad_x)))
    low, high = (min(values) / 2, max(values) * 2) if log_y else (0.0, max(values) * 1.1)
    axes.set_ylim(low, high)
    # decades on a wide log axis, 1-2-5 steps on a narrow one (so that less than two decades get several labels)
    subs = (1.0,) if high > 100 * low else (1.0, 2.0, 5.0)
    value_grid(canvas, axes, "y", low, high, suffix=suffix,
               locator=LogLocator(base=10.0, subs=subs, numticks=12) if log_y else None)
    step = max(1, -(-len(sizes) // MAX_TICKS))
    for size in sizes[::step]:
        canvas.text(size, 0, f"{size:,}", axes.get_xaxis_transform(), dy=-4, anchor="middle", baseline="hanging",
                    size=FONT - 0.5)
