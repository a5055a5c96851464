"""``training = { optimizer = ... }`` in ``models.toml``: validated by the registry, part of the run's job (and so of
its cache key), analyzed by the worker with ``crawl_training_step``, and shown in the catalog, on the model page and
in before/after reviews."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from torchscan import crawl_module, crawl_training_step
from torchscan.report.cli import main
from torchscan.report.output.documents import catalog_markdown, entry_markdown, render_diff_file, render_report_file
from torchscan.report.registry.parsing import Registry, RegistryError, load_registry
from torchscan.report.review.catalog_view import catalog_view, summarize_run
from torchscan.report.review.report_diff import diff_view
from torchscan.report.runs.result_cache import cache_key
from torchscan.report.runs.worker import analyze_run
from torchscan.schema import validate_report
from torchscan.views import metric_cell
from torchscan.views.training import devices_text

MODELS = '''
from torch import nn


def mlp(width: int = 16):
    return nn.Sequential(nn.Linear(8, width), nn.Dropout(0.1), nn.ReLU(), nn.Linear(width, 4))
'''

REGISTRY = '''
[[models]]
name = "trained"
factory = "training_models:mlp"
input_shape = [8]
{training}

[[models]]
name = "forward_only"
factory = "training_models:mlp"
input_shape = [8]
'''


@pytest.fixture()
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A registry folder of its own; its model module is imported afresh (as in a new worker process)."""
    (tmp_path / "training_models.py").write_text(MODELS, encoding="utf-8")
    monkeypatch.delitem(sys.modules, "training_models", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    return tmp_path


def registry(folder: Path, training: str = 'training = { optimizer = "adamw" }') -> Registry:
    path = folder / "models.toml"
    path.write_text(REGISTRY.format(training=training), encoding="utf-8")
    return load_registry(path)


def results(loaded: Registry) -> dict[str, dict]:
    return {run.stem: analyze_run(run.to_job(loaded.folder)) for run in loaded.runs}


def test_the_training_key_travels_with_the_job_and_changes_the_cache_key(folder: Path) -> None:
    trained, plain = (run.to_job(folder) for run in registry(folder).runs)
    assert trained["training"] == {"optimizer": "adamw"}
    assert "training" not in plain  # entries without the key keep their jobs (and cache keys) as before
    without_optimizer = registry(folder, "training = {}").runs[0].to_job(folder)
    assert without_optimizer["training"] == {}
    keys = {cache_key(job, folder, "2") for job in (trained, plain, without_optimizer)}
    assert len(keys) == 3


def test_a_variant_asks_for_its_own_training_step(folder: Path) -> None:
    path = folder / "models.toml"
    path.write_text('[[models]]\nname = "m"\nfactory = "training_models:mlp"\ninput_shape = [8]\n'
                    'training = { optimizer = "sgd" }\n'
                    '[[models.variants]]\nname = "small"\n'
                    '[[models.variants]]\nname = "forward"\ntraining = false\n'
                    '[[models.variants]]\nname = "adam"\ntraining = { optimizer = "adam" }\n', encoding="utf-8")
    assert [run.training for run in load_registry(path).runs] == [{"optimizer": "sgd"}, None, {"optimizer": "adam"}]


@pytest.mark.parametrize(("training", "problem"), [
    ('training = { optimizer = "lamb" }', 'models[0] (trained): training.optimizer: expected one of sgd, adam, adamw'),
    ('training = { optimiser = "adam" }', "models[0] (trained): training: optimiser: unknown key"),
    ('training = "adamw"', 'models[0] (trained): training: expected a table such as { optimizer = "adamw" }'),
])
def test_a_wrong_training_value_names_the_key(folder: Path, training: str, problem: str) -> None:
    with pytest.raises(RegistryError) as raised:
        registry(folder, training)
    assert any(line.startswith(problem) for line in raised.value.problems), raised.value.problems


def test_check_validates_the_training_key(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (folder / "models.toml").write_text(REGISTRY.format(training='training = { optimizer = "lamb" }'),
                                        encoding="utf-8")
    assert main(["check", str(folder / "models.toml")]) == 2  # an invalid registry
    assert "training.optimizer: expected one of sgd, adam, adamw" in capsys.readouterr().err


def test_the_worker_keeps_the_eval_forward_and_adds_the_training_step(folder: Path) -> None:
    loaded = registry(folder)
    found = results(loaded)
    report = found["trained"]["report"]
    validate_report(report)
    assert "training" not in found["forward_only"]["report"]
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.1), nn.ReLU(), nn.Linear(16, 4))
    # The report's forward is crawl_module's (eval): the catalog's forward columns mean the same for every entry.
    assert report["totals"] == crawl_module(model, (8,), memory=True)["totals"]
    assert report["context"]["execution"]["mode"] == "eval"
    step = crawl_training_step(model, (8,), optimizer="adamw", memory=True)
    assert report["training"] == step["training"]  # its memory section (training.memory) included
    assert report["training"]["optimizer"]["name"] == "adamw"
    # Dropout runs in train mode only: the step's forward differs from the eval one.
    assert report["training"]["totals"]["forward"] != report["totals"]["operator_flops"]


def test_the_catalog_and_the_model_page_show_the_training_step(folder: Path) -> None:
    loaded = registry(folder)
    catalog = catalog_view(loaded, results(loaded), strict=False)
    trained, plain = catalog.runs
    step = trained.report["training"]["totals"]["step"]
    assert step["status"] == "complete"
    assert trained.training_flops.sort == step["value"] and plain.training_flops.text == "—"
    site = catalog_markdown(catalog, "", "../reports/", site=True)
    assert "| Training FLOPs / step |" in site
    assert f">{trained.training_flops.text}</span>" in site
    portable = catalog_markdown(catalog, "", "../reports/")
    assert "Training FLOPs" not in portable  # the snippet keeps its six columns
    page = entry_markdown(catalog.entries[0], "../reports/", site=True)
    assert "## Training step" in page and "| of which: Layer calls |" in page
    assert page.index("| Backward |") < page.index("| of which: Layer calls |") < page.index("| Optimizer step |")
    assert "| Optimizer step |" in page and "adamw (torch.optim.adamw.AdamW, single_tensor)" in page
    assert "; precision: float32; loss:" in page  # CPU's default implementation, one dtype throughout
    assert "counted by `crawl_training_step` as it runs on the cpu device: optimizer" in page
    top = trained.training.top_layers if trained.training else []
    assert "Layer calls with the most backward FLOPs" in page  # the site draws the ranking ...
    assert f"<td>{top[0].label}</td><td>{top[0].type}</td><td>{top[0].backward.text}</td>" in page
    portable = entry_markdown(catalog.entries[0], "../reports/")
    assert f"| {top[0].label} | {top[0].type} |" in portable  # ... the portable snippet lists it as a table
    assert "<figure" not in portable.partition("## Training step")[2].partition("<!-- --8<-- [end:training")[0]
    assert "## Training step" not in entry_markdown(catalog.entries[1], "../reports/", site=True)


def test_without_training_the_catalog_has_no_training_column(folder: Path) -> None:
    loaded = registry(folder, "")
    catalog = catalog_view(loaded, results(loaded), strict=False)
    assert not catalog.has_training
    assert "Training FLOPs" not in catalog_markdown(catalog, "", "../reports/", site=True)


def test_top_layers_rank_calls_by_their_own_backward_flops(folder: Path) -> None:
    loaded = registry(folder)
    trained = catalog_view(loaded, results(loaded), strict=False).runs[0]
    assert trained.training is not None
    backward = [layer.backward.sort or 0 for layer in trained.training.top_layers]
    assert backward == sorted(backward, reverse=True) and backward[0] > 0
    assert "(root)" not in [layer.label for layer in trained.training.top_layers]  # the root creates no node


def test_a_review_compares_the_training_totals_when_both_sides_have_them() -> None:
    def step(width: int) -> dict:
        model = nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 4))
        return crawl_training_step(model, (8,), optimizer="sgd")

    before, after = step(16), step(32)
    rows = {row.label: row for row in diff_view(before, after).totals if row.view == "training step"}
    assert list(rows) == ["Training forward", "Backward", "Optimizer step", "Training step"]
    moved = after["training"]["totals"]["step"]["value"] - before["training"]["totals"]["step"]["value"]
    assert moved > 0 and rows["Training step"].change == "increased"
    assert rows["Training step"].delta == diff_view(before, after).totals[-1].delta
    assert "Training step" in render_diff_file(before, after, "md")
    forward_only = crawl_module(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), (8,))
    assert all(row.view != "training step" for row in diff_view(forward_only, after).totals)


def test_a_review_leaves_out_the_optimizer_when_neither_step_ran_one() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
    report = crawl_training_step(model, (8,))
    labels = [row.label for row in diff_view(report, report).totals if row.view == "training step"]
    assert labels == ["Training forward", "Backward", "Training step"]


def test_an_incomplete_training_step_makes_the_run_partial_and_fails_a_strict_entry(folder: Path) -> None:
    loaded = registry(folder)
    run = loaded.runs[0]
    report = analyze_run(run.to_job(loaded.folder))["report"]
    for name in ("backward", "step"):  # as a backward operator without a formula would leave them
        result = report["training"]["totals"][name]
        result.update(status="partial", value=None)
    lenient = summarize_run(run, {"status": "ok", "report": report}, strict=False)
    assert lenient.status == "partial" and lenient.training_flops.text.startswith("≥")
    assert not lenient.failed
    strict = summarize_run(run, {"status": "ok", "report": report}, strict=True)
    assert strict.failed and strict.status == "incomplete (strict)"
    assert strict.incomplete == ["training.totals.backward", "training.totals.step"]


def test_the_standalone_report_shows_the_training_step() -> None:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    step = crawl_training_step(model, (8,), optimizer="adam")
    page = render_report_file(step, "html")
    assert '<section id="training">' in page and '<a href="#training">Training step</a>' in page
    step_cell = metric_cell(step["training"]["totals"]["step"])
    assert f">{step_cell.text}</td>" in page and "adam (torch.optim.adam.Adam, single_tensor)" in page
    assert "precision: float32;" in page
    assert "as it runs on the cpu device:" in page and "kernels of" not in page
    assert devices_text(["cpu", "cuda", "meta"]) == "the cpu, cuda and meta devices"
    assert '<section id="training">' not in render_report_file(crawl_module(model, (8,)), "html")
