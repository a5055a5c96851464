"""Backward kernels of element and window work: each formula against a hand computation on small shapes.

Every case runs the real forward and backward on the CPU and reads the backward operator's row of
``measure_flops``; the number in the test is the documented per-element or per-group count written out.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torchscan_testing import backward_flops, operator_flops

from torchscan import measure_flops
from torchscan.formulas.operators.table import OPERATOR_FORMULAS


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def leaf(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, requires_grad=True)


# 6 gradient elements: FLOPs per element as documented (ACTIVATION_BACKWARD_FLOPS)
ACTIVATIONS = [
    (F.relu, "aten.threshold_backward", 1),
    (F.relu6, "aten.hardtanh_backward", 2),
    (lambda x: F.leaky_relu(x, 0.1), "aten.leaky_relu_backward", 2),
    (torch.sigmoid, "aten.sigmoid_backward", 3),
    (torch.tanh, "aten.tanh_backward", 3),
    (F.silu, "aten.silu_backward", 9),
    (F.gelu, "aten.gelu_backward", 11),
    (lambda x: F.gelu(x, approximate="tanh"), "aten.gelu_backward", 18),
    (F.hardswish, "aten.hardswish_backward", 5),
    (F.hardsigmoid, "aten.hardsigmoid_backward", 3),
    (F.elu, "aten.elu_backward", 5),
    (F.softplus, "aten.softplus_backward", 6),
    (F.mish, "aten.mish_backward", 13),
    (F.logsigmoid, "aten.log_sigmoid_backward", 9),
    (F.hardshrink, "aten.hardshrink_backward", 2),
    (F.softshrink, "aten.softshrink_backward", 2),
]


@pytest.mark.parametrize(("activation", "operator", "per_element"), ACTIVATIONS,
                         ids=[case[1].removeprefix("aten.") + str(case[2]) for case in ACTIVATIONS])
def test_activation_backward_per_gradient_element(activation, operator, per_element):
    assert backward_flops(activation, leaf(2, 3))[operator] == 6 * per_element


def test_glu_backward_per_output_element():
    # (2, 6) -> glu over the last dim -> 6 output elements, 9 FLOPs each
    assert backward_flops(F.glu, leaf(2, 6))["aten.glu_backward"] == 54


def test_dropout_backward_is_mask_and_rescale():
    x = leaf(2, 3)
    fused = backward_flops(lambda t: torch.ops.aten.native_dropout(t, 0.5, True)[0], x)
    assert fused["aten.native_dropout_backward"] == 12
    # F.dropout on the CPU multiplies by a rescaled mask: its backward is that one multiply
    assert backward_flops(lambda t: F.dropout(t, 0.5, training=True), leaf(2, 3)) == {"aten.mul": 6}


@pytest.mark.parametrize("function", [torch.softmax, torch.log_softmax])
def test_softmax_backward_per_slice(function):
    # 2 slices of 5: 4 * 5 - 1 = 19 each
    flops = backward_flops(lambda t: function(t, -1), leaf(2, 5))
    name = "aten._softmax_backward_data" if function is torch.softmax else "aten._log_softmax_backward_data"
    assert flops[name] == 38


def test_layer_norm_backward_every_gradient():
    # N = 8, P = 4: x_hat 16, input (7 + 1) * 8 = 64, weight 8 + 4 = 12, bias 4
    norm = nn.LayerNorm(4)
    assert backward_flops(norm, leaf(2, 4))["aten.native_layer_norm_backward"] == 96


def test_layer_norm_backward_respects_the_output_mask():
    # the input needs no gradient: x_hat 16, weight 12, bias 4
    norm = nn.LayerNorm(4)
    assert backward_flops(norm, torch.randn(2, 4))["aten.native_layer_norm_backward"] == 32


def test_group_norm_backward():
    # N = 24, C = 4: x_hat 48, input 8 * 24 = 192, weight 24 + 20 = 44, bias 20
    norm = nn.GroupNorm(2, 4)
    assert backward_flops(norm, leaf(2, 4, 3))["aten.native_group_norm_backward"] == 304


def test_batch_norm_backward_in_training():
    # N = 24, C = 3: x_hat 48, sum(g) 21, sum(g * x_hat) 24 + 21 = 45, input (4 + 1) * 24 + 2 * 3 = 126
    norm = nn.BatchNorm2d(3).train()
    assert backward_flops(norm, leaf(2, 3, 2, 2))["aten.native_batch_norm_backward"] == 240


def test_batch_norm_backward_in_evaluation():
    # running statistics: x_hat 48, weight 45, bias 21, input 24 + (2 + 1) * 3 = 33
    norm = nn.BatchNorm2d(3).eval()
    assert backward_flops(norm, leaf(2, 3, 2, 2))["aten.native_batch_norm_backward"] == 147


@pytest.mark.filterwarnings("ignore:`torch.nn.utils.weight_norm` is deprecated")
def test_weight_norm_backward():
    # weight (4, 3) normalized per output row: 5 * 12 + 2 * 4
    layer = nn.utils.weight_norm(nn.Linear(3, 4))  # the legacy hook keeps _weight_norm_interface
    flops = backward_flops(layer, torch.randn(2, 3))
    assert flops["aten._weight_norm_interface_backward"] == 68


def test_max_pool_backward_adds_each_gradient_element_once():
    assert backward_flops(lambda t: F.max_pool2d(t, 2), leaf(1, 1, 4, 4))["aten.max_pool2d_with_indices_backward"] == 4


def test_average_pool_backward_divides_per_window_and_accumulates_per_read():
    # 4 windows of 4 reads: 16 + 4
    assert backward_flops(lambda t: F.avg_pool2d(t, 2), leaf(1, 1, 4, 4))["aten.avg_pool2d_backward"] == 20
    # 3x3 windows with stride 1 and padding 1 over 3x3: per dimension reads 2 + 3 + 2 = 7 -> 49 reads, 9 windows
    assert backward_flops(lambda t: F.avg_pool2d(t, 3, 1, 1), leaf(1, 1, 3, 3))["aten.avg_pool2d_backward"] == 58


def test_adaptive_average_pool_backward():
    # 4x4 -> 3x3: windows per dimension [0,2), [1,3), [2,4): 6 reads -> 36 reads, 9 windows
    pooled = backward_flops(lambda t: F.adaptive_avg_pool2d(t, 3), leaf(1, 1, 4, 4))
    assert pooled["aten._adaptive_avg_pool2d_backward"] == 45


def test_bilinear_and_nearest_upsampling_backward():
    source = leaf(1, 1, 2, 2)
    flops = backward_flops(lambda t: F.interpolate(t, scale_factor=2, mode="bilinear"), source)
    assert flops["aten.upsample_bilinear2d_backward"] == 16 * 8  # 16 gradient elements, 2 x 4 taps
    flops = backward_flops(lambda t: F.interpolate(t, scale_factor=2, mode="nearest"), source)
    assert flops["aten.upsample_nearest2d_backward"] == 16 - 4


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_padding_backward_sums_the_copies(mode):
    # 4x4 padded by 1 on each side: 36 gradient elements fold back into 16
    flops = backward_flops(lambda t: F.pad(t, (1, 1, 1, 1), mode=mode), leaf(1, 1, 4, 4))
    assert flops[("aten.reflection_pad2d_backward" if mode == "reflect" else "aten.replication_pad2d_backward")] == 20


def test_embedding_backward_adds_every_looked_up_row():
    indices = torch.tensor([[0, 1, 2, 1], [3, 0, 0, 4]])
    assert backward_flops(nn.Embedding(10, 3), indices)["aten.embedding_dense_backward"] == 24
    # padding rows are counted too: index values are never read
    assert backward_flops(nn.Embedding(10, 3, padding_idx=0), indices)["aten.embedding_dense_backward"] == 24
    # frequency scaling: one multiply per gradient element and one count per index
    scaled = nn.Embedding(10, 3, scale_grad_by_freq=True)
    assert backward_flops(scaled, indices)["aten.embedding_dense_backward"] == 24 * 2 + 8


def test_cross_entropy_forward_and_backward():
    logits, targets = leaf(4, 5), torch.tensor([0, 1, 2, 3])
    loss_flops = operator_flops(lambda: F.cross_entropy(logits, targets))
    assert loss_flops["aten.nll_loss_forward"] == 4 + 4  # negate per target, mean
    assert loss_flops["aten._log_softmax"] == 4 * 24
    flops = backward_flops(lambda t: F.cross_entropy(t, targets), logits)
    assert flops["aten.nll_loss_backward"] == 4 * 2  # -g / total weight per target
    assert flops["aten._log_softmax_backward_data"] == 4 * 19


def test_weighted_cross_entropy_counts_the_weights():
    logits, targets, weight = torch.randn(4, 5), torch.tensor([0, 1, 2, 3]), torch.rand(5)
    flops = operator_flops(lambda: F.cross_entropy(logits, targets, weight=weight))
    assert flops["aten.nll_loss_forward"] == 4 * 2 + 4 + 3  # negate and weigh, mean, total weight


def test_mse_loss_forward_and_backward():
    prediction, target = leaf(2, 3), torch.randn(2, 3)
    assert operator_flops(lambda: F.mse_loss(prediction, target))["aten.mse_loss"] == 2 * 6 + 6
    assert operator_flops(lambda: F.mse_loss(prediction, target, reduction="sum"))["aten.mse_loss"] == 12 + 5
    assert backward_flops(lambda t: F.mse_loss(t, target), prediction)["aten.mse_loss_backward"] == 18


def test_binary_cross_entropy_with_logits_and_kl_divergence():
    logits, target = torch.randn(2, 3), torch.rand(2, 3)
    flops = operator_flops(lambda: F.binary_cross_entropy_with_logits(logits, target))
    assert flops["aten.binary_cross_entropy_with_logits"] == 12 * 6 + 6
    weighted = operator_flops(lambda: F.binary_cross_entropy_with_logits(
        logits, target, weight=torch.ones(3), pos_weight=torch.ones(3), reduction="sum"))
    assert weighted["aten.binary_cross_entropy_with_logits"] == 16 * 6 + 5
    # xlogy, the first term of F.kl_div: comparison, log, multiply per element
    assert operator_flops(lambda: torch.xlogy(target, target))["aten.xlogy"] == 18


def test_view_backwards_are_copies_not_work():
    x = leaf(4, 3)
    output = x[1:3, 0]
    result = measure_flops(lambda: output.backward(torch.ones_like(output)))
    reasons = {row["operator"]: row["reason"] for row in result["ignored"]}
    assert reasons["aten.slice_backward"] == reasons["aten.select_backward"] == "copy"
    assert result["uncounted"] == []
    # an expand's gradient is a sum over the broadcast dimension: 4 rows of 3 into 1, (4 - 1) x 3 additions
    assert backward_flops(lambda t: t.expand(4, 3), leaf(1, 3)) == {"aten.sum": 9}


def test_more_activation_backwards():
    # PReLU: 3 per element (its weight's sum over the broadcast dimensions is a separate `sum`)
    assert backward_flops(nn.PReLU(), leaf(2, 3))["aten._prelu_kernel_backward"] == 18
    # ELU computed in place differentiates from its result: 4 per element
    assert backward_flops(lambda t: F.elu(t.clone(), inplace=True), leaf(2, 3))["aten.elu_backward"] == 24
    # RReLU in training multiplies by its noise: 1 per element
    assert backward_flops(lambda t: F.rrelu(t, training=True), leaf(2, 3))["aten.rrelu_with_noise_backward"] == 6


def test_adaptive_max_pool_backward():
    flops = backward_flops(lambda t: F.adaptive_max_pool2d(t, 2), leaf(1, 2, 4, 4))
    assert flops["aten.adaptive_max_pool2d_backward"] == 8


LOSSES = [  # name, function, forward FLOPs and backward FLOPs on 6 elements (mean: + 6 for the reduction)
    ("smooth_l1_loss", F.smooth_l1_loss, 6 * 6 + 6, 5 * 6),
    ("huber_loss", F.huber_loss, 6 * 6 + 6, 5 * 6),
    ("binary_cross_entropy", lambda x, t: F.binary_cross_entropy(torch.sigmoid(x), t), 8 * 6 + 6, 6 * 6),
    ("soft_margin_loss", F.soft_margin_loss, 5 * 6 + 6, 8 * 6),
]


@pytest.mark.parametrize(("name", "loss", "forward", "backward"), LOSSES, ids=[case[0] for case in LOSSES])
def test_pointwise_losses(name, loss, forward, backward):
    prediction, target = leaf(2, 3), torch.rand(2, 3)
    assert operator_flops(lambda: loss(prediction, target))[f"aten.{name}"] == forward
    assert backward_flops(lambda t: loss(t, target), prediction)[f"aten.{name}_backward"] == backward


def test_weighted_nll_loss_backward():
    log_probabilities, targets = leaf(4, 5), torch.tensor([0, 1, 2, 3])
    flops = backward_flops(lambda t: F.nll_loss(t, targets, weight=torch.rand(5)), log_probabilities)
    assert flops["aten.nll_loss_backward"] == 4 * 3  # -g, times the class weight, / total weight


def _meta(*shape: int) -> torch.Tensor:
    return torch.empty(shape, device="meta")


def test_kernels_that_the_cpu_does_not_dispatch_priced_on_meta():
    """RMS norm, the new batch-norm kernel, cuDNN's batch norm and the masked softmax, through their operators."""
    aten = torch.ops.aten
    # RMS norm over 4 features, 2 rows (N = 8, P = 4): x_hat 8, input (5 + 1) * 8 = 48, weight 8 + 4 = 12
    rms = operator_flops(lambda: aten._fused_rms_norm_backward(
        _meta(2, 4), _meta(2, 4), [4], _meta(2, 1), _meta(4), [True, True]))
    assert rms == {"aten._fused_rms_norm_backward": 68}
    # training batch norm with update, N = 24, C = 3: as native_batch_norm_backward, 240
    stats = (_meta(3), _meta(3), _meta(3), _meta(3))
    new = operator_flops(lambda: aten.batch_norm_backward(
        _meta(2, 3, 2, 2), _meta(2, 3, 2, 2), _meta(3), *stats, True, 1e-5, [True, True, True], _meta(0)))
    assert new == {"aten.batch_norm_backward": 240}
    # cuDNN's kernel (no CPU or meta kernel): input first, then the gradient; training statistics
    cudnn = OPERATOR_FORMULAS[aten.cudnn_batch_norm_backward](_meta(2, 3, 2, 2), _meta(2, 3, 2, 2), _meta(3),
                                                              *stats, 1e-5, _meta(0))
    assert cudnn == 240
    # masked softmax over 2 rows of 5 (a CPU kernel only): 19 each
    rows, mask = torch.rand(2, 5), torch.zeros(2, 5, dtype=torch.bool)
    masked = operator_flops(lambda: aten._masked_softmax_backward(rows, rows, mask, -1))
    assert masked == {"aten._masked_softmax_backward": 38}
