"""Activation formulas against hand computations (docs/conventions/norm-activation-recurrent.md)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torchscan_testing import estimate as estimate_call

from torchscan.formulas.conventions import FLOPS_PER_ELEMENT
from torchscan.formulas.modules.activation import HANDLERS, METHOD


def estimate(module: nn.Module, *args, **kwargs) -> dict:
    """The built-in estimate of one call, in the mode the test put the module in."""
    return estimate_call(module, *args, training=None, **kwargs)




def estimate_on_meta(module: nn.Module, *args: torch.Tensor) -> dict:
    meta_module = copy.deepcopy(module).to("meta")
    return estimate(meta_module, *(torch.empty(arg.shape, dtype=arg.dtype, device="meta") for arg in args))


def assert_plain_counts(result: dict) -> None:
    for value in result.values():
        if not isinstance(value, dict):
            assert type(value) is int and value >= 0


# Input (2, 3, 4): 24 elements. FLOPs per element written out from each formula.
ELEMENTWISE_CASES = [
    (nn.ReLU(), 1),                          # max(x, 0)
    (nn.ReLU6(), 2),                         # two comparisons
    (nn.LeakyReLU(0.1), 2),                  # comparison + multiply
    (nn.PReLU(), 2),
    (nn.ELU(), 4),                           # comparison, exp, subtract, multiply
    (nn.SELU(), 5),                          # elu + scale
    (nn.CELU(), 5),                          # comparison, divide, exp, subtract, multiply
    (nn.GELU(), 5),                          # divide, erf, add, multiply, multiply
    (nn.GELU(approximate="tanh"), 9),        # x^3 (2), *c, +x, *sqrt(2/pi), tanh, +1, *x, *0.5
    (nn.SiLU(), 5),                          # sigmoid (4) + multiply
    (nn.Mish(), 5),                          # exp, add, log, tanh, multiply
    (nn.Hardswish(), 5),                     # add, 2 comparisons, multiply, divide
    (nn.Hardsigmoid(), 4),                   # add, 2 comparisons, divide
    (nn.Hardtanh(-2.0, 2.0), 2),             # two comparisons
    (nn.Sigmoid(), 4),                       # negate, exp, add, divide
    (nn.Tanh(), 1),
    (nn.Softplus(beta=2.0, threshold=10.0), 6),  # multiply, comparison, exp, add, log, divide
    (nn.Softplus(), 6),                      # beta = 1 is still multiplied and divided by the kernel
    (nn.Softsign(), 3),                      # abs, add, divide
    (nn.Tanhshrink(), 2),                    # tanh, subtract
    (nn.Threshold(0.5, 0.0), 1),             # one comparison
    (nn.LogSigmoid(), 5),                    # negate, exp, add, log, negate
]


@pytest.mark.parametrize(("module", "per_element"), ELEMENTWISE_CASES, ids=lambda case: repr(case))
def test_elementwise_activation_counts(module: nn.Module, per_element: int) -> None:
    x = torch.randn(2, 3, 4)
    result = estimate(module, x)
    parameters = 1 if isinstance(module, nn.PReLU) else 0
    assert result == {
        "module_flops": per_element * 2 * 3 * 4,
        "macs": 0,
        "dmas": 2 * 3 * 4 + parameters + 2 * 3 * 4,
        "receptive_field": 1,
        "effective_stride": 1,
        "effective_padding": 0,
    }
    assert estimate_on_meta(module, x) == result
    assert_plain_counts(result)


def test_gelu_variants_differ() -> None:
    x = torch.randn(8)
    assert estimate(nn.GELU(), x)["module_flops"] == 5 * 8
    assert estimate(nn.GELU(approximate="tanh"), x)["module_flops"] == 9 * 8


def test_prelu_reads_one_slope_per_channel() -> None:
    x = torch.randn(2, 3, 4, 4)
    result = estimate(nn.PReLU(num_parameters=3), x)
    assert result["module_flops"] == 2 * 96
    assert result["dmas"] == 96 + 3 + 96


@pytest.mark.parametrize("module", [nn.ReLU(inplace=True), nn.Hardswish(inplace=True), nn.SiLU(inplace=True)])
def test_inplace_activations_count_the_same_work(module: nn.Module) -> None:
    x = torch.randn(3, 5)
    out_of_place = copy.deepcopy(module)
    out_of_place.inplace = False
    assert estimate(module, x.clone()) == estimate(out_of_place, x.clone())
    assert estimate(module, x.clone())["dmas"] == 15 + 15


def test_glu_halves_the_split_dimension() -> None:
    result = estimate(nn.GLU(), torch.randn(2, 6))  # output (2, 3)
    assert result["module_flops"] == 5 * 2 * 3      # a * sigmoid(b): sigmoid (4) + multiply, per output element
    assert result["dmas"] == 2 * 6 + 2 * 3
    channel_split = estimate(nn.GLU(dim=1), torch.randn(2, 4, 5))  # output (2, 2, 5)
    assert channel_split["module_flops"] == 5 * 2 * 2 * 5
    assert channel_split["dmas"] == 40 + 20
    assert estimate_on_meta(nn.GLU(dim=1), torch.randn(2, 4, 5)) == channel_split


def test_softmax_counts_max_shift_exp_sum_and_divide() -> None:
    x = torch.randn(2, 3, 4)
    # 6 slices of 4: 3 comparisons + 4 subtractions + 4 exp + 3 additions + 4 divisions = 18 each
    result = estimate(nn.Softmax(dim=-1), x)
    assert result["module_flops"] == 6 * (3 + 4 + 4 + 3 + 4)
    assert result["macs"] == 0
    assert result["dmas"] == 24 + 24
    assert estimate_on_meta(nn.Softmax(dim=-1), x) == result


def test_log_softmax_and_softmin() -> None:
    x = torch.randn(2, 3, 4)
    # dim=1: 8 slices of 3: max 2 + shift 3 + exp 3 + sum 2 + log 1 + subtract 3 = 14
    assert estimate(nn.LogSoftmax(dim=1), x)["module_flops"] == 8 * 14
    # dim=0: 12 slices of 2: negate 2 + softmax (1 + 2 + 2 + 1 + 2) = 10
    assert estimate(nn.Softmin(dim=0), x)["module_flops"] == 12 * 10


def test_softmax2d_reduces_over_channels() -> None:
    x = torch.randn(2, 3, 4, 5)
    # 2*4*5 = 40 slices of 3 channels: 2 + 3 + 3 + 2 + 3 = 13
    result = estimate(nn.Softmax2d(), x)
    assert result["module_flops"] == 40 * 13
    assert result["receptive_field"] == 1


def test_softmax_without_dim_uses_the_legacy_implicit_dimension() -> None:
    with pytest.warns(UserWarning):
        result = estimate(nn.Softmax(), torch.randn(2, 5))  # 2-D input: dim 1, 2 slices of 5
    assert result["module_flops"] == 2 * (4 + 5 + 5 + 4 + 5)


def test_kwargs_only_call() -> None:
    x = torch.randn(4, 4)
    assert estimate(nn.Tanh(), input=x)["module_flops"] == 16


def test_integer_input_gets_no_guessed_flops() -> None:
    result = estimate(nn.ReLU(), torch.arange(6))
    assert result["module_flops"]["status"] == "unavailable"
    assert result["module_flops"]["method"] == METHOD
    assert result["macs"] == 0 and result["dmas"] == 12


@pytest.mark.parametrize("name", ["ReLU", "ReLU6", "LeakyReLU", "PReLU", "ELU", "SELU", "CELU", "GELU", "SiLU",
                                  "Mish", "Hardswish", "Hardsigmoid", "Hardtanh", "Sigmoid", "Tanh", "Softplus",
                                  "Softsign", "Tanhshrink", "Threshold", "LogSigmoid", "GLU", "Softmax", "LogSoftmax",
                                  "Softmin", "Softmax2d"])
def test_every_listed_activation_is_registered_with_its_label(name: str) -> None:
    assert HANDLERS[getattr(nn, name)].label == "formula:activation"


def test_table_prices_the_functions_reused_by_recurrent_gates() -> None:
    assert (FLOPS_PER_ELEMENT["sigmoid"], FLOPS_PER_ELEMENT["tanh"], FLOPS_PER_ELEMENT["relu"]) == (4, 1, 1)
