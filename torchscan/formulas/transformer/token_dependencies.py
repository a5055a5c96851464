"""Token dependencies of native attention and Transformer calls: the receptive field in tokens, from the masks.

A query position depends on the keys it may attend to in any head (the attention mask, a causal hint, the key
padding mask) and, in a Transformer layer, on its own position through the residual path. A stack of layers
composes those dependencies. Mask *values* are read here (the only place these formulas read tensor values); a
mask on the ``meta`` device makes the dependency unknown.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from .calls import UnsupportedCall, is_native

#: A layer whose self-attention `stack_width` reads.
SelfAttentionLayer = nn.TransformerEncoderLayer | nn.TransformerDecoderLayer


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


def with_residual(allowed: torch.Tensor, length: int) -> torch.Tensor:
    """A layer's output position also depends on its own input position through the residual path."""
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
    allowed = without_padding(attended, padding_mask, length)
    return (None if allowed is None else with_residual(allowed, length)), idempotent


def is_causal_pattern(allowed: torch.Tensor) -> bool:
    """Every query sees exactly the keys up to its own position."""
    length = allowed.shape[-1]
    return bool((allowed == torch.ones(length, length, dtype=torch.bool, device=allowed.device).tril()).all())


def composed_width(step: torch.Tensor | None, layers: int, length: int, idempotent: bool, budget: int
                   ) -> tuple[int, bool]:
    """Widest dependency after ``layers`` identical layer steps, and whether it is exact.

    Non-idempotent steps are composed by boolean matrix products until they stop growing, within ``budget``
    multiply-accumulates; beyond it the reach so far is a lower bound (every step includes the residual, so reach
    only grows).
    """
    if step is None or idempotent or layers <= 1:
        return widest(step, length), True
    if (step.shape[0] if step.dim() == 3 else 1) * length ** 3 > budget:
        return widest(step, length), False
    reach, dense = step, step.float()
    for _ in range(layers - 1):
        grown = torch.matmul(reach.float(), dense) > 0
        if torch.equal(grown, reach):
            break
        reach = grown
    return widest(reach, length), True


def stack_width(layers: Sequence[SelfAttentionLayer], length: int, attn_mask: Any, padding_mask: Any, causal: Any,
                budget: int) -> tuple[int, bool]:
    """Composed dependency along the residual sequence of a stack of self-attention layers (one layer: its own).

    ``budget`` bounds the work of composing general masks (see `composed_width`).
    """
    if not layers:
        return 1, True
    step, idempotent = self_attention_step(layers[0].self_attn, length, attn_mask, padding_mask, causal)
    return composed_width(step, len(layers), length, idempotent, budget)
