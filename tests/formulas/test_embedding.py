"""Lookup handlers (Embedding, EmbeddingBag) against hand computations."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torchscan_testing import estimate

from torchscan.formulas.modules.embedding import HANDLERS, METHOD
from torchscan.handlers import closest_handler, validate_estimates

TOKEN_POINTWISE = {"receptive_field": 1, "effective_stride": 1, "effective_padding": 0}
SPATIAL = tuple(TOKEN_POINTWISE)


def ids(*values, device: str = "cpu") -> torch.Tensor:
    return torch.tensor(values, dtype=torch.long, device=device)


def test_embedding_lookup_costs_only_memory():
    estimates = estimate(nn.Embedding(10, 4), ids([1, 2, 3], [4, 5, 6]))
    assert estimates == {
        "module_flops": 0,
        "macs": 0,
        "dmas": 6 + 6 * 4 + 6 * 4,  # indices read + one row of 4 read per index + output written
        **TOKEN_POINTWISE,
    }


def test_embedding_padding_row_is_read_like_any_other():
    estimates = estimate(nn.Embedding(10, 3, padding_idx=0), ids(0, 0, 7))
    assert estimates["dmas"] == 3 + 3 * 3 + 3 * 3


def test_embedding_max_norm_is_a_lower_bound():
    estimates = estimate(nn.Embedding(10, 4, max_norm=1.0), input=ids(1, 2, 2))
    assert estimates["macs"] == 0
    assert estimates["module_flops"] == {"status": "partial", "value": None, "known_value": 0, "unit": "FLOPs",
                                         "scope": "module_call", "method": METHOD}
    assert estimates["dmas"]["status"] == "partial"
    assert estimates["dmas"]["known_value"] == 3 + 3 * 4 + 3 * 4


def test_embedding_bag_with_fixed_size_bags():
    estimates = estimate(nn.EmbeddingBag(10, 4, mode="sum"), ids([1, 2, 3], [4, 5, 6]))
    assert estimates == {
        "module_flops": 2 * 3 * 4,  # each looked-up row is added into its bag: 1 add per element
        "macs": 0,
        "dmas": 6 + 6 * 4 + 2 * 4,  # indices + rows read + bag outputs written
        "receptive_field": 3,  # one bag covers its whole row of 3 tokens
        "effective_stride": 3,
        "effective_padding": 0,
    }


def test_embedding_bag_modes():
    indices = ids([1, 2, 3], [4, 5, 6])
    assert estimate(nn.EmbeddingBag(10, 4, mode="mean"), indices)["module_flops"] == 6 * 4 + 2 * 4  # + divisions
    assert estimate(nn.EmbeddingBag(10, 4, mode="max"), indices)["module_flops"] == 6 * 4  # running-max checks


def test_embedding_bag_with_offsets_and_weights():
    bag = nn.EmbeddingBag(10, 4, mode="sum")
    estimates = estimate(bag, ids(1, 2, 3, 4, 5), ids(0, 2), per_sample_weights=torch.ones(5))
    assert estimates["macs"] == 5 * 4  # a weighted sum: one multiply-accumulate per looked-up element
    assert estimates["module_flops"] == 2 * 5 * 4
    assert estimates["dmas"] == 5 + 2 + 5 + 5 * 4 + 2 * 4  # indices, offsets, weights, rows, outputs
    assert statuses(estimates) == {"not_applicable"}  # a ragged batch has no token axis


def test_embedding_bag_keyword_call_with_last_offset():
    bag = nn.EmbeddingBag(10, 2, mode="mean", include_last_offset=True)
    estimates = estimate(bag, input=ids(1, 2, 3, 4), offsets=ids(0, 1, 4))
    assert estimates["module_flops"] == 4 * 2 + 2 * 2
    assert estimates["dmas"] == 4 + 3 + 4 * 2 + 2 * 2


def test_embedding_bag_padding_idx_makes_value_dependent_work_a_lower_bound():
    bag = nn.EmbeddingBag(10, 4, mode="mean", padding_idx=0)
    estimates = estimate(bag, ids([0, 2, 3], [4, 0, 0]))
    assert estimates["module_flops"]["status"] == "partial"
    assert estimates["module_flops"]["known_value"] == 2 * 4  # the divisions happen for every bag
    assert estimates["dmas"]["status"] == "partial"
    assert estimates["dmas"]["known_value"] == 6 + 2 * 4  # rows read are unknown
    assert estimates["macs"] == 0


def statuses(estimates: dict) -> set:
    return {estimates[name]["status"] for name in SPATIAL}


def test_meta_device_gives_the_same_numbers():
    cases = [(nn.Embedding(10, 4), (ids([1, 2], [3, 4]),)),
             (nn.Embedding(10, 4, max_norm=2.0), (ids(1, 2),)),
             (nn.EmbeddingBag(10, 3, mode="max"), (ids([1, 2, 3]),)),
             (nn.EmbeddingBag(10, 3, mode="sum"), (ids(1, 2, 3), ids(0, 1), torch.ones(3)))]
    for module, args in cases:
        on_cpu = estimate(module, *args)
        on_meta = estimate(module.to("meta"), *(arg.to("meta") for arg in args))
        assert on_meta == on_cpu


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_every_number_is_a_non_negative_int_and_validates(mode):
    cases = [(nn.Embedding(7, 2), (ids([1, 2, 3]),)), (nn.EmbeddingBag(7, 2, mode=mode), (ids([1, 2], [3, 4]),)),
             (nn.EmbeddingBag(7, 2, mode=mode), (ids(1, 2, 3), ids(0, 2))),
             (nn.EmbeddingBag(7, 2, mode=mode, max_norm=1.0), (ids([1, 2]),))]
    for module, args in cases:
        estimates = estimate(module, *args)
        for value in estimates.values():
            assert (type(value) is int and value >= 0) or value["status"] in ("partial", "not_applicable")
            if isinstance(value, dict) and value["status"] == "partial":
                assert type(value["known_value"]) is int and value["known_value"] >= 0
        validated = validate_estimates(estimates, closest_handler(type(module), HANDLERS))
        assert not validated.problems
        assert {result["method"] for result in validated.metrics.values()} == {METHOD}
