"""Operator-view FLOP formulas (ATen operator packets), following PyTorch's ``FlopCounterMode`` contract.

Every built-in operator is described once, by a cost function (:mod:`.calls`) in `OPERATOR_COSTS`, assembled here
from one module per operator family:

* :mod:`.pointwise`, :mod:`.reductions`, :mod:`.normalization`, :mod:`.pooling`, :mod:`.backward` (their backward
  kernels, and losses), :mod:`.optimizer`: element and window work, ``minor``;
* :mod:`.dense`, :mod:`.attention`, :mod:`.recurrent`, :mod:`.backward_dense`: dot-product kernels, ``significant``;
* :mod:`.zero_work`: operators that do no floating-point work (`ZERO_WORK_OPERATORS`).

Two views are derived from the one table: `OPERATOR_FORMULAS` (this module) for the operator recorder, and
``FUNCTIONAL_ESTIMATES`` (:mod:`.functional`), the module-view estimate ``(flops, macs, dmas)``.

Entries here override ``torch.utils.flop_counter.flop_registry`` where both define one. The overrides keep
PyTorch's dot-product counts and add what TorchScan's conventions also count: bias additions of ``addmm`` and
convolutions (and their backward's bias gradient), softmax and scaling inside fused attention kernels (and their
backward kernels), and complex/integer dtype rules. Only shapes, dtypes and non-tensor arguments are read, so every
formula works on the ``meta`` device.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from . import (
    attention,
    backward,
    backward_dense,
    dense,
    normalization,
    optimizer,
    pointwise,
    pooling,
    recurrent,
    reductions,
)
from .calls import CostFunction
from .zero_work import ZERO_WORK_OPERATORS

#: Families of element and window work, in the order their packets are listed.
MINOR_FAMILIES = (pointwise.COSTS, reductions.COSTS, normalization.COSTS, pooling.COSTS, backward.COSTS,
                  optimizer.COSTS)
#: Families of dot-product kernels, listed after the others: every packet they price is ``significant``.
DOT_PRODUCT_FAMILIES = (dense.COSTS, attention.COSTS, recurrent.COSTS, backward_dense.COSTS)


def merge_families(families: tuple[dict[Any, CostFunction], ...], zero_work: dict[Any, str]
                   ) -> dict[Any, CostFunction]:
    """One table of every family's packets; ``ValueError`` for a packet priced twice or also listed as zero-work."""
    merged: dict[Any, CostFunction] = {}
    for family in families:
        for packet, cost in family.items():
            if packet in merged or packet in zero_work:
                raise ValueError(f"{packet} is priced by two operator families (or also listed as zero-work)")
            merged[packet] = cost
    return merged


#: ATen packet -> cost of one call. The single source of both the operator view and the functional estimates.
OPERATOR_COSTS: dict[Any, CostFunction] = merge_families((*MINOR_FAMILIES, *DOT_PRODUCT_FAMILIES), ZERO_WORK_OPERATORS)
#: Packets whose cost is dominated by dot products (matmul, convolution, attention, recurrent kernels).
SIGNIFICANT_OPERATORS: set[Any] = {packet for family in DOT_PRODUCT_FAMILIES for packet in family}


# --- the operator view ----------------------------------------------------------------------------------------


def operator_formula(cost: CostFunction) -> Callable[..., Any]:
    """A raw PyTorch-style FLOP formula (``_get_raw = True``), called as ``formula(*args, **kwargs, out_val=out)``:
    ``cost``'s FLOPs, or ``None`` for an unjustified call (the recorder then reports the operator uncounted)."""
    def formula(*args: Any, out_val: Any = None, **kwargs: Any) -> int | None:
        estimate = cost(args, kwargs, out_val)
        return None if estimate is None else estimate.flops
    formula._get_raw = True  # type: ignore[attr-defined]
    return formula


#: Built-in operator formulas, the operator view of `OPERATOR_COSTS`; they override PyTorch's registry.
OPERATOR_FORMULAS: dict[Any, Callable[..., Any]] = {packet: operator_formula(cost)
                                                    for packet, cost in OPERATOR_COSTS.items()}

#: Name parts that mark an unknown operator as a dense product (``_weight_int8pack_mm``, ``my_attention``).
DENSE_NAME_PARTS = frozenset({"matmul", "linear", "conv", "convolution", "attention", "attn", "rnn", "lstm", "gru",
                              "einsum", "dot", "mv", "addmv", "transformer", "gemm", "gemv", "sdpa", "mha"})


def operator_significance(packet: Any) -> str:
    """``significant`` for dot-product kernels (matmul, convolution, attention, recurrent), else ``minor``.

    Built-in packets are classified by their family; an unknown packet by its name (``upsample_linear1d`` is an
    interpolation, not a dense product).
    """
    if packet in SIGNIFICANT_OPERATORS:
        return "significant"
    if packet in OPERATOR_COSTS or packet in ZERO_WORK_OPERATORS:
        return "minor"
    name = str(getattr(packet, "_qualified_op_name", packet)).split("::")[-1].split(".")[-1].lower()
    parts = [part for part in re.split(r"[_\d]+", name) if part]
    dense = any(part.endswith("mm") or part in DENSE_NAME_PARTS for part in parts)
    return "significant" if dense and "upsample" not in parts else "minor"
