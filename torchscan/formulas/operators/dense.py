"""Operator costs of dense products: the matmul family, linear layers and convolutions.

MACs are the dot-product multiply-accumulates (output elements times contracted length); FLOPs are 2 per MAC plus
1 per addition (bias, ``beta * self``) and 1 per scaling multiply (``alpha``, ``beta`` other than 1). Complex
operands count as real arithmetic (one complex MAC is 4 real MACs, a complex addition 2 FLOPs); integer products
have no stated count. Every packet here is a ``significant`` dot-product kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..conventions import COMPLEX_ADD_REAL_FLOPS, COMPLEX_MAC_REAL_MACS, FLOPS_PER_ELEMENT
from .calls import CostFunction, CostTable, OpCost, argument, not_one, numel, operand_kind, output_tensor

#: Dense-product packets -> cost of one call.
COSTS = CostTable()


def dense_cost(macs: int, additions: int, kind: str | None) -> OpCost | None:
    """Real: 2 FLOPs per MAC, 1 per addition. Complex: one complex MAC is 4 real MACs (8 FLOPs), a complex addition
    2 FLOPs. Integer dot products have no FLOPs and their MACs are outside the operator view: ``None``."""
    if kind == "real":
        return OpCost(2 * macs + additions, macs)
    if kind == "complex":
        real_macs = COMPLEX_MAC_REAL_MACS * macs
        return OpCost(2 * real_macs + COMPLEX_ADD_REAL_FLOPS * additions, real_macs)
    return None


# --- matmul family and linear ---------------------------------------------------------------------------------


def _product(contracted: Callable[[tuple, dict], int], *, self_added: bool) -> CostFunction:
    """MACs = output elements x contracted length; ``self_added``: beta * self + alpha * product (addmm style):
    1 addition per output element unless beta = 0, 1 multiply each for beta and alpha other than 1."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        elements = numel(out)
        additions = 0
        kind = operand_kind(args, kwargs, out)
        if self_added:
            beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
            if kind == "complex" and (not_one(beta) or not_one(alpha)):
                return None
            additions = elements * ((beta != 0) + (beta not in (0, 1)) + not_one(alpha))
        return dense_cost(elements * contracted(args, kwargs), additions, kind)
    return cost


def _last_dim(index: int) -> Callable[[tuple, dict], int]:
    return lambda args, kwargs: args[index].shape[-1]


def _batched_sum(args: tuple, kwargs: dict) -> int:
    """addbmm sums the b products: each output element contracts b * k terms."""
    return args[1].shape[0] * args[1].shape[-1]


def _dot(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    return dense_cost(args[0].numel(), 0, operand_kind(args, kwargs, out))


def _addmm_activation(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    """addmm followed by relu, or by the tanh-approximated gelu (``use_gelu=True``)."""
    product = _product(_last_dim(1), self_added=True)(args, kwargs, out)
    if product is None or operand_kind(args, kwargs, out) != "real":
        return None
    activation = FLOPS_PER_ELEMENT["gelu_tanh" if kwargs.get("use_gelu", False) else "relu"]
    return OpCost(product.flops + activation * numel(out), product.macs)


def _linear(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    bias = argument(args, kwargs, 2, "bias")
    return dense_cost(numel(out) * args[1].shape[-1], numel(out) if bias is not None else 0,
                      operand_kind(args, kwargs, out))


COSTS.register(["mm", "bmm"], _product(_last_dim(0), self_added=False))
COSTS.register(["addmm", "baddbmm", "addmv"], _product(_last_dim(1), self_added=True), inplace=True)
COSTS.register(["mv"], _product(_last_dim(0), self_added=False))
COSTS.register(["addbmm"], _product(_batched_sum, self_added=True), inplace=True)
COSTS.register(["dot", "vdot"], _dot)
COSTS.register(["_addmm_activation"], _addmm_activation)
COSTS.register(["linear", "mkldnn_linear"], _linear)


# --- convolutions ---------------------------------------------------------------------------------------------


def convolution_macs(source: torch.Tensor, weight: torch.Tensor, out: torch.Tensor, transposed: bool) -> int:
    """Every output element takes C_in/groups * prod(k) MACs; transposed, every input element gives
    C_out/groups * prod(k) (``weight.numel() / weight.shape[0]`` in both layouts)."""
    per_element = weight.numel() // weight.shape[0] if weight.shape[0] else 0
    return (source.numel() if transposed else out.numel()) * per_element


def _convolution(bias_index: int | None, transposed_index: int | None = None, *, transposed: bool = False
                 ) -> CostFunction:
    """A convolution kernel: input and weight first, bias and ``transposed`` at the given schema positions."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        is_transposed = transposed if transposed_index is None else bool(
            argument(args, kwargs, transposed_index, "transposed", False))
        bias = None if bias_index is None else argument(args, kwargs, bias_index, "bias")
        result = output_tensor(out)
        macs = convolution_macs(args[0], args[1], result, is_transposed)
        return dense_cost(macs, result.numel() if bias is not None else 0, operand_kind(args, kwargs, out))
    return cost


COSTS.register(["convolution", "_convolution", "convolution_overrideable"], _convolution(2, 6))
COSTS.register(["mkldnn_convolution", "_convolution_mode", "_nnpack_spatial_convolution", "conv1d",
                "conv2d", "conv3d"], _convolution(2))
COSTS.register(["conv_transpose1d", "conv_transpose2d", "conv_transpose3d"], _convolution(2, transposed=True))
COSTS.register(["_slow_conv2d_forward", "slow_conv3d_forward", "slow_conv_dilated2d", "slow_conv_dilated3d",
                "_conv_depthwise2d", "thnn_conv2d"], _convolution(3))
COSTS.register(["slow_conv_transpose2d", "slow_conv_transpose3d"], _convolution(3, transposed=True))
COSTS.register(["cudnn_convolution"], _convolution(None))
COSTS.register(["cudnn_convolution_transpose"], _convolution(None, transposed=True))
