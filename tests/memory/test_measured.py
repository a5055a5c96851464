"""``measure_peak_memory``: the peak bytes of an owner-controlled workload, or a clear refusal."""

from __future__ import annotations

import json

import pytest
import torch
from integrations.third_party_models import import_torchvision
from torch import nn

from torchscan import measure_peak_memory
from torchscan.memory.measured import peak_of_allocations

MIB = 2**20


def test_a_four_mib_allocation_shows_in_the_cpu_peak():
    def workload():
        block = torch.ones(MIB, dtype=torch.float32)  # 2**20 elements * 4 bytes = 4 MiB
        return float(block[0])

    result = measure_peak_memory(workload, device="cpu")
    assert result["device"] == "cpu" and result["unit"] == "bytes" and result["status"] == "complete"
    assert isinstance(result["peak_bytes"], int) and result["peak_bytes"] >= 4 * MIB
    assert result["method"] == "profiler_memory_records"
    assert result["observed"]["allocations"] >= 1 and result["observed"]["frees"] >= 1  # the block is freed
    assert "outside PyTorch's allocator" in result["message"]  # what the number does not cover
    json.dumps(result)


def test_the_peak_counts_tensors_alive_at_the_same_time():
    def two_at_once():
        first = torch.ones(MIB)
        second = torch.ones(MIB)
        return float(first[0] + second[0])

    def one_after_another():
        for _ in range(2):
            block = torch.ones(MIB)
            del block

    together = measure_peak_memory(two_at_once, device=torch.device("cpu"))["peak_bytes"]
    apart = measure_peak_memory(one_after_another, device="cpu")["peak_bytes"]
    assert together >= 8 * MIB
    assert 4 * MIB <= apart < 8 * MIB


def test_the_cpu_peak_follows_allocations_and_frees_in_time_order():
    def workload():
        first = torch.empty(4 * MIB, dtype=torch.uint8)
        second = torch.empty(8 * MIB, dtype=torch.uint8)
        third = torch.empty(2 * MIB, dtype=torch.uint8)  # 14 MiB live: the peak
        del second
        fourth = torch.empty(4 * MIB, dtype=torch.uint8)  # 10 MiB live
        return first, third, fourth

    result = measure_peak_memory(workload, device="cpu")
    assert result["peak_bytes"] == 14 * MIB
    assert result["observed"] == {"allocations": 4, "frees": 4}  # the three returned blocks are freed afterwards


def test_memory_freed_inside_a_profiler_range_still_counts_at_its_time():
    # The profiler books a range's net memory (here -4 MiB) at the range's start; the peak reads the allocator's
    # own records instead, so the 4 MiB block allocated and freed inside the range is the peak.
    def workload():
        with torch.profiler.record_function("scratch"):
            scratch = torch.empty(4 * MIB, dtype=torch.uint8)
            del scratch
        return torch.empty(MIB, dtype=torch.uint8)

    assert measure_peak_memory(workload, device="cpu")["peak_bytes"] == 4 * MIB


def test_an_adamw_step_of_resnet18_peaks_above_the_state_it_leaves():
    # Gradients and AdamW's two moments are all allocated during the first step and live at its end; the step
    # also needs temporaries the size of a parameter while they live (a range-net reading reported the end level).
    torchvision = import_torchvision()
    torch.manual_seed(0)
    model = torchvision.models.resnet18()
    optimizer = torch.optim.AdamW(model.parameters())
    images, labels = torch.randn(2, 3, 64, 64), torch.tensor([1, 2])

    def step():
        nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()

    peak = measure_peak_memory(step, device="cpu")["peak_bytes"]
    parameters = list(model.parameters())
    left_by_the_step = sum(3 * p.nbytes + optimizer.state[p]["step"].nbytes for p in parameters)
    assert peak >= left_by_the_step + max(p.nbytes for p in parameters)


def test_repeated_measurements_of_one_training_step_agree():
    # Each step frees the previous step's gradients and optimizer state. The CPU allocator reports a free with the
    # size it last recorded for the address, which is stale for blocks allocated while no profiler ran (the
    # unmeasured step in between): such frees must not lower the level.
    model = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 512))
    batch = torch.randn(32, 512)

    def step():
        for parameter in model.parameters():
            parameter.grad = None
        optimizer = torch.optim.AdamW(model.parameters())
        model(batch).square().mean().backward()
        optimizer.step()

    peaks = []
    for _ in range(3):
        peaks.append(measure_peak_memory(step, device="cpu")["peak_bytes"])
        step()  # unmeasured
    assert peaks[0] == peaks[1] == peaks[2]


def test_only_frees_of_blocks_allocated_in_the_workload_count():
    records = [(1, 100), (2, -70), (3, 50), (1, -100), (4, 30), (3, -50)]  # address 2: a block from before
    assert peak_of_allocations(records) == (150, 3, 2)
    assert peak_of_allocations([(5, -40), (6, 10)]) == (10, 1, 0)


def test_a_training_step_runs_as_the_owner_wrote_it():
    model = nn.Linear(64, 64)
    model.train()
    seen = []
    model.register_forward_pre_hook(lambda module, args: seen.append((module.training, torch.is_grad_enabled())))

    def step():
        model(torch.ones(8, 64)).sum().backward()

    result = measure_peak_memory(step, device="cpu")
    assert seen == [(True, True)]
    assert model.weight.grad is not None
    assert result["peak_bytes"] > 0


def test_workload_errors_propagate():
    error = RuntimeError("owner's failure")

    def failing():
        raise error

    with pytest.raises(RuntimeError) as raised:
        measure_peak_memory(failing, device="cpu")
    assert raised.value is error


@pytest.mark.parametrize("device", ["meta", torch.device("meta")])
def test_unsupported_devices_are_refused_clearly(device):
    ran = []
    with pytest.raises(ValueError, match="meta"):
        measure_peak_memory(lambda: ran.append(1), device=device)
    assert ran == []


@pytest.mark.parametrize("device", ["not-a-device", 3.5])
def test_bad_device_values_are_refused(device):
    with pytest.raises(ValueError, match="device"):
        measure_peak_memory(lambda: None, device=device)


def test_workload_must_be_callable():
    with pytest.raises(TypeError, match="workload"):
        measure_peak_memory(torch.ones(3), device="cpu")


def test_device_is_required():
    with pytest.raises(TypeError):
        measure_peak_memory(lambda: None)  # type: ignore[call-arg]


@pytest.mark.parametrize("device", ["cpu:0", torch.device("cpu", 0), torch.device("cpu")])
def test_every_cpu_device_is_reported_as_cpu(device):
    result = measure_peak_memory(lambda: torch.ones(1024), device=device)
    assert result["device"] == "cpu" and result["status"] == "complete"


@pytest.mark.parametrize("workload", [
    lambda: None,
    lambda: sum(range(1000)),  # Python objects only
    lambda: torch.empty(MIB, device="meta"),  # the work happens on another device than the one measured
])
def test_a_workload_without_observed_allocations_has_no_peak(workload):
    result = measure_peak_memory(workload, device="cpu")
    assert result["status"] == "unavailable" and result["peak_bytes"] is None
    assert result["observed"] == {"allocations": 0, "frees": 0}
    assert "no PyTorch allocation on cpu was observed" in result["message"]
    assert "did it run on another device?" in result["message"]
    json.dumps(result)


def missing_cuda_devices() -> list[str]:
    if not torch.cuda.is_available():
        return ["cuda", "cuda:0", "cuda:1"]
    return [f"cuda:{torch.cuda.device_count()}"]


@pytest.mark.parametrize("device", missing_cuda_devices())
def test_a_cuda_device_this_machine_lacks_is_refused_by_name(device):
    ran = []
    with pytest.raises(ValueError, match=rf"device='{device}' is not available"):
        measure_peak_memory(lambda: ran.append(1), device=device)
    with pytest.raises(ValueError, match=rf"device='{device}'"):
        measure_peak_memory(lambda: ran.append(1), device=torch.device(device))
    assert ran == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_allocation_shows_in_the_cuda_peak_with_an_explicit_index():
    def workload():
        block = torch.ones(MIB, device="cuda")
        return float(block[0])

    result = measure_peak_memory(workload, device="cuda")
    assert result["device"] == f"cuda:{torch.cuda.current_device()}" and result["status"] == "complete"
    assert result["method"] == "cuda_allocator_peak" and result["peak_bytes"] >= 4 * MIB
    assert result["observed"]["allocations"] >= 1
    idle = measure_peak_memory(lambda: torch.ones(8), device="cuda:0")  # the work ran on the CPU
    assert idle["status"] == "unavailable" and idle["peak_bytes"] is None
