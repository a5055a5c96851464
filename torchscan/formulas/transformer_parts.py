"""The breakdown of a native Transformer estimate: its FLOPs and MACs by part, per layer.

Each function mirrors the work function of :mod:`.transformer` part by part (the same component formulas), so the
parts add up to the estimate; the handler reports them beside it (`torchscan.breakdown`). A part is named by the
layer it belongs to (``layers.3``, relative to the owner) and what it is: self-attention (or cross-attention)
projections, its scores and weighted sum, the feed-forward block, the norms, the residual additions.
"""

from __future__ import annotations

import torch
from torch import nn

from .multihead_attention import attention_parts
from .sequence_calls import Masks, Tokens, UnsupportedCall, is_native
from .subtree_estimates import Work
from .transformer_blocks import feed_forward_work, norm_work, residual_work

Part = tuple[str, str, Work]  # (module relative to the owner, what the part is, its work)


def _attention(kind: str, module: str, mha: nn.Module, queries: Tokens, keys: Tokens, masks: Masks) -> list[Part]:
    return [(module, f"{kind} {name}", work)
            for name, work in attention_parts(mha, queries, keys, keys.width, keys.width, masks)]


def _native(layer: nn.Module, kind: type[nn.Module]) -> None:
    if not is_native(layer, kind):
        raise UnsupportedCall(f"a layer that is not a native {kind.__name__}")


def encoder_layer_parts(layer: nn.Module, src: Tokens, masks: Masks, dtype: torch.dtype, module: str = ""
                        ) -> list[Part]:
    """Self-attention (projections; scores and weighted sum), feed-forward, 2 norms, 2 residual additions."""
    _native(layer, nn.TransformerEncoderLayer)
    rows, width = src.batch * src.length, src.width
    return [
        *_attention("self-attention", module, layer.self_attn, src, src, masks),
        (module, "feed-forward", feed_forward_work(layer, rows, dtype)),
        (module, "norms", norm_work(layer.norm1, rows, width, dtype) + norm_work(layer.norm2, rows, width, dtype)),
        (module, "residual additions", residual_work(src.elements) + residual_work(src.elements)),
    ]


def decoder_layer_parts(layer: nn.Module, tgt: Tokens, memory: Tokens, self_masks: Masks, cross_masks: Masks,
                        dtype: torch.dtype, module: str = "") -> list[Part]:
    """Self-attention over tgt, cross-attention over memory, feed-forward, 3 norms, 3 residual additions."""
    _native(layer, nn.TransformerDecoderLayer)
    rows, width = tgt.batch * tgt.length, tgt.width
    norms = [norm_work(norm, rows, width, dtype) for norm in (layer.norm1, layer.norm2, layer.norm3)]
    return [
        *_attention("self-attention", module, layer.self_attn, tgt, tgt, self_masks),
        *_attention("cross-attention", module, layer.multihead_attn, tgt, memory, cross_masks),
        (module, "feed-forward", feed_forward_work(layer, rows, dtype)),
        (module, "norms", norms[0] + norms[1] + norms[2]),
        (module, "residual additions", residual_work(tgt.elements) + residual_work(tgt.elements)
         + residual_work(tgt.elements)),
    ]


def _final_norm(stack: nn.Module, prefix: str, tokens: Tokens, dtype: torch.dtype) -> list[Part]:
    if stack.norm is None:
        return []
    return [(f"{prefix}norm", "final norm", norm_work(stack.norm, tokens.batch * tokens.length, tokens.width, dtype))]


def encoder_stack_parts(encoder: nn.Module, src: Tokens, masks: Masks, dtype: torch.dtype, prefix: str = ""
                        ) -> list[Part]:
    """Every layer's parts (named ``layers.i``), then the final norm."""
    _native(encoder, nn.TransformerEncoder)
    parts = [part for index, layer in enumerate(encoder.layers)
             for part in encoder_layer_parts(layer, src, masks, dtype, f"{prefix}layers.{index}")]
    return parts + _final_norm(encoder, prefix, src, dtype)


def decoder_stack_parts(decoder: nn.Module, tgt: Tokens, memory: Tokens, self_masks: Masks, cross_masks: Masks,
                        dtype: torch.dtype, prefix: str = "") -> list[Part]:
    _native(decoder, nn.TransformerDecoder)
    parts = [part for index, layer in enumerate(decoder.layers)
             for part in decoder_layer_parts(layer, tgt, memory, self_masks, cross_masks, dtype,
                                             f"{prefix}layers.{index}")]
    return parts + _final_norm(decoder, prefix, tgt, dtype)
