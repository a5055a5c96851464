"""The parts of a native Transformer layer besides attention: linear layers, residual additions, normalization,
and the feed-forward block with its activation.

Children that have a built-in formula (LayerNorm, activation modules) are priced by that formula, called on meta
tensors of the child's shapes, so a family keeps one convention whether or not PyTorch called the child.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...handlers import ModuleCall, closest_handler
from ..conventions import FLOPS_PER_ELEMENT
from .calls import is_native
from .work import SUMMABLE, UNKNOWN, Work

# --- linear layers and residual additions ---------------------------------------------------------------------


def linear_work(rows: int, in_features: int, out_features: int, bias: bool) -> Work:
    """y = x W^T + b: rows*in*out MACs, 2 FLOPs each, 1 FLOP per output for the bias; reads x, W, b; writes y."""
    macs = rows * in_features * out_features
    outputs = rows * out_features
    parameters = in_features * out_features + (out_features if bias else 0)
    return Work(2 * macs + (outputs if bias else 0), macs, rows * in_features + parameters + outputs)


def residual_work(elements: int) -> Work:
    """x + f(x): 1 FLOP per element; reads both operands, writes the sum."""
    return Work(flops=elements, dmas=3 * elements)


# --- children priced by their own built-in formula ------------------------------------------------------------


def _as_work(raw: Mapping[str, Any]) -> Work:
    """A built-in handler's FLOPs/MACs/DMAs (numbers or MetricResults) as Work."""
    counts: dict[str, int] = {}
    lower: set[str] = set()
    unknown: set[str] = set()
    for name in SUMMABLE:
        value = raw.get(name)
        if isinstance(value, Mapping):
            if value["status"] == "complete":
                value = value["value"]
            elif value["status"] == "partial":
                value = value["known_value"]
                lower.add(name)
            else:
                value = None
        if value is None:
            unknown.add(name)
            value = 0
        counts[name] = int(value)
    return Work(counts["module_flops"], counts["macs"], counts["dmas"], frozenset(lower), frozenset(unknown))


def builtin_work(module: nn.Module, in_shape: tuple[int, ...], out_shape: tuple[int, ...], dtype: torch.dtype
                 ) -> Work | None:
    """A child's work from the built-in formula of its type, called on meta tensors of the child's shapes.

    This keeps one convention per family (LayerNorm, activation modules) whether or not PyTorch called the
    child. None when no built-in formula covers the type.
    """
    from .. import DEFAULT_HANDLERS  # the registry is complete once any callback runs

    handler = closest_handler(type(module), DEFAULT_HANDLERS)
    if handler is None:
        return None
    source = torch.empty(in_shape, dtype=dtype, device="meta")
    result = torch.empty(out_shape, dtype=dtype, device="meta")
    return _as_work(handler.callback(ModuleCall(module, (source,), {}, result)))


def norm_work(norm: nn.Module | None, rows: int, width: int, dtype: torch.dtype) -> Work:
    """A normalization over ``rows`` tokens of ``width`` features (none: no work)."""
    if norm is None:
        return Work()
    work = builtin_work(norm, (rows, width), (rows, width), dtype)
    return UNKNOWN if work is None else work


# --- the feed-forward block ------------------------------------------------------------------------------------


#: Activation functions (not modules) of the feed-forward block, by their FLOPS_PER_ELEMENT key.
FUNCTION_ACTIVATIONS: dict[Callable[..., Any], str] = {
    F.relu: "relu", torch.relu: "relu", F.gelu: "gelu", F.silu: "silu", F.mish: "mish",
    torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid", torch.tanh: "tanh", F.tanh: "tanh",
}


def _function_key(activation: Any) -> str | None:
    try:
        return FUNCTION_ACTIVATIONS.get(activation)
    except TypeError:  # an unhashable callable
        return None


def activation_work(activation: Any, rows: int, in_width: int, out_width: int, dtype: torch.dtype) -> Work:
    """The feed-forward nonlinearity: a table function, a module with a built-in formula, or another callable.

    Another callable is taken as elementwise (the layer's contract): 0 MACs, its input and parameters read and
    its output written, FLOPs unknown (so the layer's FLOPs are a lower bound).
    """
    if isinstance(activation, nn.Module):
        known = builtin_work(activation, (rows, in_width), (rows, out_width), dtype)
        if known is not None:
            return known
    key = None if isinstance(activation, nn.Module) else _function_key(activation)
    parameters = sum(p.numel() for p in activation.parameters()) if isinstance(activation, nn.Module) else 0
    accesses = rows * in_width + parameters + rows * out_width
    if key is None:
        return Work(dmas=accesses).without(frozenset({"module_flops"}))
    return Work(flops=FLOPS_PER_ELEMENT[key] * rows * out_width, dmas=accesses)


def feed_forward_work(layer: nn.Module, rows: int, dtype: torch.dtype) -> Work:
    """linear1 -> activation -> linear2 (dropout in eval moves no data)."""
    first, second = layer.linear1, layer.linear2
    if not (is_native(first, nn.Linear) and is_native(second, nn.Linear)):
        return UNKNOWN
    return (linear_work(rows, first.in_features, first.out_features, first.bias is not None)
            + activation_work(layer.activation, rows, first.out_features, second.in_features, dtype)
            + linear_work(rows, second.in_features, second.out_features, second.bias is not None))
