"""Operator-view formulas: real operators run under a tiny dispatch mode and are checked against hand counts."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, flop_registry

from torchscan.formulas.operators.calls import CostTable, OpCost, operand_kind
from torchscan.formulas.operators.table import (
    DOT_PRODUCT_FAMILIES,
    MINOR_FAMILIES,
    OPERATOR_COSTS,
    OPERATOR_FORMULAS,
    ZERO_WORK_OPERATORS,
    merge_families,
    operator_significance,
)
from torchscan.formulas.operators.zero_work import BOOKKEEPING_OPERATORS, ZERO_WORK_NAMES

aten = torch.ops.aten
FORMULAS = {**flop_registry, **OPERATOR_FORMULAS}


class Counter(TorchDispatchMode):
    """Sums built-in formulas over dispatched operators; records ignored and uncounted packets."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:  # skip PyTorch's lazy torch._dynamo import (about a second)
        return False

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0
        self.by_packet: dict = {}
        self.ignored: set = set()
        self.uncounted: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        packet = func._overloadpacket
        formula = FORMULAS.get(packet)
        flops = None if formula is None else formula(*args, **kwargs, out_val=out)
        if flops is not None:
            self.flops += flops
            self.by_packet[packet] = self.by_packet.get(packet, 0) + flops
        elif packet in ZERO_WORK_OPERATORS:
            self.ignored.add(packet)
        else:
            self.uncounted.add(packet)
        return out


def count(function, *args, **kwargs) -> Counter:
    with torch.no_grad(), Counter() as counter:
        function(*args, **kwargs)
    return counter


def flops_of(function, *args, **kwargs) -> int:
    counter = count(function, *args, **kwargs)
    assert not counter.uncounted, counter.uncounted
    return counter.flops


X = torch.randn(2, 3, 4)  # 24 elements
N = X.numel()


# --- elementwise arithmetic -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("function", "per_element"), [
    (lambda x: x + x, 1),
    (lambda x: x + 1, 1),
    (lambda x: torch.add(x, x, alpha=2), 2),            # scaling by alpha is one more multiply
    (lambda x: 1 - x, 1),                               # rsub
    (lambda x: x * x, 1),
    (lambda x: x / 3, 1),
    (lambda x: torch.div(x, 3, rounding_mode="floor"), 2),
    (lambda x: -x, 1),
    (lambda x: x ** 2, 1),
    (lambda x: 2 ** x, 1),
    (lambda x: x.sqrt(), 1),
    (lambda x: x.rsqrt(), 1),
    (lambda x: x.exp(), 1),
    (lambda x: x.log(), 1),
    (lambda x: x.abs(), 1),
    (lambda x: x.reciprocal(), 1),
    (lambda x: torch.erf(x), 1),
    (lambda x: torch.maximum(x, x), 1),
    (lambda x: torch.minimum(x, x), 1),
    (lambda x: torch.max(x, x), 1),                     # max.other is elementwise
    (lambda x: x.clamp(0, 1), 2),                       # one comparison per bound
    (lambda x: x.clamp(min=0), 1),
    (lambda x: torch.eq(x, x), 1),
    (lambda x: x != 0, 1),
    (lambda x: torch.lt(x, x), 1),
    (lambda x: x <= 0, 1),
    (lambda x: x > 0, 1),
    (lambda x: torch.ge(x, x), 1),
    (lambda x: torch.addcmul(x, x, x), 2),
    (lambda x: torch.addcmul(x, x, x, value=0.5), 3),
    (lambda x: torch.addcdiv(x, x, x), 2),
    (lambda x: torch.lerp(x, x, 0.3), 3),
])
def test_elementwise_flops_per_output_element(function, per_element):
    assert flops_of(function, X) == per_element * N


def test_in_place_variants_are_counted_like_their_functional_twins():
    counter = count(lambda x: x.clone().add_(1).mul_(2).sigmoid_().clamp_(0, 1), X)
    assert counter.by_packet == {aten.add_: N, aten.mul_: N, aten.sigmoid_: 4 * N, aten.clamp_: 2 * N}


def test_broadcasting_counts_output_elements():
    assert flops_of(lambda x: x + torch.ones(4), X) == N


def test_selection_is_free_and_listed_as_ignored():
    counter = count(lambda x: (torch.where(x > 0, x, 0.0), x.masked_fill(x > 0, 1.0)), X)
    assert counter.flops == 2 * N  # the two comparisons only
    assert {aten.where, aten.masked_fill} <= counter.ignored


def test_integer_and_boolean_arithmetic_is_not_floating_point_work():
    ids = torch.arange(12).view(3, 4)
    assert flops_of(lambda: (ids + 1, ids * 2, ids == 3, torch.logical_and(ids > 1, ids < 5), ids.sum())) == 0


def test_complex_multiply_is_six_real_flops_and_add_two():
    signal = torch.ones(2, 4, dtype=torch.complex64)
    assert flops_of(lambda: signal * (1 + 2j)) == 6 * 8
    assert flops_of(lambda: signal + signal) == 2 * 8
    assert flops_of(lambda: signal.sum()) == 2 * 7


def test_complex_operators_without_a_convention_stay_uncounted():
    signal = torch.ones(2, 4, dtype=torch.complex64)
    counter = count(lambda: (signal.exp(), signal / signal))
    assert counter.uncounted == {aten.exp, aten.div}


@pytest.mark.filterwarnings("ignore:.*quantized tensor creation")
def test_quantized_dtypes_are_not_guessed():
    formula = OPERATOR_FORMULAS[aten.add]
    q = torch.quantize_per_tensor(torch.ones(4), 0.1, 0, torch.quint8)
    assert formula(q, q, out_val=q) is None


# --- activations and softmax (the activation table) ---------------------------------------------------------------

@pytest.mark.parametrize(("function", "per_element"), [
    (F.relu, 1), (F.relu6, 2), (F.hardtanh, 2), (lambda x: F.leaky_relu(x, 0.1), 2), (F.elu, 4), (F.selu, 5),
    (F.celu, 5), (torch.sigmoid, 4), (torch.tanh, 1), (F.silu, 5), (F.gelu, 5),
    (lambda x: F.gelu(x, approximate="tanh"), 9), (F.mish, 5), (F.hardswish, 5), (F.hardsigmoid, 4),
    (F.softplus, 6), (F.logsigmoid, 5), (lambda x: F.prelu(x, torch.tensor([0.25])), 2),
    (lambda x: F.threshold(x, 0.1, 2.0), 1),
])
def test_activations_use_the_activation_table(function, per_element):
    assert flops_of(function, X) == per_element * N


def test_glu_counts_per_output_element():
    assert flops_of(F.glu, X) == 5 * (N // 2)  # a * sigmoid(b): sigmoid 4 + multiply 1, on 2*3*2 outputs


def test_softmax_family_per_slice():
    rows = torch.randn(3, 7)
    assert flops_of(lambda: rows.softmax(-1)) == 3 * (5 * 7 - 2)  # max 6, shift 7, exp 7, sum 6, divide 7
    assert flops_of(lambda: rows.softmax(0)) == 7 * (5 * 3 - 2)
    assert flops_of(lambda: rows.log_softmax(-1)) == 3 * (5 * 7 - 1)  # softmax steps, log of the sum, subtract it
    assert flops_of(lambda: F.softmin(rows, -1)) == 3 * (6 * 7 - 2)  # negation + softmax


# --- reductions -------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("function", "expected"), [
    (lambda x: x.sum(), N - 1),
    (lambda x: x.sum(-1), 6 * 3),                       # 6 groups of 4: 3 additions each
    (lambda x: x.mean(-1), 6 * 4),                      # 3 additions + 1 division
    (lambda x: x.mean((1, 2)), 2 * 12),
    (lambda x: x.amax(-1), 6 * 3),
    (lambda x: x.max(-1), 6 * 3),                       # values and indices from the same comparisons
    (lambda x: x.max(), N - 1),
    (lambda x: x.argmax(), N - 1),
    (lambda x: x.prod(-1), 6 * 3),
    (lambda x: x.var(-1), 6 * 4 * 4),                   # mean n, subtract n, square n, sum n-1 and divide 1
    (lambda x: x.std(-1), 6 * (4 * 4 + 1)),
    (lambda x: torch.var_mean(x, -1), 6 * 4 * 4),
    (lambda x: x.norm(dim=-1), 6 * 2 * 4),              # square, sum, sqrt
    (lambda x: torch.linalg.vector_norm(x, 1, -1), 6 * (2 * 4 - 1)),
    (lambda x: torch.linalg.vector_norm(x, float("inf"), -1), 6 * (2 * 4 - 1)),
    (lambda x: torch.linalg.vector_norm(x, 3, -1), 6 * 3 * 4),
    (lambda x: x.logsumexp(-1), 6 * 4 * 4),
    (lambda x: x.cumsum(-1), 6 * 3),                    # 3 additions per line of 4
])
def test_reductions(function, expected):
    assert flops_of(function, X) == expected


def test_accumulating_scatters_count_one_addition_per_source_element():
    target, source = torch.zeros(5, 3), torch.ones(4, 3)
    index = torch.tensor([0, 1, 1, 4])
    assert flops_of(lambda: target.index_add(0, index, source)) == 12
    assert flops_of(lambda: target.index_put((index,), source, accumulate=True)) == 12
    assert flops_of(lambda: target.index_put((index,), source)) == 0


# --- normalization (the norm table) -----------------------------------------------------------------------------

def test_layer_norm():
    # 10 groups of 16: mean 16, variance 48, normalize 32, eps + rsqrt 2; affine 2 per element
    assert flops_of(nn.LayerNorm(16), torch.randn(2, 5, 16)) == 10 * (6 * 16 + 2) + 160 * 2
    assert flops_of(nn.LayerNorm(16, elementwise_affine=False), torch.randn(2, 5, 16)) == 10 * (6 * 16 + 2)


def test_group_norm():
    # 2 samples x 4 groups of 4 channels x 16 positions
    assert flops_of(nn.GroupNorm(4, 16), torch.randn(2, 16, 4, 4)) == 8 * (6 * 64 + 2) + 512 * 2


def test_batch_norm_evaluation_and_training():
    norm, inputs = nn.BatchNorm2d(3), torch.randn(2, 3, 4, 4)
    assert flops_of(norm.eval(), inputs) == 96 * (2 + 2) + 3 * 2  # normalize + affine; rsqrt(var + eps) per channel
    # batch statistics over 32 elements per channel, normalize, affine, running update (7 per channel)
    assert flops_of(norm.train(), inputs) == 3 * (6 * 32 + 2) + 96 * 2 + 7 * 3


def test_rms_norm_decomposition_and_fused_kernel_agree():
    inputs = torch.randn(2, 5, 16)
    expected = 10 * (3 * 16 + 2) + 160  # square, mean, scale per element; eps + rsqrt per group; weight
    assert flops_of(nn.RMSNorm(16), inputs) == expected
    fused = OPERATOR_FORMULAS[aten._fused_rms_norm]
    assert fused(inputs, [16], torch.ones(16), 1e-6, out_val=(inputs, torch.ones(2, 5, 1))) == expected


# --- pooling and interpolation ----------------------------------------------------------------------------------

def test_pooling_windows():
    image = torch.randn(1, 2, 4, 4)
    assert flops_of(lambda: F.max_pool2d(image, 2)) == 8 * 3
    assert flops_of(lambda: F.avg_pool2d(image, 2)) == 8 * 4
    # 3x3 windows, stride 1, padding 1: per dimension the 4 windows read 2 + 3 + 3 + 2 = 10 elements
    assert flops_of(lambda: F.max_pool2d(image, 3, 1, 1)) == 2 * (10 * 10 - 16)
    assert flops_of(lambda: F.adaptive_avg_pool2d(image, 1)) == 2 * 16


def test_adaptive_pooling_windows_overlap():
    image = torch.randn(1, 2, 7, 7)
    # 7 -> 3 windows: [0, 3), [2, 5), [4, 7): 9 elements per dimension
    assert flops_of(lambda: F.adaptive_avg_pool2d(image, 3)) == 2 * 81
    assert flops_of(lambda: F.adaptive_max_pool2d(image, 3)) == 2 * (81 - 9)


def test_interpolation_taps():
    image = torch.randn(1, 1, 2, 2)
    assert flops_of(lambda: F.interpolate(image, scale_factor=2, mode="bilinear")) == 16 * 7
    assert flops_of(lambda: F.interpolate(image, scale_factor=2, mode="bicubic")) == 16 * 31
    assert flops_of(lambda: F.interpolate(image[0], scale_factor=2, mode="linear")) == 2 * 4 * 3  # 2 rows of 4
    counter = count(lambda: F.interpolate(image, scale_factor=2))
    assert counter.flops == 0 and aten.upsample_nearest2d in counter.ignored


def test_embedding_bag():
    weight, bags = torch.randn(10, 4), torch.tensor([[1, 2, 3], [0, 1, 2]])
    assert flops_of(lambda: F.embedding_bag(bags, weight, mode="sum")) == 6 * 4
    assert flops_of(lambda: F.embedding_bag(bags, weight, mode="mean")) == 6 * 4 + 2 * 4
    assert flops_of(lambda: F.embedding_bag(bags, weight, mode="sum", per_sample_weights=torch.ones(2, 3))) == 48
    # skipped padding lookups depend on index values: not counted rather than guessed
    assert count(lambda: F.embedding_bag(bags, weight, padding_idx=0)).uncounted


# --- dot products -----------------------------------------------------------------------------------------------

A, B = torch.randn(3, 4), torch.randn(4, 5)


def test_matmul_family():
    assert flops_of(torch.mm, A, B) == 2 * 3 * 4 * 5
    assert flops_of(lambda: torch.addmm(torch.randn(5), A, B)) == 2 * 60 + 15  # bias: 1 addition per output
    assert flops_of(lambda: torch.addmm(torch.randn(5), A, B, beta=0)) == 2 * 60
    assert flops_of(lambda: torch.addmm(torch.randn(5), A, B, beta=2, alpha=3)) == 2 * 60 + 3 * 15
    batch1, batch2 = torch.randn(2, 3, 4), torch.randn(2, 4, 5)
    assert flops_of(torch.bmm, batch1, batch2) == 2 * 2 * 60
    assert flops_of(lambda: torch.baddbmm(torch.randn(3, 5), batch1, batch2)) == 2 * 2 * 60 + 30
    assert flops_of(lambda: torch.addbmm(torch.randn(3, 5), batch1, batch2)) == 2 * 2 * 60 + 15
    assert flops_of(torch.mv, A, torch.randn(4)) == 2 * 12
    assert flops_of(lambda: torch.addmv(torch.randn(3), A, torch.randn(4))) == 2 * 12 + 3
    assert flops_of(torch.dot, torch.randn(4), torch.randn(4)) == 8
    assert flops_of(lambda: torch._addmm_activation(torch.randn(5), A, B, use_gelu=True)) == 2 * 60 + 15 + 9 * 15


def test_linear_matmul_and_einsum_reach_dispatch_as_mm_family():
    tokens, weight = torch.randn(2, 6, 4), torch.randn(5, 4)
    assert flops_of(F.linear, tokens, weight, torch.randn(5)) == 2 * 12 * 20 + 12 * 5
    assert flops_of(F.linear, tokens, weight) == 2 * 12 * 20
    assert flops_of(torch.matmul, torch.randn(2, 3, 6, 4), torch.randn(2, 3, 4, 5)) == 2 * 6 * 6 * 20
    assert flops_of(lambda: torch.einsum("bij,bjk->bik", torch.randn(2, 3, 4), torch.randn(2, 4, 5))) == 2 * 2 * 60


def test_complex_matmul_counts_complex_multiply_accumulates():
    a, b = torch.ones(3, 4, dtype=torch.complex64), torch.ones(4, 5, dtype=torch.complex64)
    assert flops_of(torch.mm, a, b) == 8 * 60  # 6 for the complex multiply + 2 for the complex add


def test_integer_matmul_is_not_guessed():
    ints = torch.ones(3, 3, dtype=torch.int64)
    assert count(torch.mm, ints, ints).uncounted == {aten.mm}


def test_convolutions():
    image = torch.randn(1, 3, 10, 10)
    conv = nn.Conv2d(3, 8, 3)  # 8 x 8 x 8 outputs, 27 MACs each, bias
    assert flops_of(conv, image) == 2 * 512 * 27 + 512
    depthwise = nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False)
    assert flops_of(depthwise, torch.randn(1, 8, 5, 5)) == 2 * 200 * 9
    transposed = nn.ConvTranspose2d(4, 6, 3, stride=2, bias=False)  # every input element meets 6 * 9 weights
    assert flops_of(transposed, torch.randn(1, 4, 5, 5)) == 2 * 100 * 54
    assert flops_of(nn.Conv1d(5, 4, 3, padding="same"), torch.randn(2, 5, 7)) == 2 * 56 * 15 + 56


# --- attention --------------------------------------------------------------------------------------------------

def sdpa_expected(batch_heads, queries, keys, dim, *, additive_mask=False):
    scores = batch_heads * queries * keys
    return (2 * 2 * scores * dim                             # QK^T and weights . V
            + batch_heads * queries * dim                    # q * scale
            + batch_heads * queries * (5 * keys - 2)         # softmax per query row
            + (scores if additive_mask else 0))


def test_fused_cpu_attention_kernel():
    q = torch.randn(2, 4, 5, 8)
    counter = count(F.scaled_dot_product_attention, q, q, q)
    assert set(counter.by_packet) == {aten._scaled_dot_product_flash_attention_for_cpu}
    assert counter.flops == sdpa_expected(8, 5, 5, 8)
    # the causal mask selects (free) and the full score matrix is counted
    assert flops_of(F.scaled_dot_product_attention, q, q, q, is_causal=True) == sdpa_expected(8, 5, 5, 8)
    assert flops_of(F.scaled_dot_product_attention, q, q, q, attn_mask=torch.zeros(5, 5)) == \
        sdpa_expected(8, 5, 5, 8, additive_mask=True)


def test_gpu_attention_kernels_share_the_formula():
    meta = torch.empty(2, 4, 5, 8, device="meta")
    expected = sdpa_expected(8, 5, 5, 8)
    assert OPERATOR_FORMULAS[aten._scaled_dot_product_flash_attention](meta, meta, meta, out_val=None) == expected
    efficient = OPERATOR_FORMULAS[aten._scaled_dot_product_efficient_attention]
    assert efficient(meta, meta, meta, None, False, out_val=None) == expected
    bias = torch.empty(2, 4, 5, 5, device="meta")
    assert efficient(meta, meta, meta, bias, False, out_val=None) == expected + 200


def multi_head_expected(batch, queries, keys, embed, heads, *, averaged_weights=False):
    """Projections, attention with q scaling, output projection, head averaging of returned weights."""
    projections = 2 * embed * embed * batch * (queries + 2 * keys + queries) + embed * batch * (2 * queries + 2 * keys)
    head_dim = embed // heads
    attention = sdpa_expected(batch * heads, queries, keys, head_dim)
    return projections + attention + (batch * heads * queries * keys if averaged_weights else 0)


def test_native_multi_head_attention_fast_path():
    mha = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)
    counter = count(mha, x, x, x)
    assert set(counter.by_packet) == {aten._native_multi_head_attention}
    assert counter.flops == multi_head_expected(2, 5, 5, 16, 4, averaged_weights=True)
    assert flops_of(mha, x, memory, memory, need_weights=False) == multi_head_expected(2, 5, 7, 16, 4)


def encoder_layer_expected(lengths, embed, heads, feedforward, *, gelu=False):
    tokens = sum(lengths)
    attention = sum(multi_head_expected(1, length, length, embed, heads) for length in lengths)
    norms = 2 * tokens * (6 * embed + 2 + 2 * embed)
    ffn = 2 * tokens * embed * feedforward * 2 + tokens * (feedforward + embed)
    return attention + 2 * tokens * embed + norms + ffn + (5 if gelu else 1) * tokens * feedforward


@pytest.mark.parametrize("gelu", [False, True])
def test_fused_encoder_layer_is_counted_from_its_weights(gelu):
    layer = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True, activation="gelu" if gelu else "relu").eval()
    counter = count(layer, torch.randn(2, 5, 16))
    assert set(counter.by_packet) == {aten._transformer_encoder_layer_fwd}
    assert counter.flops == encoder_layer_expected([5, 5], 16, 4, 32, gelu=gelu)
    # the fused kernel turns every mask into a boolean one for a masked softmax: a free selection
    masked = count(layer, torch.randn(2, 5, 16), src_mask=nn.Transformer.generate_square_subsequent_mask(5))
    assert masked.by_packet == counter.by_packet


def test_fused_encoder_layer_agrees_with_its_decompositions():
    layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)
    inputs = torch.randn(2, 5, 16)
    fused = flops_of(layer.eval(), inputs)
    training = flops_of(layer.train(), inputs)  # separate mm/addmm/layer-norm kernels, same attention kernel
    assert training == fused
    with torch.device("meta"):
        meta_layer = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True).eval()
        meta = flops_of(meta_layer, torch.empty(2, 5, 16))
    # the meta device takes the math attention path: q and k are each scaled (B*S*E more than q alone)
    assert meta == fused + 2 * 5 * 16


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_nested_encoder_path_counts_each_sequence():
    stack = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 4, 32, batch_first=True), 2).eval()
    padding = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    counter = count(stack, torch.randn(2, 5, 16), src_key_padding_mask=padding)
    assert not counter.uncounted
    assert counter.by_packet[aten._transformer_encoder_layer_fwd] == 2 * encoder_layer_expected([5, 3], 16, 4, 32)


# --- recurrent kernels ------------------------------------------------------------------------------------------

def lstm_expected(rows, input_size, hidden):
    # gate matmuls, 2 bias additions per gate, then 4 gate sums, 3 sigmoids, 2 tanh, c' = f*c + i*g, o*tanh(c')
    return rows * (2 * 4 * hidden * (input_size + hidden) + hidden * (4 + 3 * 4 + 1 + 3 + 1 + 1 + 8))


def test_lstm_fused_kernel_matches_formula_and_decomposition():
    lstm = nn.LSTM(16, 8).eval()
    inputs = torch.randn(5, 2, 16)
    counter = count(lstm, inputs)
    assert aten.mkldnn_rnn_layer in counter.by_packet and not counter.uncounted
    assert counter.flops == lstm_expected(10, 16, 8)
    with torch.device("meta"):
        meta = flops_of(nn.LSTM(16, 8).eval(), torch.empty(5, 2, 16))
    assert meta == counter.flops  # the meta device decomposes into addmm, sigmoid, tanh, mul, add


def test_rnn_kernels_by_mode():
    meta = torch.device("meta")
    source, weight_ih, weight_hh = (torch.empty(5, 2, 16, device=meta), torch.empty(8, 16, device=meta),
                                    torch.empty(8, 8, device=meta))
    state = torch.empty(2, 8, device=meta)
    formula = OPERATOR_FORMULAS[aten.mkldnn_rnn_layer]
    tanh_rnn = formula(source, weight_ih, weight_hh, None, None, state, state, False, [], 1, 8, 1, True, False,
                       False, False, out_val=None)
    assert tanh_rnn == 10 * (2 * 8 * 24 + 8 * (1 + 1 + 2))  # matmuls, sum of products, tanh, 2 biases
    assert formula(source, weight_ih, weight_hh, None, None, state, state, False, [], 7, 8, 1, True, False,
                   False, False, out_val=None) is None  # an unknown mode is not guessed


def test_fused_cells_count_their_pointwise_half():
    meta = torch.device("meta")
    gates, state = torch.empty(3, 32, device=meta), torch.empty(3, 8, device=meta)
    bias = torch.empty(32, device=meta)
    lstm_cell = OPERATOR_FORMULAS[aten._thnn_fused_lstm_cell]
    assert lstm_cell(gates, gates, state, bias, bias, out_val=None) == 24 * (22 + 4 * 2)
    assert lstm_cell(gates, gates, state, out_val=None) == 24 * 22
    gru_cell = OPERATOR_FORMULAS[aten._thnn_fused_gru_cell]
    assert gru_cell(gates[:, :24], gates[:, :24], state, out_val=None) == 24 * 17


def test_dropout_kernel_counts_mask_and_rescale_in_training_only():
    assert flops_of(lambda: aten.native_dropout(X, 0.5, True)) == 2 * N
    assert flops_of(lambda: aten.native_dropout(X, 0.5, False)) == 0


# --- coverage of real models ------------------------------------------------------------------------------------

class ConvNet(nn.Sequential):
    def __init__(self) -> None:
        super().__init__(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(8, 8, 3, groups=8), nn.ReLU6(), nn.Hardswish(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, 10))


class Attention(nn.Module):
    def forward(self, q):
        return F.scaled_dot_product_attention(q, q, q, is_causal=True)


REFERENCE_MODULES = {
    "convnet": (ConvNet, (2, 3, 8, 8)),
    "encoder_layer": (lambda: nn.TransformerEncoderLayer(16, 4, 32, batch_first=True), (2, 5, 16)),
    "lstm": (lambda: nn.LSTM(16, 8, num_layers=2, bidirectional=True), (5, 2, 16)),
    "gru": (lambda: nn.GRU(16, 8, batch_first=True), (2, 5, 16)),
    "mha": (lambda: _SelfAttention(), (2, 5, 16)),
    "sdpa": (Attention, (2, 4, 5, 8)),
    "rms_norm": (lambda: nn.RMSNorm(16), (2, 5, 16)),
    "group_norm": (lambda: nn.GroupNorm(4, 16), (2, 16, 4, 4)),
    "layer_norm": (lambda: nn.LayerNorm(16), (2, 5, 16)),
}


class _SelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention = nn.MultiheadAttention(16, 4, batch_first=True)

    def forward(self, x):
        return self.attention(x, x, x)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("name", list(REFERENCE_MODULES))
def test_reference_modules_leave_nothing_uncounted(name, device):
    factory, shape = REFERENCE_MODULES[name]
    with torch.device(device):
        module = factory().eval()
        inputs = torch.randn(shape)
    counter = count(module, inputs)
    assert counter.uncounted == set()
    assert counter.flops > 0


def test_formulas_follow_pytorchs_flop_counter_contract():
    model, inputs = ConvNet().eval(), torch.randn(2, 3, 8, 8)
    with torch.no_grad(), FlopCounterMode(display=False, custom_mapping=OPERATOR_FORMULAS) as mode:
        model(inputs)
    assert mode.get_total_flops() == flops_of(model, inputs)


def test_significance_of_operators():
    assert operator_significance(aten.mm) == "significant"
    assert operator_significance(aten._transformer_encoder_layer_fwd) == "significant"
    assert operator_significance(aten.mkldnn_rnn_layer) == "significant"
    assert operator_significance(aten.add) == "minor"
    assert operator_significance(aten.native_layer_norm) == "minor"
    assert operator_significance(aten.upsample_bilinear2d) == "minor"
    # unknown packets are classified by name
    assert operator_significance(aten._weight_int8pack_mm) == "significant"
    assert operator_significance(aten._upsample_bilinear2d_aa) == "minor"
    assert operator_significance(aten.sort) == "minor"


# --- the table itself ------------------------------------------------------------------------------------------


def test_cost_table_refuses_a_name_the_installed_torch_does_not_have():
    table = CostTable()
    with pytest.raises(ValueError, match=r"aten\.not_an_operator is not an operator of the installed PyTorch"):
        table.register(["not_an_operator"], lambda args, kwargs, out: OpCost(0))
    with pytest.raises(ValueError, match=r"aten\.rsub_ is not an operator"):  # rsub has no in-place twin
        table.register(["rsub"], lambda args, kwargs, out: OpCost(0), inplace=True)


def test_cost_table_refuses_a_second_registration_of_a_packet():
    table = CostTable()
    table.register(["mul"], lambda args, kwargs, out: OpCost(1), inplace=True)
    assert set(table) == {aten.mul, aten.mul_}
    with pytest.raises(ValueError, match="registered twice"):
        table.register(["mul_"], lambda args, kwargs, out: OpCost(2))


def test_families_never_price_one_packet_twice():
    first, second = CostTable(), CostTable()
    first.register(["sin"], lambda args, kwargs, out: OpCost(1))
    second.register(["sin"], lambda args, kwargs, out: OpCost(2))
    with pytest.raises(ValueError, match="priced by two operator families"):
        merge_families((first, second), {})
    with pytest.raises(ValueError, match="zero-work"):
        merge_families((first,), {aten.sin: "view"})


def test_every_listed_operator_name_resolves_on_the_installed_torch():
    """Every name of every family (and of the zero-work list) is an operator of this PyTorch, listed once."""
    listed = [name for names in ZERO_WORK_NAMES.values() for name in names]
    assert len(listed) == len(set(listed)) == len(ZERO_WORK_OPERATORS) - len(BOOKKEEPING_OPERATORS)
    assert all(getattr(aten, name, None) is not None for name in listed)
    for packet in (*OPERATOR_COSTS, *(set(ZERO_WORK_OPERATORS) - set(BOOKKEEPING_OPERATORS))):
        name = packet._qualified_op_name.removeprefix("aten::")
        assert getattr(aten, name) is packet
    assert len(OPERATOR_COSTS) == sum(len(family) for family in (*MINOR_FAMILIES, *DOT_PRODUCT_FAMILIES))


class _Tagged(torch.Tensor):
    """A tensor subclass: its exact type is not torch.Tensor, so its dtype is read through isinstance."""


def test_operand_kind_reads_tensors_everywhere_a_call_holds_them():
    real, integral = torch.ones(2), torch.ones(2, dtype=torch.int64)
    complex_tensor = torch.ones(2, dtype=torch.complex64)
    assert operand_kind((real, [1, 2], None, True), {}, real) == "real"
    assert operand_kind((integral, 3), {"dim": 0}, integral) == "integral"
    assert operand_kind(([integral, complex_tensor],), {}, None) == "complex"  # inside a list
    assert operand_kind((integral, [2, 3, complex_tensor]), {}, None) == "complex"  # after plain items
    assert operand_kind((integral,), {"other": (integral, real)}, None) == "real"  # a keyword's tuple
    assert operand_kind((integral, 2j), {}, integral) == "complex"  # a complex scalar
    assert operand_kind((integral.as_subclass(_Tagged),), {}, real.as_subclass(_Tagged)) == "real"
    quantized = torch.quantize_per_tensor(real, 0.1, 0, torch.qint8)
    assert operand_kind((real, quantized), {}, real) is None  # a dtype without a convention
