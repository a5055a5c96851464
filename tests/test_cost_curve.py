"""Cost curves of real analyses: every summable total, exact when the points determine it, and honest when not."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from torch import nn
from torchscan_testing import analyze_call

from torchscan import CURVE_SCHEMA_VERSION, cost_curve, fit_curves


def _linear_stack_totals(sizes: list[int]) -> list[dict[str, Any]]:
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    return [analyze_call(model, torch.zeros(size, 8))["totals"] for size in sizes]


def test_every_total_gets_a_curve_under_its_name() -> None:
    sizes = [1, 2, 3, 5, 8]
    curves = fit_curves(sizes, _linear_stack_totals(sizes))
    assert {"module_flops", "macs", "dmas", "operator_flops", "parameters.total", "parameters.bytes",
            "buffers.total"} <= set(curves)
    assert curves["parameters.total"]["pieces"][0]["coefficients"] == [str(8 * 16 + 16 + 16 * 4 + 4)]
    assert curves["macs"]["pieces"][0]["coefficients"] == ["0", str(8 * 16 + 16 * 4)]
    assert all(curve["kind"] == "polynomial" for curve in curves.values())


def test_a_partial_total_is_a_lower_bound_and_gets_no_curve() -> None:
    sizes = [1, 2, 3, 4]
    totals = _linear_stack_totals(sizes)
    totals[2]["macs"] = {**totals[2]["macs"], "status": "partial", "value": None}
    curve = fit_curves(sizes, totals)["macs"]
    assert curve["kind"] == "points" and curve["pieces"] == []
    assert "partial at size 3" in curve["reason"] and "lower bound" in curve["reason"]


def test_fit_curves_names_what_is_wrong_with_its_arguments() -> None:
    with pytest.raises(ValueError, match="one report's totals per size"):
        fit_curves([1, 2], [{}])
    with pytest.raises(ValueError, match="distinct"):
        fit_curves([1, 1], [{}, {}])
    with pytest.raises(TypeError, match="sizes must be"):
        fit_curves([1.5], [{}])


def test_cost_curve_analyzes_each_size_and_is_json() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU())
    curve = cost_curve(model, [8, 16, 24, 32, 40], lambda size: ((torch.zeros(1, 3, size, size),), {}))
    assert curve["schema_version"] == CURVE_SCHEMA_VERSION and curve["sizes"] == [8, 16, 24, 32, 40]
    assert [point["size"] for point in curve["points"]] == curve["sizes"]
    assert curve["curves"]["macs"]["pieces"] == [{"from": 8, "to": 40, "step": 8,
                                                  "coefficients": ["0", "0", str(3 * 4 * 9)]}]
    assert json.loads(json.dumps(curve)) == curve


def test_cost_curve_refuses_inputs_that_are_not_a_call() -> None:
    with pytest.raises(TypeError, match=r"inputs\(4\) must return an \(args, kwargs\) pair"):
        cost_curve(nn.ReLU(), [4], lambda size: torch.zeros(size))


def test_the_module_and_the_function_share_one_name_and_both_work() -> None:
    import inspect

    import torchscan
    import torchscan.cost_curve as module
    from torchscan.cost_curve import cost_curve as function

    model = nn.Linear(2, 3)
    call = lambda size: ((torch.zeros(size, 2),), {})
    assert torchscan.cost_curve is module and module.fit_curves is fit_curves
    assert module(model, [1, 2, 3, 4], call) == function(model, [1, 2, 3, 4], call)
    assert module(model, [1, 2, 3, 4], call)["curves"]["macs"]["kind"] == "polynomial"
    assert inspect.signature(module) == inspect.signature(function)
