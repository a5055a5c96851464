"""Facts about the modules of one model, gathered once per analysis: path, type, handlers and leafness before the
forward (`model_facts`, with every training flag), parameter and buffer statistics after it (`tensor_statistics`)."""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter, methodcaller
from typing import Any

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from .handlers import ModuleHandler, closest_handler
from .inputs import PLAIN_TENSORS, device_type, dtype_name
from .integrations.signature import observes_operators

#: The built-in handler of a module type, or None (see ``torchscan.formulas.builtin_for``).
BuiltinLookup = Callable[[type], "ModuleHandler | None"]


class ModuleInfo:
    """Per-module facts computed once before the forward, so the hooks stay cheap.

    Besides path, name, type and handlers, three flags the hooks would otherwise derive on every call:
    ``may_own`` (some handler owns fields for the subtree), ``observes`` (a third-party formula checks the
    operators the call runs) and ``prices_direct_work`` (no built-in formula alone prices the call, so the
    operators it runs directly may need estimating).
    """

    __slots__ = ("builtin", "caller", "calls", "leaf", "may_own", "name", "observes", "path", "prices_direct_work",
                 "type_name")

    def __init__(self, path: str, type_name: str, leaf: bool, caller: ModuleHandler | None,
                 builtin: ModuleHandler | None) -> None:
        self.path = path
        self.name = path.rpartition(".")[2]
        self.calls = 0  # calls of the module so far in this analysis: the next call's call_index
        self.type_name = type_name
        self.leaf = leaf
        self.caller = caller
        self.builtin = builtin
        self.may_own = caller is not None or (builtin is not None and bool(builtin.subtree_metrics))
        self.observes = observes_operators(builtin)
        self.prices_direct_work = caller is not None or builtin is None


#: Modules whose forward takes a fused kernel (calling no child) unless a module hook is attached to them.
FUSED_PATH_TYPES = (nn.TransformerEncoderLayer,)


class ModelFacts:
    """What the hooks need to know of a model, from one walk before the forward: the facts of each module (by id),
    every module in ``named_modules()`` order with its training flag, and the modules of `FUSED_PATH_TYPES`."""

    __slots__ = ("fused_path_owners", "infos", "training_flags")

    def __init__(self) -> None:
        self.infos: dict[int, ModuleInfo] = {}
        self.training_flags: list[tuple[nn.Module, bool]] = []
        self.fused_path_owners: list[nn.Module] = []


def model_facts(model: nn.Module, custom: dict[type, ModuleHandler], builtin: BuiltinLookup | None) -> ModelFacts:
    """Path, type and handlers of every module (handlers looked up once per type), and its training flag."""
    by_type: dict[type, tuple[str, ModuleHandler | None, ModuleHandler | None]] = {}
    facts = ModelFacts()
    infos, flags = facts.infos, facts.training_flags
    for path, module in model.named_modules():
        kind = type(module)
        known = by_type.get(kind)
        if known is None:
            known = by_type[kind] = (f"{kind.__module__}.{kind.__qualname__}", closest_handler(kind, custom),
                                     builtin(kind) if builtin is not None else None)
        type_name, caller, found = known
        infos[id(module)] = ModuleInfo(path, type_name, _is_leaf(module), caller, found)
        flags.append((module, module.training))
        if isinstance(module, FUSED_PATH_TYPES):
            facts.fused_path_owners.append(module)
    return facts


def _is_leaf(module: nn.Module) -> bool:
    """No child module (as ``children()`` lists them: a child registered as ``None`` is none)."""
    for child in module._modules.values():
        if child is not None:
            return False
    return True


def tensor_statistics(model: nn.Module, kinds: set[tuple[str, str]] | None = None
                      ) -> dict[str, tuple[dict[str, int], dict[str, int]]]:
    """Parameter and buffer statistics of each module path; a tensor shared by several modules counts once.

    One walk over the model's tensors, after the forward: ``kinds`` (when given) also collects the device type and
    dtype of every counted tensor. Uninitialized lazy parameters (a lazy module that never ran) have no size yet
    and are not counted. The sums run as C-level ``map`` steps: a model has a few tensors per module.
    """
    seen: set[int] = set()
    found: set[tuple[str, torch.dtype]] = set()
    statistics = {}
    for path, module in model.named_modules():
        parameters, buffers = module._parameters, module._buffers
        statistics[path] = (_parameter_stats(_counted(parameters.values(), seen, found)) if parameters else
                            {"count": 0, "bytes": 0, "trainable": 0, "frozen": 0},
                            _buffer_stats(_counted(buffers.values(), seen, found)) if buffers else
                            {"count": 0, "bytes": 0})
    if kinds is not None:
        kinds.update((device, dtype_name(dtype)) for device, dtype in found)
    return statistics


_NUMEL = methodcaller("numel")  # not Tensor.numel: a subclass may override it
_NBYTES = attrgetter("nbytes")  # numel() * element_size()
_REQUIRES_GRAD = attrgetter("requires_grad")


def _parameter_stats(tensors: list[torch.Tensor]) -> dict[str, int]:
    count = sum(map(_NUMEL, tensors))
    trainable = sum(map(_NUMEL, filter(_REQUIRES_GRAD, tensors)))
    return {"count": count, "bytes": sum(map(_NBYTES, tensors)), "trainable": trainable, "frozen": count - trainable}


def _buffer_stats(tensors: list[torch.Tensor]) -> dict[str, int]:
    return {"count": sum(map(_NUMEL, tensors)), "bytes": sum(map(_NBYTES, tensors))}


def _counted(tensors: Any, seen: set[int], kinds: set[tuple[str, torch.dtype]]) -> list[torch.Tensor]:
    """The tensors not counted yet (a shared one counts once), with sizes (not an uninitialized lazy one); their
    device types and dtypes go to ``kinds``."""
    counted = []
    for tensor in tensors:
        if tensor is None or id(tensor) in seen:
            continue
        plain = type(tensor) in PLAIN_TENSORS
        if not plain and is_lazy(tensor):
            continue
        seen.add(id(tensor))
        kinds.add(("cpu" if plain and tensor.is_cpu else device_type(tensor), tensor.dtype))
        counted.append(tensor)
    return counted
