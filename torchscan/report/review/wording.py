"""Words around numbers in the command's messages and pages: ``1 entry``, ``3 entries``, ``1,000 runs``.

A count in prose is written in full with thousands separators (``1,000 runs``, never ``1k runs``): the short
``1k`` style belongs to table cells of costs, where a reader compares magnitudes, not to sentences.
"""

from __future__ import annotations


def count_text(count: int) -> str:
    """``1000`` -> ``"1,000"``: a count in prose, in full with thousands separators."""
    return f"{count:,}"


def plural(count: int, singular: str, many: str = "") -> str:
    """``1 entry`` / ``1,000 entries``: the count (in full) and the noun that agrees with it; ``many`` defaults
    to ``singular + "s"``."""
    return f"{count_text(count)} {singular if count == 1 else many or singular + 's'}"
