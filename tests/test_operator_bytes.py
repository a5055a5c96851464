"""Operator bytes (the unfused model of `torchscan.operator_bytes`): each rule against a hand count, and the report's
per-call, per-operator and model figures."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torchscan_testing import analyze, analyze_call

from torchscan.operator_bytes import BytePlan, byte_plan, compute_dtype

aten = torch.ops.aten
F32 = 4  # bytes per float32 element


class Calls(TorchDispatchMode):
    """Every dispatched call of a workload as ``(overload, args, kwargs, out)``."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False  # as the recorder: no lazy import of torch._dynamo on first use (about a second)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.calls.append((func, args, kwargs, out))
        return out


def bytes_of(workload, overload) -> int | None:
    """The bytes `BytePlan` gives the (last) call of ``overload`` in ``workload()``."""
    with Calls() as mode:
        workload()
    func, args, kwargs, out = [call for call in mode.calls if call[0] is overload][-1]
    return byte_plan(func).bytes(args, kwargs, out)


x, y = torch.ones(4, 8), torch.ones(4, 8)
ELEMENTS = 4 * 8


@pytest.mark.parametrize(("workload", "overload", "expected"), [
    # reads every argument, writes the new tensor: a + b + out
    (lambda: x + y, aten.add.Tensor, 3 * ELEMENTS * F32),
    # x * x is handed x twice: read twice
    (lambda: x * x, aten.mul.Tensor, 3 * ELEMENTS * F32),
    # addmm(bias[16], input[4, 8], weight.t()[8, 16]) -> out[4, 16]
    (lambda: torch.addmm(torch.ones(16), x, torch.ones(16, 8).t()), aten.addmm.default, (16 + 32 + 128 + 64) * F32),
    # in place: self read and written once, other read, the returned self not again
    (lambda: x.clone().add_(y), aten.add_.Tensor, 3 * ELEMENTS * F32),
    # out=: the out argument is written, not read
    (lambda: torch.add(x, y, out=torch.empty(4, 8)), aten.add.out, 3 * ELEMENTS * F32),
    # a copy's destination is overwritten, not read
    (lambda: torch.empty(4, 8).copy_(x), aten.copy_.default, 2 * ELEMENTS * F32),
    # views move nothing
    (lambda: x.view(32), aten.view.default, 0),
    (lambda: x.t(), aten.t.default, 0),
    (lambda: x.split(2), aten.split.Tensor, 0),
    # uninitialized allocations move nothing; fills write only
    (lambda: torch.empty(4, 8), aten.empty.memory_format, 0),
    (lambda: torch.zeros(4, 8), aten.zeros.default, ELEMENTS * F32),
    (lambda: torch.zeros_like(x), aten.zeros_like.default, ELEMENTS * F32),
    (lambda: torch.ones(4, 8).fill_(2.0), aten.fill_.Scalar, ELEMENTS * F32),
    # cat reads each input and writes the result
    (lambda: torch.cat([x, y, x]), aten.cat.default, 6 * ELEMENTS * F32),
    # an embedding reads its indices and the looked-up rows only: 3 int64 ids, 3 rows of 8 read and written
    (lambda: nn.functional.embedding(torch.tensor([1, 2, 3]), torch.ones(100, 8)), aten.embedding.default,
     3 * 8 + 2 * 3 * 8 * F32),
    # an in-place scatter writes where its values land: index (2 int64) and source (2 x 8) read, 2 x 8 written
    (lambda: torch.zeros(100, 8).index_copy_(0, torch.tensor([5, 7]), torch.ones(2, 8)), aten.index_copy_.default,
     2 * 8 + 2 * 2 * 8 * F32),
    # an accumulating scatter also reads where it writes
    (lambda: torch.zeros(100, 8).index_add_(0, torch.tensor([5, 7]), torch.ones(2, 8)), aten.index_add_.default,
     2 * 8 + 3 * 2 * 8 * F32),
    # a convolution reads input, weight and bias (its stride, padding and groups are no tensors) and writes the output
    (lambda: nn.functional.conv2d(torch.ones(1, 2, 5, 5), torch.ones(3, 2, 3, 3), torch.ones(3)),
     aten.convolution.default, (50 + 54 + 3 + 27) * F32),
    # a bfloat16 product: 2 bytes per element
    (lambda: x.bfloat16() @ y.bfloat16().t(), aten.mm.default, (32 + 32 + 16) * 2),
])
def test_each_rule_counts_the_bytes_by_hand(workload, overload, expected) -> None:
    assert bytes_of(workload, overload) == expected


def test_an_overload_has_one_byte_plan_read_from_its_schema() -> None:
    plan = byte_plan(aten.convolution.default)
    assert byte_plan(aten.convolution.default) is plan  # shared by every analysis: the schema never changes
    assert plan.positional_tensors == ((0, 1), (1, 1), (2, 1))  # input, weight, bias; each read once
    assert byte_plan(aten.add_.Tensor).positional_tensors == ((0, 2), (1, 1))  # self read and written


def test_a_tensor_without_a_plain_size_makes_the_bytes_unknown() -> None:
    sparse = torch.eye(4).to_sparse()
    assert BytePlan(aten.add.Tensor, aten.add).bytes((sparse, sparse), {}, sparse) is None


def test_the_compute_dtype_is_the_first_floating_argument_else_the_output() -> None:
    ids = torch.zeros(3, dtype=torch.long)
    assert compute_dtype((torch.ones(2, dtype=torch.bfloat16), torch.ones(2)), {}, None) == "bfloat16"
    assert compute_dtype((ids,), {}, torch.ones(3, dtype=torch.float16)) == "float16"
    assert compute_dtype((ids,), {}, ids) is None


def test_a_report_adds_bytes_per_call_per_operator_and_for_the_model() -> None:
    report = analyze(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), (8,))
    root, first, relu, second = report["layers"]
    # addmm: bias 16 + input 8 + weight 128 read, output 16 written; relu: 16 read, 16 written
    assert first["operator_bytes"]["direct"]["value"] == (16 + 8 + 128 + 16) * F32
    assert relu["operator_bytes"]["direct"]["value"] == 2 * 16 * F32
    assert second["operator_bytes"]["direct"]["value"] == (4 + 16 + 64 + 4) * F32
    assert root["operator_bytes"]["direct"] == {"status": "complete", "value": 0, "known_value": 0, "unit": "bytes",
                                                "scope": "direct", "method": "operator_tensor_bytes"}
    total = (168 + 32 + 88) * F32
    assert root["operator_bytes"]["inclusive"]["value"] == total
    assert report["totals"]["operator_bytes"] == report["operator_bytes"]["total"]
    assert report["operator_bytes"]["total"]["value"] == total
    rows = {(row["operator"], row["dtype"]): row for row in report["operator_bytes"]["by_operator"]}
    assert set(rows) == {("aten.addmm", "float32"), ("aten.relu", "float32")}  # views (aten.t) move nothing
    assert rows["aten.addmm", "float32"]["calls"] == 2
    assert rows["aten.addmm", "float32"]["bytes"]["value"] == (168 + 88) * F32
    assert rows["aten.addmm", "float32"]["flops"]["value"] == report["operator_flops"]["by_operator"][0]["flops"]


def test_operators_without_a_flop_formula_still_have_their_bytes() -> None:
    class Copies(nn.Module):
        def forward(self, a):
            return torch.cat([a, a]).contiguous().clone()

    report = analyze_call(Copies(), torch.ones(4, 8))
    rows = {row["operator"]: row for row in report["operator_bytes"]["by_operator"]}
    assert rows["aten.cat"]["bytes"]["value"] == 4 * ELEMENTS * F32
    assert rows["aten.clone"]["bytes"]["value"] == 4 * ELEMENTS * F32
    assert rows["aten.clone"]["flops"]["status"] == "complete"  # a copy: ignored, zero FLOPs


def test_repeated_signatures_reuse_one_priced_outcome() -> None:
    report = analyze(nn.Sequential(*(nn.Linear(8, 8) for _ in range(5))), (8,))
    rows = report["operator_bytes"]["by_operator"]
    assert [(row["operator"], row["calls"]) for row in rows] == [("aten.addmm", 5)]
    assert rows[0]["bytes"]["value"] == 5 * (8 + 8 + 64 + 8) * F32


def test_structure_mode_requests_no_bytes() -> None:
    report = analyze(nn.Linear(8, 4), (8,), mode="structure")
    assert report["operator_bytes"]["total"]["status"] == "not_requested"
    assert report["layers"][0]["operator_bytes"]["inclusive"]["status"] == "not_requested"
    assert report["operator_bytes"]["by_operator"] == []
