"""The catalog of 200 entries opened from disk in headless Chromium: the filter box by name, tag facets and
status, the count of entries shown, the sticky header, and model pages left out of the navigation. Skipped
without a browser, except in CI (CI=true)."""

from __future__ import annotations

from pathlib import Path

import pytest
from browser import Tab
from catalogs import catalog_site

ENTRIES = 200
FILTER = "[data-role=catalog-filter]"
COUNT = "[data-role=catalog-count]"
SHOWN_NAMES = ('[...document.querySelectorAll("table[data-torchscan-catalog] tbody tr:not([hidden])")]'
               '.map(row => row.cells[0].textContent.trim())')


@pytest.fixture(scope="module")
def big_catalog(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site, warnings = catalog_site(tmp_path_factory.mktemp("catalog200"), ENTRIES)
    assert warnings == []  # the model pages are out of the navigation and MkDocs is told so
    return site / "index.html"


def names(*indices: int) -> list[str]:
    return [f"net-{index:04d}" for index in indices]


def test_the_catalog_filters_by_name_tag_and_status_from_disk(tab: Tab, big_catalog: Path) -> None:
    tab.open(big_catalog)
    assert tab.page.text_content(COUNT) == f"{ENTRIES} of {ENTRIES} entries shown"
    tab.page.fill(FILTER, "net-004")
    assert tab.evaluate(SHOWN_NAMES) == names(*range(40, 50))
    assert tab.page.text_content(COUNT) == f"10 of {ENTRIES} entries shown"
    tab.page.fill(FILTER, "")
    tab.click("button[data-tag=wide]")
    assert tab.evaluate(SHOWN_NAMES) == names(*range(0, ENTRIES, 4))
    assert tab.page.get_attribute("button[data-tag=wide]", "aria-pressed") == "true"
    tab.click("button[data-tag=odd]")  # either pressed tag
    assert len(tab.evaluate(SHOWN_NAMES)) == ENTRIES // 4 + ENTRIES // 2
    tab.click("button[data-tag=wide]")  # released: odd entries only
    tab.page.fill(FILTER, "failed")  # with the odd tag, the failed runs (every 50th, all odd)
    assert tab.evaluate(SHOWN_NAMES) == names(49, 99, 149, 199)
    tab.page.fill(FILTER, "narrow 01")  # every word must match (a tag and part of a name); odd entries are narrow
    assert tab.evaluate(SHOWN_NAMES) == [name for name in names(*range(1, ENTRIES, 2)) if "01" in name]
    assert tab.errors == []


def test_the_header_stays_in_view_and_model_pages_are_not_in_the_navigation(tab: Tab, big_catalog: Path) -> None:
    tab.open(big_catalog)
    wrapper = "document.querySelector('.ts-catalog-scroll')"
    tab.evaluate(f"{wrapper}.scrollTop = 3000")
    assert tab.evaluate(f"{wrapper}.scrollTop") > 1000
    offset = tab.evaluate(f"document.querySelector('table[data-torchscan-catalog] thead th')"
                          f".getBoundingClientRect().top - {wrapper}.getBoundingClientRect().top")
    assert abs(offset) <= 1
    assert tab.count('.md-nav a[href^="models/"]') == 0
    assert tab.errors == []
