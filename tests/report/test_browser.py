"""The built catalog and a standalone report, opened in headless Chromium: screenshots, the collapsible tree,
light and dark, a 5,000-row tree, and sorting the catalog. Skipped without a browser, except in CI (CI=true)."""

from __future__ import annotations

from pathlib import Path

from browser import Browser
from e2e import Build
from torch import nn

from torchscan import crawl_module
from torchscan.report.documents import render_report_file

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def visible_rows(browser: Browser) -> int:
    return browser.evaluate('document.querySelectorAll("#tree-body tr:not([hidden])").length')


def click(browser: Browser, selector: str) -> None:
    browser.evaluate(f"document.querySelector({selector!r}).click()")


def test_standalone_report_tree_collapses_and_expands(browser: Browser, site_build: Build, tmp_path: Path) -> None:
    browser.open(site_build.output / "reports" / "tiny.html")
    assert browser.evaluate("document.title") == "tiny (w4) — TorchScan report"
    shot = browser.screenshot(tmp_path / "report.png")
    assert shot.startswith(PNG_SIGNATURE) and len(shot) > 10_000
    # Rows: root, conv, inner Sequential, relu, flatten; small trees open fully.
    assert browser.evaluate('document.querySelectorAll("#tree-body tr").length') == 5 and visible_rows(browser) == 5
    click(browser, 'tr[data-i="2"] button.t')  # collapse the inner Sequential
    assert visible_rows(browser) == 3
    assert browser.evaluate('document.querySelector(\'tr[data-i="2"] button.t\').getAttribute("aria-expanded")') == (
        "false")
    click(browser, 'tr[data-i="0"] button.t')  # collapse the root: only itself remains
    assert visible_rows(browser) == 1
    click(browser, 'tr[data-i="0"] button.t')  # expand the root: the inner node stays collapsed
    assert visible_rows(browser) == 3
    click(browser, "#expand-all")
    assert visible_rows(browser) == 5
    assert browser.console_errors() == []


def test_light_and_dark(browser: Browser, site_build: Build) -> None:
    background = 'getComputedStyle(document.body).backgroundColor'
    for scheme, expected in (("light", "rgb(255, 255, 255)"), ("dark", "rgb(13, 17, 23)")):
        browser.call("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": scheme}]},
                     session=browser.session)
        browser.open(site_build.output / "reports" / "tiny.html")
        assert browser.evaluate(background) == expected
    click(browser, "#theme")  # the toggle overrides the system preference
    assert browser.evaluate(background) == "rgb(255, 255, 255)"
    browser.call("Emulation.setEmulatedMedia", {"features": []}, session=browser.session)


def test_a_5000_row_tree_opens_collapsed_and_expands_on_demand(browser: Browser, tmp_path: Path) -> None:
    model = nn.Sequential(*(nn.Sequential(*(nn.ReLU() for _ in range(100))) for _ in range(50)))
    path = tmp_path / "big.html"
    path.write_text(render_report_file(crawl_module(model, (4,)), "html", title="big"), encoding="utf-8")
    browser.open(path)
    total = browser.evaluate('document.querySelectorAll("#tree-body tr").length')
    assert total == 1 + 50 + 50 * 100
    assert visible_rows(browser) == 1 + 50  # the root and its children; the rest is one click away
    click(browser, 'tr[data-i="1"] button.t')
    assert visible_rows(browser) == 1 + 50 + 100
    click(browser, "#expand-all")
    assert visible_rows(browser) == total
    browser.evaluate('(() => { const f = document.getElementById("filter"); f.value = "49.99";'
                     ' f.dispatchEvent(new Event("input")); })()')
    assert visible_rows(browser) == 1
    assert browser.console_errors() == []


def test_catalog_sorts_by_any_column(browser: Browser, site_build: Build, tmp_path: Path) -> None:
    browser.open(site_build.output / "models" / "catalog.html")
    shot = browser.screenshot(tmp_path / "catalog.png")
    assert shot.startswith(PNG_SIGNATURE) and len(shot) > 10_000
    first_cells = 'Array.from(document.querySelectorAll("table[data-torchscan-sortable] tbody tr"))' \
                  '.map(row => row.cells[%d].textContent.trim())'
    assert browser.evaluate(first_cells % 0) == ["tiny · w4", "tiny · w8", "tagger"]
    header = 'document.querySelectorAll("table[data-torchscan-sortable] thead th")[%d]'
    browser.evaluate((header % 1) + ".click()")  # Parameters, ascending
    # tiny w4: 4*3*3*3+4 = 112; w8: 8*27+8 = 224; tagger: 50*8 + 8*3+3 = 427.
    assert browser.evaluate(first_cells % 1) == ["112", "224", "427"]
    browser.evaluate((header % 1) + ".click()")  # descending
    assert browser.evaluate(first_cells % 1) == ["427", "224", "112"]
    assert browser.evaluate((header % 1) + '.getAttribute("aria-sort")') == "descending"
    browser.evaluate((header % 0) + ".click()")  # text column
    assert browser.evaluate(first_cells % 0) == ["tagger", "tiny · w4", "tiny · w8"]
    assert browser.console_errors() == []
