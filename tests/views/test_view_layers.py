"""The layer view every renderer shows: statuses read honestly, subtree sums, ownership badges, full paths for calls
made out of their tree, parameters once per module, and the tree positions of the collapsible tree."""

from __future__ import annotations

import torch
from torch import nn

from torchscan import ModuleCall, ModuleHandler, crawl_module
from torchscan.views import LAYER_COLUMNS, layer_rows, report_view, shape_text


class Bessel(nn.Module):
    """A custom leaf running an operator without any formula: its estimates are lower bounds."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.bessel_j0(x)


def unknown_macs(call: ModuleCall) -> dict:
    return {"macs": None}


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.second = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x))


def block_macs(call: ModuleCall) -> dict:
    """The whole block's MACs, owned inclusively (two 4x4 linear layers on one row)."""
    return {"macs": 2 * 4 * 4}


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.Sequential(nn.ReLU(), nn.Flatten()))


def test_complete_totals_and_subtree_sums() -> None:
    view = report_view(crawl_module(cnn(), (3, 8, 8)), title="cnn")
    totals = {(row.label, row.view): row.cell for row in view.totals}
    conv_macs = 4 * 6 * 6 * 3 * 3 * 3
    assert totals[("MACs", "module view")].text == "3.89k" and totals[("MACs", "module view")].sort == conv_macs
    assert totals[("Parameters", "structure")].sort == 4 * 3 * 3 * 3 + 4
    assert view.status == "complete" and view.incomplete == "" and view.causes == []
    root, conv, inner, relu, flatten = view.layers
    # The root's cell is the sum over its subtree, marked as such; a leaf shows its own estimate.
    assert root.metrics["macs"].text == "Σ 3.89k" and root.metrics["macs"].sort == conv_macs
    assert conv.metrics["macs"].text == "3.89k" and conv.metrics["receptive_field"].text == "3×3"
    assert inner.metrics["module_flops"].sort == relu.metrics["module_flops"].sort == 4 * 6 * 6
    # Pre-order extents drive the collapsible tree: the root spans all rows, the inner Sequential two children.
    assert (root.end, conv.end, inner.end, relu.end) == (5, 2, 5, 4)
    assert (root.parent, inner.parent, relu.parent) == (None, 0, 2)
    assert [(item.position, item.end, item.parent) for item in view.tree] == [
        (0, 5, ""), (1, 2, 0), (2, 5, 0), (3, 4, 2), (4, 5, 2)]
    assert flatten.metrics["receptive_field"].status == "not_applicable" and flatten.metrics["receptive_field"].text == (
        "n/a*")
    assert ("formula:conv", "Built-in module formula of the conv family (see the counting conventions).") in view.methods
    # Every column of the layer view has a cell on every row.
    assert all(isinstance(row.cell(column.key).text, str) for row in view.layers for column in LAYER_COLUMNS)


def test_partial_reads_as_lower_bound_and_unavailable_never_as_zero() -> None:
    partial = report_view(crawl_module(nn.Sequential(nn.Linear(4, 4), Bessel()), (4,)))
    macs = next(row.cell for row in partial.totals if row.label == "MACs")
    assert (macs.status, macs.text, macs.sort) == ("partial", "≥16", 4 * 4) and partial.status == "partial"
    assert "lower bound" in macs.note and macs.lower_bound
    assert {"unestimated_direct_work", "uncounted_operator"} <= {item.code for item in partial.findings}
    assert partial.uncounted == [{"operator": "aten.special_bessel_j0", "calls": "1", "significance":
                                  partial.uncounted[0]["significance"]}]
    bessel_row = partial.layers[2]
    assert bessel_row.metrics["macs"].text == "≥0" and bessel_row.problems >= 1
    assert "unestimated_direct_work" in bessel_row.problem_note
    assert partial.incomplete.startswith("the MACs, module FLOPs, DMAs and operator FLOPs totals are lower bounds")

    linear = nn.Linear(4, 4)
    nothing = report_view(crawl_module(linear, (4,), custom_modules={nn.Linear: ModuleHandler(unknown_macs)}))
    macs = next(row.cell for row in nothing.totals if row.label == "MACs")
    assert (macs.status, macs.text, macs.sort) == ("unavailable", "n/a", None)
    assert nothing.status == "unavailable"


def test_ownership_is_a_compact_badge_with_the_full_text_on_hover() -> None:
    model = nn.Sequential(Block())
    report = crawl_module(model, (4,), custom_modules={Block: ModuleHandler(block_macs, frozenset({"macs"}))})
    view = report_view(report)
    (owner,) = view.owners
    assert owner.owner == "0" and owner.metrics == "MACs" and owner.covered == ["0.first", "0.second"]
    rows = {row.path: row for row in view.layers}
    assert (rows["0"].ownership.text, rows["0"].ownership.note) == ("owner", "owns its subtree for MACs")
    assert rows["0"].metrics["macs"].text == "Σ 32"
    first = rows["0.first"]
    assert first.metrics["macs"].text == "covered" and first.metrics["macs"].note == "counted by 0"
    assert (first.ownership.text, first.ownership.note) == ("covered", "covered: MACs in 0")
    assert first.metrics["module_flops"].status == "complete"  # not owned: still its own estimate
    assert view.custom_handlers == [{"type": "test_view_layers.Block", "method": view.custom_handlers[0]["method"],
                                     "subtree": "MACs"}]
    assert [marker for marker, _ in view.legend(("macs", "ownership"))] == ["Σ", "covered", "owner"]


class Shared(nn.Module):
    """``reuse`` is called by ``outer``, not by its own parent ``holder``: a row shown out of its tree."""

    def __init__(self) -> None:
        super().__init__()
        self.holder = nn.Sequential(nn.Linear(2, 2))
        self.outer = nn.Sequential(nn.ReLU())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.outer(self.holder[0](x))


def test_repeated_calls_full_paths_and_shapes() -> None:
    shared = nn.Linear(2, 2)
    rows = layer_rows(crawl_module(nn.Sequential(shared, nn.ReLU(), shared), (2,)))
    assert [row.label for row in rows] == ["(root)", "0", "1", "0 #1"]
    assert [row.title for row in rows] == ["(root)", "0", "1", "0 #1"]
    # Parameters belong to the module once: its first call shows them, a repeated call does not add them again.
    assert (rows[1].params.text, rows[3].params.text) == ("6", "")
    assert "counted at the module's first call" in rows[3].params.note
    # holder.0 runs directly under the root, not under holder: its full path says where it lives.
    names = {row.path: row.display_name for row in layer_rows(crawl_module(Shared(), (2,)))}
    assert names["holder.0"] == "holder.0" and names["outer"] == "outer" and names["outer.0"] == "0"
    assert shape_text({"kind": "tuple", "items": [{"kind": "tensor", "shape": [1, 2], "dtype": "float32"},
                                                  {"kind": "none"}]}) == "([1, 2], none)"
    assert shape_text({"kind": "mapping", "items": [{"key": "a", "value": {"kind": "scalar", "type": "int"}}]}) == (
        "{int}")
