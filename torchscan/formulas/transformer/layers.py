"""Native Transformer encoder and decoder layers, their stacks, and ``nn.Transformer``: formulas and handlers.

A layer is its attention blocks (:mod:`.attention`), feed-forward block, LayerNorms and residual
additions (:mod:`.blocks`); a stack is the sum of its layers plus the optional final norm;
``nn.Transformer`` is an encoder stack over src and a decoder stack over tgt and the encoder's memory. The token
receptive field is measured along src (encoders) or tgt (decoders) and composed across the layers of a stack
(:mod:`.token_dependencies`); ``budget`` bounds that composition. Formulas and their boundaries are documented in
``docs/transformer.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from ...handlers import ModuleCall, ModuleEstimates
from ..estimates import every_field
from .blocks import Children
from .calls import Masks, NativeModule, Tokens, UnsupportedCall, call_arguments, is_native, tokens
from .parts import Part, decoder_layer_parts, decoder_stack_parts, encoder_layer_parts, encoder_stack_parts
from .token_dependencies import SelfAttentionLayer, stack_width
from .work import UNKNOWN, Work, estimates, total

# --- work -----------------------------------------------------------------------------------------------------


def _sum(parts: list[Part]) -> Work:
    return total([work for _, _, work in parts])


def encoder_layer_work(children: Children, layer: nn.Module, src: Tokens, masks: Masks, dtype: torch.dtype,
                       prefix: str = "") -> Work:
    """The sum of the layer's parts (`encoder_layer_parts`: self-attention, feed-forward, 2 LayerNorms, 2 residual
    adds; norm_first changes the order only).

    ``prefix`` is the layer's path inside the call being estimated, so that a missing part is named exactly.
    """
    if not is_native(layer, nn.TransformerEncoderLayer):
        return UNKNOWN
    return _sum(encoder_layer_parts(children, layer, src, masks, dtype, prefix.removesuffix(".")))


def decoder_layer_work(children: Children, layer: nn.Module, tgt: Tokens, memory: Tokens, self_masks: Masks,
                       cross_masks: Masks, dtype: torch.dtype, prefix: str = "") -> Work:
    """The sum of the layer's parts (`decoder_layer_parts`: self-attention, cross-attention over memory,
    feed-forward, 3 LayerNorms, 3 residual adds)."""
    if not is_native(layer, nn.TransformerDecoderLayer):
        return UNKNOWN
    module = prefix.removesuffix(".")
    return _sum(decoder_layer_parts(children, layer, tgt, memory, self_masks, cross_masks, dtype, module))


def encoder_stack_work(children: Children, encoder: nn.Module, src: Tokens, masks: Masks, dtype: torch.dtype,
                       prefix: str = "") -> Work:
    """Every layer (each receives the same masks) plus the optional final norm."""
    if not is_native(encoder, nn.TransformerEncoder):
        return UNKNOWN
    layers = [encoder_layer_work(children, layer, src, masks, dtype, f"{prefix}layers.{index}.")
              for index, layer in enumerate(encoder.layers)]
    return total(layers) + children.norm(encoder.norm, f"{prefix}norm", src.batch * src.length, src.width, dtype)


def decoder_stack_work(children: Children, decoder: nn.Module, tgt: Tokens, memory: Tokens, self_masks: Masks,
                       cross_masks: Masks, dtype: torch.dtype, prefix: str = "") -> Work:
    if not is_native(decoder, nn.TransformerDecoder):
        return UNKNOWN
    layers = [decoder_layer_work(children, layer, tgt, memory, self_masks, cross_masks, dtype,
                                 f"{prefix}layers.{index}.") for index, layer in enumerate(decoder.layers)]
    return total(layers) + children.norm(decoder.norm, f"{prefix}norm", tgt.batch * tgt.length, tgt.width, dtype)


# --- reading the call -----------------------------------------------------------------------------------------

EncoderWork = Callable[[Children, nn.Module, Tokens, Masks, torch.dtype], Work]
DecoderWork = Callable[[Children, nn.Module, Tokens, Tokens, Masks, Masks, torch.dtype], Work]
EncoderParts = Callable[[Children, nn.Module, Tokens, Masks, torch.dtype], list[Part]]
DecoderParts = Callable[[Children, nn.Module, Tokens, Tokens, Masks, Masks, torch.dtype], list[Part]]
#: The self-attention layers along which token dependencies compose (a layer is a stack of one), read only when the
#: width is asked for.
Layers = Callable[[], Sequence[SelfAttentionLayer]]


def _target_masks(arguments: dict[str, Any]) -> tuple[Masks, Masks]:
    """The decoder-side masks: tgt's self-attention masks, and its cross-attention masks over memory."""
    return ((arguments["tgt_mask"], arguments["tgt_key_padding_mask"]),
            (arguments["memory_mask"], arguments["memory_key_padding_mask"]))


def _stack_batch_first(stack: nn.TransformerEncoder | nn.TransformerDecoder) -> bool:
    if not len(stack.layers):
        return False
    first: Any = stack.layers[0]  # any module: the layers of a native stack are not checked here
    return bool(first.self_attn.batch_first)


def _native_layers(stack: nn.TransformerEncoder | nn.TransformerDecoder, layer_type: type[NativeModule]
                   ) -> list[NativeModule]:
    layers = [layer for layer in stack.layers if is_native(layer, layer_type)]
    if len(layers) != len(stack.layers):
        raise UnsupportedCall("a layer that is not a native Transformer layer")
    return layers


def _encoding(call: ModuleCall, mask_name: str, batch_first: bool, work_of: EncoderWork,
              layers: Layers, budget: int, children: Children, parts_of: EncoderParts
              ) -> ModuleEstimates:
    """An encoder layer or stack over src, whose attention mask is the argument ``mask_name``."""
    a = call_arguments(call)
    src, masks = a["src"], (a[mask_name], a["src_key_padding_mask"])

    def work() -> Work:
        return work_of(children, call.module, tokens(src, batch_first), masks, src.dtype)

    def width() -> tuple[int, bool]:
        return stack_width(layers(), tokens(src, batch_first).length, *masks, a["is_causal"], budget)

    def parts() -> list[Part]:
        return parts_of(children, call.module, tokens(src, batch_first), masks, src.dtype)

    return estimates(call, parts, width, src.dtype, work)


def _decoding(call: ModuleCall, batch_first: bool, work_of: DecoderWork, layers: Layers,
              budget: int, children: Children, parts_of: DecoderParts) -> ModuleEstimates:
    """A decoder layer or stack over tgt and memory; the receptive field is along tgt."""
    a = call_arguments(call)
    tgt, memory = a["tgt"], a["memory"]
    self_masks, cross_masks = _target_masks(a)

    def work() -> Work:
        return work_of(children, call.module, tokens(tgt, batch_first), tokens(memory, batch_first), self_masks,
                       cross_masks, tgt.dtype)

    def width() -> tuple[int, bool]:
        return stack_width(layers(), tokens(tgt, batch_first).length, *self_masks, a["tgt_is_causal"], budget)

    def parts() -> list[Part]:
        return parts_of(children, call.module, tokens(tgt, batch_first), tokens(memory, batch_first), self_masks,
                        cross_masks, tgt.dtype)

    return estimates(call, parts, width, tgt.dtype, work)


# --- handlers -------------------------------------------------------------------------------------------------


def estimate_encoder_layer(call: ModuleCall, budget: int, children: Children) -> ModuleEstimates:
    """nn.TransformerEncoderLayer: receptive field along src (attended positions and the residual position)."""
    layer = call.module
    if not is_native(layer, nn.TransformerEncoderLayer):
        return every_field(None)
    return _encoding(call, "src_mask", layer.self_attn.batch_first, encoder_layer_work, lambda: [layer], budget,
                     children, encoder_layer_parts)


def estimate_decoder_layer(call: ModuleCall, budget: int, children: Children) -> ModuleEstimates:
    """nn.TransformerDecoderLayer: receptive field along tgt (memory dependencies are not in this number)."""
    layer = call.module
    if not is_native(layer, nn.TransformerDecoderLayer):
        return every_field(None)
    return _decoding(call, layer.self_attn.batch_first, decoder_layer_work, lambda: [layer], budget,
                     children, decoder_layer_parts)


def estimate_encoder(call: ModuleCall, budget: int, children: Children) -> ModuleEstimates:
    """nn.TransformerEncoder: the layers' sum plus the final norm; receptive field composed across layers."""
    encoder = call.module
    if not is_native(encoder, nn.TransformerEncoder):
        return every_field(None)
    return _encoding(call, "mask", _stack_batch_first(encoder), encoder_stack_work,
                     lambda: _native_layers(encoder, nn.TransformerEncoderLayer), budget, children,
                     encoder_stack_parts)


def estimate_decoder(call: ModuleCall, budget: int, children: Children) -> ModuleEstimates:
    """nn.TransformerDecoder: the layers' sum plus the final norm; receptive field along tgt, composed."""
    decoder = call.module
    if not is_native(decoder, nn.TransformerDecoder):
        return every_field(None)
    return _decoding(call, _stack_batch_first(decoder), decoder_stack_work,
                     lambda: _native_layers(decoder, nn.TransformerDecoderLayer), budget, children,
                     decoder_stack_parts)


def estimate_transformer(call: ModuleCall, budget: int, children: Children) -> ModuleEstimates:
    """nn.Transformer: encoder stack over src, decoder stack over tgt and the encoder's memory.

    A custom encoder or decoder is outside the formulas: a custom encoder leaves the memory shape unknown
    (nothing known), a custom decoder leaves the encoder's work as a lower bound.
    """
    model = call.module
    if not is_native(model, nn.Transformer):
        return every_field(None)
    a = call_arguments(call)
    src, tgt = a["src"], a["tgt"]
    self_masks, cross_masks = _target_masks(a)

    def work() -> Work:
        source, target = tokens(src, model.batch_first), tokens(tgt, model.batch_first)
        if not is_native(model.encoder, nn.TransformerEncoder):
            return UNKNOWN
        encoded = encoder_stack_work(children, model.encoder, source, (a["src_mask"], a["src_key_padding_mask"]),
                                     src.dtype, "encoder.")
        memory = source  # the native encoder keeps the shape of src
        return encoded + decoder_stack_work(children, model.decoder, target, memory, self_masks, cross_masks,
                                            tgt.dtype, "decoder.")

    def width() -> tuple[int, bool]:
        if not is_native(model.decoder, nn.TransformerDecoder):
            raise UnsupportedCall("a custom decoder")
        return stack_width(_native_layers(model.decoder, nn.TransformerDecoderLayer),
                           tokens(tgt, model.batch_first).length, *self_masks, a["tgt_is_causal"], budget)

    def parts() -> list[Part]:
        source, target = tokens(src, model.batch_first), tokens(tgt, model.batch_first)
        return (encoder_stack_parts(children, model.encoder, source, (a["src_mask"], a["src_key_padding_mask"]),
                                    src.dtype, "encoder.")
                + decoder_stack_parts(children, model.decoder, target, source, self_masks, cross_masks, tgt.dtype,
                                      "decoder."))

    return estimates(call, parts, width, src.dtype, work)


#: Module type -> its estimate, given the call, the token-dependency budget and the children's formulas.
TRANSFORMER_ESTIMATES: dict[type[nn.Module], Callable[[ModuleCall, int, Children], ModuleEstimates]] = {
    nn.TransformerEncoderLayer: estimate_encoder_layer,
    nn.TransformerDecoderLayer: estimate_decoder_layer,
    nn.TransformerEncoder: estimate_encoder,
    nn.TransformerDecoder: estimate_decoder,
    nn.Transformer: estimate_transformer,
}
