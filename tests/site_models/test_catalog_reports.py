"""Every run of this project's own catalog (``site_models/models.toml``), analyzed in this process as a build's worker
analyzes it: the report is complete where the entry says ``strict``, shares no list or dict between two places
(users edit reports; one edit must never change another record), and is byte for byte the committed one.

The catalog's reports are too large to commit whole (the benchmark models' are, in ``tests/test_golden_reports.py``):
``tests/data/golden_catalog_digests.json`` holds the SHA-256 of each report's golden text. After an intended change
of the output, regenerate it and say which numbers moved and why (compare the ``reports/*.json`` of two site builds):

    UPDATE_GOLDEN=1 python -m pytest tests/site_models/test_catalog_reports.py
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from torchscan_testing import UPDATE_GOLDEN, assert_nothing_shared, golden_text

from torchscan.report.registry.parsing import load_registry
from torchscan.report.runs.worker import analyze_run

REGISTRY = load_registry(Path(__file__).resolve().parents[2] / "site_models" / "models.toml")
RUNS = [run for entry in REGISTRY.entries for run in entry.runs]
DIGESTS = Path(__file__).resolve().parents[1] / "data" / "golden_catalog_digests.json"


@pytest.mark.parametrize("run", RUNS, ids=[run.stem for run in RUNS])
def test_catalog_report_shares_nothing_and_is_golden(run) -> None:
    result = analyze_run(run.to_job(REGISTRY.path.parent))
    assert result["status"] == "ok", result
    assert_nothing_shared(result["report"])
    digest = hashlib.sha256(golden_text(result["report"]).encode()).hexdigest()
    if UPDATE_GOLDEN:
        _record_digest(run.stem, digest)
    golden = json.loads(DIGESTS.read_text(encoding="utf-8"))
    assert golden.get(run.stem) == digest, (
        f"the report of {run.stem} differs from the committed one: if the change is intended, run "
        f"UPDATE_GOLDEN=1 python -m pytest tests/site_models/{Path(__file__).name} and say what moved")


def _record_digest(stem: str, digest: str) -> None:
    golden = json.loads(DIGESTS.read_text(encoding="utf-8")) if DIGESTS.exists() else {}
    golden[stem] = digest
    DIGESTS.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n", encoding="utf-8")


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
