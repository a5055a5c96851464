"""The extension contract (spec/extending.txt), handler validation: invalid fields and whole results, method
labels, scopes, callback exceptions, and what ``strict=True`` rejects.

Every test names the sentence of the guide (quoted or closely paraphrased) that it proves, so each file reads as
the mapping "sentence -> test"; ``extension_fixtures.py`` indexes the guide's sections by file. Every report
produced here is validated against the shipped schema (``tests/conftest.py``).
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from extension_fixtures import (
    COUNT_MUL,
    FIELDS,
    OPAQUE_NAME,
    Double,
    DoublePair,
    Opaque,
    Recorder,
    X,
    analyze_call,
    diagnostics,
    elementwise_flops,
    every_field,
    label,
    metric,
    opaque,
    row,
    strict_failure,
)
from torch import nn

from torchscan import ModuleCall, ModuleHandler, crawl_module

# == Validation ======================================================================================================

def complete_result(unit: str = "FLOPs", **changes: Any) -> dict[str, Any]:
    return {"status": "complete", "value": 4, "known_value": 4, "unit": unit, "scope": "module_call",
            "method": "mine", **changes}


INVALID_ESTIMATES = {
    "extra key": complete_result(note="x"),
    "missing key": {key: value for key, value in complete_result().items() if key != "scope"},
    "empty scope": complete_result(scope=""),
    "empty method": complete_result(method=""),
    "non-string method": complete_result(method=3),
    "nan": math.nan,
    "infinity": math.inf,
    "negative": -1,
    "boolean": True,
    "string": "4",
    "tensor": torch.tensor(4.0),
    "list for a count": [4, 4],
    "boolean inside": complete_result(value=True, known_value=True),
    "negative inside": complete_result(value=-4, known_value=-4),
    "infinite lower bound": complete_result(status="partial", value=None, known_value=math.inf),
    "complete unequal": complete_result(value=4, known_value=3),
    "complete without numbers": complete_result(value=None, known_value=None),
    "partial with value": complete_result(status="partial"),
    "partial without known_value": complete_result(status="partial", value=None, known_value=None),
    "unavailable with known_value": complete_result(status="unavailable", value=None),
    "unknown status": complete_result(status="exact"),
    "wrong unit": complete_result(unit="MACs"),
}


@pytest.mark.parametrize("name", sorted(INVALID_ESTIMATES))
def test_invalid_field_is_diagnosed_and_unavailable_while_other_fields_stay(name):
    # "A structured estimate must contain exactly the six MetricResult fields, with nonempty scope and method
    # strings. Counts and lower bounds must be finite, nonnegative real numbers; booleans are invalid. A complete
    # MetricResult requires equal numeric value and known_value. A partial result requires value=None and numeric
    # known_value; an unavailable result requires both numeric fields to be None. The unit must match the field.
    # Invalid fields receive diagnostics and unavailable results instead of unexplained zeros. ... Other valid
    # fields can remain complete when one estimate is invalid."
    callback = Recorder({"module_flops": INVALID_ESTIMATES[name], "macs": 0})
    report = analyze_call(nn.ReLU(), X, custom_modules={nn.ReLU: ModuleHandler(callback)})
    flops = metric(report, "", "module_flops")
    assert flops == {"status": "unavailable", "value": None, "known_value": None, "unit": "FLOPs",
                     "scope": "module_call", "method": label(callback)}
    assert metric(report, "", "macs")["status"] == "complete"
    assert [item["metric"] for item in diagnostics(report, "invalid_handler_result", "")] == ["module_flops"]
    assert report["totals"]["module_flops"]["status"] == "unavailable"


@pytest.mark.parametrize("result", [[("macs", 1)], None, 12, "macs", {"flops": 1, "macs": 2}, {"macs": 1, 3: 4}],
                         ids=["list", "none", "number", "string", "unknown name", "non-string name"])
def test_non_mapping_or_unsupported_name_invalidates_the_whole_result(result):
    # "Results must be mappings with supported field names; a non-mapping result or unsupported name invalidates the
    # whole callback result."
    callback = Recorder(lambda call: result)
    report = analyze_call(nn.ReLU(), X, custom_modules={nn.ReLU: ModuleHandler(callback)})
    metrics = row(report, "")["metrics"]
    assert {name: (item["status"], item["method"]) for name, item in metrics.items()} == {
        name: ("unavailable", label(callback)) for name in FIELDS}
    (problem,) = diagnostics(report, "invalid_handler_result", "")
    assert problem["metric"] is None


def test_receptive_fields_accept_per_dimension_lists():
    # Receptive-field fields may be one number or one number per spatial dimension; an empty list is not a count.
    report = analyze_call(Double(), X, custom_modules={Double: ModuleHandler(lambda call: {
        "receptive_field": [3, 5], "effective_stride": [1, 2], "effective_padding": []})})
    assert metric(report, "", "receptive_field")["value"] == [3, 5]
    assert metric(report, "", "effective_stride")["known_value"] == [1, 2]
    assert metric(report, "", "effective_padding")["status"] == "unavailable"
    assert [item["metric"] for item in diagnostics(report, "invalid_handler_result")] == ["effective_padding"]


def test_callbacks_cannot_claim_a_metric_was_not_requested():
    # "A MetricResult preserves complete, partial, or unavailable state": "not_requested" belongs to structure mode
    # and is no estimate; in a full analysis it must be rejected like any other invalid field.
    hidden = {"status": "not_requested", "value": None, "known_value": None, "unit": "FLOPs",
              "scope": "module_call", "method": "skip"}
    report = analyze_call(Double(), X, custom_modules={Double: ModuleHandler(
        lambda call: {**every_field(8), "module_flops": hidden})}, custom_mapping=COUNT_MUL)
    assert metric(report, "", "module_flops")["status"] == "unavailable"
    assert diagnostics(report, "invalid_handler_result", "")
    assert report["totals"]["module_flops"]["status"] == "unavailable"


def test_method_label_names_the_callback_and_appends_the_result_method():
    # "TorchScan ... labels the method custom_module_handler:<callback module>.<callback qualname>, appending your
    # result's method when supplied."
    def local_formula(call: ModuleCall) -> dict[str, Any]:
        return {"module_flops": 8, "macs": complete_result(unit="MACs", method="my_convention")}

    report = analyze_call(Double(), X, custom_modules={Double: ModuleHandler(local_formula)})
    expected = f"custom_module_handler:{__name__}.test_method_label_names_the_callback_and_appends_the_result_method" \
               ".<locals>.local_formula"
    assert label(local_formula) == expected
    assert metric(report, "", "module_flops")["method"] == expected
    assert metric(report, "", "macs")["method"] == expected + ":my_convention"
    assert report["context"]["custom_modules"] == [
        {"type": f"{Double.__module__}.Double", "method": expected, "subtree_metrics": []}]


def test_caller_handlers_are_always_labelled_as_custom():
    # "TorchScan ... labels the method custom_module_handler:<callback module>.<callback qualname>, appending your
    # result's method when supplied." A registration in custom_modules is a caller's, whatever it calls itself.
    def impostor(call: ModuleCall) -> dict[str, Any]:
        return {"module_flops": 8, "macs": complete_result(unit="MACs", value=0, known_value=0, method="mine")}

    report = analyze_call(Double(), X, custom_modules={Double: ModuleHandler(impostor, method="formula:linear")})
    assert metric(report, "", "module_flops")["method"] == label(impostor)
    assert metric(report, "", "macs")["method"] == label(impostor) + ":mine"


@pytest.mark.parametrize("owned", [False, True])
def test_scope_is_normalized_to_the_declared_ownership(owned):
    # "The normalized scope is module_call or subtree, as declared by the handler."
    handler = ModuleHandler(lambda call: {"module_flops": complete_result(scope="whatever I like")},
                            frozenset({"module_flops"}) if owned else frozenset())
    report = analyze_call(DoublePair(), X, custom_modules={DoublePair: handler})
    assert metric(report, "", "module_flops")["scope"] == ("subtree" if owned else "module_call")


def test_callback_exceptions_become_diagnostics_and_incomplete_estimates():
    # "Callback exceptions also produce diagnostics and incomplete estimates."
    def broken(call: ModuleCall) -> dict[str, Any]:
        raise KeyError("missing")

    report = analyze_call(nn.ReLU(), X, custom_modules={nn.ReLU: ModuleHandler(broken)})
    assert all(result["status"] == "unavailable" for result in row(report, "")["metrics"].values())
    (problem,) = diagnostics(report, "handler_exception", "")
    assert "KeyError" in problem["message"]
    assert report["totals"]["module_flops"]["status"] == "unavailable"


# == strict mode =====================================================================================================

def test_strict_raises_for_handler_failures_and_the_report_keeps_the_evidence():
    # "strict=True raises IncompleteAnalysisError for incomplete requested analysis, including handler failures ...
    # The exception's report retains the evidence."
    def broken(call: ModuleCall) -> dict[str, Any]:
        raise ZeroDivisionError

    report = strict_failure(Double(), X, custom_modules={Double: ModuleHandler(broken)}, custom_mapping=COUNT_MUL)
    assert diagnostics(report, "handler_exception", "")
    assert report["totals"]["module_flops"]["status"] == "unavailable"


def test_strict_raises_for_uncounted_operators_even_with_complete_module_estimates():
    # "... and uncounted operator work." "Supplying module estimates alone does not guarantee strict success:
    # inspect the separate operator report too."
    handlers = {Opaque: ModuleHandler(lambda call: every_field(8))}
    report = strict_failure(Opaque(), X, custom_modules=handlers)
    assert all(report["totals"][name]["status"] == "complete" for name in ("module_flops", "macs", "dmas"))
    assert report["totals"]["operator_flops"]["status"] == "partial"
    assert [item["operator"] for item in report["operator_flops"]["uncounted"]] == [OPAQUE_NAME]
    assert [item["operator"] for item in diagnostics(report, "uncounted_operator")] == [OPAQUE_NAME]
    counted = crawl_module(Opaque(), args=(X,), custom_modules=handlers, strict=True,
                           custom_mapping={opaque: elementwise_flops})
    assert counted["totals"]["operator_flops"]["value"] == 8
