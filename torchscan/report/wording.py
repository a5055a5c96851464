"""Words around numbers in the command's messages and pages: ``1 entry``, ``3 entries``."""

from __future__ import annotations

from ..views.formatting import format_count


def plural(count: int, singular: str, many: str = "") -> str:
    """``1 entry`` / ``2 entries``: the count (formatted as every count is) and the noun that agrees with it;
    ``many`` defaults to ``singular + "s"``."""
    return f"{format_count(count)} {singular if count == 1 else many or singular + 's'}"
