"""Module estimates for activation functions, softmax included.

Activations are elementwise (or, for the softmax family, a reduction along one dimension), so they do no dot
products: MACs are 0 and their cost shows in FLOPs and DMAs. FLOP counts follow one table,
`FLOPS_PER_ELEMENT`, which the recurrent formulas reuse for their gate nonlinearities.

Conventions behind the table: every arithmetic operation of the defining formula counts 1 FLOP (negation and
``abs`` included), a transcendental function (exp, log, tanh, erf, pow) counts 1 FLOP, a comparison counts 1 FLOP,
and selecting a value (``where``) is free. Tensor values are never inspected, so a function with branches is
charged its more expensive branch for every element. In-place variants do the same work.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import Any

import torch
from torch import nn

from ...handlers import ModuleCall, ModuleEstimates, ModuleHandler
from ...results import METRIC_UNITS, unavailable

METHOD = "formula:activation"

#: FLOPs per output element of each elementwise activation, keyed by a functional name.
FLOPS_PER_ELEMENT: dict[str, int] = {
    "relu": 1,          # max(x, 0): 1 comparison
    "relu6": 2,         # min(max(x, 0), 6): 2 comparisons
    "hardtanh": 2,      # clamp to [min_val, max_val]: 2 comparisons
    "threshold": 1,     # x > threshold ? x : value: 1 comparison (the selection is free)
    "leaky_relu": 2,    # x > 0 ? x : slope * x: 1 comparison + 1 multiply
    "prelu": 2,         # as leaky_relu, with a learned slope per channel
    "elu": 4,           # x > 0 ? x : alpha * (exp(x) - 1): comparison, exp, subtract, multiply
    "selu": 5,          # scale * elu(x, alpha): elu (4) + 1 multiply
    "celu": 5,          # x > 0 ? x : alpha * (exp(x / alpha) - 1): comparison, divide, exp, subtract, multiply
    "sigmoid": 4,       # 1 / (1 + exp(-x)): negate, exp, add, divide
    "tanh": 1,          # tanh: 1 transcendental
    "silu": 5,          # x * sigmoid(x): sigmoid (4) + 1 multiply
    "gelu": 5,          # 0.5 * x * (1 + erf(x / sqrt(2))): divide, erf, add, multiply, multiply
    "gelu_tanh": 9,     # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))): x^3 (2 multiplies),
                        # multiply, add, multiply, tanh, add, multiply, multiply
    "mish": 5,          # x * tanh(log(1 + exp(x))): exp, add, log, tanh, multiply
    "hardswish": 5,     # x * min(max(x + 3, 0), 6) / 6: add, 2 comparisons, multiply, divide
    "hardsigmoid": 4,   # min(max(x + 3, 0), 6) / 6: add, 2 comparisons, divide
    "softplus": 6,      # beta*x > threshold ? x : log(1 + exp(beta * x)) / beta: multiply, comparison, exp,
                        # add, log, divide (PyTorch scales by beta even when beta == 1)
    "softsign": 3,      # x / (1 + |x|): abs, add, divide
    "tanhshrink": 2,    # x - tanh(x): tanh, subtract
    "log_sigmoid": 5,   # -log(1 + exp(-x)): negate, exp, add, log, negate
    "glu": 5,           # a * sigmoid(b) per output element: sigmoid (4) + 1 multiply
}

#: FLOPs of the softmax family over one slice of ``n`` elements along the reduced dimension. The maximum is
#: subtracted first, as every numerically stable implementation does, and that work is counted.
FLOPS_PER_SLICE: dict[str, Callable[[int], int]] = {
    # max: n-1 comparisons; shift: n subtractions; exp: n; sum: n-1 additions; normalize: n divisions
    "softmax": lambda n: 5 * n - 2,
    # max: n-1; shift: n; exp: n; sum: n-1; log of the sum: 1; subtract it: n
    "log_softmax": lambda n: 5 * n - 1,
    # softmax(-x): n negations + softmax
    "softmin": lambda n: 6 * n - 2,
}

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

POINTWISE_SPATIAL = {"receptive_field": 1, "effective_stride": 1, "effective_padding": 0}


def _input_tensor(call: ModuleCall) -> torch.Tensor:
    return call.args[0] if call.args else call.kwargs["input"]


def _flops_or_unavailable(flops: int, tensor: torch.Tensor) -> Any:
    """The formulas are written for real floating-point tensors; other dtypes get no guessed count."""
    if tensor.is_floating_point():
        return flops
    return unavailable(METRIC_UNITS["module_flops"], "module_call", METHOD)


def _closest_key(module: nn.Module, keys: dict[type[nn.Module], Any]) -> str:
    for klass in type(module).__mro__:
        key = keys.get(klass)
        if key is not None:
            return key(module) if callable(key) else key
    raise KeyError(f"{type(module).__qualname__} has no activation formula")


def elementwise_key(module: nn.Module) -> str:
    """The `FLOPS_PER_ELEMENT` key of an elementwise activation module (closest class in its MRO)."""
    return _closest_key(module, ELEMENTWISE_KEYS)


def estimate_elementwise(call: ModuleCall) -> ModuleEstimates:
    """FLOPs per output element from the table; DMAs read the input, write the output, read PReLU's slopes."""
    source, result = _input_tensor(call), call.output
    parameters = sum(parameter.numel() for parameter in call.module.parameters(recurse=False))
    flops = FLOPS_PER_ELEMENT[elementwise_key(call.module)] * result.numel()
    return {
        "module_flops": _flops_or_unavailable(flops, source),
        "macs": 0,
        "dmas": source.numel() + parameters + result.numel(),
        **POINTWISE_SPATIAL,
    }


def softmax_dim(module: nn.Module, ndim: int) -> int:
    """The reduced dimension, resolving ``dim=None`` the way PyTorch's legacy implicit choice does."""
    if isinstance(module, nn.Softmax2d):
        return ndim - 3
    if module.dim is None:
        return 0 if ndim in (0, 1, 3) else 1
    return module.dim % max(ndim, 1)


def estimate_softmax(call: ModuleCall) -> ModuleEstimates:
    """Per slice along the reduced dimension, the `FLOPS_PER_SLICE` formula of its family."""
    source = _input_tensor(call)
    shape = tuple(source.shape)
    length = shape[softmax_dim(call.module, len(shape))] if shape else 1
    slices = prod(shape) // length if length else 0
    flops = slices * FLOPS_PER_SLICE[_closest_key(call.module, SOFTMAX_KEYS)](length) if length else 0
    return {
        "module_flops": _flops_or_unavailable(flops, source),
        "macs": 0,
        "dmas": source.numel() + call.output.numel(),
        **POINTWISE_SPATIAL,
    }


HANDLERS: dict[type[nn.Module], ModuleHandler] = {
    **{klass: ModuleHandler(estimate_elementwise, method=METHOD) for klass in ELEMENTWISE_KEYS},
    **{klass: ModuleHandler(estimate_softmax, method=METHOD) for klass in SOFTMAX_KEYS},
}
