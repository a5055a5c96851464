"""One number style: the formatter of `torchscan.views.formatting`, and every view held to its grammar (`NUMBER`).

The views checked: the terminal table and totals, the Markdown report, the site's model and catalog pages and the
portable snippets, the standalone HTML report with its charts (tick and value labels), the before/after diff in
Markdown and HTML, and its budget lines. A numeric cell or chart label that starts like a number must be one number
of the grammar; no prose may use the old spaced style (``1.23 M``) or an exponent (``1e+03``).
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
from torch import nn

from torchscan import crawl_module
from torchscan.views import LAYER_COLUMNS, Column, report_view
from torchscan.views.formatting import (
    NUMBER,
    PARAMETER_SCALES,
    exact_count,
    format_bytes,
    format_count,
    format_metric,
    format_parameters,
    format_percent,
    format_signed,
    format_signed_bytes,
)
from torchscan.views.text import render_table

#: How a number starts: a Σ, a bound, a sign, ``<`` or a digit.
STARTS_LIKE_A_NUMBER = re.compile(r"(?:Σ )?[≥≤]?[+−-]?<?\d")
#: Number-like tokens inside prose and one-line summaries.
TOKEN = re.compile(r"(?<![\w.#\[])(?:Σ )?[≥≤]?[+−]?<?\d[\d.,×]*(?:[A-Za-z]{1,2}\b|%)?")
#: What a number must never look like again: the old spaced suffix and exponents.
OLD_STYLE = re.compile(r"\d (?:[kMGT]B?|K)\b|\de[+-]\d")


@pytest.mark.parametrize(("value", "text"), [
    (0, "0"), (7, "7"), (999, "999"), (999.6, "1.00k"), (1_000, "1k"), (1_234, "1.23k"), (8_970, "8.97k"),
    (12_345, "12.3k"), (123_456, "123k"), (4_390_000, "4.39M"), (1_814_073_856, "1.81G"), (999.6e12, "1.00P"),
    (1.0027e15, "1.00P"), (1e15, "1P"), (1.203e6, "1.20M"), (2.5e15, "2.5P"), (4.2e18, "4.2E"), (1.234e21, "1,234E"),
    (0.5, "0.5"), (12.34, "12.3"), (0.00001, "<0.001")])
def test_counts_have_three_significant_digits_and_a_glued_suffix(value: float, text: str) -> None:
    assert format_count(value) == text


def test_parameters_bytes_percentages_and_changes() -> None:
    assert format_parameters(8_030_000_000) == "8.03B" and format_count(8_030_000_000, PARAMETER_SCALES) == "8.03B"
    assert format_bytes(10_560) == "10.6kB" and format_bytes(512) == "512B"
    assert [format_percent(value) for value in (0, 0.013, 0.0001, 12.345, 1234.5)] == [
        "0%", "0.013%", "<0.001%", "12.3%", "1,234.5%"]
    assert format_percent(-3, signed=True) == "−3.0%" and format_percent(5, signed=True) == "+5.0%"
    assert format_signed(-1_200_000) == "−1.2M" and format_signed(2e9, PARAMETER_SCALES) == "+2B"
    assert format_bytes(1.6e15) == "1.6PB" and format_parameters(3e15) == "3P" and format_signed(-2e18) == "−2E"
    assert exact_count(1_814_073_856) == "1,814,073,856" and exact_count(0.5) == "0.5"


@pytest.mark.parametrize("text", ["512", "8.97k", "8.03B", "1.81G", "Σ ≥11.3k", "≥0", "+1.2M", "−300", "10.6kB",
                                  "12.5%", "≥33.3%", "+1,234.5%", "<0.001%", "7×7", "0.013%", "1P", "2.5PB",
                                  "4.2E", "1,234E"])
def test_the_grammar_accepts_the_formatter_output(text: str) -> None:
    assert NUMBER.fullmatch(text)


@pytest.mark.parametrize("text", ["8.97 k", "1.23 M", "8.97K", "1e+03 T", "1e+03T", "12.34k", "1.234G", "10 G",
                                  "1.81GMACs", "12.34%", "1000T", "1,234P"])
def test_the_grammar_rejects_other_styles(text: str) -> None:
    assert not NUMBER.fullmatch(text)


# -- every view ----------------------------------------------------------------------------------------------------


class Bessel(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.bessel_j0(x)


class Wide(nn.Module):
    """Counts from units to billions (a 2.5B-parameter layer, on the meta device), an owner with "of which" parts,
    a repeated call and a lower bound."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.encoder = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        self.mix = nn.Linear(16, 16)
        self.up = nn.Linear(16, width)
        self.down = nn.Linear(width, width)
        self.odd = Bessel()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.mix(self.mix(self.encoder(self.embed(x))))
        return self.odd(self.down(self.up(x)))


def analyzed(width: int) -> dict:
    with torch.device("meta"):
        model = Wide(width)
    return crawl_module(model, (4, 8))


@pytest.fixture(scope="module")
def reports() -> tuple[dict, dict]:
    return analyzed(50_000), analyzed(52_000)


def check(text: str, where: str) -> None:
    """One cell: each part that starts like a number (compound cells: ``2.5B / 0``, ``2.5B (10GB)``) is a number
    of the grammar."""
    for part in re.split(r" / | \(|\)|, ", text.strip()):
        part = part.strip()
        if STARTS_LIKE_A_NUMBER.match(part):
            assert NUMBER.fullmatch(part), f"{where}: {part!r} (in {text!r}) is not in the one number style"


def check_prose(text: str, where: str) -> None:
    assert not OLD_STYLE.search(text), f"{where}: {OLD_STYLE.search(text)[0]!r} uses another number style"


def terminal_cells(text: str) -> list[str]:
    """The numeric cells of the layer table (right-aligned: each ends where its header ends)."""
    lines = text.splitlines()
    header, cells, start = lines[0], [], 0
    ends: list[tuple[Column, int]] = []
    for column in LAYER_COLUMNS:
        begin = header.index(column.header, start)
        start = begin + len(column.header)
        ends.append((column, start))
    for line in lines[2:lines.index(lines[1], 2)]:
        for column, end in ends:
            segment = line[:end]
            if column.numeric and len(segment) == end and not segment.endswith(" "):
                cells.append(re.split(r"\s{2,}", segment.strip())[-1])
    return cells


def test_terminal_table_and_totals(reports: tuple[dict, dict]) -> None:
    text = render_table(reports[0], col_names=[column.key for column in LAYER_COLUMNS[1:]])
    cells = terminal_cells(text)
    assert {"2.5B", "Σ 2.5B", "2.5G"} & set(cells) and any(cell.startswith("Σ ") for cell in cells)
    for cell in cells:
        check(cell, "terminal")
    for line in text.splitlines():
        if line.startswith(("Parameters:", "Module view:", "Operator view:")):
            for token in TOKEN.findall(line):
                check(token, line)
    check_prose(text, "terminal")


class Cells(HTMLParser):
    """Numeric table cells (``td.num``, or any cell of a right-aligned Markdown column: ``text-align: right``), the
    site's sortable spans, and the chart labels marked as numbers."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []
        self.open: list[str] | None = None
        self.depth = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        values = dict(attrs)
        numeric = ("num" in (values.get("class") or "").split() or "right" in (values.get("style") or "")
                   or "ts-number" in (values.get("class") or ""))
        if self.open is None and numeric and tag in ("td", "text"):
            self.open, self.depth = [], 0
        elif self.open is not None:
            self.depth += 1

    def handle_endtag(self, tag: str) -> None:
        if self.open is None:
            return
        if self.depth:
            self.depth -= 1
            return
        self.found.append(html.unescape("".join(self.open)).replace("\\", ""))
        self.open = None

    def handle_data(self, data: str) -> None:
        if self.open is not None:
            self.open.append(data)


def html_cells(text: str) -> list[str]:
    parser = Cells()
    parser.feed(text)
    return parser.found


def markdown_cells(text: str) -> list[str]:
    """The cells of the right-aligned columns of every Markdown table (tags of the site's spans removed)."""
    found: list[str] = []
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if not re.fullmatch(r"\|(?:\s*:?-+:?\s*\|)+", line.strip()):
            continue
        right = [part.strip().endswith(":") and not part.strip().startswith(":")
                 for part in line.strip().strip("|").split("|")]
        for row in lines[index + 1:]:
            if not row.startswith("|"):
                break
            parts = [part.strip() for part in row.strip().strip("|").split(" | ")]
            found += [html.unescape(re.sub(r"<[^>]+>", "", part)).replace("\\", "")
                      for part, numeric in zip(parts, right, strict=False) if numeric]
    return found


def documents(reports: tuple[dict, dict], tmp_path: Path) -> dict[str, tuple[str, list[str]]]:
    """Every document of the report package for these reports: (text, its numeric cells)."""
    from torchscan.report.output.documents import (
        catalog_markdown,
        diff_document,
        entry_markdown,
        report_html,
        report_markdown,
    )
    from torchscan.report.registry.parsing import load_registry
    from torchscan.report.review.budgets import parse_budget
    from torchscan.report.review.catalog_view import catalog_view
    from torchscan.report.review.report_diff import diff_view

    (tmp_path / "models.toml").write_text('[[models]]\nname = "wide"\nfactory = "nowhere:wide"\ninput_shape = [4, 8]\n'
                                          '[[models.variants]]\nname = "narrow"\n[[models.variants]]\nname = "broad"\n',
                                          encoding="utf-8")
    registry = load_registry(tmp_path / "models.toml")
    catalog = catalog_view(registry, {"wide": {"report": reports[0]}, "wide.broad": {"report": reports[1]}}, False)
    view = report_view(reports[0], title="wide")
    review = diff_view(*reports, budgets=[parse_budget("macs>+1%"), parse_budget("parameters>1M")])
    texts = {"report.md": report_markdown(view), "report.html": report_html(view),
             "site model page": entry_markdown(catalog.entries[0], "../reports/", site=True),
             "model snippet": entry_markdown(catalog.entries[0], "../reports/"),
             "site catalog": catalog_markdown(catalog, "models/", "reports/", site=True),
             "catalog snippet": catalog_markdown(catalog, "", "../reports/"),
             "diff.md": diff_document(review, "md"), "diff.html": diff_document(review, "html")}
    found = {name: (text, html_cells(text) + markdown_cells(text)) for name, text in texts.items()}
    found["budgets"] = ("\n".join(row.observed for row in review.budgets), [
        token for row in review.budgets for token in TOKEN.findall(row.observed)])
    return found


def test_every_document_writes_numbers_in_the_one_style(reports: tuple[dict, dict], tmp_path: Path) -> None:
    found = documents(reports, tmp_path)
    for name, (text, cells) in found.items():
        assert cells, f"{name}: no numeric cell found"
        for cell in cells:
            check(cell, name)
        check_prose(re.sub(r"<svg.*?</svg>", "", text, flags=re.DOTALL), name)
    # Parameters read B (as model cards), costs G, in the tables and on the chart axes alike.
    report_cells = found["report.html"][1]
    assert "2.5B" in report_cells and "≥2.50G" in report_cells  # parameters drop zeros; a rounded cost keeps them
    assert any(cell.endswith("B") for cell in found["site catalog"][1])
    assert "Parameters (structure): 2.5B → 2.7B (+204M, +8.2%)" in found["budgets"][0]


def test_chart_ticks_use_the_tables_units(reports: tuple[dict, dict], tmp_path: Path) -> None:
    from torchscan.report.output.charts import catalog_charts
    from torchscan.report.registry.parsing import load_registry
    from torchscan.report.review.catalog_view import catalog_view

    (tmp_path / "models.toml").write_text('[[models]]\nname = "wide"\nfactory = "nowhere:wide"\ninput_shape = [4, 8]\n'
                                          '[[models]]\nname = "broad"\nfactory = "nowhere:broad"\n'
                                          'input_shape = [4, 8]\n', encoding="utf-8")
    catalog = catalog_view(load_registry(tmp_path / "models.toml"),
                           {"wide": {"report": reports[0]}, "broad": {"report": reports[1]}}, False)
    scatter, _ = catalog_charts(catalog)
    ticks = re.findall(r'class="ts-number"[^>]*>([^<]+)<', scatter.svg)
    assert ticks and all(NUMBER.fullmatch(tick) for tick in ticks), ticks
    assert any(tick.endswith("B") for tick in ticks)  # the parameters axis, as the Parameters column writes it
    assert any(tick.endswith("G") for tick in ticks)  # the MACs axis



def test_byte_results_are_written_with_decimal_byte_suffixes() -> None:
    result = {"status": "complete", "value": 1_234_567, "known_value": 1_234_567, "unit": "bytes", "scope": "model",
              "method": "traced_live_tensor_bytes"}
    assert format_metric(result) == "1.23MB"
    assert format_metric({**result, "status": "partial", "value": None, "known_value": 512}) == "≥512B"
    assert format_metric({**result, "unit": "activations"}) == "1.23M"
    assert format_signed_bytes(-2_500) == "−2.5kB" and format_signed_bytes(0) == "0B"
    assert NUMBER.fullmatch("1.23MB") and NUMBER.fullmatch("≥512B")
