"""A fake world: a fake process group of the plan's size, joined as one rank, and its device mesh, for a block.

PyTorch ships a fake backend (``"fake"``, in ``torch.distributed.Backend``): its process group accepts every
collective and moves no data, so one process can run FSDP2 exactly as one rank of an N-rank job runs it (the same
sharding, the same buffers, the same collectives issued), with nothing to connect to. ``init_process_group`` with
``backend="fake"`` and no store builds the store that backend needs itself, so only public calls are made here.

The process-group state is global to the process, so the world refuses to start when a default process group
already exists (one this process joined for real work must not be replaced or torn down by an analysis). After the
block (also when it raises) the fake group and every group made for the mesh are destroyed and the default device
is put back: ``torch.distributed.is_initialized()`` and ``torch.get_default_device()`` read as before.

Which rank to analyze: FSDP2 shards dimension 0 of every parameter as ``torch.chunk`` does, so the first shard
ranks get ``ceil(d / shard_size)`` rows and the last ones what is left (possibly nothing). Every rank's sharded
parameter storage is padded to the full chunk, but its gradient shard and optimizer state are not, so shard rank 0,
which is global rank 0 (`LARGEST_RANK`), holds the most when shards are uneven.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from .plan import ParallelPlan

BACKEND = "fake"
#: The global rank whose shards are the largest when a dimension does not divide evenly (see the module's text).
LARGEST_RANK = 0
#: The device the mesh stands for: the fake-tensor stand-ins and the real measurements run on CPU.
MESH_DEVICE = "cpu"


@dataclass(frozen=True)
class FakeWorld:
    """The fake world of one analysis: the plan, the analyzed rank and the device mesh FSDP2 shards over."""

    plan: ParallelPlan
    rank: int
    mesh: DeviceMesh


def check_rank(plan: ParallelPlan, rank: int | None) -> int:
    """``rank`` checked against the plan's world (None: `LARGEST_RANK`)."""
    if rank is None:
        return LARGEST_RANK
    if isinstance(rank, bool) or not isinstance(rank, int):
        raise TypeError(f"rank must be an int or None (the largest rank), got {type(rank).__name__}")
    if not 0 <= rank < plan.world_size:
        raise ValueError(f"rank must be in [0, {plan.world_size}) for world_size {plan.world_size}, got {rank}")
    return rank


@contextmanager
def fake_world(plan: ParallelPlan, rank: int | None = None) -> Iterator[FakeWorld]:
    """Join a fake process group of ``plan.world_size`` ranks as ``rank`` (default `LARGEST_RANK`) and build the
    plan's device mesh (1-D, or ``("replicate", "shard")`` for hsdp and ddp) for the length of the block.

    Raises a ``RuntimeError`` before touching anything when a default process group exists already. Afterwards, also
    after an error, no process group is left and the default device is the one the caller had.
    """
    chosen = check_rank(plan, rank)
    _refuse_existing_group()
    device = torch.get_default_device()
    dist.init_process_group(BACKEND, rank=chosen, world_size=plan.world_size)
    try:
        yield FakeWorld(plan, chosen, _mesh(plan))
    finally:
        dist.destroy_process_group()
        _restore_default_device(device)


def _restore_default_device(device: torch.device) -> None:
    """Put back the caller's default device, and only if the block changed it: setting it (even to ``cpu``) enters
    a device mode for every later torch call, which PyTorch's fast paths (fused attention's) refuse to run under."""
    if torch.get_default_device() == device:
        return
    torch.set_default_device(None)
    if torch.get_default_device() != device:
        torch.set_default_device(device)


def _refuse_existing_group() -> None:
    if not dist.is_available():
        raise RuntimeError("this torch build has no torch.distributed: a sharded analysis needs its fake backend")
    if dist.is_initialized():
        raise RuntimeError(
            f"a default process group exists already (backend {dist.get_backend()!r}, world size "
            f"{dist.get_world_size()}): the sharded analysis joins a fake process group of its own and never "
            "replaces or tears down a live one; run it in a process without a process group (a fresh Python "
            "process, or a torchscan-report worker)")


def _mesh(plan: ParallelPlan) -> DeviceMesh:
    """The plan's mesh over the fake group (built outside any fake-tensor mode: DeviceMesh reads real tensors)."""
    shape = plan.mesh_shape
    names = ("shard",) if len(shape) == 1 else ("replicate", "shard")
    return init_device_mesh(MESH_DEVICE, shape, mesh_dim_names=names)
