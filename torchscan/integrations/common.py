"""Formula pieces shared by the library modules: reading a call, and the built-in module formulas they reuse.

Third-party blocks are mostly familiar operations in another class (a LayerNorm over channels, a GELU without
``nn.GELU``), so their formulas are the built-in ones, applied to the call's own arguments. This module is the
only place where the integrations reach into `torchscan.formulas`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..formulas.conventions import FLOPS_PER_ELEMENT, GROUP_FLOPS, RMS_FLOPS
from ..formulas.estimates import NO_SPATIAL_MEANING, POINTWISE
from ..formulas.modules.embedding import estimate_embedding
from ..formulas.modules.linear import dense_work
from ..formulas.modules.norm import estimate_group_norm, estimate_layer_norm
from ..handlers import Callback, ModuleCall, ModuleEstimates
from ..operator_check import SignatureSource, ThirdPartyHandler, signature
from ..results import Incomplete

__all__ = [
    "FLOPS_PER_ELEMENT",
    "GROUP_FLOPS",
    "NO_SPATIAL_MEANING",
    "POINTWISE",
    "RMS_FLOPS",
    "FamilyRule",
    "ModuleEstimates",
    "as_positional",
    "dense_work",
    "elementwise",
    "estimate_embedding",
    "estimate_group_norm",
    "estimate_layer_norm",
    "evaluation_identity",
    "first_input",
    "handler",
    "identity",
    "movement",
    "movement_dmas",
    "on_input",
    "real_flops",
    "signature",
]


def handler(callback: Callback, method: str, operators: SignatureSource) -> ThirdPartyHandler:
    """A third-party handler: formula, method label (``formula:<library>.<family>``) and declared operators."""
    return ThirdPartyHandler(callback, method=method, operators=operators)


def first_input(call: ModuleCall, *names: str) -> Any:
    """The call's first argument, passed positionally or under one of ``names``."""
    if call.args:
        return call.args[0]
    for name in names:
        if name in call.kwargs:
            return call.kwargs[name]
    raise TypeError(f"{type(call.module).__qualname__} was called without its input (looked for {names})")


def as_positional(call: ModuleCall, *names: str) -> ModuleCall:
    """The call with its input moved to ``args[0]``, as the built-in formulas read it."""
    if call.args:
        return call
    return ModuleCall(call.module, (first_input(call, *names),), call.kwargs, call.output)


def on_input(estimate: Callable[[ModuleCall], ModuleEstimates], *names: str) -> Callable[[ModuleCall], ModuleEstimates]:
    """A built-in formula for a call that may pass its input under one of ``names`` (see `as_positional`)."""
    return lambda call: estimate(as_positional(call, *names))


def real_flops(flops: int, tensor: torch.Tensor) -> int | None:
    """``flops`` for a floating-point tensor; other dtypes have no stated count (``None``: unavailable, never zero)."""
    return flops if tensor.is_floating_point() else None


def elementwise(per_element: int, *names: str) -> Callable[[ModuleCall], ModuleEstimates]:
    """An elementwise activation: ``per_element`` FLOPs per output element, the input read, the output written."""
    def estimate(call: ModuleCall) -> ModuleEstimates:
        source, result = first_input(call, *(names or ("input", "x"))), call.output
        return {"module_flops": real_flops(per_element * result.numel(), source), "macs": 0,
                "dmas": source.numel() + result.numel(), **POINTWISE}
    return estimate


def storage_root(tensor: torch.Tensor) -> torch.Tensor:
    return tensor._base if tensor._base is not None else tensor


def movement_dmas(source: torch.Tensor, result: torch.Tensor) -> int:
    """0 when the result is a view of the input (or the input itself); one read and one write per element for a
    copy, the convention of the built-in shape formulas."""
    return 0 if storage_root(result) is storage_root(source) else source.numel() + result.numel()


def movement(spatial: ModuleEstimates, *names: str) -> Callable[[ModuleCall], ModuleEstimates]:
    """A block that only moves its input (passed positionally or under one of ``names``): no arithmetic, the
    elements of `movement_dmas`, and the ``spatial`` fields."""
    def estimate(call: ModuleCall) -> ModuleEstimates:
        return {"module_flops": 0, "macs": 0, "dmas": movement_dmas(first_input(call, *names), call.output), **spatial}
    return estimate


def identity(call: ModuleCall) -> ModuleEstimates:
    """Returns its input unchanged (a no-op in evaluation): no arithmetic, no element read or written."""
    return {"module_flops": 0, "macs": 0, "dmas": 0, **POINTWISE}


def evaluation_identity(call: ModuleCall) -> ModuleEstimates:
    """Stochastic depth and its kin: the input itself in evaluation (or at rate 0); in training the work depends on
    random masks no formula models, so it is unavailable, never zero."""
    if call.module.training and _drop_rate(call.module) > 0:
        unknown = Incomplete(reason="in training the work depends on random drop masks, which no formula models")
        return {"module_flops": unknown, "macs": unknown, "dmas": unknown, **POINTWISE}
    return identity(call)


def _drop_rate(module: torch.nn.Module) -> float:
    for name in ("p", "drop_prob"):
        rate = getattr(module, name, None)
        if isinstance(rate, (int, float)):
            return float(rate)
    return 1.0


@dataclass(frozen=True)
class FamilyRule:
    """A documented rule matching many classes of one library to one handler (checked after qualified names).

    ``matches`` sees only the class (never an instance), so the lookup stays one per type; configuration that
    varies per instance is checked by the formula itself and, as always, by the operator check.
    """

    name: str
    description: str
    matches: Callable[[type], bool]
    handler: ThirdPartyHandler
