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
