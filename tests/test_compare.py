"""``compare_reports``: layers joined by ``(path, call_index)``, totals with deltas that never hide a lower bound."""

from __future__ import annotations

import copy
import json

import pytest
import torch
from torch import nn

from torchscan import ModuleCall, ModuleHandler, compare_reports, crawl_module
from torchscan.schema import validate_report


@torch.library.custom_op("torchscan_test_compare::opaque", mutates_args=())
def opaque(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@opaque.register_fake
def _(x):
    return torch.empty_like(x)


class Block(nn.Module):
    """A weighted elementwise product; the handler counts one MAC per output element."""

    def __init__(self, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        return x * self.weight


def estimate_block(call: ModuleCall):
    elements = call.output.numel()
    return {"module_flops": 2 * elements, "macs": elements, "dmas": 3 * elements, "receptive_field": 1,
            "effective_stride": 1, "effective_padding": 0}


class Opaque(nn.Module):
    def forward(self, x):
        return opaque(x)


HANDLERS = {Block: ModuleHandler(estimate_block)}
MUL = {torch.ops.aten.mul: lambda *shapes, out_shape, **kw: torch.Size(out_shape).numel()}


def analyze(model, width):
    report = crawl_module(model, (width,), custom_modules=HANDLERS, custom_mapping=MUL)
    validate_report(report)
    return report


class Net(nn.Module):
    def __init__(self, width: int, repeats: int = 1, extra: nn.Module | None = None):
        super().__init__()
        self.stem = Block(width)
        self.shared = Block(width)
        self.repeats = repeats
        self.extra = extra

    def forward(self, x):
        x = self.stem(x)
        for _ in range(self.repeats):
            x = self.shared(x)
        return x if self.extra is None else self.extra(x)


def identities(rows):
    return [(row["path"], row["call_index"]) for row in rows]


def test_identical_reports_have_no_differences_and_zero_deltas():
    report = analyze(Net(4), 4)
    diff = compare_reports(report, copy.deepcopy(report))
    assert diff["layers"] == {"added": [], "removed": [], "changed": []}
    assert diff["totals"]["macs"]["delta"] == {"status": "complete", "value": 0, "unit": "MACs"}
    assert diff["totals"]["parameters"] == {"before": 8, "after": 8, "delta": 0}
    json.dumps(diff)


def test_layers_are_matched_by_path_and_call_index():
    before = analyze(Net(4, repeats=2), 4)
    after = analyze(Net(4, repeats=3, extra=Block(4)), 4)
    diff = compare_reports(before, after)
    assert identities(diff["layers"]["added"]) == [("shared", 2), ("extra", 0)]
    assert diff["layers"]["removed"] == []
    assert diff["layers"]["changed"] == []
    assert diff["totals"]["macs"] == {"before": before["totals"]["macs"], "after": after["totals"]["macs"],
                                      "delta": {"status": "complete", "value": 4 * (1 + 3 + 1) - 4 * (1 + 2),
                                                "unit": "MACs"}}
    reverse = compare_reports(after, before)
    assert identities(reverse["layers"]["removed"]) == [("shared", 2), ("extra", 0)]
    assert reverse["totals"]["macs"]["delta"]["value"] == -8


def test_changed_layers_list_each_difference():
    before = analyze(Net(4), 4)
    after = analyze(Net(6), 6)
    diff = compare_reports(before, after)
    changed = {(row["path"], row["call_index"]): row["changes"] for row in diff["layers"]["changed"]}
    assert set(changed) == {("", 0), ("stem", 0), ("shared", 0)}
    stem = changed[("stem", 0)]
    assert stem["parameters"] == {"before": 4, "after": 6, "delta": 2}
    assert stem["output"]["before"]["shape"] == [1, 4] and stem["output"]["after"]["shape"] == [1, 6]
    assert stem["metrics"]["macs"]["delta"] == {"status": "complete", "value": 2, "unit": "MACs"}
    assert "receptive_field" not in stem["metrics"]  # unchanged fields are not listed
    assert diff["totals"]["parameters"] == {"before": 8, "after": 12, "delta": 4}


def test_a_type_change_at_the_same_path_is_reported():
    before = analyze(Net(4, extra=Block(4)), 4)
    after = analyze(Net(4, extra=Opaque()), 4)
    diff = compare_reports(before, after)
    extra = next(row for row in diff["layers"]["changed"] if row["path"] == "extra")
    assert extra["changes"]["type"] == {"before": f"{__name__}.Block", "after": f"{__name__}.Opaque"}


def test_an_incomplete_side_gives_an_unavailable_delta():
    complete = analyze(Net(4), 4)
    partial = analyze(Net(4, extra=Opaque()), 4)
    assert partial["totals"]["macs"]["status"] == "partial"
    assert partial["totals"]["operator_flops"]["status"] == "partial"
    for before, after in ((complete, partial), (partial, complete), (partial, partial)):
        diff = compare_reports(before, after)
        for name in ("macs", "module_flops", "dmas", "operator_flops"):
            delta = diff["totals"][name]["delta"]
            assert delta["status"] == "unavailable" and delta["value"] is None, (name, delta)
        assert diff["totals"]["macs"]["after"] == after["totals"]["macs"]


def test_unrequested_metrics_give_no_delta():
    full = analyze(Net(4), 4)
    structure = crawl_module(Net(4), (4,), mode="structure")
    diff = compare_reports(structure, full)
    assert diff["totals"]["macs"]["delta"]["status"] == "unavailable"
    assert diff["totals"]["parameters"]["delta"] == 0


def test_context_summarizes_both_sides():
    diff = compare_reports(analyze(Net(4), 4), crawl_module(Net(4), (4,), mode="structure"))
    assert diff["context"]["before"]["analysis_mode"] == "full"
    assert diff["context"]["after"]["analysis_mode"] == "structure"
    assert diff["context"]["after"]["model_type"] == f"{__name__}.Net"


@pytest.mark.parametrize("broken, error", [
    ({"layers": []}, TypeError),
    ([], TypeError),
    (None, TypeError),
])
def test_non_reports_are_refused(broken, error):
    report = analyze(Net(4), 4)
    with pytest.raises(error, match="before"):
        compare_reports(broken, report)
    with pytest.raises(error, match="after"):
        compare_reports(report, broken)


def test_an_unknown_schema_version_is_refused():
    report = analyze(Net(4), 4)
    future = {**report, "schema_version": 2}
    with pytest.raises(ValueError, match="schema_version"):
        compare_reports(report, future)


# -- independent results and refused comparisons ------------------------------------------------------------------

def test_the_comparison_shares_no_object_with_its_inputs():
    before = analyze(Net(4, repeats=2), 4)
    after = analyze(Net(6, extra=Block(6)), 6)
    snapshots = copy.deepcopy(before), copy.deepcopy(after)
    diff = compare_reports(before, after)
    diff["totals"]["macs"]["before"]["value"] = -1
    diff["totals"]["operator_flops"]["after"]["known_value"] = -1
    diff["layers"]["removed"][0]["metrics"]["macs"]["value"] = -1
    diff["layers"]["added"][0]["metrics"]["macs"]["value"] = -1
    changed = next(row for row in diff["layers"]["changed"] if row["path"] == "stem")
    changed["changes"]["output"]["after"]["shape"].append(99)
    for entry in changed["changes"]["metrics"].values():
        entry["before"]["value"] = entry["after"]["value"] = -1
    assert (before, after) == snapshots


def test_no_two_parts_of_a_comparison_are_one_object():
    before = analyze(Net(4), 4)
    after = analyze(Net(6), 6)
    diff = compare_reports(before, after)
    stem = next(row for row in diff["layers"]["changed"] if row["path"] == "stem")
    stem["changes"]["metrics"]["macs"]["after"]["value"] = -1
    assert stem["metrics"]["macs"]["value"] == 6  # the row's own metrics are a separate copy


@pytest.mark.parametrize("side", ["before", "after"])
def test_duplicate_layer_identities_are_refused(side):
    report = analyze(Net(4, repeats=2), 4)
    broken = copy.deepcopy(report)
    broken["layers"][3]["call_index"] = 0  # the second call of "shared" now claims index 0 too
    reports = {"before": report, "after": report, side: broken}
    with pytest.raises(ValueError, match=rf"{side} has more than one layer record for path 'shared', call_index 0"):
        compare_reports(reports["before"], reports["after"])


@pytest.mark.parametrize("key, value", [("unit", "GMACs"), ("scope", "module_call"), ("method", "vendor_estimate")])
def test_totals_measured_differently_are_refused(key, value):
    report = analyze(Net(4), 4)
    other = copy.deepcopy(report)
    other["totals"]["macs"][key] = value
    expected = rf"totals\.macs: the {key} differs \(before {report['totals']['macs'][key]!r}, after {value!r}\)"
    with pytest.raises(ValueError, match=expected):
        compare_reports(report, other)
    with pytest.raises(ValueError, match=r"totals\.macs"):
        compare_reports(other, report)


def test_the_first_incompatibility_is_named():
    report = analyze(Net(4), 4)
    other = copy.deepcopy(report)
    other["totals"]["dmas"]["unit"] = "bytes"
    other["totals"]["macs"]["scope"] = "module_call"
    with pytest.raises(ValueError, match=r"totals\.macs: the scope"):
        compare_reports(report, other)


def test_the_schema_version_comes_from_the_schema_module(monkeypatch):
    from torchscan import compare, schema

    report = analyze(Net(4), 4)
    assert compare_reports(report, report)["schema_version"] == schema.SCHEMA_VERSION
    monkeypatch.setattr(compare, "SCHEMA_VERSION", 7)
    with pytest.raises(ValueError, match="this version reads 7"):
        compare_reports(report, report)


def test_memory_totals_are_compared_when_either_report_traced_memory() -> None:
    """``forward_peak_bytes``, ``activations`` (and a training step's ``training_peak_bytes``) join the totals of a
    comparison when a side has them; a side without them reads ``None`` and the delta is unavailable."""
    from torchscan_testing import with_memory

    plain = crawl_module(nn.Sequential(nn.Linear(4, 8), nn.ReLU()), (4,))
    traced = with_memory(plain)
    wider = with_memory(crawl_module(nn.Sequential(nn.Linear(4, 16), nn.ReLU()), (4,)))
    totals = compare_reports(traced, wider)["totals"]
    old, new = (report["totals"]["forward_peak_bytes"]["value"] for report in (traced, wider))
    assert totals["forward_peak_bytes"]["delta"] == {"status": "complete", "value": new - old, "unit": "bytes"}
    assert totals["activations"]["delta"]["unit"] == "activations"
    assert "training_peak_bytes" not in totals
    assert "forward_peak_bytes" not in compare_reports(plain, plain)["totals"]
    assert compare_reports(plain, traced)["totals"]["forward_peak_bytes"]["delta"]["status"] == "unavailable"
