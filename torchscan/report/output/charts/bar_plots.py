"""Plot parts the charts share: value grids, bars (exact ones filled, lower bounds hatched) and the horizontal
ranking with its layout and legend."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ....views.formatting import SCALES
from .amounts import Amount, tick_text
from .canvas import Canvas, no_ticks
from .measure import fit_text, text_width
from .style import FONT, INK, NEUTRAL, PALETTE, ROW, UNAVAILABLE, WIDTH

if TYPE_CHECKING:
    from matplotlib.axes import Axes


@dataclass(frozen=True)
class Bar:
    """One bar of a ranking: its label, amount, colour and a note written beside an n/a row; a stacked bar also has
    ``segments``, ``(colour, amount)`` pieces drawn end to end that add up to ``amount``."""

    label: str
    amount: Amount
    colour: str = PALETTE[0]
    note: str = ""
    segments: tuple[tuple[str, Amount], ...] = ()


def label_margin(labels: Sequence[str]) -> float:
    """Points left of the axes for the longest label (measured), at most 280: a longer label is shortened to fit."""
    return min(280.0, 12.0 + max((text_width(label, FONT) for label in labels), default=20.0))


def ranking_bottom(notes: Sequence[str]) -> float:
    return 8.0 + (13.0 if notes else 0.0)


def ranking_height(rows: float, notes: Sequence[str]) -> float:
    return ranking_bottom(notes) + rows * ROW + 30.0


def partial_legend(bars: Sequence[Bar]) -> list[tuple[str, str, str]]:
    partial = any(bar.amount.status == "partial" for bar in bars)
    return [("hatch", NEUTRAL, "≥ lower bound (partial)")] if partial else []


def ranking_axes(canvas: Canvas, bars: Sequence[Bar], notes: Sequence[str], rows: float, left: float = 0.0,
                 right: float = WIDTH - 60) -> Axes:
    """The axes of ``rows`` bar places between ``left`` and ``right`` (figure points), less the labels' margin."""
    start = left + label_margin([bar.label for bar in bars])
    return canvas.axes(start, ranking_bottom(notes), right - start, rows * ROW)


def ranking_canvas(title: str, bars: Sequence[Bar], notes: Sequence[str], empty: str,
                   legend: Sequence[tuple[str, str, str]] = (), rows: float = 0, **ranking: Any) -> Canvas:
    """A figure of one titled ranking, ``rows`` bar places high (one per bar by default), with its notes under it
    and its legend (``legend`` then the lower bound's); ``ranking`` goes to `paint_ranking`."""
    rows = rows or max(len(bars), 1)
    canvas = Canvas(WIDTH, ranking_height(rows, notes))
    axes = ranking_axes(canvas, bars, notes, rows)
    canvas.title(title)
    paint_ranking(canvas, axes, bars, empty=empty, **ranking)
    canvas.footnote(notes)
    canvas.legend([*legend, *partial_legend(bars)])
    return canvas


def value_grid(canvas: Canvas, axes: Axes, axis: str, low: float, high: float, log: bool = False,
               scales: tuple[tuple[float, str], ...] = SCALES, suffix: str = "", locator: Any = None) -> None:
    """Faint grid lines with their values along one axis (a few round numbers, or decades on a log axis, unless
    ``locator`` picks them), written with ``scales`` as the tables write that quantity, then ``suffix`` (``B``)."""
    from matplotlib.ticker import LogLocator, MaxNLocator

    if locator is None:
        locator = LogLocator(base=10.0, numticks=7) if log else MaxNLocator(nbins=4)
    ticks = [float(tick) for tick in locator.tick_values(low, high) if low <= tick <= high]
    if axis == "x":
        axes.vlines(ticks, 0, 1, transform=axes.get_xaxis_transform(), colors=INK, alpha=0.13, linewidth=0.6,
                    zorder=0, clip_on=False)
        for tick in ticks:
            canvas.text(tick, 0, tick_text(tick, scales) + suffix, axes.get_xaxis_transform(), dy=-4, anchor="middle",
                        number=True, baseline="hanging", size=FONT - 0.5)
    else:
        axes.hlines(ticks, 0, 1, transform=axes.get_yaxis_transform(), colors=INK, alpha=0.13, linewidth=0.6,
                    zorder=0, clip_on=False)
        for tick in ticks:
            canvas.text(0, tick, tick_text(tick, scales) + suffix, axes.get_yaxis_transform(), dx=-4, anchor="end",
                        size=FONT - 0.5, number=True)


def log_axes(canvas: Canvas, axes: Axes, xs: tuple[float, float], ys: tuple[float, float],
             x_scales: tuple[tuple[float, str], ...] = SCALES) -> None:
    """Both axes logarithmic from low to high of ``xs`` and ``ys``, without ticks, with their decade grids."""
    axes.set_xscale("log")
    axes.set_yscale("log")
    no_ticks(axes)
    axes.set_xlim(*xs)
    axes.set_ylim(*ys)
    value_grid(canvas, axes, "x", *xs, log=True, scales=x_scales)
    value_grid(canvas, axes, "y", *ys, log=True)


def rectangles(spans: Sequence[tuple[float, float, float, float]]) -> list[list[tuple[float, float]]]:
    """``(x0, x1, y0, y1)`` boxes as polygons."""
    return [[(x0, y0), (x1, y0), (x1, y1), (x0, y1)] for x0, x1, y0, y1 in spans]


def add_boxes(canvas: Canvas, axes: Axes, spans: Sequence[tuple[float, float, float, float]],
              colours: Sequence[str], statuses: Sequence[str], narrowest: float = 0.0) -> None:
    """Exact boxes filled (one collection); lower bounds outlined and hatched."""
    from matplotlib.collections import PolyCollection

    solid = [index for index, status in enumerate(statuses) if status == "complete"]
    if solid:
        axes.add_collection(PolyCollection(rectangles([spans[index] for index in solid]), linewidths=0,
                                           facecolors=[colours[index] for index in solid], clip_on=False),
                            autolim=False)
    bounds = [index for index, status in enumerate(statuses) if status == "partial"]
    if bounds:
        axes.add_collection(PolyCollection(rectangles([spans[index] for index in bounds]), linewidths=0.8,
                                           facecolors="none", edgecolors=[colours[index] for index in bounds],
                                           clip_on=False), autolim=False)
        for index in bounds:
            canvas.hatch(axes.transData, spans[index], colours[index], narrowest)


def paint_ranking(canvas: Canvas, axes: Axes, bars: Sequence[Bar], empty: str, log: bool = False,
                  positions: Sequence[float] | None = None, rows: int = 0) -> None:
    """Horizontal bars, largest at the top, each labelled with its value; an n/a row says so and has no bar.
    ``positions`` (one per bar) places the bars; by default they follow one another."""
    axes.spines["bottom"].set_visible(False)
    if not bars:
        canvas.text(0.5, 0.5, empty, axes.transAxes, anchor="middle")
        return
    positions = list(positions) if positions is not None else [float(index) for index in range(len(bars))]
    floor, stub = _ranking_limits(axes, bars, log)
    axes.set_ylim(max(max(positions) + 0.5, rows - 0.5), min(positions) - 0.5)
    spans, colours, statuses, ends = _ranking_boxes(bars, positions, floor, stub)
    add_boxes(canvas, axes, spans, colours, statuses)
    room = axes.get_position().x0 * canvas.width - 7  # left of the axes, less the gap and the figure's margin
    for position, bar in zip(positions, bars, strict=True):
        canvas.text(0, position, fit_text(bar.label, room, FONT), axes.get_yaxis_transform(), dx=-5, anchor="end")
        if bar.amount.drawn:
            canvas.text(ends[position], position, bar.amount.text, axes.transData, dx=3, size=FONT - 0.5,
                        number=True)
        else:
            canvas.text(0, position, "n/a" + (f" ({bar.note})" if bar.note else ""), axes.get_yaxis_transform(),
                        dx=4, colour=UNAVAILABLE, size=FONT - 0.5)


def _ranking_limits(axes: Axes, bars: Sequence[Bar], log: bool) -> tuple[float, float]:
    """Set the value axis; returns where bars start (``floor``) and the visible stub a lower bound keeps."""
    known = [bar.amount.known for bar in bars if bar.amount.drawn and bar.amount.known > 0]
    top = max(known, default=1.0)
    floor = 10 ** math.floor(math.log10(min(known, default=1.0))) / 3 if log else 0.0
    if log:
        axes.set_xscale("log")
        no_ticks(axes)
        axes.set_xlim(floor, top * (top / floor) ** 0.22)
    else:
        axes.set_xlim(0, top * 1.2)
    # A lower bound keeps a visible stub, so that its hatching (and a bound of zero) can be seen.
    stub = floor * (axes.get_xlim()[1] / floor) ** 0.03 if log else axes.get_xlim()[1] * 0.03
    return floor, stub


def _ranking_boxes(bars: Sequence[Bar], positions: Sequence[float], floor: float, stub: float
                   ) -> tuple[list[tuple[float, float, float, float]], list[str], list[str], dict[float, float]]:
    """The boxes of every drawn bar (a stacked bar's segments end to end), their colours and statuses, and where
    each bar ends (for its value label)."""
    spans: list[tuple[float, float, float, float]] = []
    colours: list[str] = []
    statuses: list[str] = []
    ends: dict[float, float] = {}
    for position, bar in zip(positions, bars, strict=True):
        if not bar.amount.drawn:
            continue
        pieces = bar.segments or ((bar.colour, bar.amount),)
        start = floor
        for colour, amount in pieces:
            stop = start + amount.known
            spans.append((start, stop, position - 0.36, position + 0.36))
            colours.append(colour)
            statuses.append(amount.status if amount.drawn else "partial")
            start = stop
        ends[position] = max(start, stub if bar.amount.status == "partial" else floor)
        if bar.amount.status == "partial" and start < stub:
            spans[-1] = (spans[-1][0], stub, *spans[-1][2:])
    return spans, colours, statuses, ends
