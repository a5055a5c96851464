"""Rendering: one set of view objects, two outputs (Markdown, HTML), escaping everywhere, shipped templates."""

from __future__ import annotations

import re
from pathlib import Path

import markdown
import pytest
import torch
from torch import nn

from torchscan import compare_reports, crawl_module
from torchscan.report.output.documents import render_diff_file, render_report_file
from torchscan.report.output.templates import environment, markdown_escape, output_kind
from torchscan.report.review.report_diff import diff_view
from torchscan.views import MARKDOWN_COLUMNS

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = ("totals", "layers", "ownership", "operators", "diagnostics", "conventions", "context")


class Bessel(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.bessel_j0(x)


def hostile_model() -> nn.Module:
    model = nn.Sequential()
    model.add_module("<script>alert(1)</script>", nn.Linear(4, 4))
    model.add_module("a|b_*c*", Bessel())
    return model


@pytest.fixture(scope="module")
def hostile_report() -> dict:
    return crawl_module(hostile_model(), (4,))


def test_markdown_escape_keeps_names_readable_but_inert() -> None:
    assert markdown_escape("encoder.layers.0.self_attn") == "encoder.layers.0.self_attn"
    assert markdown_escape("float32[1, 3]") == "float32[1, 3]"
    assert markdown_escape("<script>alert(1)</script>") == "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert markdown_escape("[x](javascript:alert(1))") == "[x\\](javascript:alert(1))"
    assert markdown_escape("a|b_*c*\n`d`") == "a&#124;b\\_\\*c\\* \\`d\\`"
    assert markdown_escape("__init__") == "\\_\\_init\\_\\_"


def test_html_report_escapes_module_names_and_is_self_contained(hostile_report: dict) -> None:
    html = render_report_file(hostile_report, "html", title="<b>title</b>")
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<b>title</b>" not in html and "&lt;b&gt;title&lt;/b&gt;" in html
    assert html.count("<script>") == 1 and html.count("<style>") == 1  # our own inline script and style only
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<link" not in html and "@import" not in html and "url(" not in html
    # The partial total reads as a lower bound, with its status.
    assert re.search(r'<td class="num s-partial"[^>]*>≥', html)


def test_markdown_report_has_every_named_section_and_no_raw_html_from_names(hostile_report: dict) -> None:
    text = render_report_file(hostile_report, "md", title="hostile")
    for name in SECTIONS:
        assert text.count(f"<!-- --8<-- [start:{name}] -->") == 1
        assert text.count(f"<!-- --8<-- [end:{name}] -->") == 1
    assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    html = markdown.markdown(text, extensions=["tables"])
    assert "<script>" not in html
    # The hostile name stays inside its table cell: every layer row has exactly nine cells.
    layer_rows = [row for row in re.findall(r"<tr>(.*?)</tr>", html, re.DOTALL) if "<td" in row and "Bessel</td>" in row]
    assert len(layer_rows) == 1 and layer_rows[0].count("<td") == len(MARKDOWN_COLUMNS)
    assert "a&#124;b_*c* ⚠</td>" in layer_rows[0]  # the mark of a row a diagnostic points at
    assert "≥" in text and "(0B)" in text


def test_sections_can_be_included_by_other_sites(tmp_path: Path, hostile_report: dict) -> None:
    (tmp_path / "model.md").write_text(render_report_file(hostile_report, "md"), encoding="utf-8")
    page = '# Our model\n\n--8<-- "model.md:totals"\n'
    html = markdown.markdown(page, extensions=["tables", "pymdownx.snippets"],
                             extension_configs={"pymdownx.snippets": {"base_path": [str(tmp_path)],
                                                                      "check_paths": True}})
    # Headings name the model, so two models' totals included on one page stay apart.
    assert "<h2>Totals: Sequential</h2>" in html and "operator view" in html
    assert "Layer calls" not in html and "8&lt;" not in html and "--8<--" not in html


def test_diff_shows_deltas_only_for_complete_sides() -> None:
    before = crawl_module(nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 4)), (16,))
    after = crawl_module(nn.Sequential(nn.Linear(16, 8), nn.Linear(8, 4)), (16,))
    view = diff_view(before, after)
    rows = {(row.label, row.view): row for row in view.totals}
    assert rows[("MACs", "module view")].delta == "−160"  # (16*16 + 16*4) - (16*8 + 8*4)
    assert rows[("Parameters", "structure")].delta == "−168"  # (272 + 68) - (136 + 36)
    assert rows[("MACs", "module view")].change == "decreased"
    assert [row.label for row in view.changed] == ["0", "1"] and not view.added and not view.removed
    assert "parameters 272 → 136 (−136, −50.0%)" in view.changed[0].details
    partial_after = crawl_module(nn.Sequential(nn.Linear(16, 16), Bessel()), (16,))
    unknown = {row.label + row.view: row for row in diff_view(before, partial_after).totals}
    assert unknown["MACsmodule view"].delta == "unknown (a side is incomplete)"
    changed = [row.label for row in diff_view(before, partial_after).changed]
    assert "1" in changed and "0" not in changed  # the first Linear is the same on both sides
    md = render_diff_file(before, after, "md")
    assert "| MACs | module view | 320 | 160 | −160 | −50.0% | decreased |" in md
    html = render_diff_file(before, after, "html")
    assert html.count("<script>") == 1 and "−160" in html


def test_compare_reports_handles_per_dimension_receptive_fields() -> None:
    before = crawl_module(nn.Conv2d(3, 4, 3), (3, 8, 8))
    after = crawl_module(nn.Conv2d(3, 4, 5), (3, 8, 8))
    changes = compare_reports(before, after)["layers"]["changed"][0]["changes"]["metrics"]
    assert changes["receptive_field"]["after"]["value"] == [5, 5]
    assert changes["receptive_field"]["delta"]["value"] == [2, 2]
    assert render_diff_file(before, after, "md")


def test_template_overrides_win(tmp_path: Path, hostile_report: dict) -> None:
    (tmp_path / "report.md.j2").write_text("custom {{ view.title }} {{ view.layers|length }}\n")
    text = render_report_file(hostile_report, "md", title="x<y", templates=tmp_path)
    assert text == "custom x&lt;y 3\n"
    assert environment("md", None) is not environment("md", str(tmp_path))


def test_output_kind_from_the_file_name() -> None:
    assert output_kind(Path("a/B.HTML")) == "html" and output_kind(Path("b.md")) == "md"
    with pytest.raises(ValueError, match="use a .html or .md file name"):
        output_kind(Path("c.txt"))
