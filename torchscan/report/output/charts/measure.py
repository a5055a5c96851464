"""How wide a label is, without a font at hand: advance widths of DejaVu Sans, the widest common sans-serif face
and the one a system font stack falls back to on Linux, so a label measured here fits in narrower faces too. Every
placement that must not cut a label (a point's name, a bar's label, a legend) measures it here and shortens it."""

from __future__ import annotations

import math

#: Advance widths in ems (DejaVu Sans, rounded up), by the characters that share them; anything else counts 1 em.
_WIDTHS = {0.28: "ijl'", 0.3: "IJ", 0.32: " ,.·", 0.34: "/:;\\|", 0.37: "f-", 0.41: "()[]!tr", 0.46: '"',
           0.5: "*_`–", 0.53: "?sz", 0.56: "cL", 0.58: "Fk", 0.62: "vxyPTY", 0.64: "0123456789$abdeghnopqu{}SE",
           0.66: "K", 0.7: "ABCRVXZ", 0.76: "HNU", 0.79: "DGOQ&", 0.84: "#+<=>^~≥≤×→−w", 0.87: "M", 0.99: "mW%"}
EM = {character: width for width, characters in _WIDTHS.items() for character in characters}
#: Bold faces run wider: a title is measured with this factor.
BOLD = 1.1


def text_width(text: str, size: float) -> float:
    """The width of ``text`` in points at font size ``size``."""
    return sum(EM.get(character, 1.0) for character in text) * size


def most_characters(room: float, size: float) -> int:
    """The most characters ``room`` points can hold (of the narrowest kind)."""
    return int(room / (min(_WIDTHS) * size)) + 1


def fit_text(text: str, room: float, size: float) -> str:
    """``text`` shortened to ``room`` points wide: it keeps its end (the informative part of a dotted path) after an
    ellipsis; ``""`` when not even that fits."""
    if text_width(text, size) <= room:
        return text
    for start in range(max(1, len(text) - most_characters(room, size)), len(text)):
        shorter = "…" + text[start:]
        if text_width(shorter, size) <= room:
            return shorter
    return ""


def rotated_box(x: float, y: float, width: float, size: float, anchor: str, baseline: str, angle: float
                ) -> tuple[float, float, float, float]:
    """The box ``(left, top, right, bottom)`` a label covers in SVG coordinates (y grows downwards): written at
    ``(x, y)`` with ``text-anchor`` ``anchor`` and ``dominant-baseline`` ``baseline``, then rotated by ``angle``
    degrees about that point."""
    start = {"start": 0.0, "middle": -width / 2, "end": -width}[anchor]
    top = {"central": -0.6 * size, "hanging": -0.1 * size}.get(baseline, -0.95 * size)
    corners = [(dx, dy) for dx in (start, start + width) for dy in (top, top + 1.2 * size)]
    cos, sin = math.cos(math.radians(angle)), math.sin(math.radians(angle))
    xs = [x + dx * cos - dy * sin for dx, dy in corners]
    ys = [y + dx * sin + dy * cos for dx, dy in corners]
    return min(xs), min(ys), max(xs), max(ys)
