"""Facts about the modules of one model, gathered once per analysis: path, type, handlers and leafness before the
forward (`model_facts`, with every training flag), parameter and buffer statistics after it (`tensor_statistics`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import chain
from operator import attrgetter, itemgetter, methodcaller
from typing import Any, NamedTuple

import torch
from torch import nn
from torch.nn.parameter import is_lazy

from .handlers import ModuleHandler, closest_handler
from .values import PLAIN_TENSORS, device_type, dtype_name

#: The built-in handler of a module type, or None (see ``torchscan.builtin_handlers.builtin_for``).
BuiltinLookup = Callable[[type], "ModuleHandler | None"]


class TypeFacts(NamedTuple):
    """What the hooks need to know of a module type, looked up once per type and analysis (`type_facts`)."""

    type_name: str
    caller: ModuleHandler | None  # the caller's registration, through the MRO
    builtin: ModuleHandler | None  # the built-in handler (`torchscan.builtin_handlers.builtin_for`)
    may_own: bool  # some handler owns fields for the subtree
    observes: bool  # the built-in formula checks the operators the call runs directly
    prices_direct_work: bool  # no built-in formula alone prices the call: its direct operators may need estimating
    memoizes: bool  # only a memoizing built-in formula estimates the call (see `torchscan.estimate_memo`)


def type_facts(kind: type, custom: dict[type, ModuleHandler], builtin: BuiltinLookup | None, leaf: bool = True
               ) -> TypeFacts:
    """The `TypeFacts` of a module type, for its leaf instances or for those with children: an inherited formula
    describes a leaf's work, so a composite subclass (timm's ``BatchNormAct2d``) is not offered one."""
    caller = closest_handler(kind, custom)
    found = builtin(kind) if builtin is not None else None
    if not leaf and found is not None and found.leaves_only:
        found = None
    return TypeFacts(
        type_name=f"{kind.__module__}.{kind.__qualname__}", caller=caller, builtin=found,
        may_own=caller is not None or (found is not None and bool(found.subtree_metrics)),
        observes=found is not None and found.checks_operators,
        prices_direct_work=caller is not None or found is None,
        memoizes=caller is None and found is not None and found.memoize)


class ModuleInfo:
    """Per-module facts computed once before the forward, so the hooks stay cheap: path, name, leafness, the
    calls made so far, and its type's `TypeFacts` as attributes of their own (the hooks read them on every call)."""

    __slots__ = ("builtin", "caller", "calls", "leaf", "may_own", "memoizes", "name", "observes", "path",
                 "prices_direct_work", "type_name")

    def __init__(self, path: str, leaf: bool, facts: TypeFacts) -> None:
        self.path = path
        self.name = path.rpartition(".")[2]
        self.calls = 0  # calls of the module so far in this analysis: the next call's call_index
        self.leaf = leaf
        (self.type_name, self.caller, self.builtin, self.may_own, self.observes, self.prices_direct_work,
         self.memoizes) = facts


#: Modules whose forward takes a fused kernel (calling no child) unless a module hook is attached to them.
FUSED_PATH_TYPES = (nn.TransformerEncoderLayer,)


class ModelFacts:
    """What the hooks need to know of a model, from one walk before the forward: the facts of each module (by id),
    every module in ``named_modules()`` order with its path and with its training flag, the modules of
    `FUSED_PATH_TYPES`, and every module's children (to tell whether the forward changed the module tree)."""

    __slots__ = ("children", "fused_path_owners", "infos", "modules", "training_flags")

    def __init__(self) -> None:
        self.infos: dict[int, ModuleInfo] = {}
        self.modules: list[tuple[str, nn.Module]] = []
        self.training_flags: list[tuple[nn.Module, bool]] = []
        self.fused_path_owners: list[nn.Module] = []
        self.children: tuple = ()

    def modules_after_forward(self, model: nn.Module) -> list[tuple[str, nn.Module]]:
        """``named_modules()`` of ``model`` now: the walk made before the forward, unless the forward changed the
        module tree (added, removed, replaced or reordered a child of some module), which walks it again."""
        return self.modules if _children(self.modules) == self.children else list(model.named_modules())


def _children(modules: list[tuple[str, nn.Module]]) -> tuple:
    """Every registered child (or None) of every module, in order: compared by identity, in C-level steps."""
    return tuple(chain.from_iterable(map(_VALUES, map(_CHILD_MODULES, map(itemgetter(1), modules)))))


_CHILD_MODULES, _VALUES = attrgetter("_modules"), methodcaller("values")


def model_facts(model: nn.Module, custom: dict[type, ModuleHandler], builtin: BuiltinLookup | None) -> ModelFacts:
    """Path, type and handlers of every module (handlers looked up once per type), and its training flag."""
    by_type: dict[tuple[type, bool], TypeFacts] = {}
    facts = ModelFacts()
    infos, flags = facts.infos, facts.training_flags
    facts.modules = modules = list(model.named_modules())
    for path, module in modules:
        kind, leaf = type(module), _is_leaf(module)
        known = by_type.get((kind, leaf))
        if known is None:
            known = by_type[kind, leaf] = type_facts(kind, custom, builtin, leaf)
        infos[id(module)] = ModuleInfo(path, leaf, known)
        flags.append((module, module.training))
        if isinstance(module, FUSED_PATH_TYPES):
            facts.fused_path_owners.append(module)
    facts.children = _children(modules)
    return facts


def _is_leaf(module: nn.Module) -> bool:
    """No child module (as ``children()`` lists them: a child registered as ``None`` is none)."""
    children = module._modules
    return not children or all(child is None for child in children.values())


class OwnTensors(NamedTuple):
    """The statistics of a module's own parameters (count, bytes, trainable, frozen) and buffers (count, bytes)."""

    parameters: dict[str, int]
    buffers: dict[str, int]


def tensor_statistics(modules: Iterable[tuple[str, nn.Module]], kinds: set[tuple[str, str]] | None = None
                      ) -> dict[str, OwnTensors]:
    """Parameter and buffer statistics of each module path of ``modules`` (a model's ``named_modules()``), in one
    walk after the forward: a shared tensor counts once, an uninitialized lazy one not at all; ``kinds`` (when
    given) also collects the device type and dtype of every counted tensor."""
    seen: set[int] = set()
    found: set[Any] = set()  # dtypes of CPU tensors, (device type, dtype) of others: named once each, at the end
    statistics = {}
    for path, module in modules:
        parameters, buffers = module._parameters, module._buffers
        count, nbytes, trainable = _new_tensors(parameters.values(), seen, found) if parameters else NO_TENSORS
        own_parameters = {"count": count, "bytes": nbytes, "trainable": trainable, "frozen": count - trainable}
        count, nbytes, _ = _new_tensors(buffers.values(), seen, found) if buffers else NO_TENSORS
        statistics[path] = OwnTensors(own_parameters, {"count": count, "bytes": nbytes})
    if kinds is not None:
        kinds.update(("cpu", dtype_name(kind)) if isinstance(kind, torch.dtype) else (kind[0], dtype_name(kind[1]))
                     for kind in found)
    return statistics


NO_TENSORS = (0, 0, 0)


def _new_tensors(tensors: Iterable[Any], seen: set[int], found: set[Any]) -> tuple[int, int, int]:
    """Elements, bytes and trainable elements of the ``tensors`` not counted yet (a shared one counts once), with
    sizes (not an uninitialized lazy one, nor a ``None`` entry); their device types and dtypes go to ``found``."""
    count = nbytes = trainable = 0
    for tensor in tensors:
        if tensor is None or id(tensor) in seen:
            continue
        if type(tensor) in PLAIN_TENSORS:
            found.add(tensor.dtype if tensor.is_cpu else (device_type(tensor), tensor.dtype))
        elif is_lazy(tensor):
            continue
        else:
            found.add((device_type(tensor), tensor.dtype))
        seen.add(id(tensor))
        elements = tensor.numel()
        count += elements
        nbytes += elements * tensor.element_size()
        if tensor.requires_grad:
            trainable += elements
    return count, nbytes, trainable
