"""The ``--models`` filter that the benchmark scripts share."""

from __future__ import annotations

from collections.abc import Iterable


def selected(filter_text: str | None, names: Iterable[str]) -> list[str]:
    """The names that contain any comma-separated part of ``filter_text`` (all of them when it is empty)."""
    names = list(names)
    if not filter_text:
        return names
    parts = [part.strip() for part in filter_text.split(",") if part.strip()]
    kept = [name for name in names if any(part in name for part in parts)]
    if not kept:
        raise SystemExit(f"--models {filter_text!r} matches none of: {', '.join(names)}")
    return kept
