"""Tables at 1280 px, measured in headless Chromium (Playwright): nothing wider than its column, in our site and in a
stock MkDocs Material site (with a table of contents) that embeds the portable snippets; the layer tree hides the
columns of lowest priority first and says so; hover titles carry exact values. Skipped without a browser, except
in CI (CI=true)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from browser import Tab
from e2e import Build

#: Every table of the page's content: its scrolling box (Material's scrollwrap, our tree's wrap) and the content
#: column it must fit.
TABLES = """() => Array.from(document.querySelectorAll('.md-content table, main table')).map(table => {
  const box = table.closest('.md-typeset__scrollwrap, .ts-tree-wrap, .table-wrap') || table.parentElement;
  const column = (table.closest('.md-content__inner') || table.closest('main')).getBoundingClientRect();
  const headers = Array.from(table.querySelectorAll('thead th')).map(cell => cell.textContent.trim());
  return {headers: headers.slice(0, 3).join(' | '), scroll: box.scrollWidth, client: box.clientWidth,
          right: Math.round(table.getBoundingClientRect().right), column: Math.round(column.right)};
})"""
STOCK_MKDOCS = """site_name: Stock docs
theme:
  name: material
markdown_extensions:
  - tables
  - toc:
      permalink: true
  - pymdownx.snippets:
      base_path: [{markdown}]
      check_paths: true
nav:
  - Costs: index.md
  - About: about.md
"""
STOCK_PAGE = """# Model costs

Our models, measured by torchscan-report.

## Catalog

--8<-- "catalog.md:catalog"

## The Transformer

--8<-- "transformer_base.md:totals"

--8<-- "transformer_base.md:layers"
"""


@pytest.fixture(scope="module")
def stock_site(user_build: Build, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stock Material site of someone else's docs that embeds our portable snippets (pymdownx.snippets)."""
    folder = tmp_path_factory.mktemp("stock")
    (folder / "docs").mkdir()
    markdown = (user_build.output / "markdown").as_posix()
    (folder / "mkdocs.yml").write_text(STOCK_MKDOCS.format(markdown=markdown), encoding="utf-8")
    (folder / "docs" / "index.md").write_text(STOCK_PAGE, encoding="utf-8")
    (folder / "docs" / "about.md").write_text("# About\n", encoding="utf-8")
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--quiet", "--site-dir", "site"], cwd=folder,
                   check=True, capture_output=True)
    return folder / "site" / "index.html"


def tables_of(tab: Tab, page: Path) -> list[dict]:
    tab.open(page)
    return tab.evaluate(TABLES)


def assert_fits(table: dict, where: str) -> None:
    assert table["scroll"] <= table["client"] + 1, f"{where}: {table['headers']} scrolls sideways ({table})"
    assert table["right"] <= table["column"] + 1, f"{where}: {table['headers']} overflows its column ({table})"


def test_our_site_and_standalone_report_fit_1280_px(tab: Tab, user_build: Build) -> None:
    for page in (user_build.output / "index.html", user_build.output / "models" / "transformer_base.html",
                 user_build.output / "reports" / "transformer_base.html"):
        tables = tables_of(tab, page)
        assert any(table["headers"].startswith("Layer") for table in tables) or page.name == "index.html"
        for table in tables:
            if table["client"]:  # the numbers behind a chart are folded (<details>) until asked for
                assert_fits(table, page.name)
    assert tab.errors == []


def test_the_layer_tree_hides_columns_by_priority_and_lets_the_reader_choose(tab: Tab, user_build: Build) -> None:
    tab.open(user_build.output / "models" / "transformer_base.html")
    unchecked = tab.evaluate('Array.from(document.querySelectorAll(".ts-columns input:not(:checked)"))'
                             '.map(box => [box.parentElement.textContent.trim(), +box.dataset.priority])')
    shown = tab.evaluate('Array.from(document.querySelectorAll(".ts-columns input:checked"))'
                         '.map(box => +box.dataset.priority)')
    # Dropped to fit: every hidden column ranks below every shown one, and the chooser says how many are hidden.
    assert unchecked and max(priority for _, priority in unchecked) < min(shown)
    assert tab.page.text_content("[data-role=hidden-count]") == f" ({len(unchecked)} hidden)"
    visible_headers = ('Array.from(document.querySelectorAll(".ts-tree-table thead th"))'
                       '.filter(th => th.offsetParent !== null).map(th => th.textContent.trim())')
    before = tab.evaluate(visible_headers)
    assert before[:2] == ["Layer", "Type"] and "MACs" in before and "DMAs" not in before
    tab.click("summary:has-text('Columns')")
    tab.page.locator(".ts-columns label", has_text="DMAs").locator("input").check()
    assert "DMAs" in tab.evaluate(visible_headers)  # the reader's choice wins (the tree may scroll then)
    assert tab.page.text_content("[data-role=hidden-count]") == f" ({len(unchecked) - 1} hidden)"
    assert tab.errors == []


def test_hover_titles_carry_exact_values(tab: Tab, user_build: Build) -> None:
    exact = re.compile(r"\b\d{1,3}(?:,\d{3})* (?:MACs|FLOPs|DMAs|parameters|elements)\b")
    tab.open(user_build.output / "models" / "transformer_base.html")
    tree = tab.evaluate('Array.from(document.querySelectorAll(".ts-tree-table tbody tr[data-i=\\"0\\"] td.num"))'
                        '.map(cell => [cell.textContent.trim(), cell.title])')
    counts = [(text, title) for text, title in tree if text and text != "covered"]
    assert len(counts) >= 4 and all(exact.search(title) for text, title in counts if "%" not in text), counts
    totals = tab.evaluate('Array.from(document.querySelectorAll("#totals ~ .md-typeset__scrollwrap span[title]"))'
                          '.map(cell => cell.title)') or tab.evaluate(
        'Array.from(document.querySelectorAll("span[data-sort][title]")).map(cell => cell.title)')
    assert any(exact.search(title) for title in totals), totals
    tab.open(user_build.output / "index.html")
    catalog = tab.evaluate('Array.from(document.querySelectorAll("table[data-torchscan-sortable] tbody tr"))'
                           '.map(row => Array.from(row.cells).slice(1, 6).map(cell => (cell.querySelector("[title]")'
                           ' || {title: ""}).title))')
    complete = catalog[0]  # transformer_base: every count exact on hover, MACs and FLOPs included
    assert all(re.search(r"\d{1,3}(?:,\d{3})+ ", title) for title in complete), complete
    assert tab.errors == []


def test_a_stock_material_site_embeds_the_layer_table_without_clipping(tab: Tab, stock_site: Path) -> None:
    tables = tables_of(tab, stock_site)
    assert tab.evaluate("document.querySelector('.md-sidebar--secondary').offsetWidth") > 0  # a table of contents
    layer = [table for table in tables if table["headers"].startswith("Layer")]
    totals = [table for table in tables if table["headers"].startswith("Quantity")]
    assert layer and totals
    for table in layer + totals:
        assert_fits(table, "stock site")
    assert tab.errors == []


def test_a_stock_material_site_embeds_the_catalog_without_clipping(tab: Tab, stock_site: Path) -> None:
    # Material gives every header at least 5rem: beside a table of contents at most six columns fit, so the portable
    # catalog merges the two FLOPs views, leaves DMAs to the model pages, and says so under the table.
    tables = tables_of(tab, stock_site)
    catalog = [table for table in tables if table["headers"].startswith("Model | Parameters")]
    assert catalog
    assert_fits(catalog[0], "stock site catalog")
    headers = tab.evaluate("Array.from(document.querySelectorAll('table')[0].querySelectorAll('thead th'))"
                           ".map(cell => cell.textContent.trim())")
    assert headers == ["Model", "Parameters", "MACs", "FLOPs (module / operator)", "Status", "Report"]
    assert "leaves out DMAs: each model's page has every total in full" in tab.page.inner_text(".md-content")
    assert tab.errors == []
