"""``torchscan-report diff OLD NEW`` on two catalogs: one verdict line, one row per entry (added, removed, changed,
unchanged, failed), budgets per entry, and the documented exit statuses."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from browser import new_tab
from torchscan_testing import documented_file

from torchscan.report.build import BuildOptions, build
from torchscan.report.cli import main
from torchscan.report.output.templates import template_folder
from torchscan.report.registry.parsing import load_registry
from torchscan.report.review.budgets import parse_budget
from torchscan.report.review.catalog_index import CATALOG_INDEX
from torchscan.report.runs.progress import Progress

OLD_MODELS = """from torch import nn

def a():
    return nn.Sequential(nn.Linear(16, 16), nn.Linear(16, 4))

def b():
    return nn.Linear(16, 4)

def gone():
    return nn.Linear(16, 2)

def broken():
    return nn.Linear(16, 8)
"""
#: ``a`` widened (320 -> 640 MACs), ``b`` unchanged, ``gone`` removed, ``fresh`` added, ``broken`` now raises.
NEW_MODELS = (OLD_MODELS.replace("nn.Linear(16, 16), nn.Linear(16, 4)", "nn.Linear(16, 32), nn.Linear(32, 4)")
              .replace("def gone():\n    return nn.Linear(16, 2)", "def fresh():\n    return nn.Linear(16, 3)")
              .replace("return nn.Linear(16, 8)", "raise RuntimeError('the factory broke')"))


def in_process(jobs: int, timeout: float) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=jobs)


def build_side(folder: Path, side: str, source: str, entries: tuple[str, ...], output: str = "", extra: str = ""
               ) -> Path:
    """A built site of ``entries``, defined in ``<side>_models.py`` (a module per side: this process imports once),
    at ``output`` (default ``<side>-site``); ``extra`` is added to every entry of the registry."""
    (folder / f"{side}_models.py").write_text(source, encoding="utf-8")
    registry = folder / f"{side}.toml"
    registry.write_text("".join(f'[[models]]\nname = "{name}"\nfactory = "{side}_models:{name}"\ninput_shape = [16]\n'
                                f"{extra}\n" for name in entries), encoding="utf-8")
    output = folder / (output or f"{side}-site")
    build(load_registry(registry), BuildOptions(output=output, jobs=1, timeout=60), Progress(io.StringIO()),
          executor_factory=in_process)
    return output


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("catalogs")
    build_side(folder, "old", OLD_MODELS, ("a", "b", "gone", "broken"))
    # The new site was built before, while "broken" still worked: its last good report is kept.
    build_side(folder, "earlier", OLD_MODELS, ("broken",), output="new-site")
    build_side(folder, "new", NEW_MODELS, ("a", "b", "fresh", "broken"))
    return folder


def diff(folder: Path, output: str, *options: str, old: str = "old-site", new: str = "new-site") -> int:
    return main(["diff", str(folder / old), str(folder / new), "--output", str(folder / output), *options])


def section(text: str, heading: str) -> str:
    """The part of a review under ``heading`` (a line of its own), up to the next heading of any level."""
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    following = re.search(r"^#{1,3} ", text[start:], flags=re.MULTILINE)
    return (text[start:start + following.start()] if following else text[start:]).lstrip("\n")


def test_the_review_shows_the_entries_that_changed_or_broke(sites: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert diff(sites, "review.md") == 0  # no budget: nothing to fail
    text = (sites / "review.md").read_text(encoding="utf-8")
    assert text.startswith("# Model catalog: before / after\n\n**Changed**: 1 changed, 1 added, 1 removed, 1 failed, "
                           "1 unchanged.\n")
    assert re.findall(r"^#{2,3} .*$", text, flags=re.MULTILINE) == [
        "## Changed (1)", "### a", "## Added (1)", "### fresh", "## Removed (1)", "### gone", "## Failed (1)",
        "### broken"]
    # a: the totals that moved, in the catalog's order (module FLOPs, operator FLOPs, DMAs), each with its change.
    a = section(text, "### a")
    assert "| Total | Before | After | Change |\n|:--|--:|--:|--:|\n| Parameters | 340 | 676 | +336 (+98.8%) |\n" \
           "| MACs | 320 | 640 | +320 (+100.0%) |\n| Module FLOPs |" in a
    assert a.index("| Module FLOPs |") < a.index("| Operator FLOPs |") < a.index("| DMAs |")
    assert "Layer calls: 2 changed, 0 added, 0 removed." in a
    assert "| Parameters | — | 51 | new |" in section(text, "### fresh")
    assert "| Parameters | 34 | — | removed |" in section(text, "### gone")
    # broken: the reason, and the old report against the last good one the new site kept (the same model).
    broken = section(text, "### broken")
    assert broken.startswith("The new analysis failed: `build stage, RuntimeError: the factory broke`.\n"
                             "After: its last good report, kept from an earlier build "
                             "(`reports/broken.last-good.json`).\n")
    assert "(`reports/broken.last-good.json`).\n\nEvery total unchanged.\n\n<details>" in broken
    # b is unchanged: counted and folded, never a section of its own.
    assert "<details><summary>Unchanged: 1 entry</summary>\n\nb\n\n</details>" in text
    assert "&gt;" not in text and "&lt;" not in text and "&amp;" not in text
    assert capsys.readouterr().out.startswith("Changed: 1 changed, 1 added")


def test_budgets_apply_to_every_entry_with_a_before_and_an_after(sites: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert diff(sites, "gate.md", "--fail-if", "macs>+5%") == 1
    text = (sites / "gate.md").read_text(encoding="utf-8")
    assert ("**Budgets not met**: 1 of 3 checked entries within budget.\n"
            "Entries: 1 changed, 1 added, 1 removed, 1 failed, 1 unchanged.\n") in text
    budgets = section(text, "## Budgets")
    assert budgets.startswith("- a: `macs>+5%` **exceeded**: MACs (module view): 320 → 640 (+320, +100.0%)\n"
                              "- broken: `macs>+5%` **cannot be checked**: the new analysis failed\n\n"
                              "1 other check met.\n")
    assert "Budgets: `macs>+5%` **exceeded**." in section(text, "### a")
    assert "&gt;" not in text
    errors = capsys.readouterr().err
    assert "budget exceeded: a: macs>+5%: MACs (module view): 320 → 640 (+320, +100.0%)" in errors
    assert "budget cannot be checked: broken: macs>+5%: the new analysis failed" in errors


def test_an_entry_prefix_limits_a_budget_to_that_entry(sites: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert diff(sites, "b.md", "--fail-if", "b:macs>+5%", "--fail-if", "a:parameters>1M") == 0
    text = (sites / "b.md").read_text(encoding="utf-8")
    assert text.startswith("# Model catalog: before / after\n\n**Budgets met**: 2 of 2 checked entries within budget.\n")
    assert "\n2 checks met.\n" in text and "**exceeded**" not in text
    assert "Budgets: `parameters>1M` met." in section(text, "### a")  # the entry is not named again in its section
    assert diff(sites, "x.md", "--fail-if", "zz:macs>1") == 2
    assert "--fail-if names no entry of either catalog: zz; the entries are a, b, broken, fresh, gone" in \
        capsys.readouterr().err
    assert not (sites / "x.md").exists()


def test_the_html_review_has_the_verdict_at_the_top(sites: Path) -> None:
    assert diff(sites, "review.html", "--fail-if", "macs>+5%") == 1
    html = (sites / "review.html").read_text(encoding="utf-8")
    header = html[html.index("<header>"):html.index("</header>")]
    assert ('<strong class="s-failed">Budgets not met</strong>: 1 of 3 checked entries within budget; entries: '
            "1 changed") in header
    assert '<h3 data-change="changed"><span class="mono">a</span>' in html
    assert '<td class="mono">macs&gt;+5%</td><td class="s-failed">exceeded</td>' in html
    assert html.count("<h3 data-change=") == 4  # b, unchanged, is folded
    assert "The new analysis failed: <code>build stage, RuntimeError: the factory broke</code>." in html


def test_the_last_good_report_of_a_failed_entry_can_still_be_diffed(sites: Path) -> None:
    assert diff(sites, "kept.md", old="old-site/reports/broken.json", new="new-site/reports/broken.last-good.json") == 0
    text = (sites / "kept.md").read_text(encoding="utf-8")
    assert text.startswith("# broken: before / after\n")  # the catalog's name of the run, not its model's class
    assert "**No changes**: every total unchanged" in text


def test_a_review_of_two_reports_of_a_site_is_titled_by_the_entry(sites: Path) -> None:
    assert diff(sites, "a.md", old="old-site/reports/a.json", new="new-site/reports/a.json") == 0
    text = (sites / "a.md").read_text(encoding="utf-8")
    assert text.startswith("# a: before / after\n")
    totals = section(text, "## Totals")  # the catalog's column order, in the two-report review too
    assert totals.index("| FLOPs | module view |") < totals.index("| FLOPs | operator view |") < \
        totals.index("| DMAs | module view |")


def test_report_folders_compare_by_file_name(sites: Path) -> None:
    (sites / CATALOG_INDEX).write_text("")  # not read: only the two folders named are
    assert diff(sites, "folders.md", old="old-site/reports", new="new-site/reports") == 0
    text = (sites / "folders.md").read_text(encoding="utf-8")
    # A folder of reports knows no failed runs: broken has no report in the new folder, so it reads as removed.
    assert text.startswith("# Catalog: before / after\n\n**Changed**: 1 changed, 1 added, 2 removed, 1 unchanged.\n")


def test_an_entry_that_changed_model_type_can_fail_the_command(sites: Path, capsys: pytest.CaptureFixture[str]
                                                                ) -> None:
    for side, report in (("types-old", "a"), ("types-new", "b")):  # a Sequential, then a Linear, named x
        (sites / side).mkdir()
        (sites / side / "x.json").write_bytes((sites / "new-site" / "reports" / f"{report}.json").read_bytes())
    assert diff(sites, "types.md", old="types-old", new="types-new") == 0
    changed = section((sites / "types.md").read_text(encoding="utf-8"), "### x")
    assert changed.startswith("**Another model type**: the deltas compare two models, not two versions of one.")
    assert diff(sites, "types.md", "--require-same-model", old="types-old", new="types-new") == 3
    assert "error: --require-same-model: these entries changed model type: x" in capsys.readouterr().err


@pytest.mark.parametrize("old, new, message", [
    ("old-site", "new-site/reports/a.json", "diff compares two reports or two catalogs"),
    ("old-site/models", "new-site", "models holds no JSON reports and no catalog.json: expected a built site"),
    ("old-site/search", "new-site", "search_index.json is not a TorchScan report (schema_version 1)"),
    ("old-site", "absent", "absent does not exist"),
])
def test_sides_that_cannot_be_compared_are_usage_errors(sites: Path, old: str, new: str, message: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert diff(sites, "bad.md", old=old, new=new) == 2
    assert message in capsys.readouterr().err


def test_an_entry_budget_is_refused_for_two_reports(sites: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert diff(sites, "r.md", "--fail-if", "a:macs>1", old="old-site/reports/a.json",
                new="new-site/reports/a.json") == 2
    assert "an ENTRY: prefix applies to a catalog diff" in capsys.readouterr().err


def test_the_catalog_ci_example_uses_commands_and_budgets_that_exist() -> None:
    workflow = documented_file("cli.md", ".github/workflows/catalog-cost.yml")
    budgets = re.findall(r'--fail-if "([^"]+)"', workflow)
    assert [(budget.metric, budget.limit, budget.relative) for budget in map(parse_budget, budgets)] == [
        ("macs", 5.0, True), ("parameters", 10.0, True)]
    assert "torchscan-report build models.toml --output base-site" in workflow
    assert "torchscan-report diff base-site head-site --output catalog-review.md" in workflow
    assert "--body-file catalog-review.md" in workflow


# -- a review with training steps and memory: the golden Markdown, and the HTML in a real browser -----------------

#: The Markdown review of `trained_sites` with two budgets. Regenerate after an intended change of the review (then
#: read the diff): UPDATE_GOLDEN=1 python -m pytest tests/report/test_catalog_diff.py -k golden
GOLDEN_REVIEW = Path(__file__).parents[1] / "data" / "golden_review" / "catalog-review.md"
#: What a pull-request comment's line may hold: the review is read raw as often as rendered.
LINE_LIMIT = 100
TRAINED = 'training = { optimizer = "sgd" }\n'
GOLDEN_BUDGETS = ("--fail-if", "macs>+5%", "--fail-if", "b:training_peak_bytes>+50%")
#: Where the browser tests also save their screenshots when set (they always go to the test's tmp_path).
SCREENSHOTS = os.environ.get("TORCHSCAN_SCREENSHOTS", "")


@pytest.fixture(scope="module")
def trained_sites(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two builds of the first fixture, every entry with its training step (the worker traces memory); the kept
    last good report of ``broken`` is of a wider model than the old one."""
    folder = tmp_path_factory.mktemp("trained")
    build_side(folder, "gold_old", OLD_MODELS, ("a", "b", "gone", "broken"), extra=TRAINED)
    build_side(folder, "gold_earlier", OLD_MODELS.replace("nn.Linear(16, 8)", "nn.Linear(16, 12)"), ("broken",),
               output="gold_new-site", extra=TRAINED)
    build_side(folder, "gold_new", NEW_MODELS, ("a", "b", "fresh", "broken"), extra=TRAINED)
    return folder


def test_the_markdown_review_matches_its_golden_file(trained_sites: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed, an added, a removed, a failed (against its last good report) and an unchanged entry, with the
    training step's and the memory totals: short lines, plain text, the golden file's bytes."""
    monkeypatch.chdir(trained_sites)  # relative sides: the review names them as given
    assert main(["diff", "gold_old-site", "gold_new-site", "--output", "review.md", *GOLDEN_BUDGETS]) == 1
    text = (trained_sites / "review.md").read_text(encoding="utf-8")
    long = [line for line in text.splitlines() if len(line) >= LINE_LIMIT]
    assert not long, long
    assert not re.search(r"&(?:gt|lt|amp|#\d+);", text)
    a = section(text, "### a")
    for total in ("Training step FLOPs", "Backward FLOPs", "Optimizer step FLOPs", "Forward peak", "Training peak"):
        assert f"| {total} |" in a
    broken = section(text, "### broken")  # old Linear(16, 8) against the kept Linear(16, 12)
    assert "| Parameters | 136 | 204 | +68 (+50.0%) |" in broken and "| Training peak |" in broken
    if os.environ.get("UPDATE_GOLDEN") == "1":
        GOLDEN_REVIEW.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN_REVIEW.write_text(text, encoding="utf-8")
    assert GOLDEN_REVIEW.is_file(), f"{GOLDEN_REVIEW} is missing: run UPDATE_GOLDEN=1 python -m pytest {__file__}"
    assert text == GOLDEN_REVIEW.read_text(encoding="utf-8"), "the review changed: read the diff, then regenerate " \
        "with UPDATE_GOLDEN=1 python -m pytest tests/report/test_catalog_diff.py -k golden"


#: Every table cell of the page whose text does not fit it: a word broken over two lines (a cell narrower than its
#: longest word) or a cell whose content runs past its edge. Folded cells (not rendered) are skipped.
NARROW_CELLS = r"""() => {
  const found = [];
  for (const cell of document.querySelectorAll('main td, main th, .md-content td, .md-content th')) {
    if (!cell.getClientRects().length) continue;
    const walker = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const word of node.data.matchAll(/\S+/g)) {
        const range = document.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        const lines = new Set([...range.getClientRects()].map(rect => Math.round(rect.bottom)));
        if (lines.size > 1) found.push(`broken word ${word[0]} in ${cell.textContent.trim().slice(0, 40)}`);
      }
    }
    if (cell.scrollWidth > cell.clientWidth + 1) found.push(`overflow in ${cell.textContent.trim().slice(0, 40)}`);
  }
  return found;
}"""
#: How far the page, and each table's scrolling box, is wider than what shows it.
OVERFLOW = r"""() => {
  const page = document.scrollingElement.scrollWidth - window.innerWidth;
  const boxes = [...document.querySelectorAll('main table, .md-content table')].map(table => {
    const box = table.closest('.md-typeset__scrollwrap') || table;
    const column = (table.closest('.md-content__inner') || table.closest('main')).getBoundingClientRect();
    return Math.max(box.scrollWidth - box.clientWidth, table.getBoundingClientRect().right - column.right);
  });
  return {page, boxes};
}"""


def test_the_readability_checks_find_a_broken_word_and_a_cut_column(tab: Any, tmp_path: Path) -> None:
    """The two failures of the old review: a cell too narrow for its words, a table running past the page."""
    page = tmp_path / "narrow.html"
    page.write_text('<main style="width:300px"><table><tr><td style="max-width:2em;overflow-wrap:anywhere">'
                    'exceeded</td><td style="white-space:nowrap">' + "x" * 120 + "</td></tr></table></main>",
                    encoding="utf-8")
    tab.open(page)
    assert tab.evaluate(NARROW_CELLS) == ["broken word exceeded in exceeded"]
    assert max(tab.evaluate(OVERFLOW)["boxes"]) > 1


def assert_readable_at_1280(tab: Any, page: Path, shot: Path) -> None:
    """No horizontal overflow (page or table), no cell narrower than its longest word, no script error."""
    tab.open(page)
    overflow = tab.evaluate(OVERFLOW)
    assert overflow["page"] <= 0 and overflow["boxes"] and max(overflow["boxes"]) <= 1, overflow
    assert tab.evaluate(NARROW_CELLS) == []
    assert tab.screenshot(shot, full_page=True).startswith(b"\x89PNG")
    if SCREENSHOTS:
        tab.screenshot(Path(SCREENSHOTS) / shot.name, full_page=True)
    assert tab.errors == []


def test_the_html_review_fits_1280_px_with_its_verdict_first(chromium: Any, trained_sites: Path, tmp_path: Path
                                                             ) -> None:
    """Our standalone HTML review, light and dark: the verdict first, then every entry's table within the page."""
    assert diff(trained_sites, "review.html", *GOLDEN_BUDGETS, old="gold_old-site", new="gold_new-site") == 1
    for scheme in ("light", "dark"):
        tab = new_tab(chromium, color_scheme=scheme)
        assert_readable_at_1280(tab, trained_sites / "review.html", tmp_path / f"catalog-review-html-{scheme}.png")
        verdict = tab.page.locator("p.verdict").bounding_box()
        assert verdict is not None and verdict["y"] < tab.page.locator("#budgets").bounding_box()["y"]
        tab.page.context.close()


STOCK_MKDOCS = """site_name: Stock docs
theme:
  name: material
  palette:
    - media: "(prefers-color-scheme: light)"
      scheme: default
      toggle: {{icon: material/weather-night, name: Dark}}
    - media: "(prefers-color-scheme: dark)"
      scheme: slate
      toggle: {{icon: material/weather-sunny, name: Light}}
markdown_extensions:
  - tables
  - toc:
      permalink: true
  - pymdownx.snippets:
      base_path: [{base}]
      check_paths: true
{extra}nav:
  - Review: index.md
"""
STOCK_PAGE = """# Cost review

The cost of this pull request, by torchscan-report.

--8<-- "review.md:budgets"

--8<-- "review.md:entries"
"""


def material_site(folder: Path, review: Path, extra: str = "") -> Path:
    """A Material site (with a table of contents) whose one page includes the review's sections by snippets."""
    (folder / "docs").mkdir(parents=True, exist_ok=True)
    (folder / "mkdocs.yml").write_text(STOCK_MKDOCS.format(base=review.parent.as_posix(), extra=extra),
                                       encoding="utf-8")
    (folder / "docs" / "index.md").write_text(STOCK_PAGE, encoding="utf-8")
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--quiet", "--strict", "--site-dir", "site"],
                   cwd=folder, check=True, capture_output=True)
    return folder / "site" / "index.html"


def test_the_review_embedded_in_a_material_page_fits_1280_px(chromium: Any, trained_sites: Path, tmp_path: Path
                                                             ) -> None:
    """The Markdown review's sections in a stock Material page, and in one styled like our generated site (its
    style sheet added), light and dark, beside a table of contents."""
    assert diff(trained_sites, "review.md", *GOLDEN_BUDGETS, old="gold_old-site", new="gold_new-site") == 1
    review = trained_sites / "review.md"
    ours = tmp_path / "ours" / "docs" / "assets"
    ours.mkdir(parents=True)  # material_site adds the page beside it
    (ours / "site.css").write_bytes((template_folder() / "site_assets" / "site.css").read_bytes())
    pages = {"stock": material_site(tmp_path / "stock", review),
             "our-site": material_site(tmp_path / "ours", review, "extra_css: [assets/site.css]\n")}
    for name, page in pages.items():
        for scheme in ("light", "dark"):
            tab = new_tab(chromium, color_scheme=scheme)
            assert_readable_at_1280(tab, page, tmp_path / f"catalog-review-{name}-{scheme}.png")
            assert tab.evaluate("document.querySelector('.md-sidebar--secondary').offsetWidth") > 0
            assert tab.count(".md-content table") == 4  # the failed checks are a list; four entries' totals
            tab.page.context.close()
