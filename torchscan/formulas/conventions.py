"""Counting conventions that the module view and the operator view share, each defined once.

A module and the operators it dispatches are priced alike: the per-element cost of an activation, the softmax
of one slice, the steps of a standardization, complex arithmetic, the gate structure of a recurrent cell and the
elements a sliding window reads are the same numbers in :mod:`.modules` (one estimate per layer call),
:mod:`.operators` (one count per dispatched ATen call) and :mod:`.transformer` (native attention and layers).

Conventions (real floating point): every arithmetic operation of the defining formula is 1 FLOP (negation and
``abs`` included), a transcendental function (exp, log, tanh, erf, pow) is 1 FLOP, a comparison is 1 FLOP, and
selecting a value (``where``) is free. Tensor values are never inspected, so a function with branches is charged
its more expensive branch for every element. In-place variants do the same work.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from math import prod
from typing import Any

# --- activations and softmax ------------------------------------------------------------------------------------

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


# --- normalization -----------------------------------------------------------------------------------------

#: FLOPs per element of each step of a standardization (a group holds m elements).
MEAN_FLOPS = 1        # m - 1 additions and 1 division per group
VARIANCE_FLOPS = 3    # subtract the mean, square, accumulate (m - 1 additions and 1 division per group)
NORMALIZE_FLOPS = 2   # subtract the mean, multiply by the inverse standard deviation
#: FLOPs per normalized group: add eps, rsqrt (one transcendental).
GROUP_FLOPS = 2
#: FLOPs per channel of a training-mode running-statistics update: mean (2 multiplies, 1 add) and variance
#: (1 multiply for the unbiased m/(m-1) correction, 2 multiplies, 1 add).
RUNNING_UPDATE_FLOPS = 7

#: RMSNorm per element: square, accumulate (m - 1 additions and 1 division per group), multiply by rsqrt.
RMS_FLOPS = 3
#: LocalResponseNorm per element, besides its size - 1 window additions: square, divide by size (average),
#: multiply by alpha, add k, power beta, divide the input.
LRN_FLOPS = 6


# --- complex arithmetic ------------------------------------------------------------------------------------

#: Real MACs per complex multiply-accumulate: (a+bi)(c+di) accumulates ac, -bd, ad and bc.
COMPLEX_MAC_REAL_MACS = 4
#: Real FLOPs per complex addition (a bias add).
COMPLEX_ADD_REAL_FLOPS = 2


# --- recurrent cells ---------------------------------------------------------------------------------------

SIGMOID = FLOPS_PER_ELEMENT["sigmoid"]
TANH = FLOPS_PER_ELEMENT["tanh"]


@dataclass(frozen=True)
class CellKind:
    """The gate structure of one recurrent cell."""

    gates: int            # gate blocks stacked in each weight matrix
    pointwise_flops: int  # per hidden unit and step, besides the gate matmuls and the biases


def rnn_cell_kind(nonlinearity: str) -> CellKind:
    """h' = act(W_ih x + W_hh h): 1 sum of the two products + the activation."""
    return CellKind(gates=1, pointwise_flops=1 + FLOPS_PER_ELEMENT[nonlinearity])


#: 4 sums of gate products; sigmoid for i, f, o and tanh for g; c' = f*c + i*g (3); h' = o * tanh(c') (2).
LSTM_CELL = CellKind(gates=4, pointwise_flops=4 + 3 * SIGMOID + TANH + 3 + TANH + 1)
#: r, z: 1 sum each; n = tanh(W_in x + r * (W_hn h)): 1 multiply + 1 sum; sigmoid for r, z, tanh for n;
#: h' = (1 - z) * n + z * h: 4.
GRU_CELL = CellKind(gates=3, pointwise_flops=2 + 2 + 2 * SIGMOID + TANH + 4)


def step_macs(kind: CellKind, input_size: int, hidden_size: int, state_size: int, proj_size: int = 0) -> int:
    """MACs of one step for one batch row: input-hidden and hidden-hidden gate matmuls, LSTM projection."""
    return kind.gates * hidden_size * (input_size + state_size) + hidden_size * proj_size


def step_flops(kind: CellKind, hidden_size: int, macs: int, bias: bool) -> int:
    """FLOPs of one step for one batch row, given that step's MACs."""
    bias_adds = 2 * kind.gates if bias else 0
    return 2 * macs + hidden_size * (kind.pointwise_flops + bias_adds)


# --- sliding and adaptive windows --------------------------------------------------------------------------

def window_reads(length: int, outputs: int, kernel: int, stride: int, padding: int, dilation: int = 1) -> int:
    """Input elements (padding excluded) read by all ``outputs`` sliding windows along one dimension."""
    reads = 0
    for position in range(outputs):
        start = position * stride - padding
        first_tap = max(0, -(start // dilation))
        last_tap = min(kernel - 1, (length - 1 - start) // dilation)
        reads += max(0, last_tap - first_tap + 1)
    return reads


def adaptive_windows(length: int, outputs: int) -> list[int]:
    """Window sizes of PyTorch's adaptive rule: [floor(i * L / O), ceil((i + 1) * L / O))."""
    return [-(-(index + 1) * length // outputs) - index * length // outputs for index in range(outputs)]


def _per_dim(value: Any, dims: int, default: list[int]) -> list[int]:
    """A pooling argument as one value per spatial dimension (an empty list means ``default``)."""
    if value is None or (isinstance(value, (tuple, list)) and not value):
        return default
    values = [value] if isinstance(value, int) else list(value)
    return values * dims if len(values) == 1 else values


def window_pool_reads(source: Any, pooled: Any, dims: int, kernel_size: Any, stride: Any, padding: Any,
                      dilation: Any) -> int:
    """Elements read by every sliding window of a pooling from ``source`` to ``pooled`` (padding excluded,
    dilation followed); windows along different dimensions are independent, so the sum is a product."""
    kernel = _per_dim(kernel_size, dims, [])
    strides = _per_dim(stride, dims, kernel)
    paddings = _per_dim(padding, dims, [0] * dims)
    dilations = _per_dim(dilation, dims, [1] * dims)
    spatial = zip(source.shape[-dims:], pooled.shape[-dims:], kernel, strides, paddings, dilations, strict=False)
    per_dim = [window_reads(*window) for window in spatial]
    windows = pooled.numel()
    leading = windows // prod(pooled.shape[-dims:]) if windows else 0
    return leading * prod(per_dim)


def adaptive_pool_reads(source: Any, output_size: list[int]) -> int:
    """Elements read by every adaptive window (they are separable: summed exactly per dimension)."""
    spatial = list(source.shape[-len(output_size):])
    leading = source.numel() // prod(spatial) if prod(spatial) else 0
    return leading * prod(sum(adaptive_windows(size, target)) for size, target in zip(spatial, output_size,
                                                                                       strict=False))
