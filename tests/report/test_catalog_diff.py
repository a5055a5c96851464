"""``torchscan-report diff OLD NEW`` on two catalogs: one verdict line, one row per entry (added, removed, changed,
unchanged, failed), budgets per entry, and the documented exit statuses."""

from __future__ import annotations

import io
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from browser import new_tab
from torchscan_testing import documented_file

from torchscan.report.build import BuildOptions, build
from torchscan.report.cli import main
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


def build_side(folder: Path, side: str, source: str, entries: tuple[str, ...], output: str = "") -> Path:
    """A built site of ``entries``, defined in ``<side>_models.py`` (a module per side: this process imports once),
    at ``output`` (default ``<side>-site``)."""
    (folder / f"{side}_models.py").write_text(source, encoding="utf-8")
    registry = folder / f"{side}.toml"
    registry.write_text("".join(f'[[models]]\nname = "{name}"\nfactory = "{side}_models:{name}"\ninput_shape = [16]\n\n'
                                for name in entries), encoding="utf-8")
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


def test_one_verdict_line_and_a_row_per_entry(sites: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert diff(sites, "review.md") == 0  # no budget: nothing to fail
    text = (sites / "review.md").read_text(encoding="utf-8")
    assert text.startswith("# Catalog: before / after\n\n**Changed**: 1 changed, 1 added, 1 removed, 1 failed, "
                           "1 unchanged\n")
    header = "| Entry | Change | Parameters | MACs | Module FLOPs | DMAs | Operator FLOPs |"
    # Then the memory columns when the reports traced memory, and the budgets.
    assert header + " Budgets |" in text or header + " Forward peak | Activations | Budgets |" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and "Entry" not in line]
    assert [row.split(" | ")[0:2] for row in rows] == [["| a", "changed"], ["| b", "unchanged"],
                                                      ["| fresh", "added"], ["| broken", "**failed**"],
                                                      ["| gone", "**removed**"]]
    assert rows[0].startswith("| a | changed | 676<br>+336 (+98.8%) | 640<br>+320 (+100.0%) |")
    # b is unchanged: no change under any cell (memory cells, when traced, sit between the FLOPs and the budgets).
    assert rows[1].startswith("| b | unchanged | 68 | 64 | 132 | 88 | 132 |") and rows[1].endswith(" — |")
    assert "<br>" not in rows[1]
    assert "| fresh | added | 51<br>new | 48<br>new |" in text and "| gone | **removed** | 34<br>removed |" in text
    assert ("- **broken**: build stage, RuntimeError: the factory broke (last good report, from an earlier build: "
            "reports/broken.last-good.json)") in text
    assert capsys.readouterr().out.startswith("Changed: 1 changed, 1 added")


def test_budgets_apply_to_every_entry_with_a_before_and_an_after(sites: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert diff(sites, "gate.md", "--fail-if", "macs>+5%") == 1
    text = (sites / "gate.md").read_text(encoding="utf-8")
    assert ("**Budgets not met**: 1 of 3 checked entries within budget (a: exceeded: macs&gt;+5%, broken: cannot be "
            "checked: macs&gt;+5%); 1 changed") in text
    assert "| a | macs&gt;+5% | **exceeded** | MACs (module view): 320 → 640 (+320, +100.0%) |" in text
    assert "| b | macs&gt;+5% |" not in text and "\n1 other check met.\n" in text  # only failures are listed
    errors = capsys.readouterr().err
    assert "budget exceeded: a: macs>+5%: MACs (module view): 320 → 640 (+320, +100.0%)" in errors
    assert "budget cannot be checked: broken: macs>+5%: the new analysis failed" in errors


def test_an_entry_prefix_limits_a_budget_to_that_entry(sites: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert diff(sites, "b.md", "--fail-if", "b:macs>+5%", "--fail-if", "a:parameters>1M") == 0
    text = (sites / "b.md").read_text(encoding="utf-8")
    assert text.startswith("# Catalog: before / after\n\n**Budgets met**: 2 of 2 checked entries within budget; ")
    assert "\n2 checks met.\n" in text and "| Entry | Budget |" not in text
    assert diff(sites, "x.md", "--fail-if", "zz:macs>1") == 2
    assert "--fail-if names no entry of either catalog: zz; the entries are a, b, broken, fresh, gone" in \
        capsys.readouterr().err
    assert not (sites / "x.md").exists()


def test_the_html_review_has_the_verdict_at_the_top(sites: Path) -> None:
    assert diff(sites, "review.html", "--fail-if", "macs>+5%") == 1
    html = (sites / "review.html").read_text(encoding="utf-8")
    header = html[html.index("<header>"):html.index("</header>")]
    assert '<strong class="s-failed">Budgets not met</strong>: 1 of 3 checked entries' in header
    assert '<tr data-change="changed"><td class="mono">a</td>' in html
    assert '<td class="budgets s-failed">exceeded: macs&gt;+5%</td>' in html
    assert html.count("<tr data-change=") == 5
    assert "<li><code>broken</code>: build stage, RuntimeError: the factory broke (last good report" in html


def test_the_last_good_report_of_a_failed_entry_can_still_be_diffed(sites: Path) -> None:
    assert diff(sites, "kept.md", old="old-site/reports/broken.json", new="new-site/reports/broken.last-good.json") == 0
    assert "**No changes**: every total unchanged" in (sites / "kept.md").read_text(encoding="utf-8")


def test_report_folders_compare_by_file_name(sites: Path) -> None:
    (sites / CATALOG_INDEX).write_text("")  # not read: only the two folders named are
    assert diff(sites, "folders.md", old="old-site/reports", new="new-site/reports") == 0
    text = (sites / "folders.md").read_text(encoding="utf-8")
    # A folder of reports knows no failed runs: broken has no report in the new folder, so it reads as removed.
    assert "**Changed**: 1 changed, 1 added, 2 removed, 1 unchanged" in text


def test_an_entry_that_changed_model_type_can_fail_the_command(sites: Path, capsys: pytest.CaptureFixture[str]
                                                                ) -> None:
    for side, report in (("types-old", "a"), ("types-new", "b")):  # a Sequential, then a Linear, named x
        (sites / side).mkdir()
        (sites / side / "x.json").write_bytes((sites / "new-site" / "reports" / f"{report}.json").read_bytes())
    assert diff(sites, "types.md", old="types-old", new="types-new") == 0
    assert "| x | changed (another model type) |" in (sites / "types.md").read_text(encoding="utf-8")
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


def test_the_html_review_fits_1280_px_with_its_verdict_first(chromium: Any, sites: Path) -> None:
    """In a real browser, light and dark: the verdict is the first thing under the title, no table is wider than
    the page's main column, and the page raises no script error."""
    assert diff(sites, "browser.html", "--fail-if", "macs>+5%") == 1
    for scheme in ("light", "dark"):
        tab = new_tab(chromium, color_scheme=scheme)
        tab.open(sites / "browser.html")
        verdict = tab.page.locator("p.verdict").bounding_box()
        assert verdict is not None and verdict["y"] < tab.page.locator("#entries").bounding_box()["y"]
        overflow = tab.evaluate("() => [...document.querySelectorAll('main table')].map(table => "
                                "table.getBoundingClientRect().right - document.querySelector('main')"
                                ".getBoundingClientRect().right)")
        assert overflow and max(overflow) <= 0.5, overflow
        assert tab.errors == []
        tab.page.context.close()
