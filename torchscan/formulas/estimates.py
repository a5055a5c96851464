"""Estimate values that many built-in formulas share, typed as `torchscan.handlers.ModuleEstimates` so that they
can be spread into one: `POINTWISE`, `NO_SPATIAL_MEANING` and `every_field`."""

from __future__ import annotations

from types import MappingProxyType
from typing import Final, cast

from ..handlers import ModuleEstimates
from ..results import METRIC_UNITS, NOT_APPLICABLE, POINTWISE_SPATIAL, SPATIAL_METRICS, Incomplete

#: `POINTWISE_SPATIAL` (receptive field 1, stride 1, padding 0), typed as the fields it holds.
POINTWISE: Final = cast(ModuleEstimates, POINTWISE_SPATIAL)
#: The spatial fields of a call that reorganizes spatial positions (flattened grids, windows, a ragged batch of
#: bags): not applicable. Read-only, like `POINTWISE`.
NO_SPATIAL_MEANING: Final = cast(ModuleEstimates, MappingProxyType(dict.fromkeys(SPATIAL_METRICS, NOT_APPLICABLE)))


def every_field(value: Incomplete | None) -> ModuleEstimates:
    """Every field of `METRIC_UNITS` set to ``value``: ``None`` (nothing known) or one lower bound for all."""
    return cast(ModuleEstimates, dict.fromkeys(METRIC_UNITS, value))
