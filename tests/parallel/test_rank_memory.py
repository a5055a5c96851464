"""One rank's timeline: storage resizes made outside dispatch (FSDP2 frees and reallocates its unsharded parameters
that way) are booked where they happen, DTensors count their local shard, and the model copy and its units."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from sharded_models import BlockMLP, llama
from torch import nn
from torch.distributed.tensor import Shard, distribute_tensor

from torchscan.calls.stand_ins import StandIns
from torchscan.memory.timeline import TraceMode
from torchscan.parallel.fake_world import fake_world
from torchscan.parallel.memory import RESIZE, RankTimeline, live_by_category, local_tensors, resizes
from torchscan.parallel.plan import parse_plan
from torchscan.parallel.sharding import stand_in_copy, unit_modules

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")


def test_a_resize_is_a_free_and_an_allocation_at_its_place_in_the_timeline() -> None:
    timeline = RankTimeline(None)
    with TraceMode(timeline), resizes(timeline.storage_resized):
        buffer = torch.empty(256)  # operator 0: 1 KiB
        buffer.untyped_storage().resize_(0)  # step 1: freed
        torch.empty(64)  # operator 2: 256 bytes, dropped once the level after it is noted
        buffer.untyped_storage().resize_(1024)  # step 3: allocated again
        buffer.add_(1)  # operator 4
    timeline.close()
    assert [str(op) for op in timeline.operators[1::2]] == [RESIZE, RESIZE]
    assert timeline.levels == [1024, 0, 256, 1024, 1024]
    assert timeline.live_at(1)["created"] == 0 and timeline.live_at(4)["created"] == 1024
    assert timeline.peak == 1024 and timeline.peak_index == 0


def test_a_storage_resized_before_the_trace_saw_it_existed_before() -> None:
    held = torch.empty(100)
    timeline = RankTimeline(None)
    with TraceMode(timeline), resizes(timeline.storage_resized):
        torch.empty(1)  # dropped at once
        held.untyped_storage().resize_(0)
    timeline.close()
    assert timeline.live_at(-1)["pre_existing"] == 400 and timeline.levels[-1] == -400


def test_resizes_leave_the_storage_class_as_it_was() -> None:
    before = dict(vars(torch.UntypedStorage))
    with pytest.raises(ValueError), resizes(lambda storage, size: None):
        assert "resize_" in vars(torch.UntypedStorage)
        raise ValueError
    assert dict(vars(torch.UntypedStorage)) == before


def test_a_dtensor_is_followed_through_its_local_shard() -> None:
    with fake_world(parse_plan({"strategy": "fsdp", "world_size": 4})) as world:
        sharded = distribute_tensor(torch.zeros(8, 4), world.mesh, [Shard(0)])
        timeline = RankTimeline(None)
        with TraceMode(timeline):
            doubled = sharded * 2
        timeline.close()
        assert [tensor.shape for tensor in local_tensors(doubled)] == [torch.Size([2, 4])]
        assert timeline.live_at(0)["created"] == 2 * 4 * 4  # the local shard, not the global 8 x 4
    assert not dist.is_initialized()


def test_unknown_categories_join_the_rank_categories() -> None:
    merged = live_by_category({"created": 3, "pre_existing": 2, "buffers": 1, "sharded_parameters": 5})
    assert merged["temporaries"] == 3 and merged["buffers"] == 3 and merged["sharded_parameters"] == 5


def test_the_copy_has_fake_stand_ins_and_keeps_ties() -> None:
    model = nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight
    model.register_buffer("scale", torch.ones(3))
    copy = stand_in_copy(model, StandIns(torch.device("cpu"), ["cpu"]))
    assert copy[1].weight is copy[0].weight and isinstance(copy[0].weight, nn.Parameter)
    assert copy[0].weight is not model[0].weight and type(copy.scale).__name__ == "FakeTensor"
    assert model[0].weight.device.type == "cpu" and type(model[0].weight) is nn.Parameter


def test_default_units_are_the_no_split_modules_or_the_largest_module_list() -> None:
    plan = parse_plan({"strategy": "fsdp", "world_size": 2})
    decoder = llama()
    assert [type(unit).__name__ for unit in unit_modules(decoder, plan)] == ["LlamaDecoderLayer"] * 2
    mlp = BlockMLP()
    assert unit_modules(mlp, plan) == list(mlp.blocks)
    assert unit_modules(nn.Linear(2, 2), plan) == []
    named = parse_plan({"strategy": "fsdp", "world_size": 2, "units": ["Linear"]})
    assert len(unit_modules(mlp, named)) == 8
    by_class = parse_plan({"strategy": "fsdp", "world_size": 2, "units": [nn.Linear]})
    assert unit_modules(mlp, by_class) == unit_modules(mlp, named)
