"""The chart data type: its SVG (when drawn) and its text alternative, and the HTML ``<figure>`` showing both."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .amounts import counted

if TYPE_CHECKING:
    from .canvas import Canvas

TABLE_ROWS = 60  # rows of a text alternative


@dataclass
class Chart:
    """One chart: the SVG (empty when it could not be drawn) and its text alternative (summary, notes, table)."""

    key: str
    title: str
    summary: str
    headers: tuple[str, ...] = ()
    rows: Sequence[tuple[str, ...]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    svg: str = ""

    @property
    def html(self) -> str:
        """The chart as a ``<figure>``: the SVG, a caption (summary and notes) and the numbers behind it."""
        escape = html.escape
        lines = ['<figure class="torchscan-chart" data-search-exclude>']
        if self.svg:
            lines.append(self.svg)
        notes = "".join(f' <span class="torchscan-chart-note">{escape(note)}</span>' for note in self.notes)
        lines.append(f"<figcaption><strong>{escape(self.title)}.</strong> {escape(self.summary)}{notes}</figcaption>")
        if self.rows:
            head = "".join(f"<th>{escape(cell)}</th>" for cell in self.headers)
            body = "".join("<tr>" + "".join(f"<td>{escape(cell)}</td>" for cell in row) + "</tr>" for row in self.rows)
            lines.append(f"<details><summary>The numbers ({counted(len(self.rows), 'row')})</summary><table><thead>"
                         f"<tr>{head}</tr></thead><tbody>{body}</tbody></table></details>")
        lines.append("</figure>")
        return "\n".join(lines)

    @property
    def section(self) -> str:
        """The page section that shows the chart, by its key: ``memory``, ``time`` or ``cost`` (where the cost goes)."""
        return next((section for section in ("memory", "time") if self.key.startswith(section)), "cost")


Painter = Callable[[], "Canvas"]
