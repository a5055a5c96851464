"""``training.parallel`` in ``models.toml``: a sharded plan, its world sizes and a device's memory, validated by the
registry (every mistake named by its key), analyzed by the worker (the plan at the declared world size and its
sizing across the others), and shown in the catalog (per-device peak, "fits on"), on the model page and in the
standalone report (a section and the chart of per-device memory against world size), in reviews and budgets.

One tiny model of two blocks is analyzed once for the module (three sharded steps of a few operators each).
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from e2e import write_registry_folder

from torchscan import compare_reports, fit_devices
from torchscan.parallel.fit import fit_summary
from torchscan.report.output.charts.device_memory import device_memory_chart
from torchscan.report.output.documents import catalog_markdown, entry_markdown, report_html
from torchscan.report.registry.parsing import Registry, RegistryError, load_registry
from torchscan.report.review.budgets import check_budgets, parse_budget
from torchscan.report.review.catalog_view import catalog_view
from torchscan.report.review.report_diff import diff_view
from torchscan.report.runs.result_cache import cache_key
from torchscan.report.runs.worker import analyze_run
from torchscan.schema import validate_report
from torchscan.views.parallel import NO_PLAN, parallel_view

MODELS = '''
import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int = 16):
        super().__init__()
        self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        return self.down(torch.relu(self.up(x)))


class Blocks(nn.Module):
    def __init__(self, width: int = 16, depth: int = 2):
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x
'''

PLAN = '''
[models.training]
optimizer = "adamw"

[models.training.parallel]
strategy = "fsdp"
world_size = 2
world_sizes = [1, 2, 4]
device_memory = "70kB"
'''

REGISTRY = '''
[[models]]
name = "sharded"
factory = "parallel_models:Blocks"
input_shape = [16]
{plan}

[[models]]
name = "single"
factory = "parallel_models:Blocks"
input_shape = [16]
training = {{ optimizer = "adamw" }}
'''


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A registry folder whose model module is importable by the worker (as in a build's worker process)."""
    return write_registry_folder(tmp_path_factory.mktemp("parallel"), "parallel_models", MODELS)


def registry(folder: Path, plan: str = PLAN) -> Registry:
    path = folder / "models.toml"
    path.write_text(REGISTRY.format(plan=plan), encoding="utf-8")
    return load_registry(path)


@pytest.fixture(scope="module")
def analyzed(folder: Path) -> tuple[Registry, dict[str, dict[str, Any]]]:
    """Both runs analyzed once: the sharded one (three world sizes) and one without a plan."""
    loaded = registry(folder)
    try:
        return loaded, {run.stem: analyze_run(run.to_job(loaded.folder)) for run in loaded.runs}
    finally:
        sys.path[:] = [entry for entry in sys.path if entry != str(loaded.folder)]
        sys.modules.pop("parallel_models", None)


def sharded_report(analyzed: tuple[Registry, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    return analyzed[1]["sharded"]["report"]


def test_registry_mistakes_in_the_plan_are_named_by_their_key(folder: Path) -> None:
    bad = '''
[models.training.parallel]
strategy = "fsdpp"
world_size = 0
world_sizes = [2, 2]
device_memory = "80 GBs"
headroom = 1.5
mixed_precision = { param_dtype = "bf17", reduce = "float32" }
units = "Block"
activation_checkpointing = "yes"
wrld = 3
'''
    with pytest.raises(RegistryError) as raised:
        registry(folder, bad)
    problems = "\n".join(raised.value.problems)
    where = "models[0] (sharded): training.parallel"
    for expected in (f"{where}: wrld: unknown key",
                     f"{where}.strategy: expected one of 'ddp', 'fsdp', 'fsdp_no_reshard', 'hsdp', got str \"fsdpp\"",
                     f"{where}.world_size: expected the declared world size, an integer >= 1",
                     f"{where}.world_sizes: expected a list of 1 to 12 distinct integers >= 1",
                     f"{where}.device_memory: expected a size such as \"16GB\"",
                     f"{where}.headroom: expected a fraction from 0 up to 1",
                     f"{where}.mixed_precision: reduce: unknown key (did you mean 'reduce_dtype'?)",
                     f"{where}.mixed_precision.param_dtype: expected a floating dtype name",
                     f"{where}.units: expected a non-empty list of module class names",
                     f"{where}.activation_checkpointing: expected true or false",
                     f"{where}: needs training.optimizer"):
        assert expected in problems, expected


def test_registry_checks_the_world_sizes_against_the_plan(folder: Path) -> None:
    missing = 'training = { optimizer = "sgd", parallel = { strategy = "hsdp", world_size = 8, world_sizes = [4, 6] } }'
    with pytest.raises(RegistryError) as raised:
        registry(folder, missing)
    problems = "\n".join(raised.value.problems)
    assert "training.parallel.world_sizes: must include world_size (8)" in problems
    assert "training.parallel.shard_group_size: missing; expected for strategy 'hsdp'" in problems
    assert "training.parallel.device_memory: missing; expected one device's memory" in problems
    uneven = ('training = { optimizer = "sgd", parallel = { strategy = "hsdp", world_size = 8, world_sizes = [6, 8], '
              'shard_group_size = 4, device_memory = "80GB" } }')
    with pytest.raises(RegistryError, match="shard_group_size: 4 does not divide world size 6"):
        registry(folder, uneven)


def test_the_plan_travels_with_the_job_and_changes_the_cache_key(folder: Path) -> None:
    sharded, single = (run.to_job(folder) for run in registry(folder).runs)
    assert sharded["training"] == {"optimizer": "adamw", "parallel": {
        "strategy": "fsdp", "world_size": 2, "world_sizes": [1, 2, 4], "device_memory": 70_000, "headroom": 0.1}}
    assert single["training"] == {"optimizer": "adamw"}  # an entry without a plan keeps its job (and cache key)
    assert cache_key(sharded, folder, "2") != cache_key({**sharded, "training": single["training"]}, folder, "2")


def test_the_worker_sizes_the_plan_as_fit_devices_does(analyzed: tuple[Registry, dict[str, dict[str, Any]]]
                                                       ) -> None:
    report = sharded_report(analyzed)
    validate_report(report)
    parallel = report["training"]["parallel"]
    assert parallel["plan"]["world_size"] == 2
    fit = parallel["fit"]
    assert [point["world_size"] for point in fit["points"]] == [1, 2, 4]
    assert fit["points"][1]["per_device_peak"] == parallel["per_device"]["peak"]  # the declared step, reused
    assert fit["smallest_world_size"] == 2 and fit["reason"] is None and fit["usable"] == 63_000
    sys.path.insert(0, str(analyzed[0].folder))
    try:
        from parallel_models import Blocks  # type: ignore[import-not-found]

        expected = fit_devices(Blocks(), (16,), parallel={"strategy": "fsdp"}, world_sizes=[1, 2, 4],
                               device_memory=70_000)
    finally:
        sys.path.remove(str(analyzed[0].folder))
        sys.modules.pop("parallel_models", None)
    assert fit == expected


def test_the_catalog_shows_the_per_device_peak_and_where_it_fits(analyzed: tuple[Registry, dict[str, dict[str, Any]]]
                                                                ) -> None:
    loaded, results = analyzed
    catalog = catalog_view(loaded, results, strict=False)
    sharded, single = catalog.runs
    peak = sharded_report(analyzed)["training"]["parallel"]["per_device"]["peak"]["value"]
    assert sharded.per_device_peak.sort == peak and sharded.per_device_peak.status == "complete"
    assert "one device of fsdp over 2 devices" in sharded.per_device_peak.note
    assert sharded.fits_on.text == "2 × 70kB" and sharded.fits_on.sort == 2
    assert single.per_device_peak is NO_PLAN and single.fits_on is NO_PLAN
    page = catalog_markdown(catalog, "models/", "reports/", site=True)
    assert ">Per-device peak (fits on)</span> |" in page
    assert f"{sharded.per_device_peak.text}</span><br><small title=" in page and ">fits on 2\u00a0×\u00a070kB</small>" in page
    assert catalog.has_parallel


def test_fits_on_names_the_largest_size_tried_when_none_fits(analyzed: tuple[Registry, dict[str, dict[str, Any]]]
                                                            ) -> None:
    report = copy.deepcopy(sharded_report(analyzed))
    points = report["training"]["parallel"]["fit"]["points"]
    sections = {point["world_size"]: {"per_device": {"peak": point["per_device_peak"], "at_peak": point["at_peak"],
                                                     "phase_at_peak": point["phase_at_peak"]}} for point in points}
    report["training"]["parallel"]["fit"] = fit_summary(sections, "40kB")
    sizing = parallel_view(report).sizing
    assert sizing is not None and sizing.smallest is None
    assert sizing.fits_on.text == "none of 1–4"
    assert sizing.fits_on.note.startswith("even at world size 4 one device holds")
    assert [point.fits for point in sizing.points] == ["too large"] * 3


def test_the_model_page_and_the_report_show_the_sharded_step(analyzed: tuple[Registry, dict[str, dict[str, Any]]]
                                                             ) -> None:
    loaded, results = analyzed
    entry = catalog_view(loaded, results, strict=False).entries[0]
    view = entry.primary.view
    assert view is not None and view.parallel is not None
    page = entry_markdown(entry, "reports/", site=True)
    assert "## Sharded training" in page and "[Sharded training](#sharded-training)" in page
    assert "Plan:\nfsdp over 2 devices; FSDP2 full sharding, ZeRO-3-like" in page
    assert ("On devices of 70kB (63kB usable, 10% headroom), the smallest analyzed world size that holds the step "
            "is 2.") in page
    assert page.count('aria-label="Per-device memory against world size"') == 1
    html = report_html(view)
    assert '<section id="parallel">' in html and '<a href="#parallel">Sharded training</a>' in html
    assert html.count('aria-label="Per-device memory against world size"') == 1
    assert "| Unsharded parameters in flight |" in page and "| All-gather |" in page


def test_reviews_and_budgets_compare_the_per_device_peak(analyzed: tuple[Registry, dict[str, dict[str, Any]]]
                                                          ) -> None:
    before = sharded_report(analyzed)
    after = copy.deepcopy(before)
    peak = after["training"]["parallel"]["per_device"]["peak"]
    peak["value"] = peak["known_value"] = 2 * peak["value"]
    after["training"]["parallel"]["plan"]["world_size"] = 1
    budgets = [parse_budget(text) for text in ("per_device_peak_bytes>+50%", "per_device_peak_bytes>1MB")]
    view = diff_view(before, after, budgets=budgets)
    row = next(row for row in view.totals if row.key == "per_device_peak_bytes")
    assert row.label == "Per-device peak" and row.percent == "+100.0%"
    assert [check.status for check in view.budgets] == ["exceeded", "met"]
    warning = ("The sharded training steps follow different plans: before fsdp over 2 devices, after fsdp over 1 "
               "device. The per-device peaks compare the two plans.")
    assert view.warnings == [warning]
    plain = analyzed[1]["single"]["report"]
    assert [check.status for check in check_budgets(budgets[:1], compare_reports(plain, before))] == ["unknown"]


def test_the_chart_draws_one_column_per_world_size_and_the_device_lines(
        analyzed: tuple[Registry, dict[str, dict[str, Any]]]) -> None:
    report = copy.deepcopy(sharded_report(analyzed))
    point = report["training"]["parallel"]["fit"]["points"][2]
    point["at_peak"]["temporaries"] = {**point["at_peak"]["temporaries"], "status": "unavailable", "value": None,
                                       "known_value": None}
    sizing = parallel_view(report).sizing
    assert sizing is not None
    chart = device_memory_chart(sizing)
    assert [row[0] for row in chart.rows] == ["1", "2 (declared)", "4"]
    assert [row[2] for row in chart.rows] == ["too large", "fits", "fits"]
    assert chart.notes == ["n/a (not drawn, never zero): Temporaries at world size 4"]
    labels = re.findall(r"<text[^>]*>([^<]*)</text>", chart.svg)
    assert {"70kB device memory", "63kB usable", "1", "2 (declared)", "4", "world size (devices)"} <= set(labels)
    assert [label for label in labels if label in ("All-gather buffers", "Unsharded gradients")] == [
        "All-gather buffers", "Unsharded gradients"]  # drawn at some world size: in the legend once each
    assert "Buffers and other persistent tensors" not in labels  # zero everywhere: no legend entry
