"""The values the charts draw: a number with its status (exact, lower bound, unavailable), sums and label text."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ...formatting import format_count

if TYPE_CHECKING:
    from ...views import Cell


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
