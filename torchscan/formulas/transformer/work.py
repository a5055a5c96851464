"""The inclusive estimate of a native attention or Transformer call: additive work, and the six report fields.

`Work` adds up the FLOPs, MACs and DMAs of the parts of a call and remembers which metrics some part knows
only as a lower bound or not at all; `estimates` turns it, with the call's token receptive field, into the
six fields of a handler that owns its whole subtree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

import torch
from torch import nn

from ...handlers import Count, ModuleCall, ModuleEstimates, Spatial
from ...results import METRIC_UNITS, SUMMABLE_METRICS, Incomplete
from .calls import UnsupportedCall
from .token_dependencies import MaskValuesUnknown

METHOD = "formula:transformer"
SUBTREE_METRICS = frozenset(METRIC_UNITS)
SUMMABLE = frozenset(SUMMABLE_METRICS)


@dataclass(frozen=True)
class Work:
    """Additive FLOPs, MACs and DMAs of part of a call, with the metrics it knows only partly or not at all.

    ``lower_bound`` metrics count known work but leave some out; ``unknown`` metrics count nothing. Adding a
    known part to an unknown one gives a lower bound, never a complete count. ``gaps`` says in words which parts
    are left out (a child without a built-in formula); the diagnostic about an incomplete field quotes them.
    """

    flops: int = 0
    macs: int = 0
    dmas: int = 0
    lower_bound: frozenset[str] = frozenset()
    unknown: frozenset[str] = frozenset()
    gaps: tuple[str, ...] = ()

    def __add__(self, other: Work) -> Work:
        unknown = self.unknown & other.unknown
        incomplete = self.lower_bound | other.lower_bound | self.unknown | other.unknown
        gaps = self.gaps + tuple(gap for gap in other.gaps if gap not in self.gaps)
        return Work(self.flops + other.flops, self.macs + other.macs, self.dmas + other.dmas,
                    frozenset(incomplete - unknown), unknown, gaps)

    def at_least(self, metrics: frozenset[str]) -> Work:
        """The same counts, known to leave out some work for ``metrics``."""
        return replace(self, lower_bound=self.lower_bound | (metrics - self.unknown))

    def without(self, metrics: frozenset[str]) -> Work:
        """Nothing known for ``metrics`` (their counts are dropped)."""
        def kept(name: str, count: int) -> int:
            return 0 if name in metrics else count
        return replace(self, flops=kept("module_flops", self.flops), macs=kept("macs", self.macs),
                       dmas=kept("dmas", self.dmas), lower_bound=self.lower_bound - metrics,
                       unknown=self.unknown | metrics)

    def missing(self, gap: str) -> Work:
        """The same work, with ``gap`` named among the parts it leaves out."""
        return replace(self, gaps=(*self.gaps, gap))


UNKNOWN = Work(unknown=SUMMABLE)


def total(parts: list[Work]) -> Work:
    return sum(parts, Work())


# --- report fields --------------------------------------------------------------------------------------------


def _field(work: Work, name: str, value: int, reason: str | None) -> Count:
    """One summable metric as a handler value: a count, a lower bound or nothing known."""
    if name in work.unknown:
        return Incomplete(None, reason) if reason else None
    if name in work.lower_bound:
        return Incomplete(value, reason)
    return value


def summable_fields(work: Work) -> ModuleEstimates:
    """FLOPs, MACs and DMAs as handler values: a count, a lower bound or nothing known, naming what is missing."""
    reason = "; ".join(work.gaps) or None
    return {"module_flops": _field(work, "module_flops", work.flops, reason),
            "macs": _field(work, "macs", work.macs, reason),
            "dmas": _field(work, "dmas", work.dmas, reason)}


def token_fields(width: Callable[[], tuple[int, bool]]) -> ModuleEstimates:
    """Receptive field in tokens (exact, a lower bound, or unavailable without mask values); stride 1, padding 0."""
    try:
        value, exact = width()
    except (MaskValuesUnknown, UnsupportedCall):
        receptive: Spatial = None
    else:
        receptive = value if exact else Incomplete(value)
    return {"receptive_field": receptive, "effective_stride": 1, "effective_padding": 0}


def _dropout_active(module: nn.Module) -> bool:
    """Training-mode dropout anywhere in the subtree (never under the crawler, which runs eval). The subtree is
    walked through a stack, not ``modules()``, whose nested generators cost more than the formula (every call)."""
    pending = [module]
    while pending:
        child = pending.pop()
        if child.training and (isinstance(child, nn.MultiheadAttention) and child.dropout > 0
                               or isinstance(child, nn.modules.dropout._DropoutNd) and child.p > 0):
            return True
        pending.extend(grandchild for grandchild in child._modules.values() if grandchild is not None)
    return False


def _bounded(work: Work, dtype: torch.dtype, dropout: bool) -> Work:
    """The call-wide boundaries of a formula: no FLOPs or MACs for integer inputs, a lower bound under training-mode
    ``dropout`` (`_dropout_active`, walked once per call)."""
    if not dtype.is_floating_point:
        work = work.without(frozenset({"module_flops", "macs"}))
    if dropout:
        work = work.at_least(frozenset({"module_flops", "dmas"}))
    return work


def estimates(call: ModuleCall, parts: Callable[[], list[tuple[str, str, Work]]], width: Callable[[], tuple[int, bool]],
              dtype: torch.dtype, work: Callable[[], Work] | None = None) -> ModuleEstimates:
    """The six fields, and the ``breakdown`` of the FLOPs and MACs: ``(module, part, work)`` triples, each under
    the call-wide boundaries (see `torchscan.breakdown`). The parts are priced once and their sum is the call's work;
    a call whose parts cannot be listed (`UnsupportedCall`: a custom layer, encoder or decoder) has no breakdown, and
    ``work`` prices what it can of it (nothing is known without one)."""
    dropout = _dropout_active(call.module)
    try:
        found = parts()
    except UnsupportedCall:
        found = None
    counted = total([part for _, _, part in found]) if found is not None else _unlisted(work)
    fields: ModuleEstimates = {**summable_fields(_bounded(counted, dtype, dropout)), **token_fields(width)}
    if found is not None:
        fields["breakdown"] = [_part_fields(module, name, _bounded(part, dtype, dropout)) for module, name, part in found]
    return fields


def _unlisted(work: Callable[[], Work] | None) -> Work:
    try:
        return UNKNOWN if work is None else work()
    except UnsupportedCall:
        return UNKNOWN


#: The metrics a breakdown splits: FLOPs and MACs (the DMAs of attention's intermediates belong to no one part).
PART_METRICS: tuple[Literal["module_flops", "macs"], ...] = ("module_flops", "macs")


def _part_fields(module: str, name: str, work: Work) -> dict[str, Any]:
    values = summable_fields(work)
    return {"part": name, "module": module, **{key: values[key] for key in PART_METRICS}}
