"""The extension contract (spec/extending.txt), ownership and coverage: inclusive subtree ownership per metric,
covered rows, shared children, failed inclusive formulas, direct work of a composite, and built-in atomic
boundaries that a registered descendant opens.

Every test names the sentence of the guide (quoted or closely paraphrased) that it proves, so each file reads as
the mapping "sentence -> test"; ``extension_fixtures.py`` indexes the guide's sections by file. Every report
produced here is validated against the shipped schema (``tests/conftest.py``).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from extension_fixtures import (
    BLOCK_ESTIMATE,
    COUNT_MUL,
    FIELDS,
    ROOT,
    AtomicBlock,
    Double,
    DoublePair,
    Recorder,
    X,
    analyze_call,
    diagnostics,
    elementwise_flops,
    every_field,
    metric,
    opaque,
    relu_builtin,
    row,
)
from torch import nn

from torchscan import ModuleCall, ModuleHandler

# == Subtree ownership =============================================================================================

def test_supplied_estimates_cover_only_the_registered_call_by_default():
    # "By default, each supplied estimate covers only the registered module's own call. Children are still counted."
    report = analyze_call(DoublePair(), X, custom_modules={
        Double: ModuleHandler(lambda call: every_field(8)),
        DoublePair: ModuleHandler(lambda call: every_field(5))})
    assert row(report, "")["metric_ownership"] == dict.fromkeys(FIELDS, "module_call")
    assert "metric_owners" not in row(report, "first")
    assert report["totals"]["module_flops"]["value"] == 5 + 8 + 8


def test_ownership_is_independent_per_metric_including_receptive_fields():
    # "Ownership is independent for each metric, including receptive-field fields."
    report = analyze_call(DoublePair(), X, custom_modules={
        Double: ModuleHandler(lambda call: every_field(8)),
        DoublePair: ModuleHandler(lambda call: {"receptive_field": 1}, frozenset({"receptive_field"}))})
    root, first = row(report, ""), row(report, "first")
    assert root["metric_ownership"] == {"receptive_field": "subtree"}
    assert metric(report, "", "receptive_field")["scope"] == "subtree"
    assert first["metric_owners"] == {"receptive_field": ROOT}
    assert set(first["metrics"]) == set(FIELDS) - {"receptive_field"}
    assert report["totals"]["module_flops"]["value"] == 16


class WithParameters(nn.Module):
    """A composite whose two children hold parameters: a Linear and a ReLU."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 3)
        self.relu = nn.ReLU()

    def forward(self, x):
        return self.relu(self.linear(x))


def test_covered_rows_keep_structure_inputs_outputs_and_parameters():
    # "Descendant layer rows, their inputs/outputs, and parameter statistics remain in the report. Covered metric
    # fields are omitted from those rows; metric_owners identifies the owning ancestor's path and call_index. The
    # owning row records metric_ownership as "subtree"; ordinary supplied estimates use "module_call"."
    plain = analyze_call(WithParameters(), torch.ones(2, 4))
    owned = analyze_call(WithParameters(), torch.ones(2, 4), custom_modules={WithParameters: ModuleHandler(
        lambda call: {"module_flops": 50, "macs": 24}, frozenset({"module_flops"}))})
    for path in ("linear", "relu"):
        before, after = row(plain, path), row(owned, path)
        for key in ("type", "depth", "input", "output", "parameters", "buffers", "parent"):
            assert after[key] == before[key]
        assert "module_flops" not in after["metrics"]
        assert after["metrics"]["macs"] == before["metrics"]["macs"]
        assert after["metric_owners"] == {"module_flops": ROOT}
    assert row(owned, "linear")["parameters"]["count"] == 4 * 3 + 3
    assert row(owned, "")["metric_ownership"] == {"module_flops": "subtree", "macs": "module_call"}
    assert owned["totals"]["module_flops"]["value"] == 50
    assert owned["totals"]["macs"]["value"] == 24 + 2 * 3 * 4  # the parent's own MACs plus the Linear's


class SharedChild(nn.Module):
    """One Double instance used inside ``pair`` and again directly by the root."""

    def __init__(self) -> None:
        super().__init__()
        self.shared = Double()
        self.pair = DoublePair(first=self.shared)

    def forward(self, x):
        return self.shared(self.pair(x))


def test_ownership_follows_executed_calls_and_a_shared_child_called_elsewhere_counts_independently():
    # "Ownership follows executed calls: it covers descendants invoked during that parent invocation. If a shared
    # child is called elsewhere, that other call remains independently counted."
    callback = Recorder(lambda call: every_field(8))
    report = analyze_call(SharedChild(), X, custom_modules={
        Double: ModuleHandler(callback),
        DoublePair: ModuleHandler(lambda call: {"module_flops": 16}, frozenset({"module_flops"}))})
    assert len(callback.calls) == 3
    assert row(report, "shared", 0)["metric_owners"] == {"module_flops": {"path": "pair", "call_index": 0}}
    assert "metric_owners" not in row(report, "shared", 1)
    assert metric(report, "shared", "module_flops", 1)["value"] == 8
    assert report["totals"]["module_flops"]["value"] == 16 + 8


def test_sum_retained_estimates_once_without_invented_zeros():
    # "Sum the retained estimates once, without inventing zeros for covered fields."
    report = analyze_call(DoublePair(), X, custom_modules={
        Double: ModuleHandler(lambda call: every_field(8)),
        DoublePair: ModuleHandler(lambda call: {"dmas": 40}, frozenset({"dmas"}))})
    retained = [layer["metrics"]["dmas"] for layer in report["layers"] if "dmas" in layer["metrics"]]
    assert retained == [metric(report, "", "dmas")]
    assert report["totals"]["dmas"]["value"] == 40
    assert report["totals"]["module_flops"]["value"] == 8 + 8


def test_shared_parameters_are_counted_once_in_model_totals():
    # "Model parameter totals still count shared parameters only once."
    class Tied(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.one = nn.Linear(4, 4)
            self.two = nn.Linear(4, 4)
            self.two.weight = self.one.weight

        def forward(self, x):
            return self.two(self.one(x))

    report = analyze_call(Tied(), torch.ones(1, 4), custom_modules={
        Tied: ModuleHandler(lambda call: {"macs": 32}, frozenset({"macs"}))})
    assert report["totals"]["parameters"]["total"] == 4 * 4 + 4 + 4
    assert sum(layer["parameters"]["count"] for layer in report["layers"]) == 4 * 4 + 4 + 4


@pytest.mark.parametrize("outcome", ["omitted", "none", "unavailable", "raises"])
def test_failed_inclusive_formula_keeps_children_covered_and_the_result_incomplete(outcome):
    # "If the parent omits an owned field, returns an unavailable value, or its callback fails, the children remain
    # covered and the owned result is incomplete. TorchScan does not silently substitute child estimates for a
    # failed inclusive formula."
    def parent(call: ModuleCall) -> dict[str, Any]:
        if outcome == "raises":
            raise RuntimeError("formula bug")
        unavailable = {"status": "unavailable", "value": None, "known_value": None, "unit": "FLOPs",
                       "scope": "subtree", "method": "unknown"}
        value = {"omitted": None, "none": None, "unavailable": unavailable}[outcome]
        return {"macs": 0} if outcome == "omitted" else {"module_flops": value, "macs": 0}

    report = analyze_call(DoublePair(), X, custom_modules={
        Double: ModuleHandler(lambda call: every_field(8)),
        DoublePair: ModuleHandler(parent, frozenset({"module_flops"}))})
    assert metric(report, "", "module_flops")["status"] == "unavailable"
    assert metric(report, "", "module_flops")["scope"] == "subtree"
    for child in ("first", "second"):
        assert "module_flops" not in row(report, child)["metrics"]
        assert row(report, child)["metric_owners"]["module_flops"] == ROOT
    assert report["totals"]["module_flops"]["status"] == "unavailable"
    expected = "handler_exception" if outcome == "raises" else "incomplete_handler_estimate"
    assert diagnostics(report, expected, "")


def test_operator_flops_cannot_supply_missing_module_estimates_of_direct_work():
    # "Delegation only describes descendant estimates. Functional work performed directly by the composite needs
    # its own estimate for each affected metric; operator FLOPs may observe that work separately, but cannot supply
    # missing MACs, DMAs, or receptive-field estimates."
    class DirectWork(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.scale = Double()

        def forward(self, x):
            return opaque(self.scale(x))

    report = analyze_call(DirectWork(), X, custom_modules={
        Double: ModuleHandler(lambda call: every_field(8)),
        DirectWork: ModuleHandler(lambda call: {"module_flops": 8})},
        custom_mapping={**COUNT_MUL, opaque: elementwise_flops})
    assert report["totals"]["operator_flops"]["status"] == "complete"
    assert report["totals"]["module_flops"] == {**report["totals"]["module_flops"], "status": "complete",
                                                "value": 8 + 8}
    for name in ("macs", "dmas"):
        assert report["totals"][name]["status"] == "partial"
        assert any(item["metric"] == name for item in diagnostics(report, "unestimated_direct_work", ""))


# == Expanded atomic boundaries ======================================================================================

def test_registered_descendant_opens_a_builtin_atomic_root(atomic_block_builtin):
    # "An observed descendant with a matching registration opens an otherwise atomic legacy root when the root has
    # no registered enclosing handler. The inclusive root formula is excluded to prevent double counting. Missing
    # root work produces expanded_atomic_boundary diagnostics and partial totals with descendant counts as lower
    # bounds."
    report = analyze_call(AtomicBlock(), X, custom_modules={nn.Tanh: ModuleHandler(lambda call: {"module_flops": 5})})
    assert [item["path"] for item in diagnostics(report, "expanded_atomic_boundary")] == [""]
    assert metric(report, "", "module_flops")["status"] == "unavailable"
    assert metric(report, "middle", "module_flops")["value"] == 5
    assert report["totals"]["module_flops"]["status"] == "partial"
    assert report["totals"]["module_flops"]["known_value"] >= 5
    assert report["totals"]["module_flops"]["known_value"] != BLOCK_ESTIMATE["module_flops"]


def test_opened_root_counts_every_observed_descendant(atomic_block_builtin):
    # "... partial totals with descendant counts as lower bounds": once opened, every observed descendant counts,
    # whether it ran before or after the registered one.
    relu_flops = relu_builtin(X)["module_flops"]["value"]
    report = analyze_call(AtomicBlock(), X, custom_modules={nn.Tanh: ModuleHandler(lambda call: {"module_flops": 5})})
    assert "module_flops" in row(report, "before")["metrics"]
    assert "module_flops" in row(report, "after")["metrics"]
    assert report["totals"]["module_flops"]["known_value"] == relu_flops + 5 + relu_flops


def test_registering_the_root_too_supplies_its_estimates(atomic_block_builtin):
    # "Register the root too to supply its own or inclusive estimates."
    report = analyze_call(AtomicBlock(), X, custom_modules={
        nn.Tanh: ModuleHandler(lambda call: {"module_flops": 5}),
        AtomicBlock: ModuleHandler(lambda call: {"module_flops": 60}, frozenset({"module_flops"}))})
    assert diagnostics(report, "expanded_atomic_boundary") == []
    assert report["totals"]["module_flops"] == {**report["totals"]["module_flops"], "status": "complete",
                                                "value": 60}
    assert report["totals"]["macs"]["value"] == BLOCK_ESTIMATE["macs"]  # the built-in still owns MACs


def test_without_a_matching_caller_registration_the_atomic_boundary_remains(atomic_block_builtin):
    # "Without a matching caller registration, the original atomic boundary remains."
    report = analyze_call(AtomicBlock(), X, custom_modules={nn.GELU: ModuleHandler(lambda call: {"module_flops": 5})})
    assert diagnostics(report, "expanded_atomic_boundary") == []
    assert report["totals"]["module_flops"]["value"] == BLOCK_ESTIMATE["module_flops"]
    assert report["totals"]["macs"]["value"] == BLOCK_ESTIMATE["macs"]
    assert row(report, "middle")["metric_owners"] == {"module_flops": ROOT, "macs": ROOT}


def test_registered_linear_opens_a_native_transformer_layer():
    # The same sentence on a native module: registering nn.Linear (linear1/linear2 are called on the slow path)
    # opens TransformerEncoderLayer; registering the layer too restores its estimates.
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)
    x = torch.ones(3, 1, 8)
    linear = ModuleHandler(lambda call: {"module_flops": 1, "macs": 1})
    opened = analyze_call(layer, x, custom_modules={nn.Linear: linear})
    assert [item["path"] for item in diagnostics(opened, "expanded_atomic_boundary")] == [""]
    assert opened["totals"]["module_flops"]["status"] == "partial"
    assert opened["totals"]["module_flops"]["known_value"] >= 2
    closed = analyze_call(layer, x, custom_modules={nn.Linear: linear, nn.TransformerEncoderLayer: ModuleHandler(
        lambda call: {"module_flops": 1000}, frozenset({"module_flops"}))})
    assert diagnostics(closed, "expanded_atomic_boundary") == []
    assert closed["totals"]["module_flops"]["value"] == 1000


def test_unobserved_out_proj_registration_leaves_multihead_attention_atomic():
    # "Handlers run only for observed module calls" / "Without a matching caller registration, the original atomic
    # boundary remains." MultiheadAttention reads out_proj's parameters functionally and never calls out_proj, so a
    # handler for its type (NonDynamicallyQuantizableLinear) is never observed and cannot open the built-in.
    attention = nn.MultiheadAttention(8, 2)
    x = torch.ones(3, 1, 8)
    callback = Recorder({"macs": 1})
    plain = analyze_call(attention, x, x, x)
    report = analyze_call(attention, x, x, x, custom_modules={type(attention.out_proj): ModuleHandler(callback)})
    assert callback.calls == []
    assert [layer["path"] for layer in report["layers"]] == [""]
    assert diagnostics(report, "expanded_atomic_boundary") == []
    assert report["totals"]["macs"] == plain["totals"]["macs"]
    # "Atomic implementations can use child parameters without invoking their modules. Parameter totals stay
    # unique": out_proj has no row, yet its parameters are in the model totals.
    assert report["totals"]["parameters"]["total"] == 3 * 8 * 8 + 3 * 8 + 8 * 8 + 8
