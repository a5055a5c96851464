"""The values the charts draw: a number with its status (exact, lower bound, unavailable), sums and label text."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ....views.formatting import PARAMETER_SCALES, SCALES, format_count, format_percent
from ...review.wording import plural

if TYPE_CHECKING:
    from ....views import Cell

#: ``1 call``, ``5 calls``, ``1,200 calls``: a count in prose, worded as in every message and page.
counted = plural


@dataclass(frozen=True)
class Amount:
    """A value to draw: ``known`` is exact (complete), a lower bound (partial), or nothing (unavailable)."""

    known: float = 0.0
    status: str = "complete"
    #: The suffixes it is written with: `SCALES` for costs, `PARAMETER_SCALES` (``8.03B``) for parameter counts.
    scales: tuple[tuple[float, str], ...] = SCALES
    #: Written after the number: ``B`` for bytes (``1.2MB``), nothing for counts.
    unit: str = ""

    @property
    def drawn(self) -> bool:
        return self.status != "unavailable"

    @property
    def text(self) -> str:
        """As the tables write numbers (``1.81G``, ``≥16``, ``n/a``)."""
        if self.status == "unavailable":
            return "n/a"
        return ("≥" if self.status == "partial" else "") + format_count(self.known, self.scales) + self.unit


def amount_of(cell: Cell | None) -> Amount | None:
    """The drawable amount of a view cell; ``None`` when the cell holds no estimate (empty or covered)."""
    if cell is None or cell.status in ("empty", "covered"):
        return None
    if cell.status in ("complete", "partial"):
        return Amount(float(cell.sort or 0), cell.status)
    return Amount(0.0, "unavailable")


def bytes_amount(cell: Cell) -> Amount:
    """A byte count to draw (``1.2MB``); an unknown one is unavailable: listed as n/a, never drawn as zero."""
    return replace(amount_of(cell) or Amount(0.0, "unavailable"), unit="B")


def total_of(amounts: Sequence[Amount]) -> Amount:
    """The sum: exact when every part is, unavailable when no part is known, a lower bound otherwise."""
    known = sum(amount.known for amount in amounts)
    scales = amounts[0].scales if amounts else SCALES
    if all(amount.status == "complete" for amount in amounts):
        return Amount(known, scales=scales)
    if all(amount.status == "unavailable" for amount in amounts):
        return Amount(0.0, "unavailable", scales)
    return Amount(known, "partial", scales)


def share_text(part: Amount, whole: Amount) -> str:
    """The part's share of the counted whole; a lower-bound part reads as at least that share."""
    if not part.drawn or whole.known <= 0:
        return "—"
    return ("≥" if part.status == "partial" else "") + format_percent(100 * part.known / whole.known)


def ranked(items: Sequence[tuple[str, Amount]]) -> list[tuple[str, Amount]]:
    """Largest known amount first, unavailable ones last, ties by name (stable output)."""
    return sorted(items, key=lambda item: (not item[1].drawn, -item[1].known, item[0]))


def tick_text(value: float, scales: tuple[tuple[float, str], ...] = SCALES) -> str:
    """Axis and bar labels in the tables' units: ``0``, ``500``, ``1.5M``, ``−2G``; parameter axes (``scales=
    PARAMETER_SCALES``) write billions ``B``, as the parameter columns do."""
    return ("−" if value < 0 else "") + format_count(abs(value), scales)


def parameter_amount(count: float) -> Amount:
    """A parameter count to draw, written as the parameter columns write it (``8.03B``)."""
    return Amount(float(count), scales=PARAMETER_SCALES)


def shorten(text: str, limit: int) -> str:
    """Long labels keep their end, the informative part of a dotted path."""
    return text if len(text) <= limit else "…" + text[-(limit - 1):]
