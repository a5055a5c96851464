"""The bytes each collective moves per training step: observed from dispatch, and from the closed form of the plan.

**Convention.** A collective's ``bytes`` are the size of its full buffer: the all-gather's output (the unsharded
parameters of one FSDP group, in the dtype they are gathered in), the reduce-scatter's input (the unsharded
gradients, in the reduce dtype) and the all-reduce's tensor. FSDP2 pads dimension 0 of every parameter to a
multiple of the shard group, and the padding travels: it is included. Each rank contributes ``bytes / g`` to an
all-gather and receives ``bytes / g`` from a reduce-scatter over ``g`` ranks; with the ring algorithm each rank sends
``(g - 1) / g * bytes`` for one of them and ``2 (g - 1) / g * bytes`` for an all-reduce over ``g`` ranks
(`ring_bytes_sent`).

**Observed.** FSDP2 (torch 2.13) issues its collectives through ``torch.distributed`` (``all_gather_single``,
``reduce_scatter_single``, ``all_reduce``), which dispatch the ``c10d`` operators ``_allgather_base_``,
``_reduce_scatter_base_`` and ``allreduce_``; traced code (``torch.compile``, DTensor redistribution) uses the
functional ``_c10d_functional`` ones. `CollectiveLog` recognizes both families, with their coalesced forms.

**Formula** (`collective_formula`), per FSDP group (each unit, and the root for the parameters no unit holds), with
``k`` the shard group size and ``P`` the sum over the group's parameters of their dimension-0-padded elements
(``ceil(d0 / k) * k * rest``) times the element size (all-gathered in ``param_dtype``, reduced in ``reduce_dtype``,
else ``param_dtype``, else their own; the reduction covers the parameters that require grad):

- all-gather (``k > 1``): ``P`` once per step for the root and for ``fsdp_no_reshard`` units, twice (forward and
  backward) for units that reshard after forward (``fsdp``, ``hsdp``);
- reduce-scatter (``k > 1``): ``P`` once per step;
- all-reduce (more than one replica: ``hsdp``, ``ddp``): ``P / k`` once per step (the reduce-scatter's output).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import torch
from torch import nn

from ..values import tensors_in
from .memory import operator
from .plan import ParallelPlan
from .sharding import unit_modules

ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE = "all_gather", "reduce_scatter", "all_reduce"
KINDS = (ALL_GATHER, REDUCE_SCATTER, ALL_REDUCE)
CONVENTION = ("bytes: the full buffer of each collective (all-gather output, reduce-scatter input, all-reduce "
              "tensor), FSDP2's dimension-0 padding included; ring_bytes_sent_per_rank: what one rank sends with the "
              "ring algorithm, (g-1)/g of that for an all-gather or reduce-scatter over g ranks, 2(g-1)/g for an "
              "all-reduce")


class Collective(NamedTuple):
    """One dispatched collective: its kind and the bytes of its full buffer."""

    kind: str
    bytes: int


def _nbytes(value: Any) -> int:
    return sum(tensor.numel() * tensor.element_size() for tensor in tensors_in(value))


#: Each collective operator: its kind, and the argument that is its full buffer (``None``: its result).
BUFFERS: dict[tuple[str, str], tuple[str, int | None]] = {
    ("c10d", "_allgather_base_"): (ALL_GATHER, 0),
    ("c10d", "allgather_into_tensor_coalesced_"): (ALL_GATHER, 0),
    ("c10d", "allgather_"): (ALL_GATHER, 0),
    ("c10d", "_reduce_scatter_base_"): (REDUCE_SCATTER, 1),
    ("c10d", "reduce_scatter_tensor_coalesced_"): (REDUCE_SCATTER, 1),
    ("c10d", "reduce_scatter_"): (REDUCE_SCATTER, 1),
    ("c10d", "allreduce_"): (ALL_REDUCE, 0),
    ("c10d", "allreduce_coalesced_"): (ALL_REDUCE, 0),
    ("_c10d_functional", "all_gather_into_tensor"): (ALL_GATHER, None),
    ("_c10d_functional", "all_gather_into_tensor_coalesced"): (ALL_GATHER, None),
    ("_c10d_functional", "reduce_scatter_tensor"): (REDUCE_SCATTER, 0),
    ("_c10d_functional", "reduce_scatter_tensor_coalesced"): (REDUCE_SCATTER, 0),
    ("_c10d_functional", "all_reduce"): (ALL_REDUCE, 0),
    ("_c10d_functional", "all_reduce_"): (ALL_REDUCE, 0),
    ("_c10d_functional", "all_reduce_coalesced"): (ALL_REDUCE, 0),
}


class CollectiveLog:
    """The collectives one rank dispatched, in order; fed with each dispatched operator."""

    def __init__(self) -> None:
        self.buffers = {op: found for (namespace, name), found in BUFFERS.items()
                        if (op := operator(namespace, name)) is not None}
        self.calls: list[Collective] = []

    def record(self, func: Any, args: tuple, kwargs: dict[str, Any], out: Any) -> None:
        found = self.buffers.get(func)
        if found is not None:
            kind, index = found
            self.calls.append(Collective(kind, _nbytes(out if index is None else args[index])))

    def totals(self) -> dict[str, dict[str, int]]:
        return totals(self.calls)


def totals(calls: Iterable[Collective]) -> dict[str, dict[str, int]]:
    """Count and bytes per kind (every kind present, zero when none ran)."""
    found = {kind: {"count": 0, "bytes": 0} for kind in KINDS}
    for call in calls:
        found[call.kind]["count"] += 1
        found[call.kind]["bytes"] += call.bytes
    return found


# -- the closed form ---------------------------------------------------------------------------------------------------


class Group(NamedTuple):
    """One FSDP group: the root or a unit, and the parameters it manages."""

    is_root: bool
    parameters: list[nn.Parameter]


def parameter_groups(model: nn.Module, plan: ParallelPlan) -> list[Group]:
    """The plan's FSDP groups over ``model``'s parameters, as `torchscan.parallel.sharding.shard` makes them: each
    unit, innermost first, takes its parameters that no unit took before; the root takes the rest."""
    taken: set[int] = set()
    groups = []
    for module in [*reversed(unit_modules(model, plan)), model]:
        parameters = [p for p in module.parameters() if id(p) not in taken]
        taken.update(id(p) for p in parameters)
        groups.append(Group(module is model, parameters))
    return groups


def padded_elements(parameter: torch.Tensor, shard_size: int) -> int:
    """Elements of ``parameter`` with dimension 0 padded to a multiple of ``shard_size`` (FSDP2's even shards)."""
    if parameter.dim() == 0:
        return max(1, shard_size)
    rows = parameter.shape[0]
    return math.ceil(rows / shard_size) * shard_size * (parameter.numel() // rows if rows else 0)


def _dtype_size(parameter: torch.Tensor, *choices: torch.dtype | None) -> int:
    """The element size of ``parameter`` cast to the first dtype given (floating parameters only)."""
    dtype = next((choice for choice in choices if choice is not None), None)
    if dtype is None or not parameter.is_floating_point():
        return parameter.element_size()
    return torch.empty((), dtype=dtype, device="meta").element_size()


def _group_collectives(group: Group, plan: ParallelPlan) -> Iterator[Collective]:
    """One group's collectives in one step, from its all-gathered and its reduced full buffers."""
    k = plan.shard_size
    gathered = sum(padded_elements(p, k) * _dtype_size(p, plan.param_dtype) for p in group.parameters)
    reduced = sum(padded_elements(p, k) * _dtype_size(p, plan.reduce_dtype, plan.param_dtype)
                  for p in group.parameters if p.requires_grad)
    if k > 1 and gathered:
        times = 2 if plan.reshard_after_forward and not group.is_root else 1
        yield from [Collective(ALL_GATHER, gathered)] * times
    if k > 1 and reduced:
        yield Collective(REDUCE_SCATTER, reduced)
    if plan.replicate_size > 1 and reduced:
        yield Collective(ALL_REDUCE, reduced // k)


def collective_formula(model: nn.Module, plan: ParallelPlan) -> dict[str, dict[str, int]]:
    """Count and bytes per kind of one training step under ``plan``, from ``model``'s parameters (any device,
    ``meta`` included: only shapes and dtypes are read)."""
    return totals(call for group in parameter_groups(model, plan) for call in _group_collectives(group, plan))


def ring_bytes_sent(totals: dict[str, dict[str, int]], plan: ParallelPlan) -> dict[str, int]:
    """What one rank sends per step with the ring algorithm, per kind (see the module's convention)."""
    k, r = plan.shard_size, plan.replicate_size
    factors = {ALL_GATHER: (k - 1) / k, REDUCE_SCATTER: (k - 1) / k, ALL_REDUCE: 2 * (r - 1) / r}
    return {kind: round(totals[kind]["bytes"] * factors[kind]) for kind in KINDS}


def collectives_section(log: CollectiveLog, formula: dict[str, dict[str, int]], plan: ParallelPlan
                        ) -> dict[str, Any]:
    """The report's ``collectives``: observed and formula per kind, with the ring algorithm's bytes per rank."""
    observed = log.totals()
    return {"convention": CONVENTION, "unit": "bytes",
            "observed": {kind: {**observed[kind], "ring_bytes_sent_per_rank": sent}
                         for kind, sent in ring_bytes_sent(observed, plan).items()},
            "formula": {kind: {**formula[kind], "ring_bytes_sent_per_rank": sent}
                        for kind, sent in ring_bytes_sent(formula, plan).items()},
            "matches": observed == formula}
