"""Facts about the modules of one model, gathered once per analysis: path, type, handlers and leafness before the
forward (`module_infos`), parameter and buffer statistics after it (`tensor_statistics`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import nn
from torch.nn.parameter import is_lazy

from .handlers import ModuleHandler, closest_handler

#: The built-in handler of a module type, or None (see ``torchscan.formulas.builtin_for``).
BuiltinLookup = Callable[[type], "ModuleHandler | None"]


@dataclass(frozen=True)
class ModuleInfo:
    """Per-module facts computed once before the forward, so the hooks stay cheap."""

    path: str
    type_name: str
    leaf: bool
    caller: ModuleHandler | None
    builtin: ModuleHandler | None


#: Modules whose forward takes a fused kernel (calling no child) unless a module hook is attached to them.
FUSED_PATH_TYPES = (nn.TransformerEncoderLayer,)


def module_infos(model: nn.Module, custom: dict[type, ModuleHandler], builtin: BuiltinLookup | None,
                 fused_path_owners: list[nn.Module] | None = None) -> dict[int, ModuleInfo]:
    """Path, type and handlers of every module, looked up once per type; modules of `FUSED_PATH_TYPES` are
    appended to ``fused_path_owners``."""
    handler_cache: dict[type, tuple[ModuleHandler | None, ModuleHandler | None]] = {}
    infos: dict[int, ModuleInfo] = {}
    for path, module in model.named_modules():
        kind = type(module)
        if kind not in handler_cache:
            handler_cache[kind] = (closest_handler(kind, custom), builtin(kind) if builtin is not None else None)
        caller, found = handler_cache[kind]
        infos[id(module)] = ModuleInfo(path=path, type_name=f"{kind.__module__}.{kind.__qualname__}",
                                       leaf=next(module.children(), None) is None, caller=caller, builtin=found)
        if fused_path_owners is not None and isinstance(module, FUSED_PATH_TYPES):
            fused_path_owners.append(module)
    return infos


def tensor_statistics(model: nn.Module, kinds: set[tuple[str, str]] | None = None
                      ) -> dict[str, tuple[dict[str, int], dict[str, int]]]:
    """Parameter and buffer statistics of each module path; a tensor shared by several modules counts once.

    One walk over the model's tensors, after the forward: ``kinds`` (when given) also collects the device type and
    dtype of every counted tensor. Uninitialized lazy parameters (a lazy module that never ran) have no size yet
    and are not counted.
    """
    seen: set[int] = set()
    kinds = set() if kinds is None else kinds
    return {path: (_tensor_stats(module._parameters.values(), seen, kinds, with_grad=True),
                   _tensor_stats(module._buffers.values(), seen, kinds, with_grad=False))
            for path, module in model.named_modules()}


def _tensor_stats(tensors: Any, seen: set[int], kinds: set[tuple[str, str]], with_grad: bool) -> dict[str, int]:
    count = trainable = nbytes = 0
    for tensor in tensors:
        if tensor is None or id(tensor) in seen or is_lazy(tensor):
            continue
        seen.add(id(tensor))
        kinds.add((tensor.device.type, str(tensor.dtype).removeprefix("torch.")))
        count += tensor.numel()
        nbytes += tensor.numel() * tensor.element_size()
        if with_grad and tensor.requires_grad:
            trainable += tensor.numel()
    stats = {"count": count, "bytes": nbytes}
    if with_grad:
        stats.update(trainable=trainable, frozen=count - trainable)
    return stats
