"""The per-element and per-group FLOP counts shared by the operator view and the functional-op estimates.

One table for both views of an operator (:mod:`.table` and :mod:`.functional`), built on the conventions that the
module view uses too (:mod:`..conventions`: activations, softmax, normalization steps, complex arithmetic), so
that a module and the operators it dispatches are priced alike. Complex operands: one complex multiply is 6 real
FLOPs (4 multiplies and 2 additions), one complex addition is 2; other complex operators have no stated count.
Integer and boolean arithmetic is not floating point: 0 FLOPs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from ..conventions import COMPLEX_ADD_REAL_FLOPS, GROUP_FLOPS, MEAN_FLOPS, NORMALIZE_FLOPS, RMS_FLOPS, VARIANCE_FLOPS

#: Real FLOPs per output element of the arithmetic, comparison and rounding operators (activations aside).
ARITHMETIC_FLOPS: dict[str, int] = {
    # one arithmetic operation (a scaling by alpha != 1 or value != 1 is priced separately)
    **dict.fromkeys(("add", "sub", "rsub", "mul", "div", "neg", "abs", "reciprocal", "remainder", "fmod",
                     "sign", "sgn", "floor", "ceil", "round", "trunc"), 1),
    # one transcendental or power function
    **dict.fromkeys(("sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos",
                     "tan", "asin", "acos", "atan", "atan2", "sinh", "cosh", "asinh", "acosh", "atanh", "erf",
                     "erfc", "erfinv", "pow", "float_power"), 1),
    # one comparison (clamp: one per bound given)
    **dict.fromkeys(("eq", "ne", "lt", "le", "gt", "ge", "maximum", "minimum", "fmax", "fmin", "clamp_min",
                     "clamp_max", "isnan", "isinf", "isposinf", "isneginf", "isfinite", "logical_and",
                     "logical_or", "logical_xor", "logical_not", "bitwise_and", "bitwise_or", "bitwise_xor",
                     "bitwise_not"), 1),
    "frac": 2,          # x - trunc(x)
    "nan_to_num": 3,    # 3 comparisons (nan, +inf, -inf); the replacement is a free selection
    "addcmul": 2,       # self + t1 * t2 (value != 1 adds 1 multiply)
    "addcdiv": 2,       # self + t1 / t2 (value != 1 adds 1 multiply)
    "lerp": 3,          # self + weight * (end - self): subtract, multiply, add
    "hardshrink": 2,    # |x| > lambda ? x : 0: 2 comparisons
    "softshrink": 3,    # 2 comparisons + 1 shift by lambda
    "rrelu": 2,         # evaluation-mode rrelu is a leaky relu: 1 comparison + 1 multiply
    "xlogy": 3,         # x == 0 ? 0 : x * log(y): comparison, log, multiply (KL divergence, entropies)
}

#: Real FLOPs per output element when an operand is complex (a real operand is promoted to complex).
COMPLEX_ARITHMETIC_FLOPS: dict[str, int] = {
    "add": COMPLEX_ADD_REAL_FLOPS,
    "sub": COMPLEX_ADD_REAL_FLOPS,
    "rsub": COMPLEX_ADD_REAL_FLOPS,
    "neg": 2,           # both parts negated
    "mul": 6,           # (a+bi)(c+di): 4 multiplies, 2 additions
}

#: FLOPs of one reduction over a group of ``n`` elements.
REDUCTION_FLOPS: dict[str, Callable[[int], int]] = {
    "sum": lambda n: n - 1,                     # n - 1 additions
    "prod": lambda n: n - 1,                    # n - 1 multiplies
    "mean": lambda n: n,                        # n - 1 additions + 1 division
    "extremum": lambda n: n - 1,                # max, min, argmax, argmin: n - 1 comparisons
    "aminmax": lambda n: 2 * (n - 1),           # both extremes
    "any_all": lambda n: 2 * n - 1,             # n nonzero tests + n - 1 logical combinations
    "var": lambda n: (MEAN_FLOPS + VARIANCE_FLOPS) * n,       # mean, then subtract, square, accumulate, divide
    "std": lambda n: (MEAN_FLOPS + VARIANCE_FLOPS) * n + 1,   # var + 1 sqrt
    "logsumexp": lambda n: 4 * n,               # max (n-1), shift (n), exp (n), sum (n-1), log (1), add max (1)
}

#: FLOPs of one complex reduction over ``n`` elements: complex additions only.
COMPLEX_REDUCTION_FLOPS: dict[str, Callable[[int], int]] = {
    "sum": lambda n: COMPLEX_ADD_REAL_FLOPS * (n - 1),
    "mean": lambda n: COMPLEX_ADD_REAL_FLOPS * (n - 1) + 2,   # + both parts divided by n
}


def vector_norm_flops(order: float, n: int) -> int:
    """FLOPs of the ``order``-norm of ``n`` real elements.

    2: square, accumulate, sqrt (2n). 1: abs, accumulate (2n - 1). +-inf: abs, n - 1 comparisons (2n - 1).
    0: n nonzero tests, n - 1 additions (2n - 1). Other p: abs, power, accumulate, final root (3n).
    """
    if order == 2:
        return 2 * n
    if order in (1, 0, float("inf"), float("-inf")):
        return 2 * n - 1
    return 3 * n


def norm_flops_per_group(n: int, *, centered: bool) -> int:
    """FLOPs of standardizing one group of ``n`` elements with statistics computed from it (no affine).

    Centered (layer, group, instance, training batch norm): mean, variance, normalize per element, plus
    ``rsqrt(var + eps)`` per group. Not centered (RMS norm): square and mean per element, scale per element.
    """
    per_element = MEAN_FLOPS + VARIANCE_FLOPS + NORMALIZE_FLOPS if centered else RMS_FLOPS
    return per_element * n + GROUP_FLOPS


def interpolation_flops(taps: int) -> int:
    """FLOPs of one interpolated output element: a weighted sum of ``taps`` inputs (weights are index math)."""
    return 2 * taps - 1


INTEGRAL_DTYPES = frozenset({torch.bool, torch.uint8, torch.uint16, torch.uint32, torch.uint64, torch.int8, torch.int16,
                             torch.int32, torch.int64})


@functools.cache  # it runs for every operand of every dispatched operator
def dtype_kind(dtype: torch.dtype) -> str | None:
    """``real``, ``complex`` or ``integral``; ``None`` for dtypes without a stated convention (quantized)."""
    if dtype.is_complex:
        return "complex"
    if dtype.is_floating_point:
        return "real"
    if dtype in INTEGRAL_DTYPES:
        return "integral"
    return None
