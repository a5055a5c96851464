"""Findings: one per cause with every metric it affects, the causes of an incomplete report, the message of
`IncompleteAnalysisError` naming the layer types and operators behind it, and the display cells' markers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchscan import IncompleteAnalysisError, crawl_module
from torchscan.views import Cell, findings, legend, report_view
from torchscan.views.cells import MARKERS, cell_markers
from torchscan.views.formatting import format_parameters


class Bessel(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.bessel_j0(x)


class Direct(nn.Module):
    """A composite that adds work of its own, outside any child: a matmul no module formula covers."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.bessel_j0(self.linear(x)) @ torch.ones(4, 4)


def test_a_diagnostic_per_metric_is_one_finding_with_every_metric() -> None:
    report = crawl_module(nn.Sequential(nn.Linear(4, 4), Bessel()), (4,))
    records = [item for item in report["diagnostics"] if item["code"] == "unestimated_direct_work"]
    assert len(records) == 3  # the report keeps one record per metric ...
    grouped = [item for item in findings(report) if item.code == "unestimated_direct_work"]
    assert len(grouped) == 1  # ... the views show one finding
    (finding,) = grouped
    assert finding.metrics == ("macs", "module_flops", "dmas") and finding.metric_text == "MACs, FLOPs, DMAs"
    assert finding.where == "1 (Bessel)" and finding.path == "1"
    assert finding.message.endswith("MACs, module FLOPs and DMAs are lower bounds")
    assert "executed aten.special_bessel_j0 x1 directly" in finding.message
    operator = next(item for item in findings(report) if item.code == "uncounted_operator")
    assert operator.where == "aten.special_bessel_j0" and operator.metrics == ("operator_flops",)


def test_incomplete_analysis_error_names_layer_types_and_operators() -> None:
    with pytest.raises(IncompleteAnalysisError) as raised:
        crawl_module(nn.Sequential(Direct()), (4,), strict=True)
    message = str(raised.value)
    assert message.startswith("strict analysis is incomplete: the MACs, module FLOPs, DMAs and operator FLOPs totals "
                              "are lower bounds or unavailable; 1 layer call has incomplete estimates.")
    # The layer with its type, the operators, and each finding once with the metrics it affects.
    assert "unestimated_direct_work at 0 (Direct) [MACs, FLOPs, DMAs]" in message
    assert "Direct executed aten.special_bessel_j0 x1 directly" in message  # the matmul has a module formula
    assert message.count("unestimated_direct_work") == 1
    assert "uncounted_operator at aten.special_bessel_j0 [Op FLOPs]" in message
    assert raised.value.report["diagnostics"]  # the evidence stays with the exception


def test_causes_leave_notes_out_and_errors_come_first() -> None:
    report = crawl_module(nn.Sequential(nn.Linear(4, 4), Bessel()), (4,))
    report["diagnostics"].append({"code": "uncounted_operator", "severity": "info", "metric": None,
                                  "message": "a note", "operator": "aten.x"})
    report["diagnostics"].append({"code": "handler_exception", "severity": "error", "metric": "macs",
                                  "message": "boom", "path": "0", "call_index": 0})
    view = report_view(report)
    assert view.findings[0].code == "handler_exception" and view.findings[0].where == "0 (Linear)"
    assert all(item.severity != "info" for item in view.causes) and len(view.causes) == len(view.findings) - 1


def test_markers_and_legend() -> None:
    assert cell_markers(Cell("≥3", "partial")) == {"≥"} and cell_markers(Cell("Σ ≥3", "partial")) == {"≥", "Σ"}
    assert cell_markers(Cell("n/a", "unavailable")) == {"n/a"} and cell_markers(Cell("n/a*", "not_applicable")) == {
        "n/a*"}
    assert cell_markers(Cell("12", "complete")) == set()
    entries = legend({"Σ", "≥", "covered"})
    assert [marker for marker, _ in entries] == ["≥", "Σ", "covered"]  # fixed order, only what is used
    assert all(meaning == MARKERS[marker] for marker, meaning in entries)


@pytest.mark.parametrize(("count", "text"), [(0, "0"), (427, "427"), (1_000, "1k"), (11_689_512, "11.7M"),
                                             (124_439_808, "124M"), (6_738_415_616, "6.74B"),
                                             (999_600_000, "1B"), (3_504_872, "3.5M")])
def test_parameters_read_as_model_cards_write_them(count: int, text: str) -> None:
    assert format_parameters(count) == text
