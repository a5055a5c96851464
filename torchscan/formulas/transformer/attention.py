"""Native ``nn.MultiheadAttention``: the complete-call formula and its handler.

One call is the q, k and v projections, the scores QK^T, a softmax per query row, the weighted sum of the values
and the output projection; FLOPs add the biases, the query scaling, float-mask additions and the head average of
returned weights. Counts come from shapes and module attributes only; the token receptive field reads mask values
when they exist (:mod:`.token_dependencies`). Formulas and their boundaries are documented in ``docs/transformer.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ...handlers import ModuleCall, ModuleEstimates
from ..conventions import FLOPS_PER_SLICE
from ..estimates import every_field
from .calls import Masks, Tokens, call_arguments, is_native, tokens
from .token_dependencies import attention_allowed, widest, without_padding
from .work import SUMMABLE, UNKNOWN, Work, estimates

# --- formula --------------------------------------------------------------------------------------------------


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


def projection_macs(a: AttentionShape) -> int:
    """The q, k, v and output projections."""
    N, L, S, E = a.batch, a.queries, a.keys, a.embed
    return N * (L * E * E + S * a.kdim * E + S * a.vdim * E + L * E * E)


def score_macs(a: AttentionShape) -> int:
    """QK^T and weights·V (each N*H*L*S*D)."""
    return 2 * a.scores * a.head_dim


def attention_macs(a: AttentionShape) -> int:
    """q, k, v and output projections plus QK^T and weights·V (each N*H*L*S*D)."""
    return projection_macs(a) + score_macs(a)


def projection_flops(a: AttentionShape) -> int:
    """2 per projection MAC + the projections' biases."""
    N, L, S, E = a.batch, a.queries, a.keys, a.embed
    in_biases = N * (L * E + 2 * S * E) if a.in_bias else 0
    out_bias = N * L * E if a.out_bias else 0
    return 2 * projection_macs(a) + in_biases + out_bias


def score_flops(a: AttentionShape) -> int:
    """2 per QK^T and weights·V MAC + query scaling + float-mask adds + softmax + head averaging of the weights."""
    N, L, E = a.batch, a.queries, a.embed
    scaling = N * L * E                                   # q * D**-0.5, once per query element
    masks = a.additive_masks * a.scores
    softmax = N * a.heads * L * FLOPS_PER_SLICE["softmax"](a.attended) if a.attended else 0
    averaging = a.scores if a.weights == "averaged" else 0   # (H-1) adds + 1 divide per (N, L, S)
    return 2 * score_macs(a) + scaling + masks + softmax + averaging


def attention_flops(a: AttentionShape) -> int:
    """2 per MAC + biases + query scaling + float-mask adds + softmax + head averaging of returned weights."""
    return projection_flops(a) + score_flops(a)


def attention_dmas(a: AttentionShape) -> int:
    """Inputs, masks and parameters read; q, k, v, scores, probabilities, context written and read; outputs written."""
    N, L, S, E = a.batch, a.queries, a.keys, a.embed
    inputs = N * (L * E + S * a.kdim + S * a.vdim) + a.mask_elements
    parameters = E * E + E * a.kdim + E * a.vdim + E * E + (3 * E if a.in_bias else 0) + (E if a.out_bias else 0)
    intermediates = 2 * (N * L * E + 2 * N * S * E + 2 * a.scores + N * L * E)
    outputs = N * L * E
    if a.weights == "averaged":  # probabilities read again, (N, L, S) written; per-head weights are the probabilities
        outputs += a.scores + N * L * a.attended
    return inputs + parameters + intermediates + outputs


# --- one native call ------------------------------------------------------------------------------------------


def attention_parts(mha: nn.MultiheadAttention, queries: Tokens, keys: Tokens, kdim: int, vdim: int,
                    masks: Masks, weights: str = "none") -> list[tuple[str, Work]]:
    """One native attention call, as the projections and the scores with their weighted sum; the projections carry
    the call's DMAs, which a breakdown does not split. add_bias_kv / add_zero_attn give a lower bound (their copies
    are not counted)."""
    if not is_native(mha, nn.MultiheadAttention):
        return [("attention", UNKNOWN)]
    present = [mask for mask in masks if mask is not None]
    shape = AttentionShape(
        batch=queries.batch, queries=queries.length, keys=keys.length, embed=mha.embed_dim, heads=mha.num_heads,
        kdim=kdim, vdim=vdim, in_bias=mha.in_proj_bias is not None, out_bias=mha.out_proj.bias is not None,
        extra_keys=int(mha.bias_k is not None) + int(mha.add_zero_attn), weights=weights,
        additive_masks=sum(mask.is_floating_point() for mask in present),
        mask_elements=sum(mask.numel() for mask in present))
    parts = [("projections", Work(projection_flops(shape), projection_macs(shape), attention_dmas(shape))),
             ("scores and weighted sum", Work(score_flops(shape), score_macs(shape)))]
    return [(name, work.at_least(SUMMABLE) if shape.extra_keys else work) for name, work in parts]


# --- handler --------------------------------------------------------------------------------------------------


def estimate_multihead_attention(call: ModuleCall) -> ModuleEstimates:
    """nn.MultiheadAttention: receptive field = most key positions one query position depends on."""
    mha = call.module
    if not is_native(mha, nn.MultiheadAttention):
        return every_field(None)
    a = call_arguments(call)
    query, key, value = a["query"], a["key"], a["value"]
    padding, mask = a["key_padding_mask"], a["attn_mask"]
    weights = "none" if not a["need_weights"] else "averaged" if a["average_attn_weights"] else "per_head"

    def parts() -> list[tuple[str, str, Work]]:
        q, k, v = (tokens(tensor, mha.batch_first) for tensor in (query, key, value))
        return [("", f"attention {name}", work)
                for name, work in attention_parts(mha, q, k, k.width, v.width, (padding, mask), weights)]

    def width() -> tuple[int, bool]:
        q, k = tokens(query, mha.batch_first), tokens(key, mha.batch_first)
        allowed = attention_allowed(mask, a["is_causal"] is True, mha.num_heads, q.length, k.length)
        return widest(without_padding(allowed, padding, k.length), k.length), True

    return estimates(call, parts, width, query.dtype)
