"""The operator view: FLOPs observed through dispatch in the same forward, caller formulas per analysis, ignored and
uncounted operators, attribution to layer calls, and ``measure_flops`` for owner-controlled workloads."""

from __future__ import annotations

import json
from math import prod

import pytest
import torch
from torch import nn
from torch.utils import flop_counter
from torchscan_testing import OPAQUE, OPAQUE_PACKET, OpaqueLeaf, analyze, opaque

from torchscan import crawl_module, measure_flops
from torchscan.direct_work import DirectWork, WorkTotals
from torchscan.operator_cache import UNCOUNTED
from torchscan.operators import OperatorCount, OperatorScope, build_formula_table, new_recorder, operator_name
from torchscan.results import MODEL, SUMMABLE_METRICS

aten = torch.ops.aten


def sin_flops(input_shape, *, out_shape):
    return prod(out_shape)


def opaque_flops(input_shape, *, out_shape, **kwargs):
    return 5 * prod(out_shape)


class Sine(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return torch.sin(x)


def row(section, kind, name):
    return next((item for item in section[kind] if item["operator"] == name), None)


# -- custom formulas ------------------------------------------------------------------------------------------------

def test_custom_formula_counts_its_operator():
    report = analyze(Sine(), (2, 3), custom_mapping={aten.sin: sin_flops})
    section = report["operator_flops"]
    assert row(section, "by_operator", "aten.sin") == {"operator": "aten.sin", "calls": 1, "flops": 1 * 2 * 3}
    assert section["total"]["status"] == "complete" and section["total"]["value"] == 6
    assert report["totals"]["operator_flops"] == section["total"]
    assert section["custom_formulas"] == ["aten.sin"]
    assert report["context"]["custom_formulas"] == ["aten.sin"]


def test_custom_formulas_belong_to_one_analysis():
    counted = analyze(OpaqueLeaf(), (4,), custom_mapping={OPAQUE_PACKET: opaque_flops})
    assert row(counted["operator_flops"], "by_operator", OPAQUE)["flops"] == 5 * 4
    later = analyze(OpaqueLeaf(), (4,))
    assert row(later["operator_flops"], "by_operator", OPAQUE) is None
    assert row(later["operator_flops"], "uncounted", OPAQUE)["calls"] == 1
    assert later["operator_flops"]["custom_formulas"] == []


def test_caller_formulas_take_precedence_and_leave_the_global_registry_alone():
    registry = dict(flop_counter.flop_registry)

    class Product(nn.Module):
        def forward(self, a, b):
            return torch.mm(a, b)

    model = Product()
    a, b = torch.ones(2, 3), torch.ones(3, 4)
    overridden = analyze(model, args=(a, b), custom_mapping={aten.mm: lambda *shapes, out_shape, **kw: 7})
    assert row(overridden["operator_flops"], "by_operator", "aten.mm")["flops"] == 7
    assert dict(flop_counter.flop_registry) == registry
    default = analyze(model, args=(a, b))
    assert row(default["operator_flops"], "by_operator", "aten.mm")["flops"] == 2 * 2 * 3 * 4


@pytest.mark.parametrize("key", [aten.sin.default, aten.mm.default])
def test_overloads_are_rejected_before_the_model_runs(key):
    model = Sine()
    with pytest.raises(TypeError, match="packet"):
        crawl_module(model, (3,), custom_mapping={key: sin_flops})
    assert model.calls == 0


def test_a_failing_formula_is_reported_and_leaves_the_total_partial():
    def broken(*shapes, out_shape, **kwargs):
        raise ZeroDivisionError

    report = analyze(Sine(), (3,), custom_mapping={aten.sin: broken})
    section = report["operator_flops"]
    assert section["total"]["status"] == "partial"
    assert row(section, "uncounted", "aten.sin")["calls"] == 1
    errors = [item for item in report["diagnostics"] if item["code"] == "operator_formula_error"]
    assert [item["operator"] for item in errors] == ["aten.sin"]


@pytest.mark.parametrize("result", [-1, float("nan"), True, "12", torch.tensor(3)])
def test_a_formula_returning_a_non_count_is_not_believed(result):
    report = analyze(Sine(), (3,), custom_mapping={aten.sin: lambda *shapes, out_shape, **kw: result})
    assert report["operator_flops"]["total"]["status"] == "partial"
    assert any(item["code"] == "operator_formula_error" for item in report["diagnostics"])


def test_functional_calls_tensor_methods_and_python_operators_are_all_observed():
    class ThreeWays(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("weight", torch.ones(3, 3))

        def forward(self, x):
            return nn.functional.linear(x.mm(self.weight) @ self.weight, self.weight)

    report = analyze(ThreeWays(), (3,))
    assert row(report["operator_flops"], "by_operator", "aten.mm") == {"operator": "aten.mm", "calls": 3,
                                                                        "flops": 3 * (2 * 1 * 3 * 3)}
    assert report["totals"]["operator_flops"]["value"] == 54


def test_operator_formulas_never_complete_the_module_view():
    report = analyze(OpaqueLeaf(), (4,), custom_mapping={OPAQUE_PACKET: opaque_flops})
    totals = report["totals"]
    assert totals["operator_flops"]["status"] == "complete" and totals["operator_flops"]["value"] == 5 * 4
    for name in ("module_flops", "macs", "dmas"):
        assert totals[name]["status"] in ("partial", "unavailable")
        assert totals[name]["method"] != totals["operator_flops"]["method"]
    leaf = report["layers"][0]["metrics"]
    assert all(leaf[name]["status"] == "unavailable"
               for name in ("receptive_field", "effective_stride", "effective_padding"))


# -- ignored and uncounted operators ----------------------------------------------------------------------------------------

def test_zero_work_operators_are_listed_as_ignored_with_a_reason():
    class Reshape(nn.Module):
        def forward(self, x):
            return x.view(-1).clone()

    report = analyze(Reshape(), (2, 3))
    section = report["operator_flops"]
    assert row(section, "ignored", "aten.view") == {"operator": "aten.view", "calls": 1, "reason": "view"}
    assert row(section, "ignored", "aten.clone") == {"operator": "aten.clone", "calls": 1, "reason": "copy"}
    assert section["uncounted"] == [] and section["by_operator"] == []
    assert section["total"] == {"status": "complete", "value": 0, "known_value": 0, "unit": "FLOPs",
                                "scope": "model", "method": "operator_dispatch"}


def test_operators_without_a_formula_are_diagnosed_and_make_the_total_partial():
    class Mixed(nn.Module):
        def forward(self, a, b):
            return opaque(opaque(torch.mm(a, b)))

    report = analyze(Mixed(), args=(torch.ones(2, 3), torch.ones(3, 4)))
    section = report["operator_flops"]
    assert row(section, "uncounted", OPAQUE) == {"operator": OPAQUE, "calls": 2, "significance": "minor"}
    assert section["total"]["status"] == "partial" and section["total"]["value"] is None
    assert section["total"]["known_value"] == 2 * 2 * 3 * 4
    uncounted = [item for item in report["diagnostics"] if item["code"] == "uncounted_operator"]
    assert [(item["operator"], item["metric"]) for item in uncounted] == [(OPAQUE, "operator_flops")]


# -- attribution to layer calls -------------------------------------------------------------------------------------------

class MatMul(nn.Module):
    """``x @ W`` with a constant ``W`` of shape (features, out): 2 * rows * features * out FLOPs."""

    def __init__(self, features, out, then=None):
        super().__init__()
        self.register_buffer("weight", torch.ones(features, out))
        self.then = then

    def forward(self, x):
        y = torch.mm(x, self.weight)
        return y if self.then is None else self.then(y)


class Uncounted(nn.Module):
    def forward(self, x):
        return opaque(x)


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = MatMul(4, 3)
        self.second = MatMul(3, 5, then=MatMul(5, 2))
        self.register_buffer("head", torch.ones(2, 6))

    def forward(self, x):
        return torch.mm(self.second(self.first(x)), self.head)


def test_each_call_carries_direct_and_inclusive_operator_flops():
    report = analyze(Outer(), (4,))
    flops = {layer["path"]: (layer["operator_flops"]["direct"]["value"],
                             layer["operator_flops"]["inclusive"]["value"]) for layer in report["layers"]}
    first, second, inner, head = 2 * 1 * 4 * 3, 2 * 1 * 3 * 5, 2 * 1 * 5 * 2, 2 * 1 * 2 * 6
    assert flops == {
        "first": (first, first),
        "second": (second, second + inner),
        "second.then": (inner, inner),
        "": (head, head + first + (second + inner)),
    }
    assert report["totals"]["operator_flops"]["value"] == head + first + second + inner
    for layer in report["layers"]:
        assert layer["operator_flops"]["direct"]["scope"] == "direct"
        assert layer["operator_flops"]["inclusive"]["scope"] == "inclusive"


def test_an_uncounted_operator_makes_its_call_and_its_ancestors_partial():
    model = Outer()
    model.second.then = nn.Sequential(Uncounted(), MatMul(5, 2))
    report = analyze(model, (4,))
    by_path = {layer["path"]: layer["operator_flops"] for layer in report["layers"]}
    assert by_path["second.then.0"]["direct"]["status"] == "partial"
    assert by_path["second.then.1"]["inclusive"]["status"] == "complete"
    assert by_path["second.then"]["direct"]["status"] == "complete"
    assert by_path["second.then"]["inclusive"]["status"] == "partial"
    assert by_path["second"]["direct"] == {**by_path["second"]["direct"], "status": "complete", "value": 2 * 3 * 5}
    assert by_path["second"]["inclusive"]["status"] == "partial"
    assert by_path["second"]["inclusive"]["known_value"] == 2 * 3 * 5 + 2 * 5 * 2
    assert by_path[""]["inclusive"]["status"] == "partial"
    assert by_path[""]["direct"]["status"] == "complete"
    assert by_path["first"]["inclusive"]["status"] == "complete"


def test_a_shared_module_is_attributed_per_call():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = MatMul(3, 3)

        def forward(self, x):
            return self.block(self.block(x))

    report = analyze(Twice(), (3,))
    calls = [layer["operator_flops"]["inclusive"]["value"] for layer in report["layers"] if layer["path"] == "block"]
    assert calls == [2 * 3 * 3, 2 * 3 * 3]
    assert report["layers"][0]["operator_flops"]["inclusive"]["value"] == 2 * 2 * 3 * 3


def test_module_estimates_run_with_operator_counting_suspended():
    from torchscan import ModuleHandler

    def noisy_estimate(call):
        torch.mm(torch.ones(8, 8), torch.ones(8, 8))  # estimation work must not count as the model's
        return {"macs": 0}

    report = analyze(MatMul(4, 3), (4,), custom_modules={MatMul: ModuleHandler(noisy_estimate)})
    assert report["totals"]["operator_flops"]["value"] == 2 * 4 * 3


# -- measure_flops ----------------------------------------------------------------------------------------------------------

def test_measure_flops_with_a_custom_formula():
    inputs = torch.ones(3, 5)
    result = measure_flops(lambda: torch.sin(inputs), custom_mapping={aten.sin: sin_flops})
    assert result["total"] == {"status": "complete", "value": 15, "known_value": 15, "unit": "FLOPs",
                               "scope": "model", "method": "operator_dispatch"}
    assert result["by_operator"] == [{"operator": "aten.sin", "calls": 1, "flops": 15}]
    assert result["custom_formulas"] == ["aten.sin"] and result["diagnostics"] == []
    json.dumps(result)


def test_measure_flops_counts_a_training_step_with_backward():
    torch.manual_seed(0)
    model = nn.Linear(3, 4, bias=False)
    model.train()
    batch = torch.ones(2, 3)
    seen = []
    model.register_forward_pre_hook(lambda module, args: seen.append((module.training, torch.is_grad_enabled())))
    registry = dict(flop_counter.flop_registry)

    def step():
        model(batch).sum().backward()

    result = measure_flops(step)
    assert seen == [(True, True)]
    assert model.weight.grad is not None and model.weight.grad.shape == (4, 3)
    forward_mm, weight_grad_mm = 2 * 2 * 3 * 4, 2 * 4 * 2 * 3
    matmuls = sum(r["flops"] for r in result["by_operator"] if r["operator"] in ("aten.mm", "aten.addmm"))
    assert matmuls == forward_mm + weight_grad_mm
    total = result["total"]
    assert (total["value"] if total["status"] == "complete" else total["known_value"]) >= matmuls
    assert dict(flop_counter.flop_registry) == registry


def test_measure_flops_reports_uncounted_work():
    x = torch.ones(4)
    result = measure_flops(lambda: opaque(x))
    assert result["total"]["status"] == "partial"
    assert [item["operator"] for item in result["uncounted"]] == [OPAQUE]
    assert [item["code"] for item in result["diagnostics"]] == ["uncounted_operator"]


def test_measure_flops_validates_before_running():
    ran = []
    with pytest.raises(TypeError, match="packet"):
        measure_flops(lambda: ran.append(1), custom_mapping={aten.sin.default: sin_flops})
    with pytest.raises(TypeError, match="custom_mapping"):
        measure_flops(lambda: ran.append(1), custom_mapping={"aten.sin": sin_flops})
    with pytest.raises(TypeError, match="workload"):
        measure_flops(torch.ones(3))
    assert ran == []


def test_torch_cond_counts_the_branch_that_ran():
    import torch._dynamo  # torch.cond compiles its branches; the recorder then steps out of its way

    class Branching(nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda t: t.sin(), lambda t: t.cos(), (x,))

    report = crawl_module(Branching(), (4,))
    names = [row["operator"] for row in report["operator_flops"]["by_operator"]]
    assert "aten.sin" in names and "aten.cos" not in names
    assert report["totals"]["operator_flops"]["status"] == "complete"


def test_the_compiler_steps_over_the_lean_recorder_once_it_is_loaded(monkeypatch):
    """With ``torch._dynamo`` imported, the recorder's frame is marked for the compiler to skip (no per-operator
    wrapper); a torch that cannot mark it gets the recorder PyTorch wraps instead."""
    import torch._dynamo  # noqa: F401 -- the condition under test

    from torchscan import operators

    assert type(operators.new_recorder({})) is operators.OperatorRecorder  # torch.cond runs under it (test above)
    monkeypatch.setattr(operators, "_skipped_by_the_compiler", lambda: False)
    assert type(operators.new_recorder({})) is operators.CompileSafeRecorder


def test_a_higher_order_operator_whose_inside_is_not_observed_is_diagnosed_as_such():
    from torch._higher_order_ops.while_loop import while_loop

    class Loop(nn.Module):
        def forward(self, x):
            return while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y.sin()), (torch.tensor(0), x))[1]

    report = analyze(nn.Sequential(Loop()), (3,))
    assert report["operator_flops"]["uncounted"] == [{"operator": "higher_order.while_loop", "calls": 1,
                                                      "significance": "minor"}]
    (finding,) = [item for item in report["diagnostics"] if item.get("operator") == "higher_order.while_loop"]
    assert finding["code"] == "higher_order_operator" and finding["severity"] == "warning"
    assert "the work inside it unobserved" in finding["message"]
    assert report["totals"]["operator_flops"]["status"] == "partial"
    loop = report["layers"][1]
    assert loop["operator_flops"]["direct"]["status"] == "partial"
    direct = [item for item in report["diagnostics"] if item["code"] == "unestimated_direct_work"]
    assert direct and all("higher_order.while_loop x1" in item["message"] for item in direct)


# -- the recorder's stack ---------------------------------------------------------------------------------------------


def test_the_recorder_counts_into_the_innermost_entered_scope_and_then_the_root():
    recorder = new_recorder(build_formula_table({}))
    outer, inner = OperatorScope(), OperatorScope()
    x = torch.ones(4, 4)
    with recorder:
        torch.mm(x, x)  # 2 * 4 * 4 * 4 = 128 FLOPs
        recorder.enter(outer)
        torch.mm(x, x)
        recorder.enter(inner)
        torch.mm(x[:2], x)  # 64 FLOPs
        OPAQUE_PACKET(x)  # uncounted: no formula
        assert recorder.leave() is inner
        torch.mm(x, x)
        assert recorder.leave() is outer
    assert (recorder.root.flops, outer.flops, inner.flops) == (128, 256, 64)
    assert (recorder.root.uncounted, outer.uncounted, inner.uncounted) == (False, False, True)
    totals = recorder.totals()
    assert {operator_name(p): row for p, row in totals.counted.items()} == {"aten.mm": OperatorCount(4, flops=448)}
    assert {operator_name(p): calls for p, calls in totals.calls_of(UNCOUNTED).items()} == {OPAQUE: 1}
    assert totals.result(MODEL)["status"] == "partial" and totals.result(MODEL)["known_value"] == 448


def test_the_root_scope_cannot_be_left():
    recorder = new_recorder(build_formula_table({}))
    recorder.enter(OperatorScope())
    recorder.leave()
    with pytest.raises(RuntimeError, match="without a matching enter"):
        recorder.leave()


def test_nothing_is_counted_while_paused_and_pauses_nest():
    recorder = new_recorder(build_formula_table({}))
    x = torch.ones(4)
    with recorder:
        with recorder.paused():
            torch.sin(x)
            with recorder.paused():
                torch.sin(x)
            torch.sin(x)  # still inside the outer pause
        torch.cos(x)
    assert {operator_name(p): row.calls for p, row in recorder.totals().counted.items()} == {"aten.cos": 1}


def test_direct_work_files_an_operator_without_estimate():
    work = DirectWork()
    work.add_unestimated(OPAQUE_PACKET)
    work.add_unestimated(OPAQUE_PACKET)
    assert work.unestimated == {OPAQUE_PACKET: 2} and work.operators == 0
    assert work.result("macs")["status"] == "partial"


def test_direct_work_adds_each_estimate_to_its_named_totals():
    work = DirectWork()
    work.add_estimate(aten.mm, (48, 24, 40))
    work.add_estimate(aten.add, (6, 0, 18))
    assert work.totals == WorkTotals(module_flops=54, macs=24, dmas=58) and work.operators == 2
    assert [work.known(name) for name in SUMMABLE_METRICS] == [54, 24, 58]
