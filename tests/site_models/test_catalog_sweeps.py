"""The sweeps of this project's catalog, run as a build runs them: Llama-2-7B's prefill and decode step (meta) have
exact curves in the context length, a formula evaluated at a size between the analyzed points gives what a direct
analysis at that size gives, and the KV cache is 2 × layers × batch × KV heads × head dim × L × bytes."""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from torchscan.curves.cost_curve import evaluate_piece
from torchscan.curves.schema import validate_cost_curve
from torchscan.report.registry.jobs import InputSpec
from torchscan.report.registry.parsing import Entry, load_registry
from torchscan.report.review.sweep_record import sweep_record
from torchscan.report.runs.worker import analyze_run

REGISTRY = load_registry(Path(__file__).resolve().parents[2] / "site_models" / "models.toml")
ENTRIES = {entry.name: entry for entry in REGISTRY.entries}
#: Llama-2-7B: 32 layers, 32 KV heads of 128 dimensions, float32 on meta.
LAYERS, KV_HEADS, HEAD_DIM, BYTES = 32, 32, 128, 4


def test_the_catalog_sweeps_what_it_promises() -> None:
    sweeps = {name: (entry.sweep.name, entry.sweep.values[0], entry.sweep.values[-1], entry.device)
              for name, entry in ENTRIES.items() if entry.sweep is not None}
    assert sweeps == {"resnet50": ("size", 128, 512, "cpu"), "gpt2_small": ("seq_len", 128, 1024, "cpu"),
                      "llama2_7b": ("seq_len", 128, 4096, "meta"), "hf_llama2_7b": ("seq_len", 128, 32768, "meta"),
                      "hf_llama2_7b_decode": ("context", 128, 32768, "meta")}
    assert all(size % 32 == 0 for size in ENTRIES["resnet50"].sweep.values)  # one residue class of its stride
    # No hand-written size variants are left.
    assert not [run.stem for run in REGISTRY.runs if run.variant is not None and run.size is None]


def analyzed(run: Any) -> dict[str, Any]:
    result = analyze_run(run.to_job(REGISTRY.folder))
    assert result["status"] == "ok", result
    return result


@cache
def record(name: str) -> dict[str, Any]:
    entry = ENTRIES[name]
    return sweep_record(entry, {run.stem: analyzed(run) for run in entry.runs})


def direct(entry: Entry, size: int) -> dict[str, Any]:
    """The report of one more point, analyzed as the build would analyze it."""
    run = entry.runs[0]
    key = next(key for key, value in entry.runs[0].inputs.kwargs.items() if value == run.size)
    inputs = InputSpec(callable=run.inputs.callable, kwargs={**run.inputs.kwargs, key: size})
    return analyzed(replace(run, inputs=inputs, stem=f"{entry.name}.extra"))["report"]


@pytest.mark.parametrize(("name", "degree"), [("hf_llama2_7b", 2), ("hf_llama2_7b_decode", 1)])
def test_llama_curves_are_exact_and_hold_between_the_points(name: str, degree: int) -> None:
    curves = record(name)["curves"]
    between = 4096
    assert between not in record(name)["sizes"]
    report = direct(ENTRIES[name], between)
    for metric in ("macs", "module_flops", "operator_flops"):
        curve = curves[metric]
        assert curve["kind"] == "polynomial" and len(curve["verified_at"]) >= 2, curve
        (piece,) = curve["pieces"]
        assert len(piece["coefficients"]) == degree + 1 and piece["coefficients"][-1] != "0"
        assert evaluate_piece(piece, between) == report["totals"][metric]["value"]


def test_the_decode_sweep_states_the_kv_cache_of_every_context() -> None:
    sweep = record("hf_llama2_7b_decode")
    for point in sweep["points"]:
        assert point["kv_cache"]["bytes"]["value"] == 2 * LAYERS * 1 * KV_HEADS * HEAD_DIM * point["size"] * BYTES
    validate_cost_curve({key: sweep[key] for key in ("schema_version", "sizes", "points", "curves")})
    assert sweep["curves"]["kv_cache"]["pieces"][0]["coefficients"] == ["0", str(2 * LAYERS * KV_HEADS * HEAD_DIM
                                                                               * BYTES)]
