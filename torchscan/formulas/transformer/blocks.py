"""The parts of a native Transformer layer besides attention: linear layers, residual additions, normalization,
and the feed-forward block with its activation.

Children that have a built-in formula (LayerNorm, activation modules) are priced by that formula, called on meta
tensors of the child's shapes, so a family keeps one convention whether or not PyTorch called the child. The
formula is found by the one built-in lookup (`Children.lookup`, passed in by the registry), which refuses a
subclass that overrides ``forward``: such a child's work is unknown, and the layer's counts become lower bounds
that name it, never a silent under-count. The same holds for a child whose built-in formula is a third-party one
(`torchscan.integrations`): that formula is trusted only for a call whose executed operators it was checked
against, and a layer priced on meta tensors of the child's shapes (or on its fused path, which never calls the
child) has no such call.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ...handlers import ModuleCall, ModuleHandler, validate_estimates
from ...results import Value
from ..conventions import FLOPS_PER_ELEMENT
from .calls import is_native
from .work import SUMMABLE, UNKNOWN, Work

#: The built-in handler of a module type, or None (the registry's one lookup, which refuses forward overrides).
BuiltinLookup = Callable[[type], "ModuleHandler | None"]

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


def type_name(module: Any) -> str:
    kind = type(module)
    return f"{kind.__module__}.{kind.__qualname__}"


def _count(value: Value) -> int:
    """The known value of a summable metric as a count (validation admits a number or ``None`` there)."""
    if isinstance(value, list):
        raise TypeError(f"a summable metric has one number, not a list: {value!r}")
    return int(value or 0)


def _as_work(raw: Any, handler: ModuleHandler) -> Work:
    """A built-in handler's FLOPs, MACs and DMAs as Work, read through the one validation of handler results."""
    validated = validate_estimates(raw, handler, SUMMABLE, builtin=True)
    counts: dict[str, int] = {}
    lower: set[str] = set()
    unknown = set(SUMMABLE - validated.metrics.keys())
    for name, result in validated.metrics.items():
        if result["status"] == "unavailable":
            unknown.add(name)
        elif result["status"] == "partial":
            lower.add(name)
        counts[name] = _count(result["known_value"])
    return Work(counts.get("module_flops", 0), counts.get("macs", 0), counts.get("dmas", 0), frozenset(lower),
                frozenset(unknown))


#: FLOPs per element of activation functions (not modules) of the feed-forward block, by FLOPS_PER_ELEMENT key.
FUNCTION_ACTIVATIONS: dict[Callable[..., Any], str] = {
    F.relu: "relu", torch.relu: "relu", F.gelu: "gelu", F.silu: "silu", F.mish: "mish",
    torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid", torch.tanh: "tanh", F.tanh: "tanh",
}


def _function_key(activation: Any) -> str | None:
    try:
        return FUNCTION_ACTIVATIONS.get(activation)
    except TypeError:  # an unhashable callable
        return None


@dataclass(frozen=True)
class Children:
    """Prices the children of native layers (norms, the feed-forward activation) with their built-in formulas."""

    lookup: BuiltinLookup

    def builtin_work(self, module: nn.Module, in_shape: tuple[int, ...], out_shape: tuple[int, ...],
                     dtype: torch.dtype) -> Work | None:
        """A child's work from the built-in formula of its type, called on meta tensors of the child's shapes; None
        when no formula that a layer can apply describes the type (see the module docstring)."""
        handler = self.lookup(type(module))
        if handler is None or handler.checks_operators:
            return None
        source = torch.empty(in_shape, dtype=dtype, device="meta")
        result = torch.empty(out_shape, dtype=dtype, device="meta")
        return _as_work(handler.callback(ModuleCall(module, (source,), {}, result)), handler)

    def norm(self, norm: nn.Module | None, name: str, rows: int, width: int, dtype: torch.dtype) -> Work:
        """A normalization ``name`` over ``rows`` tokens of ``width`` features (none: no work)."""
        if norm is None:
            return Work()
        work = self.builtin_work(norm, (rows, width), (rows, width), dtype)
        if work is None:
            return UNKNOWN.missing(f"{name} ({type_name(norm)}) has no built-in formula that a native layer "
                                   "can apply, so its work is not counted")
        return work

    def activation(self, activation: Any, name: str, rows: int, in_width: int, out_width: int,
                   dtype: torch.dtype) -> Work:
        """The feed-forward nonlinearity: a table function, a module with a built-in formula, or another callable.

        Another callable is taken as elementwise (the layer's contract): 0 MACs, its input and output accessed,
        FLOPs unknown. A module without a built-in formula runs a forward of its own that nothing describes: its
        FLOPs and MACs are unknown and its DMAs (input, parameters, output) a lower bound.
        """
        accesses = rows * in_width + rows * out_width
        if isinstance(activation, nn.Module):
            known = self.builtin_work(activation, (rows, in_width), (rows, out_width), dtype)
            if known is not None:
                return known
            parameters = sum(parameter.numel() for parameter in activation.parameters())
            work = Work(dmas=accesses + parameters).at_least(frozenset({"dmas"}))
            work = work.without(frozenset({"module_flops", "macs"}))
            return work.missing(f"{name} ({type_name(activation)}) has no built-in formula that a native "
                                "layer can apply, so its work is not counted")
        key = _function_key(activation)
        if key is None:
            return Work(dmas=accesses).without(frozenset({"module_flops"}))
        return Work(flops=FLOPS_PER_ELEMENT[key] * rows * out_width, dmas=accesses)

    def feed_forward(self, layer: nn.Module, prefix: str, rows: int, dtype: torch.dtype) -> Work:
        """linear1 -> activation -> linear2 (dropout in eval moves no data)."""
        first, second = layer.linear1, layer.linear2
        if not (is_native(first, nn.Linear) and is_native(second, nn.Linear)):
            return UNKNOWN
        return (linear_work(rows, first.in_features, first.out_features, first.bias is not None)
                + self.activation(layer.activation, f"{prefix}activation", rows, first.out_features,
                                  second.in_features, dtype)
                + linear_work(rows, second.in_features, second.out_features, second.bias is not None))
