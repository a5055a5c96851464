"""Golden files of one model with an owned subtree, rendered by the terminal table, the Markdown report and the
standalone HTML report (also with memory sections), and of a small model's training step with memory; and a check
that the three agree, cell for cell, with each other and the view model.

Regenerate the golden files after an intended change of the output (then review the diff):

    UPDATE_GOLDEN=1 python -m pytest tests/views/test_golden.py
"""

from __future__ import annotations

import html
import os
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch
from torch import nn
from torchscan_testing import with_memory

from torchscan import __version__, crawl_module, crawl_training_step
from torchscan.views import COLUMNS_BY_KEY, LAYER_COLUMNS, MARKDOWN_COLUMNS, ReportView, TreeItem, report_view
from torchscan.views.text import COLUMNS as TERMINAL_KEYS
from torchscan.views.text import render_table

GOLDEN = Path(__file__).parent / "golden"
#: The columns of the terminal table and of the Markdown layer table (templates/md/layers.md.j2).
TERMINAL_COLUMNS = ("layer", *TERMINAL_KEYS)
MARKDOWN_KEYS = tuple(column.key for column in MARKDOWN_COLUMNS)


class Bessel(nn.Module):
    """A leaf without a formula: its estimates are lower bounds, and a diagnostic points at it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.special.bessel_j0(x)


class Golden(nn.Module):
    """An owned subtree (a native Transformer layer), a repeated call, a call made from outside its parent
    (``head.0``), a composite, and a partial leaf."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(8, 16)
        self.encoder = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        self.shared = nn.Linear(16, 16)
        self.head = nn.Sequential(nn.ReLU(), nn.Flatten())
        self.odd = Bessel()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.encoder(self.embed(x))
        x = self.shared(self.shared(x))
        return self.odd(self.head(self.head[0](x)))


@pytest.fixture(scope="module")
def report() -> dict:
    return crawl_module(Golden(), (4, 8))


@pytest.fixture(scope="module")
def view(report: dict) -> ReportView:
    return report_view(report, title="golden")


def rendered(report: dict) -> dict[str, str]:
    """The three renderings, with the version numbers that change between machines replaced."""
    from torchscan.report.output.documents import report_html, report_markdown

    view = report_view(report, title="golden")
    # the SVG charts depend on the matplotlib version; they have tests of their own
    texts = {"summary.txt": render_table(report) + "\n", "report.md": report_markdown(view),
             "report.html": report_html(view, charts=[])}
    context = report["context"]
    for key in ("torch", "python"):
        texts = {name: text.replace(context[key], f"<{key}>") for name, text in texts.items()}
    return {name: text.replace(__version__, "<torchscan>") for name, text in texts.items()}


@pytest.mark.parametrize("name", ["summary.txt", "report.md", "report.html"])
def test_golden_files(report: dict, name: str) -> None:
    text = rendered(report)[name]
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"{path} is missing: run UPDATE_GOLDEN=1 python -m pytest {Path(__file__).name}"
    assert text == path.read_text(encoding="utf-8"), f"{name} changed: review, then regenerate with UPDATE_GOLDEN=1"


@pytest.mark.parametrize("name", ["summary.txt", "report.md", "report.html"])
def test_golden_files_with_memory(report: dict, name: str) -> None:
    """The same report with memory sections (the engine's ``memory=True`` contract, hand-made by
    ``torchscan_testing.with_memory``): memory totals, the memory section, its tables and the largest outputs."""
    text = rendered(with_memory(report))[name]
    path = GOLDEN / "memory" / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"{path} is missing: run UPDATE_GOLDEN=1 python -m pytest {Path(__file__).name}"
    assert text == path.read_text(encoding="utf-8"), f"{name} changed: review, then regenerate with UPDATE_GOLDEN=1"


@pytest.fixture(scope="module")
def trained_report() -> dict:
    """A small model's report with its training step (AdamW), as the site's worker writes one, with hand-made
    memory sections: the steady state's peak, the optimizer state resident from its start, and the first step's
    lower peak in the backward (``torchscan_testing.with_memory``)."""
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    report = crawl_module(model, (4, 8))
    report["training"] = crawl_training_step(model, (4, 8), optimizer="adamw")["training"]
    return with_memory(report)


@pytest.mark.parametrize("name", ["report.md", "report.html"])
def test_golden_files_with_a_training_step(trained_report: dict, name: str) -> None:
    """The training step's sentence (optimizer implementation, precision policy) and its memory rows: the steady
    state's peak, what is resident from its start, and the first step's peak beside it."""
    text = rendered(trained_report)[name]
    path = GOLDEN / "training" / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.parent.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"{path} is missing: run UPDATE_GOLDEN=1 python -m pytest {Path(__file__).name}"
    assert text == path.read_text(encoding="utf-8"), f"{name} changed: review, then regenerate with UPDATE_GOLDEN=1"


# -- reading the cells back from each rendering ------------------------------------------------------------------


def terminal_cells(text: str) -> list[dict[str, str]]:
    """The layer rows of the terminal table: left columns start under their header, numbers end under theirs."""
    lines = text.splitlines()
    header = lines[0]
    spans, start = {}, 0
    for key in TERMINAL_COLUMNS:  # headers may hold a space ("% MACs")
        begin = header.index(COLUMNS_BY_KEY[key].header, start)
        start = begin + len(COLUMNS_BY_KEY[key].header)
        spans[key] = begin, start
    rows = []
    for line in lines[2:lines.index(lines[1], 2)]:
        if line.startswith("…"):
            continue
        cells = {"layer": line[:spans["type"][0]].strip().removesuffix(" ⚠"),
                 "type": line[spans["type"][0]:spans["output"][0]].strip(),
                 "output": re.split(r"\s{2,}", line[spans["output"][0]:])[0].strip()}
        for key in TERMINAL_COLUMNS[3:]:  # right-aligned: the cell ends where its header ends, or is empty
            segment = line[:spans[key][1]].ljust(spans[key][1])
            cells[key] = "" if segment.endswith(" ") else re.split(r"\s{2,}", segment)[-1].strip()
        rows.append(cells)
    return rows


def markdown_cells(text: str) -> list[dict[str, str]]:
    lines = text[text.index("| Layer | Type |"):].splitlines()[2:]
    rows = []
    for line in lines[: next(i for i, line in enumerate(lines) if not line.startswith("| "))]:
        parts = [html.unescape(part.replace("&nbsp;", "")).replace("\\", "").strip()
                 for part in line.strip("|").split(" | ")]
        cells = dict(zip(MARKDOWN_KEYS, parts, strict=False))
        cells["layer"] = cells["layer"].removesuffix(" ⚠")
        rows.append(cells)
    return rows


class TreeCells(HTMLParser):
    """The text of every cell of the layer tree's body, row by row (toggles and marks left out)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.inside = False
        self.cell: list[str] | None = None
        self.skip = 0

    def handle_starttag(self, tag: str, attrs: list) -> None:
        classes = dict(attrs).get("class") or ""
        if tag == "table" and "ts-tree-table" in classes:
            self.inside = True
        elif self.inside and tag == "tr":
            self.rows.append([])
        elif self.inside and tag == "td":
            self.cell = []
        elif self.cell is not None and (tag == "button" or "ts-warn" in classes):
            self.skip += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self.inside = False
        elif tag == "td" and self.cell is not None:
            self.rows[-1].append("".join(self.cell).strip())
            self.cell = None
        elif self.skip and tag in ("button", "span"):
            self.skip -= 1

    def handle_data(self, data: str) -> None:
        if self.cell is not None and not self.skip:
            self.cell.append(data)


def html_cells(text: str) -> list[dict[str, str]]:
    parser = TreeCells()
    parser.feed(text)
    return [dict(zip((column.key for column in LAYER_COLUMNS), row, strict=False)) for row in parser.rows if row]


def expected(item: TreeItem, key: str) -> str:
    return item.cell(key).text


def test_terminal_markdown_and_html_agree_on_every_cell(report: dict, view: ReportView) -> None:
    texts = rendered(report)
    readings = {"terminal": (terminal_cells(texts["summary.txt"]), TERMINAL_COLUMNS),
                "markdown": (markdown_cells(texts["report.md"]), MARKDOWN_KEYS),
                "html": (html_cells(texts["report.html"]), tuple(column.key for column in LAYER_COLUMNS))}
    for name, (rows, columns) in readings.items():
        assert len(rows) == len(view.tree), name
        for item, cells in zip(view.tree, rows, strict=True):
            assert {key: cells[key] for key in columns} == {key: expected(item, key) for key in columns}, (
                name, item.row.label)
    # The model has what the check is about: an owned subtree, sums, lower bounds, a repeated call, a full path.
    texts_of = {expected(item, key) for item in view.tree for key in TERMINAL_COLUMNS}
    assert {"covered", "shared #1", "head.0"} <= texts_of
    assert any(text.startswith("Σ ≥") for text in texts_of) and any(text.startswith("≥") for text in texts_of)
    assert any(item.row.ownership.text == "owner" for item in view.tree)
