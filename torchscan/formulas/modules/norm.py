"""Module estimates for normalization layers.

A normalization standardizes groups of elements with a mean and an inverse standard deviation, then optionally
scales and shifts them. The cost of each step is counted per element (tables below), plus two FLOPs per
normalized group for ``rsqrt(var + eps)``. Normalization does no dot products: MACs are 0.

Receptive fields are reported as pointwise (1 / 1 / 0): statistics shared across positions are a global
normalizer, not a local window (LocalResponseNorm's window spans channels, never spatial positions).
"""

from __future__ import annotations

from math import prod
from typing import NamedTuple, cast

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.instancenorm import _InstanceNorm

from ...handlers import Count, ModuleCall, ModuleEstimates, ModuleHandler
from ...results import Incomplete
from ..conventions import (
    GROUP_FLOPS,
    LRN_FLOPS,
    MEAN_FLOPS,
    NORMALIZE_FLOPS,
    RMS_FLOPS,
    RUNNING_UPDATE_FLOPS,
    VARIANCE_FLOPS,
)
from ..estimates import POINTWISE
from .linear import registered

METHOD = "formula:norm"


class NormWork(NamedTuple):
    """What one normalization call does, in element counts (a named tuple: one is built for every normalization
    call whose estimate is computed, and a frozen dataclass sets each field through ``object.__setattr__``)."""

    elements: int                  # input elements (= output elements)
    per_element_flops: int         # FLOPs spent on every element
    groups: int                    # normalized groups: one rsqrt(var + eps) each
    state_reads: int               # parameter and buffer elements read
    extra_flops: int = 0           # running-statistics update in training mode
    state_writes: int = 0          # buffer elements written by that update
    exact: bool = True             # False: some work is known to be left out (a lower bound)

    def flops(self) -> int:
        return self.elements * self.per_element_flops + self.groups * GROUP_FLOPS + self.extra_flops

    def dmas(self) -> int:
        return 2 * self.elements + self.state_reads + self.state_writes


def standardize_flops(batch_statistics: bool, affine_ops: int) -> int:
    """Per element: statistics (when computed from the input), normalization, then the affine ops."""
    statistics = MEAN_FLOPS + VARIANCE_FLOPS if batch_statistics else 0
    return statistics + NORMALIZE_FLOPS + affine_ops


def _affine_ops(module: nn.Module) -> int:
    """One multiply for a weight, one add for a bias, per element."""
    return int(registered(module, "weight") is not None) + int(registered(module, "bias") is not None)


def _affine_reads(module: nn.Module) -> int:
    return sum(tensor.numel() for tensor in (registered(module, "weight"), registered(module, "bias"))
               if tensor is not None)


def _groups(elements: int, group_size: int) -> int:
    return elements // group_size if group_size else 0


def _estimates(work: NormWork, source: torch.Tensor) -> ModuleEstimates:
    """The six fields; FLOPs need a real floating-point input, a lower bound where work is left out."""
    flops: Count = work.flops() if work.exact else Incomplete(work.flops())
    dmas: Count = work.dmas() if work.exact else Incomplete(work.dmas())
    if not source.is_floating_point():
        flops = None
    return {"module_flops": flops, "macs": 0, "dmas": dmas, **POINTWISE}


def _syncs_across_processes(module: nn.Module) -> bool:
    """SyncBatchNorm in training under an initialized process group also reduces statistics across ranks."""
    return (isinstance(module, nn.SyncBatchNorm) and module.training and dist.is_available()
            and dist.is_initialized())


def estimate_batch_norm(call: ModuleCall) -> ModuleEstimates:
    """Running statistics in eval; batch statistics in training or without buffers (then also counted)."""
    # HANDLERS registers each formula of this module for the classes it names only.
    module, source = cast(_BatchNorm, call.module), call.argument(0, "input")
    channels = module.num_features
    has_buffers = registered(module, "running_mean") is not None and registered(module, "running_var") is not None
    batch_statistics = module.training or not has_buffers
    updates = module.training and has_buffers
    counter = updates and registered(module, "num_batches_tracked") is not None
    work = NormWork(
        elements=source.numel(),
        per_element_flops=standardize_flops(batch_statistics, _affine_ops(module)),
        groups=channels,
        state_reads=_affine_reads(module) + (2 * channels if has_buffers else 0) + int(counter),
        extra_flops=RUNNING_UPDATE_FLOPS * channels if updates else 0,
        state_writes=(2 * channels if updates else 0) + int(counter),
        exact=not _syncs_across_processes(module),
    )
    return _estimates(work, source)


BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)
INSTANCE_NORM_SPATIAL_DIMS: dict[type[nn.Module], int] = {
    nn.InstanceNorm1d: 1,
    nn.InstanceNorm2d: 2,
    nn.InstanceNorm3d: 3,
}


def _spatial_dims(module: nn.Module) -> int:
    for klass in type(module).__mro__:
        if klass in INSTANCE_NORM_SPATIAL_DIMS:
            return INSTANCE_NORM_SPATIAL_DIMS[klass]
    raise KeyError(f"{type(module).__qualname__} is not an instance norm")


def estimate_instance_norm(call: ModuleCall) -> ModuleEstimates:
    """Statistics per (sample, channel) over spatial positions; running statistics only if tracked, in eval.

    A training-mode running-statistics update (track_running_stats=True) is not counted: a lower bound.
    """
    module, source = cast(_InstanceNorm, call.module), call.argument(0, "input")
    shape = tuple(source.shape)
    spatial = _spatial_dims(module)
    channels = shape[-spatial - 1]
    batch_statistics = module.training or not module.track_running_stats
    work = NormWork(
        elements=source.numel(),
        per_element_flops=standardize_flops(batch_statistics, _affine_ops(module)),
        groups=_groups(source.numel(), prod(shape[-spatial:])) if batch_statistics else channels,
        state_reads=_affine_reads(module) + (2 * channels if module.track_running_stats else 0),
        exact=not (module.training and module.track_running_stats),
    )
    return _estimates(work, source)


def _per_group(module: nn.Module, source: torch.Tensor, group_size: int, per_element_flops: int) -> ModuleEstimates:
    """Statistics computed per group of ``group_size`` elements, then the module's optional weight and bias."""
    elements = source.numel()
    work = NormWork(elements, per_element_flops, _groups(elements, group_size), _affine_reads(module))
    return _estimates(work, source)


def estimate_layer_norm(call: ModuleCall) -> ModuleEstimates:
    """Statistics over the trailing ``normalized_shape`` dimensions; optional weight and bias."""
    module, source = cast(nn.LayerNorm, call.module), call.argument(0, "input")
    return _per_group(module, source, prod(module.normalized_shape), standardize_flops(True, _affine_ops(module)))


def estimate_group_norm(call: ModuleCall) -> ModuleEstimates:
    """Statistics per (sample, group of channels) over those channels and all spatial positions."""
    module, source = cast(nn.GroupNorm, call.module), call.argument(0, "input")
    group_size = module.num_channels // module.num_groups * prod(source.shape[2:])
    return _per_group(module, source, group_size, standardize_flops(True, _affine_ops(module)))


def estimate_rms_norm(call: ModuleCall) -> ModuleEstimates:
    """x * rsqrt(mean(x^2) + eps) (* weight): no mean subtraction, no bias."""
    module, source = cast(nn.RMSNorm, call.module), call.argument(0, "x")
    return _per_group(module, source, prod(module.normalized_shape), RMS_FLOPS + _affine_ops(module))


def estimate_local_response_norm(call: ModuleCall) -> ModuleEstimates:
    """x / (k + alpha * mean of squares over ``size`` neighbouring channels) ** beta.

    The window sum is charged size - 1 additions for every element, as PyTorch's zero-padded average computes it.
    """
    module, source = cast(nn.LocalResponseNorm, call.module), call.argument(0, "input")
    work = NormWork(elements=source.numel(), per_element_flops=module.size - 1 + LRN_FLOPS, groups=0, state_reads=0)
    return _estimates(work, source)


HANDLERS: dict[type[nn.Module], ModuleHandler] = {
    **{klass: ModuleHandler(estimate_batch_norm, method=METHOD, memoize=True) for klass in BATCH_NORMS},
    **{klass: ModuleHandler(estimate_instance_norm, method=METHOD, memoize=True)
       for klass in INSTANCE_NORM_SPATIAL_DIMS},
    nn.LayerNorm: ModuleHandler(estimate_layer_norm, method=METHOD, memoize=True),
    nn.GroupNorm: ModuleHandler(estimate_group_norm, method=METHOD, memoize=True),
    nn.RMSNorm: ModuleHandler(estimate_rms_norm, method=METHOD, memoize=True),
    nn.LocalResponseNorm: ModuleHandler(estimate_local_response_norm, method=METHOD, memoize=True),
}


_BATCH_NORM = ("aten.native_batch_norm", "aten._native_batch_norm_legit", "aten._native_batch_norm_legit_no_training",
               "aten.cudnn_batch_norm", "aten.batch_norm")
#: The aten operators that each formula describes (see `torchscan.inheritance`); RMS and local
#: response norms decompose into elementwise steps on CPU and meta.
OPERATORS: dict[type[nn.Module], tuple[str, ...]] = {
    **dict.fromkeys((*BATCH_NORMS, *INSTANCE_NORM_SPATIAL_DIMS), _BATCH_NORM),
    nn.LayerNorm: ("aten.native_layer_norm",),
    nn.GroupNorm: ("aten.native_group_norm",),
    nn.RMSNorm: ("aten._fused_rms_norm", "aten.pow", "aten.mean", "aten.add", "aten.add_", "aten.rsqrt", "aten.mul"),
    nn.LocalResponseNorm: ("aten.pow", "aten.avg_pool2d", "aten.avg_pool3d", "aten.mul", "aten.add", "aten.div"),
}
