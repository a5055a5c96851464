"""The shipped JSON Schema: a valid Draft 2020-12 schema that accepts real reports and rejects broken ones."""

from __future__ import annotations

import copy
import io
import json
from importlib import resources

import jsonschema
import pytest
import torch
from torch import nn
from torchscan_testing import VALIDATED

from torchscan import SCHEMA_VERSION, ModuleCall, ModuleHandler, crawl_module, summary
from torchscan.results import SCOPES
from torchscan.schema import _compiled_validator, _validator, report_schema, validate_report


class Scale(nn.Module):
    def forward(self, x):
        return x * 2


def estimate_scale(call: ModuleCall):
    elements = call.output.numel()
    return {"module_flops": elements, "macs": 0, "dmas": 2 * elements, "receptive_field": [1],
            "effective_stride": 1, "effective_padding": 0}


@pytest.fixture(scope="module")
def report():
    model = nn.Sequential(Scale(), nn.Sequential(Scale(), nn.Linear(3, 2)))
    return crawl_module(model, (3,), custom_modules={Scale: ModuleHandler(estimate_scale)})


def scale_metric(report, name="macs"):
    return next(layer for layer in report["layers"] if layer["path"] == "0")["metrics"][name]


def rejected(report) -> bool:
    # validate_report trusts jsonschema-rs where it accepts a report: it must accept none that jsonschema rejects
    # (it may reject more: infinities and NaN are no JSON numbers to it, and jsonschema's verdict then stands)
    assert _validator().is_valid(report) or not _compiled_validator().is_valid(report)
    try:
        validate_report(report)
    except jsonschema.ValidationError:
        return True
    return False


def test_the_schema_ships_in_the_package_and_is_valid_draft_2020_12():
    text = resources.files("torchscan").joinpath("report.schema.json").read_text(encoding="utf-8")
    schema = json.loads(text)
    assert schema == report_schema()
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    jsonschema.Draft202012Validator.check_schema(schema)


def test_reports_carry_the_schema_version_and_validate(report):
    assert report["schema_version"] == SCHEMA_VERSION == 1
    validate_report(report)
    assert report_schema()["properties"]["schema_version"] == {"const": 1}


def test_the_report_has_the_designed_sections(report):
    import platform

    import torchscan

    assert list(report) == ["schema_version", "context", "inputs", "layers", "totals", "operator_flops",
                            "operator_bytes", "diagnostics"]
    context = report["context"]
    assert (context["torchscan"], context["torch"], context["python"]) == (
        torchscan.__version__, torch.__version__, platform.python_version())
    assert context["model_type"] == "torch.nn.modules.container.Sequential"
    assert context["analysis_mode"] == "full" and context["execution"]["mode"] == "eval"
    assert context["devices"] == ["cpu"] and context["dtypes"] == ["float32"]
    assert set(report["totals"]) == {"parameters", "buffers", "module_flops", "macs", "dmas", "operator_flops",
                                     "operator_bytes"}
    assert set(report["operator_flops"]) >= {"total", "by_operator", "uncounted", "ignored", "custom_formulas"}
    for layer in report["layers"]:
        assert {"path", "call_index", "name", "depth", "type", "input", "output", "parameters", "buffers",
                "metrics", "operator_flops"} <= set(layer)


def test_structure_reports_validate():
    validate_report(crawl_module(nn.Sequential(Scale(), nn.ReLU()), (3,), mode="structure"))


def test_reports_with_nested_inputs_and_outputs_validate():
    class Nested(nn.Module):
        def forward(self, x, extra):
            return {"out": (x, [None, 3]), "meta": extra}

    x = torch.ones(2)
    validate_report(crawl_module(Nested(), args=(x, {"a": (x, 1.5), "/tmp/file": None}), kwargs={}))


@pytest.mark.parametrize("name, change", [
    pytest.param("macs", {"value": 5}, id="complete-value-differs"),
    pytest.param("macs", {"value": float("inf"), "known_value": float("inf")}, id="infinite"),
    pytest.param("macs", {"value": float("nan"), "known_value": float("nan")}, id="nan"),
    pytest.param("macs", {"value": [3, 5], "known_value": [3, 5]}, id="list-for-macs"),
    pytest.param("macs", {"unit": "FLOPs"}, id="wrong-unit"),
])
def test_semantically_broken_metrics_are_rejected(report, name, change):
    broken = copy.deepcopy(report)
    scale_metric(broken, name).update(change)
    assert rejected(broken)


@pytest.mark.parametrize("value", [-1, -0.5])
def test_a_negative_count_is_rejected(report, value):
    broken = copy.deepcopy(report)
    scale_metric(broken).update(value=value, known_value=value)
    assert rejected(broken)
    broken = copy.deepcopy(report)
    broken["totals"]["parameters"]["total"] = value
    assert rejected(broken)


def test_a_boolean_count_is_rejected(report):
    broken = copy.deepcopy(report)
    scale_metric(broken).update(value=True, known_value=True)
    assert rejected(broken)
    broken = copy.deepcopy(report)
    broken["layers"][0]["parameters"]["count"] = False
    assert rejected(broken)


@pytest.mark.parametrize("change", [
    {"status": "partial"},                                  # a partial result must hide its value
    {"status": "unavailable"},                              # an unavailable result has no numbers
    {"status": "complete", "value": None},                  # a complete result needs its value
    {"status": "exact"},
    {"unit": ""},
    {"method": None},
])
def test_inconsistent_metric_results_are_rejected(report, change):
    broken = copy.deepcopy(report)
    scale_metric(broken, "dmas").update(change)
    assert rejected(broken)


def test_spatial_lists_are_accepted_but_must_be_non_empty(report):
    assert scale_metric(report, "receptive_field")["value"] == [1]
    broken = copy.deepcopy(report)
    scale_metric(broken, "receptive_field").update(value=[], known_value=[])
    assert rejected(broken)


@pytest.mark.parametrize("mutate", [
    lambda r: r.pop("diagnostics"),
    lambda r: r.update(schema_version=2),
    lambda r: r.update(surprise=1),
    lambda r: scale_metric(r).update(coverage=0.5),
    lambda r: r["layers"][0].pop("path"),
    lambda r: r["layers"][0].update(call_index=-1),
    lambda r: r["layers"][0]["metrics"].update(flops=r["layers"][1]["metrics"]["macs"]),
    lambda r: r["totals"].pop("macs"),
    lambda r: r["inputs"].update(source="guessed"),
    lambda r: r["inputs"]["args"][0].update(kind="ndarray"),
    lambda r: r["inputs"]["args"][0].update(values=[0.5, 0.25, 1.0]),
    lambda r: r["diagnostics"].append({"code": "Bad Code", "severity": "warning", "metric": None, "message": "x"}),
    lambda r: r["diagnostics"].append({"code": "x", "severity": "fatal", "metric": None, "message": "x"}),
])
def test_structural_breakage_is_rejected(report, mutate):
    broken = copy.deepcopy(report)
    mutate(broken)
    assert rejected(broken)


def test_scope_is_an_enumeration_of_the_scopes_results_defines(report):
    assert report_schema()["$defs"]["metric"]["properties"]["scope"] == {"enum": list(SCOPES)}
    broken = copy.deepcopy(report)
    scale_metric(broken)["scope"] = "layer"
    assert rejected(broken)
    used = {result["scope"] for layer in report["layers"] for result in (*layer["metrics"].values(),
                                                                          *layer["operator_flops"].values())}
    assert used | {report["totals"]["macs"]["scope"]} <= set(SCOPES)


def test_every_report_analyzed_in_the_test_process_is_validated(monkeypatch):
    """tests/conftest.py wraps the analysis: a report that breaks the schema fails the test that made it."""
    from torchscan import crawler

    before = VALIDATED["reports"]
    crawl_module(nn.Linear(3, 2), (3,))
    summary(nn.Linear(3, 2), (3,), file=io.StringIO())
    assert VALIDATED["reports"] == before + 2
    assemble = crawler._assemble

    def broken_assembly(*args, **kwargs):
        report = assemble(*args, **kwargs)
        report["totals"]["macs"]["scope"] = "nowhere"
        return report

    monkeypatch.setattr(crawler, "_assemble", broken_assembly)
    with pytest.raises(jsonschema.ValidationError, match="nowhere"):
        crawl_module(nn.Linear(3, 2), (3,))
