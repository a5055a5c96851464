"""Module-view estimates of operators executed directly inside a module call (residual adds, F.gelu, matmul).

Each estimator receives the operator's raw ``args``, ``kwargs`` and output and returns ``(flops, macs, dmas)``,
or ``None`` when it cannot vouch for the call (an unsupported dtype, for instance).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

aten = torch.ops.aten

Estimate = tuple[float, float, float]
FunctionalEstimator = Callable[[tuple, dict, Any], "Estimate | None"]

#: ATen operator packet -> estimator (filled per operator family).
FUNCTIONAL_ESTIMATES: dict[object, FunctionalEstimator] = {}
