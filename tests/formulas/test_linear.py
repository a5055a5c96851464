"""Dense-layer handlers (Linear, LazyLinear, Bilinear, Identity) against hand computations."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode
from torchscan_testing import estimate

from torchscan.formulas.modules.linear import HANDLERS, METHOD, dense_work
from torchscan.handlers import closest_handler, validate_estimates

POINTWISE = {"receptive_field": 1, "effective_stride": 1, "effective_padding": 0}


def test_linear_with_leading_dimensions():
    estimates = estimate(nn.Linear(3, 4), torch.ones(2, 5, 3))
    assert estimates == {
        "macs": 2 * 5 * 4 * 3,
        "module_flops": 2 * (2 * 5 * 4 * 3) + 2 * 5 * 4,  # 2 FLOPs per MAC + 1 bias add per output element
        "dmas": 2 * 5 * 3 + 4 * 3 + 4 + 2 * 5 * 4,  # input + weight + bias + output
        **POINTWISE,
    }


@pytest.mark.parametrize("shape", [(6,), (7, 6), (2, 3, 5, 6)])
def test_linear_any_number_of_leading_dimensions(shape):
    estimates = estimate(nn.Linear(6, 7, bias=False), torch.ones(*shape))
    rows = torch.Size(shape[:-1]).numel()
    assert estimates["macs"] == rows * 7 * 6
    assert estimates["module_flops"] == 2 * rows * 7 * 6  # no bias
    assert estimates["dmas"] == rows * 6 + 7 * 6 + rows * 7


def test_linear_called_with_keyword_input():
    estimates = estimate(nn.Linear(3, 2), input=torch.ones(4, 3))
    assert estimates["macs"] == 4 * 2 * 3
    assert estimates["dmas"] == 4 * 3 + 2 * 3 + 2 + 4 * 2


def test_linear_flops_minus_bias_match_pytorch_operator_count():
    layer, inputs = nn.Linear(5, 3), torch.ones(4, 5)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        layer(inputs)
    assert estimate(layer, inputs)["module_flops"] - 4 * 3 == counter.get_total_flops()


def test_complex_linear_counts_real_arithmetic():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # PyTorch warns that complex modules are experimental
        layer = nn.Linear(3, 2).to(torch.complex64)
    estimates = estimate(layer, torch.ones(4, 3, dtype=torch.complex64))
    complex_macs = 4 * 2 * 3
    assert estimates["macs"] == 4 * complex_macs  # ac, bd, ad, bc accumulated per complex MAC
    assert estimates["module_flops"] == 8 * complex_macs + 2 * 4 * 2  # 6 (multiply) + 2 (add); 2 per bias add
    assert estimates["dmas"] == 4 * 3 + 2 * 3 + 2 + 4 * 2  # elements, not bytes: complex counts once


def test_integer_arithmetic_has_macs_but_no_flops():
    assert dense_work(10, 2, torch.int32, 30) == {"module_flops": None, "macs": 10, "dmas": 30}


def test_lazy_linear_is_estimated_as_linear_once_materialized():
    layer = nn.LazyLinear(4)
    assert closest_handler(nn.LazyLinear, HANDLERS) is HANDLERS[nn.Linear]
    estimates = estimate(layer, torch.ones(2, 3))
    assert type(layer) is nn.Linear  # PyTorch swaps the class on the first call
    assert estimates["macs"] == 2 * 4 * 3
    assert estimates["module_flops"] == 2 * 2 * 4 * 3 + 2 * 4
    assert estimates["dmas"] == 2 * 3 + 4 * 3 + 4 + 2 * 4


def test_subclass_of_linear_uses_the_linear_formula():
    class Scaled(nn.Linear):
        pass

    assert estimate(Scaled(3, 4), torch.ones(1, 3))["macs"] == 4 * 3


def test_bilinear_contracts_first_input_then_second():
    estimates = estimate(nn.Bilinear(3, 5, 7), torch.ones(2, 3), torch.ones(2, 5))
    macs = 2 * 7 * (3 * 5 + 5)  # per output: in1*in2 for x1^T A_k, then in2 for the product with x2
    assert estimates == {
        "macs": macs,
        "module_flops": 2 * macs + 2 * 7,
        "dmas": 2 * 3 + 2 * 5 + 7 * 3 * 5 + 7 + 2 * 7,  # both inputs + weight + bias + output
        **POINTWISE,
    }


def test_bilinear_with_leading_dimensions_and_keywords():
    estimates = estimate(nn.Bilinear(2, 3, 4, bias=False), input1=torch.ones(5, 6, 2), input2=torch.ones(5, 6, 3))
    assert estimates["macs"] == 5 * 6 * 4 * (2 * 3 + 3)
    assert estimates["module_flops"] == 2 * 5 * 6 * 4 * (2 * 3 + 3)
    assert estimates["dmas"] == 5 * 6 * 2 + 5 * 6 * 3 + 4 * 2 * 3 + 5 * 6 * 4


def test_identity_does_no_work():
    assert estimate(nn.Identity(), torch.ones(3, 4)) == {"module_flops": 0, "macs": 0, "dmas": 0, **POINTWISE}


def test_meta_device_gives_the_same_numbers():
    cases = [(nn.Linear(3, 4), (torch.ones(2, 5, 3),)), (nn.Bilinear(3, 5, 7), (torch.ones(2, 3), torch.ones(2, 5))),
             (nn.Identity(), (torch.ones(3),))]
    for module, args in cases:
        on_cpu = estimate(module, *args)
        on_meta = estimate(module.to("meta"), *(arg.to("meta") for arg in args))
        assert on_meta == on_cpu


@pytest.mark.parametrize("in_features,out_features,bias,rows", [(1, 1, True, 1), (8, 3, False, 5), (4, 9, True, 0)])
def test_every_number_is_a_non_negative_int_and_validates(in_features, out_features, bias, rows):
    module = nn.Linear(in_features, out_features, bias=bias)
    estimates = estimate(module, torch.ones(rows, in_features))
    assert set(estimates) == {"module_flops", "macs", "dmas", *POINTWISE}
    for value in estimates.values():
        assert type(value) is int and value >= 0
    handler = HANDLERS[nn.Linear]
    validated = validate_estimates(estimates, handler)
    assert not validated.problems
    assert {result["method"] for result in validated.metrics.values()} == {METHOD}
    assert {result["status"] for result in validated.metrics.values()} == {"complete"}
