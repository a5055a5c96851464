"""The type of what a built-in formula returns: the estimate fields, with every value a handler may give.

`torchscan.handlers.ModuleEstimates` lists numbers, MetricResults and ``None``; a handler may also give
`Incomplete` (a lower bound) and, for a spatial field, `NOT_APPLICABLE` (see the schema page), and the built-in
formulas do. `Estimates` is that wider mapping; `POINTWISE` and `NO_SPATIAL_MEANING` are shared spatial fields,
typed as such so that they can be spread into one.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType
from typing import Any, Final, TypedDict, cast

from ..results import (
    METRIC_UNITS,
    NOT_APPLICABLE,
    POINTWISE_SPATIAL,
    SPATIAL_METRICS,
    Incomplete,
    MetricResult,
    _NotApplicable,
)

#: A summable field: a count, a lower bound, a MetricResult, or ``None`` (unavailable).
Count = float | Incomplete | MetricResult | None
#: A spatial field: one number or one per spatial dimension, a lower bound, not applicable, a MetricResult, or None.
Spatial = float | Sequence[float] | Incomplete | _NotApplicable | MetricResult | None


class Estimates(TypedDict, total=False):
    """The fields a formula estimates (any subset), and optionally the ``breakdown`` of its FLOPs and MACs."""

    module_flops: Count
    macs: Count
    dmas: Count
    receptive_field: Spatial
    effective_stride: Spatial
    effective_padding: Spatial
    breakdown: list[dict[str, Any]]


#: `POINTWISE_SPATIAL` (receptive field 1, stride 1, padding 0), typed as the fields it holds.
POINTWISE: Final = cast(Estimates, POINTWISE_SPATIAL)
#: The spatial fields of a call that reorganizes spatial positions (flattened grids, windows, a ragged batch of
#: bags): not applicable. Read-only, like `POINTWISE`.
NO_SPATIAL_MEANING: Final = cast(Estimates, MappingProxyType(dict.fromkeys(SPATIAL_METRICS, NOT_APPLICABLE)))


def every_field(value: Incomplete | None) -> Estimates:
    """Every field of `METRIC_UNITS` set to ``value``: ``None`` (nothing known) or one lower bound for all."""
    return cast(Estimates, dict.fromkeys(METRIC_UNITS, value))
