"""The drawing surface: a matplotlib figure for the shapes, with labels, legend marks and hatching written as SVG.

Text is not laid out by matplotlib: labels are written into the SVG as ``<text>`` with ``text-anchor`` and
``dominant-baseline`` doing the alignment, which keeps a chart set fast (matplotlib's text layout dominates its
drawing time) and lets the labels use the page's font.
"""

from __future__ import annotations

import html
import io
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .measure import BOLD, fit_text, most_characters, rotated_box, text_width
from .style import FONT, INK, UNAVAILABLE

if TYPE_CHECKING:
    from matplotlib.axes import Axes

SVG_METADATA = {"Date": None, "Creator": None, "Format": None, "Type": None}
#: Points kept clear at the figure's left and right edges.
MARGIN = 2.0


class Canvas:
    """A figure of fixed size in points (1/72 in): matplotlib draws shapes; labels and legends are SVG written here,
    each placed by a matplotlib transform (data, axes or blended coordinates) resolved after drawing."""

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
            axes.spines[side].set(visible=visible, color=INK, linewidth=0.6)
        no_ticks(axes)
        return axes

    def text(self, x: float, y: float, text: str, transform: Any = None, **style: Any) -> None:
        """A label at ``(x, y)`` in ``transform``'s coordinates (figure points when ``None``); ``number=True`` marks
        a tick or value label."""
        self._labels.append((transform, x, y, text, style))

    def title(self, text: str) -> None:
        """The chart's title, at the top left (legends go to the top right)."""
        self.text(6, self.height - 14, text, size=FONT + 1, weight="bold", baseline="auto")

    def footnote(self, notes: Sequence[str]) -> None:
        """The chart's n/a and omission notes, printed under it so that the picture alone is not misleading (in
        full in the caption; here shortened to the figure's width)."""
        text = " ".join(notes)
        if text:
            room = self.width - 12
            if text_width(text, FONT - 1) > room:
                text = next(text[:end] + "…" for end in range(min(len(text), most_characters(room, FONT - 1)), 0, -1)
                            if text_width(text[:end] + "…", FONT - 1) <= room)
            self.text(6, 5, text, size=FONT - 1, baseline="auto",
                      colour=UNAVAILABLE if "n/a" in text or "nknown" in text else INK)

    def legend(self, items: Sequence[tuple[str, str, str]], x: float | None = None, y: float | None = None) -> None:
        """Swatches with labels in a row from ``(x, y)`` (figure points; ``y`` is the row's middle); by default the
        row ends at the top right corner (labels measured, so that the row ends inside the figure)."""
        widths = [22 + text_width(label, FONT - 0.5) for *_, label in items]  # swatch, label, 10 points of space
        if x is None:
            x = max(self.width + 4 - sum(widths), 6.0)
        y = self.height - 17 if y is None else y
        for (kind, colour, label), width in zip(items, widths, strict=True):
            self._marks.append(swatch(kind, colour, x, self.height - y))
            self.text(x + 12, y, label, size=FONT - 0.5)
            x += width

    def leader(self, x0: float, y0: float, x1: float, y1: float) -> None:
        """A thin line from a point to its displaced label (figure points)."""
        self._marks.append(f'<path d="M{x0:.2f} {self.height - y0:.2f}L{x1:.2f} {self.height - y1:.2f}" '
                           f'stroke="{INK}" stroke-opacity="0.45" stroke-width="0.5"/>')

    def hover(self, x: float, y: float, text: str) -> None:
        """An invisible disc at ``(x, y)`` (figure points) whose ``<title>`` the browser shows on hover: the static
        SVG way to name a point that has no label of its own."""
        self._marks.append(f'<circle cx="{x:.2f}" cy="{self.height - y:.2f}" r="5" fill="{INK}" '
                           f'fill-opacity="0"><title>{html.escape(text, quote=False)}</title></circle>')

    def hatch(self, transform: Any, span: tuple[float, float, float, float], colour: str, narrowest: float) -> None:
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
        x, y, text = self._inside(x + style.get("dx", 0.0), self.height - (y + style.get("dy", 0.0)), text, style)
        attributes = f'x="{x:.2f}" y="{y:.2f}" font-size="{style.get("size", FONT):g}"'
        if style.get("anchor", "start") != "start":
            attributes += f' text-anchor="{style["anchor"]}"'
        baseline = style.get("baseline", "central")
        if baseline != "auto":
            attributes += f' dominant-baseline="{baseline}"'
        if style.get("weight"):
            attributes += f' font-weight="{style["weight"]}"'
        if style.get("colour", INK) != INK:
            attributes += f' fill="{style["colour"]}"'
        if style.get("number"):  # a tick or value label: written by the one formatter (tests check them all)
            attributes += ' class="ts-number"'
        if style.get("rotate"):
            attributes += f' transform="rotate({style["rotate"]:g} {x:.2f} {y:.2f})"'
        return f"<text {attributes}>{html.escape(text, quote=False)}</text>"

    def _inside(self, x: float, y: float, text: str, style: dict[str, Any]) -> tuple[float, float, str]:
        """The label moved (and, wider than the figure, shortened) so that nothing of it falls outside the figure:
        a label is never cut. ``(x, y)`` in SVG coordinates."""
        size = style.get("size", FONT) * (BOLD if style.get("weight") else 1.0)
        text = fit_text(text, self.width - 2 * MARGIN, size)
        left, top, right, bottom = rotated_box(x, y, text_width(text, size), size, style.get("anchor", "start"),
                                               style.get("baseline", "central"), style.get("rotate", 0.0))
        x += max(0.0, MARGIN - left) - max(0.0, right - (self.width - MARGIN))
        y += max(0.0, 1 - top) - max(0.0, bottom - (self.height - 1))
        return x, y, text


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
    if kind in ("line", "dashed"):  # a reference line of the plot (a device's memory, say)
        dashes = ' stroke-dasharray="3 2"' if kind == "dashed" else ""
        return f'<path d="M{x:.2f} {y:.2f}h9" stroke="{colour}" stroke-width="1.4"{dashes}/>'
    if kind == "cross":
        return (f'<path d="M{x:.2f} {top:.2f}l8 8M{x + 8:.2f} {top:.2f}l-8 8" stroke="{colour}" '
                'stroke-width="1.4"/>')
    return (f'<text x="{x + 4:.2f}" y="{y:.2f}" font-size="{FONT + 1:g}" font-weight="bold" text-anchor="middle" '
            f'dominant-baseline="central" fill="{colour}">?</text>')


def no_ticks(axes: Axes) -> None:
    for minor in (False, True):
        axes.set_xticks([], minor=minor)
        axes.set_yticks([], minor=minor)
