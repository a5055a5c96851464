"""Memory on the site (issue 31, item 7): catalog columns for the forward peak, activations and the training peak;
the model page's memory section with its chart; memory rows in reviews; memory budgets for ``--fail-if``.

The reports carry memory sections in the engine's contract (``crawl_module(..., memory=True)``), made by
``torchscan_testing.with_memory`` from real analyses of the registry's runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e import write_registry_folder
from torchscan_testing import with_memory

from torchscan import compare_reports
from torchscan.report.output.charts.memory_breakdown import memory_chart, memory_charts
from torchscan.report.output.documents import catalog_markdown, entry_markdown, render_diff_file, render_report_file
from torchscan.report.registry.parsing import Registry, load_registry
from torchscan.report.review.budgets import parse_budget
from torchscan.report.review.catalog_diff import EntryRow, catalog_diff_view
from torchscan.report.review.catalog_index import Catalog, CatalogRun
from torchscan.report.review.catalog_view import NO_MEMORY, catalog_view
from torchscan.report.review.report_diff import DeltaRow, diff_view
from torchscan.report.runs.worker import analyze_run
from torchscan.views import report_view
from torchscan.views.formatting import format_bytes

MODELS = '''
from torch import nn


def mlp(width: int = 16):
    return nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 4))
'''

REGISTRY = '''
[[models]]
name = "trained"
factory = "memory_models:mlp"
input_shape = [8]
training = { optimizer = "adamw" }

[[models]]
name = "plain"
factory = "memory_models:mlp"
input_shape = [8]
'''


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    folder = tmp_path_factory.mktemp("memory")
    return load_registry(write_registry_folder(folder, "memory_models", MODELS, REGISTRY) / "models.toml")


@pytest.fixture(scope="module")
def reports(registry: Registry) -> dict[str, dict]:
    """Each run's report as the worker wrote it, then with memory sections."""
    return {run.stem: with_memory(analyze_run(run.to_job(registry.folder))["report"]) for run in registry.runs}


def without_memory(report: dict) -> dict:
    """``report`` as an analysis that traced no memory writes it: no memory sections, no memory totals."""
    copy = {key: value for key, value in report.items() if key != "memory"}
    copy["totals"] = {key: value for key, value in report["totals"].items()
                      if key not in ("forward_peak_bytes", "activations")}
    if "training" in report:
        totals = {key: value for key, value in report["training"]["totals"].items() if key != "training_peak_bytes"}
        copy["training"] = {**{key: value for key, value in report["training"].items() if key != "memory"},
                            "totals": totals}
    return copy


def results(reports: dict[str, dict]) -> dict[str, dict]:
    return {stem: {"status": "ok", "report": report} for stem, report in reports.items()}


def test_the_worker_traces_memory_for_the_forward_and_the_training_step(registry: Registry) -> None:
    """The worker asks the engine for memory (``memory=True``): the forward's section and totals in the report, the
    step's section in ``training.memory`` and its peak in the training totals."""
    found = {run.stem: analyze_run(run.to_job(registry.folder))["report"] for run in registry.runs}
    trained, plain = found["trained"], found["plain"]
    assert trained["memory"]["method"] == plain["memory"]["method"] == "traced_live_tensor_bytes"
    assert trained["totals"]["forward_peak_bytes"] == trained["memory"]["peak_above_start"]
    assert trained["totals"]["activations"]["unit"] == "activations"
    assert trained["training"]["memory"]["phase_at_peak"] in ("forward", "backward", "optimizer")
    assert trained["training"]["totals"]["training_peak_bytes"] == trained["training"]["memory"]["peak"]
    assert "training" not in plain
    catalog = catalog_view(registry, results(found), strict=False)
    assert catalog.has_memory and catalog.runs[0].training_peak.status == "complete"


def test_the_catalog_shows_memory_columns_with_their_meaning(registry: Registry, reports: dict[str, dict]) -> None:
    catalog = catalog_view(registry, results(reports), strict=False)
    trained, plain = catalog.runs
    assert catalog.has_memory
    assert trained.forward_peak.text == format_bytes(reports["trained"]["memory"]["peak_above_start"]["value"])
    assert trained.training_peak.status == "complete" and plain.training_peak.text == "—"
    page = catalog_markdown(catalog, "models/", "reports/", site=True)
    header = next(line for line in page.splitlines() if line.startswith("| Model |"))
    assert ">Forward peak</span>" in header and ">Activations</span>" in header and ">Training peak (steady state)</span>" in header
    assert "parameters, buffers and inputs excluded" in header  # the tooltip says what the peak leaves out
    assert "kB = 10³, MB = 10⁶, GB = 10⁹ (never KiB)" in page
    row = next(line for line in page.splitlines() if line.startswith("| [trained]"))
    assert f">{trained.forward_peak.text}</span>" in row and f">{trained.training_peak.text}</span>" in row


def test_a_catalog_without_memory_keeps_its_columns(registry: Registry, reports: dict[str, dict]) -> None:
    catalog = catalog_view(registry, results({stem: without_memory(report) for stem, report in reports.items()}),
                           strict=False)
    assert not catalog.has_memory and catalog.runs[0].forward_peak is NO_MEMORY
    assert "Forward peak" not in catalog_markdown(catalog, "models/", "reports/", site=True)


def test_the_model_page_has_a_memory_section_with_its_chart(registry: Registry, reports: dict[str, dict]) -> None:
    catalog = catalog_view(registry, results(reports), strict=False)
    trained = catalog.entries[0]
    page = entry_markdown(trained, "../reports/", site=True)
    memory = page[page.index("## Memory"):page.index("## Where the cost goes")]
    assert "[Memory](#memory)" in page
    # The breakdown and the two call rankings sit in the memory section, never under "Where the cost goes".
    assert memory.count("<svg") == 3 and "Memory at the peak" in memory
    assert "Layer calls with the largest outputs" in memory and "Layer calls that saved the most for backward" in memory
    assert "Traced on `cpu`, attention kernel assumed: none (no attention operator ran)" in memory
    assert "Memory at the peak" not in page[page.index("## Where the cost goes"):]
    # The portable snippet, drawn without charts, lists the same calls as tables.
    portable = entry_markdown(trained, "../reports/", charts=[])
    assert "| Layer call | Type | Output bytes |" in portable and "| Layer call | Type | Saved for backward |" in portable


def test_the_memory_chart_stacks_each_peak_by_category(reports: dict[str, dict]) -> None:
    view = report_view(reports["trained"])
    assert [chart.key for chart in memory_charts(view.memory)] == ["memory", "memory-outputs", "memory-saved"]
    chart = memory_chart(view.memory)
    assert chart.key == "memory" and chart.svg.startswith("<svg")
    peaks = [row[0] for row in chart.rows]
    steady, first = "Training step peak, steady state (optimizer)", "First training step peak (backward)"
    assert list(dict.fromkeys(peaks)) == ["Forward peak", steady, first]  # the first step peaks lower, apart
    assert (steady, "Optimizer state") in {row[:2] for row in chart.rows}
    assert (first, "Optimizer state", "0B") in {row[:3] for row in chart.rows}
    assert "Gradients" in chart.svg and "Created during the forward" in chart.svg  # the legend names each category
    assert steady in chart.svg and first in chart.svg  # bar labels drawn whole
    assert "at the training step's peak, steady state (" in chart.summary and "the first step's peak" in chart.summary


def test_the_legend_leaves_out_categories_of_zero_bytes_at_every_peak(reports: dict[str, dict]) -> None:
    report = reports["plain"]  # an MLP: no buffers
    assert report["memory"]["at_peak"]["buffers"]["value"] == 0
    chart = memory_chart(report_view(report).memory)
    assert ("Forward peak", "Buffers", "0B") in {row[:3] for row in chart.rows}  # the numbers keep the row
    assert "Buffers" not in chart.svg and "Parameters" in chart.svg
    with_buffers = {**report, "memory": {**report["memory"], "at_peak": {**report["memory"]["at_peak"]}}}
    with_buffers["memory"]["at_peak"]["buffers"] = {**report["memory"]["at_peak"]["buffers"], "value": 64,
                                                    "known_value": 64}
    assert "Buffers" in memory_chart(report_view(with_buffers).memory).svg
    trained = memory_chart(report_view(reports["trained"]).memory)  # one legend entry for the two bars' parameters
    assert trained.svg.count("Parameters") == 1 and trained.svg.count("Optimizer state") == 1


def test_a_lower_bound_category_is_hatched_and_an_unknown_one_listed(reports: dict[str, dict]) -> None:
    report = {**reports["plain"], "memory": {**reports["plain"]["memory"]}}
    at_peak = {**report["memory"]["at_peak"]}
    at_peak["inputs"] = {**at_peak["inputs"], "status": "unavailable", "value": None, "known_value": None}
    at_peak["activations"] = {**at_peak["activations"], "status": "partial", "value": None}
    report["memory"]["at_peak"] = at_peak
    chart = memory_chart(report_view(report).memory)
    assert chart.notes == ["n/a (not drawn, never zero): Inputs at the forward peak"]
    assert "≥ lower bound (partial)" in chart.svg


def test_the_standalone_report_shows_memory_and_a_report_without_it_does_not(reports: dict[str, dict]) -> None:
    page = render_report_file(reports["trained"], "html")
    assert '<section id="memory">' in page and '<a href="#memory">Memory</a>' in page
    assert page.index('<section id="memory">') < page.index('<section id="charts">')
    assert '<section id="memory">' not in render_report_file(without_memory(reports["plain"]), "html")


def grown(report: dict, factor: int) -> dict:
    """``report`` with every forward-peak byte figure and the training peak multiplied by ``factor``."""
    copy = {**report, "totals": {**report["totals"]}}
    for name in ("forward_peak_bytes",):
        result = copy["totals"][name]
        copy["totals"][name] = {**result, "value": result["value"] * factor, "known_value": result["value"] * factor}
    if "training" in report:
        totals = {**report["training"]["totals"]}
        peak = totals["training_peak_bytes"]
        totals["training_peak_bytes"] = {**peak, "value": peak["value"] * factor, "known_value": peak["value"] * factor}
        copy["training"] = {**report["training"], "totals": totals}
    return copy


def test_compare_reports_compares_the_memory_totals(reports: dict[str, dict]) -> None:
    before = reports["trained"]
    comparison = compare_reports(before, grown(before, 2))
    peak = before["totals"]["forward_peak_bytes"]["value"]
    assert comparison["totals"]["forward_peak_bytes"]["delta"] == {"status": "complete", "value": peak,
                                                                   "unit": "bytes"}
    assert comparison["totals"]["activations"]["delta"]["value"] == 0
    training = before["training"]["totals"]["training_peak_bytes"]["value"]
    assert comparison["totals"]["training_peak_bytes"]["delta"]["value"] == training
    plain = without_memory(before)
    assert not {"forward_peak_bytes", "training_peak_bytes"} & set(compare_reports(plain, plain)["totals"])
    one_sided = compare_reports(plain, before)["totals"]["forward_peak_bytes"]
    assert one_sided["before"] is None and one_sided["delta"]["status"] == "unavailable"


def test_a_review_has_memory_rows_written_in_bytes(reports: dict[str, dict]) -> None:
    before = reports["trained"]
    rows = {row.key: row for row in diff_view(before, grown(before, 2)).totals if row.view == "memory"}
    assert list(rows) == ["forward_peak_bytes", "activations", "training_peak_bytes"]
    peak = before["totals"]["forward_peak_bytes"]["value"]
    assert rows["forward_peak_bytes"].delta == f"+{peak}B" and rows["forward_peak_bytes"].percent == "+100.0%"
    assert rows["activations"].change == "unchanged"
    page = render_diff_file(before, grown(before, 2), "md")
    assert f"| Forward peak | memory | {peak}B | {2 * peak}B | +{peak}B |" in page.replace("\\", "")


def test_a_review_against_a_report_without_memory_says_so(reports: dict[str, dict]) -> None:
    after = reports["plain"]
    before = without_memory(after)
    row = next(row for row in diff_view(before, after).totals if row.key == "forward_peak_bytes")
    assert row.before.text == "—" and row.delta == "unknown (a side did not trace memory)"


@pytest.mark.parametrize(("budget", "status"), [
    ("forward_peak_bytes>+50%", "exceeded"), ("forward_peak_bytes>+100%", "met"),
    ("training_peak_bytes>1MB", "met"), ("training_peak_bytes>100B", "exceeded"),
    ("activations>0", "met"),
])
def test_memory_budgets_check_the_memory_totals(reports: dict[str, dict], budget: str, status: str) -> None:
    before = reports["trained"]
    view = diff_view(before, grown(before, 2), budgets=[parse_budget(budget)])
    assert [row.status for row in view.budgets] == [status]
    if "training_peak" in budget:
        assert "B → " in view.budgets[0].observed  # byte totals are written in bytes


def test_a_memory_budget_without_memory_cannot_be_checked(reports: dict[str, dict]) -> None:
    plain = without_memory(reports["plain"])
    view = diff_view(plain, plain, budgets=[parse_budget("forward_peak_bytes>+5%")])
    assert [row.status for row in view.budgets] == ["unknown"]


def test_byte_suffixes_read_as_the_views_write_bytes() -> None:
    assert parse_budget("training_peak_bytes<80GB").limit == 80e9
    assert parse_budget("forward_peak_bytes>1.5kB").limit == parse_budget("forward_peak_bytes>1.5KB").limit == 1500
    assert parse_budget("forward_peak_bytes>512B").limit == 512
    with pytest.raises(ValueError, match="'MB' is a byte suffix; module_flops is not counted in bytes"):
        parse_budget("module_flops>1MB")


def test_the_catalog_review_shows_memory_rows_only_when_an_entry_traced_memory(reports: dict[str, dict]) -> None:
    def catalog(side: dict[str, dict]) -> Catalog:
        return Catalog(Path("side"), tuple(CatalogRun(stem, stem, report) for stem, report in side.items()))

    def memory_rows(row: EntryRow) -> dict[str, DeltaRow]:
        return {total.name: total for total in row.totals if total.view == "memory"}

    view = catalog_diff_view(catalog(reports), catalog({stem: grown(report, 2) for stem, report in reports.items()}))
    trained, plain = view.rows
    assert list(memory_rows(trained)) == ["Forward peak", "Activations", "Training peak"]
    assert memory_rows(trained)["Forward peak"].percent == "+100.0%"
    assert "Forward peak" in {total.name for total in trained.moved}  # shown, as a total that moved
    assert list(memory_rows(plain)) == ["Forward peak", "Activations"]  # the plain entry has no training step
    bare = {stem: without_memory(report) for stem, report in reports.items()}
    assert not any(memory_rows(row) for row in catalog_diff_view(catalog(bare), catalog(bare)).rows)


# -- a built site with memory, in a real browser ------------------------------------------------------------------

SITE_MODELS = '''
from torch import nn


def convnet(width: int = 16):
    return nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
                         nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2 * width, 10))


def mlp(width: int = 16):
    return nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 4))
'''

SITE_REGISTRY = '''
[catalog]
title = "Memory catalog"

[[models]]
name = "convnet"
factory = "memory_site_models:convnet"
input_shape = [3, 32, 32]
training = { optimizer = "adamw" }

[[models.variants]]
name = "w16"

[[models.variants]]
name = "w32"
kwargs = { width = 32 }

[[models]]
name = "mlp"
factory = "memory_site_models:mlp"
input_shape = [8]
'''


@pytest.fixture(scope="module")
def memory_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The output folder of `memory_site`, built once for this module's browser tests."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        return memory_site(tmp_path_factory.mktemp("memory-site"), monkeypatch)


def memory_site(folder: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site built in this process, each report given memory sections as the engine's ``memory=True`` adds them."""
    import io
    from concurrent.futures import ThreadPoolExecutor

    from torchscan.report.build import BuildOptions, build
    from torchscan.report.runs import worker
    from torchscan.report.runs.progress import Progress

    analyze = worker.analyze_model
    monkeypatch.setattr(worker, "analyze_model", lambda *args: with_memory(analyze(*args)))
    write_registry_folder(folder, "memory_site_models", SITE_MODELS, SITE_REGISTRY)
    build(load_registry(folder / "models.toml"), BuildOptions(output=folder / "out", jobs=1, timeout=120),
          Progress(io.StringIO()), executor_factory=lambda jobs, timeout: ThreadPoolExecutor(max_workers=1))
    return folder / "out"


def test_a_built_site_with_memory_fits_1280_px_light_and_dark(chromium: object, memory_build: Path) -> None:
    """The catalog with its memory columns, a model page and a standalone report with the memory section: no table
    wider than its column at 1280 px, in light and dark, and no script error."""
    from browser import new_tab
    from test_reading_width import TABLES, assert_fits

    output = memory_build
    pages = (output / "index.html", output / "models" / "convnet.html", output / "reports" / "convnet.w32.html")
    for scheme in ("light", "dark"):
        tab = new_tab(chromium, color_scheme=scheme)
        for page in pages:
            tab.open(page)
            assert tab.count("#memory") or page.name == "index.html"
            for table in tab.evaluate(TABLES):
                if table["client"]:
                    assert_fits(table, f"{page.name} ({scheme})")
        assert tab.errors == []
        tab.page.context.close()
    assert ">Training peak (steady state)</span>" in (output / "index.html").read_text(encoding="utf-8")


def test_a_catalog_review_with_memory_rows_fits_1280_px(chromium: object, memory_build: Path,
                                                       tmp_path: Path) -> None:
    """The review of two catalogs with memory: three more rows per entry, and a long memory budget's check wraps
    inside the page instead of running past it."""
    import json

    from browser import new_tab

    from torchscan.report.output.documents import catalog_diff_document

    reports = {path.stem: json.loads(path.read_text(encoding="utf-8"))
               for path in sorted((memory_build / "reports").glob("*.json"))}
    old = Catalog(Path("old"), tuple(CatalogRun(stem, stem, report) for stem, report in reports.items()))
    new = Catalog(Path("new"), tuple(CatalogRun(stem, stem, grown(report, 2)) for stem, report in reports.items()))
    view = catalog_diff_view(old, new, [parse_budget("training_peak_bytes>+50%")])
    assert [total.name for total in view.rows[0].moved][-2:] == ["Forward peak", "Training peak"]
    page = tmp_path / "review.html"
    page.write_text(catalog_diff_document(view, "html"), encoding="utf-8")
    for scheme in ("light", "dark"):
        tab = new_tab(chromium, color_scheme=scheme)
        tab.open(page)
        overflow = tab.evaluate("() => [...document.querySelectorAll('main table')].map(table => Math.max(...[...table"
                                ".querySelectorAll('td, th')].map(cell => cell.getBoundingClientRect().right)) - "
                                "document.querySelector('main').getBoundingClientRect().right)")
        assert overflow and max(overflow) <= 0.5, overflow
        assert tab.errors == []
        tab.page.context.close()
