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
