"""Module estimates for window reductions and resampling: pooling, unpooling, upsampling, pixel shuffles, padding.

Work is counted per window over the input elements the window actually reads (padding excluded): a max over m
elements is m - 1 comparisons, an average is m - 1 additions and 1 division. Windows along different dimensions
are independent, so the total of m over all windows is the product of per-dimension totals. Pooling is 0 MACs.
Receptive-field values are per spatial dimension, in input elements.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from math import floor, prod
from typing import Any, cast

import torch
from torch import nn

from ...handlers import ModuleCall, ModuleHandler
from ...results import METRIC_UNITS
from ...values import tensor_elements
from ..conventions import adaptive_pool_reads, adaptive_windows, window_pool_reads
from .conv import effective_kernel, exact_ratio, transposed_window

METHOD = "formula:pooling"

#: Sampling taps per spatial dimension of each interpolation mode.
INTERPOLATION_TAPS = {"nearest": 1, "nearest-exact": 1, "linear": 2, "bilinear": 2, "trilinear": 2, "bicubic": 4}


# --- reading a call ------------------------------------------------------------------------------------------------

def _pooled(output: Any) -> torch.Tensor:
    """The pooled values of an output that may carry indices too."""
    return output[0] if isinstance(output, (tuple, list)) else output


def _per_dim(value: Any, dims: int) -> list[int]:
    return list(value) if isinstance(value, (tuple, list)) else [value] * dims


def _flops(count: int, dtype: torch.dtype) -> int | None:
    """Comparisons and averages are floating-point work only for real floating-point data."""
    return count if dtype.is_floating_point else None


def _copy_dmas(call: ModuleCall) -> int:
    """Every input tensor read once and every output element written once."""
    return tensor_elements(tuple(call.args) + tuple(call.kwargs.values())) + tensor_elements(call.output)


# --- window geometry -----------------------------------------------------------------------------------------------

def _adaptive_spatial(inputs: torch.Tensor, output: torch.Tensor, dims: int) -> dict[str, Any]:
    """Largest window and mean step L / O: exact when O divides L, a stated convention otherwise."""
    pairs = list(zip(inputs.shape[-dims:], output.shape[-dims:], strict=True))
    return {
        "receptive_field": [max(adaptive_windows(length, outputs), default=0) for length, outputs in pairs],
        "effective_stride": [exact_ratio(length, outputs) if outputs else 0 for length, outputs in pairs],
        "effective_padding": [0] * dims,
    }


# --- pooling -------------------------------------------------------------------------------------------------------

def estimate_window_pool(call: ModuleCall, dims: int, average: bool) -> dict[str, Any]:
    """Per window of m read elements: m - 1 comparisons for a max (dilation spreads its taps); m - 1 additions and
    1 division for an average, whose ``count_include_pad`` and ``divisor_override`` only change the divisor."""
    module, inputs, pooled = call.module, call.argument(0, "input"), _pooled(call.output)
    kernel, dilation = _per_dim(module.kernel_size, dims), _per_dim(1 if average else module.dilation, dims)
    stride, padding = _per_dim(module.stride or module.kernel_size, dims), _per_dim(module.padding, dims)
    reads = window_pool_reads(inputs, pooled, dims, kernel, stride, padding, dilation)
    return {
        "module_flops": _flops(reads if average else max(reads - pooled.numel(), 0), inputs.dtype), "macs": 0,
        "dmas": _copy_dmas(call),
        "receptive_field": [effective_kernel(k, d) for k, d in zip(kernel, dilation, strict=False)],
        "effective_stride": stride, "effective_padding": padding,
    }


def estimate_lp_pool(call: ModuleCall, dims: int) -> dict[str, Any]:
    """(sum of x^p over a window)^(1/p): one power per input element, m - 1 additions and one root per window.

    The rescaling PyTorch applies in between (an average, then a multiplication by the window size) is an
    implementation detail and is not counted.
    """
    module, inputs = call.module, call.argument(0, "input")
    kernel = _per_dim(module.kernel_size, dims)
    stride = _per_dim(module.stride or module.kernel_size, dims)
    reads = window_pool_reads(inputs, _pooled(call.output), dims, kernel, stride, 0, 1)
    return {
        "module_flops": _flops(inputs.numel() + reads, inputs.dtype), "macs": 0, "dmas": _copy_dmas(call),
        "receptive_field": kernel, "effective_stride": stride, "effective_padding": [0] * dims,
    }


def estimate_adaptive_pool(call: ModuleCall, dims: int, average: bool) -> dict[str, Any]:
    """Windows sized by the adaptive rule: m FLOPs per window for an average (m - 1 additions, 1 division), m - 1
    comparisons for a max."""
    inputs, output = call.argument(0, "input"), _pooled(call.output)
    reads = adaptive_pool_reads(inputs, list(output.shape[-dims:]))
    flops = reads if average else max(reads - output.numel(), 0)
    return {"module_flops": _flops(flops, inputs.dtype), "macs": 0, "dmas": _copy_dmas(call),
            **_adaptive_spatial(inputs, output, dims)}


def estimate_fractional_max_pool(call: ModuleCall, dims: int) -> dict[str, Any]:
    """prod(k) - 1 comparisons per window; windows lie inside the input at pseudo-random offsets.

    The stride is the mean step (L - k) / (O - 1) of PyTorch's window sequence (L when there is one window).
    """
    module, inputs, output = call.module, call.argument(0, "input"), _pooled(call.output)
    kernel = _per_dim(module.kernel_size, dims)
    steps = [exact_ratio(length - k, outputs - 1) if outputs > 1 else length
             for length, outputs, k in zip(inputs.shape[-dims:], output.shape[-dims:], kernel, strict=False)]
    return {
        "module_flops": _flops(output.numel() * (prod(kernel) - 1), inputs.dtype), "macs": 0,
        "dmas": _copy_dmas(call), "receptive_field": kernel, "effective_stride": steps,
        "effective_padding": [0] * dims,
    }


def estimate_max_unpool(call: ModuleCall, dims: int) -> dict[str, Any]:
    """A scatter of the input into a zero-filled output: no arithmetic; the adjoint window of the max pool."""
    module = call.module
    per_dimension = zip(_per_dim(module.kernel_size, dims), _per_dim(module.stride, dims),
                        _per_dim(module.padding, dims), strict=False)
    windows = [transposed_window(k, s, p) for k, s, p in per_dimension]
    offsets = [offset for _, _, offset in windows]
    return {
        "module_flops": 0, "macs": 0, "dmas": _copy_dmas(call),
        "receptive_field": [field for field, _, _ in windows],
        "effective_stride": [stride for _, stride, _ in windows],
        "effective_padding": offsets if None not in offsets else None,
    }


# --- resampling ----------------------------------------------------------------------------------------------------

def _sampling_step(length: int, outputs: int, scale: float | None, align_corners: bool) -> float | int:
    """Input elements between the sampling points of consecutive outputs, as PyTorch computes it."""
    if align_corners:
        return exact_ratio(length - 1, outputs - 1) if outputs > 1 else 0
    if scale is not None:
        return 1 / scale
    return exact_ratio(length, outputs)


def _first_read(mode: str, step: float, align_corners: bool) -> int:
    """Index of the first input element the window of output 0 reads (negative: before the input)."""
    if mode == "nearest":
        return 0
    if mode == "nearest-exact":
        return floor(0.5 * step)
    centre = 0.0 if align_corners else 0.5 * step - 0.5
    if mode == "bicubic":
        return floor(centre) - 1
    return floor(max(centre, 0.0))


def estimate_upsample(call: ModuleCall) -> dict[str, Any]:
    """Interpolation as a weighted sum of T taps per output element: T multiplies and T - 1 additions.

    Nearest modes copy one element (0 FLOPs). ``area`` mode is adaptive average pooling. Tap weights depend
    only on output coordinates and are shared by every batch and channel; their computation is not counted.
    """
    module, inputs, output = cast(nn.Upsample, call.module), call.argument(0, "input"), call.output  # HANDLERS' class
    dims, mode = inputs.dim() - 2, module.mode
    if mode == "area":
        return estimate_adaptive_pool(call, dims, average=True)
    if mode not in INTERPOLATION_TAPS:
        return dict.fromkeys(METRIC_UNITS)
    taps = INTERPOLATION_TAPS[mode] ** dims
    flops = output.numel() * (2 * taps - 1) if taps > 1 else 0
    align_corners = bool(module.align_corners) and mode not in ("nearest", "nearest-exact")
    scales = module.scale_factor if not module.recompute_scale_factor else None
    steps = [_sampling_step(length, outputs, scale, align_corners) for length, outputs, scale in
             zip(inputs.shape[2:], output.shape[2:], _per_dim(scales, dims), strict=False)]
    offsets = [-_first_read(mode, step, align_corners) for step in steps]
    return {
        "module_flops": flops if taps == 1 else _flops(flops, inputs.dtype), "macs": 0, "dmas": _copy_dmas(call),
        "receptive_field": [INTERPOLATION_TAPS[mode]] * dims, "effective_stride": steps,
        "effective_padding": offsets if min(offsets) >= 0 else None,
    }


def estimate_pixel_shuffle(call: ModuleCall) -> dict[str, Any]:
    """A copy that moves r x r channel groups into space: each output location reads one input location."""
    factor = cast(nn.PixelShuffle, call.module).upscale_factor  # the class HANDLERS names
    return {"module_flops": 0, "macs": 0, "dmas": _copy_dmas(call),
            "receptive_field": 1, "effective_stride": exact_ratio(1, factor), "effective_padding": 0}


def estimate_pixel_unshuffle(call: ModuleCall) -> dict[str, Any]:
    """A copy that folds r x r spatial blocks into channels: each output location reads one block."""
    factor = cast(nn.PixelUnshuffle, call.module).downscale_factor  # the class HANDLERS names
    return {"module_flops": 0, "macs": 0, "dmas": _copy_dmas(call),
            "receptive_field": factor, "effective_stride": factor, "effective_padding": 0}


def estimate_padding(call: ModuleCall) -> dict[str, Any]:
    """A copy into a larger tensor: every output element is one input element or a constant.

    ``padding`` is in ``F.pad`` order (last dimension first); the reported padding is the leading side of each
    spatial dimension, in natural order. Negative padding crops, which a padding cannot express.
    """
    padding = cast(Sequence[int], call.module.padding)  # what every padding class HANDLERS names stores
    leading = [padding[index] for index in range(len(padding) - 2, -1, -2)]
    return {"module_flops": 0, "macs": 0, "dmas": _copy_dmas(call), "receptive_field": 1, "effective_stride": 1,
            "effective_padding": leading if min(leading) >= 0 else None}


# --- registration --------------------------------------------------------------------------------------------------

def _by_dimension(estimate: Any, prefix: str, dimensions: tuple[int, ...] = (1, 2, 3)) -> dict[type, ModuleHandler]:
    """One handler per ``<prefix>1d/2d/3d`` class."""
    return {getattr(nn, f"{prefix}{dims}d"): ModuleHandler(partial(estimate, dims=dims), method=METHOD, memoize=True)
            for dims in dimensions}


def _padding_handlers() -> dict[type, ModuleHandler]:
    return {getattr(nn, f"{kind}Pad{dims}d"): ModuleHandler(estimate_padding, method=METHOD, memoize=True)
            for kind in ("Zero", "Constant", "Reflection", "Replication", "Circular") for dims in (1, 2, 3)}


HANDLERS: dict[type[nn.Module], ModuleHandler] = {
    **_by_dimension(partial(estimate_window_pool, average=False), "MaxPool"),
    **_by_dimension(partial(estimate_window_pool, average=True), "AvgPool"),
    **_by_dimension(estimate_lp_pool, "LPPool"),
    **_by_dimension(partial(estimate_adaptive_pool, average=True), "AdaptiveAvgPool"),
    **_by_dimension(partial(estimate_adaptive_pool, average=False), "AdaptiveMaxPool"),
    **_by_dimension(estimate_fractional_max_pool, "FractionalMaxPool", (2, 3)),
    **_by_dimension(estimate_max_unpool, "MaxUnpool"),
    nn.Upsample: ModuleHandler(estimate_upsample, method=METHOD, memoize=True),
    nn.PixelShuffle: ModuleHandler(estimate_pixel_shuffle, method=METHOD, memoize=True),
    nn.PixelUnshuffle: ModuleHandler(estimate_pixel_unshuffle, method=METHOD, memoize=True),
    **_padding_handlers(),
}


def _operators_of(module_type: type) -> tuple[str, ...]:
    """The aten operators that the formula of one pooling, resampling, shuffling or padding class describes."""
    name = module_type.__name__
    prefix, dims = (name[:-2], name[-2]) if name.endswith("d") and name[-2].isdigit() else (name, "2")
    return {"MaxPool": (f"aten.max_pool{dims}d_with_indices", f"aten.max_pool{dims}d", "aten.max_pool2d_with_indices"),
            "AvgPool": (f"aten.avg_pool{dims}d", "aten.avg_pool2d"),
            "LPPool": (f"aten.avg_pool{dims}d", "aten.avg_pool2d", "aten.pow", "aten.sign", "aten.abs", "aten.relu",
                       "aten.mul"),
            "AdaptiveAvgPool": ("aten._adaptive_avg_pool2d", "aten._adaptive_avg_pool3d", "aten.mean"),
            "AdaptiveMaxPool": ("aten.adaptive_max_pool2d", "aten.adaptive_max_pool3d"),
            "FractionalMaxPool": (f"aten.fractional_max_pool{dims}d",),
            "MaxUnpool": ("aten.max_unpool2d", "aten.max_unpool3d"),
            "Upsample": ("aten.upsample_linear1d", "aten.upsample_bilinear2d", "aten.upsample_trilinear3d",
                         "aten.upsample_bicubic2d", "aten._upsample_bilinear2d_aa", "aten._upsample_bicubic2d_aa",
                         "aten.upsample_nearest1d", "aten.upsample_nearest2d", "aten.upsample_nearest3d",
                         "aten._upsample_nearest_exact2d"),
            "PixelShuffle": ("aten.pixel_shuffle",), "PixelUnshuffle": ("aten.pixel_unshuffle",),
            "ZeroPad": ("aten.constant_pad_nd",), "ConstantPad": ("aten.constant_pad_nd",),
            "ReflectionPad": (f"aten.reflection_pad{dims}d",), "ReplicationPad": (f"aten.replication_pad{dims}d",),
            "CircularPad": ("aten._pad_circular", "aten.cat", "aten.slice", "aten.copy_")}.get(prefix, ())


#: The aten operators that each formula describes (see `torchscan.inheritance`); padding, nearest resampling and
#: pixel shuffles only move elements.
OPERATORS: dict[type[nn.Module], tuple[str, ...]] = {klass: _operators_of(klass) for klass in HANDLERS}
