"""FLOPs per device of a sharded step: the forward and backward of the rank's batch on gathered parameters, and the
optimizer's update of the rank's shard (the whole model's under ``ddp``)."""

from __future__ import annotations

from typing import Any

import torch
from sharded_models import Block, BlockMLP

from torchscan import crawl_training_step
from torchscan.parallel.step import sharded_step

X = torch.randn(4, 16)


def _model() -> BlockMLP:
    torch.manual_seed(0)
    return BlockMLP(width=16, hidden=32, blocks=2)


def _rank_flops(strategy: str, world_size: int) -> dict[str, Any]:
    plan = {"strategy": strategy, "world_size": world_size, "units": [Block]}
    return sharded_step(_model(), (X,), None, None, "adamw", plan)["per_device"]["flops"]


def test_a_rank_computes_the_step_of_its_batch_and_its_share_of_the_update():
    single = crawl_training_step(_model(), args=(X,), optimizer="adamw")["training"]["totals"]
    replicated, halves, quarters = _rank_flops("ddp", 4), _rank_flops("fsdp", 2), _rank_flops("fsdp", 4)
    for flops in (replicated, halves, quarters):
        assert flops["forward"]["value"] == single["forward"]["value"] + single["loss_forward"]["value"]
        assert flops["backward"]["value"] == single["backward"]["value"]
        assert flops["step"]["value"] == sum(flops[phase]["value"] for phase in ("forward", "backward", "optimizer"))
        assert {result["status"] for result in flops.values()} == {"complete"}
    update = single["optimizer"]["value"]
    assert replicated["optimizer"]["value"] == update
    # The element-wise update divides among the ranks; the per-tensor scalar work (the step counts) does not.
    per_tensor = 2 * halves["optimizer"]["value"] - update
    assert 0 <= per_tensor < 2 * len(list(_model().parameters()))
    assert quarters["optimizer"]["value"] == (update - per_tensor) / 4 + per_tensor
