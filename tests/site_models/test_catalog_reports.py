"""Every run of this project's own catalog (``site_models/models.toml``), analyzed in this process as a build's worker
analyzes it: the report is complete where the entry says ``strict``, and shares no list or dict between two places
(users edit reports; one edit must never change another record)."""

from __future__ import annotations

from pathlib import Path

import pytest
from torchscan_testing import assert_nothing_shared

from torchscan.report.registry import load_registry
from torchscan.report.worker import analyze_run

REGISTRY = load_registry(Path(__file__).resolve().parents[2] / "site_models" / "models.toml")
RUNS = [run for entry in REGISTRY.entries for run in entry.runs]


@pytest.mark.parametrize("run", RUNS, ids=[run.stem for run in RUNS])
def test_catalog_report_shares_nothing(run) -> None:
    result = analyze_run(run.to_job(REGISTRY.path.parent))
    assert result["status"] == "ok", result
    assert_nothing_shared(result["report"])


TRAINING_RUNS = [run for run in RUNS if run.training is not None]


def test_the_catalog_asks_for_the_promised_training_steps() -> None:
    assert {run.stem for run in TRAINING_RUNS} >= {"resnet50", "gpt2_small", "llama2_7b"}
    assert all(run.training == {"optimizer": "adamw"} for run in TRAINING_RUNS)


@pytest.mark.parametrize("run", TRAINING_RUNS, ids=[run.stem for run in TRAINING_RUNS])
def test_catalog_training_steps_are_complete(run) -> None:
    """Every number of the training section is exact, and the step adds up from its parts."""
    report = analyze_run(run.to_job(REGISTRY.path.parent))["report"]
    training = report["training"]
    assert training["diagnostics"] == []
    totals = training["totals"]
    assert {result["status"] for result in totals.values()} == {"complete"}
    assert totals["step"]["value"] == sum(totals[name]["value"]
                                          for name in ("forward", "loss_forward", "backward", "optimizer"))
    assert report["context"]["execution"]["mode"] == "eval"  # the catalog's forward columns stay crawl_module's
