"""The one lookup of built-in handlers: class-keyed ``torch.nn`` formulas and third-party ones, in one MRO walk.

`torchscan.builtin_handlers.builtin_for` calls it with the default registry; the crawler and the native Transformer
layers find every built-in handler through that function.

For each class of a module's MRO, nearest first: a built-in keyed by the class itself, then a third-party handler
registered under the class's qualified name (``module.qualname``), then the first family rule that matches it.
The first class that has one decides. A module that runs that class's own ``forward`` gets its handler; a subclass
that overrides it may do other work than the formula describes, so it gets the formula only as an inherited one,
trusted call by call when its operators prove the same work (`torchscan.inheritance`; leaf formulas only, and only
where the caller's lookup passes ``described`` operators). Nothing here imports
``transformers``, timm or torchvision: classes are recognized by name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from ..handlers import ModuleHandler
from ..inheritance import inherit
from ..operator_check import ThirdPartyHandler
from . import parametrizations, timm, torchvision, transformers
from .common import FamilyRule

#: The library modules, each with ``HANDLERS`` (qualified name -> handler) and ``RULES`` (family rules).
LIBRARIES = (transformers, timm, torchvision, parametrizations)


def _collect() -> tuple[dict[str, ThirdPartyHandler], tuple[FamilyRule, ...]]:
    handlers: dict[str, ThirdPartyHandler] = {}
    rules: list[FamilyRule] = []
    for library in LIBRARIES:
        overlap = handlers.keys() & library.HANDLERS.keys()
        if overlap:
            raise ValueError(f"{library.__name__} registers classes another library module already has: "
                             f"{sorted(overlap)}")
        handlers.update(library.HANDLERS)
        rules.extend(library.RULES)
    return handlers, tuple(rules)


#: Qualified class name -> third-party handler, and the family rules, from every library module.
THIRD_PARTY_HANDLERS, FAMILY_RULES = _collect()


def qualified_name(klass: type) -> str:
    """``transformers.models.llama.modeling_llama.LlamaRMSNorm``: the key of `THIRD_PARTY_HANDLERS`."""
    return f"{klass.__module__}.{klass.__qualname__}"


def third_party_handler(klass: type) -> ThirdPartyHandler | None:
    """The handler registered for ``klass`` itself: by qualified name, else by the first matching family rule."""
    found = THIRD_PARTY_HANDLERS.get(qualified_name(klass))
    if found is not None:
        return found
    return next((rule.handler for rule in FAMILY_RULES if rule.matches(klass)), None)


def find_builtin_handler(module_type: type, builtins: Mapping[type, ModuleHandler],
                         described: Mapping[type, Iterable[str]] | None = None) -> ModuleHandler | None:
    """The built-in handler of ``module_type``: the nearest class in its MRO with a class-keyed or third-party
    handler, provided ``module_type`` runs that class's ``forward``.

    A subclass that overrides ``forward`` (a LoRA ``Linear``, a fused QAT ``ConvBn2d``) may do other work than the
    class the formula describes, so the formula would silently miss it: such a module gets the formula only as an
    `InheritedHandler` (checked against the operators of each call), when it is a leaf formula and its operators
    are known (``described`` for class-keyed formulas; a third-party formula declares its own); otherwise none.
    """
    for klass in module_type.__mro__:
        found = builtins.get(klass) or third_party_handler(klass)
        if found is not None:
            if _forward(module_type) is _forward(klass):
                return found
            return _inherited(klass, found, described)
    return None


def _inherited(parent: type, formula: ModuleHandler, described: Mapping[type, Iterable[str]] | None
               ) -> ModuleHandler | None:
    if described is None:
        return None
    if isinstance(formula, ThirdPartyHandler):
        return inherit(parent, formula, ())
    operators = described.get(parent)
    return inherit(parent, formula, operators) if operators is not None else None


def _forward(module_type: type) -> object:
    """The ``forward`` of a module class (read by name: ``type`` declares no such attribute)."""
    return getattr(module_type, "forward")  # noqa: B009
