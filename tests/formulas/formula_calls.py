"""Calling a built-in handler the way the crawler does: run the module, then estimate its completed call."""

from __future__ import annotations

import torch
from torch import nn

from torchscan.handlers import ModuleCall, ModuleHandler, validate_estimates

NUMERIC_FIELDS = ("module_flops", "macs", "dmas", "receptive_field", "effective_stride", "effective_padding")


def run_builtin(handlers: dict[type, ModuleHandler], module: nn.Module, *args, **kwargs) -> dict:
    """The raw estimates of ``handlers[type(module)]`` for one call; all six fields, each valid."""
    with torch.no_grad():
        output = module(*args, **kwargs)
    handler = handlers[type(module)]
    result = handler.callback(ModuleCall(module, args, kwargs, output))
    assert set(result) == set(NUMERIC_FIELDS)
    assert validate_estimates(result, handler).problems == []
    return result
