"""The roofline joined to measured time (`torchscan.timing.efficiency`): efficiency per call and operator, the
model's achieved FLOP/s, MFU and bandwidth, computed by hand from the report's own numbers."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torchscan import crawl_module, crawl_training_step, roofline

ONE = {"warmup": 0, "repeats": 1}
CPU = {"name": "a test CPU", "kind": "cpu", "peak_flops": {"float32": 2e9}, "memory_bandwidth": 1e9,
       "memory_bytes": None, "last_level_cache_bytes": None, "source": "test", "notes": ""}


def _model() -> nn.Module:
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))


def test_a_forward_s_calls_operators_and_total_are_set_against_their_bounds():
    report = crawl_module(_model(), args=(torch.randn(16, 32),), time=ONE)
    result = roofline(report, CPU)
    times = {(row["path"], row["call_index"]): row for row in report["time"]["layers"]}
    for layer in result["layers"]:
        inclusive, measured = layer["inclusive"], times[layer["path"], layer["call_index"]]["inclusive"]["median"]
        assert inclusive["measured_seconds"] == measured
        expected = inclusive["bound"]["value"] / measured if measured else None
        assert inclusive["efficiency"] == expected
    addmm = next(row for row in result["operators"] if row["operator"] == "aten.addmm")
    operator_time = next(row["time"]["median"] for row in report["time"]["operators"]
                         if row["operator"] == "aten.addmm")
    assert addmm["measured_seconds"] == operator_time

    efficiency, seconds = result["efficiency"], report["time"]["measured"]["median"]
    flops, nbytes = report["totals"]["operator_flops"]["value"], report["totals"]["operator_bytes"]["value"]
    assert efficiency["describes"] == "forward" and efficiency["measured_seconds"] == seconds
    assert efficiency["achieved_flops_per_second"] == pytest.approx(flops / seconds)
    assert efficiency["flops_utilization"] == pytest.approx(flops / seconds / 2e9)
    assert efficiency["achieved_bandwidth"] == pytest.approx(nbytes / seconds)
    assert efficiency["bandwidth_utilization"] == pytest.approx(nbytes / seconds / 1e9)
    assert efficiency["bound_fraction"] == pytest.approx(result["model"]["bound"]["value"] / seconds)


def test_a_training_step_s_mfu_is_its_step_flops_over_time_and_peak():
    report = crawl_training_step(_model(), args=(torch.randn(16, 32),), optimizer="adamw", time=ONE)
    efficiency = roofline(report, CPU)["efficiency"]
    step_flops, seconds = report["training"]["totals"]["step"]["value"], report["time"]["measured"]["median"]
    assert efficiency["describes"] == "training_step" and efficiency["flops"]["value"] == step_flops
    assert efficiency["flops_utilization"] == pytest.approx(step_flops / seconds / 2e9)
    assert efficiency["achieved_bandwidth"] is None and efficiency["bound_fraction"] is None


def test_time_measured_on_one_kind_of_device_is_not_set_against_another():
    report = crawl_module(_model(), args=(torch.randn(16, 32),), time=ONE)
    result = roofline(report, "A100 SXM 80GB")
    assert "efficiency" not in result and "measured_seconds" not in result["model"]
    assert "measured on cpu" in result["efficiency_skipped"] and "A100 SXM 80GB" in result["efficiency_skipped"]
    assert "efficiency" not in roofline(crawl_module(_model(), args=(torch.randn(16, 32),)), CPU)
