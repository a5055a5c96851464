"""A swept entry in a built site: one catalog row at its declared point with the sweep's range, a model page with
the cost against the quantity and its exact formulas, the versioned sweep JSON beside the reports, and budgets
that check the declared point unless they name another."""

from __future__ import annotations

import io
import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from browser import Tab
from e2e import write_models

from torchscan.curves.cost_curve import CURVE_SCHEMA_VERSION, fit_curves
from torchscan.curves.schema import validate_cost_curve
from torchscan.report.build import BuildOptions, BuildResult, build
from torchscan.report.cli import main
from torchscan.report.registry.parsing import load_registry
from torchscan.report.review.budgets import parse_budget
from torchscan.report.review.catalog_diff import catalog_diff_view
from torchscan.report.review.catalog_index import read_catalog
from torchscan.report.runs.progress import Progress

REGISTRY = """
[[models]]
name = "tiny"
factory = "e2e_models:tiny"
kwargs = { width = WIDTH }
input_shape = [3, "{size}", "{size}"]
sweep = { name = "size", from = 8, to = 24, step = 4, default = 12 }

[[models]]
name = "tagger"
factory = "e2e_models:tagger"
inputs = "e2e_models:tagger_inputs"
inputs_kwargs = { length = "{seq_len}" }
sweep = { name = "seq_len", values = [4, 8, 16, 32, 64] }
"""


def in_process(jobs: int, timeout: float) -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=jobs)


def build_side(folder: Path, name: str, width: int) -> BuildResult:
    registry = folder / f"{name}.toml"
    registry.write_text(REGISTRY.replace("WIDTH", str(width)), encoding="utf-8")
    return build(load_registry(registry), BuildOptions(output=folder / name, jobs=1, timeout=60),
                 Progress(io.StringIO()), executor_factory=in_process)


@pytest.fixture(scope="module")
def sites(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two builds of the same sweeps, the tiny CNN 25% wider in the second (tagger's 64-token point fails: its
    embedding has 50 positions)."""
    folder = tmp_path_factory.mktemp("sweeps")
    write_models(folder)
    build_side(folder, "old", 4)
    result = build_side(folder, "new", 5)
    assert [run.stem for run in result.catalog.failed_runs] == ["tagger.seq_len-64"]
    return folder


def test_the_catalog_has_one_row_per_swept_entry_at_its_declared_point(sites: Path) -> None:
    catalog = (sites / "new" / "markdown" / "catalog.md").read_text()
    rows = [line for line in catalog.splitlines() if line.startswith("| [")]
    assert len(rows) == 2
    assert rows[0].startswith("| [tiny](tiny.md) · size 12 · sweep 8–24 (5 points) |")
    assert "[HTML](../reports/tiny.html)" in rows[0]
    assert rows[1].startswith("| [tagger](tagger.md) · seq_len 4 · sweep 4–64 (5 points) |")
    # Every point is still a run of the build: the failed one is listed, and counted.
    assert "**tagger.seq_len-64** failed" in catalog and "10 runs: 9 complete, 0 partial, 1 failed" in catalog


def test_the_sweep_json_is_versioned_and_holds_the_fitted_curves(sites: Path) -> None:
    record = json.loads((sites / "new" / "reports" / "tagger.sweep.json").read_text())
    assert record["schema_version"] == CURVE_SCHEMA_VERSION
    assert (record["entry"], record["quantity"], record["default"]) == ("tagger", "seq_len", 4)
    assert record["sizes"] == [4, 8, 16, 32]
    assert record["stems"] == {"4": "tagger", "8": "tagger.seq_len-8", "16": "tagger.seq_len-16",
                               "32": "tagger.seq_len-32"}
    # Its four cost-curve fields are a valid cost curve, as torchscan.cost_curve returns it.
    validate_cost_curve({key: record[key] for key in ("schema_version", "sizes", "points", "curves")})
    assert record["missing"][0]["size"] == 64 and "IndexError" in record["missing"][0]["reason"]
    assert record["curves"] == fit_curves(record["sizes"], [point["totals"] for point in record["points"]])
    assert record["curves"]["macs"]["kind"] == "polynomial"
    index = json.loads((sites / "new" / "catalog.json").read_text())
    point = next(run for run in index["runs"] if run["stem"] == "tiny.size-20")
    assert point["sweep"] == {"quantity": "size", "size": 20, "default": 12, "json": "reports/tiny.sweep.json"}


def test_the_model_page_shows_cost_against_the_quantity(sites: Path) -> None:
    page = (sites / "new" / "models" / "tiny.html").read_text()
    assert "Cost against size" in page and 'aria-label="Cost against size"' in page
    assert "MACs = 135·S² − 540·S + 540" in page  # the exact formula, in the caption and the curves table
    assert "S = 8, 12, …, 24 (step 4)" in page
    tagger = (sites / "new" / "markdown" / "tagger.md").read_text()
    assert "- Not analyzed, seq_len 64: analysis stage, IndexError" in tagger


def test_budgets_check_the_declared_point_unless_they_name_another(sites: Path) -> None:
    old, new = read_catalog(sites / "old"), read_catalog(sites / "new")
    view = catalog_diff_view(old, new, [parse_budget("macs>+10%")])
    checked = [row.stem for row in view.rows if row.budgets]
    assert checked == ["tiny", "tagger"] and view.failing[0].stem == "tiny"
    named = catalog_diff_view(old, new, [parse_budget("tiny@20:macs>+10%")])
    assert [row.stem for row in named.rows if row.budgets] == ["tiny.size-20"]
    with pytest.raises(ValueError, match="'tiny' has no sweep point 21; its points are 8, 12, 16, 20, 24"):
        catalog_diff_view(old, new, [parse_budget("tiny@21:macs>+10%")])


def test_the_diff_command_takes_a_point_budget(sites: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["diff", str(sites / "old"), str(sites / "new"), "--output", str(sites / "review.md"),
                 "--fail-if", "tagger@16:macs>0"])
    assert code == 0
    assert "1 of 1 checked entry within budget" in capsys.readouterr().out


def test_the_site_catalog_names_the_point_and_range_on_a_second_line(sites: Path) -> None:
    home = (sites / "new" / "index.html").read_text()
    assert '<a href="models/tiny.html">tiny</a><br><small>size 12 · sweep 8–24 (5 points)</small>' in home


def test_a_swept_model_page_in_a_browser(sites: Path, tab: Tab) -> None:
    """At 1280 px: both tables fit their column, and the chart is drawn with a point per analyzed size."""
    tab.open(sites / "new" / "models" / "tiny.html")
    charts = tab.evaluate("() => Array.from(document.querySelectorAll('figure.torchscan-chart svg'))"
                          ".map(svg => [svg.getAttribute('aria-label'), svg.getBoundingClientRect().width])")
    assert [label for label, width in charts if label.startswith("Cost against")] == ["Cost against size"]
    assert all(width > 300 for _, width in charts)
    overflow = tab.evaluate("""() => Array.from(document.querySelectorAll('.md-content table')).filter(table => {
      const box = table.closest('.md-typeset__scrollwrap') || table.parentElement;
      return box.scrollWidth > box.clientWidth + 1; }).length""")
    assert overflow == 0
