"""Static charts of where the cost goes, drawn from the view objects the templates use, as inline SVG strings.

Per report: cost and parameters by layer type, the most expensive layer calls, and the cost profile along execution
order. Per catalog: parameters against MACs for every model, and MACs per model. Per diff: the layer calls whose
cost changed most. The tables' honesty rules hold in the pictures too: a lower bound is drawn hatched and labelled
``≥``, an unavailable value is never drawn as zero (it is marked and listed as n/a), and a subtree owner's estimate is
drawn at the owner while the calls it covers are skipped, so nothing is counted twice.

matplotlib draws the shapes through its object API (``matplotlib.figure.Figure``, no pyplot state) and its SVG
backend, with fixed sizes, a fixed hash salt and no metadata dates. Text is not laid out by matplotlib: labels are
written into the SVG as ``<text>`` with ``text-anchor`` and ``dominant-baseline`` doing the alignment, which keeps
a chart set fast (matplotlib's text layout dominates its drawing time) and lets the labels use the page's font. The
SVG is then made fit for inline use: text and axes in ``currentColor`` (the page's light or dark text colour), a
transparent background, ids unique per chart, a ``<title>`` and ``role="img"``, no scripts and no external
references. Every chart also carries a text alternative (a caption and its numbers as a table), which is all that
remains when matplotlib is not installed.
"""

from __future__ import annotations

import hashlib
import html
import io
import math
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..formatting import format_count

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from .catalog import CatalogView, EntrySummary, RunSummary
    from .diff_view import DiffView, LayerDelta
    from .views import Cell, LayerRow, ReportView

#: Text, axes and ticks are drawn in this colour and rewritten to ``currentColor`` afterwards.
INK = "#0a0b0c"
#: Mid-tone colours that read on a white and on a near-black page alike.
PALETTE = ("#4e8ff7", "#f28e2b", "#3aa65a", "#e05d6f", "#9c6ade", "#1fa9b8", "#c9a227", "#d46fb5")
NEUTRAL = "#8c959f"
INCREASE = "#e8702a"
DECREASE = "#4e8ff7"
UNAVAILABLE = "#e5534b"
METRIC_NAMES = {"macs": "MACs", "module_flops": "FLOPs", "dmas": "DMAs"}
TOP_TYPES = 10  # bars of a by-type ranking before the rest is summed as "other"
TOP_CALLS = 15
TOP_DELTAS = 20
TOP_UNKNOWN_DELTAS = 5
PROFILE_BARS = 200  # the profile's largest number of bars: more calls are summed per bar
CATALOG_BARS = 80
TABLE_ROWS = 60  # rows of a text alternative
WIDTH = 612.0  # points (8.5 in); every chart has this width, heights follow the number of rows
FONT = 8.5
ROW = 15.0  # points per bar of a ranking
#: A fixed salt for the ids matplotlib derives from hashes (marker definitions): the same bytes every build.
SVG_RC = {"svg.hashsalt": "torchscan", "svg.fonttype": "none", "svg.id": None}
SVG_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}
MISSING_MATPLOTLIB = "Chart not drawn: matplotlib is not installed (pip install 'torchscan[site]')."


@dataclass(frozen=True)
class Amount:
    """A value to draw: ``known`` is exact (complete), a lower bound (partial), or nothing (unavailable)."""

    known: float = 0.0
    status: str = "complete"

    @property
    def drawn(self) -> bool:
        return self.status != "unavailable"

    @property
    def text(self) -> str:
        """As the tables write numbers (``1.81 G``, ``≥16``, ``n/a``)."""
        if self.status == "unavailable":
            return "n/a"
        return ("≥" if self.status == "partial" else "") + format_count(self.known)

    @property
    def short(self) -> str:
        """As a label beside a bar: three significant digits."""
        if self.status == "unavailable":
            return "n/a"
        return ("≥" if self.status == "partial" else "") + tick_text(self.known)


@dataclass(frozen=True)
class Bar:
    """One bar of a ranking: its label, amount, colour and a note written beside an n/a row."""

    label: str
    amount: Amount
    colour: str = PALETTE[0]
    note: str = ""


@dataclass
class Chart:
    """One chart: the SVG (empty when it could not be drawn) and its text alternative (summary, notes, table)."""

    key: str
    title: str
    summary: str
    headers: tuple[str, ...] = ()
    rows: list[tuple[str, ...]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    svg: str = ""

    @property
    def html(self) -> str:
        return figure_html(self)


Painter = Callable[[], "Canvas"]


# ---------------------------------------------------------------------------------------------------------------
# Amounts: a cell's status and number, and their sums


def amount_of(cell: Cell | None) -> Amount | None:
    """The drawable amount of a view cell; ``None`` when the cell holds no estimate (empty or covered)."""
    if cell is None or cell.status in ("empty", "covered"):
        return None
    if cell.status == "complete":
        return Amount(float(cell.sort or 0))
    if cell.status == "partial":
        return Amount(float(cell.sort or 0), "partial")
    return Amount(0.0, "unavailable")


def total_of(amounts: Sequence[Amount]) -> Amount:
    """The sum: exact when every part is, unavailable when no part is known, a lower bound otherwise."""
    known = sum(amount.known for amount in amounts)
    if all(amount.status == "complete" for amount in amounts):
        return Amount(known)
    if all(amount.status == "unavailable" for amount in amounts):
        return Amount(0.0, "unavailable")
    return Amount(known, "partial")


def share_text(part: Amount, whole: Amount) -> str:
    """The part's share of the counted whole; a lower-bound part reads as at least that share."""
    if not part.drawn or whole.known <= 0:
        return "—"
    return ("≥" if part.status == "partial" else "") + f"{100 * part.known / whole.known:.1f}%"


def ranked(items: Sequence[tuple[str, Amount]]) -> list[tuple[str, Amount]]:
    """Largest known amount first, unavailable ones last, ties by name (stable output)."""
    return sorted(items, key=lambda item: (not item[1].drawn, -item[1].known, item[0]))


def tick_text(value: float) -> str:
    """Compact numbers for axes and bar labels: ``0``, ``500``, ``1.5 M``, ``−2 G``, ``118 M``."""
    if value == 0:
        return "0"
    sign = "−" if value < 0 else ""
    magnitude = abs(value)
    for scale, suffix in ((1e12, " T"), (1e9, " G"), (1e6, " M"), (1e3, " k")):
        if magnitude >= scale:
            return f"{sign}{magnitude / scale:.3g}{suffix}"
    return f"{sign}{magnitude:.3g}"


def counted(number: int, word: str) -> str:
    """``1 call``, ``5 calls``."""
    return f"{number} {word}{'' if number == 1 else 's'}"


def shorten(text: str, limit: int) -> str:
    """Long labels keep their end, the informative part of a dotted path."""
    return text if len(text) <= limit else "…" + text[-(limit - 1):]


# ---------------------------------------------------------------------------------------------------------------
# Report charts


def report_charts(view: ReportView) -> list[Chart]:
    """Cost and parameters by layer type, the most expensive calls, and the profile along execution order."""
    metric = cost_metric(view.layers)
    calls = [row for row in view.layers if metric in row.own]
    return [draw(*by_type_chart(view, calls, metric)), draw(*top_calls_chart(view, calls, metric)),
            draw(*profile_chart(view, calls, metric))]


def cost_metric(rows: Sequence[LayerRow]) -> str:
    """MACs, unless the model does no counted dot-product work at all: then module FLOPs, so the charts have shape."""
    for name in ("macs", "module_flops"):
        if any((amount_of(row.own.get(name)) or Amount()).known > 0 for row in rows):
            return name
    return "macs"


def by_type_chart(view: ReportView, calls: Sequence[LayerRow], metric: str) -> tuple[Chart, Painter]:
    unit = METRIC_NAMES[metric]
    cost: dict[str, list[Amount]] = {}
    for row in calls:
        cost.setdefault(row.type_name, []).append(amount_of(row.own[metric]) or Amount())
    params: dict[str, int] = {}
    for row in view.layers:
        if row.call_index == 0:  # a module's parameters belong to it once, however often it is called
            params[row.type_name] = params.get(row.type_name, 0) + int(row.params.sort or 0)
    cost_items = ranked([(name, total_of(parts)) for name, parts in cost.items()])
    param_items = ranked([(name, Amount(count)) for name, count in params.items() if count])
    whole_cost = total_of([amount for _, amount in cost_items])
    whole_params = Amount(sum(amount.known for _, amount in param_items))
    notes = []
    missing = [name for name, amount in cost_items if not amount.drawn]
    if missing:
        notes.append(f"n/a (not drawn, never zero): {unit} of " + ", ".join(
            f"{name} ({counted(len(cost[name]), 'call')})" for name in missing[:6])
            + (" …" if len(missing) > 6 else "") + ".")
    total_params = next((row.cell.sort for row in view.totals if row.label == "Parameters"), None) or 0
    if int(total_params) > whole_params.known:
        notes.append(f"{format_count(int(total_params - whole_params.known))} parameters are held by modules that "
                     "were never called themselves (their parent uses them directly): not drawn by type.")
    rows = [(name, str(len(cost[name])), amount.text, share_text(amount, whole_cost),
             format_count(params.get(name, 0)), share_text(Amount(params.get(name, 0)), whole_params))
            for name, amount in cost_items]
    rows += [(name, "0", "—", "—", amount.text, share_text(amount, whole_params))
             for name, amount in param_items if name not in cost]
    summary = (f"{unit} ({whole_cost.text} in {counted(len(calls), 'call')}) and parameters ({whole_params.text}) "
               "summed per layer type over the calls that carry estimates." + covered_sentence(view.layers, metric))
    chart = Chart("by-type", f"{unit} and parameters by layer type", summary,
                  ("Layer type", "Calls", unit, f"Share of counted {unit}", "Parameters", "Share of parameters"),
                  rows[:TABLE_ROWS], notes)
    cost_bars = top_with_other(cost_items, TOP_TYPES, PALETTE[0], "types")
    param_bars = top_with_other(param_items, TOP_TYPES, PALETTE[2], "types")

    def paint() -> Canvas:
        count = max(len(cost_bars), len(param_bars), 1)
        legend = partial_legend(cost_bars)
        canvas = Canvas(WIDTH, ranking_height(count, notes) + (14 if legend else 0))
        canvas.legend(legend, x=6, y=canvas.height - 30)
        half = (WIDTH - 24) / 2
        for index, (bars, title) in enumerate(((cost_bars, f"{unit} by layer type (total {whole_cost.short})"),
                                               (param_bars, f"Parameters by layer type (total {whole_params.short})"))):
            left = index * (half + 24) + label_margin([bar.label for bar in bars])
            axes = canvas.axes(left, ranking_bottom(notes), index * (half + 24) + half - 46 - left, count * ROW)
            canvas.text(index * (half + 24) + 6, canvas.height - 14, title, size=FONT + 1, weight="bold",
                        baseline="auto")
            paint_ranking(canvas, axes, bars, empty="no estimates" if index == 0 else "no parameters", rows=count)
        canvas.footnote(notes)
        return canvas

    return chart, paint


def top_calls_chart(view: ReportView, calls: Sequence[LayerRow], metric: str) -> tuple[Chart, Painter]:
    unit = METRIC_NAMES[metric]
    items = [(row, amount_of(row.own[metric]) or Amount()) for row in calls]
    whole = total_of([amount for _, amount in items])
    order = sorted(items, key=lambda item: (not item[1].drawn, -item[1].known, item[0].index))
    shown = [(row, amount) for row, amount in order if amount.drawn and amount.known > 0][:TOP_CALLS]
    colours = type_colours([(row.type_name, amount) for row, amount in items])
    bars = [Bar(shorten(f"{row.label} ({row.type_name})", 48), amount, colours.get(row.type_name, NEUTRAL))
            for row, amount in shown]
    missing = [row for row, amount in items if not amount.drawn]
    notes = []
    if missing:
        notes.append(f"n/a (not drawn, never zero): {counted(len(missing), 'call')}, "
                     + ", ".join(row.label for row in missing[:6]) + (" …" if len(missing) > 6 else "") + ".")
    drawn_calls = {row.index for row, _ in shown}
    hidden = [row for row, amount in order if amount.status == "partial" and row.index not in drawn_calls]
    if hidden:
        notes.append(f"Lower bound only (≥) for {counted(len(hidden), 'call')} below the drawn bars, which could be "
                     "larger: " + ", ".join(row.label for row in hidden[:6]) + (" …" if len(hidden) > 6 else "") + ".")
    part = total_of([amount for _, amount in shown]) if shown else Amount()
    summary = (f"The top {counted(len(shown), 'layer call')} by their own {unit} estimates: together "
               f"{share_text(part, whole)} of the {whole.text} counted." + covered_sentence(view.layers, metric))
    rows = [(str(rank), row.label, row.type_name, amount.text, share_text(amount, whole))
            for rank, (row, amount) in enumerate(shown, 1)]
    chart = Chart("top-calls", f"Layer calls with the most {unit}", summary,
                  ("Rank", "Layer call", "Type", unit, f"Share of counted {unit}"), rows, notes)

    def paint() -> Canvas:
        count = max(len(bars), 1)
        canvas = Canvas(WIDTH, ranking_height(count, notes))
        left = label_margin([bar.label for bar in bars])
        axes = canvas.axes(left, ranking_bottom(notes), WIDTH - 60 - left, count * ROW)
        canvas.title(f"Layer calls with the most {unit}")
        paint_ranking(canvas, axes, bars, empty=f"no call has {unit}")
        canvas.footnote(notes)
        canvas.legend(partial_legend(bars))
        return canvas

    return chart, paint


def covered_sentence(rows: Sequence[LayerRow], metric: str) -> str:
    """How many calls a subtree owner covers: their cost is inside the owner's bar, never drawn twice."""
    covered = sum(1 for row in rows if row.metrics.get(metric) is not None and row.metrics[metric].status == "covered")
    return (f" {counted(covered, 'call')} inside subtree owners are counted in their owner's estimate, not drawn "
            "again." if covered else "")


def partial_legend(bars: Sequence[Bar]) -> list[tuple[str, str, str]]:
    return [("hatch", NEUTRAL, "≥ lower bound (partial)")] if any(bar.amount.status == "partial" for bar in bars) \
        else []


@dataclass(frozen=True)
class Stage:
    """Consecutive calls under one module (a ResNet stage, a Transformer block): a band of the profile."""

    label: str
    start: int
    stop: int


def profile_chart(view: ReportView, calls: Sequence[LayerRow], metric: str) -> tuple[Chart, Painter]:
    unit = METRIC_NAMES[metric]
    amounts = [amount_of(row.own[metric]) or Amount() for row in calls]
    size = max(1, math.ceil(len(calls) / PROFILE_BARS))
    starts = range(0, len(calls), size)
    bins = [total_of(amounts[start:start + size]) for start in starts]
    colours = type_colours([(row.type_name, amount) for row, amount in zip(calls, amounts)])
    bin_colours = [dominant_colour(calls[start:start + size], amounts[start:start + size], colours)
                   for start in starts]
    stages = stage_runs(view.layers, calls)
    whole = total_of(amounts)
    stage_rows = [(stage.label, f"{stage.start + 1}–{stage.stop}", part.text, share_text(part, whole))
                  for stage in stages[:TABLE_ROWS] for part in [total_of(amounts[stage.start:stage.stop])]]
    missing = sum(1 for amount in amounts if not amount.drawn)
    notes = [f"n/a (not drawn, never zero): {counted(missing, 'call')} without a known {unit} estimate, marked ×."
             ] if missing else []
    bounded = sum(1 for amount in amounts if amount.status == "partial")
    if bounded:
        notes.append(f"Lower bound only (≥: hatched, marked ▲) for {counted(bounded, 'call')}.")
    summary = (f"{unit} of each of the {counted(len(calls), 'call')} with an estimate, in execution order"
               f"{f', summed over {size} consecutive calls per bar' if size > 1 else ''}"
               f"{'; bands mark the stages' if len(stages) > 1 else ''}."
               + peak_sentence(calls, bins, size, unit) + covered_sentence(view.layers, metric))
    chart = Chart("profile", f"{unit} along execution order", summary,
                  ("Stage", "Calls (positions)", unit, f"Share of counted {unit}"), stage_rows, notes)

    def paint() -> Canvas:
        canvas = Canvas(WIDTH, 232 + (13 if notes else 0))
        axes = canvas.axes(52, 62 + (13 if notes else 0), WIDTH - 64, 130)
        canvas.title(f"{unit} along execution order")
        paint_profile(canvas, axes, bins, bin_colours, size, stages)
        legend = [("fill", colour, shorten(name, 22)) for name, colour in colours.items()]
        if any(colour == NEUTRAL and amount.known > 0 for colour, amount in zip(bin_colours, bins)):
            legend.append(("fill", NEUTRAL, "other types"))
        if any(amount.status == "partial" for amount in bins):
            legend.append(("triangle", INK, "≥ lower bound"))
        if any(not amount.drawn for amount in bins):
            legend.append(("cross", UNAVAILABLE, "n/a (not drawn)"))
        canvas.legend(legend, x=52, y=canvas.height - 30)
        canvas.footnote(notes)
        return canvas

    return chart, paint


def peak_sentence(calls: Sequence[LayerRow], bins: Sequence[Amount], size: int, unit: str) -> str:
    if not bins:
        return ""
    peak = max(range(len(bins)), key=lambda index: (bins[index].known, -index))
    if bins[peak].known <= 0:
        return ""
    first = calls[peak * size]
    where = f"calls {peak * size + 1}–{min(len(calls), (peak + 1) * size)}, from {first.label}" if size > 1 \
        else f"call {peak + 1}, {first.label}"
    return f" The largest bar is {bins[peak].text} {unit} at {where}."


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


def top_with_other(items: Sequence[tuple[str, Amount]], count: int, colour: str, what: str) -> list[Bar]:
    """The first ``count`` drawable items as bars, the rest summed into one "other" bar."""
    drawn = [(name, amount) for name, amount in items if amount.status == "partial" or amount.known > 0]
    bars = [Bar(shorten(name, 30), amount, colour) for name, amount in drawn[:count]]
    rest = drawn[count:]
    if rest:
        bars.append(Bar(f"other ({len(rest)} {what})", total_of([amount for _, amount in rest]), NEUTRAL))
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


# ---------------------------------------------------------------------------------------------------------------
# Catalog charts


def catalog_charts(view: CatalogView) -> list[Chart]:
    """Parameters against MACs for every model run (variants joined by a line), and MACs per model run."""
    runs = [(entry, run) for entry in view.entries for run in entry.runs]
    colours = {entry.name: PALETTE[index % len(PALETTE)] for index, entry in enumerate(view.entries)}
    return [draw(*scatter_chart(runs, colours)), draw(*macs_per_model_chart(runs, colours))]


def run_name(entry: EntrySummary, run: RunSummary) -> str:
    return entry.name + (f" · {run.run.variant}" if run.run.variant else "")


def scatter_chart(runs: Sequence[tuple[EntrySummary, RunSummary]], colours: dict[str, str]
                  ) -> tuple[Chart, Painter]:
    points: list[tuple[str, str, int, Amount]] = []
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
    notes = ["Not drawn: " + ", ".join(skipped) + "."] if skipped else []
    rows = [(name, format_count(params), macs.text) for _, name, params, macs in points]
    summary = (f"Each point is one model run, on logarithmic axes; the variants of one model share a colour and are "
               f"joined by a line; a hollow triangle marks a lower bound on MACs. {len(points)} of {len(runs)} "
               "runs drawn.")
    chart = Chart("params-vs-macs", "Parameters vs MACs", summary, ("Model", "Parameters", "MACs"), rows, notes)

    def paint() -> Canvas:
        canvas = Canvas(WIDTH, 330 + (13 if notes else 0))
        axes = canvas.axes(58, 40 + (13 if notes else 0), WIDTH - 160, 260)
        canvas.title("Parameters vs MACs (both axes logarithmic)")
        paint_scatter(canvas, axes, points, colours)
        if any(macs.status == "partial" for *_, macs in points):
            canvas.legend([("triangle-open", INK, "≥ lower bound (partial MACs)")])
        canvas.footnote(notes)
        return canvas

    return chart, paint


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
    notes = [f"Only the first {CATALOG_BARS} of {len(runs)} runs are drawn."] if len(runs) > CATALOG_BARS else []
    if any(not bar.amount.drawn for bar in bars):
        notes.append("n/a: MACs unavailable or the analysis failed (no bar, never zero).")
    summary = ("MACs (module view) of every model run on a logarithmic axis, the variants of one model side by "
               "side; a hatched bar is a lower bound.")
    chart = Chart("macs-per-model", "MACs per model", summary, ("Model", "MACs", "Status"), rows[:TABLE_ROWS * 4],
                  notes)

    def paint() -> Canvas:
        positions = group_positions(groups)
        span = (positions[-1] + 1) if positions else 1
        canvas = Canvas(WIDTH, ranking_height(span, notes))
        left = label_margin([bar.label for bar in bars])
        axes = canvas.axes(left, ranking_bottom(notes), WIDTH - 60 - left, span * ROW)
        canvas.title("MACs per model (logarithmic axis)")
        paint_ranking(canvas, axes, bars, empty="no model has MACs", log=True, positions=positions)
        canvas.footnote(notes)
        canvas.legend(partial_legend(bars))
        return canvas

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


# ---------------------------------------------------------------------------------------------------------------
# Diff charts


def diff_charts(view: DiffView, drawn: bool = True) -> list[Chart]:
    """The layer calls whose MACs (or, when no MAC changed, module FLOPs) changed most, largest change first;
    ``drawn=False`` gives the text alternative alone (for Markdown meant for review comments)."""
    deltas = view.cost_deltas
    metric = "macs" if deltas.get("macs") or not deltas.get("module_flops") else "module_flops"
    chart, painter = delta_chart(list(deltas.get(metric, [])), metric)
    return [draw(chart, painter) if drawn else chart]


def delta_text(delta: LayerDelta, short: bool = False) -> str:
    """``+1.20 M``, ``−300``; an added lower bound reads ``≥+1.20 M``, a removed one ``≤−1.20 M``; else ``unknown``.
    ``short``: three significant digits, as beside a bar."""
    if delta.status == "unavailable" or not delta.value:
        return "unknown"
    sign = "+" if delta.value > 0 else "−" if delta.value < 0 else ""
    bound = ("≥" if delta.value > 0 else "≤") if delta.status == "partial" else ""
    return f"{bound}{sign}{(tick_text if short else format_count)(abs(delta.value))}"


def delta_chart(deltas: Sequence[LayerDelta], metric: str) -> tuple[Chart, Painter]:
    unit = METRIC_NAMES[metric]
    known = sorted((delta for delta in deltas if delta.status != "unavailable" and delta.value),
                   key=lambda delta: (-abs(delta.value or 0), delta.label))
    # A lower bound of zero says nothing about the size of the change: unknown as well.
    unknown = [delta for delta in deltas if delta.status == "unavailable" or (delta.status == "partial"
                                                                              and not delta.value)]
    shown, shown_unknown = known[:TOP_DELTAS], unknown[:TOP_UNKNOWN_DELTAS]
    notes = []
    if len(known) > len(shown):
        notes.append(f"{len(known) - len(shown)} smaller changes are not drawn (see the table).")
    if unknown:
        notes.append(f"Unknown deltas (a side is partial or unavailable) are marked ?, never drawn as 0: "
                     f"{counted(len(unknown), 'call')}" + (f", {len(unknown) - len(shown_unknown)} of them not drawn"
                                                if len(unknown) > len(shown_unknown) else "") + ".")
    rows = [(delta.label, delta.type_name, delta.change, delta.before.text or "—", delta.after.text or "—",
             delta_text(delta)) for delta in [*known, *unknown][:TABLE_ROWS]]
    more = sum(1 for delta in known if (delta.value or 0) > 0)
    summary = (f"Per layer call, the change of its own {unit} estimate (after − before), largest first: {more} more "
               f"expensive, {len(known) - more} cheaper, {len(unknown)} unknown. Added calls count from nothing, "
               "removed ones down to nothing.") if deltas else f"No layer call's {unit} estimate changed."
    chart = Chart("layer-deltas", f"Largest per-layer {unit} changes", summary,
                  ("Layer call", "Type", "Change", "Before", "After", "Delta"), rows, notes)

    def paint() -> Canvas:
        count = max(len(shown) + len(shown_unknown), 1)
        labels = [delta_label(delta) for delta in [*shown, *shown_unknown]]
        canvas = Canvas(WIDTH, ranking_height(count, notes))
        left = label_margin(labels)
        axes = canvas.axes(left, ranking_bottom(notes), WIDTH - 16 - left, count * ROW)
        canvas.title(f"Largest per-layer {unit} changes (after − before)")
        paint_deltas(canvas, axes, shown, shown_unknown, labels)
        canvas.footnote(notes)
        legend = [item for item, present in (
            (("fill", INCREASE, "more expensive"), any((delta.value or 0) > 0 for delta in shown)),
            (("fill", DECREASE, "cheaper"), any((delta.value or 0) < 0 for delta in shown)),
            (("hatch", NEUTRAL, "≥ lower bound"), any(delta.status == "partial" for delta in shown)),
            (("question", UNAVAILABLE, "unknown"), bool(shown_unknown))) if present]
        canvas.legend(legend)
        return canvas

    return chart, paint


def delta_label(delta: LayerDelta) -> str:
    tag = "" if delta.change == "changed" else f" [{delta.change}]"
    return shorten(f"{delta.label} ({delta.type_name})", 44) + tag


# ---------------------------------------------------------------------------------------------------------------
# The canvas: matplotlib for shapes, SVG text for labels


def label_margin(labels: Sequence[str]) -> float:
    """Points left of the axes for the longest label (an estimate from its length: no font metrics needed)."""
    return min(280.0, 12.0 + 4.6 * max((len(label) for label in labels), default=4))


def ranking_bottom(notes: Sequence[str]) -> float:
    return 8.0 + (13.0 if notes else 0.0)


def ranking_height(rows: float, notes: Sequence[str]) -> float:
    return ranking_bottom(notes) + rows * ROW + 30.0


class Canvas:
    """A figure of fixed size in points (1/72 in): matplotlib draws shapes; labels and legends are SVG written here.

    A label is placed by a matplotlib transform (data, axes or blended coordinates) resolved after drawing, plus an
    offset in points; the browser aligns it with ``text-anchor`` and ``dominant-baseline``.
    """

    def __init__(self, width: float, height: float) -> None:
        from matplotlib.figure import Figure

        self.width, self.height = width, height
        self.figure = Figure(figsize=(width / 72, height / 72), dpi=72)
        self._labels: list[tuple[Any, float, float, str, dict[str, Any]]] = []
        self._hatches: list[tuple[Any, tuple[float, float, float, float], str, float]] = []
        self._marks: list[str] = []

    def axes(self, left: float, bottom: float, width: float, height: float) -> Axes:
        """Axes at a box in points, with only the left and bottom lines and no ticks (labels are drawn here)."""
        axes = self.figure.add_axes((left / self.width, bottom / self.height, max(width, 1) / self.width,
                                     max(height, 1) / self.height))
        axes.patch.set_visible(False)
        for side, visible in (("top", False), ("right", False), ("left", True), ("bottom", True)):
            axes.spines[side].set_visible(visible)
            axes.spines[side].set_color(INK)
            axes.spines[side].set_linewidth(0.6)
        no_ticks(axes)
        return axes

    def text(self, x: float, y: float, text: str, transform: Any = None, **style: Any) -> None:
        """A label at ``(x, y)`` in ``transform``'s coordinates (figure points when ``None``)."""
        self._labels.append((transform, x, y, text, style))

    def title(self, text: str) -> None:
        """The chart's title, at the top left (legends go to the top right)."""
        self.text(6, self.height - 14, text, size=FONT + 1, weight="bold", baseline="auto")

    def footnote(self, notes: Sequence[str]) -> None:
        """The chart's n/a and omission notes, printed under it so that the picture alone is not misleading."""
        text = " ".join(notes)
        if text:
            limit = int(self.width / 3.9)
            self.text(6, 5, text if len(text) <= limit else text[:limit - 1] + "…", size=FONT - 1, baseline="auto",
                      colour=UNAVAILABLE if "n/a" in text or "nknown" in text else INK)

    def legend(self, items: Sequence[tuple[str, str, str]], x: float | None = None, y: float | None = None) -> None:
        """Swatches with labels in a row from ``(x, y)`` (figure points; ``y`` is the row's middle); by default the
        row ends at the top right corner."""
        if x is None:
            x = self.width - 6 - sum(22 + 4.4 * len(label) for *_, label in items) + 10
        y = self.height - 17 if y is None else y
        for kind, colour, label in items:
            self._marks.append(swatch(kind, colour, x, self.height - y))
            self.text(x + 12, y, label, size=FONT - 0.5)
            x += 22 + 4.4 * len(label)

    def leader(self, x0: float, y0: float, x1: float, y1: float) -> None:
        """A thin line from a point to its displaced label (figure points)."""
        self._marks.append(f'<path d="M{x0:.2f} {self.height - y0:.2f}L{x1:.2f} {self.height - y1:.2f}" '
                           f'stroke="{INK}" stroke-opacity="0.45" stroke-width="0.5"/>')

    def hatch(self, transform: Any, span: tuple[float, float, float, float], colour: str, narrowest: float = 0.0
              ) -> None:
        """Diagonal lines over the box ``(x0, x1, y0, y1)`` (in ``transform``'s coordinates), which marks a lower
        bound; a box narrower than ``narrowest`` points keeps only its outline (the profile's thin bins)."""
        self._hatches.append((transform, span, colour, narrowest))

    def svg(self) -> str:
        """The figure as SVG with the labels and legend marks added (still to be made inline: see inline_svg)."""
        buffer = io.StringIO()
        self.figure.savefig(buffer, format="svg", metadata=SVG_METADATA, transparent=True)
        labels = "".join(self._hatch_svg(*hatch) for hatch in self._hatches)
        labels += "".join(self._label_svg(*label) for label in self._labels)
        raw = buffer.getvalue()
        end = raw.rindex("</svg>")
        return raw[:end] + f'<g fill="{INK}">{"".join(self._marks)}{labels}</g>' + raw[end:]

    def _hatch_svg(self, transform: Any, span: tuple[float, float, float, float], colour: str, narrowest: float
                   ) -> str:
        """Lines ``x + y = k`` (SVG coordinates) every 4 points, clipped to the box by hand."""
        (left, bottom), (right, top) = (transform.transform(point) for point in ((span[0], span[2]),
                                                                                  (span[1], span[3])))
        left, right = sorted((float(left), float(right)))
        top, bottom = sorted((self.height - float(top), self.height - float(bottom)))
        if right - left < max(narrowest, 0.5) or bottom - top < 2:
            return ""
        steps = []
        for k in range(math.ceil((left + top) / 4) * 4, math.floor(right + bottom) + 1, 4):
            start, stop = max(left, k - bottom), min(right, k - top)
            if stop > start:
                steps.append(f"M{start:.1f} {k - start:.1f}L{stop:.1f} {k - stop:.1f}")
        return f'<path d="{"".join(steps)}" fill="none" stroke="{colour}" stroke-width="0.8"/>'

    def _label_svg(self, transform: Any, x: float, y: float, text: str, style: dict[str, Any]) -> str:
        if transform is not None:
            x, y = (float(value) for value in transform.transform((x, y)))
        x += style.get("dx", 0.0)
        y = self.height - (y + style.get("dy", 0.0))
        attributes = f'x="{x:.2f}" y="{y:.2f}" font-size="{style.get("size", FONT):g}"'
        anchor = style.get("anchor", "start")
        if anchor != "start":
            attributes += f' text-anchor="{anchor}"'
        baseline = style.get("baseline", "central")
        if baseline != "auto":
            attributes += f' dominant-baseline="{baseline}"'
        if style.get("weight"):
            attributes += f' font-weight="{style["weight"]}"'
        if style.get("colour", INK) != INK:
            attributes += f' fill="{style["colour"]}"'
        if style.get("rotate"):
            attributes += f' transform="rotate({style["rotate"]:g} {x:.2f} {y:.2f})"'
        return f"<text {attributes}>{html.escape(text, quote=False)}</text>"


def swatch(kind: str, colour: str, x: float, y: float) -> str:
    """A legend mark, 8 points wide, its middle at ``(x + 4, y)`` in SVG coordinates (y grows downwards)."""
    top = y - 4
    if kind == "fill":
        return f'<rect x="{x:.2f}" y="{top:.2f}" width="8" height="8" fill="{colour}"/>'
    if kind == "hatch":
        lines = (f"M{x:.2f} {top + 8:.2f}l8 -8M{x:.2f} {top + 4:.2f}l4 -4M{x + 4:.2f} {top + 8:.2f}l4 -4")
        return (f'<rect x="{x:.2f}" y="{top:.2f}" width="8" height="8" fill="none" stroke="{colour}" '
                f'stroke-width="0.8"/><path d="{lines}" stroke="{colour}" stroke-width="0.8"/>')
    if kind in ("triangle", "triangle-open"):
        fill = 'fill="none" stroke-width="1"' if kind == "triangle-open" else f'fill="{colour}"'
        return f'<path d="M{x:.2f} {top + 8:.2f}h8l-4 -8z" {fill} stroke="{colour}"/>'
    if kind == "cross":
        return (f'<path d="M{x:.2f} {top:.2f}l8 8M{x + 8:.2f} {top:.2f}l-8 8" stroke="{colour}" '
                'stroke-width="1.4"/>')
    return (f'<text x="{x + 4:.2f}" y="{y:.2f}" font-size="{FONT + 1:g}" font-weight="bold" text-anchor="middle" '
            f'dominant-baseline="central" fill="{colour}">?</text>')


def no_ticks(axes: Axes) -> None:
    axes.set_xticks([])
    axes.set_yticks([])
    axes.set_xticks([], minor=True)
    axes.set_yticks([], minor=True)


def value_grid(canvas: Canvas, axes: Axes, axis: str, low: float, high: float, log: bool = False) -> None:
    """Faint grid lines with their values along one axis (a few round numbers, or decades on a log axis)."""
    from matplotlib.ticker import LogLocator, MaxNLocator

    locator = LogLocator(base=10.0, numticks=7) if log else MaxNLocator(nbins=4)
    ticks = [float(tick) for tick in locator.tick_values(low, high) if low <= tick <= high]
    if axis == "x":
        axes.vlines(ticks, 0, 1, transform=axes.get_xaxis_transform(), colors=INK, alpha=0.13, linewidth=0.6,
                    zorder=0, clip_on=False)
        for tick in ticks:
            canvas.text(tick, 0, tick_text(tick), axes.get_xaxis_transform(), dy=-4, anchor="middle",
                        baseline="hanging", size=FONT - 0.5)
    else:
        axes.hlines(ticks, 0, 1, transform=axes.get_yaxis_transform(), colors=INK, alpha=0.13, linewidth=0.6,
                    zorder=0, clip_on=False)
        for tick in ticks:
            canvas.text(0, tick, tick_text(tick), axes.get_yaxis_transform(), dx=-4, anchor="end", size=FONT - 0.5)


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
    """Horizontal bars, largest at the top, each labelled with its value; an n/a row says so and has no bar."""
    axes.spines["bottom"].set_visible(False)
    if not bars:
        canvas.text(0.5, 0.5, empty, axes.transAxes, anchor="middle")
        return
    positions = list(positions) if positions is not None else [float(index) for index in range(len(bars))]
    known = [bar.amount.known for bar in bars if bar.amount.drawn and bar.amount.known > 0]
    top = max(known, default=1.0)
    floor = 10 ** math.floor(math.log10(min(known, default=1.0))) / 3 if log else 0.0
    if log:
        axes.set_xscale("log")
        no_ticks(axes)
        axes.set_xlim(floor, top * (top / floor) ** 0.22)
    else:
        axes.set_xlim(0, top * 1.2)
    axes.set_ylim(max(max(positions) + 0.5, rows - 0.5), min(positions) - 0.5)
    # A lower bound keeps a visible stub, so that its hatching (and a bound of zero) can be seen.
    stub = floor * (axes.get_xlim()[1] / floor) ** 0.03 if log else axes.get_xlim()[1] * 0.03
    drawn = [(position, bar, max(bar.amount.known, stub if bar.amount.status == "partial" else floor))
             for position, bar in zip(positions, bars) if bar.amount.drawn]
    add_boxes(canvas, axes, [(floor, end, position - 0.36, position + 0.36) for position, _, end in drawn],
              [bar.colour for _, bar, _ in drawn], [bar.amount.status for _, bar, _ in drawn])
    ends = {position: end for position, _, end in drawn}
    for position, bar in zip(positions, bars):
        canvas.text(0, position, bar.label, axes.get_yaxis_transform(), dx=-5, anchor="end")
        if bar.amount.drawn:
            canvas.text(ends[position], position, bar.amount.short, axes.transData, dx=3, size=FONT - 0.5)
        else:
            canvas.text(0, position, "n/a" + (f" ({bar.note})" if bar.note else ""), axes.get_yaxis_transform(),
                        dx=4, colour=UNAVAILABLE, size=FONT - 0.5)


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
    statuses = [amount.status for amount in bins]
    add_boxes(canvas, axes, spans, colours, statuses, narrowest=5.0)
    partial = [index for index, status in enumerate(statuses) if status == "partial"]
    if partial:
        axes.scatter([index + 0.5 for index in partial], [bins[index].known for index in partial], marker="^", s=20,
                     color=INK, linewidths=0, zorder=3, clip_on=False)
    missing = [index for index, amount in enumerate(bins) if not amount.drawn]
    if missing:
        axes.scatter([index + 0.5 for index in missing], [0.0] * len(missing), marker="x", s=14, color=UNAVAILABLE,
                     linewidths=1.0, zorder=3, clip_on=False)
    value_grid(canvas, axes, "y", 0, top * 1.1)
    canvas.text(1, 0, "layer calls in execution order" + (f" ({size} calls per bar)" if size > 1 else "") + " →",
                axes.transAxes, dy=-48, anchor="end", size=FONT - 0.5)


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


def paint_scatter(canvas: Canvas, axes: Axes, points: Sequence[tuple[str, str, int, Amount]],
                  colours: dict[str, str]) -> None:
    if not points:
        canvas.text(0.5, 0.5, "no model run with parameters and MACs", axes.transAxes, anchor="middle")
        return
    xs = [float(params) for _, _, params, _ in points]
    ys = [macs.known for *_, macs in points]
    axes.set_xscale("log")
    axes.set_yscale("log")
    no_ticks(axes)
    low_x, high_x = min(xs) / 3, max(xs) * 3
    low_y, high_y = min(ys) / 3, max(ys) * 3
    axes.set_xlim(low_x, high_x)
    axes.set_ylim(low_y, high_y)
    value_grid(canvas, axes, "x", low_x, high_x, log=True)
    value_grid(canvas, axes, "y", low_y, high_y, log=True)
    lines: dict[str, list[tuple[float, float]]] = {}
    for (entry, _, _, _), x, y in zip(points, xs, ys):
        lines.setdefault(entry, []).append((x, y))
    for entry, line in lines.items():
        if len(line) > 1:
            axes.plot([x for x, _ in line], [y for _, y in line], color=colours[entry], linewidth=1.0, alpha=0.8,
                      clip_on=False)
    exact = [index for index, (*_, macs) in enumerate(points) if macs.status == "complete"]
    if exact:
        axes.scatter([xs[index] for index in exact], [ys[index] for index in exact], marker="o", s=24, linewidths=0,
                     color=[colours[points[index][0]] for index in exact], zorder=3, clip_on=False)
    bounds = [index for index, (*_, macs) in enumerate(points) if macs.status == "partial"]
    if bounds:
        axes.scatter([xs[index] for index in bounds], [ys[index] for index in bounds], marker="^", s=34,
                     facecolors="none", edgecolors=[colours[points[index][0]] for index in bounds], linewidths=1.2,
                     zorder=3, clip_on=False)
    canvas.text(0.5, 0, "parameters", axes.transAxes, dy=-20, anchor="middle", size=FONT - 0.5)
    canvas.text(0, 0.5, "MACs (module view)", axes.transAxes, dx=-40, anchor="middle", rotate=-90,
                size=FONT - 0.5)
    point_labels(canvas, axes, points)


def point_labels(canvas: Canvas, axes: Axes, points: Sequence[tuple[str, str, int, Amount]]) -> None:
    """Each point named beside it, at the first place that overlaps no other label and keeps clear of the other
    points (boxes estimated from the text length); a label pushed further away gets a thin leader line."""
    spots = [tuple(float(value) for value in axes.transData.transform((params, macs.known)))
             for _, _, params, macs in points]
    order = sorted(range(len(points)), key=lambda index: (-points[index][3].known, points[index][1]))
    taken: list[tuple[float, float, float, float]] = []
    for index in order:
        _, name, _, macs = points[index]
        x, y = spots[index]
        text = ("≥ " if macs.status == "partial" else "") + shorten(name, 30)
        width = 4.3 * len(text)
        near = [(x + 6, y), (x - 6 - width, y), (x + 3, y + 9), (x + 3, y - 9), (x - 3 - width, y + 9),
                (x - 3 - width, y - 9)]
        far = [(x + 10, y + sign * 11 * step) for step in range(2, 9) for sign in (-1, 1)]
        others = [(ox - 8, oy - 6, ox + 8, oy + 6) for number, (ox, oy) in enumerate(spots) if number != index]
        chosen = near[0]
        for left, middle in [*near, *far]:
            box = (left, middle - 4.5, left + width, middle + 4.5)
            if left >= 2 and box[2] <= canvas.width - 2 and not any(
                    box[0] < other[2] and other[0] < box[2] and box[1] < other[3] and other[1] < box[3]
                    for other in [*taken, *others]):
                chosen = (left, middle)
                break
        left, middle = chosen
        taken.append((left, middle - 4.5, left + width, middle + 4.5))
        if (left, middle) not in near:
            canvas.leader(x, y, left - 1, middle)
        canvas.text(left, middle, text, size=FONT - 1)


def paint_deltas(canvas: Canvas, axes: Axes, shown: Sequence[LayerDelta], unknown: Sequence[LayerDelta],
                 labels: Sequence[str]) -> None:
    """Diverging bars from zero, more expensive to the right; an unknown delta is a ?, never a zero-length bar."""
    axes.spines["bottom"].set_visible(False)
    axes.spines["left"].set_visible(False)
    if not shown and not unknown:
        canvas.text(0.5, 0.5, "no per-layer change", axes.transAxes, anchor="middle")
        return
    values = [delta.value or 0.0 for delta in shown]
    low, high = min([0.0, *values]), max([0.0, *values])
    span = (high - low) or 1.0
    axes.set_xlim(low - 0.28 * span if low < 0 else -0.06 * span, high + 0.28 * span if high > 0 else 0.06 * span)
    count = len(shown) + len(unknown)
    axes.set_ylim(count - 0.5, -0.5)
    axes.axvline(0, color=INK, linewidth=0.7, clip_on=False)
    add_boxes(canvas, axes, [(min(0.0, value), max(0.0, value), position - 0.36, position + 0.36)
                     for position, value in enumerate(values)],
              [INCREASE if value > 0 else DECREASE for value in values], [delta.status for delta in shown])
    for position, (delta, value) in enumerate(zip(shown, values)):
        canvas.text(value, position, delta_text(delta, short=True), axes.transData, dx=3 if value > 0 else -3,
                    anchor="start" if value > 0 else "end", size=FONT - 0.5)
    for offset, delta in enumerate(unknown):
        position = len(shown) + offset
        canvas.text(0, position, "?", axes.transData, anchor="middle", colour=UNAVAILABLE, size=FONT + 1,
                    weight="bold")
        canvas.text(0, position, f"unknown: {delta.before.text or 'none'} → {delta.after.text or 'none'}",
                    axes.transData, dx=8, colour=UNAVAILABLE, size=FONT - 0.5)
    for position, label in enumerate(labels):
        canvas.text(0, position, label, axes.get_yaxis_transform(), dx=-5, anchor="end")


# ---------------------------------------------------------------------------------------------------------------
# Drawing, SVG post-processing and the HTML figure


def draw(chart: Chart, painter: Painter) -> Chart:
    """The chart with its SVG, or with a note instead when matplotlib is not installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        chart.notes.append(MISSING_MATPLOTLIB)
        return chart
    with drawing_settings():
        raw = painter().svg()
    chart.svg = inline_svg(raw, chart.title, chart.summary)
    return chart


@contextmanager
def drawing_settings() -> Iterator[None]:
    """matplotlib's defaults plus ours, whatever the user's matplotlibrc says; restored afterwards.

    rcParams are process-global: every chart sets the same values, so concurrent drawing in threads agrees; figures
    themselves are plain ``Figure`` objects (no pyplot registry), so processes and threads share nothing else.
    """
    import matplotlib

    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update({key: value for key, value in SVG_RC.items() if key in matplotlib.rcParams})
        yield


def inline_svg(raw: str, title: str, description: str) -> str:
    """matplotlib's SVG made fit for inline use in a page (see the module docstring): one line, deterministic."""
    text = raw[raw.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>", "", text, flags=re.DOTALL)
    text = re.sub(r"<style[^>]*>.*?</style>", "", text, flags=re.DOTALL)
    text = re.sub(r"\s*\n\s*", " ", text)
    text = re.sub(r">\s+<", "><", text).replace("<defs></defs>", "")
    prefix = "ts" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:10] + "-"
    referenced = set(re.findall(r"url\(#([^)]+)\)", text)) | set(re.findall(r'href="#([^"]+)"', text))
    text = re.sub(r' id="([^"]+)"',
                  lambda match: f' id="{prefix}{match.group(1)}"' if match.group(1) in referenced else "", text)
    text = text.replace("url(#", f"url(#{prefix}").replace('href="#', f'href="#{prefix}')
    text = text.replace(INK, "currentColor")
    opening = re.match(r"<svg[^>]*>", text)
    size = re.search(r'width="([\d.]+)pt" height="([\d.]+)pt" viewBox="([^"]+)"', opening.group(0)) \
        if opening else None
    if opening is None or size is None:
        raise ValueError("unexpected SVG from matplotlib: no root element with a size")
    root = (f'<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" '
            f'width="{size.group(1)}pt" height="{size.group(2)}pt" viewBox="{size.group(3)}" role="img" '
            f'aria-label="{html.escape(title)}" class="torchscan-chart-svg" '
            f'style="max-width:100%;height:auto;stroke-linejoin:round;stroke-linecap:butt">'
            f"<title>{html.escape(title)}</title><desc>{html.escape(description)}</desc>")
    return root + text[opening.end():]


def figure_html(chart: Chart) -> str:
    """The chart as a ``<figure>``: the SVG, a caption (summary and notes) and the numbers behind it."""
    escape = html.escape
    lines = ['<figure class="torchscan-chart" data-search-exclude>']
    if chart.svg:
        lines.append(chart.svg)
    notes = "".join(f' <span class="torchscan-chart-note">{escape(note)}</span>' for note in chart.notes)
    lines.append(f"<figcaption><strong>{escape(chart.title)}.</strong> {escape(chart.summary)}{notes}</figcaption>")
    if chart.rows:
        head = "".join(f"<th>{escape(cell)}</th>" for cell in chart.headers)
        body = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in chart.rows)
        lines.append(f"<details><summary>The numbers ({counted(len(chart.rows), 'row')})</summary><table><thead>"
                     f"<tr>{head}</tr></thead><tbody>{body}</tbody></table></details>")
    lines.append("</figure>")
    return "\n".join(lines)
