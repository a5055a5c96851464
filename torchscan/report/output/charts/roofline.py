"""The model page's roofline: arithmetic intensity against FLOP/s per layer call, on the device the entry names.

Drawn from `torchscan.views.timing.TimeView` (the same calls as the page's table): log-log axes, the roofs of the
device (the bandwidth's slope, ``FLOP/s = intensity × bytes/s``, up to the peak of the dtype that computes most of
the model's FLOPs, a flat line from the ridge point on), and one point per leaf layer call at the rate its bound
allows (its FLOPs over its bound: on the roof by construction, so the picture says which roof holds each call).
When the report's measured time was taken on a device of the hardware's kind, each call's achieved FLOP/s (its FLOPs
over its measured kernel time) is drawn too, below the roof; measured time on another machine is never set against
this device's roofs. Calls without complete FLOPs and bytes have no place on the chart: its caption counts them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ....views.formatting import format_count, format_seconds
from ....views.timing import TimedCall, TimeView
from .amounts import counted
from .bar_plots import log_axes
from .canvas import Canvas
from .chart import Chart
from .style import FONT, INK, PALETTE, WIDTH
from .svg_output import draw

if TYPE_CHECKING:
    from matplotlib.axes import Axes

ROOFLINE_CHART_KEY = "time-roofline"
TITLE = "Roofline of the layer calls"
#: Point colours: memory-bound calls, compute-bound calls, measured (achieved) rates.
MEMORY, COMPUTE, ACHIEVED = PALETTE[0], PALETTE[1], PALETTE[2]
PLOT_HEIGHT = 210.0
#: The most points drawn with a hover title (a larger model's leaves are still drawn, unnamed).
HOVERS = 400


def roofline_chart(time: TimeView) -> Chart:
    """The roofline of ``time``'s leaf calls on its device; the top calls as the text alternative."""
    measured = time.top_by == "measured"
    headers = ("Rank", "Layer call", "Type", "FLOPs", "FLOP/byte", f"Bound on {time.hardware}", "Bound by",
               *(("Measured (build machine)", "Achieved FLOP/s") if measured else ()))
    rows = [(str(rank), call.label, call.type, call.flops_text, call.intensity_text, call.bound_text, call.bound_by,
             *((call.measured_text, format_count(call.achieved or 0.0)) if measured else ()))
            for rank, call in enumerate(time.top, 1)]
    undrawn = (f"{counted(time.undrawn, 'leaf call')} not drawn: no operator FLOPs, or FLOPs or bytes not complete "
               "(no bound to place).")
    notes = [undrawn] if time.undrawn else []
    chart = Chart(ROOFLINE_CHART_KEY, TITLE, summary(time), headers, rows, notes)
    return draw(chart, lambda: paint(time))


def summary(time: TimeView) -> str:
    """The caption: the device, its roofs and what a point is."""
    text = (f"{counted(len(time.calls), 'leaf layer call')} on {time.hardware}: arithmetic intensity (operator FLOPs "
            f"per unfused byte) against FLOP/s, log-log. The slope is the memory bandwidth "
            f"({format_count(time.bandwidth or 0.0)}B/s), the flat roof the dense {time.peak_key} peak "
            f"({format_count(time.peak or 0.0)}FLOP/s); each call is drawn at the rate its roofline bound allows "
            f"(its FLOPs over its bound), coloured by the roof that bounds it.")
    places = len({(call.intensity, call.attainable) for call in time.calls})
    if places < len(time.calls):
        text += f" Identical calls share a point: {counted(places, 'distinct point')}."
    if time.achieved_on_hardware:
        text += " Triangles are the rates achieved in the measured forward (FLOPs over the call's median kernel time)."
    ranked = "most measured time" if time.top_by == "measured" else "largest bound"
    return text + f" The table lists the calls with the {ranked}."


def paint(time: TimeView) -> Canvas:
    """Title, legend, the log-log axes with decade grids, the roofs and the points."""
    ridge = (time.peak or 1.0) / (time.bandwidth or 1.0)
    achieved = [call for call in time.calls if time.achieved_on_hardware and call.achieved]  # same device only
    x_range, y_range = _limits(time, achieved, ridge)
    canvas = Canvas(WIDTH, PLOT_HEIGHT + 80.0)
    left, bottom = 58.0, 32.0
    axes = canvas.axes(left, bottom, WIDTH - left - 16.0, PLOT_HEIGHT)
    canvas.title(TITLE + f" on {time.hardware}")
    canvas.legend(_legend(time, bool(achieved)), x=left, y=PLOT_HEIGHT + bottom + 26.0)
    log_axes(canvas, axes, x_range, y_range)
    canvas.text(left + (WIDTH - left - 16.0) / 2, 4, "arithmetic intensity (FLOP/byte)", anchor="middle",
                baseline="auto", size=FONT - 0.5)
    canvas.text(10, bottom + PLOT_HEIGHT / 2, "FLOP/s", anchor="middle", size=FONT - 0.5, rotate=-90)
    _roofs(canvas, axes, time, *x_range, ridge)
    _points(canvas, axes, time.calls, achieved)
    return canvas


def _limits(time: TimeView, achieved: list[TimedCall], ridge: float
            ) -> tuple[tuple[float, float], tuple[float, float]]:
    """Decade limits holding every point, the ridge point and the peak."""
    peak = time.peak or 1.0
    xs = [call.intensity for call in time.calls] + [ridge]
    ys = [call.attainable for call in time.calls] + [call.achieved or 0.0 for call in achieved] + [peak]
    return _decades(min(xs), max(xs)), _decades(min(y for y in ys if y > 0), peak * 2)


def _legend(time: TimeView, achieved: bool) -> list[tuple[str, str, str]]:
    """A swatch per kind of call drawn, the achieved rates when drawn, and the roofs."""
    kinds = {call.bound_by for call in time.calls}
    legend = [("fill", colour, f"{kind}-bound call") for kind, colour in (("memory", MEMORY), ("compute", COMPUTE))
              if kind in kinds]
    legend += [("triangle", ACHIEVED, "achieved (measured)")] if achieved else []
    return legend + [("line", INK, "roofs")]


def _decades(low: float, high: float) -> tuple[float, float]:
    """Limits at whole decades around ``[low, high]``, at least two decades apart."""
    start, stop = math.floor(math.log10(low)), math.ceil(math.log10(high))
    if stop - start < 2:
        start -= 1
        stop += 1
    return 10.0 ** start, 10.0 ** stop


def _roofs(canvas: Canvas, axes: Axes, time: TimeView, x_low: float, x_high: float, ridge: float) -> None:
    """The bandwidth slope up to the ridge point and the peak from there, each labelled along its line."""
    peak, bandwidth = time.peak or 1.0, time.bandwidth or 1.0
    start = max(x_low, axes.get_ylim()[0] / bandwidth)
    axes.plot([start, ridge, x_high], [start * bandwidth, peak, peak], color=INK, linewidth=1.3, zorder=3)
    canvas.text(x_high, peak, f"{time.peak_key} peak {format_count(peak)}FLOP/s", axes.transData, dy=7,
                anchor="end", baseline="auto", size=FONT - 0.5)
    canvas.text(ridge, peak, f"ridge {format_count(ridge)} FLOP/byte", axes.transData, dy=-10, dx=4,
                size=FONT - 1.0)
    middle = math.sqrt(start * ridge)
    canvas.text(middle, middle * bandwidth, f"{format_count(bandwidth)}B/s", axes.transData, dx=-3, dy=4,
                anchor="end", baseline="auto", size=FONT - 0.5)


def _points(canvas: Canvas, axes: Axes, calls: list[TimedCall], achieved: list[TimedCall]) -> None:
    """Each call at its attainable rate (coloured by its roof) and, when measured here, at its achieved rate."""
    colours = [COMPUTE if call.bound_by == "compute" else MEMORY for call in calls]
    axes.scatter([call.intensity for call in calls], [call.attainable for call in calls], s=16, c=colours,
                 linewidths=0.4, edgecolors=INK, alpha=0.85, zorder=4, clip_on=False)
    if achieved:
        axes.scatter([call.intensity for call in achieved], [call.achieved or 0.0 for call in achieved], s=18,
                     marker="^", c=ACHIEVED, linewidths=0, alpha=0.9, zorder=5, clip_on=False)
    for call in calls[:HOVERS]:
        x, y = (float(value) for value in axes.transData.transform((call.intensity, call.attainable)))
        canvas.hover(x, y, f"{call.label} ({call.type}): {format_count(call.flops)} FLOPs, "
                           f"{format_count(call.intensity)} FLOP/byte, bound {format_seconds(call.bound)} "
                           f"({call.bound_by})")
