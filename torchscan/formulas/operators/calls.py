"""What every operator-cost family shares: the cost of one call, packet lookup, and readers of a dispatched call.

A *cost function* takes the raw ``(args, kwargs, out)`` of one dispatched ATen call and returns an `OpCost`,
or ``None`` when the call is outside what its formula justifies. Each family module (:mod:`.pointwise`,
:mod:`.dense`, ...) fills a `CostTable` of them; :mod:`.table` assembles the tables. Readers use
only shapes, dtypes and non-tensor arguments, so they work on the ``meta`` device.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

import torch

from ...values import operand_dtypes
from .elementwise import dtype_kind

aten = torch.ops.aten


class OpCost(NamedTuple):
    """The work of one operator call: FLOPs, and the MACs of its dot products (0 for everything else)."""

    flops: int
    macs: int = 0


CostFunction = Callable[[tuple, dict, Any], "OpCost | None"]
NO_WORK = OpCost(0)


# --- packets --------------------------------------------------------------------------------------------------


def packet(name: str) -> Any:
    """The ATen packet ``name`` of the installed PyTorch; ``ValueError`` naming it when there is none."""
    found = getattr(aten, name, None)
    if found is None:
        raise ValueError(f"aten.{name} is not an operator of the installed PyTorch {torch.__version__}: remove it "
                         "from the table or make its registration depend on the version")
    return found


def packets(names: Iterable[str], *, inplace: bool = False) -> Iterator[Any]:
    """The packets of ``names`` (and their ``name_`` in-place twins if asked); each must exist."""
    for name in names:
        yield packet(name)
        if inplace:
            yield packet(name + "_")


class CostTable(dict[Any, CostFunction]):
    """One operator family's packets -> cost of one call."""

    def register(self, names: Iterable[str], cost: CostFunction, *, inplace: bool = False) -> None:
        """Price every packet of ``names`` (and its in-place twin if asked) with ``cost``.

        Raises ``ValueError`` for a name that is not an operator of the installed PyTorch and for a packet that
        this table already prices: every entry is written once, on purpose.
        """
        for found in packets(names, inplace=inplace):
            if found in self:
                raise ValueError(f"{found} is registered twice in this cost table")
            self[found] = cost


# --- reading a call -------------------------------------------------------------------------------------------


def argument(args: tuple, kwargs: dict, index: int, name: str, default: Any = None) -> Any:
    """Argument ``name`` of schema position ``index``, passed positionally or by keyword."""
    if len(args) > index:
        return args[index]
    return kwargs.get(name, default)


def first_tensor(value: Any) -> torch.Tensor | None:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)):
        return next((item for item in value if isinstance(item, torch.Tensor)), None)
    return None


def output_tensor(out: Any) -> torch.Tensor:
    """The first tensor of an operator's output, for the formulas of operators that return one."""
    tensor = first_tensor(out)
    if tensor is None:
        raise TypeError(f"the operator returned no tensor (a {type(out).__name__})")
    return tensor


def numel(value: Any) -> int:
    tensor = first_tensor(value)
    return 0 if tensor is None else tensor.numel()


def operand_kind(args: tuple, kwargs: dict, out: Any) -> str | None:
    """The arithmetic of a call: ``complex`` if any operand is complex, else ``real`` if any is floating
    point, else ``integral``; ``None`` if some tensor has a dtype without a convention (quantized)."""
    dtypes, complex_scalar = operand_dtypes((*args, *kwargs.values(), out) if kwargs else (*args, out))
    kinds = {dtype_kind(dtype) for dtype in dtypes}
    if None in kinds:
        return None
    if complex_scalar or "complex" in kinds:
        return "complex"
    return "real" if "real" in kinds else "integral"


def not_one(value: Any) -> bool:
    """A scaling factor that costs a multiply: given and not the number 1."""
    return value is not None and not (isinstance(value, (int, float)) and value == 1)


def affine_ops(*parameters: Any) -> int:
    """Per-element operations of the optional affine parameters (scale, shift, biases) that are present."""
    return sum(parameter is not None for parameter in parameters)


def real_only(cost: CostFunction) -> CostFunction:
    """``cost`` for real floating-point calls; ``None`` (no stated count) for any other dtype."""
    def checked(args: tuple, kwargs: dict, out: Any) -> OpCost | None:
        return cost(args, kwargs, out) if operand_kind(args, kwargs, out) == "real" else None
    return checked
