"""Complete-call estimates for native multi-head attention and Transformer layers, stacks and models.

Each handler owns the inclusive estimate of its whole call (``subtree_metrics`` = all six fields): in eval mode
under ``no_grad`` these modules take fused kernels (``aten._native_multi_head_attention``,
``aten._transformer_encoder_layer_fwd``) that never call the child modules, so only the parent can see the work.
Child calls that do run keep their rows; the crawler omits their covered fields.

Arguments are read by the real ``forward`` signature of the call, so positional, keyword and default arguments
all resolve the same way. Counts come from shapes and module attributes only (they work on ``meta``); the token
receptive field reads mask values when they exist. Formulas and their boundaries are documented in
``docs/transformer.md``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..handlers import ModuleCall, ModuleEstimates, ModuleHandler, closest_handler
from ..results import METRIC_UNITS, partial, unavailable
from .activation import FLOPS_PER_ELEMENT, FLOPS_PER_SLICE

METHOD = "formula:transformer"
SUBTREE_METRICS = frozenset(METRIC_UNITS)
SUMMABLE = frozenset({"module_flops", "macs", "dmas"})
SCOPE = "subtree"
#: Report field -> Work attribute.
FIELD_NAMES = {"module_flops": "flops", "macs": "macs", "dmas": "dmas"}

#: Multiply-accumulates allowed for composing a stack's token dependencies from general mask values; beyond it
#: the single-layer value is reported as a lower bound.
DEPENDENCY_BUDGET = 1 << 27


# ---------------------------------------------------------------------------------------------------- work


@dataclass(frozen=True)
class Work:
    """Additive FLOPs, MACs and DMAs of part of a call, with the metrics it knows only partly or not at all.

    ``lower_bound`` metrics count known work but leave some out; ``unknown`` metrics count nothing. Adding a
    known part to an unknown one gives a lower bound, never a complete count.
    """

    flops: int = 0
    macs: int = 0
    dmas: int = 0
    lower_bound: frozenset[str] = frozenset()
    unknown: frozenset[str] = frozenset()

    def __add__(self, other: Work) -> Work:
        unknown = self.unknown & other.unknown
        incomplete = self.lower_bound | other.lower_bound | self.unknown | other.unknown
        return Work(self.flops + other.flops, self.macs + other.macs, self.dmas + other.dmas,
                    frozenset(incomplete - unknown), unknown)

    def at_least(self, metrics: frozenset[str]) -> Work:
        """The same counts, known to leave out some work for ``metrics``."""
        return replace(self, lower_bound=self.lower_bound | (metrics - self.unknown))

    def without(self, metrics: frozenset[str]) -> Work:
        """Nothing known for ``metrics`` (their counts are dropped)."""
        dropped = {FIELD_NAMES[name]: 0 for name in metrics}
        return replace(self, lower_bound=self.lower_bound - metrics, unknown=self.unknown | metrics, **dropped)


UNKNOWN = Work(unknown=SUMMABLE)


def total(parts: list[Work]) -> Work:
    return sum(parts, Work())


def linear_work(rows: int, in_features: int, out_features: int, bias: bool) -> Work:
    """y = x W^T + b: rows*in*out MACs, 2 FLOPs each, 1 FLOP per output for the bias; reads x, W, b; writes y."""
    macs = rows * in_features * out_features
    outputs = rows * out_features
    parameters = in_features * out_features + (out_features if bias else 0)
    return Work(2 * macs + (outputs if bias else 0), macs, rows * in_features + parameters + outputs)


def residual_work(elements: int) -> Work:
    """x + f(x): 1 FLOP per element; reads both operands, writes the sum."""
    return Work(flops=elements, dmas=3 * elements)


# ------------------------------------------------------------------------------------------- attention


@dataclass(frozen=True)
class AttentionShape:
    """One multi-head attention call: N batch, L queries, S keys/values, E embed, H heads, kdim, vdim."""

    batch: int
    queries: int
    keys: int
    embed: int
    heads: int
    kdim: int
    vdim: int
    in_bias: bool = True
    out_bias: bool = True
    extra_keys: int = 0        # bias_k / zero-attention positions appended after the projections
    additive_masks: int = 0    # float masks added to the scores (bool masks select: 0 FLOPs)
    mask_elements: int = 0     # mask elements read, as passed
    weights: str = "none"      # returned attention weights: "none", "averaged" or "per_head"

    @property
    def head_dim(self) -> int:
        return self.embed // self.heads

    @property
    def attended(self) -> int:
        return self.keys + self.extra_keys

    @property
    def scores(self) -> int:
        """N*H*L*S score (and probability) elements."""
        return self.batch * self.heads * self.queries * self.attended


def attention_macs(a: AttentionShape) -> int:
    """q, k, v and output projections plus QK^T and weights·V (each N*H*L*S*D)."""
    n, l, s, e = a.batch, a.queries, a.keys, a.embed
    projections = n * (l * e * e + s * a.kdim * e + s * a.vdim * e + l * e * e)
    return projections + 2 * a.scores * a.head_dim


def softmax_row_flops(length: int) -> int:
    """The activation family's softmax count for one row of ``length`` scores."""
    return FLOPS_PER_SLICE["softmax"](length) if length else 0


def attention_flops(a: AttentionShape) -> int:
    """2 per MAC + biases + query scaling + float-mask adds + softmax + head averaging of returned weights."""
    n, l, s, e = a.batch, a.queries, a.keys, a.embed
    in_biases = n * (l * e + 2 * s * e) if a.in_bias else 0
    out_bias = n * l * e if a.out_bias else 0
    scaling = n * l * e                                   # q * D**-0.5, once per query element
    masks = a.additive_masks * a.scores
    softmax = n * a.heads * l * softmax_row_flops(a.attended)
    averaging = a.scores if a.weights == "averaged" else 0   # (H-1) adds + 1 divide per (n, l, s)
    return 2 * attention_macs(a) + in_biases + out_bias + scaling + masks + softmax + averaging


def attention_dmas(a: AttentionShape) -> int:
    """Inputs, masks and parameters read; q, k, v, scores, probabilities, context written and read; outputs written."""
    n, l, s, e = a.batch, a.queries, a.keys, a.embed
    inputs = n * (l * e + s * a.kdim + s * a.vdim) + a.mask_elements
    parameters = e * e + e * a.kdim + e * a.vdim + e * e + (3 * e if a.in_bias else 0) + (e if a.out_bias else 0)
    intermediates = 2 * (n * l * e + 2 * n * s * e + 2 * a.scores + n * l * e)
    outputs = n * l * e
    if a.weights == "averaged":  # probabilities read again, (N, L, S) written; per-head weights are the probabilities
        outputs += a.scores + n * l * a.attended
    return inputs + parameters + intermediates + outputs


# ------------------------------------------------------------------------------------------ call reading


@dataclass(frozen=True)
class Tokens:
    """A token sequence: batch N (1 when unbatched), length, features per token."""

    batch: int
    length: int
    width: int

    @property
    def elements(self) -> int:
        return self.batch * self.length * self.width


class UnsupportedCall(Exception):
    """The call is outside what the formulas justify (a nested tensor input, an unexpected rank)."""


def tokens(tensor: torch.Tensor, batch_first: bool) -> Tokens:
    """(L, E) unbatched, (L, N, E) or (N, L, E) batched."""
    if tensor.is_nested:
        raise UnsupportedCall("nested tensor input")
    shape = [int(size) for size in tensor.shape]
    if len(shape) == 2:
        return Tokens(1, shape[0], shape[1])
    if len(shape) == 3:
        batch, length = (shape[0], shape[1]) if batch_first else (shape[1], shape[0])
        return Tokens(batch, length, shape[2])
    raise UnsupportedCall(f"a {len(shape)}-D sequence input")


@functools.cache
def _forward_signature(module_type: type) -> inspect.Signature:
    return inspect.signature(module_type.forward)


def call_arguments(call: ModuleCall) -> dict[str, Any]:
    """Every forward argument by name, defaults included, bound exactly as Python bound the call."""
    bound = _forward_signature(type(call.module)).bind(call.module, *call.args, **call.kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


#: Methods whose native implementation the formulas describe; a subclass overriding one is not estimated.
NATIVE_METHODS: dict[type[nn.Module], tuple[str, ...]] = {
    nn.MultiheadAttention: ("forward",),
    nn.TransformerEncoderLayer: ("forward", "_sa_block", "_ff_block"),
    nn.TransformerDecoderLayer: ("forward", "_sa_block", "_mha_block", "_ff_block"),
    nn.TransformerEncoder: ("forward",),
    nn.TransformerDecoder: ("forward",),
    nn.Transformer: ("forward",),
    nn.Linear: ("forward",),
}


def is_native(module: Any, base: type[nn.Module]) -> bool:
    return isinstance(module, base) and all(
        getattr(type(module), name) is getattr(base, name) for name in NATIVE_METHODS[base])


def _mask_counts(masks: tuple[torch.Tensor | None, ...]) -> dict[str, int]:
    present = [mask for mask in masks if mask is not None]
    return {"additive_masks": sum(mask.is_floating_point() for mask in present),
            "mask_elements": sum(mask.numel() for mask in present)}


def _dropout_active(module: nn.Module) -> bool:
    """Training-mode dropout anywhere in the subtree (never under the crawler, which runs eval)."""
    for child in module.modules():
        if isinstance(child, nn.MultiheadAttention) and child.training and child.dropout > 0:
            return True
        if isinstance(child, nn.modules.dropout._DropoutNd) and child.training and child.p > 0:
            return True
    return False


# ------------------------------------------------------------------------------------------ components


def attention_work(mha: nn.MultiheadAttention, queries: Tokens, keys: Tokens, kdim: int, vdim: int,
                   masks: tuple[torch.Tensor | None, ...], weights: str = "none") -> Work:
    """One native attention call; add_bias_kv / add_zero_attn give a lower bound (their copies are not counted)."""
    if not is_native(mha, nn.MultiheadAttention):
        return UNKNOWN
    extra = int(mha.bias_k is not None) + int(mha.add_zero_attn)
    shape = AttentionShape(
        batch=queries.batch, queries=queries.length, keys=keys.length, embed=mha.embed_dim, heads=mha.num_heads,
        kdim=kdim, vdim=vdim, in_bias=mha.in_proj_bias is not None, out_bias=mha.out_proj.bias is not None,
        extra_keys=extra, weights=weights, **_mask_counts(masks))
    work = Work(attention_flops(shape), attention_macs(shape), attention_dmas(shape))
    return work.at_least(SUMMABLE) if extra else work


def _as_work(raw: Mapping[str, Any]) -> Work:
    """A built-in handler's FLOPs/MACs/DMAs (numbers or MetricResults) as Work."""
    counts: dict[str, int] = {}
    lower: set[str] = set()
    unknown: set[str] = set()
    for name in SUMMABLE:
        value = raw.get(name)
        if isinstance(value, Mapping):
            if value["status"] == "complete":
                value = value["value"]
            elif value["status"] == "partial":
                value = value["known_value"]
                lower.add(name)
            else:
                value = None
        if value is None:
            unknown.add(name)
            value = 0
        counts[name] = int(value)
    return Work(counts["module_flops"], counts["macs"], counts["dmas"], frozenset(lower), frozenset(unknown))


def builtin_work(module: nn.Module, in_shape: tuple[int, ...], out_shape: tuple[int, ...], dtype: torch.dtype
                 ) -> Work | None:
    """A child's work from the built-in formula of its type, called on meta tensors of the child's shapes.

    This keeps one convention per family (LayerNorm, activation modules) whether or not PyTorch called the
    child. None when no built-in formula covers the type.
    """
    from . import DEFAULT_HANDLERS  # the registry is complete once any callback runs

    handler = closest_handler(type(module), DEFAULT_HANDLERS)
    if handler is None:
        return None
    source = torch.empty(in_shape, dtype=dtype, device="meta")
    result = torch.empty(out_shape, dtype=dtype, device="meta")
    return _as_work(handler.callback(ModuleCall(module, (source,), {}, result)))


def norm_work(norm: nn.Module | None, rows: int, width: int, dtype: torch.dtype) -> Work:
    """A normalization over ``rows`` tokens of ``width`` features (none: no work)."""
    if norm is None:
        return Work()
    work = builtin_work(norm, (rows, width), (rows, width), dtype)
    return UNKNOWN if work is None else work


#: Activation functions (not modules) of the feed-forward block, by their FLOPS_PER_ELEMENT key.
FUNCTION_ACTIVATIONS: dict[Callable[..., Any], str] = {
    F.relu: "relu", torch.relu: "relu", F.gelu: "gelu", F.silu: "silu", F.mish: "mish",
    torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid", torch.tanh: "tanh", F.tanh: "tanh",
}


def _function_key(activation: Any) -> str | None:
    try:
        return FUNCTION_ACTIVATIONS.get(activation)
    except TypeError:  # an unhashable callable
        return None


def activation_work(activation: Any, rows: int, in_width: int, out_width: int, dtype: torch.dtype) -> Work:
    """The feed-forward nonlinearity: a table function, a module with a built-in formula, or another callable.

    Another callable is taken as elementwise (the layer's contract): 0 MACs, its input and parameters read and
    its output written, FLOPs unknown (so the layer's FLOPs are a lower bound).
    """
    if isinstance(activation, nn.Module):
        known = builtin_work(activation, (rows, in_width), (rows, out_width), dtype)
        if known is not None:
            return known
    key = None if isinstance(activation, nn.Module) else _function_key(activation)
    parameters = sum(p.numel() for p in activation.parameters()) if isinstance(activation, nn.Module) else 0
    accesses = rows * in_width + parameters + rows * out_width
    if key is None:
        return Work(dmas=accesses).without(frozenset({"module_flops"}))
    return Work(flops=FLOPS_PER_ELEMENT[key] * rows * out_width, dmas=accesses)


def feed_forward_work(layer: nn.Module, rows: int, dtype: torch.dtype) -> Work:
    """linear1 -> activation -> linear2 (dropout in eval moves no data)."""
    first, second = layer.linear1, layer.linear2
    if not (is_native(first, nn.Linear) and is_native(second, nn.Linear)):
        return UNKNOWN
    return (linear_work(rows, first.in_features, first.out_features, first.bias is not None)
            + activation_work(layer.activation, rows, first.out_features, second.in_features, dtype)
            + linear_work(rows, second.in_features, second.out_features, second.bias is not None))


def encoder_layer_work(layer: nn.Module, src: Tokens, masks: tuple[torch.Tensor | None, ...],
                       dtype: torch.dtype) -> Work:
    """Self-attention + feed-forward + 2 LayerNorms + 2 residual adds (norm_first changes the order only)."""
    if not is_native(layer, nn.TransformerEncoderLayer):
        return UNKNOWN
    rows, width = src.batch * src.length, src.width
    return total([
        attention_work(layer.self_attn, src, src, width, width, masks),
        feed_forward_work(layer, rows, dtype),
        norm_work(layer.norm1, rows, width, dtype),
        norm_work(layer.norm2, rows, width, dtype),
        residual_work(src.elements),
        residual_work(src.elements),
    ])


def decoder_layer_work(layer: nn.Module, tgt: Tokens, memory: Tokens, self_masks: tuple[torch.Tensor | None, ...],
                       cross_masks: tuple[torch.Tensor | None, ...], dtype: torch.dtype) -> Work:
    """Self-attention + cross-attention over memory + feed-forward + 3 LayerNorms + 3 residual adds."""
    if not is_native(layer, nn.TransformerDecoderLayer):
        return UNKNOWN
    rows, width = tgt.batch * tgt.length, tgt.width
    return total([
        attention_work(layer.self_attn, tgt, tgt, width, width, self_masks),
        attention_work(layer.multihead_attn, tgt, memory, memory.width, memory.width, cross_masks),
        feed_forward_work(layer, rows, dtype),
        norm_work(layer.norm1, rows, width, dtype),
        norm_work(layer.norm2, rows, width, dtype),
        norm_work(layer.norm3, rows, width, dtype),
        residual_work(tgt.elements),
        residual_work(tgt.elements),
        residual_work(tgt.elements),
    ])


def encoder_stack_work(encoder: nn.Module, src: Tokens, masks: tuple[torch.Tensor | None, ...],
                       dtype: torch.dtype) -> Work:
    """Every layer (each receives the same masks) plus the optional final norm."""
    if not is_native(encoder, nn.TransformerEncoder):
        return UNKNOWN
    layers = [encoder_layer_work(layer, src, masks, dtype) for layer in encoder.layers]
    return total(layers) + norm_work(encoder.norm, src.batch * src.length, src.width, dtype)


def decoder_stack_work(decoder: nn.Module, tgt: Tokens, memory: Tokens, self_masks: tuple[torch.Tensor | None, ...],
                       cross_masks: tuple[torch.Tensor | None, ...], dtype: torch.dtype) -> Work:
    if not is_native(decoder, nn.TransformerDecoder):
        return UNKNOWN
    layers = [decoder_layer_work(layer, tgt, memory, self_masks, cross_masks, dtype) for layer in decoder.layers]
    return total(layers) + norm_work(decoder.norm, tgt.batch * tgt.length, tgt.width, dtype)


# ------------------------------------------------------------------------------------ token dependencies


class MaskValuesUnknown(Exception):
    """Mask values cannot be read (a meta tensor), so token dependencies are unknown."""


def _blocked(mask: torch.Tensor) -> torch.Tensor:
    """Where a mask forbids attention: True in a bool mask, -inf in a float mask."""
    if mask.is_meta:
        raise MaskValuesUnknown
    return mask if mask.dtype == torch.bool else torch.isneginf(mask)


def attention_allowed(attn_mask: torch.Tensor | None, causal: bool, heads: int, queries: int, keys: int
                      ) -> torch.Tensor | None:
    """Which keys each query may attend to in any head under attn_mask: bool (L, S) or (N, L, S); None: all.

    A true ``causal`` hint is trusted as PyTorch trusts it: query i sees keys 0..i (top-left aligned).
    """
    if causal:
        return torch.ones(queries, keys, dtype=torch.bool, device="cpu").tril()
    if attn_mask is None:
        return None
    allowed = ~_blocked(attn_mask)
    if allowed.dim() == 3:  # (N*H, L, S), or (H, L, S) unbatched: a key counts if any head sees it
        allowed = allowed.reshape(-1, heads, queries, keys).any(dim=1)
    return allowed


def without_padding(allowed: torch.Tensor | None, padding_mask: torch.Tensor | None, keys: int
                    ) -> torch.Tensor | None:
    """Remove the keys a key_padding_mask ignores ((N, S) or (S,)): the result is per batch element."""
    if padding_mask is None:
        return allowed
    kept = ~_blocked(padding_mask).reshape(-1, 1, keys)
    return kept if allowed is None else allowed.to(kept.device) & kept


def widest(allowed: torch.Tensor | None, keys: int) -> int:
    """The most keys any query position depends on."""
    if allowed is None:
        return keys
    return int(allowed.sum(dim=-1).max()) if allowed.numel() else 0


def with_residual(allowed: torch.Tensor | None, length: int) -> torch.Tensor | None:
    """A layer's output position also depends on its own input position through the residual path."""
    if allowed is None:
        return None
    return allowed | torch.eye(length, dtype=torch.bool, device=allowed.device)


def self_attention_step(mha: nn.Module, length: int, attn_mask: Any, padding_mask: Any, causal: Any
                        ) -> tuple[torch.Tensor | None, bool]:
    """A self-attention layer's dependency matrix (residual included), and whether it composes to itself.

    With an attn_mask that is absent or causal (by hint or by value), any key padding keeps the dependency
    idempotent: stacking such layers adds no reach.
    """
    if not is_native(mha, nn.MultiheadAttention):
        raise UnsupportedCall("a self-attention module that is not native")
    attended = attention_allowed(attn_mask, causal is True, mha.num_heads, length, length)
    idempotent = attended is None or is_causal_pattern(with_residual(attended, length))
    return with_residual(without_padding(attended, padding_mask, length), length), idempotent


def is_causal_pattern(allowed: torch.Tensor) -> bool:
    """Every query sees exactly the keys up to its own position."""
    length = allowed.shape[-1]
    return bool((allowed == torch.ones(length, length, dtype=torch.bool, device=allowed.device).tril()).all())


def composed_width(step: torch.Tensor | None, layers: int, length: int, idempotent: bool) -> tuple[int, bool]:
    """Widest dependency after ``layers`` identical layer steps, and whether it is exact.

    Non-idempotent steps are composed by boolean matrix products until they stop growing, within
    :data:`DEPENDENCY_BUDGET`; beyond it the reach so far is a lower bound (every step includes the residual,
    so reach only grows).
    """
    if step is None or idempotent or layers <= 1:
        return widest(step, length), True
    cost = (step.shape[0] if step.dim() == 3 else 1) * length ** 3
    reach, dense = step, step.float()
    for _ in range(layers - 1):
        if cost > DEPENDENCY_BUDGET:
            return widest(reach, length), False
        grown = torch.matmul(reach.float(), dense) > 0
        if torch.equal(grown, reach):
            break
        reach = grown
    return widest(reach, length), True


def stack_width(layers: list[nn.Module], length: int, attn_mask: Any, padding_mask: Any, causal: Any
                ) -> tuple[int, bool]:
    """Composed dependency along the residual sequence of a stack of self-attention layers."""
    if not layers:
        return 1, True
    step, idempotent = self_attention_step(layers[0].self_attn, length, attn_mask, padding_mask, causal)
    return composed_width(step, len(layers), length, idempotent)


# ----------------------------------------------------------------------------------------------- fields


def summable_fields(work: Work) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name, value in (("module_flops", work.flops), ("macs", work.macs), ("dmas", work.dmas)):
        if name in work.unknown:
            fields[name] = unavailable(METRIC_UNITS[name], SCOPE, METHOD)
        elif name in work.lower_bound:
            fields[name] = partial(value, METRIC_UNITS[name], SCOPE, METHOD)
        else:
            fields[name] = value
    return fields


def token_fields(width: Callable[[], tuple[int, bool]]) -> dict[str, Any]:
    """Receptive field in tokens (exact, a lower bound, or unavailable without mask values); stride 1, padding 0."""
    unit = METRIC_UNITS["receptive_field"]
    try:
        value, exact = width()
    except (MaskValuesUnknown, UnsupportedCall):
        receptive: Any = unavailable(unit, SCOPE, METHOD)
    else:
        receptive = value if exact else partial(value, unit, SCOPE, METHOD)
    return {"receptive_field": receptive, "effective_stride": 1, "effective_padding": 0}


def nothing_known() -> dict[str, Any]:
    return {name: unavailable(unit, SCOPE, METHOD) for name, unit in METRIC_UNITS.items()}


def estimates(call: ModuleCall, work: Callable[[], Work], width: Callable[[], tuple[int, bool]],
              dtype: torch.dtype) -> ModuleEstimates:
    """The six fields, with the call-wide boundaries applied to the formula's work."""
    try:
        counted = work()
    except UnsupportedCall:
        counted = UNKNOWN
    if not dtype.is_floating_point:
        counted = counted.without(frozenset({"module_flops", "macs"}))
    if _dropout_active(call.module):
        counted = counted.at_least(frozenset({"module_flops", "dmas"}))
    return {**summable_fields(counted), **token_fields(width)}  # type: ignore[typeddict-item]


# --------------------------------------------------------------------------------------------- handlers


def estimate_multihead_attention(call: ModuleCall) -> ModuleEstimates:
    """nn.MultiheadAttention: receptive field = most key positions one query position depends on."""
    mha = call.module
    if not is_native(mha, nn.MultiheadAttention):
        return nothing_known()  # type: ignore[return-value]
    a = call_arguments(call)
    query, key, value = a["query"], a["key"], a["value"]
    padding, mask = a["key_padding_mask"], a["attn_mask"]
    weights = "none" if not a["need_weights"] else "averaged" if a["average_attn_weights"] else "per_head"

    def work() -> Work:
        q, k, v = (tokens(tensor, mha.batch_first) for tensor in (query, key, value))
        return attention_work(mha, q, k, k.width, v.width, (padding, mask), weights)

    def width() -> tuple[int, bool]:
        q, k = tokens(query, mha.batch_first), tokens(key, mha.batch_first)
        allowed = attention_allowed(mask, a["is_causal"] is True, mha.num_heads, q.length, k.length)
        return widest(without_padding(allowed, padding, k.length), k.length), True

    return estimates(call, work, width, query.dtype)


def estimate_encoder_layer(call: ModuleCall) -> ModuleEstimates:
    """nn.TransformerEncoderLayer: receptive field along src (attended positions and the residual position)."""
    layer = call.module
    if not is_native(layer, nn.TransformerEncoderLayer):
        return nothing_known()  # type: ignore[return-value]
    a = call_arguments(call)
    src, masks = a["src"], (a["src_mask"], a["src_key_padding_mask"])
    batch_first = layer.self_attn.batch_first

    def work() -> Work:
        return encoder_layer_work(layer, tokens(src, batch_first), masks, src.dtype)

    def width() -> tuple[int, bool]:
        length = tokens(src, batch_first).length
        step, _ = self_attention_step(layer.self_attn, length, *masks, a["is_causal"])
        return widest(step, length), True

    return estimates(call, work, width, src.dtype)


def estimate_decoder_layer(call: ModuleCall) -> ModuleEstimates:
    """nn.TransformerDecoderLayer: receptive field along tgt (memory dependencies are not in this number)."""
    layer = call.module
    if not is_native(layer, nn.TransformerDecoderLayer):
        return nothing_known()  # type: ignore[return-value]
    a = call_arguments(call)
    tgt, memory = a["tgt"], a["memory"]
    self_masks = (a["tgt_mask"], a["tgt_key_padding_mask"])
    cross_masks = (a["memory_mask"], a["memory_key_padding_mask"])
    batch_first = layer.self_attn.batch_first

    def work() -> Work:
        return decoder_layer_work(layer, tokens(tgt, batch_first), tokens(memory, batch_first), self_masks,
                                  cross_masks, tgt.dtype)

    def width() -> tuple[int, bool]:
        length = tokens(tgt, batch_first).length
        step, _ = self_attention_step(layer.self_attn, length, *self_masks, a["tgt_is_causal"])
        return widest(step, length), True

    return estimates(call, work, width, tgt.dtype)


def _stack_batch_first(stack: nn.Module) -> bool:
    return bool(stack.layers[0].self_attn.batch_first) if len(stack.layers) else False


def _native_layers(stack: nn.Module, layer_type: type[nn.Module]) -> list[nn.Module]:
    layers = list(stack.layers)
    if not all(is_native(layer, layer_type) for layer in layers):
        raise UnsupportedCall("a layer that is not a native Transformer layer")
    return layers


def estimate_encoder(call: ModuleCall) -> ModuleEstimates:
    """nn.TransformerEncoder: the layers' sum plus the final norm; receptive field composed across layers."""
    encoder = call.module
    if not is_native(encoder, nn.TransformerEncoder):
        return nothing_known()  # type: ignore[return-value]
    a = call_arguments(call)
    src, masks = a["src"], (a["mask"], a["src_key_padding_mask"])
    batch_first = _stack_batch_first(encoder)

    def work() -> Work:
        return encoder_stack_work(encoder, tokens(src, batch_first), masks, src.dtype)

    def width() -> tuple[int, bool]:
        length = tokens(src, batch_first).length
        return stack_width(_native_layers(encoder, nn.TransformerEncoderLayer), length, *masks, a["is_causal"])

    return estimates(call, work, width, src.dtype)


def estimate_decoder(call: ModuleCall) -> ModuleEstimates:
    """nn.TransformerDecoder: the layers' sum plus the final norm; receptive field along tgt, composed."""
    decoder = call.module
    if not is_native(decoder, nn.TransformerDecoder):
        return nothing_known()  # type: ignore[return-value]
    a = call_arguments(call)
    tgt, memory = a["tgt"], a["memory"]
    self_masks = (a["tgt_mask"], a["tgt_key_padding_mask"])
    cross_masks = (a["memory_mask"], a["memory_key_padding_mask"])
    batch_first = _stack_batch_first(decoder)

    def work() -> Work:
        return decoder_stack_work(decoder, tokens(tgt, batch_first), tokens(memory, batch_first), self_masks,
                                  cross_masks, tgt.dtype)

    def width() -> tuple[int, bool]:
        length = tokens(tgt, batch_first).length
        return stack_width(_native_layers(decoder, nn.TransformerDecoderLayer), length, *self_masks,
                           a["tgt_is_causal"])

    return estimates(call, work, width, tgt.dtype)


def estimate_transformer(call: ModuleCall) -> ModuleEstimates:
    """nn.Transformer: encoder stack over src, decoder stack over tgt and the encoder's memory.

    A custom encoder or decoder is outside the formulas: a custom encoder leaves the memory shape unknown
    (nothing known), a custom decoder leaves the encoder's work as a lower bound.
    """
    model = call.module
    if not is_native(model, nn.Transformer):
        return nothing_known()  # type: ignore[return-value]
    a = call_arguments(call)
    src, tgt = a["src"], a["tgt"]
    self_masks = (a["tgt_mask"], a["tgt_key_padding_mask"])
    cross_masks = (a["memory_mask"], a["memory_key_padding_mask"])

    def work() -> Work:
        source, target = tokens(src, model.batch_first), tokens(tgt, model.batch_first)
        if not is_native(model.encoder, nn.TransformerEncoder):
            return UNKNOWN
        encoded = encoder_stack_work(model.encoder, source, (a["src_mask"], a["src_key_padding_mask"]), src.dtype)
        memory = source  # the native encoder keeps the shape of src
        return encoded + decoder_stack_work(model.decoder, target, memory, self_masks, cross_masks, tgt.dtype)

    def width() -> tuple[int, bool]:
        if not is_native(model.decoder, nn.TransformerDecoder):
            raise UnsupportedCall("a custom decoder")
        length = tokens(tgt, model.batch_first).length
        return stack_width(_native_layers(model.decoder, nn.TransformerDecoderLayer), length, *self_masks,
                           a["tgt_is_causal"])

    return estimates(call, work, width, src.dtype)


def _handler(callback: Callable[[ModuleCall], ModuleEstimates]) -> ModuleHandler:
    return ModuleHandler(callback, subtree_metrics=SUBTREE_METRICS, method=METHOD)


HANDLERS: dict[type[nn.Module], ModuleHandler] = {
    nn.MultiheadAttention: _handler(estimate_multihead_attention),
    nn.TransformerEncoderLayer: _handler(estimate_encoder_layer),
    nn.TransformerDecoderLayer: _handler(estimate_decoder_layer),
    nn.TransformerEncoder: _handler(estimate_encoder),
    nn.TransformerDecoder: _handler(estimate_decoder),
    nn.Transformer: _handler(estimate_transformer),
}
