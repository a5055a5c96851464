"""Backward kernels of dot products: convolution, fused attention on every SDPA backend, the oneDNN LSTM layer.

Hand computations on small shapes, and the dot products against PyTorch's own formulas (``flop_registry``: 2 FLOPs
per MAC) wherever PyTorch has one. The GPU attention kernels are priced through their ATen operators' formulas on
``meta`` tensors (no GPU here).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import flop_registry
from torchscan_testing import backward_flops, operator_flops

from torchscan.formulas.operators.backward_dense import COSTS, attention_backward_cost
from torchscan.formulas.operators.table import OPERATOR_FORMULAS, operator_significance

aten = torch.ops.aten


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_convolution_backward_counts_input_weight_and_bias_gradients():
    # forward: 64 output elements x (2 x 9) = 1152 MACs; backward: input and weight gradients, 2304 MACs,
    # 4608 FLOPs, and the bias gradient's sum of 64 output-gradient elements into 4 channels: 60
    conv = nn.Conv2d(2, 4, 3, padding=1)
    flops = backward_flops(conv, torch.randn(1, 2, 4, 4, requires_grad=True))
    assert flops["aten.convolution_backward"] == 4608 + 60


def test_convolution_backward_respects_the_output_mask():
    # the input needs no gradient (a first layer): the weight gradient only, 1152 MACs, and the bias sum
    conv = nn.Conv2d(2, 4, 3, padding=1)
    assert backward_flops(conv, torch.randn(1, 2, 4, 4))["aten.convolution_backward"] == 2304 + 60
    conv.bias.requires_grad_(False)
    assert backward_flops(conv, torch.randn(1, 2, 4, 4))["aten.convolution_backward"] == 2304


def _convolution_backward(conv: nn.Module, shape: tuple) -> tuple[tuple, object]:
    """The arguments and result of ``convolution_backward`` for ``conv`` on an input of ``shape``."""
    x = torch.randn(*shape, requires_grad=True)
    output = conv(x)
    arguments = (torch.ones_like(output), x, conv.weight, None, list(conv.stride), list(conv.padding),
                 list(conv.dilation), conv.transposed, list(conv.output_padding), conv.groups, [True, True, False])
    return arguments, aten.convolution_backward(*arguments)


def test_transposed_convolution_backward_agrees_with_pytorch():
    # 36 input elements x (2 x 9) = 648 MACs per gradient: 2 x 2 x 648
    arguments, result = _convolution_backward(nn.ConvTranspose2d(4, 2, 3, stride=2, bias=False), (1, 4, 3, 3))
    ours = OPERATOR_FORMULAS[aten.convolution_backward](*arguments, out_val=result)
    assert ours == flop_registry[aten.convolution_backward](*arguments, out_val=result) == 2592


def test_grouped_convolution_weight_gradient_follows_the_groups():
    """Each weight gradient element sums C_in/groups-wide products, like the forward: 72 output elements x
    (2 x 9) = 1296 MACs per gradient. PyTorch's formula ignores the groups in the weight gradient (x 2 here)."""
    arguments, result = _convolution_backward(nn.Conv2d(4, 4, 3, groups=2, bias=False), (2, 4, 5, 5))
    assert OPERATOR_FORMULAS[aten.convolution_backward](*arguments, out_val=result) == 2 * 2 * 1296
    assert flop_registry[aten.convolution_backward](*arguments, out_val=result) == 2 * 1296 + 2 * 2 * 1296


# The attention geometry: B=1, H=2, Lq=Lk=3, D=Dv=4 -> 18 scores.
SCORES, MACS = 18, 18 * (3 * 4 + 2 * 4)                           # 360: recomputed QK^T, dP, dV, dQ, dK
RECOMPUTE = 2 * 3 * 4 + 2 * SCORES                                 # q scaling once, subtract lse and exp
SOFTMAX = 2 * 3 * (4 * 3 - 1)                                      # per query row
SCALING = 2 * (3 + 3) * 4                                          # dQ and dK
ATTENTION_BACKWARD = 2 * MACS + RECOMPUTE + SOFTMAX + SCALING      # 720 + 60 + 66 + 48 = 894


def test_cpu_flash_attention_backward_by_hand():
    q, k, v = (torch.randn(1, 2, 3, 4, requires_grad=True) for _ in range(3))
    flops = backward_flops(F.scaled_dot_product_attention, q, k, v)
    assert flops["aten._scaled_dot_product_flash_attention_for_cpu_backward"] == ATTENTION_BACKWARD == 894


def test_attention_backward_cost_terms():
    assert attention_backward_cost(2, 3, 3, 4, 4) == (894, 360)
    assert attention_backward_cost(2, 3, 3, 4, 4, dropout=True).flops == 894 + 2 * SCORES
    # one key/value head broadcast to two query heads: the second head's dK and dV (3 x 8) are summed in
    assert attention_backward_cost(2, 3, 3, 4, 4, key_heads_summed=1).flops == 894 + 24


def _meta(*shape: int) -> torch.Tensor:
    return torch.empty(shape, device="meta")


GPU_BACKWARD = {  # packet -> its arguments on meta tensors (q, k, v of (1, 2, 3, 4); dropout 0)
    aten._scaled_dot_product_efficient_attention_backward: lambda g, q, k, v, o, lse: (
        g, q, k, v, _meta(1, 2, 3, 3), o, lse, _meta(), _meta(), 0.0, [True, True, True, False], False),
    aten._scaled_dot_product_flash_attention_backward: lambda g, q, k, v, o, lse: (
        g, q, k, v, o, lse, _meta(0), _meta(0), 3, 3, 0.0, False, _meta(), _meta()),
    aten._scaled_dot_product_cudnn_attention_backward: lambda g, q, k, v, o, lse: (
        g, q, k, v, o, lse, _meta(), _meta(), _meta(1, 2, 3, 3), _meta(0), _meta(0), 3, 3, 0.0, False),
}


@pytest.mark.parametrize("packet", list(GPU_BACKWARD), ids=lambda packet: str(packet).removeprefix("aten."))
def test_gpu_attention_backward_kernels_on_meta(packet):
    """The same hand count as the CPU kernel; the dot products are PyTorch's own count (2 FLOPs per MAC)."""
    arguments = GPU_BACKWARD[packet](*(_meta(1, 2, 3, 4) for _ in range(5)), _meta(1, 2, 3))
    grads = tuple(_meta(1, 2, 3, 4) for _ in range(3))
    assert OPERATOR_FORMULAS[packet](*arguments, out_val=grads) == ATTENTION_BACKWARD
    assert COSTS[packet](arguments, {}, grads).macs * 2 == flop_registry[packet](*arguments, out_val=grads)
    assert operator_significance(packet) == "significant"


def test_gpu_attention_backward_with_dropout_counts_the_mask():
    arguments = list(GPU_BACKWARD[aten._scaled_dot_product_flash_attention_backward](
        *(_meta(1, 2, 3, 4) for _ in range(5)), _meta(1, 2, 3)))
    arguments[10] = 0.1
    assert OPERATOR_FORMULAS[aten._scaled_dot_product_flash_attention_backward](*arguments) == 894 + 2 * SCORES


def test_lstm_layer_backward_by_hand():
    # 10 (step, sample) rows; W_ih 16 x 3 = 48, W_hh 16 x 4 = 64: 2 x 10 x 112 = 2240 MACs (4480 FLOPs); the
    # cell's backward 10 x 4 x 23 = 920; the bias gradient, 9 x 16 additions = 144
    lstm = nn.LSTM(3, 4, batch_first=True)
    output = lstm(torch.randn(2, 5, 3, requires_grad=True))[0]
    flops = operator_flops(lambda: output.backward(torch.ones_like(output)))
    assert flops["aten.mkldnn_rnn_layer_backward"] == 4480 + 920 + 144


def test_overrideable_backward_kernels():
    """The backend-extension kernels: the convolution's bias gradient follows its mask; attention as the others."""
    grad, x, weight = _meta(1, 4, 4, 4), _meta(1, 2, 4, 4), _meta(4, 2, 3, 3)
    arguments = (grad, x, weight, [1, 1], [1, 1], [1, 1], False, [0, 0], 1, [True, True, True])
    assert OPERATOR_FORMULAS[aten.convolution_backward_overrideable](*arguments) == 4608 + 60
    q = _meta(1, 2, 3, 4)
    attention = (q, q, q, q, _meta(1, 2, 3, 3), [True, True, True, False], q, _meta(1, 2, 3), _meta(0), _meta(0),
                 3, 3, 0.0, False, _meta(), _meta())
    packet = aten._scaled_dot_product_fused_attention_overrideable_backward
    assert OPERATOR_FORMULAS[packet](*attention) == ATTENTION_BACKWARD


def test_recurrent_backward_other_than_lstm_has_no_stated_count():
    arguments = [_meta(2, 5, 3), _meta(12, 3), _meta(12, 4), *([None] * 20)]
    arguments[14], arguments[15], arguments[17] = 3, 4, True  # mode 3: a GRU
    assert OPERATOR_FORMULAS[aten.mkldnn_rnn_layer_backward](*arguments) is None
