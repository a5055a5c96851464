"""Normalization formulas against hand computations (docs/conventions/norm-activation-recurrent.md).

Per element: mean 1, variance 3 (batch statistics only), normalize 2, weight 1, bias 1; per group: eps + rsqrt 2.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from torchscan_testing import estimate as estimate_call

from torchscan.formulas.modules.norm import HANDLERS, METHOD

POINTWISE = {"macs": 0, "receptive_field": 1, "effective_stride": 1, "effective_padding": 0}


def estimate(module: nn.Module, *args, **kwargs) -> dict:
    """The built-in estimate of one call, in the mode the test put the module in."""
    return estimate_call(module, *args, training=None, **kwargs)



def estimate_on_meta(module: nn.Module, x: torch.Tensor) -> dict:
    return estimate(copy.deepcopy(module).to("meta"), torch.empty(x.shape, device="meta"))


def assert_counts_everywhere(module: nn.Module, x: torch.Tensor, expected: dict) -> None:
    """The expected six fields on CPU and on the meta device, every number a plain non-negative int."""
    result = estimate(module, x)
    assert result == {**POINTWISE, **expected}
    assert estimate_on_meta(module, x) == result
    for value in result.values():
        assert type(value) is int and value >= 0


def test_batch_norm_eval_uses_running_statistics() -> None:
    module = nn.BatchNorm2d(3).eval()
    x = torch.randn(2, 3, 4, 5)  # 120 elements, 3 channels
    # normalize 2 + affine 2 per element; eps + rsqrt per channel
    # DMAs: input + output + weight, bias, running mean, running var
    assert_counts_everywhere(module, x, {"module_flops": 120 * (2 + 2) + 3 * 2, "dmas": 120 + 120 + 4 * 3})


def test_batch_norm_without_affine() -> None:
    module = nn.BatchNorm2d(3, affine=False).eval()
    x = torch.randn(2, 3, 4, 5)
    assert_counts_everywhere(module, x, {"module_flops": 120 * 2 + 3 * 2, "dmas": 120 + 120 + 2 * 3})


def test_batch_norm_without_running_stats_computes_batch_statistics_in_eval() -> None:
    module = nn.BatchNorm1d(3, track_running_stats=False).eval()
    x = torch.randn(4, 3)  # 12 elements
    # mean 1 + variance 3 + normalize 2 + affine 2 per element; 2 per channel
    assert_counts_everywhere(module, x, {"module_flops": 12 * (1 + 3 + 2 + 2) + 3 * 2, "dmas": 12 + 12 + 2 * 3})


def test_batch_norm3d_eval() -> None:
    x = torch.randn(1, 2, 2, 2, 2)  # 16 elements
    assert_counts_everywhere(nn.BatchNorm3d(2).eval(), x, {"module_flops": 16 * 4 + 2 * 2, "dmas": 32 + 4 * 2})


def test_batch_norm_training_counts_the_running_update() -> None:
    module = nn.BatchNorm1d(3).train()
    result = estimate(module, torch.randn(4, 3))
    # batch statistics (8 per element, 2 per channel) + update 7 per channel
    assert result["module_flops"] == 12 * 8 + 3 * 2 + 3 * 7
    # input + output + weight, bias + running stats read + counter read, then running stats and counter written
    assert result["dmas"] == 12 + 12 + 6 + 6 + 1 + 6 + 1


def test_sync_batch_norm_in_eval_is_a_batch_norm() -> None:
    x = torch.randn(2, 3, 4)  # 24 elements
    assert_counts_everywhere(nn.SyncBatchNorm(3).eval(), x, {"module_flops": 24 * 4 + 3 * 2, "dmas": 48 + 12})


def test_layer_norm() -> None:
    x = torch.randn(2, 3, 4)  # 24 elements, 6 groups of 4
    assert_counts_everywhere(nn.LayerNorm(4), x, {"module_flops": 24 * (1 + 3 + 2 + 2) + 6 * 2, "dmas": 48 + 8})


def test_layer_norm_weight_without_bias() -> None:
    x = torch.randn(2, 3, 4)
    assert_counts_everywhere(nn.LayerNorm(4, bias=False), x, {"module_flops": 24 * 7 + 6 * 2, "dmas": 48 + 4})


def test_layer_norm_over_two_dimensions_without_affine() -> None:
    x = torch.randn(2, 3, 4)  # 2 groups of 12
    module = nn.LayerNorm([3, 4], elementwise_affine=False)
    assert_counts_everywhere(module, x, {"module_flops": 24 * 6 + 2 * 2, "dmas": 48})


def test_group_norm() -> None:
    x = torch.randn(2, 4, 3, 3)  # 72 elements; 2 samples x 2 groups of (2 channels x 9 positions)
    assert_counts_everywhere(nn.GroupNorm(2, 4), x, {"module_flops": 72 * 8 + 4 * 2, "dmas": 144 + 8})
    assert_counts_everywhere(nn.GroupNorm(2, 4, affine=False), x, {"module_flops": 72 * 6 + 4 * 2, "dmas": 144})


def test_instance_norm_default_uses_per_instance_statistics() -> None:
    x = torch.randn(2, 3, 4, 4)  # 96 elements, 6 (sample, channel) groups of 16
    assert_counts_everywhere(nn.InstanceNorm2d(3).eval(), x, {"module_flops": 96 * 6 + 6 * 2, "dmas": 192})


def test_instance_norm_affine_unbatched() -> None:
    x = torch.randn(3, 5)  # unbatched (C, L): 3 groups of 5
    module = nn.InstanceNorm1d(3, affine=True).eval()
    assert_counts_everywhere(module, x, {"module_flops": 15 * 8 + 3 * 2, "dmas": 30 + 6})


def test_instance_norm_tracked_stats_in_eval_are_pointwise() -> None:
    x = torch.randn(1, 2, 2, 2, 2)  # 16 elements; running statistics per channel
    module = nn.InstanceNorm3d(2, track_running_stats=True).eval()
    assert_counts_everywhere(module, x, {"module_flops": 16 * 2 + 2 * 2, "dmas": 32 + 4})


def test_instance_norm_training_update_is_a_lower_bound() -> None:
    module = nn.InstanceNorm1d(3, track_running_stats=True).train()
    result = estimate(module, torch.randn(2, 3, 5))  # 30 elements, 6 groups
    assert result["module_flops"]["status"] == "partial"
    assert result["module_flops"]["known_value"] == 30 * 6 + 6 * 2
    assert result["dmas"]["status"] == "partial"
    assert result["dmas"]["known_value"] == 60 + 6
    assert result["module_flops"]["method"] == METHOD


def test_rms_norm() -> None:
    x = torch.randn(2, 3, 4)  # 6 groups of 4: square, accumulate, scale, weight per element; eps + rsqrt per group
    assert_counts_everywhere(nn.RMSNorm(4), x, {"module_flops": 24 * 4 + 6 * 2, "dmas": 48 + 4})
    assert_counts_everywhere(nn.RMSNorm(4, elementwise_affine=False), x, {"module_flops": 24 * 3 + 6 * 2, "dmas": 48})


def test_rms_norm_kwargs_only_call() -> None:
    x = torch.randn(2, 4)
    assert estimate(nn.RMSNorm(4), x=x)["module_flops"] == 8 * 4 + 2 * 2


def test_local_response_norm_window_spans_channels() -> None:
    x = torch.randn(2, 4, 3, 3)  # 72 elements, window of 3 channels
    # square, 2 window adds, average, * alpha, + k, ** beta, divide
    assert_counts_everywhere(nn.LocalResponseNorm(3), x, {"module_flops": 72 * (1 + 2 + 1 + 1 + 1 + 1 + 1),
                                                          "dmas": 144})
    assert estimate(nn.LocalResponseNorm(5), torch.randn(2, 6, 7))["module_flops"] == 84 * (4 + 6)


@pytest.mark.parametrize("name", ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "LayerNorm",
                                  "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "RMSNorm",
                                  "LocalResponseNorm"])
def test_every_listed_norm_is_registered_with_its_label(name: str) -> None:
    assert HANDLERS[getattr(nn, name)].label == "formula:norm"
