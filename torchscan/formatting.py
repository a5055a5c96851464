"""Number formatting shared by every renderer: one unit scale (k, M, G, T) for costs, the model-card style (124M,
6.74B) for parameter counts, and one way to show a status."""

from __future__ import annotations

from typing import Any

SCALES = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
#: Parameter counts as model cards write them: 124M, 6.74B (B for billions, no space).
PARAMETER_SCALES = ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K"))


def format_count(value: float, digits: int = 3) -> str:
    """``1234567`` -> ``"1.23 M"``; values under a thousand are shown as they are."""
    for scale, suffix in SCALES:
        if abs(value) >= scale:
            return f"{value / scale:.{digits - 1}f} {suffix}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def format_parameters(count: int) -> str:
    """``6738415616`` -> ``"6.74B"``, ``124439808`` -> ``"124M"``: three significant digits, as model cards do."""
    for scale, suffix in PARAMETER_SCALES:
        if abs(count) >= scale * 0.9995:  # 999.6M rounds to 1B, not to "1e+03M"
            return f"{count / scale:.3g}{suffix}"
    return str(count)


def format_metric(result: dict[str, Any] | None) -> str:
    """A MetricResult as text: exact numbers plain, lower bounds with ``≥``, missing ones spelled out."""
    if result is None:
        return ""
    status = result["status"]
    if status == "complete":
        return _format_value(result["value"])
    if status == "partial":
        return "≥" + _format_value(result["known_value"])
    return {"unavailable": "n/a", "not_requested": "—", "not_applicable": "n/a*"}.get(status, status)


def _format_value(value: Any) -> str:
    if isinstance(value, list):
        return "×".join(str(item) for item in value)
    return format_count(value)
