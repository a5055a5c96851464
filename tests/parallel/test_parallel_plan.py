"""The parallel plan: parsed from plain data into a frozen dataclass; every wrong key or value refused with an error
that names the key and says what was expected."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy

from torchscan.parallel.plan import ParallelPlan, parse_plan


def test_a_plan_is_parsed_into_a_frozen_dataclass() -> None:
    plan = parse_plan({"strategy": "hsdp", "world_size": 16, "shard_group_size": 8,
                       "mixed_precision": {"param_dtype": "bf16", "reduce_dtype": torch.float32},
                       "units": [nn.Linear, "LlamaDecoderLayer"]})
    assert plan == ParallelPlan("hsdp", 16, 8, torch.bfloat16, torch.float32, None, (nn.Linear, "LlamaDecoderLayer"))
    assert (plan.shard_size, plan.replicate_size, plan.mesh_shape, plan.reshard_after_forward) == (8, 2, (2, 8), True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.world_size = 4  # type: ignore[misc]
    assert parse_plan(plan) is plan
    assert plan.describe()["mixed_precision"] == {"param_dtype": "bfloat16", "reduce_dtype": "float32",
                                                  "output_dtype": None}
    assert plan.describe()["units"] == ["torch.nn.modules.linear.Linear", "LlamaDecoderLayer"]


@pytest.mark.parametrize(("strategy", "shard", "replicate", "mesh", "reshard"),
                         [("fsdp", 8, 1, (8,), True), ("fsdp_no_reshard", 8, 1, (8,), False),
                          ("ddp", 1, 8, (8, 1), False)])
def test_each_strategy_has_its_mesh(strategy: str, shard: int, replicate: int, mesh: tuple[int, ...],
                                    reshard: bool) -> None:
    plan = parse_plan({"strategy": strategy, "world_size": 8})
    assert (plan.shard_size, plan.replicate_size, plan.mesh_shape, plan.reshard_after_forward) == (
        shard, replicate, mesh, reshard)


def test_a_mixed_precision_policy_is_accepted() -> None:
    plan = parse_plan({"strategy": "fsdp", "world_size": 2,
                       "mixed_precision": MixedPrecisionPolicy(param_dtype=torch.bfloat16)})
    assert (plan.param_dtype, plan.reduce_dtype, plan.output_dtype) == (torch.bfloat16, None, None)


@pytest.mark.parametrize(("spec", "error", "message"), [
    ([("strategy", "fsdp")], TypeError, "must be a mapping"),
    ({"strategy": "fsdp", "world_size": 2, "shards": 2}, ValueError, "unknown key 'shards'"),
    ({"world_size": 2}, ValueError, "'strategy' is required"),
    ({"strategy": "zero3", "world_size": 2}, ValueError, "'strategy' must be one of 'ddp', 'fsdp'"),
    ({"strategy": "fsdp"}, ValueError, "'world_size' is required"),
    ({"strategy": "fsdp", "world_size": 0}, ValueError, "'world_size' must be an int >= 1, got 0"),
    ({"strategy": "fsdp", "world_size": 2.0}, TypeError, "'world_size' must be an int >= 1, got float"),
    ({"strategy": "fsdp", "world_size": True}, TypeError, "'world_size' must be an int >= 1, got bool"),
    ({"strategy": "hsdp", "world_size": 8}, ValueError, "'hsdp' requires 'shard_group_size'"),
    ({"strategy": "hsdp", "world_size": 8, "shard_group_size": 3}, ValueError, "must divide world_size \\(8\\)"),
    ({"strategy": "hsdp", "world_size": 8, "shard_group_size": 0}, ValueError, "'shard_group_size' must be an int"),
    ({"strategy": "fsdp", "world_size": 8, "shard_group_size": 4}, ValueError, "applies to strategy 'hsdp' only"),
    ({"strategy": "fsdp", "world_size": 2, "mixed_precision": "bf16"}, TypeError, "'mixed_precision' must be a"),
    ({"strategy": "fsdp", "world_size": 2, "mixed_precision": {"compute": "bf16"}}, ValueError,
     "unknown key 'mixed_precision.compute'"),
    ({"strategy": "fsdp", "world_size": 2, "mixed_precision": {"param_dtype": "bf8"}}, ValueError,
     "'mixed_precision.param_dtype' must name a floating dtype"),
    ({"strategy": "fsdp", "world_size": 2, "mixed_precision": {"param_dtype": torch.int8}}, ValueError,
     "'mixed_precision.param_dtype' must be a floating dtype"),
    ({"strategy": "fsdp", "world_size": 2, "mixed_precision": {"reduce_dtype": 16}}, TypeError,
     "'mixed_precision.reduce_dtype' must be a torch dtype"),
    ({"strategy": "fsdp", "world_size": 2, "units": nn.Linear}, TypeError, "'units' must be a non-empty list"),
    ({"strategy": "fsdp", "world_size": 2, "units": []}, TypeError, "'units' must be a non-empty list"),
    ({"strategy": "fsdp", "world_size": 2, "units": [int]}, TypeError, "each of 'units' must be an nn.Module"),
])
def test_every_error_names_the_key_and_what_was_expected(spec: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        parse_plan(spec)
