"""The parallel plan: how a training step is spread over devices, parsed from plain data and checked once.

A plan is written as a mapping (a TOML table, a JSON object, a dict)::

    {"strategy": "fsdp", "world_size": 8,
     "mixed_precision": {"param_dtype": "bfloat16", "reduce_dtype": "float32"},
     "units": [LlamaDecoderLayer]}

and `parse_plan` turns it into a frozen `ParallelPlan`, or raises a ``ValueError`` (a wrong value) or a
``TypeError`` (a wrong type) whose message names the key and says what was expected. Everything downstream takes
an already-checked plan.

Strategies (all run on PyTorch's FSDP2, ``torch.distributed.fsdp.fully_shard``):

- ``fsdp``: parameters, gradients and optimizer state sharded over all ``world_size`` ranks; each unit's parameters
  are all-gathered for its forward, freed after it and all-gathered again for its backward
  (``reshard_after_forward=True``);
- ``fsdp_no_reshard``: the same, but the parameters all-gathered for the forward stay until the backward
  (``reshard_after_forward=False``, ZeRO-2-like: one all-gather per unit per step, more memory);
- ``hsdp``: sharded within groups of ``shard_group_size`` ranks and replicated across the
  ``world_size / shard_group_size`` groups (a 2-D mesh: replicate, shard); gradients are reduce-scattered within the
  group and all-reduced across groups;
- ``ddp``: replicated on every rank, gradients all-reduced. `DistributedDataParallel` itself cannot run on fake
  tensors (its C++ reducer reads tensor data when it is built), so ``ddp`` is FSDP2 on a (world_size, 1) mesh: a
  shard group of one rank, which is FSDP2's own replication (the engine behind
  ``torch.distributed._composable.replicate``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .plan_keys import DTYPE_ALIASES, KEYS, PRECISION_KEYS, STRATEGIES

#: The dtype names a plan may use (``torch.`` in front is accepted too); mixed precision is about floating point.
DTYPE_NAMES: dict[str, torch.dtype] = {alias: getattr(torch, name) for alias, name in DTYPE_ALIASES.items()}


@dataclass(frozen=True)
class ParallelPlan:
    """A checked parallel plan. ``units`` holds module classes, or class names (``"LlamaDecoderLayer"``) matched
    against the name of each module's class; None means the default units (`torchscan.parallel.sharding`)."""

    strategy: str
    world_size: int
    shard_group_size: int | None = None
    param_dtype: torch.dtype | None = None
    reduce_dtype: torch.dtype | None = None
    output_dtype: torch.dtype | None = None
    units: tuple[type | str, ...] | None = None
    activation_checkpointing: bool = False  # each unit's forward is recomputed in the backward

    @property
    def shard_size(self) -> int:
        """Ranks that share one copy of the parameters (each holds 1/shard_size of it): the world for fsdp, the
        group for hsdp, 1 for ddp."""
        if self.strategy == "ddp":
            return 1
        if self.strategy == "hsdp":
            assert self.shard_group_size is not None, "parse_plan requires it for hsdp"
            return self.shard_group_size
        return self.world_size

    @property
    def replicate_size(self) -> int:
        """Copies of the parameters across the world (1 for fsdp)."""
        return self.world_size // self.shard_size

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        """The device mesh: 1-D for fsdp, (replicate, shard) for hsdp and ddp."""
        if self.strategy in ("fsdp", "fsdp_no_reshard"):
            return (self.world_size,)
        return (self.replicate_size, self.shard_size)

    @property
    def reshard_after_forward(self) -> bool:
        """Whether each unit frees its all-gathered parameters after its forward (all-gathering them again for the
        backward); replication has nothing to reshard."""
        return self.strategy in ("fsdp", "hsdp")

    def describe(self) -> dict[str, Any]:
        """The plan as plain data for a report (dtypes by name, unit classes by qualified name)."""
        return {"strategy": self.strategy, "world_size": self.world_size, "shard_group_size": self.shard_group_size,
                "shard_size": self.shard_size, "replicate_size": self.replicate_size,
                "reshard_after_forward": self.reshard_after_forward,
                "mixed_precision": {key: None if dtype is None else str(dtype).removeprefix("torch.")
                                    for key, dtype in (("param_dtype", self.param_dtype),
                                                       ("reduce_dtype", self.reduce_dtype),
                                                       ("output_dtype", self.output_dtype))},
                "units": None if self.units is None else [_unit_name(unit) for unit in self.units],
                "activation_checkpointing": self.activation_checkpointing}


def parse_plan(spec: Mapping[str, Any] | ParallelPlan) -> ParallelPlan:
    """``spec`` checked and frozen into a `ParallelPlan` (a plan passes through unchanged).

    Keys: ``strategy`` (one of `STRATEGIES`), ``world_size`` (an int >= 1), ``shard_group_size`` (hsdp only, and
    required there: an int >= 1 that divides ``world_size``), ``mixed_precision`` (a mapping of ``param_dtype``,
    ``reduce_dtype``, ``output_dtype`` to floating dtypes or their names, or a ``MixedPrecisionPolicy``) and
    ``units`` (a non-empty list of ``nn.Module`` subclasses or class names), ``activation_checkpointing`` (a bool:
    each unit's forward is recomputed in the backward).
    """
    if isinstance(spec, ParallelPlan):
        return spec
    if not isinstance(spec, Mapping):
        raise TypeError(f"a parallel plan must be a mapping with keys {', '.join(KEYS)}, got {type(spec).__name__}")
    unknown = [key for key in spec if key not in KEYS]
    if unknown:
        raise ValueError(f"parallel plan: unknown key {unknown[0]!r}; expected keys: {', '.join(KEYS)}")
    strategy = _strategy(spec.get("strategy"))
    world_size = _positive_int("world_size", spec.get("world_size"))
    group = _shard_group_size(strategy, world_size, spec.get("shard_group_size"))
    precision = _mixed_precision(spec.get("mixed_precision"))
    checkpointing = spec.get("activation_checkpointing", False)
    if not isinstance(checkpointing, bool):
        raise TypeError(f"parallel plan: 'activation_checkpointing' must be a bool, got {type(checkpointing).__name__}")
    return ParallelPlan(strategy, world_size, group, precision.get("param_dtype"), precision.get("reduce_dtype"),
                        precision.get("output_dtype"), _units(spec.get("units")), checkpointing)


def _strategy(value: Any) -> str:
    if value is None:
        raise ValueError(f"parallel plan: 'strategy' is required, one of {', '.join(map(repr, STRATEGIES))}")
    if not isinstance(value, str) or value not in STRATEGIES:
        raise ValueError(f"parallel plan: 'strategy' must be one of {', '.join(map(repr, STRATEGIES))}, got {value!r}")
    return value


def _positive_int(key: str, value: Any) -> int:
    if value is None:
        raise ValueError(f"parallel plan: {key!r} is required, an int >= 1")
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"parallel plan: {key!r} must be an int >= 1, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"parallel plan: {key!r} must be an int >= 1, got {value}")
    return value


def _shard_group_size(strategy: str, world_size: int, value: Any) -> int | None:
    """Required for hsdp (and dividing the world), refused elsewhere."""
    if strategy != "hsdp":
        if value is not None:
            raise ValueError(f"parallel plan: 'shard_group_size' applies to strategy 'hsdp' only, not {strategy!r}")
        return None
    if value is None:
        raise ValueError("parallel plan: strategy 'hsdp' requires 'shard_group_size', the ranks that share one "
                         "sharded copy of the parameters (an int >= 1 that divides world_size)")
    size = _positive_int("shard_group_size", value)
    if world_size % size:
        raise ValueError(f"parallel plan: 'shard_group_size' must divide world_size ({world_size}), got {size}")
    return size


def _mixed_precision(value: Any) -> dict[str, torch.dtype | None]:
    """The policy's dtypes from a mapping or a ``MixedPrecisionPolicy``; none given means full precision."""
    if value is None:
        return {}
    if all(hasattr(value, key) for key in PRECISION_KEYS) and not isinstance(value, Mapping):
        value = {key: getattr(value, key) for key in PRECISION_KEYS}
    if not isinstance(value, Mapping):
        raise TypeError(f"parallel plan: 'mixed_precision' must be a mapping with keys {', '.join(PRECISION_KEYS)} "
                        f"or a MixedPrecisionPolicy, got {type(value).__name__}")
    unknown = [key for key in value if key not in PRECISION_KEYS]
    if unknown:
        raise ValueError(f"parallel plan: unknown key 'mixed_precision.{unknown[0]}'; expected keys: "
                         f"{', '.join(PRECISION_KEYS)}")
    return {key: _dtype(f"mixed_precision.{key}", value.get(key)) for key in PRECISION_KEYS}


def _dtype(key: str, value: Any) -> torch.dtype | None:
    if value is None:
        return None
    if isinstance(value, str):
        dtype = DTYPE_NAMES.get(value.removeprefix("torch."))
        if dtype is None:
            raise ValueError(f"parallel plan: {key!r} must name a floating dtype ({', '.join(DTYPE_NAMES)}), "
                             f"got {value!r}")
        return dtype
    if not isinstance(value, torch.dtype):
        raise TypeError(f"parallel plan: {key!r} must be a torch dtype or its name, got {type(value).__name__}")
    if not value.is_floating_point:
        raise ValueError(f"parallel plan: {key!r} must be a floating dtype, got {value}")
    return value


def _units(value: Any) -> tuple[type | str, ...] | None:
    if value is None:
        return None
    if isinstance(value, (str, type)) or not isinstance(value, (list, tuple)) or not value:
        raise TypeError("parallel plan: 'units' must be a non-empty list of nn.Module subclasses or class names, "
                        f"got {type(value).__name__}")
    for unit in value:
        if not (isinstance(unit, str) and unit) and not (isinstance(unit, type) and issubclass(unit, nn.Module)):
            raise TypeError("parallel plan: each of 'units' must be an nn.Module subclass or a class name, got "
                            f"{unit!r}")
    return tuple(value)


def _unit_name(unit: type | str) -> str:
    return unit if isinstance(unit, str) else f"{unit.__module__}.{unit.__qualname__}"
