"""Cost charts: drawn from the view objects into inline SVG, honest about lower bounds and unknowns, accessible,
self-contained, deterministic, bounded for a 5,000-call model, and visible in a real browser in light and dark."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import markdown
import pytest
import torch
from browser import new_tab
from torch import nn

from torchscan import ModuleCall, ModuleHandler, crawl_module
from torchscan.report.output.charts import (
    Amount,
    Chart,
    catalog_charts,
    diff_charts,
    report_charts,
    total_of,
)
from torchscan.report.output.documents import (
    catalog_markdown,
    entry_markdown,
    render_diff_file,
    render_report_file,
    report_html,
)
from torchscan.report.registry.parsing import load_registry
from torchscan.report.review.catalog_view import catalog_view
from torchscan.report.review.report_diff import diff_view
from torchscan.views import EMPTY, Cell, LayerRow, ReportView, report_view

ROOT = Path(__file__).resolve().parents[2]
SVG = re.compile(r"<svg\b.*?</svg>", re.DOTALL)
HATCH = re.compile(r'<path d="(M[\d.]+ [\d.]+L[\d.]+ [\d.]+)+" fill="none" stroke="#[0-9a-f]{6}" stroke-width="0.8"/>')
# conv: 8 output channels x 6x6 positions x 3x3x3 kernel; linear: 288 inputs x 10 outputs
CONV_MACS = 8 * 6 * 6 * 3 * 3 * 3
LINEAR_MACS = 8 * 6 * 6 * 10


class Bessel(nn.Module):
    """A custom leaf running an operator without a formula: its estimates are lower bounds (≥0 MACs)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.bessel_j0(x)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.second = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(self.first(x))


def block_macs(call: ModuleCall) -> dict:
    return {"macs": 2 * 4 * 4}  # both 4x4 linear layers on one row, owned by the block


def unknown_macs(call: ModuleCall) -> dict:
    return {"macs": None}


def cnn() -> nn.Module:
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 10))


def svgs(text: str) -> list[str]:
    return SVG.findall(text)


def labels(svg: str) -> list[str]:
    return re.findall(r"<text[^>]*>([^<]*)</text>", svg)


def assert_self_contained(svg: str) -> None:
    """A chart that works from disk, anywhere: no script, no external reference, an accessible name."""
    assert "<script" not in svg.lower() and "javascript:" not in svg.lower() and "on" + "load=" not in svg
    assert all(target.startswith("#") for target in re.findall(r'href="([^"]*)"', svg))
    assert "url(" not in svg and "@import" not in svg and "<image" not in svg and "<style" not in svg
    assert re.match(r'<svg [^>]*role="img" [^>]*aria-label="[^"]+"', svg)
    assert re.search(r"<svg [^>]*><title>[^<]+</title><desc>", svg)
    # Drawn in the page's text colour (light and dark alike) on a transparent background.
    assert "currentColor" in svg and "#0a0b0c" not in svg and "#ffffff" not in svg.lower()


@pytest.fixture(scope="module")
def cnn_report() -> dict:
    return crawl_module(cnn(), (3, 8, 8))


def test_report_html_has_three_accessible_charts_with_their_numbers(cnn_report: dict) -> None:
    html = render_report_file(cnn_report, "html", title="cnn")
    section = html[html.index('<section id="charts">'):html.index('<section id="layers">')]
    drawn = svgs(section)
    assert len(drawn) == 3 and '<a href="#charts">Charts</a>' in html
    for svg in drawn:
        assert_self_contained(svg)
    assert section.count("<figcaption>") == 3 and section.count("<details>") == 3
    by_type, top_calls, profile = report_charts(report_view(cnn_report))
    total = CONV_MACS + LINEAR_MACS
    assert by_type.rows[:2] == [("Conv2d", "1", "7.78k", f"{100 * CONV_MACS / total:.1f}%", "224", "7.2%"),
                                ("Linear", "1", "2.88k", f"{100 * LINEAR_MACS / total:.1f}%", "2.89k", "92.8%")]
    assert [row[0] for row in by_type.rows[2:]] == ["Flatten", "ReLU"]  # 0 MACs: exact zeros, listed by name
    assert top_calls.rows == [("1", "0", "Conv2d", "7.78k", "73.0%", "—"), ("2", "3", "Linear", "2.88k", "27.0%", "—")]
    assert [row[0] for row in profile.rows] == ["0", "1", "2", "3"]  # each top-level call is a stage
    # The bars carry their values as text: 7776 MACs and 2880 MACs, 224 and 2890 parameters.
    assert {"7.78k", "2.88k", "224", "2.89k"} <= set(labels(drawn[0]))
    assert "MACs by layer type (total 10.7k)" in labels(drawn[0])


def test_hostile_module_names_stay_text_inside_the_charts() -> None:
    model = nn.Sequential()
    model.add_module('<script>alert(1)</script>"', nn.Linear(4, 4))
    html = render_report_file(crawl_module(model, (4,)), "html", title="hostile")
    for svg in svgs(html):
        assert_self_contained(svg)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in svgs(html)[1]  # the call's label in the top-calls chart
    assert html.count("<script>") == 1  # the page's own script only


def test_a_partial_total_is_drawn_as_a_hatched_lower_bound() -> None:
    view = report_view(crawl_module(nn.Sequential(nn.Linear(4, 4), Bessel()), (4,)))
    by_type, top_calls, profile = report_charts(view)
    assert by_type.rows[1][:3] == ("Bessel", "1", "≥0") and "(total ≥16)" in by_type.summary + by_type.svg
    texts = labels(by_type.svg)
    assert "≥0" in texts and "≥ lower bound (partial)" in texts and "MACs by layer type (total ≥16)" in texts
    assert HATCH.search(by_type.svg)  # the hatching of the lower-bound bar
    assert any("Lower bound only (≥) for 1 call" in note for note in top_calls.notes)
    # A lower bound of 0 has no height to hatch: the profile marks it with a ▲ and says so under the chart.
    assert "≥ lower bound" in labels(profile.svg) and "<use" in profile.svg
    assert profile.notes == ["Lower bound only (≥: hatched, marked ▲) for 1 call."]


def test_unavailable_values_are_marked_and_listed_never_drawn_as_zero() -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Flatten(), nn.Linear(8 * 6 * 6, 10))
    report = crawl_module(model, (3, 8, 8), custom_modules={nn.Linear: ModuleHandler(unknown_macs)})
    by_type, top_calls, profile = report_charts(report_view(report))
    assert ("Linear", "1", "n/a", "—", "2.89k", "92.8%") in by_type.rows
    assert by_type.notes[0] == "n/a (not drawn, never zero): MACs of Linear (1 call)."
    assert "Linear" not in labels(by_type.svg)[:labels(by_type.svg).index("Parameters by layer type (total 3.11k)")]
    assert [row[1] for row in top_calls.rows] == ["0"] and "n/a" in top_calls.notes[0]
    assert "n/a (not drawn)" in labels(profile.svg) and profile.notes[0].startswith("n/a (not drawn, never zero)")
    assert total_of([Amount(5.0), Amount(0.0, "unavailable")]) == Amount(5.0, "partial")
    assert total_of([Amount(0.0, "unavailable")] * 2).status == "unavailable"
    assert total_of([Amount(2.0), Amount(3.0)]) == Amount(5.0)


def test_a_subtree_owner_is_drawn_once_at_the_owner() -> None:
    report = crawl_module(nn.Sequential(Block()), (4,), custom_modules={Block: ModuleHandler(block_macs,
                                                                                             frozenset({"macs"}))})
    by_type, top_calls, profile = report_charts(report_view(report))
    assert by_type.rows == [("Block", "1", "32", "100.0%", "0", "0%"), ("Linear", "0", "—", "—", "40", "100.0%")]
    assert top_calls.rows == [("1", "0", "Block", "32", "100.0%", "—")]
    for chart in (by_type, top_calls, profile):
        assert "2 calls inside subtree owners are counted in their owner's estimate" in chart.summary


def test_a_model_without_dot_products_is_profiled_in_flops() -> None:
    charts = report_charts(report_view(crawl_module(nn.Sequential(nn.ReLU(), nn.MaxPool2d(2)), (1, 4, 4))))
    assert [chart.title for chart in charts] == ["FLOPs and parameters by layer type",
                                                 "Layer calls with the most FLOPs", "FLOPs along execution order"]
    assert charts[1].rows[0][1:4] == ("0", "ReLU", "16")  # one comparison per element of the 1x4x4 input


def test_diff_chart_sorts_by_absolute_change_and_marks_unknown_deltas() -> None:
    before = crawl_module(nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 4)), (16,))
    after = crawl_module(nn.Sequential(nn.Linear(16, 8), nn.Linear(8, 4), nn.Linear(4, 4), Bessel()), (16,))
    (chart,) = diff_charts(diff_view(before, after))
    # 16*16 -> 16*8 (-128); 16*4 -> 8*4 (-32); an added 4x4 layer (+16); an added Bessel: at least 0, unknown.
    assert [(row[0], row[2], row[5]) for row in chart.rows] == [("0", "changed", "−128"), ("1", "changed", "−32"),
                                                                ("2", "added", "+16"), ("3", "added", "unknown")]
    assert "2 cheaper, 1 unknown" in chart.summary and "?" in labels(chart.svg)
    assert "unknown: none → ≥0" in labels(chart.svg) and "−128" in labels(chart.svg)
    html = render_diff_file(before, after, "html")
    (svg,) = svgs(html)
    assert_self_contained(svg)
    assert html.count("<script>") == 1 and '<section id="charts">' in html
    text = render_diff_file(before, after, "md")  # Markdown for review comments: the same ranking, as a table
    assert "<svg" not in text and "| 0 | Linear | changed | 256 | 128 | −128 |" in text
    assert text.index("| 0 | Linear |") < text.index("| 1 | Linear |") < text.index("| 3 | Bessel | added |")


CATALOG = """
[catalog]
title = "Chart zoo"

[[models]]
name = "cnn"
factory = "nowhere:cnn"
input_shape = [3, 8, 8]

[[models.variants]]
name = "small"

[[models.variants]]
name = "large"
input_shape = [3, 16, 16]

[[models]]
name = "partial"
factory = "nowhere:partial"
input_shape = [4]

[[models]]
name = "broken"
factory = "nowhere:broken"
input_shape = [4]
"""


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    folder = tmp_path_factory.mktemp("catalog")
    (folder / "models.toml").write_text(CATALOG, encoding="utf-8")
    registry = load_registry(folder / "models.toml")
    conv = nn.Sequential(nn.Conv2d(3, 4, 3))
    results = {"cnn": {"report": crawl_module(conv, (3, 8, 8))},
               "cnn.large": {"report": crawl_module(conv, (3, 16, 16))},
               "partial": {"report": crawl_module(nn.Sequential(nn.Linear(4, 4), Bessel()), (4,))},
               "broken": {"error": {"stage": "build", "type": "RuntimeError", "message": "exploded"}}}
    return catalog_view(registry, results, strict=False)


def test_catalog_page_has_both_charts_and_survives_markdown(catalog) -> None:  # type: ignore[no-untyped-def]
    scatter, bars = catalog_charts(catalog)
    # 4x6x6x27 = 3,888 MACs at 8x8 and 4x14x14x27 = 21,168 at 16x16; 112 parameters; the Linear 4x4 ≥16 MACs.
    assert scatter.rows == [("cnn · small", "112", "3.89k"), ("cnn · large", "112", "21.2k"),
                            ("partial", "20", "≥16")]
    assert scatter.notes == ["Not drawn: broken (failed)."]
    assert "≥ partial" in labels(scatter.svg) and "≥ lower bound (partial MACs)" in labels(scatter.svg)
    assert "stroke: #4e8ff7" in scatter.svg  # the two variants of cnn joined by a line in the entry's colour
    assert bars.rows[-1] == ("broken", "failed", "failed") and "n/a (analysis failed)" in labels(bars.svg)
    assert "≥16" in labels(bars.svg) and HATCH.search(bars.svg)
    page = catalog_markdown(catalog, "", "../reports/")
    assert page.count("<svg") == 2 and "<!-- --8<-- [start:charts] -->" in page
    for svg in svgs(page):
        assert_self_contained(svg)
    rendered = markdown.markdown(page, extensions=["tables", "attr_list", "md_in_html"])
    assert rendered.count("<svg") == 2 and rendered.count("<figcaption>") == 2
    model_page = entry_markdown(catalog.entries[0], "../reports/")
    assert model_page.count("<svg") == 3  # the site's model page shows the primary run's report charts
    assert "<svg" not in render_report_file(catalog.entries[0].primary.report, "md")  # plain Markdown: tables only


def test_two_renders_are_byte_identical_in_and_across_processes(cnn_report: dict, tmp_path: Path) -> None:
    first = render_report_file(cnn_report, "html", title="cnn")
    assert render_report_file(cnn_report, "html", title="cnn") == first
    (tmp_path / "report.json").write_text(__import__("json").dumps(cnn_report), encoding="utf-8")
    script = ("import json, sys; from torchscan.report.output.documents import render_report_file; "
              "sys.stdout.write(render_report_file(json.load(open(sys.argv[1])), 'html', title='cnn'))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONHASHSEED": "12345"}
    other = subprocess.run([sys.executable, "-c", script, str(tmp_path / "report.json")], capture_output=True,
                           text=True, env=env, check=True, timeout=120).stdout
    assert other == first


def synthetic_view(blocks: int = 50, per_block: int = 100) -> ReportView:
    """A 5,000-call report view built directly: every 7th call a lower bound, every 13th unavailable."""
    empty = dict.fromkeys(("macs", "module_flops", "dmas", "receptive_field", "effective_stride",
                           "effective_padding"), EMPTY)
    rows = [LayerRow(0, None, 1 + blocks * (per_block + 1), 0, "(root)", "", 0, "Sequential", "Sequential", "",
                     EMPTY, dict(empty), EMPTY, EMPTY)]
    for block in range(blocks):
        parent = len(rows)
        rows.append(LayerRow(parent, 0, parent + per_block + 1, 1, str(block), str(block), 0, "Sequential",
                             "Sequential", "", EMPTY, dict(empty), EMPTY, EMPTY))
        for item in range(per_block):
            index = len(rows)
            status = "unavailable" if index % 13 == 0 else "partial" if index % 7 == 0 else "complete"
            cell = Cell("x", status, "", None if status == "unavailable" else float(1000 + index))
            rows.append(LayerRow(index, parent, index + 1, 2, str(item), f"{block}.{item}", 0,
                                 ("Linear", "Conv2d", "Attention")[item % 3], "x", "", Cell("1", "complete", "", 1),
                                 {**empty, "macs": cell}, EMPTY, EMPTY, own={"macs": cell}))
    return ReportView("big", "", "partial", [], rows, [], [], [], [], [], [], [], [], [], [], [])


def test_a_5000_call_report_gives_bounded_charts() -> None:
    # Drawing time is measured by benchmarks/build.py, not asserted here; the bounded sizes keep it linear.
    view = synthetic_view()
    charts = report_charts(view)
    for chart in charts:
        assert 1_000 < len(chart.svg) < 300_000
        assert_self_contained(chart.svg)
    by_type, top_calls, profile = charts
    assert len(top_calls.rows) == 15 and "5,000 calls" in profile.summary + by_type.summary
    assert "summed over 25 consecutive calls per bar" in profile.summary  # 5000 calls in 200 bars
    assert profile.svg.count("<path") < 2_000 and len(profile.rows) == 50  # one stage per block
    html = report_html(view)
    assert len(svgs(html)) == 3


def test_without_matplotlib_the_text_alternative_remains(monkeypatch: pytest.MonkeyPatch, cnn_report: dict) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    charts = report_charts(report_view(cnn_report))
    assert all(chart.svg == "" and chart.rows for chart in charts)
    assert "matplotlib is not installed" in charts[0].notes[-1]
    html = Chart("k", "T", "S", ("a",), [("1",)], ["note"]).html
    assert html.startswith("<figure") and "<svg" not in html and "<td>1</td>" in html


def test_charts_are_visible_in_light_and_dark(chromium, cnn_report: dict, tmp_path: Path) -> None:
    path = tmp_path / "report.html"
    path.write_text(render_report_file(cnn_report, "html", title="cnn"), encoding="utf-8")
    size = ('(() => { const r = document.querySelector("#charts svg").getBoundingClientRect();'
            ' return [r.width, r.height]; })()')
    ink = 'getComputedStyle(document.querySelector("#charts svg text")).fill'
    for scheme, text in (("light", "rgb(27, 31, 36)"), ("dark", "rgb(230, 237, 243)")):
        tab = new_tab(chromium, color_scheme=scheme)
        tab.open(path)
        width, height = tab.evaluate(size)
        assert width > 300 and height > 50
        assert tab.evaluate(ink) == text  # labels follow the page's text colour
        assert tab.count("#charts svg") == 3
        tab.page.locator("#charts").scroll_into_view_if_needed()
        shot = tab.screenshot(tmp_path / f"charts-{scheme}.png")
        assert shot.startswith(b"\x89PNG\r\n\x1a\n") and len(shot) > 10_000
        assert tab.errors == []
        tab.page.context.close()


def test_an_owner_with_a_breakdown_is_drawn_by_block_attention_against_feed_forward() -> None:
    """A GPT-like stack of native layers is one subtree owner; its breakdown opens it up: one bar per block, split
    into attention, feed-forward and the rest, adding up to the owner's estimate (drawn once)."""
    block = nn.TransformerEncoderLayer(32, 4, 128, batch_first=True, norm_first=True)
    model = nn.Sequential(nn.TransformerEncoder(block, 3, enable_nested_tensor=False), nn.Linear(32, 8))
    view = report_view(crawl_module(model, args=(torch.randn(1, 16, 32),)))
    _, top_calls, _ = report_charts(view)
    labels_and_splits = {row[1]: row[5] for row in top_calls.rows}
    assert {"0.layers.0", "0.layers.1", "0.layers.2", "1"} <= set(labels_and_splits) and "0" not in labels_and_splits
    split = labels_and_splits["0.layers.0"]
    assert split.startswith("attention ") and ", feed-forward " in split and ", norms and residuals " in split
    assert labels_and_splits["1"] == "—"
    owner = next(row for row in view.layers if row.path == "0")
    blocks = [row for row in top_calls.rows if row[1].startswith("0.layers.")]
    assert sum(float(row[4].rstrip("%")) for row in blocks) == pytest.approx(
        100 * owner.own["macs"].sort / (owner.own["macs"].sort + view.layers[-1].own["macs"].sort), abs=0.2)
    assert "drawn by block, split into attention, feed-forward and the rest" in top_calls.summary
    texts = labels(top_calls.svg)
    assert {"attention", "feed-forward", "norms and residuals"} <= set(texts)
    assert "0.layers.0 (TransformerEncoderLayer)" in texts


def test_every_model_of_a_catalog_gets_its_own_colour() -> None:
    from torchscan.report.output.charts.style import distinct_colours

    for count in (3, 8, 14, 16, 40):
        colours = distinct_colours(count)
        assert len(colours) == len(set(colours)) == count
        assert all(re.fullmatch(r"#[0-9a-f]{6}", colour) for colour in colours)
    assert distinct_colours(20)[:14] == distinct_colours(14)  # adding models keeps the others' colours


# -- labels, coincident points and captions ------------------------------------------------------------------------

TEXT = re.compile(r"<text ([^>]*)>([^<]*)</text>")
#: Entries of a crowded catalog: name -> (inputs, outputs) of its one Linear layer; the longest name is the largest
#: model (its point at the top right corner), and the twins have equal parameters and MACs.
CROWDED = {"hf_llama2_7b_decode": (256, 256), "hf_llama2_7b_prefill_with_a_long_name": (250, 250),
           "tiny_twin_a": (8, 8), "tiny_twin_b": (8, 8), "mid": (64, 64), "mid_plus": (66, 66),
           "small_but_named_at_length": (16, 16)}
SWEEP = """
[[models]]
name = "mlp"
factory = "nowhere:mlp"
kwargs = { width = "{width}" }
input_shape = [8]

[models.sweep]
name = "width"
values = [8, 16, 24]
default = 16
"""


def label_boxes(svg: str) -> list[tuple[str, tuple[float, float, float, float]]]:
    """Every label of a chart with the box it covers (measured as the charts measure: DejaVu Sans widths)."""
    from torchscan.report.output.charts.measure import BOLD, rotated_box, text_width

    boxes = []
    for attributes, text in TEXT.findall(svg):
        found = dict(re.findall(r'([\w-]+)="([^"]*)"', attributes))
        size = float(found["font-size"]) * (BOLD if "font-weight" in found else 1.0)
        angle = float(found["transform"][7:].split()[0]) if "transform" in found else 0.0
        boxes.append((text, rotated_box(float(found["x"]), float(found["y"]), text_width(html.unescape(text), size),
                                        size, found.get("text-anchor", "start"),
                                        found.get("dominant-baseline", "auto"), angle)))
    return boxes


def assert_no_label_cut(svg: str) -> None:
    width, height = (float(number) for number in re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', svg).groups())
    for text, (left, top, right, bottom) in label_boxes(svg):
        assert left >= 0 and top >= 0 and right <= width and bottom <= height, (text, left, top, right, bottom)


def linear_catalog(folder: Path, entries: dict[str, tuple[int, int]], extra: str = ""):  # type: ignore[no-untyped-def]
    tables = "".join(f'[[models]]\nname = "{name}"\nfactory = "nowhere:net"\ninput_shape = [{inputs}]\n\n'
                     for name, (inputs, _) in entries.items())
    (folder / "models.toml").write_text(f'[catalog]\ntitle = "Crowded"\n\n{tables}{extra}', encoding="utf-8")
    registry = load_registry(folder / "models.toml")
    results = {name: {"report": crawl_module(nn.Linear(inputs, outputs), (inputs,))}
               for name, (inputs, outputs) in entries.items()}
    for run in registry.runs:
        if run.stem not in results:  # a sweep's points: an MLP of the point's width
            width = run.kwargs["width"]
            results[run.stem] = {"report": crawl_module(nn.Sequential(nn.Linear(8, width), nn.Linear(width, 4)),
                                                        (8,))}
    return catalog_view(registry, results, strict=False)


def test_coincident_points_are_marked_and_named(tmp_path: Path) -> None:
    scatter, _ = catalog_charts(linear_catalog(tmp_path, CROWDED))
    note = "One point for 2 runs whose parameters and MACs are equal or too close to tell apart here: tiny_twin_a, tiny_twin_b."
    assert note in scatter.notes
    texts = labels(scatter.svg)
    assert [text for text in texts if text.startswith("tiny_twin")] == ["tiny_twin_a ×2"]
    assert note in texts  # the footnote
    assert re.search(r"<title>tiny_twin_a, tiny_twin_b: 72 parameters, 64 MACs</title>", scatter.svg)
    assert "×N after a name marks a point that N runs share" in scatter.summary
    assert "mid ×2" not in texts and {"mid", "mid_plus"} <= set(texts)  # 6% apart: two points, each named


def test_no_label_is_cut_whatever_its_length_or_place(tmp_path: Path) -> None:
    catalog = linear_catalog(tmp_path, CROWDED)
    for chart in catalog_charts(catalog):
        assert_no_label_cut(chart.svg)
    assert "hf_llama2_7b_decode" in labels(catalog_charts(catalog)[0].svg)  # the top right point, named in full
    long_name = "encoder." + ".".join(f"block_{index}" for index in range(12)) + ".attention.output_projection"
    model = nn.Sequential()
    model.add_module(long_name.replace(".", "_"), nn.Linear(4, 4))
    model.add_module("x" * 300, nn.Linear(4, 4))
    for chart in report_charts(report_view(crawl_module(model, (4,)))):
        assert_no_label_cut(chart.svg)
    _, top_calls, _ = report_charts(report_view(crawl_module(model, (4,))))
    assert any(text.startswith("…") and text.endswith("(Linear)") for text in labels(top_calls.svg))


def test_the_scatter_counts_the_runs_the_catalog_page_counts(tmp_path: Path) -> None:
    catalog = linear_catalog(tmp_path, {"net": (4, 4)}, SWEEP)
    scatter, _ = catalog_charts(catalog)
    assert catalog.counts_text.startswith("4 runs")  # the net, and the sweep's three points
    assert "2 of the catalog's 4 runs drawn; the other 2 points of swept entries are drawn on their models' pages" \
        in scatter.summary
    assert catalog_markdown(catalog, "", "../reports/").count("4 runs") >= 1


def test_the_profile_caption_names_the_largest_call_of_the_largest_bar() -> None:
    # 302 calls in bars of two: calls 5 and 6 (4x400 and 400x4) are the costliest; the bar of calls 5-6 (4 and 5,
    # counted from 0) is the first of the two largest, and its largest call is the second one.
    model = nn.Sequential(*(nn.Linear(4, 4) for _ in range(5)), nn.Linear(4, 400), nn.Linear(400, 4),
                          *(nn.Linear(4, 4) for _ in range(295)))
    _, _, profile = report_charts(report_view(crawl_module(model, (4,))))
    assert "summed over 2 consecutive calls per bar" in profile.summary
    assert "The largest bar is 1.62k MACs at calls 5–6; its largest call is 5 (1.6k)." in profile.summary


def test_catalog_charts_keep_every_label_inside_in_chromium(chromium, tmp_path: Path) -> None:
    page = tmp_path / "charts.html"
    charts = catalog_charts(linear_catalog(tmp_path, CROWDED))
    page.write_text("<!doctype html><html><body style='margin:0;width:1280px'>"
                    + "".join(chart.html for chart in charts) + "</body></html>", encoding="utf-8")
    outside = ("() => Array.from(document.querySelectorAll('svg')).flatMap(svg => {"
               " const box = svg.getBoundingClientRect();"
               " return Array.from(svg.querySelectorAll('text')).map(text => [text.textContent,"
               " text.getBoundingClientRect()]).filter(([, r]) => r.left < box.left - 0.5 || r.top < box.top - 0.5"
               " || r.right > box.right + 0.5 || r.bottom > box.bottom + 0.5).map(([name]) => name); })")
    for scheme in ("light", "dark"):
        tab = new_tab(chromium, color_scheme=scheme)
        tab.open(page)
        assert tab.evaluate(outside) == []
        tab.screenshot(tmp_path / f"catalog-charts-{scheme}.png", full_page=True)
        tab.page.context.close()
