"""torchvision building blocks: stochastic depth, ``ops.misc.Permute``, ConvNeXt's ``LayerNorm2d`` and MaxViT's
window partitioning, matched by qualified name without importing torchvision.

Everything else these models run is plain ``torch.nn`` (convolutions, batch norm, activations, linear layers) or
work their composites do directly (window attention, patch merging), which the functional cost table prices.
"""

from __future__ import annotations

from ..operator_check import ThirdPartyHandler
from .common import (
    NO_SPATIAL_MEANING,
    POINTWISE,
    FamilyRule,
    estimate_layer_norm,
    evaluation_identity,
    handler,
    movement,
    on_input,
    signature,
)

NORM = "formula:torchvision.norm"
SHAPE = "formula:torchvision.shape"
#: ``Permute`` and MaxViT's ``SwapAxes``: a view with its dimensions reordered; each output element is one input
#: element, so the call is pointwise and reads or writes nothing.
AXES_MOVED = movement(POINTWISE, "x")
#: MaxViT's ``WindowPartition`` / ``WindowDepartition``: reshape, permute, reshape. The last reshape copies unless the
#: permuted tensor is already contiguous. Spatial positions are regrouped into windows: receptive fields do not apply.
WINDOWS = movement(NO_SPATIAL_MEANING, "x")

#: Qualified class name -> handler.
HANDLERS: dict[str, ThirdPartyHandler] = {
    "torchvision.ops.stochastic_depth.StochasticDepth": handler(evaluation_identity, SHAPE, signature()),
    "torchvision.ops.misc.Permute": handler(AXES_MOVED, SHAPE, signature()),
    "torchvision.models.maxvit.SwapAxes": handler(AXES_MOVED, SHAPE, signature()),
    # LayerNorm over the channels of an NCHW tensor: permute, F.layer_norm, permute back (views)
    "torchvision.models.convnext.LayerNorm2d": handler(on_input(estimate_layer_norm, "x"), NORM,
                                                       signature("aten.native_layer_norm", optional=("aten.clone",))),
    "torchvision.models.maxvit.WindowPartition": handler(WINDOWS, SHAPE, signature(optional=("aten.clone",))),
    "torchvision.models.maxvit.WindowDepartition": handler(WINDOWS, SHAPE, signature(optional=("aten.clone",))),
}

RULES: tuple[FamilyRule, ...] = ()
