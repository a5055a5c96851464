"""Built-in formulas, by job: module handlers, operator costs, and the native Transformer family.

* :mod:`.modules`: one file per family of ``torch.nn`` layers, each exposing ``HANDLERS``;
* :mod:`.transformer`: native attention, Transformer layers, stacks and ``nn.Transformer``, whose handlers own
  their subtree and price a layer's norms and activation through `builtin_for`;
* :mod:`.operators`: the cost of one dispatched ATen call (operator FLOPs, and the module view's estimates of
  work a module performs directly);
* :mod:`.conventions`: the per-element and per-step counts that all three share.

`DEFAULT_HANDLERS` merges the module-handler families. Built-in handlers are the same type that callers register
through ``custom_modules``; `builtin_for` is the one way to find the built-in handler of a module type.
"""

from __future__ import annotations

from torch import nn

from ..handlers import ModuleHandler
from . import transformer
from .modules import activation, conv, embedding, linear, norm, pooling, recurrent, shape

#: The families of module handlers, each contributing ``HANDLERS``.
MODULE_FAMILIES = (linear, conv, norm, activation, pooling, shape, embedding, recurrent)


def builtin_for(module_type: type) -> ModuleHandler | None:
    """The built-in handler of ``module_type``: the nearest class in its MRO with a ``torch.nn`` formula or a
    third-party one (by qualified name or family rule, see `torchscan.integrations.lookup`), unless
    ``module_type`` overrides that class's ``forward`` (its formula would then describe work the module does not do).

    Every built-in lookup goes through here: the crawler's, and a native layer's for its norms and activation.
    """
    # imported here: the integrations reuse these formulas, so importing them first would import this package
    from ..integrations.lookup import find_builtin_handler

    return find_builtin_handler(module_type, DEFAULT_HANDLERS)


def _default_handlers() -> dict[type[nn.Module], ModuleHandler]:
    handlers: dict[type[nn.Module], ModuleHandler] = {}
    for family in MODULE_FAMILIES:
        handlers.update(family.HANDLERS)
    handlers.update(transformer.handlers(builtin_for))
    return handlers


DEFAULT_HANDLERS: dict[type[nn.Module], ModuleHandler] = _default_handlers()
