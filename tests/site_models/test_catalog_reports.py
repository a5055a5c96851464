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
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from torchscan_testing import UPDATE_GOLDEN, assert_nothing_shared, golden_text

from torchscan.report.registry.parsing import load_registry
from torchscan.report.runs.worker import analyze_run

REGISTRY = load_registry(Path(__file__).resolve().parents[2] / "site_models" / "models.toml")
RUNS = [run for entry in REGISTRY.entries for run in entry.runs]
DIGESTS = Path(__file__).resolve().parents[1] / "data" / "golden_catalog_digests.json"


@cache
def training_result(stem: str) -> dict[str, Any]:
    """The result of a run with a training step, analyzed once for the tests of this module (the slowest runs of the
    catalog: a training step, and for llama2_7b its sharded step at two world sizes); the tests only read it."""
    run = next(run for run in RUNS if run.stem == stem)
    return analyze_run(run.to_job(REGISTRY.path.parent))


def analyzed(run) -> dict[str, Any]:
    """The run's result as a build's worker returns it (a training run's shared by this module's tests)."""
    return training_result(run.stem) if run.training is not None else analyze_run(run.to_job(REGISTRY.path.parent))


@pytest.mark.parametrize("run", RUNS, ids=[run.stem for run in RUNS])
def test_catalog_report_shares_nothing_and_is_golden(run) -> None:
    result = analyzed(run)
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
    assert all(run.training is not None and run.training["optimizer"] == "adamw" for run in TRAINING_RUNS)
    sharded = {run.stem: run.training["parallel"] for run in TRAINING_RUNS if "parallel" in run.training}
    assert sharded == {"llama2_7b": {"strategy": "fsdp", "world_size": 8, "world_sizes": [2, 8],
                                     "device_memory": 80 * 10**9, "headroom": 0.1,
                                     "mixed_precision": {"param_dtype": "bfloat16", "reduce_dtype": "float32"}}}


def test_the_7b_entry_is_sized_across_world_sizes() -> None:
    """llama2_7b's sharded plan at 2 and 8 devices of 80 GB: each device holds a 1/N shard of the fp32 parameters,
    gradients and AdamW's two moments (16 bytes per parameter in all; AdamW adds a float32 step count per tensor), so
    the per-device peak falls with N; one device (the single-device training step) is too small, two are enough."""
    training = training_result("llama2_7b")["report"]["training"]
    parallel = training["parallel"]
    fit = parallel["fit"]
    assert [point["world_size"] for point in fit["points"]] == [2, 8]
    assert fit["points"][-1]["per_device_peak"] == parallel["per_device"]["peak"]  # the declared point is reused
    parameters, tensors = 6_738_415_616, 32 * 9 + 3  # 9 per decoder layer, the embedding, final norm and head
    for point in fit["points"]:
        at_peak = point["at_peak"]
        assert point["per_device_peak"]["status"] == "complete"
        shard = at_peak["sharded_parameters"]["value"]
        assert shard >= parameters * 4 // point["world_size"]  # fp32 shards (FSDP2 pads dimension 0)
        assert at_peak["optimizer_state"]["value"] == 2 * shard + 4 * tensors  # two moments, and a step per tensor
    peaks = [point["per_device_peak"]["value"] for point in fit["points"]]
    assert peaks == sorted(peaks, reverse=True)
    assert training["totals"]["training_peak_bytes"]["value"] > fit["usable"] >= peaks[0]
    assert fit["smallest_world_size"] == 2


@pytest.mark.parametrize("run", TRAINING_RUNS, ids=[run.stem for run in TRAINING_RUNS])
def test_catalog_training_steps_are_complete(run) -> None:
    """Every number of the training section is exact, and the step adds up from its parts."""
    report = analyzed(run)["report"]
    training = report["training"]
    assert training["diagnostics"] == []
    totals = training["totals"]
    assert {result["status"] for result in totals.values()} == {"complete"}
    assert totals["step"]["value"] == sum(totals[name]["value"]
                                          for name in ("forward", "loss_forward", "backward", "optimizer"))
    assert report["context"]["execution"]["mode"] == "eval"  # the catalog's forward columns stay crawl_module's
