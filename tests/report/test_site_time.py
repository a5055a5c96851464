"""Time on the site: the registry keys ``hardware`` (a `torchscan.HARDWARE` name the catalog bounds the forward on, at
render time) and ``time`` (the forward measured per layer call by the worker), validated with the entry named; the
catalog's Time column (the bound over the measured latency) and the model page's time section (roofline chart, the
calls with the most time). Nothing here asserts on a measured speed: only that measured time is shown, named and never
enters a golden."""

from __future__ import annotations

from pathlib import Path

import pytest
from e2e import write_registry_folder
from torchscan_testing import golden_text

from torchscan.report.output.charts import report_charts
from torchscan.report.output.charts.roofline import roofline_chart
from torchscan.report.output.documents import catalog_markdown, entry_markdown
from torchscan.report.registry.parsing import RegistryError, load_registry
from torchscan.report.review.budgets import parse_budget
from torchscan.report.review.catalog_view import catalog_view
from torchscan.report.review.report_diff import diff_view
from torchscan.report.runs.worker import analyze_run
from torchscan.views.formatting import NUMBER, format_seconds
from torchscan.views.timing import time_view

MODELS = '''
from torch import nn


def mlp():
    return nn.Sequential(nn.Linear(16, 64), nn.GELU(), nn.Linear(64, 16))
'''

REGISTRY = '''
[[models]]
name = "bounded"
factory = "time_site_models:mlp"
input_shape = [8, 16]
device = "meta"
hardware = "A100 SXM 80GB"

[[models]]
name = "measured"
factory = "time_site_models:mlp"
input_shape = [8, 16]
time = { warmup = 0, repeats = 2 }
hardware = "H100 SXM"

[[models]]
name = "plain"
factory = "time_site_models:mlp"
input_shape = [8, 16]
'''


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    return write_registry_folder(tmp_path, "time_site_models", MODELS, REGISTRY)


def _problems(folder: Path, registry: str) -> list[str]:
    (folder / "models.toml").write_text(registry, encoding="utf-8")
    with pytest.raises(RegistryError) as caught:
        load_registry(folder / "models.toml")
    return caught.value.problems


def test_hardware_stays_out_of_the_job_and_time_reaches_it_only_when_set(folder: Path) -> None:
    bounded, measured, plain = (entry.runs[0] for entry in load_registry(folder / "models.toml").entries)
    assert (bounded.hardware, bounded.time, measured.hardware, measured.time, plain.time) == (
        "A100 SXM 80GB", None, "H100 SXM", {"warmup": 0, "repeats": 2}, None)
    jobs = [run.to_job(folder) for run in (bounded, measured, plain)]
    assert all("hardware" not in job for job in jobs)  # a render-time view: the report and its cache key ignore it
    assert [job.get("time") for job in jobs] == [None, {"warmup": 0, "repeats": 2}, None]
    (folder / "models.toml").write_text(REGISTRY.replace("time = { warmup = 0, repeats = 2 }", "time = true"),
                                        encoding="utf-8")
    assert load_registry(folder / "models.toml").entries[1].runs[0].to_job(folder)["time"] is True


def test_a_bad_hardware_name_is_named_with_its_entry_and_the_valid_names(folder: Path) -> None:
    problems = _problems(folder, REGISTRY.replace('hardware = "A100 SXM 80GB"', 'hardware = "A100 80GB"'))
    assert len(problems) == 1
    assert problems[0].startswith("models[0] (bounded): hardware: unknown device str \"A100 80GB\" (did you mean "
                                  "'A100 SXM 80GB'?); expected one of 'H100 SXM', 'A100 SXM 80GB', 'L4'")


def test_time_is_refused_where_nothing_runs_and_checked_elsewhere(folder: Path) -> None:
    meta = REGISTRY.replace('hardware = "A100 SXM 80GB"', 'time = true')
    assert _problems(folder, meta) == [
        ('models[0] (bounded): time: cannot measure an entry analyzed with device = "meta": no kernel runs, so there '
         'is no time; name hardware = "..." instead for the roofline bound on a device')]
    bad = REGISTRY.replace("time = { warmup = 0, repeats = 2 }", "time = { warmup = -1, repeat = 2 }")
    assert _problems(folder, bad) == [
        "models[1] (measured): time: repeat: unknown key (did you mean 'repeats'?); expected one of warmup, repeats",
        "models[1] (measured): time.warmup: expected an integer >= 0, got int -1"]
    assert _problems(folder, REGISTRY.replace("time = { warmup = 0, repeats = 2 }", 'time = "yes"')) == [
        ('models[1] (measured): time: expected true, false or a table such as { warmup = 1, repeats = 5 }, got str '
         '"yes"')]


def test_the_catalog_shows_the_bound_and_the_latency_and_the_page_its_roofline(folder: Path) -> None:
    registry = load_registry(folder / "models.toml")
    results = {run.stem: analyze_run(run.to_job(folder)) for run in registry.runs}
    measured_report = results["measured"]["report"]
    assert measured_report["time"]["repeats"] == 2
    assert "time" not in golden_text(measured_report)  # measured time never enters a golden or a digest
    catalog = catalog_view(registry, results, strict=False)
    bounded, measured, plain = (entry.primary for entry in catalog.entries)
    assert catalog.has_time and plain.bound.status == plain.latency.status == "not_requested"
    assert bounded.view.time.bound_by == "memory-bound" and bounded.latency.status == "not_requested"
    assert NUMBER.fullmatch(bounded.bound.text) and NUMBER.fullmatch(measured.latency.text)
    assert measured_report["time"]["device_name"] in measured.latency.note
    site = catalog_markdown(catalog, "", "../reports/", site=True)
    assert '">Time</span>' in site and "memory<br>A100 SXM 80GB</small>" in site
    spread = measured.view.time.spread_text.replace(" ", "\u00a0")
    assert f"{spread}<br>{measured_report['time']['device_name']}</small>" in site
    assert measured.view.time.spread_text.startswith("IQR ")
    charts = report_charts(bounded.view)
    roofline = next(chart for chart in charts if chart.key == "time-roofline")
    assert roofline.svg.startswith("<svg") and roofline.section == "time" and "A100 SXM 80GB" in roofline.summary
    page = entry_markdown(catalog.entries[1], "../reports/", site=True)
    assert "## Time" in page and "Measured (build machine)" in page and "efficiency compares a device" in page
    assert "## Time" not in entry_markdown(catalog.entries[2], "../reports/", site=True)
    here = time_view(measured_report, CPU)  # a CPU entry (as measure_hardware makes): achieved rates join the roofs
    assert here is not None and here.achieved_on_hardware and here.top_by == "measured"
    mine = roofline_chart(here)
    assert "Triangles are the rates achieved" in mine.summary and "achieved (measured)" in mine.svg


#: A CPU device of `torchscan.measure_hardware`'s shape, written by hand (measuring it would cost seconds).
CPU = {"name": "test CPU", "kind": "cpu", "peak_flops": {"float32": 1e11}, "memory_bandwidth": 2e10,
       "memory_bytes": None, "last_level_cache_bytes": None, "source": "measured", "notes": ""}


@pytest.mark.parametrize(("seconds", "text"), [(6.61e-3, "6.61ms"), (4.56e-5, "45.6µs"), (1.5, "1.5s"),
                                               (8.5e-7, "850ns")])
def test_durations_read_in_the_number_grammar(seconds: float, text: str) -> None:
    assert format_seconds(seconds) == text and NUMBER.fullmatch(text)


def _timed(report: dict, median: float, iqr: float, name: str = "Test CPU") -> dict:
    """``report`` with a synthetic ``time`` section: diffs and budgets read only its medians, spreads and machine."""
    time = {"device": "cpu", "device_name": name, "threads": 2, "repeats": 5, "warmup": 1,
            "measured": {"median": median, "iqr": iqr, "q1": median - iqr / 2, "q3": median + iqr / 2}}
    return {**report, "time": time}


def test_a_measured_change_within_the_spreads_is_noise_and_beyond_them_a_change(folder: Path) -> None:
    run = load_registry(folder / "models.toml").entries[2].runs[0]
    report = analyze_run(run.to_job(folder))["report"]
    budgets = [parse_budget("measured_seconds>+5%"), parse_budget("measured_seconds>1ms")]
    noise = diff_view(_timed(report, 10e-3, 1e-3), _timed(report, 11e-3, 0.5e-3), budgets=budgets)
    row = next(row for row in noise.totals if row.key == "measured_seconds")
    assert (row.change, row.delta) == ("unchanged", "+1.00ms (within the IQRs, 1.5ms: noise)")
    assert noise.unchanged and [budget.status for budget in noise.budgets] == ["met", "met"]
    slower = diff_view(_timed(report, 10e-3, 1e-3), _timed(report, 13e-3, 0.5e-3), budgets=budgets)
    assert [budget.status for budget in slower.budgets] == ["exceeded", "exceeded"]
    assert next(row for row in slower.totals if row.key == "measured_seconds").change == "increased"
    elsewhere = diff_view(_timed(report, 10e-3, 1e-3), _timed(report, 10e-3, 1e-3, "Other CPU"), budgets=budgets)
    assert [budget.status for budget in elsewhere.budgets] == ["unknown", "unknown"]
    assert not [row for row in diff_view(report, report).totals if row.key == "measured_seconds"]
    with pytest.raises(ValueError, match="does not apply to macs"):
        parse_budget("macs>2ms")
