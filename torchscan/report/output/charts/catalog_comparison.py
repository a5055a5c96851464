"""The charts of a catalog: parameters against MACs for every model run, and MACs per model run."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ....views.formatting import PARAMETER_SCALES, format_parameters
from .amounts import Amount, amount_of, counted, shorten
from .bar_plots import Bar, log_axes, ranking_canvas
from .canvas import Canvas
from .chart import TABLE_ROWS, Chart, Painter
from .measure import fit_text, text_width
from .style import FONT, INK, WIDTH, distinct_colours
from .svg_output import draw

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from ...review.catalog_view import CatalogView, EntrySummary, RunSummary

CATALOG_BARS = 80
#: The scatter's plot, width and height in points (its axes span the points' range and a factor 3 on each side).
PLOT = (WIDTH - 160, 260.0)
#: Points whose centres are closer than this (in points, on both axes) are drawn as one (markers are about 5 wide).
APART = 2.0
#: One run on the scatter: its entry (the colour), its name, parameters and MACs.
Point = tuple[str, str, int, Amount]
#: A label's box in figure points: left, bottom, right, top.
Box = tuple[float, float, float, float]
#: Up to this many points are each named beside them; with more, only the extremes (fewest and most parameters
#: and MACs) are, and every other point names itself on hover (an SVG ``<title>``), so a thousand stay legible.
LABEL_ALL = 40


def catalog_charts(view: CatalogView) -> list[Chart]:
    """Parameters against MACs for every model run (variants joined by a line), and MACs per model run."""
    runs = [(entry, run) for entry in view.entries for run in entry.catalog_runs]
    colours = dict(zip((entry.name for entry in view.entries), distinct_colours(len(view.entries)), strict=True))
    return [draw(*scatter_chart(runs, colours, len(view.runs))), draw(*macs_per_model_chart(runs, colours))]


def run_name(entry: EntrySummary, run: RunSummary) -> str:
    return entry.name + (f" · {run.run.variant}" if run.run.variant else "")


def scatter_chart(runs: Sequence[tuple[EntrySummary, RunSummary]], colours: dict[str, str], counted_runs: int
                  ) -> tuple[Chart, Painter]:
    """Parameters against MACs; ``counted_runs`` is the number of runs the catalog page counts (a sweep's every
    point among them), which the caption counts as well."""
    points, skipped = scatter_points(runs)
    groups = coincident(points)
    notes = ["Not drawn: " + ", ".join(skipped) + "."] if skipped else []
    notes += [f"One point for {len(group)} runs whose parameters and MACs are equal or too close to tell apart here: "
              + ", ".join(points[index][1] for index in group) + "." for group in groups if len(group) > 1]
    rows = [(name, format_parameters(params), macs.text) for _, name, params, macs in points]
    shared = (" ×N after a name marks a point that N runs share (the notes name them)."
              if any(len(group) > 1 for group in groups) else "")
    summary = (f"Each point is one model run, on logarithmic axes; the variants of one model share a colour and are "
               f"joined by a line; a hollow triangle marks a lower bound on MACs.{shared} {len(points):,} of the "
               f"catalog's {counted_runs:,} runs drawn"
               + _sweep_points_text(counted_runs - len(runs)) + "."
               + (" Only the extremes are named; hover a point for its name and numbers." if len(points) > LABEL_ALL
                  else ""))
    chart = Chart("params-vs-macs", "Parameters vs MACs", summary, ("Model", "Parameters", "MACs"), rows, notes)

    def paint() -> Canvas:
        canvas = Canvas(WIDTH, 330 + (13 if notes else 0))
        axes = canvas.axes(58, 40 + (13 if notes else 0), *PLOT)
        canvas.title("Parameters vs MACs (both axes logarithmic)")
        paint_scatter(canvas, axes, points, colours, groups)
        if any(macs.status == "partial" for *_, macs in points):
            canvas.legend([("triangle-open", INK, "≥ lower bound (partial MACs)")])
        canvas.footnote(notes)
        return canvas

    return chart, paint


def scatter_points(runs: Sequence[tuple[EntrySummary, RunSummary]]) -> tuple[list[Point], list[str]]:
    """The runs with a place on log axes, and why each other run has none."""
    points: list[Point] = []
    skipped = []
    for entry, run in runs:
        macs = amount_of(run.macs)
        params = int(run.params.sort or 0)
        name = run_name(entry, run)
        if run.report is None or macs is None:
            skipped.append(f"{name} (failed)")
        elif not macs.drawn:
            skipped.append(f"{name} (MACs n/a)")
        elif macs.known <= 0 or params <= 0:
            skipped.append(f"{name} ({'no parameters' if params <= 0 else '0 MACs'}, no place on a log axis)")
        else:
            points.append((entry.name, name, params, macs))
    return points, skipped


def _sweep_points_text(hidden: int) -> str:
    """The runs the scatter leaves to the model pages: a swept entry is drawn at its declared point."""
    if hidden <= 0:
        return ""
    return (f"; the other {counted(hidden, 'point')} of swept entries are drawn on their models' pages (the "
            "catalog draws each sweep at its declared point)")


def coincident(points: Sequence[Point]) -> list[list[int]]:
    """The points, grouped where they fall on one spot of the chart (centres less than `APART` points apart on both
    axes, lower bounds apart from exact values): each group is drawn as one point, and says so."""
    if not points:
        return []
    scales = [PLOT[axis] / math.log10(9 * max(values) / min(values)) for axis, values in
              enumerate(([float(params) for _, _, params, _ in points], [macs.known for *_, macs in points]))]
    groups: list[list[int]] = []
    for index, (_, _, params, macs) in enumerate(points):
        for group in groups:
            _, _, first_params, first_macs = points[group[0]]
            if first_macs.status == macs.status and all(
                    abs(math.log10(first / second)) * scale < APART
                    for first, second, scale in ((first_params, params, scales[0]),
                                                 (first_macs.known, macs.known, scales[1]))):
                group.append(index)
                break
        else:
            groups.append([index])
    return groups


def macs_per_model_chart(runs: Sequence[tuple[EntrySummary, RunSummary]], colours: dict[str, str]
                         ) -> tuple[Chart, Painter]:
    bars, rows = [], []
    for entry, run in runs:
        macs = amount_of(run.macs)
        rows.append((run_name(entry, run), "failed" if macs is None else macs.text, run.status))
        bars.append(Bar(shorten(run_name(entry, run), 40), macs or Amount(0.0, "unavailable"), colours[entry.name],
                        "analysis failed" if macs is None else ""))
    groups = [entry.name for entry, _ in runs][:CATALOG_BARS]
    bars = bars[:CATALOG_BARS]
    notes = [f"Only the first {CATALOG_BARS} of {len(runs):,} runs are drawn."] if len(runs) > CATALOG_BARS else []
    if any(not bar.amount.drawn for bar in bars):
        notes.append("n/a: MACs unavailable or the analysis failed (no bar, never zero).")
    summary = ("MACs (module view) of every model run on a logarithmic axis, the variants of one model side by "
               "side; a hatched bar is a lower bound.")
    chart = Chart("macs-per-model", "MACs per model", summary, ("Model", "MACs", "Status"), rows[:TABLE_ROWS * 4],
                  notes)

    def paint() -> Canvas:
        positions = group_positions(groups)
        return ranking_canvas("MACs per model (logarithmic axis)", bars, notes, "no model has MACs",
                              rows=(positions[-1] + 1) if positions else 1, log=True, positions=positions)

    return chart, paint


def group_positions(groups: Sequence[str]) -> list[float]:
    """Bar positions with a gap between groups, so the variants of one model stay together."""
    positions, current = [], 0.0
    for index, group in enumerate(groups):
        if index and group != groups[index - 1]:
            current += 0.5
        positions.append(current)
        current += 1.0
    return positions


def paint_scatter(canvas: Canvas, axes: Axes, points: Sequence[Point], colours: dict[str, str],
                  groups: Sequence[Sequence[int]]) -> None:
    if not points:
        canvas.text(0.5, 0.5, "no model run with parameters and MACs", axes.transAxes, anchor="middle")
        return
    xs = [float(params) for _, _, params, _ in points]
    ys = [macs.known for *_, macs in points]
    log_axes(canvas, axes, (min(xs) / 3, max(xs) * 3), (min(ys) / 3, max(ys) * 3), PARAMETER_SCALES)
    _variant_lines(axes, points, xs, ys, colours)
    _markers(axes, points, xs, ys, colours)
    canvas.text(0.5, 0, "parameters", axes.transAxes, dy=-20, anchor="middle", size=FONT - 0.5)
    canvas.text(0, 0.5, "MACs (module view)", axes.transAxes, dx=-40, anchor="middle", rotate=-90,
                size=FONT - 0.5)
    named = set(named_points(points))
    # a group is named after its first named member (an extreme among many points)
    point_labels(canvas, axes, points, [sorted(group, key=lambda index: index not in named) for group in groups
                                        if named.intersection(group)])
    hover_points(canvas, axes, points, [group for group in groups if len(group) > 1 or not named.intersection(group)])


def _variant_lines(axes: Axes, points: Sequence[Point], xs: Sequence[float],
                   ys: Sequence[float], colours: dict[str, str]) -> None:
    """The variants of one model joined by a line in the model's colour."""
    lines: dict[str, list[tuple[float, float]]] = {}
    for (entry, _, _, _), x, y in zip(points, xs, ys, strict=True):
        lines.setdefault(entry, []).append((x, y))
    for entry, line in lines.items():
        if len(line) > 1:
            axes.plot([x for x, _ in line], [y for _, y in line], color=colours[entry], linewidth=1.0, alpha=0.8,
                      clip_on=False)


def _markers(axes: Axes, points: Sequence[Point], xs: Sequence[float], ys: Sequence[float],
             colours: dict[str, str]) -> None:
    """Exact points as filled dots, lower bounds on MACs as hollow triangles."""
    styles: tuple[tuple[str, str, dict[str, Any]], ...] = (
        ("complete", "color", {"marker": "o", "s": 24, "linewidths": 0}),
        ("partial", "edgecolors", {"marker": "^", "s": 34, "facecolors": "none", "linewidths": 1.2}))
    for status, colour, style in styles:
        chosen = [index for index, (*_, macs) in enumerate(points) if macs.status == status]
        if chosen:
            axes.scatter([xs[index] for index in chosen], [ys[index] for index in chosen], zorder=3, clip_on=False,
                         **{colour: [colours[points[index][0]] for index in chosen], **style})


def named_points(points: Sequence[Point]) -> list[int]:
    """The points named beside them: all of them up to `LABEL_ALL`, else the extremes of both axes."""
    if len(points) <= LABEL_ALL:
        return list(range(len(points)))
    by_params = sorted(range(len(points)), key=lambda index: (points[index][2], points[index][1]))
    by_macs = sorted(range(len(points)), key=lambda index: (points[index][3].known, points[index][1]))
    return sorted({by_params[0], by_params[-1], by_macs[0], by_macs[-1]})


def hover_points(canvas: Canvas, axes: Axes, points: Sequence[Point], groups: Sequence[Sequence[int]]) -> None:
    """Each group's point names its runs on hover: names, parameters and MACs."""
    for group in groups:
        _, _, params, macs = points[group[0]]
        x, y = (float(value) for value in axes.transData.transform((params, macs.known)))
        names = ", ".join(points[index][1] for index in group)
        canvas.hover(x, y, f"{names}: {format_parameters(params)} parameters, {macs.text} MACs")


def point_labels(canvas: Canvas, axes: Axes, points: Sequence[Point], groups: Sequence[Sequence[int]]) -> None:
    """Each group's point named beside it (``×2`` after the name when two runs share it), at the first place that
    overlaps no other label, keeps clear of the other points and stays inside the plot's part of the figure (boxes
    measured); a label pushed further away gets a thin leader line, and one that fits nowhere whole is shortened."""
    spots = [tuple(float(value) for value in axes.transData.transform((params, macs.known)))
             for _, _, params, macs in points]
    box = axes.get_position()  # labels stay right of the MACs axis, above the parameters axis, below the title
    area = (box.x0 * canvas.width, box.y0 * canvas.height, canvas.width - 2, canvas.height - 23)
    taken: list[Box] = []
    for group in sorted(groups, key=lambda group: (-points[group[0]][3].known, points[group[0]][1])):
        _, name, _, macs = points[group[0]]
        x, y = spots[group[0]]
        text = ("≥ " if macs.status == "partial" else "") + shorten(name, 30) + (
            f" ×{len(group)}" if len(group) > 1 else "")
        others = [(ox - 8, oy - 6, ox + 8, oy + 6) for number, (ox, oy) in enumerate(spots) if number not in group]
        text, (left, middle), near = _label_place(text, (x, y), [*taken, *others], area)
        taken.append((left, middle - 4.5, left + text_width(text, FONT - 1), middle + 4.5))
        if not near:
            canvas.leader(x, y, left - 1, middle)
        canvas.text(left, middle, text, size=FONT - 1)


def _label_place(text: str, spot: tuple[float, float], blocked: Sequence[Box], area: Box
                 ) -> tuple[str, tuple[float, float], bool]:
    """Where a point's label goes: the text (shortened when it fits nowhere whole), its left edge and middle, and
    whether that is beside the point (else it gets a leader line)."""
    x, y = spot
    for candidate in (text, fit_text(text, max(area[2] - x - 6, x - 6 - area[0]), FONT - 1)):
        width = text_width(candidate, FONT - 1)
        near = [(x + 6, y), (x - 6 - width, y), (x + 3, y + 9), (x + 3, y - 9), (x - 3 - width, y + 9),
                (x - 3 - width, y - 9)]
        far = [(x + 10, y + sign * 11 * step) for step in range(2, 9) for sign in (-1, 1)]
        spot_found = _free_spot([*near, *far], width, blocked, area)
        if spot_found is not None:
            return candidate, spot_found, spot_found in near
    width = text_width(candidate, FONT - 1)  # overlapping, but inside the figure: never cut
    left = x + 6 if x + 6 + width <= area[2] else max(x - 6 - width, area[0])
    return candidate, (left, min(max(y, area[1] + 4.5), area[3] - 4.5)), True


def _free_spot(candidates: Sequence[tuple[float, float]], width: float, blocked: Sequence[Box], area: Box
               ) -> tuple[float, float] | None:
    """The first candidate (left edge, middle) whose label box stays inside ``area`` and overlaps nothing."""
    for left, middle in candidates:
        box = (left, middle - 4.5, left + width, middle + 4.5)
        if (box[0] >= area[0] and box[2] <= area[2] and box[1] >= area[1] and box[3] <= area[3]
                and not any(_overlap(box, other) for other in blocked)):
            return left, middle
    return None


def _overlap(first: Box, second: Box) -> bool:
    return first[0] < second[2] and second[0] < first[2] and first[1] < second[3] and second[1] < first[3]
