"""The sharded training step's chart: per-device memory by category against world size, with the device's memory.

Drawn from `torchscan.views.parallel.SizingView` (the rows of the page's sizing table): one stacked column per world
size the entry analyzed, each segment a category live at that world size's per-device peak (sharded parameters,
unsharded parameters in flight, gradient shards, optimizer state, saved activations, temporaries, ...); a solid line
at the device's memory and a dashed one at what is usable once the headroom is kept free.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

from ....views.formatting import format_bytes
from ....views.parallel import SizingPoint, SizingView
from .amounts import Amount, bytes_amount, total_of
from .bar_plots import Bar, add_boxes, partial_legend, value_grid
from .canvas import Canvas, no_ticks
from .chart import Chart
from .measure import text_width
from .style import FONT, INK, MORE_COLOURS, NEUTRAL, PALETTE, UNAVAILABLE, WIDTH
from .svg_output import draw

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: The chart's key: a memory chart (the page shows it in the sharded step's section, not among the cost charts).
DEVICE_CHART_KEY = "memory-devices"
TITLE = "Per-device memory against world size"
#: One colour per category; those the single-device memory chart also has keep its colours.
CATEGORY_COLOURS = {"sharded_parameters": PALETTE[0], "unsharded_parameters": MORE_COLOURS[1],
                    "all_gather_buffers": MORE_COLOURS[5], "gradient_shards": PALETTE[4],
                    "unsharded_gradients": PALETTE[7], "reduce_scatter_buffers": MORE_COLOURS[0],
                    "optimizer_state": PALETTE[3], "saved_activations": PALETTE[2], "temporaries": PALETTE[6],
                    "inputs": NEUTRAL, "buffers": MORE_COLOURS[2]}
LEGEND_ROW = 4
PLOT_HEIGHT = 170.0
#: Points a value label takes above its column (the gap and the text).
LABEL_HEIGHT = 14.0
#: Points below the plot: world-size labels, the axis title, and a footnote when there is one.
BELOW = 44.0


def device_memory_chart(sizing: SizingView) -> Chart:
    """The stacked columns of ``sizing``'s points with the device-memory lines; the numbers as its table."""
    keys = drawn_categories(sizing.points)
    labels = {part.key: part.label for point in sizing.points for part in point.parts}
    headers = ("World size", "Per-device peak", f"Fits in {format_bytes(sizing.usable)}",
               *(labels[key] for key in keys))
    rows = [(world_label(point), point.peak.text, point.fits,
             *(next((part.bytes.text for part in point.parts if part.key == key), "0B") for key in keys))
            for point in sizing.points]
    notes = [f"n/a (not drawn, never zero): {part.label} at world size {point.world_size}" for point in sizing.points
             for part in point.parts if bytes_amount(part.bytes).status == "unavailable"]
    chart = Chart(DEVICE_CHART_KEY, TITLE, summary(sizing), headers, rows, notes)
    return draw(chart, lambda: paint(sizing, keys, labels, notes))


def summary(sizing: SizingView) -> str:
    """The caption: what a column is, what the lines are, and the verdict."""
    return (f"One column per analyzed world size: every byte live on one device at the steady-state training step's "
            f"peak, by category (traced tensor bytes of one rank, without the communication library's buffers, the "
            f"allocator's caching or kernel workspaces). The solid line is one device's memory, "
            f"{format_bytes(sizing.device_memory)}; the dashed line what is usable with "
            f"{100 * sizing.headroom:g}% kept free, {format_bytes(sizing.usable)}.")


def world_label(point: SizingPoint) -> str:
    """``8 (declared)``: a column's world size, the declared one marked."""
    return f"{point.world_size:,}" + (" (declared)" if point.declared else "")


def drawn_categories(points: Sequence[SizingPoint]) -> list[str]:
    """The categories some column draws (more than zero bytes known), in report order."""
    drawn = {part.key for point in points for part in point.parts if bytes_amount(part.bytes).known > 0}
    return [key for key in CATEGORY_COLOURS if key in drawn]


def paint(sizing: SizingView, keys: list[str], labels: dict[str, str], notes: list[str]) -> Canvas:
    """Title, legend rows, the columns and the lines, the world sizes under them."""
    columns = [column_amounts(point, keys) for point in sizing.points]
    legend = [("fill", CATEGORY_COLOURS[key], labels[key]) for key in keys]
    legend += [("line", INK, "device memory"), ("dashed", INK, "usable")]
    legend += partial_legend([Bar("", total_of([amount for _, amount in column])) for column in columns])
    lines = [legend[start:start + LEGEND_ROW] for start in range(0, len(legend), LEGEND_ROW)]
    bottom = BELOW + (12.0 if notes else 0.0)
    height = bottom + PLOT_HEIGHT + 30.0 + 14.0 * len(lines)
    canvas = Canvas(WIDTH, height)
    left = 56.0
    axes = canvas.axes(left, bottom, WIDTH - left - 110.0, PLOT_HEIGHT)
    canvas.title(TITLE)
    for index, line in enumerate(lines):
        canvas.legend(line, x=left, y=height - 32 - 14 * index)
    paint_columns(canvas, axes, sizing, columns)
    canvas.footnote(notes)
    return canvas


def column_amounts(point: SizingPoint, keys: list[str]) -> list[tuple[str, Amount]]:
    """One column's segments: ``(colour, amount)`` of each drawn category, in ``keys`` order."""
    by_key = {part.key: bytes_amount(part.bytes) for part in point.parts}
    return [(CATEGORY_COLOURS[key], by_key[key]) for key in keys if key in by_key and by_key[key].drawn]


def paint_columns(canvas: Canvas, axes: Axes, sizing: SizingView, columns: list[list[tuple[str, Amount]]]) -> None:
    """Stacked columns at evenly spaced positions (world sizes are labels, not a scale), value grid, lines."""
    from matplotlib.ticker import MaxNLocator

    tops = [sum(amount.known for _, amount in column) for column in columns]
    high = max([*tops, sizing.device_memory]) * 1.14
    no_ticks(axes)
    axes.set_xlim(-0.6, len(columns) - 0.4)
    axes.set_ylim(0, high)
    value_grid(canvas, axes, "y", 0, high, suffix="B", locator=MaxNLocator(nbins=5))
    spans, colours, statuses = [], [], []
    for position, column in enumerate(columns):
        start = 0.0
        for colour, amount in column:
            spans.append((position - 0.32, position + 0.32, start, start + amount.known))
            colours.append(colour)
            statuses.append(amount.status)
            start += amount.known
    add_boxes(canvas, axes, spans, colours, statuses)
    lines = (float(sizing.device_memory), float(sizing.usable))
    beside = (axes.get_position().width * canvas.width / len(columns)) * 0.36 - 5  # points right of a column
    for position, (point, top) in enumerate(zip(sizing.points, tops, strict=True)):
        value_label(canvas, axes, (position, top), point.peak.text, lines, (LABEL_HEIGHT * high / PLOT_HEIGHT, beside))
        canvas.text(position, 0, world_label(point), axes.get_xaxis_transform(), dy=-5, anchor="middle",
                    baseline="hanging", size=FONT - 0.5, weight="bold" if point.declared else None)
        canvas.text(position, 0, point.fits, axes.get_xaxis_transform(), dy=-17, anchor="middle",
                    baseline="hanging", size=FONT - 1, colour=INK if point.fits == "fits" else UNAVAILABLE)
    canvas.text(0.5, 0, "world size (devices)", axes.transAxes, dy=-31, anchor="middle", baseline="hanging",
                size=FONT - 0.5)
    _device_lines(canvas, axes, sizing)


def value_label(canvas: Canvas, axes: Axes, at: tuple[float, float], text: str, lines: Sequence[float],
                room: tuple[float, float]) -> None:
    """A column's peak, written over its top or, where a device line would run through it, beside the top when it
    fits there clear of the lines, else above them; ``room`` is its height in bytes and the points right of a column."""
    (position, top), (height, beside) = at, room
    style = {"size": FONT - 0.5, "number": True}
    base = clear_of(top, lines, height)
    middle = top - height / 2
    if base != top and text_width(text, FONT - 0.5) <= beside and clear_of(middle, lines, height) == middle:
        canvas.text(position + 0.32, top, text, axes.transData, dx=3, dy=-5, **style)
    else:
        canvas.text(position, base, text, axes.transData, dy=4, anchor="middle", baseline="auto", **style)


def clear_of(top: float, lines: Sequence[float], height: float) -> float:
    """Where a column's value label sits (its baseline, in bytes): on the column, or above a device line that would
    run through it (a label over a line cannot be read)."""
    base = top
    for line in sorted(lines):
        if base - height / 4 <= line <= base + height:
            base = line + height / 8
    return base


def _device_lines(canvas: Canvas, axes: Axes, sizing: SizingView) -> None:
    """The device's memory (solid) and the usable part of it (dashed), labelled at the plot's right end."""
    lines: tuple[tuple[int, Literal["-", "--"], str], ...] = ((sizing.device_memory, "-", "device memory"),
                                                             (sizing.usable, "--", "usable"))
    for value, style, label in lines:
        axes.hlines([value], 0, 1, transform=axes.get_yaxis_transform(), colors=INK, linewidth=1.2,
                    linestyles=style, zorder=4, clip_on=False)
        dy = 5 if value == sizing.device_memory else -5
        canvas.text(1, value, f"{format_bytes(value)} {label}", axes.get_yaxis_transform(), dx=5, dy=dy,
                    size=FONT - 0.5)
