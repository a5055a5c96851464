"""The view of a sweep: exact formulas written from rational coefficients, their domains, the reason a curve is not
exact; and the golden model page of a swept entry (the portable Markdown a build writes).

Regenerate the golden file after an intended change of the output (then review the diff):

    UPDATE_GOLDEN=1 python -m pytest tests/views/test_view_sweep.py
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from torch import nn

from torchscan import __version__, crawl_module
from torchscan.curves.cost_curve import cost_curve, evaluate_piece
from torchscan.views.sweep import domain_text, formula_text, sweep_view

GOLDEN = Path(__file__).parent / "golden"
SIZES = (8, 12, 16, 20, 24)


def small_cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(4, 2))


def image(size: int) -> tuple[tuple[torch.Tensor], dict]:
    return (torch.zeros(1, 3, size, size),), {}


class Bessel(nn.Module):
    """No formula for its leaf: module estimates are lower bounds at every size."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.bessel_j0(x)


@pytest.mark.parametrize(("coefficients", "expected"), [
    (["84934656", "85524480", "1536"], "MACs = 1,536·L² + 85,524,480·L + 84,934,656"),
    (["432", "-432", "108"], "MACs = 108·L² − 432·L + 432"),
    (["0", "1"], "MACs = L"),
    (["0", "3/2", "0", "-2"], "MACs = −2·L³ + (3/2)·L"),
    (["0", "0"], "MACs = 0"),
])
def test_formulas_are_exact_and_highest_power_first(coefficients: list[str], expected: str) -> None:
    assert formula_text("MACs", "L", coefficients) == expected


def test_domains_name_the_lattice_a_piece_holds_on() -> None:
    assert domain_text("S", {"from": 128, "to": 512, "step": 32}) == "S = 128, 160, …, 512 (step 32)"
    assert domain_text("S", {"from": 128, "to": 160, "step": 32}) == "S = 128, 160 (step 32)"
    assert domain_text("L", {"from": 1, "to": 9, "step": 1}) == "every integer L from 1 to 9"
    assert domain_text("L", {"from": 7, "to": 7, "step": 1}) == "L = 7"


def test_the_view_of_a_cost_curve_shows_the_exact_formula_its_points_prove() -> None:
    curve = cost_curve(small_cnn(), SIZES, image)
    view = sweep_view(curve)
    assert view.quantity == "size" and view.symbol == "S" and view.range_text == "8–24"
    assert [point.size for point in view.points] == list(SIZES)
    macs = view.curve("macs")
    assert macs is not None and macs.exact and macs.why_not_exact == "" and len(macs.verified_at) >= 2
    # The formula is the one the curve states; checked here against a direct analysis at every point.
    piece = curve["curves"]["macs"]["pieces"][0]
    for size in SIZES:
        direct = crawl_module(small_cnn(), args=image(size)[0])["totals"]["macs"]["value"]
        assert evaluate_piece(piece, size) == direct
    assert macs.formulas == (formula_text("MACs", "S", piece["coefficients"]),)
    assert macs.formulas[0].startswith("MACs = 108·S²")


def test_a_curve_through_lower_bounds_is_points_only_with_the_reason() -> None:
    model = nn.Sequential(nn.Linear(4, 4), Bessel())
    view = sweep_view(cost_curve(model, [2, 3, 4, 5, 6], lambda size: ((torch.zeros(size, 4),), {})), "batch")
    flops = view.curve("module_flops")
    assert view.symbol == "B" and flops is not None and not flops.exact and flops.formulas == ()
    assert "partial" in flops.why_not_exact and flops.kind_text == "points only"
    assert all(point.cells[1].text.startswith("≥") for point in view.points)


def swept_page(tmp_path: Path) -> str:
    """The portable Markdown page of a swept entry whose points were analyzed in this process."""
    from torchscan.report.output.documents import entry_markdown
    from torchscan.report.registry.parsing import load_registry
    from torchscan.report.review.catalog_view import catalog_view

    (tmp_path / "models.toml").write_text('[[models]]\nname = "cnn"\nfactory = "zoo:cnn"\n'
                                          'input_shape = [3, "{size}", "{size}"]\n'
                                          'sweep = { name = "size", values = [8, 12, 16, 20, 24], default = 16 }\n')
    registry = load_registry(tmp_path / "models.toml")
    results = {run.stem: {"status": "ok", "report": crawl_module(small_cnn(), args=image(run.size or 0)[0])}
               for run in registry.runs}
    report = results["cnn"]["report"]
    text = entry_markdown(catalog_view(registry, results, strict=False).entries[0], "../reports/")
    for key in ("torch", "python"):
        text = text.replace(report["context"][key], f"<{key}>")
    return text.replace(__version__, "<torchscan>")


def test_golden_page_of_a_swept_entry(tmp_path: Path) -> None:
    text = swept_page(tmp_path)
    golden = GOLDEN / "sweep.md"
    if os.environ.get("UPDATE_GOLDEN"):
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8")
    # What the golden file must keep saying: the declared point, the range, the formula and where the JSON lies.
    assert "## Cost against size" in text and "the declared point, size 16" in text
    assert "MACs = 108·S²" in text and "[cnn.sweep.json](../reports/cnn.sweep.json)" in text
