"""The built-in module handlers, and the one way to find the built-in handler of a module type.

``DEFAULT_HANDLERS`` holds the class-keyed formulas: the ``torch.nn`` families of `torchscan.formulas` and the native
Transformer family. `builtin_for` adds the third-party formulas of `torchscan.integrations` (by qualified name or
family rule) in one walk of a type's MRO, `find_builtin_handler`. The crawler finds every built-in handler through
`builtin_for`, and so do the native Transformer layers for their norms and activation (they are given it when their
handlers are made).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from torch import nn

from .formulas import MODULE_FAMILIES, transformer
from .handlers import ModuleHandler
from .inheritance import inherit
from .integrations.lookup import third_party_handler

ThirdPartyLookup = Callable[[type], "ModuleHandler | None"]


def builtin_for(module_type: type) -> ModuleHandler | None:
    """The built-in handler of ``module_type``: `find_builtin_handler` over the ``torch.nn``, native Transformer and
    third-party formulas, with the operators each ``torch.nn`` leaf formula describes."""
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


def find_builtin_handler(module_type: type, builtins: Mapping[type, ModuleHandler],
                         described: Mapping[type, Iterable[str]] | None = None,
                         third_party: ThirdPartyLookup = third_party_handler) -> ModuleHandler | None:
    """The built-in handler of ``module_type``: the nearest class in its MRO with a class-keyed or third-party
    handler, provided ``module_type`` runs that class's ``forward``.

    A subclass that overrides ``forward`` (a LoRA ``Linear``, a fused QAT ``ConvBn2d``) may do other work than the
    class the formula describes, so the formula would silently miss it: such a module gets the formula only as an
    `InheritedHandler` (checked against the operators of each call), when it is a leaf formula and its operators
    are known (``described`` for class-keyed formulas; a third-party formula declares its own); otherwise none.
    """
    for klass in module_type.__mro__:
        found = builtins.get(klass) or third_party(klass)
        if found is not None:
            return found if _forward(module_type) is _forward(klass) else _inherited(klass, found, described)
    return None


def _inherited(parent: type, formula: ModuleHandler, described: Mapping[type, Iterable[str]] | None
               ) -> ModuleHandler | None:
    if described is None:
        return None
    if formula.checks_operators:  # a third-party formula declares its operators itself (call by call)
        return inherit(parent, formula, ())
    operators = described.get(parent)
    return inherit(parent, formula, operators) if operators is not None else None


def _forward(module_type: type) -> object:
    """The ``forward`` of a module class (read by name: ``type`` declares no such attribute)."""
    return getattr(module_type, "forward")  # noqa: B009
