"""The most expensive layer calls of a report, with the inside of subtree owners opened up.

A subtree owner (a native Transformer stack, say) is one call whose estimate covers every call inside it. When its
handler reported a breakdown, the chart draws one bar per block of that breakdown (``blocks.layers.3``) instead,
split into attention, feed-forward and the rest, so that a GPT-2's top calls show attention against MLP per block.
The blocks add up to the owner's estimate, which is not drawn again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .amounts import Amount, amount_of, counted, share_text, shorten, total_of
from .bar_plots import Bar, ranking_canvas
from .chart import Chart, Painter
from .style import METRIC_NAMES, NEUTRAL, PALETTE

if TYPE_CHECKING:
    from ....views import LayerRow, PartRow, ReportView

TOP_CALLS = 15
#: What a part of a breakdown is, by the words of its name, in drawing order, with its colour.
PART_KINDS = (("attention", "attention", PALETTE[4]), ("feed-forward", "feed-forward", PALETTE[6]),
              ("", "norms and residuals", PALETTE[5]))
PART_COLOURS = {kind: colour for _, kind, colour in PART_KINDS}


@dataclass(frozen=True)
class CallItem:
    """One bar: a layer call, or one block of an owner's breakdown (its parts summed by kind in ``segments``)."""

    label: str
    type_name: str
    amount: Amount
    order: tuple[int, int]
    colour_key: str
    segments: tuple[tuple[str, Amount], ...] = ()

    @property
    def of_which(self) -> str:
        return ", ".join(f"{kind} {amount.text}" for kind, amount in self.segments) or "—"


def call_items(view: ReportView, calls: Sequence[LayerRow], metric: str) -> list[CallItem]:
    """Every call's own estimate; an owner with a breakdown of ``metric`` gives its blocks instead."""
    types = {row.path: row.type_name for row in view.layers if row.call_index == 0}
    items = []
    for row in calls:
        blocks = breakdown_items(row, metric, types)
        items += blocks or [CallItem(row.label, row.type_name, amount_of(row.own[metric]) or Amount(), (row.index, 0),
                                     row.type_name)]
    return items


def breakdown_items(row: LayerRow, metric: str, types: dict[str, str]) -> list[CallItem]:
    """The owner's parts grouped by the module they belong to, in the owner's order."""
    groups: dict[str, list[PartRow]] = {}
    for part in row.parts:
        if metric in part.cells:
            groups.setdefault(part.path, []).append(part)
    items = []
    for position, (path, parts) in enumerate(groups.items()):
        by_kind: dict[str, list[Amount]] = {}
        for part in parts:
            kind = next(name for words, name, _ in PART_KINDS if words in part.part)
            by_kind.setdefault(kind, []).append(amount_of(part.cells[metric]) or Amount())
        segments = tuple((kind, total_of(by_kind[kind])) for _, kind, _ in PART_KINDS if kind in by_kind)
        label = path if path != row.path else row.label
        items.append(CallItem(label, types.get(path, row.type_name), total_of([amount for _, amount in segments]),
                              (row.index, position + 1), row.type_name, segments))
    return items


def top_calls_chart(view: ReportView, calls: Sequence[LayerRow], metric: str, colours: dict[str, str]
                    ) -> tuple[Chart, Painter]:
    unit = METRIC_NAMES[metric]
    items = call_items(view, calls, metric)
    whole = total_of([item.amount for item in items])
    order = sorted(items, key=lambda item: (not item.amount.drawn, -item.amount.known, item.order))
    shown = [item for item in order if item.amount.drawn and item.amount.known > 0][:TOP_CALLS]
    bars = [Bar(shorten(f"{item.label} ({item.type_name})", 48), item.amount, colours.get(item.colour_key, NEUTRAL),
                segments=tuple((PART_COLOURS[kind], amount) for kind, amount in item.segments)) for item in shown]
    notes = _notes(items, order, shown)
    split = any(item.segments for item in shown)
    summary = (f"The top {counted(len(shown), 'layer call')} by their own {unit} estimates: together "
               f"{share_text(total_of([item.amount for item in shown]) if shown else Amount(), whole)} of the "
               f"{whole.text} counted." + covered_sentence(view.layers, metric)
               + (" A subtree owner's estimate is drawn by block, split into attention, feed-forward and the rest "
                  "(the parts its handler reported; together they are the owner's estimate)." if split else ""))
    rows = [(str(rank), item.label, item.type_name, item.amount.text, share_text(item.amount, whole), item.of_which)
            for rank, item in enumerate(shown, 1)]
    chart = Chart("top-calls", f"Layer calls with the most {unit}", summary,
                  ("Rank", "Layer call", "Type", unit, f"Share of counted {unit}", "Of which"), rows, notes)
    return chart, lambda: ranking_canvas(chart.title, bars, notes, f"no call has {unit}", _segment_legend(shown))


def _segment_legend(items: Sequence[CallItem]) -> list[tuple[str, str, str]]:
    kinds = {kind for item in items for kind, _ in item.segments}
    return [("fill", colour, kind) for _, kind, colour in PART_KINDS if kind in kinds]


def _notes(items: Sequence[CallItem], order: Sequence[CallItem], shown: Sequence[CallItem]) -> list[str]:
    notes = []
    missing = [item for item in items if not item.amount.drawn]
    if missing:
        notes.append(f"n/a (not drawn, never zero): {counted(len(missing), 'call')}, {_names(missing)}.")
    drawn = {item.order for item in shown}
    hidden = [item for item in order if item.amount.status == "partial" and item.order not in drawn]
    if hidden:
        notes.append(f"Lower bound only (≥) for {counted(len(hidden), 'call')} below the drawn bars, which could be "
                     f"larger: {_names(hidden)}.")
    return notes


def _names(items: Sequence[CallItem], limit: int = 6) -> str:
    return ", ".join(item.label for item in items[:limit]) + (" …" if len(items) > limit else "")


def covered_sentence(rows: Sequence[LayerRow], metric: str) -> str:
    """How many calls a subtree owner covers: their cost is inside the owner's bar, never drawn twice."""
    covered = sum(1 for row in rows if row.metrics.get(metric) is not None and row.metrics[metric].status == "covered")
    return (f" {counted(covered, 'call')} inside subtree owners are counted in their owner's estimate, not drawn "
            "again." if covered else "")
