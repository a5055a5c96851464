"""Functional-op estimates (module view): (FLOPs, MACs, DMAs) of operators run directly inside a module call."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from torchscan.formulas.operators.functional import FUNCTIONAL_ESTIMATES
from torchscan.formulas.operators.table import OPERATOR_FORMULAS, ZERO_WORK_OPERATORS

aten = torch.ops.aten


class Recorder(TorchDispatchMode):
    """Estimates every dispatched operator; keeps the operator-view FLOPs beside each estimate."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []  # (packet, estimate, operator-view flops)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        estimator = FUNCTIONAL_ESTIMATES.get(packet)
        formula = OPERATOR_FORMULAS.get(packet)
        operator_flops = formula(*args, **kwargs, out_val=out) if formula is not None else None
        self.calls.append((packet, estimator(args, kwargs, out) if estimator else None, operator_flops))
        return out


def record(function, *args, **kwargs) -> list[tuple]:
    with torch.no_grad(), Recorder() as recorder:
        function(*args, **kwargs)
    return recorder.calls


def estimate(function, *args, **kwargs) -> tuple[int, int, int]:
    """The one non-view operator of ``function`` (views are skipped)."""
    calls = [call for call in record(function, *args, **kwargs) if ZERO_WORK_OPERATORS.get(call[0]) != "view"]
    assert len(calls) == 1, [call[0] for call in calls]
    return calls[0][1]


def total(function, *args, **kwargs) -> tuple[int, int, int]:
    estimates = [call[1] for call in record(function, *args, **kwargs)]
    assert None not in estimates
    return tuple(sum(values) for values in zip(*estimates, strict=True))


X = torch.randn(2, 3, 4)
N = X.numel()


def test_residual_addition_reads_both_operands_and_writes_the_sum():
    assert estimate(lambda: X + X) == (N, 0, 3 * N)
    assert estimate(lambda: X + 1) == (N, 0, 2 * N)  # a Python scalar is not a tensor read


def test_activation_and_softmax_share_the_operator_view_counts():
    assert estimate(F.gelu, X) == (5 * N, 0, 2 * N)
    assert estimate(lambda: X.softmax(-1)) == (6 * (5 * 4 - 2), 0, 2 * N)
    assert estimate(lambda: X.mean(-1)) == (6 * 4, 0, N + 6)


def test_matmul_has_macs_and_reads_both_operands():
    a, b = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    flops, macs, dmas = estimate(torch.matmul, a, b)  # dispatched as bmm between views
    assert macs == 2 * 3 * 4 * 5
    assert (flops, dmas) == (2 * macs, 24 + 40 + 30)


def test_linear_function_counts_its_bias_like_the_module_view():
    tokens, weight, bias = torch.randn(6, 4), torch.randn(5, 4), torch.randn(5)
    assert estimate(F.linear, tokens, weight, bias) == (2 * 120 + 30, 120, 24 + 20 + 5 + 30)


def test_convolution():
    image, weight = torch.randn(1, 3, 6, 6), torch.randn(4, 3, 3, 3)
    outputs = 4 * 4 * 4
    assert estimate(F.conv2d, image, weight) == (2 * outputs * 27, outputs * 27, 108 + 108 + outputs)


def test_attention_counts_the_full_score_matrix_even_when_causal():
    q = torch.randn(1, 2, 4, 8)
    scores = 2 * 4 * 4
    macs = 2 * scores * 8
    flops = 2 * macs + 2 * 4 * 8 + 2 * 4 * (5 * 4 - 2)  # + q scaling + softmax per query row
    dmas = 3 * q.numel() + q.numel()  # q, k, v read, output written (the logsumexp is a saved statistic)
    assert estimate(F.scaled_dot_product_attention, q, q, q) == (flops, macs, dmas)
    assert estimate(F.scaled_dot_product_attention, q, q, q, is_causal=True) == (flops, macs, dmas)


def test_views_touch_nothing_and_copies_read_and_write():
    assert total(lambda: X.view(6, 4).transpose(0, 1).unsqueeze(0)) == (0, 0, 0)
    assert estimate(lambda: torch.cat([X, X])) == (0, 0, 4 * N)
    assert estimate(lambda: X.clone()) == (0, 0, 2 * N)
    assert estimate(lambda: X.new_zeros(5)) == (0, 0, 5)  # an allocation only writes


def test_gathers_read_only_the_selected_elements():
    table, ids = torch.randn(100, 8), torch.tensor([[1, 2, 3]])
    assert estimate(F.embedding, ids, table) == (0, 0, 3 + 2 * 24)  # ids, 3 rows of 8 read, 24 written
    assert estimate(lambda: table[ids[0]]) == (0, 0, 3 + 2 * 24)


def test_copy_into_a_tensor_does_not_read_the_destination():
    destination = torch.empty(2, 3, 4)
    assert estimate(lambda: destination.copy_(X)) == (0, 0, 2 * N)


def test_normalization_writes_its_result_not_its_saved_statistics():
    tokens = torch.randn(2, 5, 16)
    weight, bias = torch.ones(16), torch.zeros(16)
    flops, macs, dmas = estimate(F.layer_norm, tokens, (16,), weight, bias)
    assert (flops, macs) == (10 * (6 * 16 + 2) + 160 * 2, 0)
    assert dmas == 160 + 32 + 160


def test_batch_norm_update_writes_the_running_buffers():
    image, mean, var = torch.randn(2, 3, 4, 4), torch.zeros(3), torch.ones(3)
    _, _, evaluation = total(F.batch_norm, image, mean, var)  # an empty allocation, then the kernel
    _, _, training = total(F.batch_norm, image, mean, var, training=True)
    assert evaluation == 96 + 6 + 96
    assert training == evaluation + 6


def test_dtypes_without_a_convention_are_not_estimated():
    signal = torch.ones(2, 4, dtype=torch.complex64)
    assert estimate(lambda: signal * signal) == (6 * 8, 0, 24)
    assert estimate(lambda: signal.exp()) is None
    ints = torch.arange(6)
    assert estimate(lambda: ints + 1) == (0, 0, 12)  # integer arithmetic: no floating-point work


def test_complex_matmul_macs_are_real_macs():
    a, b = torch.ones(3, 4, dtype=torch.complex64), torch.ones(4, 5, dtype=torch.complex64)
    assert estimate(torch.mm, a, b) == (8 * 60, 4 * 60, 12 + 20 + 15)


def test_meta_tensors_are_estimated_from_shapes():
    with torch.device("meta"):
        a, b = torch.empty(3, 4), torch.empty(4, 5)
        assert estimate(torch.mm, a, b) == (120, 60, 12 + 20 + 15)


def test_an_unexpected_call_is_unestimated_rather_than_an_error():
    assert FUNCTIONAL_ESTIMATES[aten.mm]((), {}, None) is None
    assert FUNCTIONAL_ESTIMATES[aten.cat]((object(),), {}, None) == (0, 0, 0)


def test_every_counted_or_ignored_operator_has_an_estimate():
    assert set(OPERATOR_FORMULAS) | set(ZERO_WORK_OPERATORS) <= set(FUNCTIONAL_ESTIMATES)


class Composite(nn.Module):
    """Hand-written attention and MLP with direct functional work (the module view must estimate it)."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(16, 48)
        self.norm = nn.RMSNorm(16)

    def forward(self, x, mask):
        q, k, v = self.qkv(self.norm(x)).view(2, 5, 3, 4, 4).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-1, -2)) / 2.0 + mask
        weights = scores.softmax(-1)
        y = torch.matmul(weights, v).transpose(1, 2).reshape(2, 5, 16)
        return x + F.gelu(y) * torch.sigmoid(y), F.scaled_dot_product_attention(q, k, v, is_causal=True)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_both_views_agree_on_every_operator_of_a_composite(device):
    with torch.device(device):
        module, inputs, mask = Composite().eval(), torch.randn(2, 5, 16), torch.zeros(5, 5)
    calls = record(module, inputs, mask)
    assert all(estimate_ is not None for _, estimate_, _ in calls)
    for packet, (flops, _, _), operator_flops in calls:
        if packet in OPERATOR_FORMULAS:
            assert flops == operator_flops, packet
