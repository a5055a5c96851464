"""The memory charts of a report: what is live at the peak, one stacked bar per peak (the forward's and, when the
report has one, the training step's steady state, then its first step where that peaks otherwise), each segment a
category (parameters, activations, gradients, ...); and the layer calls with the largest outputs and those that saved
the most for backward, as rankings.

Drawn from `torchscan.views.memory.MemoryView`, the rows of the page's memory tables, with bytes written as every
view writes them (``1.2MB``, decimal prefixes).
"""

from __future__ import annotations

from dataclasses import replace

from ....views.memory import MemoryCall, MemoryPart, MemoryView
from .amounts import Amount, amount_of, bytes_amount, counted, shorten, total_of
from .bar_plots import Bar, label_margin, paint_ranking, partial_legend, ranking_bottom, ranking_canvas
from .canvas import Canvas
from .chart import Chart
from .style import NEUTRAL, PALETTE, ROW, WIDTH
from .svg_output import draw

#: One colour per category, the same in both bars (parameters and inputs are the same tensors in both).
CATEGORY_COLOURS = {"parameters": PALETTE[0], "buffers": PALETTE[5], "inputs": NEUTRAL, "activations": PALETTE[1],
                    "gradients": PALETTE[4], "optimizer_state": PALETTE[3], "saved_activations": PALETTE[2],
                    "temporaries": PALETTE[6], "autocast_weight_copies": PALETTE[7]}
#: Legend entries per row (the legend wraps under the title).
LEGEND_ROW = 4
MEMORY_CHART_KEY = "memory"
#: The keys of the call rankings: the page shows each in place of its table.
OUTPUTS_CHART_KEY, SAVED_CHART_KEY = "memory-outputs", "memory-saved"


def memory_charts(memory: MemoryView) -> list[Chart]:
    """The peaks' breakdown, then the rankings of the calls with the largest outputs and saved activations."""
    charts = [memory_chart(memory)]
    if memory.forward is not None and memory.forward.top_outputs:
        charts.append(calls_chart(OUTPUTS_CHART_KEY, "Layer calls with the largest outputs",
                                  "the bytes of the tensors each call returned", memory.forward.top_outputs))
    if memory.training is not None and memory.training.top_saved:
        charts.append(calls_chart(SAVED_CHART_KEY, "Layer calls that saved the most for backward",
                                  "the bytes of the activations each call saved for backward, shared storages once",
                                  memory.training.top_saved))
    return charts


def calls_chart(key: str, title: str, what: str, calls: list[MemoryCall]) -> Chart:
    """A ranking of ``calls`` by their bytes (the view already ranked them), the numbers as its table."""
    bars = [Bar(shorten(f"{call.label} ({call.type})", 48), replace(amount_of(call.bytes) or Amount(), unit="B"),
                PALETTE[2] if key == SAVED_CHART_KEY else PALETTE[1]) for call in calls]
    summary = f"The top {counted(len(calls), 'layer call')} by {what}."
    chart = Chart(key, title, summary, ("Rank", "Layer call", "Type", "Bytes"),
                  [(str(rank), call.label, call.type, call.bytes.text) for rank, call in enumerate(calls, 1)])
    return draw(chart, lambda: ranking_canvas(title, bars, [], "no call"))


def memory_chart(memory: MemoryView) -> Chart:
    """The peaks as stacked bars of their categories, with the categories' bytes and shares as the numbers."""
    peaks = [] if memory.forward is None else [("Forward peak", memory.forward.parts)]
    if memory.training is not None:
        peaks.append((memory.training.bar_label, memory.training.parts))
        first = memory.training.first_step
        if first is not None and first.traced:
            peaks.append((first.bar_label, first.parts))
    bars = [stacked_bar(label, parts) for label, parts in peaks]
    rows = [(label, part.label, part.bytes.text, part.share) for label, parts in peaks for part in parts]
    notes = [f"n/a (not drawn, never zero): {part.label} at the {label.lower()}" for label, parts in peaks
             for part in parts if (amount_of(part.bytes) or Amount()).status == "unavailable"]
    chart = Chart(MEMORY_CHART_KEY, "Memory at the peak", memory_summary(memory),
                  ("Peak", "Category", "Bytes", "Share of the peak"), rows, notes)
    return draw(chart, lambda: paint_memory(bars, legend_items(peaks), notes))


def memory_summary(memory: MemoryView) -> str:
    """The caption: each peak, where it is, and the definition of the bytes; a first training step without a figure
    says why in a sentence of its own."""
    phrases = peak_phrases(memory)
    listed = phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + " and " + phrases[-1]
    caption = ("All live tensor bytes " + listed + ", by category: traced tensor bytes, without the allocator's "
               "caching or kernel workspaces.")
    first = None if memory.training is None else memory.training.first_step
    if first is not None and not first.traced:
        caption += f" The first step's peak is n/a ({first.note})."
    return caption


def peak_phrases(memory: MemoryView) -> list[str]:
    """``at the forward's peak (12kB, at layer call 0, operator aten.addmm (operator #3))``, one per drawn peak."""
    phrases = []
    forward = memory.forward
    if forward is not None:
        phrases.append(f"at the forward's peak ({forward.peak.text}, at {forward.peak_layer}, operator "
                       f"{forward.peak_operator})")
    step = memory.training
    if step is not None:
        held = f"{step.resident_words} resident from its start" if step.resident else "nothing left by a previous step"
        phrases.append(f"at the training step's peak, {step.step} ({step.peak.text}, in the {step.phase}, operator "
                       f"{step.operator}; {held})")
        first = step.first_step
        if first is not None and first.traced:
            phrases.append(f"at the first step's peak ({first.peak.text}, in the {first.phase}, operator "
                           f"{first.operator}; the optimizer creates its state)")
    return phrases


def stacked_bar(label: str, parts: list[MemoryPart]) -> Bar:
    """One peak: its categories end to end (an unknown category adds nothing drawn and makes the total a bound)."""
    amounts = [(part.key, bytes_amount(part.bytes)) for part in parts]
    segments = tuple((CATEGORY_COLOURS.get(key, NEUTRAL), amount) for key, amount in amounts if amount.drawn)
    return Bar(label, replace(total_of([amount for _, amount in amounts]), unit="B"), PALETTE[0], segments=segments)


def legend_items(peaks: list[tuple[str, list[MemoryPart]]]) -> list[tuple[str, str, str]]:
    """Each category that some peak's bar draws, once, in the order the bars show them: one of zero (or unknown)
    bytes at every peak (a model without buffers) keeps its row in the numbers, not a legend entry."""
    seen: dict[str, str] = {}
    for _, parts in peaks:
        for part in parts:
            amount = bytes_amount(part.bytes)
            if amount.drawn and amount.known > 0:
                seen.setdefault(part.key, part.label)
    return [("fill", CATEGORY_COLOURS.get(key, NEUTRAL), label) for key, label in seen.items()]


def paint_memory(bars: list[Bar], legend: list[tuple[str, str, str]], notes: list[str]) -> Canvas:
    """The stacked bars under the title and a legend wrapped in rows of `LEGEND_ROW` entries."""
    legend = legend + partial_legend(bars)
    lines = [legend[start:start + LEGEND_ROW] for start in range(0, len(legend), LEGEND_ROW)]
    bottom = ranking_bottom(notes)
    height = bottom + len(bars) * ROW * 1.6 + 30.0 + 14.0 * len(lines)
    canvas = Canvas(WIDTH, height)
    left = label_margin([bar.label for bar in bars])
    axes = canvas.axes(left, bottom, WIDTH - 70 - left, len(bars) * ROW * 1.6)
    canvas.title("Memory at the peak")
    paint_ranking(canvas, axes, bars, empty="no peak")
    for index, line in enumerate(lines):
        canvas.legend(line, x=left, y=height - 32 - 14 * index)
    canvas.footnote(notes)
    return canvas
