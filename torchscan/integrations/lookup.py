"""The third-party tables: every library module's handlers by qualified class name, and its family rules.

`third_party_handler` answers for one class; the MRO walk that asks it for each class of a module's MRO is the
core's (`torchscan.builtin_handlers.find_builtin_handler`). Nothing here imports ``transformers``, timm or
torchvision: classes are recognized by name.
"""

from __future__ import annotations

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
    return THIRD_PARTY_HANDLERS.get(qualified_name(klass)) or next(
        (rule.handler for rule in FAMILY_RULES if rule.matches(klass)), None)
