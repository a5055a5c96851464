"""Module-view estimates of work a module performs directly, from the operators observed inside its call.

A composite's forward may do arithmetic of its own (a residual ``+``, ``F.gelu``, ``torch.matmul``) that no child
call covers. The operator recorder feeds each such operator to the call's `DirectWork`, which estimates it
with the functional-op formulas; operators without a formula leave the affected metrics partial.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .results import FUNCTIONAL_OPS, METRIC_UNITS, MODULE_CALL, MetricResult, complete, lower_bound, plain_number


@dataclass(slots=True)
class WorkTotals:
    """What priced operators add up to, by summable field (`SUMMABLE_METRICS`)."""

    module_flops: int | float = 0
    macs: int | float = 0
    dmas: int | float = 0


class DirectWork:
    """Running totals of one call's direct operators: FLOPs, MACs, DMAs, and operators without estimates."""

    __slots__ = ("operators", "totals", "unestimated")

    def __init__(self) -> None:
        self.totals = WorkTotals()
        self.operators = 0
        self.unestimated: dict[Any, int] = {}

    def add_estimate(self, packet: Any, estimate: tuple | None, out: Any = None) -> None:
        """One operator with its functional estimate ``(flops, macs, dmas)`` already made (``None``: none); its
        output ``out`` is read only by `ObservedWork`."""
        self.operators += 1
        if estimate is None:
            self.unestimated[packet] = self.unestimated.get(packet, 0) + 1
            return
        totals = self.totals
        totals.module_flops += estimate[0]
        totals.macs += estimate[1]
        totals.dmas += estimate[2]

    def add_unestimated(self, operator: Any) -> None:
        """An operator that ran directly in the call and that no formula can estimate (a higher-order operator)."""
        self.unestimated[operator] = self.unestimated.get(operator, 0) + 1

    def known(self, field: str) -> int | float:
        """What the estimated operators add up to for ``field``: exact, or a lower bound if some had no formula."""
        return plain_number(getattr(self.totals, field))  # type: ignore[return-value]

    def result(self, field: str) -> MetricResult:
        """``field`` as a result of the call: a lower bound when some operator had no formula."""
        return (lower_bound if self.unestimated else complete)(self.known(field), METRIC_UNITS[field], MODULE_CALL,
                                                                FUNCTIONAL_OPS)


class ObservedWork(DirectWork):
    """`DirectWork` that also remembers every operator it was fed, for the check of a formula that declares its
    operators (`torchscan.operator_check`, `torchscan.inheritance`): calls by packet, the packets that did
    arithmetic (a priced FLOP or MAC), and those whose results were all integer or boolean tensors (index
    arithmetic)."""

    __slots__ = ("arithmetic", "indices", "observed")

    def __init__(self) -> None:
        super().__init__()
        self.observed: dict[Any, int] = {}
        self.arithmetic: set[Any] = set()
        self.indices: set[Any] = set()

    def add_estimate(self, packet: Any, estimate: tuple | None, out: Any = None) -> None:
        """One operator the call ran directly: remembered by packet, then priced as `DirectWork` prices it."""
        first = packet not in self.observed
        self.observed[packet] = self.observed.get(packet, 0) + 1
        if estimate is not None and (estimate[0] or estimate[1]):
            self.arithmetic.add(packet)
        if _integer_results(out):
            if first:
                self.indices.add(packet)
        else:
            self.indices.discard(packet)
        super().add_estimate(packet, estimate)

    def counts(self) -> dict[Any, int]:
        """Operator packet -> calls, higher-order operators (filed as unestimated only) included."""
        return {**self.observed, **{p: n for p, n in self.unestimated.items() if p not in self.observed}}


def _integer_results(out: Any) -> bool:
    """Whether every result of an operator is an integer or boolean tensor (and there is one)."""
    results = out if isinstance(out, (tuple, list)) else (out,)
    tensors = [item for item in results if isinstance(item, torch.Tensor)]
    return bool(tensors) and not any(item.is_floating_point() or item.is_complex() for item in tensors)
