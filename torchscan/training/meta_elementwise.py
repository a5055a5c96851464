"""Element-wise operators on ``meta`` tensors, answered without running their meta kernels again.

The optimizer step runs on ``meta`` stand-ins of the parameters (`torchscan.training.step`), twice for the steady
state. Many element-wise meta kernels are PyTorch's Python references (``torch._refs``): ``lerp_``, ``addcmul_``,
``sqrt`` and ``div`` cost 0.1-0.3 ms a call on meta, more than the real arithmetic on the CPU, and AdamW calls them
for every parameter. On meta there is no data, so a valid element-wise call's whole result is its metadata:

* an in-place operator (``add_``) returns its first argument, unchanged in shape, dtype and storage (and an in-place
  ``_foreach_`` operator returns nothing);
* an out-of-place operator (``sqrt``, ``div``, and ``zeros_like``, which the new state starts from) returns a new tensor
  whose shape, strides and dtype follow from the operator, the metadata of its tensor arguments and the types (not the
  values) of its scalar arguments. The first call of such a signature runs the meta kernel, which also checks the call;
  later calls of the same signature get a new tensor of the recorded metadata.

`MetaElementwise` answers both; modes above it (the operator recorder, the memory timeline) still see every
operator and every new tensor, so reports are the same as with the kernels run.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_POINTWISE = torch.Tag.pointwise
_SCALAR_TYPES = (bool, int, float, complex)
_VALUE_TYPES = (str, torch.dtype, torch.memory_format, torch.layout, torch.device)
# Not element-wise, but a new tensor whose metadata follows from its argument's: the optimizer's new state.
_FOLLOWS_ITS_ARGUMENT = frozenset({"aten::empty_like", "aten::zeros_like"})
IN_PLACE, OUT_OF_PLACE, OTHER = "in_place", "out_of_place", "other"


class MetaElementwise(TorchDispatchMode):
    """Answers element-wise operators on meta tensors from their metadata (see the module). One instance serves
    the optimizer steps of one analysis: the metadata it records lives as long as it does."""

    def __init__(self) -> None:
        super().__init__()
        self._results: dict[tuple, tuple[torch.Size, tuple[int, ...], torch.dtype]] = {}

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # PyTorch would otherwise wrap __torch_dispatch__ to import torch._dynamo on first use (about a second).
        return False

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict[str, Any] | None = None
                           ) -> Any:
        kind = _kind(func)
        if kind == IN_PLACE and args and _all_meta(args[0]):
            return args[0] if isinstance(args[0], torch.Tensor) else None
        if kind == OUT_OF_PLACE:
            return self._out_of_place(func, args, kwargs or {})
        return func(*args, **(kwargs or {}))

    def _out_of_place(self, func: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        key = _signature(func, args, kwargs)
        if key is None:
            return func(*args, **kwargs)
        known = self._results.get(key)
        if known is not None:
            shape, stride, dtype = known
            return torch.empty_strided(shape, stride, dtype=dtype, device="meta")
        result = func(*args, **kwargs)
        if isinstance(result, torch.Tensor) and result.device.type == "meta":
            self._results[key] = (result.shape, result.stride(), result.dtype)
        return result


@functools.cache
def _kind(func: Any) -> str:
    """`IN_PLACE`, `OUT_OF_PLACE` or `OTHER` for an operator overload, read from its schema once."""
    schema = func._schema
    if schema.name in _FOLLOWS_ITS_ARGUMENT:
        return OUT_OF_PLACE
    if schema.name.startswith("aten::_foreach_") and schema.name.endswith("_"):
        return IN_PLACE if _foreach_in_place(schema) else OTHER
    if _POINTWISE not in func.tags or len(schema.returns) != 1 or not schema.arguments:
        return OTHER
    if schema.returns[0].alias_info is None:
        return OUT_OF_PLACE if _returns_new_tensor(schema) else OTHER
    return IN_PLACE if _returns_first_argument(schema) else OTHER


def _foreach_in_place(schema: Any) -> bool:
    """An in-place foreach operator (``_foreach_add_``): writes its first argument, a list, and returns nothing."""
    return not schema.returns and bool(schema.arguments) and _written(schema.arguments[0])


def _returns_new_tensor(schema: Any) -> bool:
    """An out-of-place operator: one new tensor, no argument written (``out=`` overloads write theirs)."""
    writes = any(_written(argument) for argument in schema.arguments)
    return isinstance(schema.returns[0].type, torch.TensorType) and not writes


def _returns_first_argument(schema: Any) -> bool:
    """The operator writes its first argument and returns it (``add_``)."""
    alias, first = schema.returns[0].alias_info, schema.arguments[0]
    return alias.is_write and _written(first) and first.alias_info.before_set == alias.before_set


def _all_meta(value: Any) -> bool:
    """A meta tensor, or a non-empty list of them (the first argument of a foreach operator)."""
    if isinstance(value, torch.Tensor):
        return value.device.type == "meta"
    return isinstance(value, (list, tuple)) and bool(value) and all(
        isinstance(item, torch.Tensor) and item.device.type == "meta" for item in value)


def _written(argument: Any) -> bool:
    alias = argument.alias_info
    return alias is not None and alias.is_write


def _signature(func: Any, args: tuple, kwargs: dict[str, Any]) -> tuple | None:
    """What decides an element-wise result's metadata: the operator, each tensor's shape, strides and dtype, each
    scalar's type, and the other arguments' values; ``None`` (run the kernel) when an argument is a tensor off
    meta, a list, or anything else not known to leave the metadata unchanged."""
    parts: list[Any] = [func]
    for name, value in (*((None, value) for value in args), *kwargs.items()):
        part = _metadata_part(value)
        if part is None:
            return None
        parts.append((name, part))
    return tuple(parts)


def _metadata_part(value: Any) -> Any:
    """What of one argument decides the result's metadata, or ``None`` when it is not known to."""
    if isinstance(value, torch.Tensor):
        return (value.shape, value.stride(), value.dtype) if value.device.type == "meta" else None
    if isinstance(value, _SCALAR_TYPES):
        return type(value)
    if value is None or isinstance(value, _VALUE_TYPES):
        return ("value", value)
    return None
