"""The built-in module handlers, and the one way to find the built-in handler of a module type.

``DEFAULT_HANDLERS`` holds the class-keyed formulas: the ``torch.nn`` families of `torchscan.formulas` and the native
Transformer family. `builtin_for` adds the third-party formulas of `torchscan.integrations` (by qualified name or
family rule) in one walk of a type's MRO. The crawler finds every built-in handler through `builtin_for`, and so do
the native Transformer layers for their norms and activation (they are given it when their handlers are made).
"""

from __future__ import annotations

from torch import nn

from .formulas import MODULE_FAMILIES, transformer
from .handlers import ModuleHandler
from .integrations.lookup import find_builtin_handler


def builtin_for(module_type: type) -> ModuleHandler | None:
    """The built-in handler of ``module_type``: the nearest class in its MRO with a ``torch.nn`` formula or a
    third-party one (see `torchscan.integrations.lookup`). When ``module_type`` overrides that class's ``forward``,
    a leaf formula is offered as an inherited one, trusted call by call (`torchscan.inheritance`)."""
    return find_builtin_handler(module_type, DEFAULT_HANDLERS, DESCRIBED_OPERATORS)


def _default_handlers() -> dict[type[nn.Module], ModuleHandler]:
    handlers: dict[type[nn.Module], ModuleHandler] = {}
    for family in MODULE_FAMILIES:
        handlers.update(family.HANDLERS)
    handlers.update(transformer.handlers(builtin_for))
    return handlers


DEFAULT_HANDLERS: dict[type[nn.Module], ModuleHandler] = _default_handlers()
#: The aten operators with arithmetic that each ``torch.nn`` leaf formula describes (its family's ``OPERATORS``).
DESCRIBED_OPERATORS: dict[type[nn.Module], tuple[str, ...]] = {
    klass: operators for family in MODULE_FAMILIES for klass, operators in family.OPERATORS.items()}
