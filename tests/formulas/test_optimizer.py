"""Optimizer kernels: ``_foreach_*`` lists and fused steps against hand computations, and the default,
``foreach=True`` and ``fused=True`` implementations of one optimizer counting the same FLOPs."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchscan_testing import operator_flops

from torchscan import measure_flops
from torchscan.formulas.operators.table import OPERATOR_FORMULAS

aten = torch.ops.aten
#: 10 parameter elements in 2 tensors.
SHAPES = ((2, 3), (4,))


def tensors(fill: float = 1.0, device: str = "cpu") -> list[torch.Tensor]:
    return [torch.full(shape, fill, device=device) for shape in SHAPES]


def test_foreach_operators_cost_their_base_operator_per_tensor():
    a, b, c = tensors(), tensors(2.0), tensors(3.0)
    assert operator_flops(lambda: torch._foreach_add_(a, b, alpha=0.5)) == {"aten._foreach_add_": 10 * 2}
    assert operator_flops(lambda: torch._foreach_mul_(a, 0.9)) == {"aten._foreach_mul_": 10}
    assert operator_flops(lambda: torch._foreach_lerp_(a, b, 0.1)) == {"aten._foreach_lerp_": 10 * 3}
    assert operator_flops(lambda: torch._foreach_sqrt(a)) == {"aten._foreach_sqrt": 10}
    # a scalar list: the value scales the first tensor (6 x 3) and not the second (4 x 2)
    assert operator_flops(lambda: torch._foreach_addcdiv_(a, b, c, [0.1, 1.0])) == {"aten._foreach_addcdiv_": 26}
    assert operator_flops(lambda: torch._foreach_addcmul_(a, b, c, value=0.5)) == {"aten._foreach_addcmul_": 30}
    # the 2-norm of each tensor: 2n
    assert operator_flops(lambda: torch._foreach_norm(a)) == {"aten._foreach_norm": 12 + 8}
    # the maximum of each tensor: n - 1 comparisons
    assert operator_flops(lambda: torch._foreach_max(a)) == {"aten._foreach_max": 5 + 3}


def test_foreach_copies_and_zeros_are_not_work():
    a, b = tensors(), tensors(2.0)
    result = measure_flops(lambda: (torch._foreach_copy_(a, b), torch._foreach_zero_(a)))
    assert {row["operator"]: row["reason"] for row in result["ignored"]} == {
        "aten._foreach_copy_": "copy", "aten._foreach_zero_": "allocation"}


def _parameters() -> list[nn.Parameter]:
    parameters = [nn.Parameter(tensor) for tensor in tensors()]
    for parameter in parameters:
        parameter.grad = torch.full_like(parameter, 0.5)
    return parameters


OPTIMIZERS = {  # name -> (factory, FLOPs per element of a step after the first, by hand)
    "adamw": (lambda params, **options: torch.optim.AdamW(params, **options), 14),  # 13 + decoupled decay
    "adam": (lambda params, **options: torch.optim.Adam(params, **options), 13),
    "adam-decay-amsgrad": (lambda params, **options: torch.optim.Adam(
        params, weight_decay=0.1, amsgrad=True, **options), 13 + 2 + 1),
    "sgd-momentum": (lambda params, **options: torch.optim.SGD(params, lr=0.1, momentum=0.9, **options), 4),
    "sgd-nesterov-decay": (lambda params, **options: torch.optim.SGD(
        params, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4, **options), 2 + 2 + 2 + 2),
    "adagrad": (lambda params, **options: torch.optim.Adagrad(params, **options), 7),
}
IMPLEMENTATIONS = {"default": {"foreach": False}, "foreach": {"foreach": True}, "fused": {"fused": True}}


def second_step(name: str, implementation: str) -> dict:
    """``measure_flops`` of the second step (the first creates the state) of one optimizer implementation."""
    factory, _ = OPTIMIZERS[name]
    optimizer = factory(_parameters(), **IMPLEMENTATIONS[implementation])
    optimizer.step()
    return measure_flops(optimizer.step)


@pytest.mark.parametrize("implementation", list(IMPLEMENTATIONS))
@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_optimizer_step_is_complete_and_counts_the_documented_work(name, implementation):
    result = second_step(name, implementation)
    assert result["total"]["status"] == "complete"
    # the per-element work, plus one addition per tensor for the step counter (Adam, AdamW, Adagrad)
    steps = 0 if name.startswith("sgd") else len(SHAPES)
    assert result["total"]["value"] == 10 * OPTIMIZERS[name][1] + steps
    # the profiler's markers around the step are bookkeeping
    reasons = {row["operator"]: row["reason"] for row in result["ignored"]}
    assert reasons["profiler._record_function_enter_new"] == "bookkeeping"


def test_fused_steps_by_hand_on_meta():
    """``torch.optim`` refuses ``fused=True`` for meta parameters, but the fused kernels run on meta tensors and
    are counted from shapes alone: 10 elements x the per-element work."""
    lists = [tensors(device="meta") for _ in range(5)]
    options = {"lr": 0.1, "beta1": 0.9, "beta2": 0.999, "weight_decay": 0.01, "eps": 1e-8, "amsgrad": False,
               "maximize": False}
    steps = tensors(device="meta")
    assert operator_flops(lambda: aten._fused_adamw_(*lists, steps, **options)) == {"aten._fused_adamw_": 140}
    assert operator_flops(lambda: aten._fused_adam_(*lists, steps, **options)) == {"aten._fused_adam_": 150}
    sgd = {"weight_decay": 0.0, "momentum": 0.9, "lr": 0.1, "dampening": 0.5, "nesterov": False,
           "maximize": True, "is_first_step": False}
    assert OPERATOR_FORMULAS[aten._fused_sgd_](*lists[:3], **sgd) == 10 * (2 + 3 + 1)
    parameter = nn.Parameter(torch.empty(2, device="meta"))
    parameter.grad = torch.empty(2, device="meta")
    with pytest.raises(RuntimeError, match="fused=True"):
        torch.optim.AdamW([parameter], fused=True).step()
