"""Convolution handlers (Conv1d/2d/3d, ConvTranspose1d/2d/3d, lazy variants) against hand computations."""

from __future__ import annotations

import itertools
import math
import warnings

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode
from torchscan_testing import estimate

from torchscan.formulas.modules.conv import HANDLERS, METHOD, transposed_window
from torchscan.handlers import closest_handler, validate_estimates


def test_conv2d_with_bias_and_padding():
    estimates = estimate(nn.Conv2d(3, 8, 3, padding=1), torch.ones(1, 3, 10, 10))
    macs = 1 * 8 * 10 * 10 * 3 * 3 * 3  # per output element: C_in * k_h * k_w
    assert estimates == {
        "macs": macs,
        "module_flops": 2 * macs + 8 * 10 * 10,
        "dmas": 3 * 10 * 10 + 8 * 3 * 3 * 3 + 8 + 8 * 10 * 10,  # input + weight + bias + output
        "receptive_field": [3, 3],
        "effective_stride": [1, 1],
        "effective_padding": [1, 1],
    }


def test_conv1d_groups_dilation_stride():
    conv = nn.Conv1d(4, 6, 3, stride=2, padding=2, dilation=2, groups=2)
    estimates = estimate(conv, torch.ones(2, 4, 11))
    length = (11 + 2 * 2 - 2 * (3 - 1) - 1) // 2 + 1  # 6
    macs = 2 * 6 * length * (4 // 2) * 3
    assert estimates["macs"] == macs == 432
    assert estimates["module_flops"] == 2 * macs + 2 * 6 * length
    assert estimates["dmas"] == 2 * 4 * 11 + 6 * 2 * 3 + 6 + 2 * 6 * length
    assert estimates["receptive_field"] == [2 * (3 - 1) + 1]
    assert estimates["effective_stride"] == [2]
    assert estimates["effective_padding"] == [2]


def test_conv3d_with_tuples_and_no_bias():
    conv = nn.Conv3d(2, 4, (1, 3, 5), stride=(1, 2, 2), padding=(0, 1, 2), dilation=(1, 1, 2), bias=False)
    estimates = estimate(conv, torch.ones(1, 2, 3, 8, 9))
    # out: depth 3, height (8 + 2 - 3) // 2 + 1 = 4, width (9 + 4 - 8 - 1) // 2 + 1 = 3
    assert estimates["macs"] == 1 * 4 * 3 * 4 * 3 * 2 * 1 * 3 * 5
    assert estimates["module_flops"] == 2 * estimates["macs"]
    assert estimates["dmas"] == 2 * 3 * 8 * 9 + 4 * 2 * 15 + 4 * 3 * 4 * 3
    assert estimates["receptive_field"] == [1, 3, 2 * (5 - 1) + 1]
    assert estimates["effective_stride"] == [1, 2, 2]
    assert estimates["effective_padding"] == [0, 1, 2]


def test_depthwise_and_unbatched():
    estimates = estimate(nn.Conv2d(4, 4, 3, groups=4), torch.ones(4, 5, 5))
    assert estimates["macs"] == 4 * 3 * 3 * 1 * 3 * 3  # C_in / groups = 1
    assert estimates["dmas"] == 4 * 25 + 4 * 9 + 4 + 4 * 9


@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel")
def test_padding_same_reports_the_left_padding_pytorch_uses():
    conv = nn.Conv2d(2, 2, (4, 3), padding="same", dilation=(1, 3))
    estimates = estimate(conv, torch.ones(1, 2, 7, 9))
    # total padding d * (k - 1) = 3 and 6; PyTorch puts the smaller half first
    assert estimates["effective_padding"] == [3 // 2, 6 // 2]
    assert estimates["receptive_field"] == [4, 7]
    assert estimates["macs"] == 2 * 7 * 9 * 2 * 4 * 3


def test_padding_valid_is_zero():
    estimates = estimate(nn.Conv1d(1, 1, 3, padding="valid"), torch.ones(1, 1, 6))
    assert estimates["effective_padding"] == [0]
    assert estimates["macs"] == 4 * 3


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
def test_padding_mode_does_not_change_the_counts(mode):
    conv = nn.Conv2d(2, 3, 3, padding=(1, 2), padding_mode=mode)
    estimates = estimate(conv, torch.ones(1, 2, 6, 6))
    out_h, out_w = 6, 8
    assert estimates["macs"] == 3 * out_h * out_w * 2 * 9
    assert estimates["module_flops"] == 2 * 3 * out_h * out_w * 2 * 9 + 3 * out_h * out_w
    assert estimates["dmas"] == 2 * 36 + 3 * 2 * 9 + 3 + 3 * out_h * out_w  # the padded copy is internal
    assert estimates["effective_padding"] == [1, 2]


def test_padding_same_with_reflect_mode():
    estimates = estimate(nn.Conv1d(1, 1, 4, padding="same", padding_mode="reflect"), torch.ones(1, 1, 8))
    assert estimates["effective_padding"] == [3 // 2]
    assert estimates["macs"] == 8 * 4


def test_lazy_conv_is_estimated_as_conv_once_materialized():
    assert closest_handler(nn.LazyConv2d, HANDLERS) is HANDLERS[nn.Conv2d]
    assert closest_handler(nn.LazyConvTranspose1d, HANDLERS) is HANDLERS[nn.ConvTranspose1d]
    conv = nn.LazyConv2d(5, 3)
    estimates = estimate(conv, torch.ones(1, 2, 4, 4))
    assert type(conv) is nn.Conv2d
    assert estimates["macs"] == 5 * 2 * 2 * 2 * 9


def test_conv_flops_minus_bias_match_pytorch_operator_count():
    conv, inputs = nn.Conv2d(4, 6, 3, stride=2, groups=2, padding=1), torch.ones(2, 4, 9, 9)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        output = conv(inputs)
    assert estimate(conv, inputs)["module_flops"] - output.numel() == counter.get_total_flops()


def test_complex_conv_counts_real_arithmetic():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # PyTorch warns that complex modules are experimental
        conv = nn.Conv1d(2, 3, 3, bias=False).to(torch.complex64)
    estimates = estimate(conv, torch.ones(1, 2, 5, dtype=torch.complex64))
    assert estimates["macs"] == 4 * (3 * 3 * 2 * 3)
    assert estimates["module_flops"] == 8 * (3 * 3 * 2 * 3)


def test_conv_transpose2d():
    conv = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
    estimates = estimate(conv, torch.ones(1, 4, 5, 5))
    out = (5 - 1) * 2 - 2 * 1 + (3 - 1) + 1 + 1  # 10
    macs = 1 * 4 * 5 * 5 * (6 // 2) * 3 * 3  # per input element: C_out / groups * k_h * k_w
    assert estimates == {
        "macs": macs,
        "module_flops": 2 * macs + 6 * out * out,
        "dmas": 4 * 25 + 4 * 3 * 9 + 6 + 6 * out * out,
        "receptive_field": [2, 2],  # ceil(3 / 2) input elements reach one output
        "effective_stride": [0.5, 0.5],  # 1 / stride
        "effective_padding": [0.5, 0.5],  # (k - 1 - p) / s
    }


def test_conv_transpose_flops_minus_bias_match_pytorch_operator_count():
    conv, inputs = nn.ConvTranspose3d(2, 4, 2, stride=2, groups=2), torch.ones(1, 2, 3, 3, 3)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        output = conv(inputs)
    assert estimate(conv, inputs)["module_flops"] - output.numel() == counter.get_total_flops()


def test_conv_transpose1d_common_upsampler():
    estimates = estimate(nn.ConvTranspose1d(1, 1, 4, stride=2, padding=1, bias=False), torch.ones(1, 1, 5))
    assert estimates["macs"] == 5 * 4
    assert estimates["receptive_field"] == [2]
    assert estimates["effective_stride"] == [0.5]
    assert estimates["effective_padding"] == [1]


def test_conv_transpose_with_stride_one_matches_the_equivalent_convolution():
    estimates = estimate(nn.ConvTranspose1d(1, 1, 3, padding=1), torch.ones(1, 1, 5))
    assert estimates["receptive_field"] == [3]
    assert estimates["effective_stride"] == [1]
    assert estimates["effective_padding"] == [1]  # a convolution with padding k - 1 - p


def test_conv_transpose_with_dilation():
    estimates = estimate(nn.ConvTranspose1d(1, 1, 3, stride=2, dilation=2), torch.ones(1, 1, 5))
    assert estimates["receptive_field"] == [3]  # span 5, ceil(5 / 2)
    assert estimates["effective_padding"] == [2]  # (5 - 1 - 0) / 2


def test_conv_transpose_cropping_padding_is_unavailable_not_negative():
    estimates = estimate(nn.ConvTranspose1d(1, 1, 2, padding=2), torch.ones(1, 1, 8))
    assert estimates["effective_padding"]["status"] == "unavailable"
    assert estimates["effective_padding"]["method"] == METHOD
    assert estimates["receptive_field"] == [2]


def _input_dependencies(conv: nn.Module, length: int) -> list[list[int]]:
    """For each output position, the input positions its value depends on (from the Jacobian)."""
    conv = conv.double()
    nn.init.ones_(conv.weight)
    jacobian = torch.autograd.functional.jacobian(lambda x: conv(x.view(1, 1, -1)).flatten(),
                                                  torch.ones(length, dtype=torch.float64))
    return [row.nonzero().flatten().tolist() for row in jacobian]


@pytest.mark.parametrize("kernel,stride,padding,dilation", [(3, 2, 0, 1), (4, 2, 1, 1), (5, 3, 2, 1), (3, 2, 1, 2),
                                                            (2, 3, 0, 1), (3, 1, 2, 1)])
def test_conv_transpose_receptive_field_matches_the_jacobian(kernel, stride, padding, dilation):
    conv = nn.ConvTranspose1d(1, 1, kernel, stride=stride, padding=padding, dilation=dilation, bias=False)
    dependencies = _input_dependencies(conv, 9)
    span = dilation * (kernel - 1) + 1
    field, step, offset = transposed_window(span, stride, padding)
    assert field == max(deps[-1] - deps[0] + 1 for deps in dependencies if deps)
    assert step == 1 / stride
    if dilation == 1:  # every integer input inside the window contributes: check where each window starts
        for position, deps in enumerate(dependencies):
            if deps and deps[0] > 0:
                assert deps[0] == math.ceil(position * step - offset)


@pytest.mark.parametrize("kernel,stride,padding,dilation", [(3, 1, 0, 1), (3, 2, 1, 1), (2, 2, 0, 3), (5, 1, 2, 2)])
def test_conv_receptive_field_matches_the_jacobian(kernel, stride, padding, dilation):
    conv = nn.Conv1d(1, 1, kernel, stride=stride, padding=padding, dilation=dilation, bias=False)
    estimates = estimate(conv, torch.ones(1, 1, 12))
    dependencies = _input_dependencies(conv, 12)
    assert estimates["receptive_field"] == [max(deps[-1] - deps[0] + 1 for deps in dependencies)]
    for position, deps in enumerate(dependencies):
        start = position * estimates["effective_stride"][0] - estimates["effective_padding"][0]
        if start >= 0:  # the window's first tap lies inside the input
            assert deps[0] == start


def test_meta_device_gives_the_same_numbers():
    cases = [(nn.Conv2d(3, 4, 3, stride=2, padding="valid"), torch.ones(1, 3, 9, 9)),
             (nn.Conv1d(2, 2, 4, padding="same", padding_mode="circular"), torch.ones(2, 2, 7)),
             (nn.ConvTranspose2d(2, 4, 3, stride=2, padding=1, output_padding=1), torch.ones(1, 2, 4, 4))]
    for module, inputs in cases:
        on_cpu = estimate(module, inputs)
        assert estimate(module.to("meta"), inputs.to("meta")) == on_cpu


@pytest.mark.parametrize("transposed", [False, True])
def test_every_number_is_a_non_negative_int_and_validates(transposed):
    kind = nn.ConvTranspose1d if transposed else nn.Conv1d
    for kernel, stride, padding, dilation, groups, bias in itertools.product((1, 3), (1, 2), (0, 1), (1, 2), (1, 2),
                                                                            (True, False)):
        module = kind(4, 6, kernel, stride=stride, padding=padding, dilation=dilation, groups=groups, bias=bias)
        estimates = estimate(module, torch.ones(2, 4, 7))
        for name in ("module_flops", "macs", "dmas"):
            assert type(estimates[name]) is int and estimates[name] >= 0
        for name in ("receptive_field", "effective_stride", "effective_padding"):
            value = estimates[name]
            if isinstance(value, dict):  # only a transposed cropping padding may be unavailable
                assert transposed and name == "effective_padding" and value["status"] == "unavailable"
                continue
            assert len(value) == 1 and value[0] >= 0
            if not transposed or stride == 1:
                assert all(type(item) is int for item in value)
        validated = validate_estimates(estimates, HANDLERS[kind])
        assert not validated.problems
        assert {result["method"] for result in validated.metrics.values()} == {METHOD}
