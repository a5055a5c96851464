"""Formulas of the timm blocks, each checked by hand on one call of timm's own class, and against the operator
FLOPs of the same call."""

from __future__ import annotations

import pytest
import torch
from third_party_models import analyze_call, direct_operator_flops, import_timm

from torchscan import ModuleCall
from torchscan.handlers import validate_estimates
from torchscan.integrations.lookup import THIRD_PARTY_HANDLERS
from torchscan.results import SUMMABLE_METRICS

POINTWISE = {"receptive_field": 1, "effective_stride": 1, "effective_padding": 0}


@pytest.fixture(scope="module")
def timm():
    return import_timm()


def check(module, source, flops, dmas, spatial=POINTWISE, operator_flops=None):
    values, record = analyze_call(module, source)
    assert values == {"module_flops": flops, "macs": 0, "dmas": dmas, **spatial}
    assert direct_operator_flops(record) == (flops if operator_flops is None else operator_flops)


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_norms(timm, device: str) -> None:
    """Per element: mean 1, variance 3, normalize 2, weight 1, bias 1 (8); per group: eps and rsqrt (2)."""
    layers = timm.layers
    with torch.device(device):
        tokens, image = torch.randn(2, 3, 8), torch.randn(1, 4, 3, 3)
        check(layers.LayerNorm(8), tokens, 8 * 48 + 2 * 6, 2 * 48 + 16)
        check(layers.LayerNorm2d(4), image, 8 * 36 + 2 * 9, 2 * 36 + 8)
        check(layers.GroupNorm1(4), image, 8 * 36 + 2, 2 * 36 + 8)
        check(timm.models.metaformer.LayerNorm2dNoBias(4), image, 7 * 36 + 2 * 9, 2 * 36 + 4)
        # GRN over channels-last (1, 3, 3, 4): norms 2 per element, channel mean 1 per norm (4), eps per sample (1),
        # division per norm (4), multiply, multiply-add and residual (4 per element)
        check(layers.grn.GlobalResponseNorm(4), image.permute(0, 2, 3, 1), 6 * 36 + 2 * 4 + 1, 2 * 36 + 8)


@pytest.mark.parametrize(("name", "settings", "per_element"), [
    ("GELU", {}, 5), ("GELUTanh", {}, 9), ("QuickGELU", {}, 6), ("Sigmoid", {}, 4), ("Sigmoid", {"inplace": True}, 4),
    ("Tanh", {}, 1), ("Tanh", {"inplace": True}, 1), ("Swish", {}, 5), ("Swish", {"inplace": True}, 5),
])
def test_activations(timm, name: str, settings: dict, per_element: int) -> None:
    check(getattr(timm.layers.activations, name)(**settings), torch.randn(2, 3, 4), 24 * per_element, 48)


def test_layer_scales(timm) -> None:
    """One multiply per element; input, scales and output accessed once each."""
    check(timm.layers.LayerScale(8), torch.randn(2, 3, 8), 48, 48 + 8 + 48)
    check(timm.layers.LayerScale(8, inplace=True), torch.randn(2, 3, 8), 48, 48 + 8 + 48)
    check(timm.layers.LayerScale2d(4), torch.randn(1, 4, 3, 3), 36, 36 + 4 + 36)
    check(timm.models.metaformer.Scale(4), torch.randn(1, 4, 3, 3), 36, 36 + 4 + 36)


def test_drop_path_is_the_identity_in_evaluation_and_unknown_in_training(timm) -> None:
    check(timm.layers.DropPath(0.1), torch.randn(2, 4), 0, 0)
    # An analysis runs in evaluation mode; the formula itself refuses a training-mode call (random masks).
    handler = THIRD_PARTY_HANDLERS["timm.layers.drop.DropPath"]
    source = torch.randn(2, 4)
    estimates = handler.callback(ModuleCall(timm.layers.DropPath(0.1).train(), (source,), {}, source))
    validated = validate_estimates(estimates, handler, builtin=True)
    assert {name: result["status"] for name, result in validated.metrics.items()
            if name in SUMMABLE_METRICS} == dict.fromkeys(SUMMABLE_METRICS, "unavailable")
    assert "random drop masks" in validated.reasons["module_flops"]


def test_global_average_pooling(timm) -> None:
    """9 positions per window: 9 FLOPs each (8 additions, 1 division), the whole 3x3 extent as one window."""
    module = timm.layers.adaptive_avgmax_pool.FastAdaptiveAvgPool(flatten=True)
    check(module, torch.randn(1, 4, 3, 3), 36, 36 + 4,
          {"receptive_field": [3, 3], "effective_stride": [3, 3], "effective_padding": [0, 0]})


def test_shape_blocks(timm) -> None:
    """EfficientFormer's Flat is a view that merges the grid into tokens; LeViT's Downsample copies every second
    token of a 4x4 grid along both axes (4 of 16 tokens, 8 channels: 32 read, 32 written)."""
    values, _ = analyze_call(timm.models.efficientformer.Flat(), torch.randn(1, 4, 3, 3))
    assert values == {"module_flops": 0, "macs": 0, "dmas": 0, "receptive_field": "not_applicable",
                      "effective_stride": "not_applicable", "effective_padding": "not_applicable"}
    downsample = timm.models.levit.Downsample(stride=2, resolution=4)
    check(downsample, torch.randn(1, 16, 8), 0, 64, {"receptive_field": 1, "effective_stride": 2,
                                                     "effective_padding": 0})
