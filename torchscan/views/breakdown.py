"""The "of which" rows of a subtree owner: the parts of its inclusive estimate, already included in it.

A handler that owns its subtree (native attention, a Transformer layer or stack) may report how its estimate splits
into parts (``layer["breakdown"]`` in the report, see `torchscan.breakdown`). The views show each part under its
owner, and nothing ever adds a part to a total again.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..results import SUMMABLE_METRICS
from .cells import EMPTY, Cell, metric_cell


@dataclass(frozen=True)
class PartRow:
    """One part of an owner's estimate: where it happens (``path``, absolute) and what it is (``part``)."""

    owner: str
    path: str
    module: str
    part: str
    cells: dict[str, Cell]

    @property
    def label(self) -> str:
        """``of which layers.0.self_attn: attention projections`` (the module relative to the owner)."""
        return f"of which {self.module + ': ' if self.module else ''}{self.part}"

    def cell(self, key: str) -> Cell:
        return self.cells.get(key, EMPTY)


def part_rows(owner: str, owner_path: str, breakdown: list[dict[str, Any]]) -> list[PartRow]:
    """The owner's parts in the order its handler reported them."""
    return [PartRow(owner=owner, path=".".join(filter(None, (owner_path, item["module"]))), module=item["module"],
                    part=item["part"],
                    cells={name: _part_cell(owner, item[name]) for name in SUMMABLE_METRICS if name in item})
            for item in breakdown]


def _part_cell(owner: str, result: dict[str, Any]) -> Cell:
    cell = metric_cell(result)
    return replace(cell, note=f"part of {owner}'s estimate, already included in it; {cell.note}")
