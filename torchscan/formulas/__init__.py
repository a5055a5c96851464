"""Built-in formulas: module handlers by family, operator FLOP formulas, and functional-op estimates.

Every family module exposes ``HANDLERS: dict[type[nn.Module], ModuleHandler]``; `DEFAULT_HANDLERS` merges
them. Built-in handlers are the same type that callers register through ``custom_modules``.
"""

from __future__ import annotations

import importlib

from torch import nn

from ..handlers import ModuleHandler

#: Family modules, each contributing ``HANDLERS``. A family that is not written yet is simply absent.
FAMILIES = ("modules.linear", "modules.conv", "modules.norm", "modules.activation", "modules.pooling", "modules.shape",
            "modules.embedding", "modules.recurrent", "transformer")


def _collect_handlers() -> dict[type[nn.Module], ModuleHandler]:
    handlers: dict[type[nn.Module], ModuleHandler] = {}
    for family in FAMILIES:
        try:
            module = importlib.import_module(f"{__name__}.{family}")
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{family}":
                raise
            continue
        handlers.update(module.HANDLERS)
    return handlers


DEFAULT_HANDLERS: dict[type[nn.Module], ModuleHandler] = _collect_handlers()
