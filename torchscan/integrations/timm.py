"""timm building blocks: ``timm.layers`` norms, activations, layer scales, drop path and pooling, plus the small
shape blocks of individual models (PoolFormer, EfficientFormer, LeViT).

Matched by qualified name without importing timm. Subclasses that keep the forward (``LayerNorm2dNoBias``,
``GroupNorm1NoBias``) reach their base class's handler through the MRO. Norms reuse the built-in formulas of the
``torch.nn`` class they re-implement; timm's "fast norm" path runs other operators and fails the operator check.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import Any

from ..handlers import ModuleCall, ModuleEstimates
from ..operator_check import OperatorSignature, ThirdPartyHandler
from .common import (
    FLOPS_PER_ELEMENT,
    NO_SPATIAL_MEANING,
    POINTWISE,
    FamilyRule,
    elementwise,
    estimate_group_norm,
    estimate_layer_norm,
    evaluation_identity,
    first_input,
    handler,
    movement,
    movement_dmas,
    on_input,
    real_flops,
    signature,
)

NORM = "formula:timm.norm"
ACTIVATION = "formula:timm.activation"
SCALE = "formula:timm.scale"
SHAPE = "formula:timm.shape"
POOLING = "formula:timm.pooling"


def _inplace(name: str) -> Callable[[ModuleCall], OperatorSignature]:
    """The operator signature of ``x.name(...)``, or of ``x.name_(...)`` when the module works in place."""
    return lambda call: signature(f"aten.{name}_" if getattr(call.module, "inplace", False) else f"aten.{name}")


def _swish_signature(call: ModuleCall) -> OperatorSignature:
    return signature("aten.sigmoid", "aten.mul_" if call.module.inplace else "aten.mul")


def _scale(parameter: str) -> Callable[[ModuleCall], ModuleEstimates]:
    """``x * gamma``, one learned scale per channel: one multiply per element; input, scales and output read once."""
    def estimate(call: ModuleCall) -> ModuleEstimates:
        source, output = first_input(call, "x"), call.output
        scales = getattr(call.module, parameter).numel()
        return {"module_flops": real_flops(output.numel(), source), "macs": 0,
                "dmas": source.numel() + scales + output.numel(), **POINTWISE}
    return estimate


def _levit_downsample(call: ModuleCall) -> ModuleEstimates:
    """LeViT's token subsampling on its ``resolution`` grid: every ``stride``-th token along both axes (or a 3x3
    average pool child, which counts its own work). The strided tokens are copied into a contiguous sequence:
    one read and one write per output element. Along each grid axis: window 1 (3 with the pool), stride
    ``stride``, padding 0 (1 with the pool)."""
    module: Any = call.module  # a timm class, matched by name: its attributes are not typed here
    source, output = first_input(call, "x"), call.output
    copied = 0 if movement_dmas(source, output) == 0 else 2 * output.numel()
    pool = module.pool
    window, padding = (pool.kernel_size, pool.padding) if pool is not None else (1, 0)
    return {"module_flops": 0, "macs": 0, "dmas": copied,
            "receptive_field": window, "effective_stride": module.stride, "effective_padding": padding}


def _fast_adaptive_avg_pool(call: ModuleCall) -> ModuleEstimates:
    """``x.mean(spatial dims)``: global average pooling, m FLOPs per window of m elements (m - 1 additions, one
    division), the input read and the pooled output written; the window is the whole spatial extent."""
    source, output = first_input(call, "x"), call.output
    module: Any = call.module  # a timm class, matched by name: its attributes are not typed here
    extent = [source.shape[dim] for dim in module.dim]
    return {"module_flops": real_flops(source.numel(), source), "macs": 0,
            "dmas": source.numel() + output.numel(),
            "receptive_field": extent, "effective_stride": extent, "effective_padding": [0] * len(extent)}


def _global_response_norm(call: ModuleCall) -> ModuleEstimates:
    """ConvNeXt-V2's GRN, ``x + bias + weight * (x * n)`` with ``n = g / (mean_c(g) + eps)`` and ``g`` the 2-norm of
    every (sample, channel) over spatial positions: the norms (2 per element: square, accumulate, and a root),
    their channel mean (1 per norm), eps (1 per sample), the division (1 per norm), then multiply, multiply-add
    and the residual add (4 per element). Reads the input and both parameter vectors, writes the output. A global
    normalizer, like the other norms: pointwise."""
    module: Any = call.module  # a timm class, matched by name: its attributes are not typed here
    source = first_input(call, "x")
    elements = source.numel()
    spatial = prod(source.shape[dim] for dim in module.spatial_dim)
    norms = elements // spatial if spatial else 0
    flops = 6 * elements + 2 * norms + source.shape[0]
    return {"module_flops": real_flops(flops, source), "macs": 0,
            "dmas": 2 * elements + module.weight.numel() + module.bias.numel(), **POINTWISE}


#: Norm kernels may copy a non-contiguous input first (PyTorch's meta kernels do): a layout detail, not counted.
CONTIGUOUS_COPY = ("aten.clone",)
#: LayerNorm over the last dimension, or over channels of an NCHW tensor (permuted around the norm).
LAYER_NORM = handler(on_input(estimate_layer_norm, "x"), NORM,
                     signature("aten.native_layer_norm", optional=CONTIGUOUS_COPY))
GROUP_NORM = handler(on_input(estimate_group_norm, "x"), NORM,
                     signature("aten.native_group_norm", optional=CONTIGUOUS_COPY))
LAYER_SCALE = handler(_scale("gamma"), SCALE, _inplace("mul"))

#: Qualified class name -> handler.
HANDLERS: dict[str, ThirdPartyHandler] = {
    "timm.layers.norm.LayerNorm": LAYER_NORM,
    "timm.layers.norm.LayerNorm2d": LAYER_NORM,
    "timm.layers.norm.GroupNorm": GROUP_NORM,
    "timm.layers.norm.GroupNorm1": GROUP_NORM,
    "timm.layers.grn.GlobalResponseNorm": handler(_global_response_norm, NORM, signature(
        "aten.linalg_vector_norm", "aten.mean", "aten.add", "aten.add", "aten.div", "aten.mul", "aten.addcmul")),
    "timm.layers.activations.GELU": handler(elementwise(FLOPS_PER_ELEMENT["gelu"]), ACTIVATION,
                                            signature("aten.gelu")),
    "timm.layers.activations.GELUTanh": handler(elementwise(FLOPS_PER_ELEMENT["gelu_tanh"]), ACTIVATION,
                                                signature("aten.gelu")),
    # x * sigmoid(1.702 * x)
    "timm.layers.activations.QuickGELU": handler(elementwise(2 + FLOPS_PER_ELEMENT["sigmoid"]),
                                                 ACTIVATION, signature("aten.mul", "aten.mul", "aten.sigmoid")),
    "timm.layers.activations.Sigmoid": handler(elementwise(FLOPS_PER_ELEMENT["sigmoid"]), ACTIVATION,
                                               _inplace("sigmoid")),
    "timm.layers.activations.Tanh": handler(elementwise(FLOPS_PER_ELEMENT["tanh"]), ACTIVATION,
                                            _inplace("tanh")),
    # x * sigmoid(x), written out
    "timm.layers.activations.Swish": handler(elementwise(FLOPS_PER_ELEMENT["silu"]), ACTIVATION,
                                             _swish_signature),
    "timm.layers.layer_scale.LayerScale": LAYER_SCALE,
    "timm.layers.layer_scale.LayerScale2d": LAYER_SCALE,
    "timm.models.metaformer.Scale": handler(_scale("scale"), SCALE, signature("aten.mul")),
    "timm.layers.drop.DropPath": handler(evaluation_identity, SHAPE, signature()),
    "timm.layers.adaptive_avgmax_pool.FastAdaptiveAvgPool": handler(_fast_adaptive_avg_pool, POOLING,
                                                                    signature("aten.mean")),
    # EfficientFormer's x.flatten(2).transpose(1, 2): image to tokens (a view), the grid flattened to one token axis
    "timm.models.efficientformer.Flat": handler(movement(NO_SPATIAL_MEANING, "x"), SHAPE, signature()),
    # the reshape after subsampling copies (clone) unless the result happens to be contiguous
    "timm.models.levit.Downsample": handler(_levit_downsample, SHAPE, signature(optional=("aten.clone",))),
}

RULES: tuple[FamilyRule, ...] = ()
