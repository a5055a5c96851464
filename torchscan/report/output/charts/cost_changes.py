"""The chart of a diff: the layer calls whose cost changed most, as diverging bars; unknown changes marked ?."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ....views.formatting import format_count
from .amounts import counted, shorten
from .bar_plots import add_boxes, label_margin, ranking_bottom, ranking_height
from .canvas import Canvas
from .chart import TABLE_ROWS, Chart, Painter
from .measure import fit_text
from .style import DECREASE, FONT, INCREASE, INK, METRIC_NAMES, NEUTRAL, ROW, UNAVAILABLE, WIDTH
from .svg_output import draw

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from ...review.report_diff import DiffView, LayerDelta

TOP_DELTAS = 20
TOP_UNKNOWN_DELTAS = 5


def diff_charts(view: DiffView, drawn: bool = True) -> list[Chart]:
    """The layer calls whose MACs (or, when no MAC changed, module FLOPs) changed most, largest change first;
    ``drawn=False`` gives the text alternative alone (for Markdown meant for review comments)."""
    deltas = view.cost_deltas
    metric = "macs" if deltas.get("macs") or not deltas.get("module_flops") else "module_flops"
    chart, painter = delta_chart(list(deltas.get(metric, [])), metric)
    return [draw(chart, painter) if drawn else chart]


def delta_text(delta: LayerDelta) -> str:
    """``+1.2M``, ``−300``; an added lower bound reads ``≥+1.2M``, a removed one ``≤−1.2M``; else ``unknown`` (the
    same text in the table and beside the bar)."""
    if delta.status == "unavailable" or not delta.value:
        return "unknown"
    sign = "+" if delta.value > 0 else "−" if delta.value < 0 else ""
    bound = ("≥" if delta.value > 0 else "≤") if delta.status == "partial" else ""
    return f"{bound}{sign}{format_count(abs(delta.value))}"


def delta_chart(deltas: Sequence[LayerDelta], metric: str) -> tuple[Chart, Painter]:
    unit = METRIC_NAMES[metric]
    known, unknown = _split(deltas)
    shown, shown_unknown = known[:TOP_DELTAS], unknown[:TOP_UNKNOWN_DELTAS]
    notes = _delta_notes(known, unknown, shown, shown_unknown)
    rows = [(delta.label, delta.type_name, delta.change, delta.before.text or "—", delta.after.text or "—",
             delta_text(delta), delta.percent or "—") for delta in [*known, *unknown][:TABLE_ROWS]]
    more = sum(1 for delta in known if (delta.value or 0) > 0)
    summary = (f"Per layer call, the change of its own {unit} estimate (after − before), largest first: {more:,} more "
               f"expensive, {len(known) - more:,} cheaper, {len(unknown):,} unknown. Added calls count from nothing, "
               "removed ones down to nothing.") if deltas else f"No layer call's {unit} estimate changed."
    chart = Chart("layer-deltas", f"Largest per-layer {unit} changes", summary,
                  ("Layer call", "Type", "Change", "Before", "After", "Delta", "%"), rows, notes)
    return chart, lambda: paint_delta_chart(unit, shown, shown_unknown, notes)


def _split(deltas: Sequence[LayerDelta]) -> tuple[list[LayerDelta], list[LayerDelta]]:
    """Known deltas, largest first, and unknown ones (a lower bound of zero says nothing about the size of the
    change: unknown as well)."""
    known = sorted((delta for delta in deltas if delta.status != "unavailable" and delta.value),
                   key=lambda delta: (-abs(delta.value or 0), delta.label))
    unknown = [delta for delta in deltas
               if delta.status == "unavailable" or (delta.status == "partial" and not delta.value)]
    return known, unknown


def _delta_notes(known: Sequence[LayerDelta], unknown: Sequence[LayerDelta], shown: Sequence[LayerDelta],
                 shown_unknown: Sequence[LayerDelta]) -> list[str]:
    notes = []
    if len(known) > len(shown):
        notes.append(f"{len(known) - len(shown):,} smaller changes are not drawn (see the table).")
    if unknown:
        hidden = len(unknown) - len(shown_unknown)
        notes.append(f"Unknown deltas (a side is partial or unavailable) are marked ?, never drawn as 0: "
                     f"{counted(len(unknown), 'call')}" + (f", {hidden} of them not drawn" if hidden else "") + ".")
    return notes


def paint_delta_chart(unit: str, shown: Sequence[LayerDelta], shown_unknown: Sequence[LayerDelta],
                      notes: Sequence[str]) -> Canvas:
    count = max(len(shown) + len(shown_unknown), 1)
    labels = [delta_label(delta) for delta in [*shown, *shown_unknown]]
    canvas = Canvas(WIDTH, ranking_height(count, notes))
    left = label_margin(labels)
    labels = [fit_text(label, left - 7, FONT) for label in labels]  # a label longer than the margin's limit
    axes = canvas.axes(left, ranking_bottom(notes), WIDTH - 16 - left, count * ROW)
    canvas.title(f"Largest per-layer {unit} changes (after − before)")
    paint_deltas(canvas, axes, shown, shown_unknown, labels)
    canvas.footnote(notes)
    canvas.legend([item for item, present in (
        (("fill", INCREASE, "more expensive"), any((delta.value or 0) > 0 for delta in shown)),
        (("fill", DECREASE, "cheaper"), any((delta.value or 0) < 0 for delta in shown)),
        (("hatch", NEUTRAL, "≥ lower bound"), any(delta.status == "partial" for delta in shown)),
        (("question", UNAVAILABLE, "unknown"), bool(shown_unknown))) if present])
    return canvas


def delta_label(delta: LayerDelta) -> str:
    tag = "" if delta.change == "changed" else f" [{delta.change}]"
    return shorten(f"{delta.label} ({delta.type_name})", 44) + tag


def paint_deltas(canvas: Canvas, axes: Axes, shown: Sequence[LayerDelta], unknown: Sequence[LayerDelta],
                 labels: Sequence[str]) -> None:
    """Diverging bars from zero, more expensive to the right; an unknown delta is a ?, never a zero-length bar."""
    axes.spines["bottom"].set_visible(False)
    axes.spines["left"].set_visible(False)
    if not shown and not unknown:
        canvas.text(0.5, 0.5, "no per-layer change", axes.transAxes, anchor="middle")
        return
    values = [delta.value or 0.0 for delta in shown]
    _delta_limits(axes, values, len(shown) + len(unknown))
    _delta_bars(canvas, axes, shown, values)
    _unknown_marks(canvas, axes, unknown, len(shown))
    for position, label in enumerate(labels):
        canvas.text(0, position, label, axes.get_yaxis_transform(), dx=-5, anchor="end")


def _delta_bars(canvas: Canvas, axes: Axes, shown: Sequence[LayerDelta], values: Sequence[float]) -> None:
    add_boxes(canvas, axes, [(min(0.0, value), max(0.0, value), position - 0.36, position + 0.36)
                             for position, value in enumerate(values)],
              [INCREASE if value > 0 else DECREASE for value in values], [delta.status for delta in shown])
    for position, (delta, value) in enumerate(zip(shown, values, strict=True)):
        canvas.text(value, position, delta_text(delta), axes.transData, dx=3 if value > 0 else -3,
                    anchor="start" if value > 0 else "end", size=FONT - 0.5, number=True)


def _unknown_marks(canvas: Canvas, axes: Axes, unknown: Sequence[LayerDelta], first: int) -> None:
    """A ? at zero for each unknown delta, with what is known of its two sides."""
    for position, delta in enumerate(unknown, first):
        canvas.text(0, position, "?", axes.transData, anchor="middle", colour=UNAVAILABLE, size=FONT + 1,
                    weight="bold")
        canvas.text(0, position, f"unknown: {delta.before.text or 'none'} → {delta.after.text or 'none'}",
                    axes.transData, dx=8, colour=UNAVAILABLE, size=FONT - 0.5)


def _delta_limits(axes: Axes, values: Sequence[float], count: int) -> None:
    """Room on both sides of zero for the bars and their labels, and one row per delta."""
    low, high = min([0.0, *values]), max([0.0, *values])
    span = (high - low) or 1.0
    axes.set_xlim(low - 0.28 * span if low < 0 else -0.06 * span, high + 0.28 * span if high > 0 else 0.06 * span)
    axes.set_ylim(count - 0.5, -0.5)
    axes.axvline(0, color=INK, linewidth=0.7, clip_on=False)
