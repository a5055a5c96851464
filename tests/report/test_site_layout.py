"""The generated site read as a person reads it, measured in headless Chromium (Playwright) from ``file://``: the
catalog fits the content column at 1280 px, layer rows stay one or two lines, a partial model's page names the cause
in its first screen, the layer tree folds and filters, and tables fit a phone or scroll inside their own box."""

from __future__ import annotations

import json

from browser import PHONE, Tab, new_tab
from e2e import Build

#: Every row of a layer table, measured: its height in lines of its own cells' text.
ROW_LINES = """selector => Array.from(document.querySelectorAll(selector)).map(row => {
  const cell = row.cells[0], style = getComputedStyle(cell);
  const line = parseFloat(style.lineHeight) || 1.2 * parseFloat(style.fontSize);
  const padding = parseFloat(style.paddingTop) + parseFloat(style.paddingBottom);
  return [cell.textContent.trim(), (row.getBoundingClientRect().height - padding - 1) / line];
})"""
OVERFLOW = """() => [document.documentElement.scrollWidth, document.documentElement.clientWidth,
  Array.from(document.querySelectorAll('.md-typeset table')).map(table => {
    const box = table.closest('.md-typeset__scrollwrap') || table.parentElement;
    return [box.scrollWidth, box.clientWidth];
  })]"""


def test_the_catalog_fits_the_content_column_at_1280_px(tab: Tab, user_build: Build, site_build: Build) -> None:
    for catalog in (user_build.output / "index.html", site_build.output / "models" / "catalog.html"):
        tab.open(catalog)
        page_width, client_width, tables = tab.evaluate(OVERFLOW)
        assert page_width == client_width, catalog
        catalog_table = tables[0]
        assert catalog_table[0] == catalog_table[1], f"{catalog}: the catalog table scrolls sideways"
        headers = tab.evaluate('Array.from(document.querySelectorAll("table[data-torchscan-sortable] th"))'
                               '.map(th => th.textContent.trim())')
        assert headers[:6] == ["Model", "Parameters", "MACs", "Module FLOPs", "Operator FLOPs", "DMAs"]
        # Then the memory columns when the reports traced memory, the status and the links.
        assert headers[6:] in (["Status", "Report"], ["Forward peak", "Activations", "Status", "Report"])
        # The links to the reports are on screen, not behind a sideways scroll.
        link = tab.page.locator("table[data-torchscan-sortable] a", has_text="HTML").first
        box = link.bounding_box()
        assert box is not None and box["x"] + box["width"] <= 1280
    assert tab.errors == []


def test_status_badges_and_lower_bounds_sort_after_exact_values(tab: Tab, user_build: Build) -> None:
    tab.open(user_build.output / "index.html")
    status = tab.evaluate('Array.from(document.querySelectorAll("table[data-torchscan-sortable] thead th"))'
                          '.findIndex(th => th.textContent.trim() === "Status")')
    badges = tab.evaluate('column => Object.fromEntries(Array.from(document.querySelectorAll("table[data-torchscan-'
                          'sortable] tbody tr")).map(row => [row.cells[0].textContent.trim(), [row.cells[column]'
                          '.textContent.trim(), getComputedStyle(row.cells[column].querySelector(".ts-badge")).color]'
                          ']))', status)
    assert badges["partial"][0] == "partial" and badges["fails"][0] == "failed"
    assert badges["transformer_base"][0] == "complete"
    assert len({colour for _, colour in badges.values()}) == 3  # complete, partial and failed read differently
    tab.click("table[data-torchscan-sortable] thead th >> nth=2")  # MACs, ascending
    order = tab.evaluate('Array.from(document.querySelectorAll("table[data-torchscan-sortable] tbody tr"))'
                         '.map(row => row.cells[2].textContent.trim())')
    # warns' exact MACs, then transformer_base's; partial's lower bound ≥16 after them though smaller; n/a last.
    assert order[:2] == ["2.64k", "5.94G"] and order[2] == "≥16"
    assert order[3] == "—"
    assert tab.errors == []


def test_no_layer_row_of_transformer_base_is_taller_than_two_lines(chromium, user_build: Build) -> None:
    for page, selector in ((user_build.output / "models" / "transformer_base.html", ".ts-tree-table tbody tr"),
                           (user_build.output / "reports" / "transformer_base.html", ".ts-tree-table tbody tr")):
        for viewport in ({"width": 1280, "height": 900}, {"width": 1920, "height": 1080}):
            tab = new_tab(chromium, viewport)
            tab.open(page)
            tab.click("[data-action=expand]")
            rows = tab.evaluate(ROW_LINES, selector)
            assert len(rows) > 130  # every call, and the parts of the Transformer's estimate
            tallest = max(rows, key=lambda row: row[1])
            assert tallest[1] <= 2.05, (page.name, viewport, tallest)
            tab.page.context.close()


def test_a_partial_model_page_names_the_cause_in_its_first_screen(tab: Tab, user_build: Build) -> None:
    tab.open(user_build.output / "models" / "partial.html")
    notice = tab.page.locator(".admonition.warning").first
    box = notice.bounding_box()
    assert box is not None and box["y"] + 60 < 900  # its title and first lines are in the first screen
    text = notice.inner_text()
    assert "Partial analysis" in text and "unsupported_module" in text and "1 (Bessel)" in text
    # The offending layer row is marked in the tree.
    marked = tab.evaluate('Array.from(document.querySelectorAll(".ts-tree-table tr.ts-problem td.ts-name"))'
                          '.map(cell => cell.textContent.trim())')
    assert marked == ["1 ⚠"]
    tab.open(user_build.output / "models" / "fails.html")
    failure = tab.page.locator(".admonition.failure").first.inner_text()
    assert "ValueError: this layer cannot run" in failure and "Failing layer: 1.1" in failure
    tab.open(user_build.output / "models" / "warns.html")
    assert "enable_nested_tensor is True" in tab.page.locator(".admonition.note").first.inner_text()
    assert tab.errors == []


def test_the_layer_tree_of_a_site_page_folds_and_filters_from_disk(tab: Tab, user_build: Build) -> None:
    page = user_build.output / "models" / "transformer_base.html"
    tab.open(page)
    assert tab.page.url.startswith("file://")
    visible = ".ts-tree-table tbody tr:not([hidden])"
    everything = tab.count(".ts-tree-table tbody tr")
    assert tab.count(visible) == everything  # fewer than 400 rows: the tree opens fully
    tab.click('.ts-tree-table tr[data-i="0"] button.ts-toggle')
    assert tab.count(visible) == 1
    tab.page.fill("[data-role=filter]", "decoder.layers.5.norm3")
    names = tab.evaluate('Array.from(document.querySelectorAll(".ts-tree-table tbody tr:not([hidden]) td.ts-name"))'
                         '.map(cell => cell.textContent.trim())')
    # The match and its parent path: the root, the decoder, its sixth layer.
    assert names == ["▾(root)", "▾decoder", "▾layers.5", "norm3"]
    assert tab.page.text_content("[data-role=count]").startswith("1 of ")
    tab.page.fill("[data-role=filter]", "")
    tab.page.fill("[data-role=depth]", "1")
    tab.page.dispatch_event("[data-role=depth]", "change")
    assert tab.count(visible) == 1 + 2 + tab.count('.ts-tree-table tr.ts-part[data-d="1"]')
    assert tab.errors == []


def test_tables_fit_a_phone_or_scroll_inside_their_own_box(chromium, user_build: Build) -> None:
    for page in (user_build.output / "index.html", user_build.output / "models" / "transformer_base.html",
                 user_build.output / "models" / "partial.html", user_build.output / "reports" / "partial.html"):
        tab = new_tab(chromium, PHONE)
        tab.open(page)
        assert tab.evaluate("document.documentElement.scrollWidth") <= PHONE["width"], page
        tab.page.context.close()


def test_the_user_build_keeps_warnings_out_of_the_progress_lines(user_build: Build) -> None:
    assert user_build.result.returncode == 1  # "fails" failed
    assert "UserWarning" not in user_build.result.stderr and "enable_nested_tensor" not in user_build.result.stderr
    warns = json.loads((user_build.output / "reports" / "warns.json").read_text())
    assert warns["context"]["warnings"][0]["category"] == "UserWarning"
    assert "4 runs: 2 complete, 1 partial, 1 failed" in user_build.result.stderr
    assert "[2/4] partial: ok, partial" in user_build.result.stderr or "partial: ok, partial" in user_build.result.stderr
