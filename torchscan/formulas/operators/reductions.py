"""Operator costs of reductions: softmax, sums and means, extrema, statistics, norms, scans and accumulations.

A reduction over groups of n elements costs the module view's per-group count (:mod:`.elementwise`), where
the groups are the output elements; softmax is the activation table's per-slice count along its dimension.
Integer and boolean reductions are 0 FLOPs; complex ones only where a count is stated.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from ..conventions import FLOPS_PER_SLICE
from .calls import NO_WORK, CostFunction, CostTable, OpCost, argument, numel, operand_kind
from .elementwise import ARITHMETIC_FLOPS, COMPLEX_REDUCTION_FLOPS, REDUCTION_FLOPS, vector_norm_flops
from .pointwise import pointwise

#: Reduction packets -> cost of one call.
COSTS = CostTable()


# --- softmax --------------------------------------------------------------------------------------------------


def _softmax(family: str, dim_index: int = 1) -> CostFunction:
    """The activation table's per-slice softmax formula along ``dim`` (the last dimension when omitted)."""
    per_slice = FLOPS_PER_SLICE[family]

    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        if operand_kind(args, kwargs, out) != "real":
            return None
        source = args[0]
        dim = argument(args, kwargs, dim_index, "dim")
        length = source.shape[-1 if dim is None else dim] if source.dim() else 1
        return OpCost(source.numel() // length * per_slice(length)) if length else NO_WORK
    return cost


COSTS.register(["_softmax", "softmax", "_safe_softmax"], _softmax("softmax"))
COSTS.register(["_log_softmax", "log_softmax"], _softmax("log_softmax"))
COSTS.register(["_masked_softmax"], _softmax("softmax", dim_index=2))  # masking is a free selection


# --- reductions -----------------------------------------------------------------------------------------------


def _grouped(per_group: Callable[[int], int], complex_per_group: Callable[[int], int] | None = None
             ) -> Callable[[torch.Tensor, int, str], OpCost | None]:
    """Cost of reducing ``total`` elements into ``groups`` equal groups."""
    def cost(source: torch.Tensor, groups: int, kind: str) -> OpCost | None:
        if kind == "integral":
            return NO_WORK
        formula = per_group if kind == "real" else complex_per_group
        if formula is None:
            return None
        total = source.numel()
        return OpCost(groups * formula(total // groups)) if total and groups else NO_WORK
    return cost


def _reduction(key: str) -> CostFunction:
    """A reduction whose groups are the output elements (keepdim or not, one dim or many)."""
    grouped = _grouped(REDUCTION_FLOPS[key], COMPLEX_REDUCTION_FLOPS.get(key))

    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        kind = operand_kind(args, kwargs, out)
        return None if kind is None else grouped(args[0], numel(out), kind)
    return cost


_ELEMENTWISE_EXTREMUM = pointwise(ARITHMETIC_FLOPS["maximum"])
_EXTREMUM_REDUCTION = _reduction("extremum")


def _extremum(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    """``max``/``min``: a reduction, or elementwise (``.other``) when the second argument is a tensor."""
    if len(args) > 1 and isinstance(args[1], torch.Tensor):
        return _ELEMENTWISE_EXTREMUM(args, kwargs, out)
    return _EXTREMUM_REDUCTION(args, kwargs, out)


def _vector_norm(*, fixed_order: float | None = None) -> CostFunction:
    """A p-norm over the reduced groups; the order is argument 1 (``ord`` or ``p``, 2 when omitted or None)."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        order = args[1] if len(args) > 1 else kwargs.get("ord", kwargs.get("p"))
        order = fixed_order if fixed_order is not None else 2 if order is None else order
        kind = operand_kind(args, kwargs, out)
        return None if kind is None else _grouped(lambda n: vector_norm_flops(order, n))(args[0], numel(out), kind)
    return cost


def _scan(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    """cumsum/cumprod: n - 1 operations along each line of the scanned dimension."""
    kind = operand_kind(args, kwargs, out)
    if kind != "real":
        return NO_WORK if kind == "integral" else None
    source = args[0]
    length = source.shape[argument(args, kwargs, 1, "dim")] if source.dim() else 1
    return OpCost(source.numel() - source.numel() // length) if length else NO_WORK


def _per_input_element(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
    """One comparison per input element (``nonzero`` tests, ``equal``)."""
    kind = operand_kind(args, kwargs, None)
    if kind != "real":
        return NO_WORK if kind == "integral" else None
    return OpCost(args[0].numel())


COSTS.register(["sum", "nansum"], _reduction("sum"))
COSTS.register(["mean", "nanmean"], _reduction("mean"))
COSTS.register(["prod"], _reduction("prod"))
COSTS.register(["amax", "amin", "argmax", "argmin"], _reduction("extremum"))
COSTS.register(["max", "min"], _extremum)
COSTS.register(["aminmax"], _reduction("aminmax"))
COSTS.register(["any", "all"], _reduction("any_all"))
COSTS.register(["var", "var_mean"], _reduction("var"))
COSTS.register(["std", "std_mean"], _reduction("std"))
COSTS.register(["logsumexp"], _reduction("logsumexp"))
COSTS.register(["linalg_vector_norm", "norm"], _vector_norm())
COSTS.register(["frobenius_norm"], _vector_norm(fixed_order=2))
COSTS.register(["cumsum", "cumprod"], _scan, inplace=True)
COSTS.register(["nonzero", "equal"], _per_input_element)


# --- accumulations --------------------------------------------------------------------------------------------


def _accumulate(source_index: int, source_name: str, flag_index: int | None = None) -> CostFunction:
    """index_add / scatter_add / index_put(accumulate=True): one addition per source element."""
    def cost(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        kind = operand_kind(args, kwargs, out)
        if flag_index is not None and not argument(args, kwargs, flag_index, "accumulate", False):
            return NO_WORK
        if kind != "real":
            return NO_WORK if kind == "integral" else None
        return OpCost(argument(args, kwargs, source_index, source_name).numel())
    return cost


COSTS.register(["index_add"], _accumulate(3, "source"), inplace=True)
COSTS.register(["scatter_add"], _accumulate(3, "src"), inplace=True)
COSTS.register(["index_put", "_index_put_impl"], _accumulate(2, "values", flag_index=3), inplace=True)
