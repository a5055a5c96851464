"""The fake world: a fake process group of the plan's size, joined as one rank, its device mesh, and the caller's
process-group state and default device exactly as they were afterwards, also after an error."""

from __future__ import annotations

import contextlib

import pytest
import torch
import torch.distributed as dist
from torch.overrides import _get_current_function_mode_stack

from torchscan.parallel.fake_world import LARGEST_RANK, check_rank, fake_world
from torchscan.parallel.plan import parse_plan


@pytest.mark.parametrize(("spec", "shape", "names"), [
    ({"strategy": "fsdp", "world_size": 8}, (8,), ("shard",)),
    ({"strategy": "hsdp", "world_size": 8, "shard_group_size": 4}, (2, 4), ("replicate", "shard")),
    ({"strategy": "ddp", "world_size": 4}, (4, 1), ("replicate", "shard")),
])
def test_the_world_has_the_plans_group_and_mesh(spec: dict, shape: tuple[int, ...], names: tuple[str, ...]) -> None:
    plan = parse_plan(spec)
    with fake_world(plan, rank=3) as world:
        assert dist.is_initialized() and dist.get_backend() == "fake"
        assert (dist.get_world_size(), dist.get_rank(), world.rank) == (plan.world_size, 3, 3)
        assert tuple(world.mesh.shape) == shape and world.mesh.mesh_dim_names == names
    assert not dist.is_initialized()


@pytest.mark.parametrize("fails", [False, True], ids=["success", "error"])
def test_the_state_is_put_back(fails: bool) -> None:
    device, modes = torch.get_default_device(), list(_get_current_function_mode_stack())
    with pytest.raises(KeyError) if fails else contextlib.nullcontext(), \
            fake_world(parse_plan({"strategy": "fsdp", "world_size": 2})):
        torch.set_default_device("meta")
        if fails:
            raise KeyError("inside")
    assert not dist.is_initialized() and torch.get_default_device() == device
    # no device mode is left behind (even one for the same device would turn PyTorch's fast paths off)
    assert list(_get_current_function_mode_stack()) == modes


def test_a_default_device_the_caller_set_is_kept() -> None:
    torch.set_default_device("meta")
    try:
        with fake_world(parse_plan({"strategy": "fsdp", "world_size": 2})):
            torch.set_default_device("cpu")
        assert torch.get_default_device() == torch.device("meta")
    finally:
        torch.set_default_device(None)


def test_a_live_process_group_is_refused_before_anything_changes() -> None:
    dist.init_process_group("fake", rank=1, world_size=4)
    try:
        with pytest.raises(RuntimeError, match="backend 'fake', world size 4"), \
                fake_world(parse_plan({"strategy": "fsdp", "world_size": 2})):
            pass
        assert dist.is_initialized() and (dist.get_rank(), dist.get_world_size()) == (1, 4)
    finally:
        dist.destroy_process_group()


def test_the_rank_is_checked_and_defaults_to_the_largest() -> None:
    plan = parse_plan({"strategy": "fsdp", "world_size": 4})
    assert check_rank(plan, None) == LARGEST_RANK == 0 and check_rank(plan, 3) == 3
    with pytest.raises(ValueError, match=r"rank must be in \[0, 4\)"):
        check_rank(plan, 4)
    with pytest.raises(TypeError, match="rank must be an int"):
        check_rank(plan, "0")  # type: ignore[arg-type]
