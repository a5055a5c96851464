"""The breakdown of a native Transformer estimate: its FLOPs and MACs by part, per layer.

A layer's work (:mod:`.layers`) is the sum of its parts, so the parts add up to the estimate; the handler reports
them beside it (`torchscan.breakdown`). A part is named by the layer it belongs to (``layers.3``, relative to the
owner) and what it is: self-attention (or cross-attention) projections, its scores and weighted sum, the
feed-forward block, the norms, the residual additions.
"""

from __future__ import annotations

import torch
from torch import nn

from .attention import attention_parts
from .blocks import Children, residual_work
from .calls import Masks, NativeModule, Tokens, UnsupportedCall, is_native
from .work import Work

Part = tuple[str, str, Work]  # (module relative to the owner, what the part is, its work)


def _attention(kind: str, module: str, mha: nn.MultiheadAttention, queries: Tokens, keys: Tokens, masks: Masks
               ) -> list[Part]:
    return [(module, f"{kind} {name}", work)
            for name, work in attention_parts(mha, queries, keys, keys.width, keys.width, masks)]


def _native(layer: nn.Module, kind: type[NativeModule]) -> NativeModule:
    """``layer``, if it is a native ``kind``."""
    if not is_native(layer, kind):
        raise UnsupportedCall(f"a layer that is not a native {kind.__name__}")
    return layer


def _norms(children: Children, layer: nn.Module, names: tuple[str, ...], prefix: str, tokens: Tokens,
           dtype: torch.dtype) -> Work:
    """The layer's norms ``names``, each priced by its built-in formula (`Children.norm`)."""
    rows = tokens.batch * tokens.length
    return sum((children.norm(getattr(layer, name), f"{prefix}{name}", rows, tokens.width, dtype) for name in names),
               Work())


def encoder_layer_parts(children: Children, layer: nn.Module, src: Tokens, masks: Masks, dtype: torch.dtype,
                        module: str = "") -> list[Part]:
    """Self-attention (projections; scores and weighted sum), feed-forward, 2 norms, 2 residual additions."""
    layer = _native(layer, nn.TransformerEncoderLayer)
    prefix = f"{module}." if module else ""
    return [
        *_attention("self-attention", module, layer.self_attn, src, src, masks),
        (module, "feed-forward", children.feed_forward(layer, prefix, src.batch * src.length, dtype)),
        (module, "norms", _norms(children, layer, ("norm1", "norm2"), prefix, src, dtype)),
        (module, "residual additions", residual_work(2 * src.elements)),
    ]


def decoder_layer_parts(children: Children, layer: nn.Module, tgt: Tokens, memory: Tokens, self_masks: Masks,
                        cross_masks: Masks, dtype: torch.dtype, module: str = "") -> list[Part]:
    """Self-attention over tgt, cross-attention over memory, feed-forward, 3 norms, 3 residual additions."""
    layer = _native(layer, nn.TransformerDecoderLayer)
    prefix = f"{module}." if module else ""
    return [
        *_attention("self-attention", module, layer.self_attn, tgt, tgt, self_masks),
        *_attention("cross-attention", module, layer.multihead_attn, tgt, memory, cross_masks),
        (module, "feed-forward", children.feed_forward(layer, prefix, tgt.batch * tgt.length, dtype)),
        (module, "norms", _norms(children, layer, ("norm1", "norm2", "norm3"), prefix, tgt, dtype)),
        (module, "residual additions", residual_work(3 * tgt.elements)),
    ]


def _final_norm(children: Children, stack: nn.Module, prefix: str, tokens: Tokens, dtype: torch.dtype
                ) -> list[Part]:
    if stack.norm is None:
        return []
    return [(f"{prefix}norm", "final norm", _norms(children, stack, ("norm",), prefix, tokens, dtype))]


def encoder_stack_parts(children: Children, encoder: nn.Module, src: Tokens, masks: Masks, dtype: torch.dtype,
                        prefix: str = "") -> list[Part]:
    """Every layer's parts (named ``layers.i``), then the final norm."""
    encoder = _native(encoder, nn.TransformerEncoder)
    parts = [part for index, layer in enumerate(encoder.layers)
             for part in encoder_layer_parts(children, layer, src, masks, dtype, f"{prefix}layers.{index}")]
    return parts + _final_norm(children, encoder, prefix, src, dtype)


def decoder_stack_parts(children: Children, decoder: nn.Module, tgt: Tokens, memory: Tokens, self_masks: Masks,
                        cross_masks: Masks, dtype: torch.dtype, prefix: str = "") -> list[Part]:
    """Every layer's parts (named ``layers.i``), then the final norm."""
    decoder = _native(decoder, nn.TransformerDecoder)
    parts = [part for index, layer in enumerate(decoder.layers)
             for part in decoder_layer_parts(children, layer, tgt, memory, self_masks, cross_masks, dtype,
                                             f"{prefix}layers.{index}")]
    return parts + _final_norm(children, decoder, prefix, tgt, dtype)
