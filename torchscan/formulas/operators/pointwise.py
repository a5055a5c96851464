"""Operator costs of pointwise work: elementwise arithmetic, comparisons, activations and training dropout.

Every output element costs the per-element count of :mod:`.elementwise` (activations: :mod:`..conventions`): real
operands as listed, complex ones only where a count is stated (add, sub, rsub, mul, neg, without an ``alpha``
scaling), integer and boolean arithmetic 0 FLOPs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..conventions import FLOPS_PER_ELEMENT
from .calls import NO_WORK, CostFunction, CostTable, OpCost, argument, not_one, numel, operand_kind
from .elementwise import ARITHMETIC_FLOPS, COMPLEX_ARITHMETIC_FLOPS

#: Pointwise packets -> cost of one call.
COSTS = CostTable()


def pointwise(real: int | Callable[[tuple, dict], int], complex_flops: int | None = None) -> CostFunction:
    """FLOPs per output element: ``real`` (a number or a function of the call's options) for real operands,
    ``complex_flops`` for complex ones (``None``: no stated count), 0 for integer and boolean arithmetic."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        kind = operand_kind(args, kwargs, out)
        if kind == "integral":
            return NO_WORK
        if kind == "real":
            per_element = real if isinstance(real, int) else real(args, kwargs)
        elif kind == "complex" and complex_flops is not None and not _scaled_by_alpha(args, kwargs):
            per_element = complex_flops
        else:
            return None
        return OpCost(per_element * numel(out))
    return cost


# --- arithmetic -----------------------------------------------------------------------------------------------


def _scaled_by_alpha(args: tuple, kwargs: dict) -> bool:
    """``add``/``sub``/``rsub`` scale ``other`` by ``alpha`` (keyword, or the third argument of ``.Scalar``)."""
    return not_one(argument(args, kwargs, 2, "alpha", 1))


def _add_like(args: tuple, kwargs: dict) -> int:
    return ARITHMETIC_FLOPS["add"] + int(_scaled_by_alpha(args, kwargs))


def _div(args: tuple, kwargs: dict) -> int:
    return ARITHMETIC_FLOPS["div"] + int(kwargs.get("rounding_mode") is not None)


def _with_value_scale(name: str) -> Callable[[tuple, dict], int]:
    return lambda args, kwargs: ARITHMETIC_FLOPS[name] + int(not_one(kwargs.get("value", 1)))


def _clamp(args: tuple, kwargs: dict) -> int:
    """One comparison per bound given."""
    return sum(argument(args, kwargs, index, name) is not None for index, name in ((1, "min"), (2, "max")))


#: Pointwise operators that PyTorch has no in-place ``name_`` variant of.
WITHOUT_INPLACE_TWIN = frozenset({"rsub", "fmax", "fmin", "maximum", "minimum", "hardshrink", "softshrink",
                                  "isfinite", "isinf", "isnan", "isneginf", "isposinf", "_prelu_kernel", "prelu",
                                  "softplus", "log_sigmoid_forward", "glu"})

for _name in ("add", "sub", "rsub"):
    COSTS.register([_name], pointwise(_add_like, COMPLEX_ARITHMETIC_FLOPS[_name]),
                   inplace=_name not in WITHOUT_INPLACE_TWIN)
COSTS.register(["mul"], pointwise(ARITHMETIC_FLOPS["mul"], COMPLEX_ARITHMETIC_FLOPS["mul"]), inplace=True)
COSTS.register(["neg"], pointwise(ARITHMETIC_FLOPS["neg"], COMPLEX_ARITHMETIC_FLOPS["neg"]), inplace=True)
COSTS.register(["div"], pointwise(_div), inplace=True)
COSTS.register(["addcmul"], pointwise(_with_value_scale("addcmul")), inplace=True)
COSTS.register(["addcdiv"], pointwise(_with_value_scale("addcdiv")), inplace=True)
COSTS.register(["clamp"], pointwise(_clamp), inplace=True)
for _name in sorted(set(ARITHMETIC_FLOPS) - {"add", "sub", "rsub", "mul", "neg", "div", "addcmul", "addcdiv",
                                             "rrelu"}):
    COSTS.register([_name], pointwise(ARITHMETIC_FLOPS[_name]), inplace=_name not in WITHOUT_INPLACE_TWIN)


# --- activations ----------------------------------------------------------------------------------------------


def _gelu(args: tuple, kwargs: dict) -> int:
    return FLOPS_PER_ELEMENT["gelu_tanh" if kwargs.get("approximate", "none") == "tanh" else "gelu"]


def _elu(args: tuple, kwargs: dict) -> int:
    """elu, plus one multiply for ``scale`` != 1 (selu) and one for ``input_scale`` != 1."""
    scale = not_one(argument(args, kwargs, 2, "scale", 1))
    input_scale = not_one(argument(args, kwargs, 3, "input_scale", 1))
    return FLOPS_PER_ELEMENT["elu"] + int(scale) + int(input_scale)


#: Activation packets -> key of the activation table (or a function of the call's options).
ACTIVATION_OPERATORS: dict[str, str | Callable[[tuple, dict], int]] = {
    "relu": "relu", "hardtanh": "hardtanh", "threshold": "threshold", "leaky_relu": "leaky_relu",
    "_prelu_kernel": "prelu", "prelu": "prelu", "elu": _elu, "selu": "selu", "celu": "celu", "sigmoid": "sigmoid",
    "tanh": "tanh", "silu": "silu", "gelu": _gelu, "mish": "mish", "hardswish": "hardswish",
    "hardsigmoid": "hardsigmoid", "softplus": "softplus", "log_sigmoid_forward": "log_sigmoid", "glu": "glu",
}
for _name, _key in ACTIVATION_OPERATORS.items():
    COSTS.register([_name], pointwise(FLOPS_PER_ELEMENT[_key] if isinstance(_key, str) else _key),
                   inplace=_name not in WITHOUT_INPLACE_TWIN)
COSTS.register(["rrelu_with_noise"], pointwise(ARITHMETIC_FLOPS["rrelu"]), inplace=True)


# --- dropout --------------------------------------------------------------------------------------------------

_MASK_AND_RESCALE = pointwise(2)


def _masked_dropout(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    """Training dropout: 1 mask multiply + 1 rescale per element (drawing the mask is not arithmetic)."""
    probability, train = argument(args, kwargs, 1, "p", 0.0), argument(args, kwargs, 2, "train", True)
    if train is False or probability == 0:
        return NO_WORK
    return _MASK_AND_RESCALE(args, kwargs, out)


COSTS.register(["native_dropout"], _masked_dropout)
