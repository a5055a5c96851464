"""Operator costs of the backward kernels of element and window work: activations, dropout, softmax,
normalizations, pooling, interpolation, embeddings and losses.

A backward kernel is priced for the arithmetic of its defining formula, with the conventions of the forward
families (:mod:`..conventions`): an activation's backward per gradient element (`ACTIVATION_BACKWARD_FLOPS`), a
softmax's per slice, a normalization's per element and per reduced group, scatter-style backwards (max pooling,
embeddings) 1 accumulation per gradient element. Kernels whose ``output_mask`` says a gradient is not wanted are
not charged for it. Real floating point only. The dot-product backwards are in :mod:`.backward_dense`.
"""

from __future__ import annotations

from collections.abc import Callable
from math import prod
from typing import Any

import torch

from ..conventions import GROUP_FLOPS, MEAN_FLOPS, NORMALIZE_FLOPS, adaptive_pool_reads, window_pool_reads
from .calls import CostFunction, CostTable, OpCost, argument, numel, real_only
from .elementwise import interpolation_flops

#: Backward packets of element and window work -> cost of one call.
COSTS = CostTable()


# --- activations and dropout ------------------------------------------------------------------------------------

#: FLOPs per gradient element of each activation's backward kernel (the local derivative times the gradient).
ACTIVATION_BACKWARD_FLOPS: dict[str, int] = {
    "threshold": 1,       # x > threshold ? g : 0: 1 comparison (relu's backward)
    "hardtanh": 2,        # min < x < max ? g : 0: 2 comparisons
    "leaky_relu": 2,      # x > 0 ? g : slope * g: comparison, multiply
    "prelu": 3,           # x > 0 ? g : w * g, and x * g for the weight: comparison, 2 multiplies
    "sigmoid": 3,         # g * (1 - y) * y: subtract, 2 multiplies
    "tanh": 3,            # g * (1 - y^2): square, subtract, multiply
    "silu": 9,            # s = sigmoid(x) (4); g * s * (1 + x * (1 - s)): 5
    "gelu": 11,           # cdf 0.5 * (1 + erf(x / sqrt 2)) (4), pdf k * exp(-x^2 / 2) (4); g * (cdf + x * pdf) (3)
    "gelu_tanh": 18,      # inner, tanh and both factors (11), derivative of tanh and of inner (6), times g (1)
    "hardswish": 5,       # x < -3 ? 0 : x <= 3 ? g * (x / 3 + 0.5) : g: 2 comparisons, divide, add, multiply
    "hardsigmoid": 3,     # -3 < x < 3 ? g / 6 : 0: 2 comparisons, 1 division
    "elu": 5,             # x <= 0 ? g * c * exp(x * s) : g * scale: comparison, multiply, exp, 2 multiplies
    "elu_result": 4,      # from the result: x <= 0 ? g * s * (y + a) : g * scale: comparison, add, 2 multiplies
    "softplus": 6,        # z = exp(beta * x); beta * x > threshold ? g : g * z / (z + 1)
    "mish": 13,           # sigmoid (4), tanh(softplus) (3), g * (t + x * s * (1 - t^2)) (6)
    "log_sigmoid": 9,     # comparison, abs, negate, exp, add, divide, multiply by the sign, subtract, times g
    "glu": 9,             # per output element: sigmoid (4), g * s (1), g * a * s * (1 - s) (4)
    "rrelu_training": 1,  # g * noise
    "hardshrink": 2,      # |x| > lambda ? g : 0: 2 comparisons
    "softshrink": 2,      # the same test: 2 comparisons
}


def _per_gradient_element(per_element: int | Callable[[tuple, dict], int]) -> CostFunction:
    """``per_element`` FLOPs (a number or a function of the call's options) per element of the incoming gradient."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost:
        flops = per_element if isinstance(per_element, int) else per_element(args, kwargs)
        return OpCost(flops * args[0].numel())
    return real_only(cost)


def _gelu(args: tuple, kwargs: dict) -> int:
    return ACTIVATION_BACKWARD_FLOPS["gelu_tanh" if kwargs.get("approximate", "none") == "tanh" else "gelu"]


def _elu(args: tuple, kwargs: dict) -> int:
    return ACTIVATION_BACKWARD_FLOPS["elu_result" if argument(args, kwargs, 4, "is_result") else "elu"]


def _rrelu(args: tuple, kwargs: dict) -> int:
    training = argument(args, kwargs, 5, "training")
    return ACTIVATION_BACKWARD_FLOPS["rrelu_training" if training else "leaky_relu"]


for _name in ("threshold", "hardtanh", "leaky_relu", "sigmoid", "tanh", "silu", "hardswish", "hardsigmoid",
              "softplus", "mish", "log_sigmoid", "glu", "hardshrink", "softshrink"):
    COSTS.register([f"{_name}_backward"], _per_gradient_element(ACTIVATION_BACKWARD_FLOPS[_name]))
COSTS.register(["_prelu_kernel_backward"], _per_gradient_element(ACTIVATION_BACKWARD_FLOPS["prelu"]))
COSTS.register(["gelu_backward"], _per_gradient_element(_gelu))
COSTS.register(["elu_backward"], _per_gradient_element(_elu))
COSTS.register(["rrelu_with_noise_backward"], _per_gradient_element(_rrelu))
#: Dropout's backward: g * mask * scale, 2 FLOPs per element (as its forward).
COSTS.register(["native_dropout_backward"], _per_gradient_element(2))


# --- softmax --------------------------------------------------------------------------------------------------

def softmax_backward_flops(rows: int, length: int) -> int:
    """The backward of ``rows`` softmax slices of ``length`` elements, 4n - 1 per slice of n: softmax
    y * (g - sum(g * y)) (n multiplies, n - 1 additions, n subtractions, n multiplies); log-softmax
    g - exp(y) * sum(g) (n - 1 additions, n exps, n multiplies, n subtractions)."""
    return rows * (4 * length - 1) if length else 0


def _softmax_backward(args: tuple, kwargs: dict, out: Any) -> OpCost:
    grad, dim = args[0], argument(args, kwargs, 2, "dim")
    length = grad.shape[-1 if dim is None else dim] if grad.dim() else 1
    return OpCost(softmax_backward_flops(grad.numel() // length if length else 0, length))


COSTS.register(["_softmax_backward_data", "_log_softmax_backward_data"], real_only(_softmax_backward))
COSTS.register(["_masked_softmax_backward"], real_only(lambda args, kwargs, out: _softmax_backward(
    (args[0], args[1], argument(args, kwargs, 3, "dim")), {}, out)))


# --- normalizations -------------------------------------------------------------------------------------------

#: Per element of a standardized input's gradient, besides the optional weight multiply: mean(g) (1), g * x_hat
#: (1), mean(g * x_hat) (1), x_hat * that mean (1), two subtractions (2), times rstd (1).
INPUT_GRADIENT_FLOPS = 7


def _mask(args: tuple, kwargs: dict, index: int, size: int = 3) -> list[bool]:
    mask = argument(args, kwargs, index, "output_mask", [True] * size)
    return [bool(flag) for flag in mask]


def statistics_backward(elements: int, parameter_elements: int, weight: bool, bias: bool, mask: list[bool]) -> OpCost:
    """Backward of a standardization with per-group statistics (layer, group norm): ``elements`` N, an affine of
    ``parameter_elements`` P applied along the other axis; a gradient is wanted only for a parameter there is.

    x_hat recomputed (2 per element) when the input or weight gradient is wanted; the input gradient
    (`INPUT_GRADIENT_FLOPS` + 1 with a weight per element); the weight gradient sum(g * x_hat) over the rows
    (N multiplies, N - P additions); the bias gradient sum(g) (N - P additions).
    """
    want_input, want_weight, want_bias = mask[0], mask[1] and weight, mask[2] and bias
    flops = NORMALIZE_FLOPS * elements if want_input or want_weight else 0
    if want_input:
        flops += (INPUT_GRADIENT_FLOPS + weight) * elements
    reduction = max(elements - parameter_elements, 0)
    if want_weight and parameter_elements:
        flops += elements + reduction
    if want_bias and parameter_elements:
        flops += reduction
    return OpCost(flops)


def _layer_norm_backward(args: tuple, kwargs: dict, out: Any) -> OpCost:
    grad, shape = args[0], args[2]
    weight, bias = argument(args, kwargs, 5, "weight"), argument(args, kwargs, 6, "bias")
    return statistics_backward(grad.numel(), prod(shape), weight is not None, bias is not None, _mask(args, kwargs, 7))


def _group_norm_backward(args: tuple, kwargs: dict, out: Any) -> OpCost:
    grad, affine = args[0], argument(args, kwargs, 4, "weight") is not None  # the bias gradient needs one too
    return statistics_backward(grad.numel(), args[6], affine, affine, _mask(args, kwargs, 9))


def _rms_norm_backward(args: tuple, kwargs: dict, out: Any) -> OpCost:
    """RMS norm: x_hat = x * rstd (1 per element); input gradient rstd * (g' - x_hat * mean(g' * x_hat)) with
    g' = g * w: the centred form without mean(g) and one subtraction (5, + 1 with a weight); weight gradient
    sum(g * x_hat) (N multiplies, N - P additions)."""
    grad, shape, weight = args[0], args[2], argument(args, kwargs, 4, "weight")
    want_input, want_weight = _mask(args, kwargs, 5, 2)
    elements, parameters = grad.numel(), prod(shape)
    flops = elements if want_input or want_weight else 0
    flops += (INPUT_GRADIENT_FLOPS - 2 + (weight is not None)) * elements if want_input else 0
    if want_weight and weight is not None:
        flops += elements + max(elements - parameters, 0)
    return OpCost(flops)


def batch_norm_backward_cost(grad: torch.Tensor, weight: Any, training: bool, mask: list[bool]) -> OpCost:
    """Batch norm over channel dimension 1 (C channels, m = N / C elements each), with batch statistics in
    training and running statistics otherwise; the weight gradient only when there is a weight."""
    elements = grad.numel()
    channels = grad.shape[1] if grad.dim() > 1 else 1
    wanted = [mask[0], mask[1] and weight is not None, mask[2]]
    if training:
        return OpCost(_training_batch_norm_backward(elements, channels, weight is not None, wanted))
    return OpCost(_evaluation_batch_norm_backward(elements, channels, wanted))


def _training_batch_norm_backward(elements: int, channels: int, weight: bool, wanted: list[bool]) -> int:
    """x_hat recomputed (2N); the per-channel sums of g (N - C) and of g * x_hat (N multiplies, N - C additions)
    serve the bias, weight and input gradients alike; the input gradient adds the two means (2C) and x_hat *
    mean, two subtractions, times rstd (4 per element), + 1 with a weight."""
    want_input, want_weight, want_bias = wanted
    reduction = elements - channels
    sum_g = reduction if want_bias or want_input else 0
    products = elements + reduction if want_weight or want_input else 0
    x_hat = NORMALIZE_FLOPS * elements if products else 0
    gradient = (4 + weight) * elements + 2 * MEAN_FLOPS * channels if want_input else 0
    return x_hat + sum_g + products + gradient


def _evaluation_batch_norm_backward(elements: int, channels: int, wanted: list[bool]) -> int:
    """The input gradient is g * (w * rstd) (1 per element; rstd and its product with w, 3 per channel); the
    weight gradient needs x_hat (2N) and sum(g * x_hat) (N + N - C); the bias gradient sum(g) (N - C)."""
    want_input, want_weight, want_bias = wanted
    reduction = elements - channels
    weight_gradient = NORMALIZE_FLOPS * elements + elements + reduction if want_weight else 0
    gradient = elements + (GROUP_FLOPS + 1) * channels if want_input else 0
    return weight_gradient + (reduction if want_bias else 0) + gradient


def _native_batch_norm_backward(args: tuple, kwargs: dict, out: Any) -> OpCost:
    """(grad_out, input, weight, running_mean, running_var, save_mean, save_invstd, train, eps, output_mask)."""
    training = bool(argument(args, kwargs, 7, "train"))
    return batch_norm_backward_cost(args[0], args[2], training, _mask(args, kwargs, 9))


def _batch_norm_backward(args: tuple, kwargs: dict, out: Any) -> OpCost:
    """``batch_norm_backward``: as native, training unless it got running buffers and no update."""
    training = bool(argument(args, kwargs, 7, "update")) or args[3] is None
    return batch_norm_backward_cost(args[0], args[2], training, _mask(args, kwargs, 9))


def _vendor_batch_norm_backward(args: tuple, kwargs: dict, out: Any) -> OpCost:
    """cuDNN / MIOpen: (input, grad_output, weight, ...), training statistics, every gradient."""
    return batch_norm_backward_cost(args[1], args[2], True, [True, True, True])


def _weight_norm_backward(args: tuple, kwargs: dict, out: Any) -> OpCost:
    """``w = v * g / ||v||`` over G slices of N elements in all: grad_g = sum(grad_w * v) / norm (N multiplies,
    N - G additions, G divisions); grad_v = (g / norm) * (grad_w - v * grad_g / norm) (2 per slice, 3 per
    element). 5N + 2G."""
    grad, dim = args[0], argument(args, kwargs, 4, "dim", 0)
    groups = grad.shape[dim] if grad.dim() else 1
    return OpCost(5 * grad.numel() + 2 * groups)


COSTS.register(["native_layer_norm_backward"], real_only(_layer_norm_backward))
COSTS.register(["native_group_norm_backward"], real_only(_group_norm_backward))
COSTS.register(["_fused_rms_norm_backward"], real_only(_rms_norm_backward))
COSTS.register(["native_batch_norm_backward"], real_only(_native_batch_norm_backward))
COSTS.register(["batch_norm_backward"], real_only(_batch_norm_backward))
COSTS.register(["cudnn_batch_norm_backward", "miopen_batch_norm_backward"], real_only(_vendor_batch_norm_backward))
COSTS.register(["_weight_norm_interface_backward"], real_only(_weight_norm_backward))


# --- pooling and interpolation --------------------------------------------------------------------------------


def _scatter_gradient(args: tuple, kwargs: dict, out: Any) -> OpCost:
    """Max pooling's backward adds each gradient element to the input element its window selected: 1 per
    gradient element (indices are data, never read)."""
    return OpCost(args[0].numel())


def _window_backward(dims: int) -> CostFunction:
    """Average pooling's backward: per window, 1 division of the gradient and 1 accumulation per element read
    (the forward window's reads, padding excluded)."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost:
        grad, source = args[0], args[1]
        kernel, stride, padding = args[2], args[3], args[4]
        reads = window_pool_reads(source, grad, dims, kernel, stride, padding, [1] * dims)
        return OpCost(reads + grad.numel())
    return real_only(cost)


def _adaptive_backward(dims: int) -> CostFunction:
    """Adaptive average pooling's backward: per window, 1 division and 1 accumulation per element read."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost:
        grad, source = args[0], args[1]
        return OpCost(adaptive_pool_reads(source, list(grad.shape[-dims:])) + grad.numel())
    return real_only(cost)


def _interpolation_backward(taps: int) -> CostFunction:
    """A weighted sum of T taps, reversed: each gradient element is scaled and added to T inputs, 2T FLOPs
    (one more than the forward's 2T - 1, whose first tap is not added)."""
    return real_only(lambda args, kwargs, out: OpCost(args[0].numel() * (interpolation_flops(taps) + 1)))


def _copies_backward(args: tuple, kwargs: dict, out: Any) -> OpCost:
    """The backward of a copy that repeats input elements (nearest upsampling, reflection and replication
    padding) sums the gradients of each element's copies: gradient elements - input elements additions."""
    return OpCost(max(args[0].numel() - numel(out), 0))


for _dims in (2, 3):
    COSTS.register([f"max_pool{_dims}d_with_indices_backward", f"adaptive_max_pool{_dims}d_backward"],
                   real_only(_scatter_gradient))
    COSTS.register([f"avg_pool{_dims}d_backward"], _window_backward(_dims))
    COSTS.register([f"_adaptive_avg_pool{_dims}d_backward"], _adaptive_backward(_dims))
COSTS.register(["upsample_linear1d_backward"], _interpolation_backward(2))
COSTS.register(["upsample_bilinear2d_backward"], _interpolation_backward(4))
COSTS.register(["upsample_trilinear3d_backward"], _interpolation_backward(8))
COSTS.register(["upsample_bicubic2d_backward"], _interpolation_backward(16))
COSTS.register([f"upsample_nearest{dims}d_backward" for dims in (1, 2, 3)]
               + [f"_upsample_nearest_exact{dims}d_backward" for dims in (1, 2, 3)]
               + [f"{mode}_pad{dims}d_backward" for mode in ("reflection", "replication") for dims in (1, 2, 3)],
               real_only(_copies_backward))


# --- embeddings -----------------------------------------------------------------------------------------------


def _embedding_backward(args: tuple, kwargs: dict, out: Any) -> OpCost:
    """Every looked-up row's gradient is added into the weight's gradient: 1 per gradient element. Index values
    are never read, so rows of ``padding_idx`` count as added too. ``scale_grad_by_freq`` adds 1 count per index
    and 1 multiply per gradient element."""
    grad, indices = args[0], args[1]
    scaled = bool(argument(args, kwargs, 4, "scale_grad_by_freq", False))
    return OpCost(grad.numel() * (1 + scaled) + (indices.numel() if scaled else 0))


COSTS.register(["embedding_dense_backward"], real_only(_embedding_backward))


# --- losses ---------------------------------------------------------------------------------------------------

MEAN_REDUCTION, SUM_REDUCTION = 1, 2


def reduction_flops(elements: int, reduction: int) -> int:
    """Reducing per-element losses: none 0, sum n - 1 additions, mean n (and a division)."""
    if reduction == SUM_REDUCTION:
        return max(elements - 1, 0)
    return elements if reduction == MEAN_REDUCTION else 0


def _nll_loss(args: tuple, kwargs: dict, out: Any) -> OpCost:
    """Per target: the picked log-probability negated (1), times its class weight (1 with ``weight``); then
    the reduction, and for a weighted mean the total weight (n - 1 additions)."""
    targets, weighted = args[1].numel(), argument(args, kwargs, 2, "weight") is not None
    reduction = argument(args, kwargs, 3, "reduction", MEAN_REDUCTION)
    total_weight = max(targets - 1, 0) if weighted and reduction == MEAN_REDUCTION else 0
    return OpCost(targets * (1 + weighted) + reduction_flops(targets, reduction) + total_weight)


def _nll_loss_backward(args: tuple, kwargs: dict, out: Any) -> OpCost:
    """Per target: -g (1), times its class weight (1 with ``weight``), divided by the total weight for a mean
    (1); the other gradient elements are zeros (an allocation)."""
    targets, weighted = args[2].numel(), argument(args, kwargs, 3, "weight") is not None
    mean = argument(args, kwargs, 4, "reduction", MEAN_REDUCTION) == MEAN_REDUCTION
    return OpCost(targets * (1 + weighted + mean))


def _pointwise_loss(per_element: int, reduction_index: int = 2) -> CostFunction:
    """A loss of ``per_element`` FLOPs per element, then its reduction (``reduction`` at ``reduction_index``)."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost:
        elements = args[0].numel()
        reduction = argument(args, kwargs, reduction_index, "reduction", MEAN_REDUCTION)
        return OpCost(per_element * elements + reduction_flops(elements, reduction))
    return real_only(cost)


def _logits_loss(args: tuple, kwargs: dict, out: Any) -> OpCost:
    """``binary_cross_entropy_with_logits(self, target, weight, pos_weight, reduction)``."""
    elements = args[0].numel()
    weighted = argument(args, kwargs, 2, "weight") is not None
    positive = argument(args, kwargs, 3, "pos_weight") is not None
    reduction = argument(args, kwargs, 4, "reduction", MEAN_REDUCTION)
    return OpCost((12 + weighted + 3 * positive) * elements + reduction_flops(elements, reduction))


def _loss_backward(per_element: int) -> CostFunction:
    """A pointwise loss's backward: ``per_element`` FLOPs per element (the derivative times g, a mean's 1/n
    folded into the same multiply)."""
    return real_only(lambda args, kwargs, out: OpCost(per_element * args[1].numel()))


COSTS.register(["nll_loss_forward", "nll_loss2d_forward"], real_only(_nll_loss))
COSTS.register(["nll_loss_backward", "nll_loss2d_backward"], real_only(_nll_loss_backward))
COSTS.register(["mse_loss"], _pointwise_loss(2))                # (x - t)^2: subtract, square
COSTS.register(["mse_loss_backward"], _loss_backward(3))        # 2 * (x - t) * g: subtract, 2 multiplies
# |d| < beta ? d^2 / (2 beta) : |d| - beta / 2 with d = x - t, its more expensive branch: subtract, abs, compare,
# square, halve, divide; backward: subtract, abs, compare, d / beta (or the sign), times g
COSTS.register(["smooth_l1_loss", "huber_loss"], _pointwise_loss(6))
COSTS.register(["smooth_l1_loss_backward", "huber_loss_backward"], _loss_backward(5))
# -(t log x + (1 - t) log(1 - x)): 2 logs, 2 subtractions, 2 multiplies, add, negate; backward
# g * (x - t) / max((1 - x) x, eps): 2 subtractions, 2 multiplies, max, divide
COSTS.register(["binary_cross_entropy"], _pointwise_loss(8, reduction_index=3))
COSTS.register(["binary_cross_entropy_backward"], _loss_backward(6))
# (1 - t) x + m + log(exp(-m) + exp(-x - m)) with m = max(-x, 0): 12; + 1 with a weight, + 3 with pos_weight
# ((pos_weight - 1) t + 1 scaling the log term); its backward dispatches separate operators
COSTS.register(["binary_cross_entropy_with_logits"], real_only(_logits_loss))
# log(1 + exp(-t x)): multiply, negate, exp, add, log; backward -t g z / (1 + z) with z = exp(-t x): 3 + 5
COSTS.register(["soft_margin_loss"], _pointwise_loss(5))
COSTS.register(["soft_margin_loss_backward"], _loss_backward(8))
