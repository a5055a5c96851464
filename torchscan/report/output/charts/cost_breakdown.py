"""The charts of one report: cost and parameters by layer type, the most expensive layer calls, and the cost
profile along execution order (with bands for the model's stages)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ....views.formatting import format_parameters
from .amounts import Amount, amount_of, counted, parameter_amount, ranked, share_text, shorten, total_of
from .bar_plots import Bar, add_boxes, paint_ranking, partial_legend, ranking_axes, ranking_height, value_grid
from .canvas import Canvas
from .chart import TABLE_ROWS, Chart, Painter
from .device_memory import device_memory_chart
from .memory_breakdown import memory_charts
from .roofline import roofline_chart
from .style import FONT, INK, METRIC_NAMES, NEUTRAL, PALETTE, UNAVAILABLE, WIDTH
from .svg_output import draw
from .top_calls import covered_sentence, top_calls_chart

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from ....views import LayerRow, ReportView

TOP_TYPES = 10  # bars of a by-type ranking before the rest is summed as "other"
PROFILE_BARS = 200  # the profile's largest number of bars: more calls are summed per bar


def report_charts(view: ReportView) -> list[Chart]:
    """Cost and parameters by layer type, the most expensive calls and the profile along execution order, then the
    charts of what the report has: traced memory, a sized sharded step, a roofline bound on a named device (a page
    shows each chart in the section its key names: see `Chart.section`)."""
    metric = cost_metric(view.layers)
    calls = [row for row in view.layers if metric in row.own]
    colours = type_colours([(row.type_name, amount_of(row.own[metric]) or Amount()) for row in calls])
    charts = [draw(*by_type_chart(view, calls, metric)), draw(*top_calls_chart(view, calls, metric, colours)),
              draw(*profile_chart(view, calls, metric, colours))]
    charts += memory_charts(view.memory) if view.memory is not None else []
    sizing = view.parallel.sizing if view.parallel is not None else None
    charts += [device_memory_chart(sizing)] if sizing is not None else []
    return charts + ([roofline_chart(view.time)] if view.time is not None and view.time.has_roofline else [])


def cost_metric(rows: Sequence[LayerRow]) -> str:
    """MACs, unless the model does no counted dot-product work at all: then module FLOPs, so the charts have shape."""
    for name in ("macs", "module_flops"):
        if any((amount_of(row.own.get(name)) or Amount()).known > 0 for row in rows):
            return name
    return "macs"


def by_type_chart(view: ReportView, calls: Sequence[LayerRow], metric: str) -> tuple[Chart, Painter]:
    unit = METRIC_NAMES[metric]
    cost, params = _type_sums(view, calls, metric)
    cost_items = ranked([(name, total_of(parts)) for name, parts in cost.items()])
    param_items = ranked([(name, parameter_amount(count)) for name, count in params.items() if count])
    whole_cost = total_of([amount for _, amount in cost_items])
    whole_params = parameter_amount(sum(amount.known for _, amount in param_items))
    notes = _by_type_notes(view, cost, cost_items, whole_params, unit)
    rows = [(name, str(len(cost[name])), amount.text, share_text(amount, whole_cost),
             format_parameters(params.get(name, 0)), share_text(Amount(params.get(name, 0)), whole_params))
            for name, amount in cost_items]
    rows += [(name, "0", "—", "—", format_parameters(int(amount.known)), share_text(amount, whole_params))
             for name, amount in param_items if name not in cost]
    summary = (f"{unit} ({whole_cost.text} in {counted(len(calls), 'call')}) and parameters "
               f"({format_parameters(int(whole_params.known))}) summed per layer type over the calls that carry "
               "estimates." + covered_sentence(view.layers, metric))
    chart = Chart("by-type", f"{unit} and parameters by layer type", summary,
                  ("Layer type", "Calls", unit, f"Share of counted {unit}", "Parameters", "Share of parameters"),
                  rows[:TABLE_ROWS], notes)
    panels = ((top_with_other(cost_items, TOP_TYPES, PALETTE[0]),
               f"{unit} by layer type (total {whole_cost.text})", "no estimates"),
              (top_with_other(param_items, TOP_TYPES, PALETTE[2]),
               f"Parameters by layer type (total {format_parameters(int(whole_params.known))})", "no parameters"))
    return chart, lambda: paint_by_type(panels, notes)


def _type_sums(view: ReportView, calls: Sequence[LayerRow], metric: str) -> tuple[dict[str, list[Amount]],
                                                                                  dict[str, int]]:
    """Per layer type: the amounts of its calls' own estimates, and its modules' parameters (once per module)."""
    cost: dict[str, list[Amount]] = {}
    for row in calls:
        cost.setdefault(row.type_name, []).append(amount_of(row.own[metric]) or Amount())
    params: dict[str, int] = {}
    for row in view.layers:
        if row.call_index == 0:  # a module's parameters belong to it once, however often it is called
            params[row.type_name] = params.get(row.type_name, 0) + row.own_parameters
    return cost, params


def _by_type_notes(view: ReportView, cost: dict[str, list[Amount]], cost_items: Sequence[tuple[str, Amount]],
                   whole_params: Amount, unit: str) -> list[str]:
    notes = []
    missing = [name for name, amount in cost_items if not amount.drawn]
    if missing:
        notes.append(f"n/a (not drawn, never zero): {unit} of " + ", ".join(
            f"{name} ({counted(len(cost[name]), 'call')})" for name in missing[:6])
            + (" …" if len(missing) > 6 else "") + ".")
    total_params = next((row.cell.sort for row in view.totals if row.label == "Parameters"), None) or 0
    if int(total_params) > whole_params.known:
        notes.append(f"{format_parameters(int(total_params - whole_params.known))} parameters are held by modules "
                     "that were never called themselves (their parent uses them directly): not drawn by type.")
    return notes


def paint_by_type(panels: Sequence[tuple[list[Bar], str, str]], notes: Sequence[str]) -> Canvas:
    """Two rankings side by side: the cost and the parameters of each layer type."""
    count = max(max(len(bars) for bars, _, _ in panels), 1)
    legend = partial_legend(panels[0][0])
    canvas = Canvas(WIDTH, ranking_height(count, notes) + (14 if legend else 0))
    canvas.legend(legend, x=6, y=canvas.height - 30)
    half = (WIDTH - 24) / 2
    for index, (bars, title, empty) in enumerate(panels):
        start = index * (half + 24)
        axes = ranking_axes(canvas, bars, notes, count, start, start + half - 46)
        canvas.text(start + 6, canvas.height - 14, title, size=FONT + 1, weight="bold", baseline="auto")
        paint_ranking(canvas, axes, bars, empty=empty, rows=count)
    canvas.footnote(notes)
    return canvas


@dataclass(frozen=True)
class Stage:
    """Consecutive calls under one module (a ResNet stage, a Transformer block): a band of the profile."""

    label: str
    start: int
    stop: int


def profile_chart(view: ReportView, calls: Sequence[LayerRow], metric: str, colours: dict[str, str]
                  ) -> tuple[Chart, Painter]:
    unit = METRIC_NAMES[metric]
    amounts = [amount_of(row.own[metric]) or Amount() for row in calls]
    size = max(1, math.ceil(len(calls) / PROFILE_BARS))
    starts = range(0, len(calls), size)
    bins = [total_of(amounts[start:start + size]) for start in starts]
    bin_colours = [dominant_colour(calls[start:start + size], amounts[start:start + size], colours)
                   for start in starts]
    stages = stage_runs(view.layers, calls)
    whole = total_of(amounts)
    stage_rows = [(stage.label, f"{stage.start + 1}–{stage.stop}", part.text, share_text(part, whole))
                  for stage in stages[:TABLE_ROWS] for part in [total_of(amounts[stage.start:stage.stop])]]
    notes = _profile_notes(amounts, unit)
    summary = (f"{unit} of each of the {counted(len(calls), 'call')} with an estimate, in execution order"
               f"{f', summed over {size} consecutive calls per bar' if size > 1 else ''}"
               f"{'; bands mark the stages' if len(stages) > 1 else ''}."
               + peak_sentence(calls, amounts, bins, size, unit) + covered_sentence(view.layers, metric))
    chart = Chart("profile", f"{unit} along execution order", summary,
                  ("Stage", "Calls (positions)", unit, f"Share of counted {unit}"), stage_rows, notes)
    return chart, lambda: paint_profile_chart(unit, bins, bin_colours, colours, size, stages, notes)


def _profile_notes(amounts: Sequence[Amount], unit: str) -> list[str]:
    missing = sum(1 for amount in amounts if not amount.drawn)
    notes = [f"n/a (not drawn, never zero): {counted(missing, 'call')} without a known {unit} estimate, marked ×."
             ] if missing else []
    bounded = sum(1 for amount in amounts if amount.status == "partial")
    if bounded:
        notes.append(f"Lower bound only (≥: hatched, marked ▲) for {counted(bounded, 'call')}.")
    return notes


def paint_profile_chart(unit: str, bins: Sequence[Amount], bin_colours: Sequence[str], colours: dict[str, str],
                        size: int, stages: Sequence[Stage], notes: Sequence[str]) -> Canvas:
    canvas = Canvas(WIDTH, 232 + (13 if notes else 0))
    axes = canvas.axes(52, 62 + (13 if notes else 0), WIDTH - 64, 130)
    canvas.title(f"{unit} along execution order")
    paint_profile(canvas, axes, bins, bin_colours, size, stages)
    legend = [("fill", colour, shorten(name, 22)) for name, colour in colours.items()]
    for kind, colour, label, present in (
            ("fill", NEUTRAL, "other types", any(colour == NEUTRAL and amount.known > 0
                                                 for colour, amount in zip(bin_colours, bins, strict=True))),
            ("triangle", INK, "≥ lower bound", any(amount.status == "partial" for amount in bins)),
            ("cross", UNAVAILABLE, "n/a (not drawn)", any(not amount.drawn for amount in bins))):
        if present:
            legend.append((kind, colour, label))
    canvas.legend(legend, x=52, y=canvas.height - 30)
    canvas.footnote(notes)
    return canvas


def peak_sentence(calls: Sequence[LayerRow], amounts: Sequence[Amount], bins: Sequence[Amount], size: int, unit: str
                  ) -> str:
    """Where the largest bar is, named by its largest call (not by the first call of its group);
    ``amounts`` are the calls' own, ``bins`` their sums over ``size`` consecutive calls."""
    if not bins:
        return ""
    peak = max(range(len(bins)), key=lambda index: (bins[index].known, -index))
    if bins[peak].known <= 0:
        return ""
    if size == 1:
        return f" The largest bar is {bins[peak].text} {unit} at call {peak + 1}, {calls[peak].label}."
    start, stop = peak * size, min(len(calls), (peak + 1) * size)
    largest = max(range(start, stop), key=lambda index: (amounts[index].known, -index))
    return (f" The largest bar is {bins[peak].text} {unit} at calls {start + 1}–{stop}; its largest call is "
            f"{calls[largest].label} ({amounts[largest].text}).")


def stage_runs(layers: Sequence[LayerRow], calls: Sequence[LayerRow]) -> list[Stage]:
    """Consecutive calls grouped under one ancestor, at the shallowest depth that splits the model into several
    comparable stages (the largest under 60% of the calls); a call above that depth is its own stage."""
    first: list[Stage] = []
    for depth in range(1, 5):
        runs = _runs_at(layers, calls, depth)
        first = first or runs
        if len(runs) >= 3 and max(run.stop - run.start for run in runs) <= 0.6 * len(calls):
            return runs
    return first


def _runs_at(layers: Sequence[LayerRow], calls: Sequence[LayerRow], depth: int) -> list[Stage]:
    runs: list[Stage] = []
    for position, row in enumerate(calls):
        owner = row
        while owner.depth > depth and owner.parent is not None:
            owner = layers[owner.parent]
        label = _stage_label(owner.path)
        if runs and runs[-1].label == label and runs[-1].stop == position:
            runs[-1] = Stage(label, runs[-1].start, position + 1)
        else:
            runs.append(Stage(label, position, position + 1))
    return runs


def _stage_label(path: str) -> str:
    """``transformer.h.3`` -> ``h.3``; ``layer2`` -> ``layer2``; the root reads ``(root)``."""
    parts = path.split(".") if path else ["(root)"]
    return ".".join(parts[-2:]) if parts[-1].isdigit() and len(parts) > 1 else parts[-1]


def top_with_other(items: Sequence[tuple[str, Amount]], count: int, colour: str) -> list[Bar]:
    """The first ``count`` drawable layer types as bars, the rest summed into one "other" bar."""
    drawn = [(name, amount) for name, amount in items if amount.status == "partial" or amount.known > 0]
    bars = [Bar(shorten(name, 30), amount, colour) for name, amount in drawn[:count]]
    rest = drawn[count:]
    if rest:
        bars.append(Bar(f"other ({len(rest):,} types)", total_of([amount for _, amount in rest]), NEUTRAL))
    return bars


def type_colours(items: Sequence[tuple[str, Amount]], count: int = 6) -> dict[str, str]:
    """The costliest layer types get the palette's colours, in that order; the others share the neutral one."""
    sums: dict[str, float] = {}
    for name, amount in items:
        sums[name] = sums.get(name, 0.0) + amount.known
    order = sorted((name for name, total in sums.items() if total > 0), key=lambda name: (-sums[name], name))
    return {name: PALETTE[index] for index, name in enumerate(order[:count])}


def dominant_colour(rows: Sequence[LayerRow], amounts: Sequence[Amount], colours: dict[str, str]) -> str:
    best = max(range(len(rows)), key=lambda index: (amounts[index].known, -index))
    return colours.get(rows[best].type_name, NEUTRAL)


def paint_profile(canvas: Canvas, axes: Axes, bins: Sequence[Amount], colours: Sequence[str], size: int,
                  stages: Sequence[Stage]) -> None:
    """One bar per call (or per group of consecutive calls); lower bounds hatched with a ▲, n/a marked ×."""
    count = max(len(bins), 1)
    top = max((amount.known for amount in bins), default=0.0) or 1.0
    axes.set_xlim(0, count)
    axes.set_ylim(0, top * 1.1)
    stage_bands(canvas, axes, stages, size)
    width = 1.0 if size > 1 or count > 60 else 0.8
    spans = [(index + (1 - width) / 2, index + (1 + width) / 2, 0.0, amount.known)
             for index, amount in enumerate(bins)]
    add_boxes(canvas, axes, spans, colours, [amount.status for amount in bins], narrowest=5.0)
    _profile_marks(axes, bins)
    value_grid(canvas, axes, "y", 0, top * 1.1)
    canvas.text(1, 0, "layer calls in execution order" + (f" ({size} calls per bar)" if size > 1 else "") + " →",
                axes.transAxes, dy=-48, anchor="end", size=FONT - 0.5)


def _profile_marks(axes: Axes, bins: Sequence[Amount]) -> None:
    """A ▲ on each lower bound (a bound of zero has no height to hatch) and a × at each n/a bar."""
    partial = [index for index, amount in enumerate(bins) if amount.status == "partial"]
    if partial:
        axes.scatter([index + 0.5 for index in partial], [bins[index].known for index in partial], marker="^", s=20,
                     color=INK, linewidths=0, zorder=3, clip_on=False)
    missing = [index for index, amount in enumerate(bins) if not amount.drawn]
    if missing:
        axes.scatter([index + 0.5 for index in missing], [0.0] * len(missing), marker="x", s=14, color=UNAVAILABLE,
                     linewidths=1.0, zorder=3, clip_on=False)


def stage_bands(canvas: Canvas, axes: Axes, stages: Sequence[Stage], size: int) -> None:
    """Every other stage shaded; stages with room for it are named under the axis."""
    if len(stages) < 2:
        return
    span = stages[-1].stop / size
    last = -math.inf
    for index, stage in enumerate(stages):
        start, stop = stage.start / size, stage.stop / size
        if index % 2:
            axes.axvspan(start, stop, color=INK, alpha=0.07, linewidth=0, zorder=0, clip_on=False)
        middle = (start + stop) / 2
        if middle - last >= span / 36:
            canvas.text(middle, 0, shorten(stage.label, 16), axes.get_xaxis_transform(), dx=2, dy=-5, anchor="end",
                        baseline="hanging", rotate=-40, size=FONT - 1)
            last = middle
