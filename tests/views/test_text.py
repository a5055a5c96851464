"""``summary``: the terminal table of one analysis (the layer view every renderer shows), returning the same report
as ``crawl_module``; ``max_depth`` and ``max_rows``, the legend of its markers and grouped findings."""

from __future__ import annotations

import io
import json
import re

import pytest
import torch
from torch import nn

from torchscan import ModuleCall, ModuleHandler, crawl_module, summary
from torchscan.schema import validate_report
from torchscan.views import report_view
from torchscan.views.cells import MARKERS
from torchscan.views.text import column_keys, render_table


@torch.library.custom_op("torchscan_test_text::opaque", mutates_args=())
def opaque(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@opaque.register_fake
def _(x):
    return torch.empty_like(x)


class Scale(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, x):
        return x * self.weight


def estimate_scale(call: ModuleCall):
    elements = call.output.numel()
    return {"module_flops": 1500 * elements, "macs": elements, "dmas": 3 * elements, "receptive_field": 1,
            "effective_stride": 1, "effective_padding": 0}


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = Scale(4)
        self.head = Scale(4)
        self.head.weight.requires_grad_(False)

    def forward(self, x):
        return self.head(self.block(self.block(x)))


class Opaque(nn.Module):
    def forward(self, x):
        return opaque(x)


HANDLERS = {Scale: ModuleHandler(estimate_scale)}
MUL = {torch.ops.aten.mul: lambda *shapes, out_shape, **kw: torch.Size(out_shape).numel()}


def lines_of(text: str) -> list[str]:
    return text.rstrip("\n").split("\n")


def test_summary_prints_the_table_and_returns_the_crawl_report(capsys):
    report = summary(Net(), (4,), custom_modules=HANDLERS, custom_mapping=MUL)
    validate_report(report)
    printed = capsys.readouterr().out
    expected = crawl_module(Net(), (4,), custom_modules=HANDLERS, custom_mapping=MUL)
    assert json.dumps(report, sort_keys=True) == json.dumps(expected, sort_keys=True)
    assert printed == render_table(report) + "\n"
    lines = lines_of(printed)
    assert lines[0].split() == ["Layer", "Type", "Output", "Params", "MACs", "%", "MACs", "FLOPs", "DMAs"]
    assert set(lines[1]) == {"-"}
    rows = [line.split() for line in lines[2:6]]
    # The composite root shows the sum over its calls (Σ), parameters included, as the Markdown and HTML views do.
    assert rows == [["(root)", "Net", "[1,", "4]", "Σ", "8", "Σ", "12", "100.0%", "Σ", "18k", "Σ", "36"],
                    ["block", "Scale", "[1,", "4]", "4", "4", "33.3%", "6k", "12"],
                    ["block", "#1", "Scale", "[1,", "4]", "4", "33.3%", "6k", "12"],  # parameters once per module
                    ["head", "Scale", "[1,", "4]", "4", "4", "33.3%", "6k", "12"]]
    assert lines[6] == lines[1]
    assert lines[7] == "Parameters: 8 (4 trainable, 4 frozen), 32B"
    assert "MACs 12 [complete]" in lines[8] and "FLOPs 18k [complete]" in lines[8]
    assert "DMAs 36 [complete]" in lines[8]
    assert lines[9] == "Operator view: FLOPs 12 [complete]"
    assert lines[10:] == ["Legend:", "  Σ   " + MARKERS["Σ"], "  #k  the k-th call of the same module (k from 0)"]


def test_rows_are_indented_by_depth():
    report = crawl_module(nn.Sequential(nn.Sequential(Scale(2))), (2,), custom_modules=HANDLERS)
    rows = lines_of(render_table(report))[2:5]
    indents = [(len(line) - len(line.lstrip()), line.split()[0]) for line in rows]
    assert indents == [(0, "(root)"), (2, "0"), (4, "0")]


def test_summary_writes_to_the_given_file(capsys):
    buffer = io.StringIO()
    report = summary(Net(), (4,), file=buffer, custom_modules=HANDLERS)
    assert capsys.readouterr().out == ""
    assert buffer.getvalue() == render_table(report) + "\n"


def test_lower_bounds_unavailable_values_and_findings_are_shown_as_such():
    model = nn.Sequential(Scale(3), Opaque())
    buffer = io.StringIO()
    report = summary(model, (3,), file=buffer, custom_modules=HANDLERS)
    text = buffer.getvalue()
    assert report["totals"]["macs"]["status"] == "partial"
    assert "MACs ≥3 [partial]" in text
    assert "Operator view: FLOPs ≥" in text and "[partial]" in text
    opaque_row = next(line for line in lines_of(text) if line.lstrip().startswith("1 "))
    assert "⚠" in opaque_row and "≥0" in opaque_row  # marked, and a lower bound rather than a zero
    assert "  ≥  lower bound: at least this much, some work could not be counted" in text
    assert "  ⚠  a diagnostic points at this call (see the findings)" in text
    # Findings are grouped: the direct-work diagnostic of three metrics is one line naming all three.
    records = [item for item in report["diagnostics"] if item["code"] == "unestimated_direct_work"]
    assert len(records) == 3
    finding_lines = [line for line in lines_of(text) if "unestimated_direct_work" in line]
    assert len(finding_lines) == 1 and "at 1 (Opaque) [MACs, FLOPs, DMAs]" in finding_lines[0]
    assert text.count("Findings: ") == 1


def test_covered_estimates_read_covered():
    class Pair(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Scale(2)

        def forward(self, x):
            return self.inner(x)

    owner = ModuleHandler(lambda call: {"macs": 7, "module_flops": 14}, frozenset({"macs", "module_flops"}))
    report = crawl_module(Pair(), (2,), custom_modules={**HANDLERS, Pair: owner})
    text = render_table(report)
    inner = next(line for line in lines_of(text) if line.lstrip().startswith("inner"))
    assert inner.split()[-3:] == ["covered", "covered", "6"]  # DMAs are not owned: the call keeps its own
    assert "covered  counted by an enclosing subtree owner" in text


def test_structure_mode_shows_unrequested_metrics():
    buffer = io.StringIO()
    summary(Net(), (4,), file=buffer, mode="structure")
    text = buffer.getvalue()
    assert "MACs — [not_requested]" in text and "Operator view: FLOPs — [not_requested]" in text
    assert "Findings" not in text and "  —   not requested (structure mode)" in text


def test_max_depth_hides_deeper_calls_and_keeps_their_cost_in_the_sums():
    model = nn.Sequential(nn.Sequential(Scale(2), Scale(2)), Scale(2))
    report = crawl_module(model, (2,), custom_modules=HANDLERS)
    full = lines_of(render_table(report))
    cut = render_table(report, max_depth=1)
    rows = lines_of(cut)[2:5]
    assert [line.split()[0] for line in rows] == ["(root)", "0", "1"]
    assert rows[1].split()[-2:] == ["Σ", "12"]  # the two hidden Scale calls are summed into their parent
    assert rows[1].split()[4:6] == ["Σ", "4"]  # and so are their parameters
    assert "… 2 rows deeper than max_depth=1 are hidden; their costs are in the Σ of the rows above" in cut
    assert len(full) == len(lines_of(cut)) - 1 + 2
    buffer = io.StringIO()
    summary(model, (2,), file=buffer, max_depth=0, custom_modules=HANDLERS)
    assert [line.split()[0] for line in lines_of(buffer.getvalue())[2:3]] == ["(root)"]
    assert "4 rows deeper than max_depth=0" in buffer.getvalue()


@pytest.mark.parametrize(("options", "error", "message"), [
    ({"max_depth": -1}, ValueError, "max_depth must be at least 0, got -1"),
    ({"max_depth": "2"}, TypeError, "max_depth must be an int or None, got str"),
    ({"max_depth": True}, TypeError, "max_depth must be an int or None, got bool"),
    ({"max_rows": 0}, ValueError, "max_rows must be at least 1, got 0"),
])
def test_bad_limits_are_named(options, error, message):
    with pytest.raises(error, match=message):
        summary(Net(), (4,), file=io.StringIO(), **options)


def test_long_tables_can_be_truncated():
    model = nn.Sequential(*(Scale(2) for _ in range(6)))
    report = crawl_module(model, (2,), custom_modules=HANDLERS)
    text = render_table(report, max_rows=3)
    assert "… 4 more rows (max_rows=3)" in text
    assert len(lines_of(text)) == len(lines_of(render_table(report))) - 4 + 1


class Tied(nn.Module):
    """Depth 3 at most, a tied weight (``head`` reuses ``embed``'s), a module called twice, one never called."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(4, 4)
        self.body = nn.Sequential(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)), nn.Linear(4, 4))
        self.head = nn.Linear(4, 4)
        self.head.weight = self.embed.weight
        self.unused = nn.Linear(4, 100)

    def forward(self, x):
        return self.head(self.body(self.embed(self.embed(x))))


def params_column(text: str) -> dict[str, str]:
    """The Params cell of each row of a table rendered with ``col_names=("params",)``, by the row's name as printed
    (indented two spaces per depth)."""
    rows = {}
    for line in lines_of(text)[2:]:
        if set(line) == {"-"}:
            break
        if not line.startswith("…"):
            name, value = re.fullmatch(r"(\s*\S+(?: #\d+)?)(.*)", line).groups()
            rows[name] = value.strip()
    return rows


def test_parameters_are_summed_over_subtrees_at_every_depth():
    model = Tied()
    report = crawl_module(model, (4,))
    total = sum(parameter.numel() for parameter in model.parameters())  # a tied tensor once
    assert report["totals"]["parameters"]["total"] == total == 20 + 20 + 8 + 20 + 4 + 500
    tables = {depth: params_column(render_table(report, max_depth=depth, col_names=("params",)))
              for depth in (0, 1, 2, None)}
    # The root holds the model's total at every depth, the modules that never ran included.
    assert {table["(root)"] for table in tables.values()} == {f"Σ {total}"}
    assert tables[0] == {"(root)": f"Σ {total}"}
    assert tables[1]["  body"] == tables[None]["  body"] == "Σ 48"  # 0.0 (20) + 0.1 (BatchNorm1d: 8) + 1 (20)
    assert tables[2]["    0"] == tables[None]["    0"] == "Σ 28" and tables[None]["      1"] == "8"
    # A module called twice shows its parameters at its first call only; the tied weight is counted once, with
    # the module that holds it first (head keeps its own bias).
    assert tables[None]["  embed"] == "20" and tables[None]["  embed #1"] == ""
    assert tables[None]["  head"] == "4"
    buffers = {row.label: row.cell("buffers").text for row in report_view(report).layers}
    assert buffers["(root)"] == "Σ 9" and buffers["body"] == "Σ 9" and buffers["body.0.1"] == "9"


def test_parameter_share_and_exact_values_in_the_tooltips():
    report = crawl_module(Tied(), (4,))
    rows = {row.label: row for row in report_view(report).layers}
    assert rows["body"].cell("params_share").text == "8.4%"  # 48 of 572
    assert rows["body"].params.note == "48 parameters in this module and the modules inside it (a shared tensor once)"
    assert rows["embed #1"].params.note == "20 parameters of the module, counted at the module's first call"
    assert rows["body"].cell("macs").note.startswith("sum of the calls inside: 32 MACs (complete); ")
    assert rows["embed"].cell("macs").note == "16 MACs (complete); method formula:linear; scope module_call"
    assert rows["embed"].cell("macs_share").text == "20.0%"  # 16 of 80 MACs


def test_col_names_choose_the_columns_and_unknown_ones_are_named():
    report = crawl_module(Net(), (4,), custom_modules=HANDLERS)
    header = lines_of(render_table(report, col_names=("num_params", "params_percent", "mult_adds")))[0]
    assert header.split() == ["Layer", "Params", "%", "Params", "MACs"]
    assert column_keys(None) == ("type", "output", "params", "macs", "macs_share", "module_flops", "dmas")
    with pytest.raises(ValueError, match=r"col_names: unknown column 'flops'; expected some of type, output, .*dmas"):
        summary(Net(), (4,), col_names=("flops",), custom_modules=HANDLERS)
    with pytest.raises(TypeError, match="col_names must be a sequence of column names"):
        render_table(report, col_names="params")
    with pytest.raises(ValueError, match="col_names must name at least one column"):
        render_table(report, col_names=())
