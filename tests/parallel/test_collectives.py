"""The closed form of a plan's collectives against hand counts, and the operators the log recognizes (the sharded
step's tests hold the log's observations equal to the closed form on real FSDP2 steps)."""

from __future__ import annotations

import pytest
import torch
from sharded_models import BlockMLP, llama
from torch import nn

from torchscan.parallel.collectives import (
    ALL_GATHER,
    CollectiveLog,
    collective_formula,
    padded_elements,
    parameter_groups,
    ring_bytes_sent,
)
from torchscan.parallel.plan import parse_plan

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::FutureWarning")
#: One block of the MLP: 1024 x 256 + 1024 + 256 x 1024 + 256 elements.
BLOCK = 525_568


def formula(model: nn.Module, **spec: object) -> dict[str, tuple[int, int]]:
    totals = collective_formula(model, parse_plan(spec))
    return {kind: (entry["count"], entry["bytes"]) for kind, entry in totals.items()}


def test_fsdp_gathers_each_block_twice_and_reduces_it_once() -> None:
    with torch.device("meta"):
        model = BlockMLP()
    assert formula(model, strategy="fsdp", world_size=8) == {
        "all_gather": (8, 8 * BLOCK * 4), "reduce_scatter": (4, 4 * BLOCK * 4), "all_reduce": (0, 0)}
    assert formula(model, strategy="fsdp_no_reshard", world_size=8)["all_gather"] == (4, 4 * BLOCK * 4)
    bf16 = formula(model, strategy="fsdp", world_size=8, mixed_precision={"param_dtype": "bf16"})
    assert bf16["all_gather"] == (8, 8 * BLOCK * 2) and bf16["reduce_scatter"] == (4, 4 * BLOCK * 2)
    fp32_reduce = formula(model, strategy="fsdp", world_size=8,
                          mixed_precision={"param_dtype": "bf16", "reduce_dtype": "float32"})
    assert fp32_reduce["reduce_scatter"] == (4, 4 * BLOCK * 4)


def test_replication_all_reduces_the_shard_of_each_group() -> None:
    with torch.device("meta"):
        model = BlockMLP()
    assert formula(model, strategy="hsdp", world_size=8, shard_group_size=4) == {
        "all_gather": (8, 8 * BLOCK * 4), "reduce_scatter": (4, 4 * BLOCK * 4), "all_reduce": (4, BLOCK * 4)}
    assert formula(model, strategy="ddp", world_size=8) == {
        "all_gather": (0, 0), "reduce_scatter": (0, 0), "all_reduce": (4, 4 * BLOCK * 4)}


def test_the_root_keeps_its_parameters_from_the_forward_to_the_backward() -> None:
    model = llama()
    groups = parameter_groups(model, parse_plan({"strategy": "fsdp", "world_size": 2}))
    assert [group.is_root for group in groups] == [False, False, True]
    root = sum(p.numel() for p in groups[-1].parameters)
    assert root == 2 * 1000 * 128 + 128  # embeddings, the LM head, the final norm
    gathers = formula(model, strategy="fsdp", world_size=2)["all_gather"]
    layer = sum(p.numel() for p in groups[0].parameters)
    assert gathers == (5, (2 * 2 * layer + root) * 4)


def test_dimension_zero_is_padded_to_the_shard_group() -> None:
    assert padded_elements(torch.empty(10, 3), 4) == 12 * 3
    assert padded_elements(torch.empty(8, 3), 4) == 24
    assert padded_elements(torch.empty(10, 3), 1) == 30
    assert padded_elements(torch.empty(()), 4) == 4


def test_ring_bytes_are_what_one_rank_sends() -> None:
    plan = parse_plan({"strategy": "hsdp", "world_size": 8, "shard_group_size": 4})
    totals = {"all_gather": {"count": 1, "bytes": 400}, "reduce_scatter": {"count": 1, "bytes": 400},
              "all_reduce": {"count": 1, "bytes": 100}}
    assert ring_bytes_sent(totals, plan) == {"all_gather": 300, "reduce_scatter": 300, "all_reduce": 100}


def test_the_log_reads_the_functional_collectives_too() -> None:
    log = CollectiveLog()
    gathered = torch.empty(8, 4)
    log.record(torch.ops._c10d_functional.all_gather_into_tensor.default, (torch.empty(2, 4), 4, "0"), {},
               gathered)
    log.record(torch.ops.aten.add.Tensor, (gathered, gathered), {}, gathered)
    assert log.totals()[ALL_GATHER] == {"count": 1, "bytes": 128}
