"""`MetaElementwise`: element-wise operators on meta answered from metadata, exactly as their meta kernels would."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from torchscan.training.meta_elementwise import MetaElementwise


class KernelCalls(TorchDispatchMode):
    """Below `MetaElementwise`: counts the operators that reach the kernels."""

    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict[str, Any] | None = None
                           ) -> Any:
        self.names.append(str(func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))


def _metadata(tensor: torch.Tensor) -> tuple:
    return tensor.shape, tensor.stride(), tensor.dtype, tensor.device


CALLS = {
    "sqrt of a transposed tensor": lambda a, b: a.t().sqrt(),
    "division by a float": lambda a, b: a / 3.5,
    "integer division promotes": lambda a, b: a.to(torch.int64) / 2,
    "comparison gives bool": lambda a, b: a < b,
    "broadcast": lambda a, b: a * b[:1],
    "rounding mode": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "mixed dtypes": lambda a, b: a.to(torch.bfloat16) + b,
    "new state like a transposed tensor": lambda a, b: torch.zeros_like(a.t(), dtype=torch.bfloat16),
}


@pytest.mark.parametrize("call", CALLS.values(), ids=list(CALLS))
def test_a_repeated_signature_gets_the_kernels_metadata_without_the_kernel(call: Any):
    a, b, c, d = (torch.empty(4, 6, device="meta") for _ in range(4))
    expected = call(a, b)
    kernels = KernelCalls()
    with kernels, MetaElementwise():
        first_answer = call(a, b)
        reached = len(kernels.names)
        second_answer = call(c, d)
    assert _metadata(first_answer) == _metadata(second_answer) == _metadata(expected)
    assert second_answer is not first_answer
    repeated = kernels.names[reached:]
    assert [name for name in repeated if name not in {"_to_copy", "t", "slice", "empty_strided"}] == [], \
        "the element-wise kernel ran again for a signature already answered"


def test_in_place_operators_return_their_first_argument_and_foreach_returns_nothing():
    a, b = torch.empty(3, device="meta"), torch.empty(3, device="meta")
    kernels = KernelCalls()
    with kernels, MetaElementwise():
        assert a.add_(b) is a
        torch._foreach_mul_([a, b], 2.0)
    assert kernels.names == []


def test_a_different_scalar_type_or_a_tensor_off_meta_runs_the_kernel():
    a = torch.empty(5, dtype=torch.int32, device="meta")
    kernels = KernelCalls()
    with kernels, MetaElementwise():
        assert (a * 2).dtype == torch.int32
        assert (a * 2.5).dtype == torch.float32
        cpu = torch.ones(2)
        assert torch.equal(cpu.sqrt(), cpu)
    assert kernels.names.count("mul") == 2 and "sqrt" in kernels.names
