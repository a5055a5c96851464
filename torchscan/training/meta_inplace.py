"""In-place element-wise operators on ``meta`` tensors, answered without their meta kernels.

The optimizer step runs on ``meta`` stand-ins of the parameters (`torchscan.training.step`), twice for the steady
state. Many element-wise meta kernels are PyTorch's Python references (``torch._refs``): ``lerp_``, ``addcmul_`` and
``addcdiv_`` cost 0.2-0.3 ms a call on meta, more than the real arithmetic on the CPU, and AdamW calls them for every
parameter. An in-place element-wise operator returns its first argument, unchanged in shape, dtype and storage, so
on meta, where there is no data, that is the whole of its result for a valid call: `MetaInPlace` returns it without
running the kernel (and returns nothing for an in-place ``_foreach_`` operator, whose result is its list). Modes
above it (the operator recorder, the memory timeline) still see every operator.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_POINTWISE = torch.Tag.pointwise


class MetaInPlace(TorchDispatchMode):
    """Answers in-place element-wise operators on meta tensors with their first argument (see the module)."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # PyTorch would otherwise wrap __torch_dispatch__ to import torch._dynamo on first use (about a second).
        return False

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict[str, Any] | None = None
                           ) -> Any:
        if args and _writes_first_argument(func):
            first = args[0]
            if isinstance(first, torch.Tensor) and first.device.type == "meta":
                return first
            if isinstance(first, (list, tuple)) and first and all(
                    isinstance(item, torch.Tensor) and item.device.type == "meta" for item in first):
                return None
        return func(*args, **(kwargs or {}))


def _writes_first_argument(func: Any) -> bool:
    """An element-wise operator that writes its first argument and returns it (``add_``), or an in-place foreach
    operator (``_foreach_add_``), which returns nothing."""
    schema = func._schema
    if schema.name.startswith("aten::_foreach_") and schema.name.endswith("_"):
        return not schema.returns and bool(schema.arguments) and _written(schema.arguments[0])
    if _POINTWISE not in func.tags or len(schema.returns) != 1 or not schema.arguments:
        return False
    alias = schema.returns[0].alias_info
    return alias is not None and alias.is_write and _written(schema.arguments[0]) and \
        schema.arguments[0].alias_info.before_set == alias.before_set


def _written(argument: Any) -> bool:
    alias = argument.alias_info
    return alias is not None and alias.is_write
