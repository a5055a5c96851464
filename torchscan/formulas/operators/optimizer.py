"""Operator costs of optimizer kernels: the ``_foreach_*`` list operators and the fused optimizer steps.

A ``_foreach_<op>`` call applies ``<op>`` to each tensor of its lists: it costs the sum of ``<op>``'s pointwise
cost (:mod:`.pointwise`, :mod:`.reductions`) over the list, element by element. A fused step
(``_fused_adam_``, ``_fused_adamw_``, ``_fused_sgd_``, ``_fused_adagrad_``) costs, per parameter element, the
arithmetic the default single-tensor implementation of the same optimizer dispatches as separate operators
(`adam_element_flops`, `sgd_element_flops`, `adagrad_element_flops`), so the default, ``foreach=True`` and
``fused=True`` steps of one optimizer count the same FLOPs. Scalar work done once per tensor (bias corrections,
learning-rate schedules) is Python arithmetic in the default implementation and is not counted in any of them;
the step counters (``state_steps``) are incremented by separate operators, counted where they run.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from . import pointwise, reductions
from .calls import CostFunction, CostTable, OpCost, not_one, operand_kind, packet

#: Optimizer packets -> cost of one call.
COSTS = CostTable()


# --- foreach list operators -----------------------------------------------------------------------------------

#: ``_foreach_<name>`` operators priced as their base operator applied to every tensor of the lists (each has an
#: in-place ``_`` twin). ``_foreach_lgamma``, ``_foreach_powsum`` and ``_foreach_mm`` have no base formula.
FOREACH_POINTWISE = ("abs", "acos", "add", "addcdiv", "addcmul", "asin", "atan", "ceil", "clamp_max", "clamp_min",
                     "cos", "cosh", "div", "erf", "erfc", "exp", "expm1", "floor", "frac", "lerp", "log", "log10",
                     "log1p", "log2", "maximum", "minimum", "mul", "neg", "pow", "reciprocal", "round", "rsqrt",
                     "sigmoid", "sign", "sin", "sinh", "sqrt", "sub", "tan", "tanh", "trunc")
#: Out-of-place reductions over each tensor of the list, priced as the base reduction.
FOREACH_REDUCTIONS = {"norm": "linalg_vector_norm", "max": "amax"}
#: Base operators whose ``value`` keyword is the foreach variant's positional scalar at index 3.
VALUE_AT_3 = frozenset({"addcdiv", "addcmul"})


def _list_length(args: tuple) -> int:
    """The length of the call's first tensor list (a Scalar first argument, as ``pow.ScalarAndTensor``, aside)."""
    return next((len(arg) for arg in args if isinstance(arg, (list, tuple))), 0)


def _per_tensor_calls(args: tuple, kwargs: dict, out: Any, inplace: bool, value_at_3: bool
                      ) -> Iterator[tuple[tuple, dict, Any]]:
    """The base operator's ``(args, kwargs, out)`` for each position of the lists; an in-place call's result is
    its first list."""
    for index in range(_list_length(args)):
        picked = tuple(arg[index] if isinstance(arg, (list, tuple)) else arg for arg in args)
        options = dict(kwargs)
        if value_at_3 and len(picked) > 3:
            picked, options["value"] = picked[:3], picked[3]
        result = picked[0] if inplace else (out[index] if isinstance(out, (list, tuple)) else out)
        yield picked, options, result


def foreach(base: CostFunction, *, inplace: bool, value_at_3: bool = False) -> CostFunction:
    """The sum of ``base``'s cost over the lists; ``None`` when ``base`` has no count for one of the tensors."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        flops = 0
        for call in _per_tensor_calls(args, kwargs, out, inplace, value_at_3):
            each = base(*call)
            if each is None:
                return None
            flops += each.flops
        return OpCost(flops)
    return cost


def _base(name: str) -> CostFunction:
    """The cost function of base operator ``name``, from the pointwise or reduction family."""
    base = packet(name)
    return pointwise.COSTS.get(base) or reductions.COSTS[base]


for _name in FOREACH_POINTWISE:
    for _inplace in (False, True):
        COSTS.register([f"_foreach_{_name}" + "_" * _inplace],
                       foreach(_base(_name), inplace=_inplace, value_at_3=_name in VALUE_AT_3))
for _name, _base_name in FOREACH_REDUCTIONS.items():
    COSTS.register([f"_foreach_{_name}"], foreach(_base(_base_name), inplace=False))


# --- fused optimizer steps ------------------------------------------------------------------------------------


def adam_element_flops(*, decoupled: bool, weight_decay: float, amsgrad: bool, maximize: bool,
                       grad_scale: bool) -> int:
    """FLOPs per parameter element of one Adam/AdamW step, as the single-tensor implementation dispatches them:
    exp_avg.lerp_(g, 1 - beta1) (3); exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 - beta2) (1 + 3);
    denom = sqrt(exp_avg_sq) / sqrt(bias_correction2) + eps (3); param.addcdiv_(exp_avg, denom, value=-step) (3).
    Weight decay: AdamW param.mul_(1 - lr * wd) (1), Adam g + wd * param (2); amsgrad a maximum (1); maximize a
    negation (1); an AMP ``grad_scale`` the division of the gradient by it (1)."""
    decay = (1 if decoupled else 2) if weight_decay else 0
    return 13 + decay + int(amsgrad) + int(maximize) + int(grad_scale)


def sgd_element_flops(*, weight_decay: float, momentum: float, dampening: float, nesterov: bool, maximize: bool,
                      first_step: bool, grad_scale: bool) -> int:
    """FLOPs per parameter element of one SGD step, as the single-tensor implementation dispatches them:
    param.add_(g, alpha=-lr) (2); weight decay g + wd * param (2); momentum buf.mul_(m).add_(g, alpha=1 - d)
    (2, 3 with dampening; the first step copies g, 0); Nesterov g + m * buf (2); maximize (1); ``grad_scale`` (1)."""
    flops = 2 + (2 if weight_decay else 0) + int(maximize) + int(grad_scale)
    if momentum:
        flops += (0 if first_step else 2 + int(not_one(1 - dampening))) + (2 if nesterov else 0)
    return flops


def adagrad_element_flops(*, weight_decay: float, maximize: bool, grad_scale: bool) -> int:
    """FLOPs per parameter element of one Adagrad step: state_sum.addcmul_(g, g) (2); std = sqrt(state_sum) + eps
    (2); param.addcdiv_(g, std, value=-clr) (3); weight decay g + wd * param (2); maximize (1); ``grad_scale`` (1)."""
    return 7 + (2 if weight_decay else 0) + int(maximize) + int(grad_scale)


def _fused_step(per_element: Any) -> CostFunction:
    """A fused step over the parameters of ``args[0]``: ``per_element(kwargs)`` FLOPs per element."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        if operand_kind(tuple(args[0]), {}, None) != "real":
            return None
        return OpCost(sum(parameter.numel() for parameter in args[0]) * per_element(kwargs))
    return cost


def _adam(decoupled: bool) -> CostFunction:
    return _fused_step(lambda kwargs: adam_element_flops(
        decoupled=decoupled, weight_decay=kwargs.get("weight_decay", 0), amsgrad=bool(kwargs.get("amsgrad")),
        maximize=bool(kwargs.get("maximize")), grad_scale=kwargs.get("grad_scale") is not None))


def _sgd(kwargs: dict) -> int:
    return sgd_element_flops(
        weight_decay=kwargs.get("weight_decay", 0), momentum=kwargs.get("momentum", 0),
        dampening=kwargs.get("dampening", 0), nesterov=bool(kwargs.get("nesterov")),
        maximize=bool(kwargs.get("maximize")), first_step=bool(kwargs.get("is_first_step")),
        grad_scale=kwargs.get("grad_scale") is not None)


def _adagrad(kwargs: dict) -> int:
    return adagrad_element_flops(weight_decay=kwargs.get("weight_decay", 0), maximize=bool(kwargs.get("maximize")),
                                 grad_scale=kwargs.get("grad_scale") is not None)


COSTS.register(["_fused_adam_", "_fused_adam"], _adam(decoupled=False))
COSTS.register(["_fused_adamw_", "_fused_adamw"], _adam(decoupled=True))
COSTS.register(["_fused_sgd_", "_fused_sgd"], _fused_step(_sgd))
COSTS.register(["_fused_adagrad_", "_fused_adagrad"], _fused_step(_adagrad))
