"""The sharded model: a stand-in copy of the user's model, its sharding units, and PyTorch's ``fully_shard``.

The user's model is never touched. `stand_in_copy` deep-copies it with every parameter and buffer replaced by a
fake-tensor stand-in of the same shape, strides, dtype and ``requires_grad`` (`torchscan.calls.stand_ins.StandIns`):
nothing is allocated whatever the model's size, so a meta model of 70B parameters is copied on a laptop, and tied
tensors stay tied (the copy's memo maps every occurrence of one tensor to one stand-in). FSDP2 refuses meta
parameters, which is why the stand-ins are fake tensors.

Units are the modules ``fully_shard`` is applied to, each one all-gather / reduce-scatter group (the root gets one
too, for the parameters no unit holds). Unless the plan names them (`unit_modules`):

1. a ``transformers`` model's ``_no_split_modules`` classes (its decoder layers: the blocks it never splits across
   devices, which is what FSDP wraps in practice), matched by class name;
2. else the children of the ``nn.ModuleList`` that holds the most parameter elements (the stack of blocks);
3. else none: the root alone is one group (the whole model gathered at once).

`shard` applies ``fully_shard`` to the units, innermost first, then to the root, with the plan's mesh,
``reshard_after_forward`` and ``MixedPrecisionPolicy``; the root keeps FSDP2's default (its parameters are not
resharded after the forward, since the backward needs them first) unless the plan never reshards. With activation checkpointing each unit's forward runs under
``torch.utils.checkpoint.checkpoint`` (non-reentrant), inside FSDP's hooks, as torchtitan composes the two.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
from torch.utils.checkpoint import checkpoint

from ..calls.stand_ins import StandIns
from .fake_world import FakeWorld
from .plan import ParallelPlan


def stand_in_copy(model: nn.Module, stand_ins: StandIns) -> nn.Module:
    """A deep copy of ``model`` whose parameters and buffers are ``stand_ins``' fake tensors (nothing allocated;
    ``model`` unchanged). Tensors held outside parameters and buffers are copied as they are."""
    memo: dict[int, Any] = {}
    for tensor in (*model.parameters(), *model.buffers()):
        if id(tensor) not in memo:
            memo[id(tensor)] = stand_ins.tensor(tensor)
    return copy.deepcopy(model, memo)


def unit_modules(model: nn.Module, plan: ParallelPlan) -> list[nn.Module]:
    """The modules that become sharding units, in module order (the root is never one: it is sharded last)."""
    if plan.units is not None:
        return _matching(model, plan.units)
    no_split = getattr(model, "_no_split_modules", None)
    found = _matching(model, tuple(no_split)) if no_split else []
    return found or _largest_module_list(model)


def _matching(model: nn.Module, units: tuple[type | str, ...]) -> list[nn.Module]:
    classes = tuple(unit for unit in units if isinstance(unit, type))
    names = {unit for unit in units if isinstance(unit, str)}
    return [module for module in model.modules() if module is not model
            and (isinstance(module, classes) or type(module).__name__ in names)]


def _largest_module_list(model: nn.Module) -> list[nn.Module]:
    """The children of the ``ModuleList`` with the most parameter elements (the first of equals), or none."""
    best: list[nn.Module] = []
    most = 0
    for module in model.modules():
        if isinstance(module, nn.ModuleList):
            elements = sum(parameter.numel() for parameter in module.parameters())
            if elements > most:
                best, most = list(module), elements
    return best


def shard(model: nn.Module, world: FakeWorld, activation_checkpointing: bool = False) -> list[str]:
    """Apply the world's plan to ``model`` in place: ``fully_shard`` on every unit (innermost first) and on the
    root, each unit's forward checkpointed when asked; returns the units' class names, in module order (FSDP2
    changes each sharded module's class)."""
    plan = world.plan
    units = unit_modules(model, plan)
    names = [type(unit).__name__ for unit in units]
    policy = MixedPrecisionPolicy(param_dtype=plan.param_dtype, reduce_dtype=plan.reduce_dtype,
                                  output_dtype=plan.output_dtype)  # unset dtypes keep FSDP2's defaults
    for unit in reversed(units):
        if activation_checkpointing:
            unit.forward = functools.partial(_checkpointed, unit.forward)
        fully_shard(unit, mesh=world.mesh, reshard_after_forward=plan.reshard_after_forward, mp_policy=policy)
    # None: FSDP2's default for the root, which keeps its parameters for the backward (True would reshard it too)
    fully_shard(model, mesh=world.mesh, reshard_after_forward=None if plan.reshard_after_forward else False,
                mp_policy=policy)
    return names


def _checkpointed(forward: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``forward`` under non-reentrant activation checkpointing: it keeps its inputs and recomputes the rest in the
    backward."""
    return checkpoint(forward, *args, use_reentrant=False, **kwargs)


def trainable(model: nn.Module) -> list[nn.Parameter]:
    """The parameters the optimizer updates, each once."""
    return [parameter for parameter in model.parameters() if parameter.requires_grad]


def local_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """A ``DTensor``'s local shard (the storage this rank holds), any other tensor itself."""
    to_local = getattr(tensor, "to_local", None)
    if to_local is None:
        return tensor
    with torch.no_grad():
        return to_local()
