"""Shape and pass-through handlers (Flatten, Unflatten, ChannelShuffle, dropout) against hand computations."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchscan_testing import estimate

from torchscan.formulas.modules.shape import HANDLERS, METHOD
from torchscan.handlers import closest_handler, validate_estimates

POINTWISE = {"receptive_field": 1, "effective_stride": 1, "effective_padding": 0}
SPATIAL = tuple(POINTWISE)
DROPOUTS = [(nn.Dropout(0.3), (2, 3)), (nn.Dropout1d(), (2, 3, 4)), (nn.Dropout2d(), (2, 3, 4, 4)),
            (nn.Dropout3d(), (1, 2, 3, 3, 3)), (nn.AlphaDropout(), (4, 5)), (nn.FeatureAlphaDropout(), (2, 3, 4, 4))]


def statuses(estimates: dict, names=SPATIAL) -> set:
    return {estimates[name]["status"] for name in names}


def test_flatten_of_spatial_dimensions_is_a_view_without_spatial_meaning():
    estimates = estimate(nn.Flatten(), torch.ones(2, 3, 4, 5))
    assert estimates["module_flops"] == 0 and estimates["macs"] == 0
    assert estimates["dmas"] == 0  # a view: no element is read or written
    assert statuses(estimates) == {"not_applicable"}
    assert {estimates[name]["method"] for name in SPATIAL} == {METHOD}


def test_flatten_that_keeps_spatial_dimensions_is_pointwise():
    merges_batch_and_channel = estimate(nn.Flatten(0, 1), torch.ones(2, 3, 4, 5))
    assert merges_batch_and_channel == {"module_flops": 0, "macs": 0, "dmas": 0, **POINTWISE}
    merges_nothing = estimate(nn.Flatten(), torch.ones(6, 7))
    assert merges_nothing == {"module_flops": 0, "macs": 0, "dmas": 0, **POINTWISE}


def test_flatten_that_must_copy_counts_the_copy():
    transposed = torch.ones(2, 5, 4, 3).transpose(1, 3)  # not viewable as (2, 60)
    estimates = estimate(nn.Flatten(), transposed)
    assert estimates["dmas"] == 2 * 60 + 2 * 60  # each element read once and written once


def test_flatten_with_keyword_input():
    assert estimate(nn.Flatten(), input=torch.ones(2, 3, 4))["dmas"] == 0


def test_unflatten_of_the_channel_dimension_is_pointwise():
    estimates = estimate(nn.Unflatten(1, (2, 2)), torch.ones(2, 4, 3, 3))
    assert estimates == {"module_flops": 0, "macs": 0, "dmas": 0, **POINTWISE}


@pytest.mark.parametrize("module,shape", [(nn.Unflatten(2, (2, 3)), (1, 2, 6, 4)),
                                          (nn.Unflatten(1, (3, 2, 2)), (5, 12)),
                                          (nn.Unflatten(-1, (2, 2)), (1, 2, 4))])
def test_unflatten_that_splits_or_creates_spatial_dimensions_has_no_receptive_field(module, shape):
    estimates = estimate(module, torch.ones(*shape))
    assert estimates["dmas"] == 0
    assert statuses(estimates) == {"not_applicable"}


@pytest.mark.parametrize("module,shape", DROPOUTS)
def test_dropout_in_evaluation_mode_passes_its_input_through(module, shape):
    assert estimate(module, torch.ones(*shape)) == {"module_flops": 0, "macs": 0, "dmas": 0, **POINTWISE}


@pytest.mark.parametrize("module,shape", DROPOUTS)
def test_dropout_in_training_mode_is_unavailable_not_zero(module, shape):
    estimates = estimate(module, torch.ones(*shape), training=True)
    assert {name: estimates[name] for name in POINTWISE} == POINTWISE
    for name, unit in (("module_flops", "FLOPs"), ("macs", "MACs"), ("dmas", "DMAs")):
        assert estimates[name] == {"status": "unavailable", "value": None, "known_value": None, "unit": unit,
                                   "scope": "module_call", "method": METHOD}


def test_unbatched_dropout1d_returns_a_view():
    assert estimate(nn.Dropout1d(), torch.ones(3, 4))["dmas"] == 0


def test_channel_shuffle_copies():
    estimates = estimate(nn.ChannelShuffle(2), torch.ones(1, 4, 3, 3))
    assert estimates == {"module_flops": 0, "macs": 0, "dmas": 36 + 36, **POINTWISE}


def test_meta_device_gives_the_same_numbers():
    cases = [(nn.Flatten(), torch.ones(2, 3, 4)), (nn.Flatten(0, 1), torch.ones(2, 3, 4)),
             (nn.Unflatten(1, (2, 3)), torch.ones(2, 6, 5, 5)), (nn.Dropout2d(), torch.ones(1, 2, 3, 3)),
             (nn.ChannelShuffle(3), torch.ones(2, 6, 2, 2))]
    for module, inputs in cases:
        on_cpu = estimate(module, inputs)
        assert estimate(module.to("meta"), inputs.to("meta")) == on_cpu
    transposed = torch.ones(2, 5, 4, 3).transpose(1, 3)
    assert estimate(nn.Flatten(), transposed.to("meta")) == estimate(nn.Flatten(), transposed)


def test_every_number_is_a_non_negative_int_and_validates():
    cases = [(nn.Flatten(), (2, 3, 4)), (nn.Flatten(1, 2), (2, 3, 4, 5)), (nn.Unflatten(0, (1, 2)), (2, 3, 4)),
             (nn.ChannelShuffle(2), (1, 2, 3)), *DROPOUTS]
    for module, shape in cases:
        estimates = estimate(module, torch.ones(*shape))
        assert set(estimates) == {"module_flops", "macs", "dmas", *SPATIAL}
        for value in estimates.values():
            assert (type(value) is int and value >= 0) or value["status"] == "not_applicable"
        validated = validate_estimates(estimates, closest_handler(type(module), HANDLERS))
        assert not validated.problems
        assert {result["method"] for result in validated.metrics.values()} == {METHOD}
