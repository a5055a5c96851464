"""Native attention and Transformer handlers: hand-computed counts, masks and token dependencies, boundaries."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torchscan_testing import estimate, value

from torchscan.builtin_handlers import DEFAULT_HANDLERS, builtin_for
from torchscan.formulas import transformer as attention
from torchscan.formulas.transformer import METHOD, handlers
from torchscan.handlers import ModuleCall

pytestmark = [pytest.mark.filterwarnings("ignore:enable_nested_tensor is True"),
              pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors is in prototype")]

# The small geometry of most tests: N=2 batch, L=3 queries, S=5 keys, E=8, H=2 heads (D=4), kdim 6, vdim 7.
N, L, S, E, H, D, KDIM, VDIM = 2, 3, 5, 8, 2, 4, 6, 7
SOFTMAX_ROW = 5 * S - 2          # activation family: max, shift, exp, sum, divide over one row of S scores
SCORES = N * H * L * S           # 60
#: The family's handlers, priced with the registry's one built-in lookup (as DEFAULT_HANDLERS holds them).
HANDLERS = handlers(builtin_for)


def counts(result: dict) -> tuple:
    return tuple(value(result[name]) for name in ("module_flops", "macs", "dmas"))


def seq_first(*shape_tail: int, length: int) -> torch.Tensor:
    return torch.randn(length, N, *shape_tail)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def cross_attention(batch_first: bool = False, **options) -> nn.MultiheadAttention:
    return nn.MultiheadAttention(E, H, kdim=KDIM, vdim=VDIM, batch_first=batch_first, **options)


# ------------------------------------------------------------------------------------------- registration


def test_six_native_types_own_all_fields():
    expected = {nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerDecoderLayer, nn.TransformerEncoder,
                nn.TransformerDecoder, nn.Transformer}
    assert set(HANDLERS) == expected
    for handler in HANDLERS.values():
        assert handler.method == METHOD == "formula:transformer"
        assert handler.subtree_metrics == {"module_flops", "macs", "dmas", "receptive_field", "effective_stride",
                                           "effective_padding"}


# ------------------------------------------------------------------------------------ MultiheadAttention


def test_mha_hand_counts_with_kdim_vdim_and_averaged_weights():
    mha = cross_attention()
    result = estimate(mha, seq_first(E, length=L), seq_first(KDIM, length=S), seq_first(VDIM, length=S))
    macs = N * (L * E * E + S * KDIM * E + S * VDIM * E + L * E * E) + 2 * N * H * L * S * D
    assert macs == 2 * (192 + 240 + 280 + 192) + 480 == 2288
    biases = N * (L * E + 2 * S * E) + N * L * E          # in-projection 3 biases + out_proj bias
    scaling = N * L * E
    softmax = N * H * L * SOFTMAX_ROW
    averaging = SCORES                                     # (H-1) adds + 1 divide per (n, l, s)
    flops = 2 * macs + biases + scaling + softmax + averaging
    assert flops == 4576 + 256 + 48 + 276 + 60 == 5216
    inputs = N * (L * E + S * KDIM + S * VDIM)                        # 178
    parameters = E * E + E * KDIM + E * VDIM + E * E + 3 * E + E      # 264
    intermediates = 2 * (N * L * E + 2 * N * S * E + 2 * SCORES + N * L * E)  # q, k, v, scores, probs, context
    outputs = N * L * E + SCORES + N * L * S                          # output; averaging reads probs, writes (N,L,S)
    assert inputs + parameters + intermediates + outputs == 178 + 264 + 752 + 138 == 1332
    assert counts(result) == (5216, 2288, 1332)
    assert (result["receptive_field"], result["effective_stride"], result["effective_padding"]) == (S, 1, 0)


def test_mha_batch_first_and_kwargs_only_calls_give_the_same_counts():
    reference = estimate(cross_attention(), seq_first(E, length=L), seq_first(KDIM, length=S),
                         seq_first(VDIM, length=S))
    batch_first = cross_attention(batch_first=True)
    result = estimate(batch_first, query=torch.randn(N, L, E), key=torch.randn(N, S, KDIM),
                      value=torch.randn(N, S, VDIM))
    assert result == reference


def test_mha_unbatched_inputs_count_one_sequence():
    mha = cross_attention(batch_first=True)  # batch_first is ignored for 2-D inputs
    result = estimate(mha, torch.randn(L, E), torch.randn(S, KDIM), torch.randn(S, VDIM), need_weights=False)
    macs = L * E * E + S * KDIM * E + S * VDIM * E + L * E * E + 2 * H * L * S * D
    assert macs == 192 + 240 + 280 + 192 + 240 == 1144
    assert value(result["macs"]) == 1144


def test_mha_returned_weights_averaged_per_head_or_none():
    def run(**options):
        return counts(estimate(cross_attention(), seq_first(E, length=L), seq_first(KDIM, length=S),
                               seq_first(VDIM, length=S), **options))

    none = run(need_weights=False)
    per_head = run(need_weights=True, average_attn_weights=False)
    averaged = run(need_weights=True, average_attn_weights=True)
    assert per_head == none                                  # per-head weights are the probabilities
    assert averaged[0] - none[0] == SCORES == 60             # H-1 adds + 1 divide per (n, l, s)
    assert averaged[1] == none[1]
    assert averaged[2] - none[2] == SCORES + N * L * S == 90  # probabilities read again, (N, L, S) written


def test_mha_float_masks_add_per_score_and_bool_masks_are_free():
    def run(**masks):
        return counts(estimate(cross_attention(), seq_first(E, length=L), seq_first(KDIM, length=S),
                               seq_first(VDIM, length=S), need_weights=False, **masks))

    plain = run()
    bool_mask = run(attn_mask=torch.zeros(L, S, dtype=torch.bool))
    float_mask = run(attn_mask=torch.zeros(L, S))
    both_float = run(attn_mask=torch.zeros(L, S), key_padding_mask=torch.zeros(N, S))
    assert bool_mask[0] == plain[0] and bool_mask[2] - plain[2] == L * S == 15      # the mask is read
    assert float_mask[0] - plain[0] == N * H * L * S == 60                          # 1 add per score
    assert both_float[0] - plain[0] == 2 * 60 and both_float[2] - plain[2] == 15 + N * S
    assert bool_mask[1] == float_mask[1] == plain[1]                                # masks are 0 MACs


def test_mha_without_bias():
    with_bias = counts(estimate(cross_attention(), seq_first(E, length=L), seq_first(KDIM, length=S),
                                seq_first(VDIM, length=S), need_weights=False))
    without = counts(estimate(cross_attention(bias=False), seq_first(E, length=L), seq_first(KDIM, length=S),
                              seq_first(VDIM, length=S), need_weights=False))
    assert with_bias[0] - without[0] == N * (L * E + 2 * S * E) + N * L * E == 256
    assert with_bias[1] == without[1]
    assert with_bias[2] - without[2] == 3 * E + E == 32


def test_mha_macs_match_an_explicit_unfused_decomposition():
    """Recompute MHA by hand with F.linear and matmul, count each product's MACs from its shapes."""
    mha = cross_attention().eval()
    query, key, val = seq_first(E, length=L), seq_first(KDIM, length=S), seq_first(VDIM, length=S)
    macs = 0

    def linear(x, weight, bias):
        nonlocal macs
        macs += x.shape[:-1].numel() * weight.shape[1] * weight.shape[0]  # rows * in * out
        return F.linear(x, weight, bias)

    def matmul(a, b):
        nonlocal macs
        macs += a.shape[:-2].numel() * a.shape[-2] * a.shape[-1] * b.shape[-1]
        return a @ b

    b_q, b_k, b_v = mha.in_proj_bias.chunk(3)
    with torch.no_grad():
        q = linear(query, mha.q_proj_weight, b_q)                      # (L, N, E)
        k = linear(key, mha.k_proj_weight, b_k)                        # (S, N, E)
        v = linear(val, mha.v_proj_weight, b_v)

        def heads(x):  # (T, N, E) -> (N, H, T, D)
            return x.reshape(x.shape[0], N, H, D).permute(1, 2, 0, 3)

        scores = matmul(heads(q) * D ** -0.5, heads(k).transpose(-2, -1))   # (N, H, L, S)
        context = matmul(scores.softmax(-1), heads(v))                      # (N, H, L, D)
        merged = context.permute(2, 0, 1, 3).reshape(L, N, E)
        output = linear(merged, mha.out_proj.weight, mha.out_proj.bias)
        expected, _ = mha(query, key, val)
    torch.testing.assert_close(output, expected)
    result = HANDLERS[nn.MultiheadAttention].callback(ModuleCall(mha, (query, key, val), {}, (expected, None)))
    assert value(result["macs"]) == macs == 2288


# ---------------------------------------------------------------------------------- token dependencies


def self_attention(batch_first: bool = False) -> nn.MultiheadAttention:
    return nn.MultiheadAttention(E, H, batch_first=batch_first)


def test_causal_mask_sees_at_most_l_tokens():
    x = torch.randn(4, N, E)
    causal = nn.Transformer.generate_square_subsequent_mask(4)          # float, -inf above the diagonal
    assert estimate(self_attention(), x, x, x, attn_mask=causal)["receptive_field"] == 4
    assert estimate(self_attention(), x, x, x, attn_mask=causal.isinf())["receptive_field"] == 4
    hinted = estimate(self_attention(), x, x, x, attn_mask=causal, is_causal=True, need_weights=False)
    assert hinted["receptive_field"] == 4


def test_masks_narrow_the_token_receptive_field():
    query, key = torch.randn(L, N, E), torch.randn(S, N, E)
    first_two = torch.ones(L, S, dtype=torch.bool)
    first_two[:, :2] = False                                 # every query sees keys 0 and 1 only
    assert estimate(self_attention(), query, key, key, attn_mask=first_two)["receptive_field"] == 2
    padding = torch.tensor([[False, False, False, True, True], [False, True, True, True, True]])
    assert estimate(self_attention(), query, key, key, key_padding_mask=padding)["receptive_field"] == 3
    finite = torch.full((L, S), -1e9)                        # very negative, still attended
    assert estimate(self_attention(), query, key, key, attn_mask=finite)["receptive_field"] == S


def test_per_head_masks_count_a_key_seen_by_any_head():
    query, key = torch.randn(L, N, E), torch.randn(S, N, E)
    mask = torch.ones(N * H, L, S, dtype=torch.bool)
    mask[0, 0, 0] = mask[1, 0, 1] = mask[1, 0, 2] = False    # batch 0: head 0 sees key 0, head 1 keys 1-2
    mask[2:, :, 0] = False                                   # batch 1: one key for every query
    assert estimate(self_attention(), query, key, key, attn_mask=mask)["receptive_field"] == 3


def test_meta_device_keeps_counts_and_refuses_to_guess_the_mask():
    def run(device: str) -> dict:
        with torch.device(device):
            mha = cross_attention()
            query, key, val = seq_first(E, length=L), seq_first(KDIM, length=S), seq_first(VDIM, length=S)
            mask = torch.zeros(L, S)
        return estimate(mha, query, key, val, attn_mask=mask)

    real, meta = run("cpu"), run("meta")
    assert counts(meta) == counts(real)
    assert real["receptive_field"] == S
    assert meta["receptive_field"]["status"] == "unavailable"
    assert meta["effective_stride"] == 1 and meta["effective_padding"] == 0
    with torch.device("meta"):
        unmasked = estimate(cross_attention(), seq_first(E, length=L), seq_first(KDIM, length=S),
                            seq_first(VDIM, length=S))
    assert unmasked["receptive_field"] == S


# ------------------------------------------------------------------------------------------------ layers

F_DIM = 16
ROWS = N * L                     # tokens of the self-attention layers below (L=3)


def layer_norm_counts(norm: nn.LayerNorm, rows: int) -> tuple:
    """The normalization family's LayerNorm formula for rows of width E (its convention, not this module's)."""
    source = torch.empty(rows, E, device="meta")
    result = DEFAULT_HANDLERS[nn.LayerNorm].callback(ModuleCall(norm, (source,), {}, source))
    return value(result["module_flops"]), value(result["dmas"])


def self_attention_counts(rows: int, length: int, bias: bool = True) -> tuple:
    """Self-attention inside a layer (L = S, no weights returned), written out."""
    batch = rows // length
    macs = 4 * rows * E * E + 2 * batch * H * length * length * D
    scores = batch * H * length * length
    flops = 2 * macs + (4 * rows * E if bias else 0) + rows * E + batch * H * length * (5 * length - 2)
    dmas = (3 * rows * E + 4 * E * E + (4 * E if bias else 0) + 2 * (4 * rows * E + 2 * scores) + rows * E)
    return flops, macs, dmas


def test_encoder_layer_hand_counts_relu():
    layer = nn.TransformerEncoderLayer(E, H, F_DIM)
    result = estimate(layer, torch.randn(L, N, E))
    attn_flops, attn_macs, attn_dmas = self_attention_counts(ROWS, L)
    assert attn_macs == 4 * 6 * 64 + 2 * 2 * 2 * 9 * 4 == 1824
    ffn_macs = 2 * ROWS * E * F_DIM                                   # linear1 + linear2 = 1536
    ffn_flops = 2 * ffn_macs + ROWS * F_DIM + ROWS * E + 1 * ROWS * F_DIM   # biases + ReLU (1 per element)
    ffn_dmas = (ROWS * E + E * F_DIM + F_DIM + ROWS * F_DIM) + 2 * ROWS * F_DIM + (
        ROWS * F_DIM + F_DIM * E + E + ROWS * E)
    norm_flops, norm_dmas = layer_norm_counts(layer.norm1, ROWS)
    residual_flops, residual_dmas = 2 * ROWS * E, 2 * 3 * ROWS * E
    assert counts(result) == (
        attn_flops + ffn_flops + 2 * norm_flops + residual_flops,
        attn_macs + ffn_macs,
        attn_dmas + ffn_dmas + 2 * norm_dmas + residual_dmas,
    )
    assert value(result["macs"]) == 1824 + 1536
    assert (result["receptive_field"], result["effective_stride"], result["effective_padding"]) == (L, 1, 0)


def test_encoder_layer_layouts_norm_first_and_eps_do_not_change_counts():
    reference = estimate(nn.TransformerEncoderLayer(E, H, F_DIM), torch.randn(L, N, E))
    for options in ({"batch_first": True}, {"norm_first": True}, {"layer_norm_eps": 1e-3}):
        layer = nn.TransformerEncoderLayer(E, H, F_DIM, **options)
        x = torch.randn(N, L, E) if options.get("batch_first") else torch.randn(L, N, E)
        assert estimate(layer, x) == reference, options


def test_encoder_layer_without_bias():
    with_bias = counts(estimate(nn.TransformerEncoderLayer(E, H, F_DIM), torch.randn(L, N, E)))
    without = counts(estimate(nn.TransformerEncoderLayer(E, H, F_DIM, bias=False), torch.randn(L, N, E)))
    # attention biases 4*rows*E, linear biases rows*F + rows*E, and each LayerNorm's shift (1 per element)
    assert with_bias[0] - without[0] == 4 * ROWS * E + ROWS * F_DIM + ROWS * E + 2 * ROWS * E == 432
    assert with_bias[1] == without[1]
    # parameters: attention 4E, linear biases F + E, LayerNorm biases 2E
    assert with_bias[2] - without[2] == 4 * E + F_DIM + E + 2 * E == 72


def test_encoder_layer_activations():
    x = torch.randn(L, N, E)
    relu = counts(estimate(nn.TransformerEncoderLayer(E, H, F_DIM), x))
    gelu = counts(estimate(nn.TransformerEncoderLayer(E, H, F_DIM, activation="gelu"), x))
    tanh = counts(estimate(nn.TransformerEncoderLayer(E, H, F_DIM, activation=nn.GELU(approximate="tanh")), x))
    assert gelu[0] - relu[0] == (5 - 1) * ROWS * F_DIM      # exact GELU 5 FLOPs, ReLU 1, per element
    assert tanh[0] - relu[0] == (9 - 1) * ROWS * F_DIM      # tanh GELU 9
    assert gelu[1:] == relu[1:] == tanh[1:]

    unknown = estimate(nn.TransformerEncoderLayer(E, H, F_DIM, activation=lambda t: t.clamp(min=0)), x)
    assert unknown["module_flops"]["status"] == "partial"
    assert unknown["module_flops"]["known_value"] == relu[0] - ROWS * F_DIM   # everything but the activation
    assert unknown["module_flops"]["method"] == METHOD and unknown["module_flops"]["scope"] == "subtree"
    assert (unknown["macs"], unknown["dmas"]) == relu[1:]


def test_encoder_layer_masks_and_unbatched_input():
    layer = nn.TransformerEncoderLayer(E, H, F_DIM)
    causal = nn.Transformer.generate_square_subsequent_mask(L)
    masked = estimate(layer, torch.randn(L, N, E), src_mask=causal)
    plain = estimate(layer, torch.randn(L, N, E))
    assert value(masked["module_flops"]) - value(plain["module_flops"]) == N * H * L * L == 36
    assert value(masked["dmas"]) - value(plain["dmas"]) == L * L
    assert masked["receptive_field"] == L
    causal_bool = torch.ones(L, L, dtype=torch.bool).triu(1)
    diagonal_only = ~torch.eye(L, dtype=torch.bool)          # each token attends to itself only
    assert estimate(layer, torch.randn(L, N, E), src_mask=diagonal_only)["receptive_field"] == 1
    assert estimate(layer, torch.randn(L, N, E), src_mask=causal_bool)["receptive_field"] == L

    unbatched = estimate(layer, torch.randn(L, E))
    _, attn_macs, _ = self_attention_counts(L, L)
    assert value(unbatched["macs"]) == attn_macs + 2 * L * E * F_DIM == 4 * 3 * 64 + 2 * 2 * 9 * 4 + 768


def decoder_layer(**options) -> nn.TransformerDecoderLayer:
    return nn.TransformerDecoderLayer(E, H, F_DIM, **options)


def test_decoder_layer_hand_macs_with_unequal_lengths():
    tgt, memory = torch.randn(L, N, E), torch.randn(S, N, E)
    result = estimate(decoder_layer(), tgt, memory)
    self_macs = 4 * N * L * E * E + 2 * N * H * L * L * D            # 1536 + 288
    cross_macs = N * (L * E * E + 2 * S * E * E + L * E * E) + 2 * N * H * L * S * D   # 2048 + 480
    ffn_macs = 2 * N * L * E * F_DIM                                   # 1536
    assert value(result["macs"]) == self_macs + cross_macs + ffn_macs == 1824 + 2528 + 1536
    assert result["receptive_field"] == L


def test_decoder_layer_flops_and_dmas_add_cross_attention_norm_and_residual():
    layer = decoder_layer()
    tgt, memory = torch.randn(L, N, E), torch.randn(S, N, E)
    decoder = counts(estimate(layer, tgt, memory))
    encoder = counts(estimate(nn.TransformerEncoderLayer(E, H, F_DIM), tgt))   # self-attention, FFN, 2 norms
    norm_flops, norm_dmas = layer_norm_counts(layer.norm3, ROWS)
    cross = attention.AttentionShape(batch=N, queries=L, keys=S, embed=E, heads=H, kdim=E, vdim=E)
    assert decoder[0] == encoder[0] + attention.attention_flops(cross) + norm_flops + ROWS * E
    assert decoder[2] == encoder[2] + attention.attention_dmas(cross) + norm_dmas + 3 * ROWS * E


def test_decoder_layer_batch_first_masks_and_causal_tgt():
    seq_first_result = estimate(decoder_layer(), torch.randn(L, N, E), torch.randn(S, N, E))
    batch_first = estimate(decoder_layer(batch_first=True), torch.randn(N, L, E), torch.randn(N, S, E))
    assert batch_first == seq_first_result
    causal = nn.Transformer.generate_square_subsequent_mask(L)
    result = estimate(decoder_layer(), torch.randn(L, N, E), torch.randn(S, N, E), tgt_mask=causal,
                      memory_key_padding_mask=torch.zeros(N, S, dtype=torch.bool))
    assert result["receptive_field"] == L   # along tgt
    assert value(result["module_flops"]) - value(seq_first_result["module_flops"]) == N * H * L * L


# ------------------------------------------------------------------------------------------------ stacks


def encoder_stack(layers: int = 2, batch_first: bool = False, norm: bool = True) -> nn.TransformerEncoder:
    layer = nn.TransformerEncoderLayer(E, H, F_DIM, batch_first=batch_first)
    return nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(E) if norm else None, enable_nested_tensor=False)


def test_encoder_stack_is_the_sum_of_its_layers_and_final_norm():
    stack = encoder_stack(layers=2)
    x, padding = torch.randn(L, N, E), torch.tensor([[False, False, True], [False, False, False]])
    result = counts(estimate(stack, x, src_key_padding_mask=padding))
    layer = counts(estimate(stack.layers[0], x, src_key_padding_mask=padding))
    norm_flops, norm_dmas = layer_norm_counts(stack.norm, ROWS)
    assert result == (2 * layer[0] + norm_flops, 2 * layer[1], 2 * layer[2] + norm_dmas)
    no_norm = counts(estimate(encoder_stack(layers=2, norm=False), x, src_key_padding_mask=padding))
    assert no_norm == (2 * layer[0], 2 * layer[1], 2 * layer[2])


def test_encoder_stack_batch_first_and_nested_fast_path_count_densely():
    seq_first_stack = estimate(encoder_stack(), torch.randn(L, N, E))
    layer = nn.TransformerEncoderLayer(E, H, F_DIM, batch_first=True)
    nested_capable = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(E))   # takes the nested-tensor fast path
    padding = torch.tensor([[False, False, True], [False, False, False]])
    padded = estimate(nested_capable, torch.randn(N, L, E), src_key_padding_mask=padding)
    assert counts(estimate(encoder_stack(batch_first=True), torch.randn(N, L, E))) == counts(seq_first_stack)
    # Dense convention: the padded token is counted; only the mask read (N*S per layer) differs.
    assert value(padded["dmas"]) - value(seq_first_stack["dmas"]) == 2 * N * L
    assert value(padded["macs"]) == value(seq_first_stack["macs"])


def window_mask(length: int, reach: int = 1) -> torch.Tensor:
    positions = torch.arange(length)
    return (positions[:, None] - positions[None, :]).abs() > reach


def test_stack_composes_window_masks_across_layers():
    x = torch.randn(6, N, E)
    widths = [estimate(encoder_stack(layers), x, mask=window_mask(6))["receptive_field"] for layers in (1, 2, 3)]
    assert widths == [3, 5, 6]    # +-1 per layer: 3, then 5, then all 6 tokens


def test_stack_with_causal_mask_and_padding_does_not_grow():
    x = torch.randn(5, N, E)
    causal = torch.ones(5, 5, dtype=torch.bool).triu(1)   # bool, like the padding masks
    assert estimate(encoder_stack(3), x, mask=causal)["receptive_field"] == 5
    padding = torch.tensor([[False, False, False, True, True], [False, False, True, True, True]])
    # Batch 0, position 4: the three real tokens it attends to, plus itself through the residual path.
    assert estimate(encoder_stack(3), x, mask=causal, src_key_padding_mask=padding)["receptive_field"] == 3 + 1
    assert estimate(encoder_stack(3), x, src_key_padding_mask=padding)["receptive_field"] == 3 + 1
    real_tokens_only = torch.tensor([[False] * 5, [False, False, True, True, True]])
    assert estimate(encoder_stack(3), x, mask=causal, src_key_padding_mask=real_tokens_only)[
        "receptive_field"] == 5


def test_stack_composition_beyond_the_budget_is_a_lower_bound(monkeypatch):
    monkeypatch.setattr(attention, "DEPENDENCY_BUDGET", 10)
    result = estimate(encoder_stack(3), torch.randn(6, N, E), mask=window_mask(6))
    assert result["receptive_field"]["status"] == "partial"
    assert result["receptive_field"]["known_value"] == 3   # one layer's window; the truth (6) is larger


def test_decoder_stack_and_transformer_are_sums_of_their_parts():
    model = nn.Transformer(E, H, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=F_DIM)
    src, tgt = torch.randn(S, N, E), torch.randn(L, N, E)
    causal = nn.Transformer.generate_square_subsequent_mask(L)
    result = estimate(model, src, tgt, tgt_mask=causal)
    memory = model.encoder.eval()(src)
    encoder = counts(estimate(model.encoder, src))
    decoder = counts(estimate(model.decoder, tgt, memory, tgt_mask=causal))
    assert counts(result) == tuple(a + b for a, b in zip(encoder, decoder, strict=True))
    layer = counts(estimate(model.decoder.layers[0], tgt, memory, tgt_mask=causal))
    norm_flops, norm_dmas = layer_norm_counts(model.decoder.norm, ROWS)
    assert decoder == (layer[0] + norm_flops, layer[1], layer[2] + norm_dmas)
    assert result["receptive_field"] == L


def test_transformer_both_layouts_agree():
    seq_first_model = nn.Transformer(E, H, 1, 1, F_DIM)
    batch_first_model = nn.Transformer(E, H, 1, 1, F_DIM, batch_first=True)
    seq_first_result = estimate(seq_first_model, torch.randn(S, N, E), torch.randn(L, N, E))
    batch_first_result = estimate(batch_first_model, torch.randn(N, S, E), torch.randn(N, L, E))
    assert batch_first_result == seq_first_result
    assert seq_first_result["receptive_field"] == L


def test_transformer_on_meta_with_causal_hint():
    def run(device: str) -> dict:
        with torch.device(device):
            model = nn.Transformer(E, H, 1, 1, F_DIM)
            src, tgt = torch.randn(S, N, E), torch.randn(L, N, E)
            causal = nn.Transformer.generate_square_subsequent_mask(L)
        return estimate(model, src, tgt, tgt_mask=causal, tgt_is_causal=True)

    real, meta = run("cpu"), run("meta")
    assert counts(meta) == counts(real)
    assert meta["receptive_field"] == real["receptive_field"] == L    # the hint is trusted, no value is read


# -------------------------------------------------------------------------------------------- boundaries


def test_add_bias_kv_and_zero_attn_are_lower_bounds():
    query, key = seq_first(E, length=L), seq_first(E, length=S)
    plain = counts(estimate(nn.MultiheadAttention(E, H), query, key, key))
    for options in ({"add_bias_kv": True}, {"add_zero_attn": True}):
        result = estimate(nn.MultiheadAttention(E, H, **options), query, key, key)
        for name, known in zip(("module_flops", "macs", "dmas"), plain, strict=True):
            assert result[name]["status"] == "partial", options
            assert result[name]["known_value"] > known      # one more attended key position is counted
        assert value(result["macs"]) is None
        assert result["macs"]["known_value"] - plain[1] == 2 * N * H * L * 1 * D  # QK^T and weights*V, 1 key
        assert result["receptive_field"] == S               # dependencies on input tokens are unchanged


def test_training_dropout_is_a_lower_bound_for_flops_and_dmas():
    layer = nn.TransformerEncoderLayer(E, H, F_DIM, dropout=0.1)
    x = torch.randn(L, N, E)
    result = estimate(layer, x, training=True)
    assert result["module_flops"]["status"] == "partial" and result["dmas"]["status"] == "partial"
    assert result["macs"] == value(estimate(nn.TransformerEncoderLayer(E, H, F_DIM), x)["macs"])


def test_nested_tensor_input_is_unavailable():
    layer = nn.TransformerEncoderLayer(E, H, F_DIM, batch_first=True).eval()
    nested = torch.nested.nested_tensor([torch.randn(2, E), torch.randn(3, E)])
    with torch.no_grad():
        output = layer(nested)
    result = HANDLERS[type(layer)].callback(ModuleCall(layer, (nested,), {}, output))
    for name in ("module_flops", "macs", "dmas", "receptive_field"):
        assert result[name] is None, name


def test_overridden_forward_is_not_estimated():
    class Scaled(nn.TransformerEncoderLayer):
        def forward(self, src, *args, **kwargs):
            return 2 * super().forward(src, *args, **kwargs)

    layer = Scaled(E, H, F_DIM).eval()
    assert builtin_for(Scaled) is None  # the crawler never applies the base formula to it
    x = torch.randn(L, N, E)
    with torch.no_grad():
        output = layer(x)
    result = HANDLERS[nn.TransformerEncoderLayer].callback(ModuleCall(layer, (x,), {}, output))
    assert result == dict.fromkeys(("module_flops", "macs", "dmas", "receptive_field", "effective_stride",
                                    "effective_padding"))  # the formula's own guard: nothing known


def test_custom_parts_of_a_transformer():
    class Identity(nn.Module):
        def forward(self, src, *args, **kwargs):
            return src

    class Passthrough(nn.Module):
        def forward(self, tgt, memory, *args, **kwargs):
            return tgt

    src, tgt = torch.randn(S, N, E), torch.randn(L, N, E)
    custom_encoder = estimate(nn.Transformer(E, H, 1, 1, F_DIM, custom_encoder=Identity()), src, tgt)
    assert all(custom_encoder[name]["status"] == "unavailable" for name in ("module_flops", "macs", "dmas"))
    custom_decoder = estimate(nn.Transformer(E, H, 1, 1, F_DIM, custom_decoder=Passthrough()), src, tgt)
    native = nn.Transformer(E, H, 1, 1, F_DIM)
    encoder_only = counts(estimate(native.encoder, src))
    assert custom_decoder["macs"]["status"] == "partial"
    assert custom_decoder["macs"]["known_value"] == encoder_only[1]
    assert custom_decoder["receptive_field"]["status"] == "unavailable"


def test_unknown_final_norm_makes_the_stack_a_lower_bound():
    class Rescale(nn.Module):
        def forward(self, x):
            return x / x.norm(dim=-1, keepdim=True)

    layer = nn.TransformerEncoderLayer(E, H, F_DIM)
    stack = nn.TransformerEncoder(layer, 1, norm=Rescale(), enable_nested_tensor=False)
    result = estimate(stack, torch.randn(L, N, E))
    assert result["module_flops"]["status"] == "partial"
    assert result["macs"]["known_value"] == value(estimate(stack.layers[0], torch.randn(L, N, E))["macs"])
