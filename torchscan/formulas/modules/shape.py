"""Module estimates for layers that move or pass elements without arithmetic: ``Flatten``, ``Unflatten``,
``ChannelShuffle`` and the dropout family in evaluation mode.

None of them computes anything (0 FLOPs, 0 MACs). A result that is a view of the input (or the input itself)
reads and writes no element, so its DMAs are 0; a result that had to be copied is one read and one write per
element. Receptive-field values assume the ``(batch, channel, *spatial)`` layout: dimensions 0 and 1 are batch and
channel, spatial or token dimensions start at index 2.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import torch
from torch import nn

from ...handlers import ModuleCall, ModuleHandler
from ...results import POINTWISE_SPATIAL
from ..estimates import NO_SPATIAL_MEANING

METHOD = "formula:shape"
FIRST_SPATIAL_DIM = 2

DROPOUT_TYPES = (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout)


def _storage_root(tensor: torch.Tensor) -> torch.Tensor:
    return tensor._base if tensor._base is not None else tensor


def _moved(call: ModuleCall, spatial: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of a call that moves elements without arithmetic, its DMAs as stated above."""
    inputs, output = call.argument(0, "input"), call.output
    dmas = 0 if _storage_root(output) is _storage_root(inputs) else inputs.numel() + output.numel()
    return {"module_flops": 0, "macs": 0, "dmas": dmas, **spatial}


def _flatten_spatial(module: nn.Flatten, inputs: torch.Tensor) -> Mapping[str, Any]:
    """Pointwise unless two or more dimensions merge and one of them is spatial."""
    if inputs.dim() == 0:
        return POINTWISE_SPATIAL
    start, end = module.start_dim % inputs.dim(), module.end_dim % inputs.dim()
    return POINTWISE_SPATIAL if end <= start or end < FIRST_SPATIAL_DIM else NO_SPATIAL_MEANING


def _unflatten_spatial(module: nn.Unflatten, inputs: torch.Tensor) -> Mapping[str, Any]:
    """Pointwise when a batch or channel dimension of a tensor with spatial dimensions is split.

    Splitting a spatial dimension, or creating spatial dimensions from a flat one, has no spatial receptive field.
    """
    has_spatial = inputs.dim() > FIRST_SPATIAL_DIM
    if isinstance(module.dim, int) and has_spatial and module.dim % inputs.dim() < FIRST_SPATIAL_DIM:
        return POINTWISE_SPATIAL
    return NO_SPATIAL_MEANING


def estimate_flatten(call: ModuleCall) -> dict[str, Any]:
    """A reshape: a view whenever the input's strides allow it."""
    return _moved(call, _flatten_spatial(cast(nn.Flatten, call.module), call.argument(0, "input")))


def estimate_unflatten(call: ModuleCall) -> dict[str, Any]:
    """A view that splits one dimension into several."""
    return _moved(call, _unflatten_spatial(cast(nn.Unflatten, call.module), call.argument(0, "input")))


def estimate_dropout(call: ModuleCall) -> dict[str, Any]:
    """Evaluation-mode dropout returns its input unchanged.

    In training mode the work depends on random masks this formula does not model: unavailable, never zero.
    """
    if call.module.training:
        return {"module_flops": None, "macs": None, "dmas": None, **POINTWISE_SPATIAL}
    return _moved(call, POINTWISE_SPATIAL)


def estimate_channel_shuffle(call: ModuleCall) -> dict[str, Any]:
    """A copy that permutes channels; every spatial position reads only itself."""
    return _moved(call, POINTWISE_SPATIAL)


HANDLERS: dict[type[nn.Module], ModuleHandler] = {
    nn.Flatten: ModuleHandler(estimate_flatten, method=METHOD, memoize=True),
    nn.Unflatten: ModuleHandler(estimate_unflatten, method=METHOD, memoize=True),
    **{dropout: ModuleHandler(estimate_dropout, method=METHOD, memoize=True) for dropout in DROPOUT_TYPES},
    nn.ChannelShuffle: ModuleHandler(estimate_channel_shuffle, method=METHOD, memoize=True),
}


#: The aten operators that each formula describes (see `torchscan.inheritance`): none but views, except the
#: scaling of training-mode dropout (whose formula says its counts are unavailable) and the channel shuffle.
OPERATORS: dict[type[nn.Module], tuple[str, ...]] = {
    klass: ("aten.native_dropout", "aten.bernoulli_", "aten.mul", "aten.mul_", "aten.div_", "aten.add", "aten.add_")
    if klass in DROPOUT_TYPES else () for klass in HANDLERS}
OPERATORS[nn.ChannelShuffle] = ("aten.channel_shuffle", "aten.native_channel_shuffle")
