"""The extension contract (spec/extending.txt), field precedence: a caller's handler wins for every field it
supplies; numbers, ``None`` and MetricResults; what omission means on formula leaves, on leaves without a
built-in, on composites, and where a complete-call built-in exists.

Every test names the sentence of the guide (quoted or closely paraphrased) that it proves, so each file reads as
the mapping "sentence -> test"; ``extension_fixtures.py`` indexes the guide's sections by file. Every report
produced here is validated against the shipped schema (``tests/conftest.py``).
"""

from __future__ import annotations

from typing import Any

import torch
from extension_fixtures import (
    FIELDS,
    ROOT,
    UNITS,
    AtomicBlock,
    Double,
    DoublePair,
    Recorder,
    X,
    analyze_call,
    diagnostics,
    every_field,
    metric,
    relu_builtin,
    row,
)
from torch import nn

from torchscan import ModuleCall, ModuleHandler

# == Numbers, None, MetricResult, omission =========================================================================

def test_each_field_carries_its_unit():
    # The field table: module_flops in FLOPs, macs in MACs, dmas in DMAs, the receptive-field fields in elements.
    report = analyze_call(Double(), X, custom_modules={Double: ModuleHandler(lambda call: every_field(8))})
    assert {name: result["unit"] for name, result in row(report, "")["metrics"].items()} == UNITS


def test_numeric_zero_is_a_complete_estimate():
    # "A numeric field is a complete estimate, including a legitimate zero."
    report = analyze_call(nn.ReLU(), X, custom_modules={nn.ReLU: ModuleHandler(lambda call: {"module_flops": 0})})
    assert metric(report, "", "module_flops") == {
        "status": "complete", "value": 0, "known_value": 0, "unit": "FLOPs", "scope": "module_call",
        "method": metric(report, "", "module_flops")["method"]}
    assert report["totals"]["module_flops"]["status"] == "complete"
    assert report["totals"]["module_flops"]["value"] == 0


def test_none_means_unavailable_and_never_falls_back_to_the_builtin():
    # "None explicitly means unavailable." "An explicitly supplied None or unavailable result never falls back to
    # a built-in zero or to children."
    report = analyze_call(nn.ReLU(), X, custom_modules={nn.ReLU: ModuleHandler(lambda call: {"module_flops": None})})
    result = metric(report, "", "module_flops")
    assert result["status"] == "unavailable" and result["value"] is None and result["known_value"] is None
    assert result["method"].startswith("custom_module_handler:")
    assert report["totals"]["module_flops"]["status"] == "unavailable"
    assert diagnostics(report, "incomplete_handler_estimate", "")


def test_unavailable_metric_result_never_falls_back_to_the_builtin():
    # Same sentence, with an explicit unavailable MetricResult.
    unknown = {"status": "unavailable", "value": None, "known_value": None, "unit": "MACs",
               "scope": "module_call", "method": "unknown_kernel"}
    report = analyze_call(nn.ReLU(), X, custom_modules={nn.ReLU: ModuleHandler(lambda call: {"macs": unknown})})
    assert metric(report, "", "macs")["status"] == "unavailable"
    assert report["totals"]["macs"]["status"] == "unavailable"


def test_none_on_an_owned_composite_never_falls_back_to_children():
    # "An explicitly supplied None ... never falls back ... to children."
    children = Recorder(every_field(8))
    report = analyze_call(DoublePair(), X, custom_modules={
        Double: ModuleHandler(children),
        DoublePair: ModuleHandler(lambda call: {"module_flops": None}, frozenset({"module_flops"}))})
    assert metric(report, "", "module_flops")["status"] == "unavailable"
    assert "module_flops" not in row(report, "first")["metrics"]
    assert report["totals"]["module_flops"]["status"] == "unavailable"
    assert report["totals"]["dmas"]["value"] == 2 * 8  # the unowned fields still come from the children


def test_none_on_an_unowned_composite_leaves_the_children_counted_and_the_total_incomplete():
    # None is the composite's own call-local estimate: unavailable, children still counted as a lower bound.
    report = analyze_call(DoublePair(), X, custom_modules={
        Double: ModuleHandler(lambda call: every_field(8)),
        DoublePair: ModuleHandler(lambda call: {"module_flops": None})})
    assert metric(report, "", "module_flops")["status"] == "unavailable"
    assert report["totals"]["module_flops"]["status"] == "partial"
    assert report["totals"]["module_flops"]["known_value"] == 8 + 8


def test_metric_result_preserves_its_status():
    # "A MetricResult preserves complete, partial, or unavailable state."
    def results(call: ModuleCall) -> dict[str, Any]:
        return {
            "module_flops": {"status": "partial", "value": None, "known_value": 5, "unit": "FLOPs",
                             "scope": "module_call", "method": "lower_bound"},
            "macs": {"status": "complete", "value": 3, "known_value": 3, "unit": "MACs", "scope": "module_call",
                     "method": "exact"},
            "dmas": {"status": "unavailable", "value": None, "known_value": None, "unit": "DMAs",
                     "scope": "module_call", "method": "unknown"},
        }

    report = analyze_call(nn.ReLU(), X, custom_modules={nn.ReLU: ModuleHandler(results)})
    metrics = row(report, "")["metrics"]
    assert (metrics["module_flops"]["status"], metrics["module_flops"]["known_value"]) == ("partial", 5)
    assert (metrics["macs"]["status"], metrics["macs"]["value"]) == ("complete", 3)
    assert metrics["dmas"]["status"] == "unavailable"
    assert report["totals"]["module_flops"] == {**report["totals"]["module_flops"], "status": "partial",
                                                "known_value": 5}


def test_omitted_field_on_a_formula_leaf_uses_the_builtin_formula():
    # "Omission is different: on a formula leaf, an omitted field uses the built-in formula."
    builtin = relu_builtin(X)
    report = analyze_call(nn.ReLU(), X, custom_modules={nn.ReLU: ModuleHandler(lambda call: {"macs": 0})})
    for name in FIELDS:
        if name != "macs":
            assert metric(report, "", name) == builtin[name]


def test_omitted_field_on_a_formula_leaf_keeps_the_builtins_unsupported_work_diagnostics():
    # "... an omitted field uses the built-in formula, including its unsupported-work diagnostics." The ReLU
    # formula declines integer tensors (module_flops unavailable); a caller that omits module_flops inherits that.
    ints = torch.arange(-4, 4)
    omitted = analyze_call(nn.ReLU(), ints, custom_modules={nn.ReLU: ModuleHandler(lambda call: {"dmas": 16})})
    assert metric(omitted, "", "module_flops")["status"] == "unavailable"
    assert metric(omitted, "", "module_flops")["method"] == "formula:activation"
    # A built-in formula that declines a call says so as an unsupported configuration.
    assert [item["metric"] for item in diagnostics(omitted, "unsupported_configuration", "")] == ["module_flops"]
    supplied = analyze_call(nn.ReLU(), ints, custom_modules={nn.ReLU: ModuleHandler(lambda call: {"module_flops": 8})})
    assert metric(supplied, "", "module_flops")["status"] == "complete"
    assert diagnostics(supplied, "unsupported_configuration") == []


def test_omitted_field_on_a_leaf_without_builtin_is_not_delegated():
    # "Omission ... on a formula leaf, an omitted field uses the built-in formula, including its unsupported-work
    # diagnostics"; with no built-in, the field is unsupported work (never "delegated" to non-existent children).
    report = analyze_call(Double(), X, custom_modules={Double: ModuleHandler(lambda call: {"module_flops": 8})})
    layer = row(report, "")
    assert "receptive_field" not in layer.get("delegated_metrics", [])
    assert layer["metrics"]["receptive_field"]["status"] == "unavailable"


def test_omitted_unowned_field_on_a_composite_delegates_to_descendants():
    # "On an ordinary registered composite, an omitted, unowned field delegates to descendants."
    report = analyze_call(DoublePair(), X, custom_modules={
        Double: ModuleHandler(lambda call: every_field(8, dmas=16)),
        DoublePair: ModuleHandler(lambda call: {"module_flops": 1})})
    root = row(report, "")
    assert set(root["metrics"]) == {"module_flops"}
    assert "macs" in root["delegated_metrics"] and "dmas" in root["delegated_metrics"]
    assert report["totals"]["module_flops"]["value"] == 1 + 8 + 8  # module-local: the children still add
    assert report["totals"]["dmas"]["value"] == 16 + 16
    assert report["totals"]["dmas"]["status"] == "complete"


def test_omitted_fields_use_a_complete_call_builtin_first(atomic_block_builtin):
    # "When a built-in complete-call handler exists, omitted fields use that handler's estimates and ownership
    # scope before legacy leaf fallback or child delegation."
    report = analyze_call(AtomicBlock(), X, custom_modules={AtomicBlock: ModuleHandler(lambda call: {"dmas": 3})})
    root = row(report, "")
    assert root["metrics"]["dmas"]["value"] == 3
    assert root["metrics"]["macs"]["value"] == 10
    assert root["metrics"]["macs"]["method"] == "formula:test_block"
    assert root["metric_ownership"]["macs"] == "subtree"
    assert "delegated_metrics" not in root or "macs" not in root["delegated_metrics"]
    for child in ("before", "middle", "after"):
        assert row(report, child)["metric_owners"]["macs"] == ROOT
        assert "macs" not in row(report, child)["metrics"]
    assert report["totals"]["macs"]["value"] == 10


def test_inclusive_builtin_fallback_covers_only_its_fields_and_module_local_caller_fields_still_add(
        atomic_block_builtin):
    # "Inclusive built-in fallbacks cover descendants only for the fields they supply; a caller's module-local
    # field still adds to those children." The caller supplies module_flops for the block's own call (3); the
    # built-in falls back for MACs, which it owns across the subtree.
    relu_flops = relu_builtin(X)["module_flops"]["value"]
    tanh = analyze_call(nn.Tanh(), X)["layers"][0]["metrics"]["module_flops"]["value"]
    report = analyze_call(AtomicBlock(), X, custom_modules={AtomicBlock: ModuleHandler(lambda call: {"module_flops": 3})})
    assert metric(report, "", "module_flops")["scope"] == "module_call"
    assert report["totals"]["module_flops"]["value"] == 3 + relu_flops + tanh + relu_flops
    assert report["totals"]["macs"]["value"] == 10
    assert "module_flops" in row(report, "middle")["metrics"]
    assert row(report, "middle")["metric_owners"] == {"macs": ROOT}


def test_parent_fields_replace_descendant_contributions_and_their_diagnostics(atomic_block_builtin):
    # "If a caller overrides some fields while other fields fall back to an inclusive built-in handler, descendant
    # estimates may run before that parent callback returns. The selected parent fields then replace those
    # contributions and their estimation diagnostics."
    tanh = Recorder({"macs": None})  # an incomplete MACs estimate: diagnosed, then replaced by the block's MACs
    report = analyze_call(AtomicBlock(), X, custom_modules={
        nn.Tanh: ModuleHandler(tanh),
        AtomicBlock: ModuleHandler(lambda call: {"module_flops": 3})})
    assert len(tanh.calls) == 1
    assert "macs" not in row(report, "middle")["metrics"]
    assert row(report, "middle")["metric_owners"]["macs"] == ROOT
    assert [item for item in report["diagnostics"] if item.get("metric") == "macs"] == []
    assert report["totals"]["macs"] == {**report["totals"]["macs"], "status": "complete", "value": 10}


def test_explicit_caller_ownership_suppresses_child_estimates_before_they_execute():
    # "Explicit caller subtree ownership suppresses child estimates before they execute." "... an ancestor owning
    # all fields skips a descendant callback."
    children = Recorder(every_field(8))
    report = analyze_call(DoublePair(), X, custom_modules={
        Double: ModuleHandler(children),
        DoublePair: ModuleHandler(lambda call: every_field(20), frozenset(FIELDS))})
    assert children.calls == []
    for child in ("first", "second"):
        assert row(report, child)["metrics"] == {}
        assert row(report, child)["metric_owners"] == {name: ROOT for name in FIELDS}
    assert report["totals"]["module_flops"]["value"] == 20
