"""Formulas of the torchvision blocks, each checked by hand on one call of torchvision's own class."""

from __future__ import annotations

import pytest
import torch
from third_party_models import analyze_call, direct_operator_flops, import_torchvision

POINTWISE = {"receptive_field": 1, "effective_stride": 1, "effective_padding": 0}
NOT_APPLICABLE = dict.fromkeys(POINTWISE, "not_applicable")


@pytest.fixture(scope="module")
def torchvision():
    return import_torchvision()


def test_stochastic_depth_is_the_identity_in_evaluation(torchvision) -> None:
    values, _ = analyze_call(torchvision.ops.StochasticDepth(0.2, "row"), torch.randn(2, 4))
    assert values == {"module_flops": 0, "macs": 0, "dmas": 0, **POINTWISE}


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_convnext_layer_norm_over_channels(torchvision, device: str) -> None:
    """36 elements in 9 groups of 4 channels: 8 FLOPs per element, 2 per group; input, output, weight, bias."""
    with torch.device(device):
        module = torchvision.models.convnext.LayerNorm2d(4)
        values, record = analyze_call(module, torch.randn(1, 4, 3, 3))
    assert values == {"module_flops": 8 * 36 + 2 * 9, "macs": 0, "dmas": 2 * 36 + 8, **POINTWISE}
    assert direct_operator_flops(record) == 8 * 36 + 2 * 9


def test_axis_moves_are_pointwise_views(torchvision) -> None:
    for module in (torchvision.ops.Permute([0, 2, 3, 1]), torchvision.models.maxvit.SwapAxes(-2, -1)):
        values, _ = analyze_call(module, torch.randn(1, 4, 3, 3))
        assert values == {"module_flops": 0, "macs": 0, "dmas": 0, **POINTWISE}


def test_maxvit_windows_copy_once_and_have_no_receptive_field(torchvision) -> None:
    """(1, 4, 4, 4) into 2x2 windows: the permuted tensor is copied (64 read, 64 written), and back again."""
    maxvit = torchvision.models.maxvit
    values, _ = analyze_call(maxvit.WindowPartition(), torch.randn(1, 4, 4, 4), 2)
    assert values == {"module_flops": 0, "macs": 0, "dmas": 128, **NOT_APPLICABLE}
    values, _ = analyze_call(maxvit.WindowDepartition(), torch.randn(1, 4, 4, 4), 2, 2, 2)
    assert values == {"module_flops": 0, "macs": 0, "dmas": 128, **NOT_APPLICABLE}
