"""Operator costs of the backward kernels of dot products: convolutions, fused attention and recurrent layers.

MACs follow PyTorch's ``torch.utils.flop_counter`` wherever it has a formula (2 FLOPs per MAC is its count); the
FLOPs add what the forward conventions also count (each cost function below says what). Kernels whose
``output_mask`` says a gradient is not wanted are not charged for it. Real floating point only;
every packet here is a ``significant`` kernel. (``mm``/``bmm``/``addmm`` are their own backward: a linear
layer's gradients dispatch as matmuls, counted by :mod:`.dense`.)
"""

from __future__ import annotations

from math import prod
from typing import Any

import torch

from ..conventions import LSTM_CELL
from .backward import softmax_backward_flops
from .calls import CostFunction, CostTable, OpCost, argument, operand_kind
from .dense import convolution_macs

#: Dot-product backward packets -> cost of one call.
COSTS = CostTable()


# --- convolutions ---------------------------------------------------------------------------------------------


def convolution_backward_cost(grad: torch.Tensor, source: torch.Tensor, weight: torch.Tensor, transposed: bool,
                              mask: list[bool], bias: bool) -> OpCost:
    """Input gradient and weight gradient: the forward's MACs each (PyTorch's count); bias gradient: the sum of
    the output gradient per channel, output elements - channels additions."""
    macs = convolution_macs(source, weight, grad, transposed) * (int(mask[0]) + int(mask[1]))
    channels = grad.shape[1] if grad.dim() > 1 else 1
    return OpCost(2 * macs + (grad.numel() - channels if bias and mask[2] else 0), macs)


def _convolution_backward(transposed_index: int, mask_index: int, bias_index: int | None) -> CostFunction:
    """(grad_output, input, weight, ...) with ``transposed``, ``output_mask`` and ``bias_sizes`` (``None``: a
    bias gradient whenever the mask asks for one) at the given positions."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        if operand_kind(args[:3], {}, None) != "real":
            return None
        mask = [bool(flag) for flag in argument(args, kwargs, mask_index, "output_mask")]
        bias = bias_index is None or argument(args, kwargs, bias_index, "bias_sizes") is not None
        transposed = bool(argument(args, kwargs, transposed_index, "transposed", False))
        return convolution_backward_cost(args[0], args[1], args[2], transposed, mask, bias)
    return cost


COSTS.register(["convolution_backward"], _convolution_backward(7, 10, 3))
COSTS.register(["convolution_backward_overrideable"], _convolution_backward(6, 9, None))


# --- fused attention ------------------------------------------------------------------------------------------


def attention_backward_cost(batch_heads: int, query_length: int, key_length: int, head_dim: int, value_dim: int,
                            *, key_heads_summed: int = 0, dropout: bool = False) -> OpCost:
    """The backward of a fused SDPA kernel over the full score matrix (a causal or boolean mask is a free
    selection).

    MACs, PyTorch's count: the recomputed scores QK^T, dP = dO V^T, dV = P^T dO, dQ = dS K and dK = dS^T Q,
    B·H·Lq·Lk·(3D + 2Dv). FLOPs: 2 per MAC; the recomputed weights exp(scale·s - lse) (the scaling once per query
    element as in the forward, then 2 per score); the softmax backward per query row (4Lk - 1); the scaling of
    dQ and dK (once per element); training dropout's mask and rescale (2 per score); and, when grouped key/value
    heads were broadcast, the sums of their gradients over each group (``key_heads_summed`` = B·(Hq - Hkv)
    head gradients of Lk·(D + Dv) elements).
    """
    scores = batch_heads * query_length * key_length
    macs = scores * (3 * head_dim + 2 * value_dim)
    recompute = batch_heads * query_length * head_dim + 2 * scores
    softmax = batch_heads * softmax_backward_flops(query_length, key_length)
    scaling = batch_heads * (query_length + key_length) * head_dim
    grouped = key_heads_summed * key_length * (head_dim + value_dim)
    return OpCost(2 * macs + recompute + softmax + scaling + 2 * scores * dropout + grouped, macs)


def _sdpa_backward(dropout_index: int) -> CostFunction:
    """(grad_out, query, key, value, ...) on (..., heads, length, dim) tensors, ``dropout_p`` at ``dropout_index``."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        query, key, value = args[1], args[2], args[3]
        if operand_kind(args[:4], {}, None) != "real" or any(t.is_nested for t in (query, key, value)):
            return None
        batch_heads = prod(query.shape[:-2])
        key_heads = prod(key.shape[:-2])
        dropout = bool(argument(args, kwargs, dropout_index, "dropout_p", 0.0))
        return attention_backward_cost(batch_heads, query.shape[-2], key.shape[-2], query.shape[-1],
                                       value.shape[-1], key_heads_summed=batch_heads - key_heads, dropout=dropout)
    return cost


COSTS.register(["_scaled_dot_product_flash_attention_for_cpu_backward"], _sdpa_backward(6))
COSTS.register(["_scaled_dot_product_efficient_attention_backward"], _sdpa_backward(9))
COSTS.register(["_scaled_dot_product_flash_attention_backward"], _sdpa_backward(10))
COSTS.register(["_scaled_dot_product_cudnn_attention_backward"], _sdpa_backward(13))
COSTS.register(["_scaled_dot_product_fused_attention_overrideable_backward"], _sdpa_backward(12))


# --- recurrent layers -----------------------------------------------------------------------------------------

#: FLOPs per hidden unit and (step, sample) row of an LSTM cell's backward, besides the gate products: o's
#: gradient dh * tanh(c') (1); dc' = dc + dh * o * (1 - tanh(c')^2) (5); the gradients of i, g, f and of the
#: previous c (4 multiplies); the sigmoid derivatives of i, f, o (3 each) and tanh's of g (3); the recurrent
#: gradient added to the step's output gradient (1).
LSTM_CELL_BACKWARD_FLOPS = 23
LSTM_MODE = 2


def _mkldnn_rnn_layer_backward(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    """One LSTM layer and direction over every (step, sample) row: the gate gradients' products with W_ih and
    W_hh (input and state gradients) and with the inputs and states (weight gradients), 2 x the forward's MACs;
    the cell's pointwise backward; the bias gradient, a sum of the gate gradients over the rows (the second bias
    gets the same sum). Other cells (mode other than LSTM) have no stated count."""
    source, weight_ih, weight_hh = args[0], args[1], args[2]
    mode, hidden_size, has_biases = args[14], args[15], args[17]
    if operand_kind(args[:3], {}, None) != "real" or mode != LSTM_MODE:
        return None
    rows = source.numel() // source.shape[-1] if source.shape[-1] else 0
    macs = 2 * rows * (weight_ih.numel() + weight_hh.numel())
    gates = LSTM_CELL.gates * hidden_size
    bias = max(rows - 1, 0) * gates if has_biases else 0
    return OpCost(2 * macs + rows * hidden_size * LSTM_CELL_BACKWARD_FLOPS + bias, macs)


COSTS.register(["mkldnn_rnn_layer_backward"], _mkldnn_rnn_layer_backward)
