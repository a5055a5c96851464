"""Module estimates for activation functions, softmax included.

Activations are elementwise (or, for the softmax family, a reduction along one dimension), so they do no dot
products: MACs are 0 and their cost shows in FLOPs and DMAs. FLOP counts follow one table,
`FLOPS_PER_ELEMENT` in :mod:`..conventions`, which the recurrent formulas and the operator view share. They are
written for real floating-point tensors: other dtypes get no guessed count.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import Any, cast

import torch
from torch import nn

from ...handlers import ModuleCall, ModuleEstimates, ModuleHandler
from ..conventions import FLOPS_PER_ELEMENT, FLOPS_PER_SLICE
from ..estimates import POINTWISE
from .linear import own_parameter_elements

METHOD = "formula:activation"

#: Module class -> table key (a function of the module where its options change the formula).
ELEMENTWISE_KEYS: dict[type[nn.Module], str | Callable[[Any], str]] = {
    nn.ReLU: "relu",
    nn.ReLU6: "relu6",
    nn.Hardtanh: "hardtanh",
    nn.Threshold: "threshold",
    nn.LeakyReLU: "leaky_relu",
    nn.PReLU: "prelu",
    nn.ELU: "elu",
    nn.SELU: "selu",
    nn.CELU: "celu",
    nn.Sigmoid: "sigmoid",
    nn.Tanh: "tanh",
    nn.SiLU: "silu",
    nn.GELU: lambda module: "gelu_tanh" if module.approximate == "tanh" else "gelu",
    nn.Mish: "mish",
    nn.Hardswish: "hardswish",
    nn.Hardsigmoid: "hardsigmoid",
    nn.Softplus: "softplus",
    nn.Softsign: "softsign",
    nn.Tanhshrink: "tanhshrink",
    nn.LogSigmoid: "log_sigmoid",
    nn.GLU: "glu",
}

SOFTMAX_KEYS: dict[type[nn.Module], str] = {
    nn.Softmax: "softmax",
    nn.Softmax2d: "softmax",
    nn.LogSoftmax: "log_softmax",
    nn.Softmin: "softmin",
}
#: The classes `SOFTMAX_KEYS` registers the softmax formula for.
SoftmaxModule = nn.Softmax | nn.Softmax2d | nn.LogSoftmax | nn.Softmin


def _closest_key(module: nn.Module, keys: dict[type[nn.Module], Any]) -> str:
    """The table key of the closest class in the module's MRO."""
    for klass in type(module).__mro__:
        key = keys.get(klass)
        if key is not None:
            return key(module) if callable(key) else key
    raise KeyError(f"{type(module).__qualname__} has no activation formula")


def _estimates(source: torch.Tensor, flops: int, dmas: int) -> ModuleEstimates:
    return {"module_flops": flops if source.is_floating_point() else None, "macs": 0, "dmas": dmas, **POINTWISE}


def estimate_elementwise(call: ModuleCall) -> ModuleEstimates:
    """FLOPs per output element from the table; DMAs read the input, write the output, read PReLU's slopes."""
    source, result = call.argument(0, "input"), call.output
    flops = FLOPS_PER_ELEMENT[_closest_key(call.module, ELEMENTWISE_KEYS)] * result.numel()
    return _estimates(source, flops, source.numel() + own_parameter_elements(call.module) + result.numel())


def softmax_dim(module: SoftmaxModule, ndim: int) -> int:
    """The reduced dimension, resolving ``dim=None`` the way PyTorch's legacy implicit choice does."""
    if isinstance(module, nn.Softmax2d):
        return ndim - 3
    if module.dim is None:
        return 0 if ndim in (0, 1, 3) else 1
    return module.dim % max(ndim, 1)


def estimate_softmax(call: ModuleCall) -> ModuleEstimates:
    """Per slice along the reduced dimension, the `FLOPS_PER_SLICE` formula of its family."""
    source = call.argument(0, "input")
    shape = tuple(source.shape)
    module = cast(SoftmaxModule, call.module)  # the handlers below register this formula for these classes only
    length = shape[softmax_dim(module, len(shape))] if shape else 1
    slices = prod(shape) // length if length else 0
    flops = slices * FLOPS_PER_SLICE[_closest_key(module, SOFTMAX_KEYS)](length) if length else 0
    return _estimates(source, flops, source.numel() + call.output.numel())


HANDLERS: dict[type[nn.Module], ModuleHandler] = {
    **{klass: ModuleHandler(estimate_elementwise, method=METHOD, memoize=True) for klass in ELEMENTWISE_KEYS},
    **{klass: ModuleHandler(estimate_softmax, method=METHOD, memoize=True) for klass in SOFTMAX_KEYS},
}


#: The aten operators that each formula describes (see `torchscan.inheritance`): the kernel of
#: each activation, in place or not, and the elementwise steps of those that decompose.
OPERATORS: dict[type[nn.Module], tuple[str, ...]] = {
    nn.ReLU: ("aten.relu", "aten.relu_"), nn.ReLU6: ("aten.hardtanh", "aten.hardtanh_"),
    nn.Hardtanh: ("aten.hardtanh", "aten.hardtanh_"), nn.Threshold: ("aten.threshold", "aten.threshold_"),
    nn.LeakyReLU: ("aten.leaky_relu", "aten.leaky_relu_"), nn.PReLU: ("aten._prelu_kernel", "aten.prelu"),
    nn.ELU: ("aten.elu", "aten.elu_"), nn.SELU: ("aten.elu", "aten.elu_"), nn.CELU: ("aten.celu", "aten.celu_"),
    nn.Sigmoid: ("aten.sigmoid", "aten.sigmoid_"), nn.Tanh: ("aten.tanh", "aten.tanh_"),
    nn.SiLU: ("aten.silu", "aten.silu_"), nn.GELU: ("aten.gelu", "aten.gelu_"), nn.Mish: ("aten.mish", "aten.mish_"),
    nn.Hardswish: ("aten.hardswish", "aten.hardswish_"), nn.Hardsigmoid: ("aten.hardsigmoid", "aten.hardsigmoid_"),
    nn.Softplus: ("aten.softplus",), nn.Softsign: ("aten.abs", "aten.add", "aten.div"),
    nn.Tanhshrink: ("aten.tanh", "aten.sub"), nn.LogSigmoid: ("aten.log_sigmoid_forward",), nn.GLU: ("aten.glu",),
    nn.Softmax: ("aten._softmax",), nn.Softmax2d: ("aten._softmax",), nn.LogSoftmax: ("aten._log_softmax",),
    nn.Softmin: ("aten._softmax", "aten.neg"),
}
