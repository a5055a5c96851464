"""Counts agree with their nouns in every message: ``1 entry``, ``2 entries``, ``0 runs``."""

from __future__ import annotations

import pytest

from torchscan.report.wording import plural
from torchscan.views.formatting import format_count


@pytest.mark.parametrize("count, singular, many, text", [
    (1, "entry", "entries", "1 entry"), (2, "entry", "entries", "2 entries"), (0, "run", "", "0 runs"),
    (1, "run", "", "1 run"),
])
def test_plural(count: int, singular: str, many: str, text: str) -> None:
    assert plural(count, singular, many) == text


def test_a_large_count_is_formatted_as_every_count_is() -> None:
    assert plural(12_500, "check") == f"{format_count(12_500)} checks"
