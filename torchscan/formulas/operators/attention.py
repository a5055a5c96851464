"""Operator costs of fused attention kernels: scaled dot-product attention, native multi-head attention, and the
fused Transformer encoder layer.

Attention is priced by `attention_cost`; the fused module kernels add their projections, layer norms, activation
and residual additions, read from the weights' shapes. Real floating point only; nested (padded-batch) input is
priced by the fused encoder layer, not by the attention kernels. Every packet here is a ``significant`` kernel.
"""

from __future__ import annotations

from math import prod
from typing import Any

import torch

from ..conventions import FLOPS_PER_ELEMENT, FLOPS_PER_SLICE
from .calls import CostFunction, CostTable, OpCost, affine_ops, argument, operand_kind
from .elementwise import norm_flops_per_group

#: Attention-kernel packets -> cost of one call.
COSTS = CostTable()


# --- scaled dot-product attention -----------------------------------------------------------------------------


def attention_cost(batch_heads: int, query_length: int, key_length: int, head_dim: int, value_dim: int, *,
                   additive_mask: bool = False, dropout: bool = False) -> OpCost:
    """Scaled dot-product attention over the full score matrix (a causal or boolean mask is a free selection).

    MACs: QK^T and weights . V. FLOPs: 2 per MAC, the scaling once per query element (q * scale, as the
    module view counts it), 1 addition per score for a floating-point mask, softmax over each query row, and
    2 per score for training dropout (mask multiply, rescale).
    """
    scores = batch_heads * query_length * key_length
    macs = scores * (head_dim + value_dim)
    scaling = batch_heads * query_length * head_dim
    softmax = batch_heads * query_length * FLOPS_PER_SLICE["softmax"](key_length) if key_length else 0
    return OpCost(2 * macs + scaling + scores * (additive_mask + 2 * dropout) + softmax, macs)


def _attention_mask(args: tuple, kwargs: dict, index: int | None) -> Any:
    """The additive or boolean mask, named ``attn_mask`` or ``attn_bias`` depending on the kernel."""
    if index is not None and len(args) > index:
        return args[index]
    mask = kwargs.get("attn_mask")
    return kwargs.get("attn_bias") if mask is None else mask


def _sdpa(mask_index: int | None, dropout_index: int) -> CostFunction:
    """A fused SDPA kernel on (..., heads, length, dim) tensors; grouped key/value heads are broadcast."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        query, key, value = args[0], args[1], args[2]
        if operand_kind(args[:3], {}, None) != "real" or any(t.is_nested for t in (query, key, value)):
            return None
        mask = _attention_mask(args, kwargs, mask_index)
        additive = isinstance(mask, torch.Tensor) and mask.dtype != torch.bool  # a boolean mask selects (free)
        dropout = argument(args, kwargs, dropout_index, "dropout_p", 0.0)
        return attention_cost(prod(query.shape[:-2]), query.shape[-2], key.shape[-2], query.shape[-1],
                              value.shape[-1], additive_mask=additive, dropout=bool(dropout))
    return cost


COSTS.register(["_scaled_dot_product_flash_attention_for_cpu"], _sdpa(None, 3))
COSTS.register(["_scaled_dot_product_attention_math", "_scaled_dot_product_attention_math_for_mps"], _sdpa(3, 4))
COSTS.register(["_scaled_dot_product_flash_attention"], _sdpa(None, 3))
COSTS.register(["_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention"], _sdpa(3, 5))
COSTS.register(["_scaled_dot_product_fused_attention_overrideable"], _sdpa(3, 4))


# --- fused module kernels -------------------------------------------------------------------------------------


def _total(*costs: OpCost) -> OpCost:
    return OpCost(sum(c.flops for c in costs), sum(c.macs for c in costs))


def sequence_lengths(tokens: torch.Tensor) -> list[int]:
    """Per-sequence lengths of a (batch, length, features) tensor, (length, features), or a nested tensor
    (whose sizes are metadata held on the CPU)."""
    if tokens.is_nested:
        return [int(size[0]) for size in tokens._nested_tensor_size().tolist()]
    if tokens.dim() == 2:
        return [tokens.shape[0]]
    return [tokens.shape[1]] * tokens.shape[0]


def _projection(tokens: int, in_features: int, out_features: int, bias: bool) -> OpCost:
    """A linear layer applied to ``tokens`` rows."""
    macs = tokens * in_features * out_features
    return OpCost(2 * macs + (tokens * out_features if bias else 0), macs)


def _weight_projection(tokens: int, weight: torch.Tensor, bias: Any) -> OpCost:
    return _projection(tokens, weight.shape[-1], weight.shape[0], bias is not None)


def _native_multi_head_attention(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    """nn.MultiheadAttention's fused path: q, k, v projections, attention, output projection, and the average
    over heads of the returned weights (H per weight element) when ``need_weights`` and averaging.

    The kernel turns any mask into a boolean one and applies it in a masked softmax: a free selection.
    """
    query, key = args[0], args[1]
    embed_dim, heads, _, qkv_bias, proj_weight, proj_bias = args[3:9]
    if operand_kind(args[:3], {}, None) != "real" or query.is_nested or key.is_nested:
        return None
    need_weights = argument(args, kwargs, 10, "need_weights", True)
    average = argument(args, kwargs, 11, "average_attn_weights", True)
    query_tokens, key_tokens = query.numel() // embed_dim, key.numel() // embed_dim
    batch = query.shape[0] if query.dim() == 3 else 1
    # q from the query tokens, k and v from the key tokens (one packed GEMM when they are the same tensor)
    in_projection = _projection(query_tokens + 2 * key_tokens, embed_dim, embed_dim, qkv_bias is not None)
    head_dim = embed_dim // heads
    attention = attention_cost(batch * heads, query_tokens // batch, key_tokens // batch, head_dim, head_dim)
    scores = batch * heads * (query_tokens // batch) * (key_tokens // batch)
    averaging = OpCost(scores if need_weights and average else 0)
    return _total(in_projection, attention, _weight_projection(query_tokens, proj_weight, proj_bias), averaging)


def _transformer_encoder_layer(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    """nn.TransformerEncoderLayer's fused path, from the weights' shapes: self-attention block (masks are free
    selections, as in ``_native_multi_head_attention``), two residual additions, two layer norms, and the
    feed-forward block (relu, or exact gelu when ``use_gelu``)."""
    src, embed_dim, heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu = args[:8]
    norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2 = args[10:14]
    ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2 = args[14:18]
    if operand_kind((src, qkv_weight), {}, None) != "real":
        return None
    lengths = sequence_lengths(src)
    tokens, head_dim = sum(lengths), embed_dim // heads
    per_token_norm = norm_flops_per_group(embed_dim, centered=True)
    affine = affine_ops(norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2)
    layer_norms = tokens * (2 * per_token_norm + embed_dim * affine)
    activation = FLOPS_PER_ELEMENT["gelu" if use_gelu else "relu"] * tokens * ffn_weight_1.shape[0]
    return _total(
        _weight_projection(tokens, qkv_weight, qkv_bias),
        *(attention_cost(heads, length, length, head_dim, head_dim) for length in lengths),  # self-attention
        _weight_projection(tokens, proj_weight, proj_bias),
        _weight_projection(tokens, ffn_weight_1, ffn_bias_1),
        _weight_projection(tokens, ffn_weight_2, ffn_bias_2),
        OpCost(2 * tokens * embed_dim + layer_norms + activation),  # two residual additions
    )


COSTS.register(["_native_multi_head_attention"], _native_multi_head_attention)
COSTS.register(["_transformer_encoder_layer_fwd"], _transformer_encoder_layer)
