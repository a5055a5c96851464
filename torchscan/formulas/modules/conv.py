"""Module estimates for convolutions: ``Conv1d/2d/3d`` and ``ConvTranspose1d/2d/3d`` (lazy variants via the MRO).

A convolution is a dense product over a window: every output element takes ``C_in / groups * prod(k)`` MACs.
A transposed convolution is the adjoint: every *input* element is scattered into ``C_out / groups * prod(k)``
outputs. Receptive-field values are per spatial dimension, in input elements.
"""

from __future__ import annotations

from math import prod
from typing import Any, cast

from torch import nn
from torch.nn.modules.conv import _ConvNd

from ...handlers import ModuleCall, ModuleHandler
from .linear import dense_work, own_parameter_elements, registered

METHOD = "formula:conv"


def effective_kernel(kernel: int, dilation: int) -> int:
    """Span in input elements of a dilated kernel: d * (k - 1) + 1."""
    return dilation * (kernel - 1) + 1


def left_padding(module: _ConvNd) -> list[int]:
    """Input elements padded before the first element of each spatial dimension, as PyTorch pads them.

    ``"valid"`` pads nothing; ``"same"`` pads d * (k - 1) in total, the smaller half (rounded down) first.
    """
    padding = module.padding
    if padding == "valid":
        return [0] * len(module.kernel_size)
    if padding == "same":
        return [dilation * (kernel - 1) // 2
                for kernel, dilation in zip(module.kernel_size, module.dilation, strict=True)]
    return list(cast(tuple[int, ...], padding))  # one number per spatial dimension


def transposed_window(kernel_span: int, stride: int, padding: int) -> tuple[int, float | int, float | int | None]:
    """Receptive field, effective stride and padding of a scatter with stride ``stride`` (a transposed window).

    Output o receives input i whenever o = i * s - p + j for a tap offset 0 <= j < span. Output positions move
    1/s input elements per step, at most ceil(span / s) distinct inputs reach one output, and the first output
    starts (span - 1 - p) / s input elements before the input. That offset is ``None`` when negative (the
    padding crops more than the window reaches back), which a non-negative padding cannot express.
    """
    receptive_field = -(-kernel_span // stride)
    offset = exact_ratio(kernel_span - 1 - padding, stride)
    return receptive_field, exact_ratio(1, stride), offset if offset >= 0 else None


def exact_ratio(numerator: int, denominator: int) -> float | int:
    """numerator / denominator, kept an ``int`` when it divides exactly."""
    return numerator // denominator if numerator % denominator == 0 else numerator / denominator


def _dmas(call: ModuleCall) -> int:
    return call.argument(0, "input").numel() + own_parameter_elements(call.module) + call.output.numel()


def estimate_conv(call: ModuleCall) -> dict[str, Any]:
    """Direct convolution; padded positions are multiplied like any other (the dense convention)."""
    module, output = cast(_ConvNd, call.module), call.output  # HANDLERS registers it for convolutions only
    macs = output.numel() * (module.in_channels // module.groups) * prod(module.kernel_size)
    bias_adds = output.numel() if registered(module, "bias") is not None else 0
    return {
        **dense_work(macs, bias_adds, output.dtype, _dmas(call)),
        "receptive_field": [effective_kernel(k, d) for k, d in zip(module.kernel_size, module.dilation, strict=True)],
        "effective_stride": list(module.stride),
        "effective_padding": left_padding(module),
    }


def estimate_conv_transpose(call: ModuleCall) -> dict[str, Any]:
    """Transposed convolution: every input element meets C_out / groups * prod(k) weights.

    Output positions that no input reaches (``output_padding``) still receive the bias.
    """
    module, inputs, output = cast(_ConvNd, call.module), call.argument(0, "input"), call.output
    macs = inputs.numel() * (module.out_channels // module.groups) * prod(module.kernel_size)
    bias_adds = output.numel() if registered(module, "bias") is not None else 0
    padding = cast(tuple[int, ...], module.padding)  # a transposed convolution accepts no padding string
    per_dimension = zip(module.kernel_size, module.dilation, module.stride, padding, strict=True)
    windows = [transposed_window(effective_kernel(k, d), s, p) for k, d, s, p in per_dimension]
    offsets = [offset for _, _, offset in windows]
    return {
        **dense_work(macs, bias_adds, output.dtype, _dmas(call)),
        "receptive_field": [field for field, _, _ in windows],
        "effective_stride": [stride for _, stride, _ in windows],
        "effective_padding": offsets if None not in offsets else None,
    }


HANDLERS: dict[type[nn.Module], ModuleHandler] = {
    **{conv: ModuleHandler(estimate_conv, method=METHOD, memoize=True) for conv in (nn.Conv1d, nn.Conv2d, nn.Conv3d)},
    **{conv: ModuleHandler(estimate_conv_transpose, method=METHOD, memoize=True)
       for conv in (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)},
}


#: The aten operators that each formula describes (see `torchscan.inheritance`).
OPERATORS: dict[type[nn.Module], tuple[str, ...]] = {conv: ("aten.convolution", "aten._convolution") for conv in HANDLERS}
