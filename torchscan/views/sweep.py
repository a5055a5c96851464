"""The view of a sweep: one model's totals at every analyzed size and the exact curves that summarize them.

It reads the versioned JSON of `torchscan.cost_curve` (``sizes``, ``points``, ``curves``), with the registry's
additions when a build wrote it (``quantity``, ``default``, the points' report ``stems``, the ``missing`` points). A
formula is shown only where the curve is exact, with its domain: the sampled lattice it was found and verified on.
Nothing here evaluates a curve: every number in a table is one that an analysis produced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from .cells import Cell, metric_cell

#: The totals a sweep shows, in order, with their labels (the curves of other totals stay in the JSON).
SWEPT_METRICS = (("macs", "MACs"), ("module_flops", "Module FLOPs"), ("operator_flops", "Operator FLOPs"),
                 ("dmas", "DMAs"))
#: Shown after them for a sweep of decode steps: the bytes of the KV cache each step reads (``inputs.kv_cache``).
KV_CACHE = ("kv_cache", "KV cache")
#: Short symbols of common quantities in formulas; any other quantity is written by its first letter.
SYMBOLS = {"seq_len": "L", "context": "L", "context_length": "L", "tokens": "L", "size": "S", "image_size": "S",
           "batch": "B", "batch_size": "B"}
SUPERSCRIPTS = {2: "²", 3: "³"}
KIND_WORDS = {"polynomial": "exact polynomial", "piecewise": "exact pieces", "points": "points only"}


@dataclass(frozen=True)
class PointRow:
    """One analyzed size: its totals as cells, and the stem of its report when a build wrote one."""

    size: int
    cells: tuple[Cell, ...]
    stem: str = ""
    declared: bool = False

    @property
    def size_text(self) -> str:
        return f"{self.size:,}"


@dataclass(frozen=True)
class CurveRow:
    """One metric's curve: the formula of each exact piece with its domain, the sizes that verified it, or the
    reason there is no exact curve."""

    metric: str
    label: str
    kind: str
    formulas: tuple[str, ...]
    domains: tuple[str, ...]
    verified_at: tuple[int, ...]
    reason: str

    @property
    def exact(self) -> bool:
        return self.kind != "points"

    @property
    def kind_text(self) -> str:
        return KIND_WORDS.get(self.kind, self.kind)

    @property
    def why_not_exact(self) -> str:
        """The fitter's reason when the curve is not exact; empty for an exact one."""
        return "" if self.exact else self.reason

    @property
    def verified_text(self) -> str:
        return ", ".join(f"{size:,}" for size in self.verified_at) or "—"


@dataclass(frozen=True)
class SweepView:
    """A sweep as the pages show it: the points table, the curves table and the formulas for captions."""

    quantity: str
    symbol: str
    default: int | None
    points: tuple[PointRow, ...]
    curves: tuple[CurveRow, ...]
    missing: tuple[str, ...] = ()
    #: The metrics of the points' cells, in order: `SWEPT_METRICS`, and the KV cache when the points have one.
    metrics: tuple[tuple[str, str], ...] = SWEPT_METRICS

    @property
    def headers(self) -> tuple[str, ...]:
        return tuple(label for _, label in self.metrics)

    @property
    def range_text(self) -> str:
        sizes = [point.size for point in self.points]
        return f"{min(sizes):,}–{max(sizes):,}" if sizes else "no point analyzed"

    @property
    def symbol_text(self) -> str:
        """``L is seq_len``: how the formulas name the quantity."""
        return f"{self.symbol} is {self.quantity}"

    def curve(self, metric: str) -> CurveRow | None:
        return next((row for row in self.curves if row.metric == metric), None)


def sweep_view(record: dict[str, Any], quantity: str = "") -> SweepView:
    """The view of a sweep's JSON; ``quantity`` names the size when the record does not (``cost_curve``'s own)."""
    name = record.get("quantity") or quantity or "size"
    symbol = SYMBOLS.get(name, name[:1].upper())
    default = record.get("default")
    metrics = SWEPT_METRICS + ((KV_CACHE,) if any(KV_CACHE[0] in point for point in record["points"]) else ())
    stems = record.get("stems", {})
    points = tuple(PointRow(point["size"], tuple(point_cell(point, key) for key, _ in metrics),
                            stems.get(str(point["size"]), ""), point["size"] == default)
                   for point in record["points"])
    curves = tuple(curve_row(key, label, symbol, record["curves"][key]) for key, label in metrics
                   if key in record["curves"])
    missing = tuple(f"{item['size']:,}: {item['reason']}" for item in record.get("missing", []))
    return SweepView(name, symbol, default, points, curves, missing, metrics)


def point_cell(point: dict[str, Any], key: str) -> Cell:
    """One metric of one point: a total, or the KV-cache bytes (unit ``bytes``, so written as bytes: ``1.07GB``)."""
    if key != KV_CACHE[0]:
        return metric_cell(point["totals"].get(key))
    return metric_cell(point[key]["bytes"] if key in point else None)


def curve_row(metric: str, label: str, symbol: str, curve: dict[str, Any]) -> CurveRow:
    """One metric's curve; a formula per exact piece."""
    pieces = curve["pieces"] if curve["kind"] != "points" else []
    return CurveRow(metric, label, curve["kind"],
                    tuple(formula_text(label, symbol, piece["coefficients"]) for piece in pieces),
                    tuple(domain_text(symbol, piece) for piece in pieces), tuple(curve.get("verified_at", ())),
                    curve.get("reason", ""))


def formula_text(label: str, symbol: str, coefficients: Sequence[str]) -> str:
    """``MACs = 1,536·L² + 85,524,480·L + 84,934,656``: the exact coefficients, highest power first."""
    terms = [(power, Fraction(text)) for power, text in enumerate(coefficients)]
    shown = [(power, value) for power, value in reversed(terms) if value != 0]
    if not shown:
        return f"{label} = 0"
    text = ""
    for index, (power, value) in enumerate(shown):
        sign = ("−" if value < 0 else "") if index == 0 else (" − " if value < 0 else " + ")
        text += sign + _term(abs(value), power, symbol)
    return f"{label} = {text}"


def _term(value: Fraction, power: int, symbol: str) -> str:
    """One term: ``1,536·L²``, ``L``, ``(3/2)·L``, ``84,934,656``."""
    number = f"{value.numerator:,}" if value.denominator == 1 else f"({value.numerator:,}/{value.denominator:,})"
    if power == 0:
        return number
    variable = symbol + ("" if power == 1 else SUPERSCRIPTS.get(power, f"^{power}"))
    return variable if value == 1 else f"{number}·{variable}"


def domain_text(symbol: str, piece: dict[str, Any]) -> str:
    """The lattice a piece holds on: ``L = 128, 256, …, 1,024`` (every integer when its step is 1)."""
    start, stop, step = piece["from"], piece["to"], piece["step"]
    if start == stop:
        return f"{symbol} = {start:,}"
    if step == 1:
        return f"every integer {symbol} from {start:,} to {stop:,}"
    second = f"{start + step:,}, …, " if start + 2 * step <= stop else ""
    return f"{symbol} = {start:,}, {second}{stop:,} (step {step:,})"
