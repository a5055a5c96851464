"""PyTorch's private weight-norm parametrization, recognized by qualified name, and its operator formula."""

from __future__ import annotations

import pytest
import torch
from third_party_models import analyze_call
from torch import nn

from torchscan import crawl_module, measure_flops


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_weight_norm_recomputes_the_weight_in_a_child_call(device: str) -> None:
    """Conv1d(4, 8, 5) normalized along dim 2: 5 norms over 32 elements (64 each: squares, additions, root), a
    division per norm and a multiply per element: 5 * 65 + 160 FLOPs; g (5) and v (160) read, w (160) written."""
    with torch.device(device):
        conv = nn.utils.parametrizations.weight_norm(nn.Conv1d(4, 8, 5), dim=2)
    report = crawl_module(conv, (4, 9), device=device, strict=True)
    [norm] = [row for row in report["layers"] if row["type"].endswith("._WeightNorm")]
    metrics = {name: result["value"] for name, result in norm["metrics"].items()}
    assert metrics == {"module_flops": 5 * 65 + 160, "macs": 0, "dmas": 5 + 160 + 160, "receptive_field": None,
                       "effective_stride": None, "effective_padding": None}
    assert {result["status"] for name, result in norm["metrics"].items() if name.startswith("eff")} == {
        "not_applicable"}
    assert norm["operator_flops"]["direct"]["value"] == 5 * 65 + 160


def test_weight_norm_operator_formula() -> None:
    v, g = torch.randn(6, 3, 2), torch.randn(6, 1, 1)
    result = measure_flops(lambda: torch._weight_norm(v, g, 0))
    assert result["total"]["status"] == "complete"
    assert result["total"]["value"] == 6 * (2 * 6 + 1) + 36
    values, _ = analyze_call(nn.utils.parametrizations.weight_norm(nn.Linear(3, 6)), torch.randn(2, 3))
    assert values["macs"] == 2 * 3 * 6
