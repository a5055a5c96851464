"""Complete-call estimates for native multi-head attention and Transformer layers, stacks and models.

Each handler owns the inclusive estimate of its whole call (``subtree_metrics`` = all six fields), so the estimate
does not depend on which children PyTorch happens to call. ``nn.MultiheadAttention`` never calls its ``out_proj``
child: it hands the weights to the functional form or, in eval mode under ``no_grad``, to the fused
``aten._native_multi_head_attention`` kernel (that fast path has no hook check, so it runs under the crawler too).
``nn.TransformerEncoderLayer``'s fused fast path (``aten._transformer_encoder_layer_fwd``) calls none of its
children, but PyTorch disables it while hooks are attached, so under the crawler the layers take the decomposed
path and call their children. Child calls that do run keep their rows; the crawler omits their covered fields.
The handlers own the subtree either way, and their estimate is the same on either path.

This module is the family's entry point: `handlers` and the one tunable, `DEPENDENCY_BUDGET`. The formulas live
in :mod:`.attention` (attention), :mod:`.layers` and :mod:`.blocks` (layers, stacks, ``nn.Transformer``),
:mod:`.token_dependencies` (the mask-derived receptive field), :mod:`.calls` (reading a call by the real
``forward`` signature) and :mod:`.work` (adding work up and reporting it). Counts come from shapes and module
attributes only (they work on ``meta``); the token receptive field reads mask values when they exist. Formulas
and their boundaries are documented in ``docs/transformer.md``.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

from ...handlers import ModuleCall, ModuleEstimates, ModuleHandler
from .attention import (
    AttentionShape,
    attention_dmas,
    attention_flops,
    attention_macs,
    estimate_multihead_attention,
)
from .blocks import BuiltinLookup, Children
from .layers import TRANSFORMER_ESTIMATES
from .work import METHOD, SUBTREE_METRICS

__all__ = ["DEPENDENCY_BUDGET", "METHOD", "AttentionShape", "attention_dmas", "attention_flops", "attention_macs",
           "handlers"]

#: Multiply-accumulates allowed for composing a stack's token dependencies from general mask values; beyond it
#: the single-layer value is reported as a lower bound.
DEPENDENCY_BUDGET = 1 << 27


def _handler(callback: Callable[[ModuleCall], ModuleEstimates]) -> ModuleHandler:
    return ModuleHandler(callback, subtree_metrics=SUBTREE_METRICS, method=METHOD)


def _configured(estimate: Callable[[ModuleCall, int, Children], ModuleEstimates], children: Children
                ) -> Callable[[ModuleCall], ModuleEstimates]:
    """``estimate`` given `DEPENDENCY_BUDGET` as it stands when the call is estimated (so a change applies)."""
    return lambda call: estimate(call, DEPENDENCY_BUDGET, children)


def handlers(builtin: BuiltinLookup) -> dict[type[nn.Module], ModuleHandler]:
    """The family's handlers; ``builtin`` is the registry's lookup that prices a layer's norms and activation."""
    children = Children(builtin)
    return {
        nn.MultiheadAttention: _handler(estimate_multihead_attention),
        **{module_type: _handler(_configured(estimate, children))
           for module_type, estimate in TRANSFORMER_ESTIMATES.items()},
    }
