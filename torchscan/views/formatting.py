"""The one number style of every view: terminal, Markdown, site pages, standalone HTML, diffs, budgets and charts.

A count reads with three significant digits and an SI suffix glued on: ``512``, ``8.97k``, ``4.39M``, ``1.81G``,
``2.5T``, ``1P`` (peta, 10¹⁵), ``3E`` (exa, 10¹⁸; larger counts stay in E). Trailing zeros are dropped only when
the number is exact (``2.5T`` is 2.5 × 10¹²); a rounded one keeps its three digits (1.0027 × 10¹⁵ reads ``1.00P``).
Parameter counts write billions as model cards do (``8.03B``, ``3.5M``: zeros always dropped); every other count (MACs, FLOPs, DMAs, calls) writes
``G``; bytes add ``B`` (``10.6kB``). Shares and changes are percentages (``12.5%``). `NUMBER` is the grammar of
every number a view shows, defined once here, so a test can hold every renderer to it. Exact values go in hover
titles (`exact_count`), never in the cells.
"""

from __future__ import annotations

import math
import re
from typing import Any

#: Suffixes of counts (MACs, FLOPs, DMAs, bytes, calls); also the scales a budget limit may use (``1.5M``).
SCALES = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
#: The unit of a MetricResult that counts bytes (memory): its numbers are written with `format_bytes`.
BYTES = "bytes"
#: Parameter counts as model cards write them: 124M, 6.74B (B for billions).
PARAMETER_SCALES = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k"))

#: Three significant digits at most (a rounded number keeps its trailing zeros): 1, 12, 999, 1.5, 1.00, 8.97, 12.3,
#: 0.25, 0.00123.
_MANTISSA = r"(?:[1-9]\d{0,2}|[1-9]\.\d{1,2}|[1-9]\d\.\d|0(?:\.0{0,2}[1-9]\d{0,2})?|<0\.001)"
#: A count with its suffix: ``512``, ``8.97k``, ``8.03B`` (parameters), ``1.81G``, ``1P``, ``10.6kB`` / ``512B``
#: (bytes); past a thousand exa, whole exa with separators (``1,200E``).
COUNT = rf"(?:{_MANTISSA}(?:[kMGTPE]?B|[kMGTPE])?|[1-9]\d{{0,2}}(?:,\d{{3}})+EB?)"
#: A percentage: ``12.5%``, ``1,234.5%``, ``0.013%`` (two significant digits under 0.1%), ``<0.001%``, ``0%``.
PERCENT = r"(?:\d{1,3}(?:,\d{3})*\.\d|0\.0{1,2}[1-9]\d?|<0\.001|0)%"
#: A duration: ``6.61ms``, ``45.6µs``, ``1.2s``, ``850ns`` (a bound or a measured time, `format_seconds`).
SECONDS = rf"{_MANTISSA}[mµn]?s"
#: A per-dimension value (receptive field, stride, padding): exact integers, one per dimension (``7×7``).
SPATIAL = r"\d+(?:×\d+)*"
#: Every number a view shows: an optional ``Σ `` (sum over a subtree), ``≥``/``≤`` (bound) and sign, then a count,
#: a percentage or a per-dimension value.
NUMBER = re.compile(rf"(?:Σ )?[≥≤]?[+−]?(?:{SECONDS}|{COUNT}|{PERCENT}|[+−]?{SPATIAL})")


def format_count(value: float, scales: tuple[tuple[float, str], ...] = SCALES) -> str:
    """``1234567`` -> ``"1.23M"``, ``8970`` -> ``"8.97k"``, ``512`` -> ``"512"``: three significant digits; a rounded
    count keeps its trailing zeros (``1.00P`` for 1.0027e15), a parameter count (`PARAMETER_SCALES`) never does."""
    rounded_zeros = scales is not PARAMETER_SCALES
    magnitude = abs(value)
    sign = "-" if value < 0 else ""
    for scale, suffix in scales:
        if magnitude >= scale * 0.9995:  # 999.6M rounds to 1G, never to "1e+03M"
            mantissa = magnitude / scale
            # beyond the largest suffix, whole numbers with separators: ``1,200E``
            text = _significant(mantissa, rounded_zeros) if mantissa < 999.5 else f"{round(mantissa):,}"
            return f"{sign}{text}{suffix}"
    return sign + _significant(magnitude, rounded_zeros)


def _significant(value: float, rounded_zeros: bool = True) -> str:
    """Three significant digits, no exponent: ``1``, ``8.97``, ``12.3``, ``999``, ``0.25``; ``<0.001`` below.
    Trailing zeros go when the number is exact, or always without ``rounded_zeros``."""
    if value == 0 or float(value).is_integer() and value < 1000:
        return str(int(value))
    if value < 0.001:
        return "<0.001"
    decade = math.floor(math.log10(value))
    text = f"{value:.{max(0, 2 - decade)}f}"
    if float(text) >= 10 ** (decade + 1):  # rounding reached the next decade (0.9996 -> 1.000): one digit fewer
        text = f"{value:.{max(0, 1 - decade)}f}"
    if float(text) >= 1000 or "e" in text:  # 999.96 rounds up to four digits
        return "1000"
    if "." in text and (float(text) == value or not rounded_zeros):
        return text.rstrip("0").rstrip(".")
    return text


def format_parameters(count: int) -> str:
    """``6738415616`` -> ``"6.74B"``, ``124439808`` -> ``"124M"``, ``3504872`` -> ``"3.5M"``: model-card style."""
    return format_count(count, PARAMETER_SCALES)


def format_bytes(count: float) -> str:
    """``10560`` -> ``"10.6kB"``: decimal prefixes (k = 10³, M = 10⁶, G = 10⁹), never KiB, everywhere bytes show."""
    return format_count(count) + "B"


def format_signed_bytes(value: float) -> str:
    """A change of bytes: ``+1.2MB``, ``−300B``, ``0B``."""
    return format_signed(value) + "B"


def format_percent(value: float, signed: bool = False) -> str:
    """``12.5%``, ``1,234.5%``, ``0.013%`` (small shares keep two significant digits), ``<0.001%``, ``0%``;
    ``signed`` adds ``+`` or ``−`` (a change)."""
    magnitude = abs(value)
    if magnitude == 0:
        return "0%"
    sign = ("+" if value > 0 else "−") if signed else ""
    if magnitude >= 0.1:
        digits = f"{magnitude:,.1f}"
    elif magnitude >= 0.001:
        digits = f"{magnitude:.2g}"
    else:
        digits = "<0.001"
    return f"{sign}{digits}%"


def format_seconds(value: float) -> str:
    """A duration with three significant digits and a glued unit: ``6.61ms``, ``45.6µs``, ``1.20s``, ``850ns``."""
    magnitude = abs(value)
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if magnitude >= scale * 0.9995:
            return ("-" if value < 0 else "") + _significant(magnitude / scale) + unit
    return ("-" if value < 0 else "") + _significant(magnitude / 1e-9) + "ns"


def format_signed(value: float, scales: tuple[tuple[float, str], ...] = SCALES) -> str:
    """A change: ``+1.2M``, ``−300``, ``0``."""
    if value == 0:
        return "0"
    return ("+" if value > 0 else "−") + format_count(abs(value), scales)


def exact_count(value: float) -> str:
    """The exact value for a hover title: ``1,814,073,856``, ``0.5``."""
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,}"
    return f"{int(value):,}"


def format_metric(result: dict[str, Any] | None) -> str:
    """A MetricResult as text: exact numbers plain, lower bounds with ``≥``, missing ones spelled out."""
    if result is None:
        return ""
    status = result["status"]
    if status == "complete":
        return _format_value(result["value"], result.get("unit"))
    if status == "partial":
        return "≥" + _format_value(result["known_value"], result.get("unit"))
    return {"unavailable": "n/a", "not_requested": "—", "not_applicable": "n/a*"}.get(status, status)


def _format_value(value: Any, unit: str | None = None) -> str:
    if isinstance(value, list):
        return "×".join(str(item) for item in value)
    return format_bytes(value) if unit == BYTES else format_count(value)
