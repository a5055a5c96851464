"""The built catalog and a standalone report, opened in headless Chromium (Playwright): the collapsible tree,
light and dark, a 5,000-row tree, and sorting the catalog. Skipped without a browser, except in CI (CI=true)."""

from __future__ import annotations

from pathlib import Path

from browser import Tab, new_tab
from e2e import Build
from torch import nn

from torchscan import crawl_module
from torchscan.report.output.documents import render_report_file

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
VISIBLE_ROWS = ".ts-tree-table tbody tr:not([hidden])"


def test_standalone_report_tree_collapses_and_expands(tab: Tab, site_build: Build, tmp_path: Path) -> None:
    tab.open(site_build.output / "reports" / "tiny.html")
    assert tab.page.title() == "tiny (w4) — TorchScan report"
    shot = tab.screenshot(tmp_path / "report.png")
    assert shot.startswith(PNG_SIGNATURE) and len(shot) > 10_000
    # Rows: root, conv, inner Sequential, relu, flatten; small trees open fully.
    assert tab.count(".ts-tree-table tbody tr") == 5 and tab.count(VISIBLE_ROWS) == 5
    tab.click('tr[data-i="2"] button.ts-toggle')  # collapse the inner Sequential
    assert tab.count(VISIBLE_ROWS) == 3
    assert tab.page.get_attribute('tr[data-i="2"] button.ts-toggle', "aria-expanded") == "false"
    tab.click('tr[data-i="0"] button.ts-toggle')  # collapse the root: only itself remains
    assert tab.count(VISIBLE_ROWS) == 1
    tab.click('tr[data-i="0"] button.ts-toggle')  # expand the root: the inner node stays collapsed
    assert tab.count(VISIBLE_ROWS) == 3
    tab.click("[data-action=expand]")
    assert tab.count(VISIBLE_ROWS) == 5
    assert tab.errors == []


def test_light_and_dark(chromium, site_build: Build) -> None:
    background = "getComputedStyle(document.body).backgroundColor"
    for scheme, expected in (("light", "rgb(255, 255, 255)"), ("dark", "rgb(13, 17, 23)")):
        tab = new_tab(chromium, color_scheme=scheme)
        tab.open(site_build.output / "reports" / "tiny.html")
        assert tab.evaluate(background) == expected
        if scheme == "dark":
            tab.click("#theme")  # the toggle overrides the system preference
            assert tab.evaluate(background) == "rgb(255, 255, 255)"
        tab.page.context.close()


def test_a_5000_row_tree_opens_collapsed_and_expands_on_demand(tab: Tab, tmp_path: Path) -> None:
    model = nn.Sequential(*(nn.Sequential(*(nn.ReLU() for _ in range(100))) for _ in range(50)))
    path = tmp_path / "big.html"
    path.write_text(render_report_file(crawl_module(model, (4,)), "html", title="big"), encoding="utf-8")
    tab.open(path)
    total = tab.count(".ts-tree-table tbody tr")
    assert total == 1 + 50 + 50 * 100
    assert tab.count(VISIBLE_ROWS) == 1 + 50  # the root and its children; the rest is one click away
    tab.click('tr[data-i="1"] button.ts-toggle')
    assert tab.count(VISIBLE_ROWS) == 1 + 50 + 100
    tab.click("[data-action=expand]")
    assert tab.count(VISIBLE_ROWS) == total
    tab.page.fill("[data-role=filter]", "49.99")
    # The match, and its parent path (the root and block 49) as context: a match is never shown out of its tree.
    assert tab.count(VISIBLE_ROWS) == 3 and tab.count(".ts-tree-table tr.ts-match:not([hidden])") == 1
    assert tab.evaluate('[...document.querySelectorAll(".ts-tree-table tr:not([hidden]) td.ts-name")]'
                        '.map(cell => cell.textContent.trim())') == ["▾(root)", "▾49", "99"]
    assert tab.page.text_content("[data-role=count]") == "1 of 5,051 calls"
    tab.page.fill("[data-role=filter]", "")
    assert tab.count(VISIBLE_ROWS) == 1 + 50
    assert tab.errors == []


def test_catalog_sorts_by_any_column(tab: Tab, site_build: Build, tmp_path: Path) -> None:
    tab.open(site_build.output / "models" / "catalog.html")
    shot = tab.screenshot(tmp_path / "catalog.png")
    assert shot.startswith(PNG_SIGNATURE) and len(shot) > 10_000
    first_cells = ('column => Array.from(document.querySelectorAll("table[data-torchscan-sortable] tbody tr"))'
                   '.map(row => row.cells[column].textContent.trim())')
    assert tab.evaluate(first_cells, 0) == ["tiny · w4", "tiny · w8", "tagger"]
    header = "table[data-torchscan-sortable] thead th >> nth=%d"
    tab.click(header % 1)  # Parameters, ascending
    # tiny w4: 4*3*3*3+4 = 112; w8: 8*27+8 = 224; tagger: 50*8 + 8*3+3 = 427.
    assert tab.evaluate(first_cells, 1) == ["112", "224", "427"]
    tab.click(header % 1)  # descending
    assert tab.evaluate(first_cells, 1) == ["427", "224", "112"]
    assert tab.page.get_attribute(header % 1, "aria-sort") == "descending"
    tab.click(header % 0)  # text column
    assert tab.evaluate(first_cells, 0) == ["tagger", "tiny · w4", "tiny · w8"]
    assert tab.errors == []


def test_catalog_filter_in_a_joined_site(tab: Tab, site_build: Build) -> None:
    """The same filter box as a standalone catalog's (test_browser_catalog.py), on the page beside a site's own."""
    tab.open(site_build.output / "models" / "catalog.html")
    shown = ('[...document.querySelectorAll("table[data-torchscan-catalog] tbody tr:not([hidden])")]'
             '.map(row => row.cells[0].textContent.trim())')
    assert tab.page.text_content("[data-role=catalog-count]") == "3 of 3 entries shown"
    tab.page.fill("[data-role=catalog-filter]", "tagger")
    assert tab.evaluate(shown) == ["tagger"]
    tab.page.fill("[data-role=catalog-filter]", "")
    tab.click("button[data-tag=vision]")
    assert tab.evaluate(shown) == ["tiny · w4", "tiny · w8"]
    assert tab.page.text_content("[data-role=catalog-count]") == "2 of 3 entries shown"
    assert tab.errors == []
