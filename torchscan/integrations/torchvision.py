"""torchvision building blocks: stochastic depth, ``ops.misc.Permute``, ConvNeXt's ``LayerNorm2d`` and MaxViT's
window partitioning, matched by qualified name without importing torchvision.

Everything else these models run is plain ``torch.nn`` (convolutions, batch norm, activations, linear layers) or
work their composites do directly (window attention, patch merging), which the functional cost table prices.
"""

from __future__ import annotations

from ..handlers import ModuleCall, ModuleEstimates
from ..operator_check import ThirdPartyHandler
from .common import (
    NO_SPATIAL_MEANING,
    POINTWISE,
    FamilyRule,
    as_positional,
    estimate_layer_norm,
    evaluation_identity,
    first_input,
    handler,
    movement_dmas,
    signature,
)

NORM = "formula:torchvision.norm"
SHAPE = "formula:torchvision.shape"


def _layer_norm_2d(call: ModuleCall) -> ModuleEstimates:
    """LayerNorm over the channels of an NCHW tensor: permute, ``F.layer_norm``, permute back (views)."""
    return estimate_layer_norm(as_positional(call, "x"))


def _axes_moved(call: ModuleCall) -> ModuleEstimates:
    """``Permute`` and MaxViT's ``SwapAxes``: a view with its dimensions reordered; each output element is one
    input element, so the call is pointwise and reads or writes nothing."""
    source = first_input(call, "x")
    return {"module_flops": 0, "macs": 0, "dmas": movement_dmas(source, call.output), **POINTWISE}


def _windows(call: ModuleCall) -> ModuleEstimates:
    """MaxViT's ``WindowPartition`` / ``WindowDepartition``: reshape, permute, reshape. The last reshape copies
    (one read and one write per element) unless the permuted tensor is already contiguous. Spatial positions are
    regrouped into windows, so receptive fields have no meaning here."""
    source = first_input(call, "x")
    return {"module_flops": 0, "macs": 0, "dmas": movement_dmas(source, call.output), **NO_SPATIAL_MEANING}


#: Qualified class name -> handler.
HANDLERS: dict[str, ThirdPartyHandler] = {
    "torchvision.ops.stochastic_depth.StochasticDepth": handler(evaluation_identity, SHAPE, signature()),
    "torchvision.ops.misc.Permute": handler(_axes_moved, SHAPE, signature()),
    "torchvision.models.maxvit.SwapAxes": handler(_axes_moved, SHAPE, signature()),
    "torchvision.models.convnext.LayerNorm2d": handler(_layer_norm_2d, NORM,
                                                       signature("aten.native_layer_norm", optional=("aten.clone",))),
    "torchvision.models.maxvit.WindowPartition": handler(_windows, SHAPE, signature(optional=("aten.clone",))),
    "torchvision.models.maxvit.WindowDepartition": handler(_windows, SHAPE, signature(optional=("aten.clone",))),
}

RULES: tuple[FamilyRule, ...] = ()
