"""``trace_memory`` and `MemoryTimeline`: the bytes of live tensors followed through dispatch, checked against hand
counts, against the same trace on ``meta``, and against ``measure_peak_memory`` of the same workloads."""

from __future__ import annotations

import json
import weakref
from typing import Any

import pytest
import torch
from integrations.third_party_models import import_torchvision, import_transformers
from torch import nn
from torch.utils._python_dispatch import _get_current_dispatch_mode_stack
from torch.utils.checkpoint import checkpoint

from torchscan import measure_peak_memory, trace_memory
from torchscan.memory.timeline import METHOD, MemoryTimeline, TraceMode
from torchscan.results import METRIC_RESULT_KEYS

MIB = 2**20


def value(result: dict[str, Any]) -> Any:
    assert set(result) == METRIC_RESULT_KEYS and result["method"] == METHOD and result["unit"] == "bytes"
    assert result["status"] == "complete"
    return result["value"]


def block(mebibytes: int, device: str = "cpu") -> torch.Tensor:
    return torch.empty(mebibytes * MIB, dtype=torch.uint8, device=device)


def three_blocks_then_one(device: str) -> Any:
    first, second, third = block(4, device), block(8, device), block(2, device)  # 14 MiB live: the peak
    del second
    return first, third, block(4, device)  # 10 MiB live


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_the_timeline_follows_each_storage_from_its_operator_to_its_free(device):
    result = trace_memory(lambda: three_blocks_then_one(device))
    assert [step["bytes"] // MIB for step in result["timeline"]] == [4, 12, 14, 10]
    assert {step["operator"] for step in result["timeline"]} == {"aten.empty"}
    assert value(result["peak"]) == 14 * MIB and result["peak_operator"] == {"index": 2, "operator": "aten.empty"}
    assert value(result["at_peak"]["created"]) == 14 * MIB and value(result["at_peak"]["pre_existing"]) == 0
    assert value(result["at_end"]["created"]) == 10 * MIB  # the returned blocks are live when the workload returns
    assert result["devices"] == [device] and result["device"] is None and result["operators"] == 4
    assert "kernel workspaces" in result["message"]
    json.dumps(result)


def test_the_traced_peak_of_hand_built_allocations_is_the_measured_one():
    traced = value(trace_memory(lambda: three_blocks_then_one("cpu"))["peak"])
    assert traced == measure_peak_memory(lambda: three_blocks_then_one("cpu"), device="cpu")["peak_bytes"]


def test_views_and_shared_storages_are_counted_once():
    def workload():
        base = block(1)
        return base[1:], base.view(2, -1).t(), base.as_strided((4,), (2,)), base.view(torch.int32)

    result = trace_memory(workload)
    assert value(result["peak"]) == MIB and value(result["at_end"]["created"]) == MIB
    assert [step["bytes"] for step in result["timeline"]] == [MIB] * len(result["timeline"])


def copy_free_and_allocate() -> Any:
    """A workload that copies a 1 MiB tensor which exists before it, frees that tensor, and allocates 2 MiB."""
    existing = [block(1)]

    def workload() -> Any:
        copy = existing[0] + 1  # 1 MiB created
        existing.clear()  # the 1 MiB that existed before is freed: back to the starting level
        return copy, block(2)  # 2 MiB above the start: the peak
    return workload


def test_tensors_that_existed_before_are_their_own_category_and_the_peak_is_above_them():
    result = trace_memory(copy_free_and_allocate())
    assert [step["bytes"] // MIB for step in result["timeline"]] == [1, 2]
    assert value(result["peak"]) == 2 * MIB
    # The CPU profiler records no free of a block allocated before it started, so the measured peak keeps the
    # freed MiB: the trace sees the free, the measurement cannot.
    assert measure_peak_memory(copy_free_and_allocate(), device="cpu")["peak_bytes"] == 3 * MIB
    assert value(result["at_peak"]["created"]) == 3 * MIB and value(result["at_peak"]["pre_existing"]) == 0
    assert value(result["pre_existing_freed_before_peak"]) == MIB


def test_the_timeline_goes_below_the_start_when_existing_tensors_are_freed():
    existing = [block(1)]

    def workload():
        total = existing[0].sum()  # 8 bytes (an int64)
        existing.clear()  # 1 MiB that existed before is freed
        return total, torch.ones(2)  # 8 bytes more

    result = trace_memory(workload)
    assert [step["bytes"] for step in result["timeline"]] == [8, 16 - MIB]
    assert value(result["peak"]) == 8 and value(result["at_peak"]["pre_existing"]) == MIB
    assert value(result["at_end"]["pre_existing"]) == 0 and value(result["at_end"]["created"]) == 16


def test_a_tensor_built_from_python_data_is_created_by_the_workload():
    result = trace_memory(lambda: torch.tensor([1.0, 2.0, 3.0]))
    assert result["timeline"] == [{"operator": "aten.lift_fresh", "bytes": 12}]
    assert value(result["at_peak"]["created"]) == 12


def test_a_result_without_a_storage_to_follow_makes_the_numbers_lower_bounds():
    result = trace_memory(lambda: torch.eye(3).to_sparse())
    assert result["untracked_outputs"] == 1
    assert result["peak"]["status"] == "partial" and result["peak"]["known_value"] == 36  # the dense eye only


def test_the_device_limits_what_is_followed():
    result = trace_memory(lambda: three_blocks_then_one("cpu"), device="meta")
    assert result["peak"]["status"] == "unavailable" and result["peak"]["value"] is None
    assert result["devices"] == [] and result["device"] == "meta"
    assert "did it run on another device?" in result["message"]
    mixed = trace_memory(lambda: (block(1), block(2, "meta")), device=torch.device("meta"))
    assert value(mixed["peak"]) == 2 * MIB and mixed["devices"] == ["meta"]
    assert value(trace_memory(lambda: (block(1), block(2, "meta")))["peak"]) == 3 * MIB


@pytest.mark.parametrize("device", ["not-a-device", 3.5])
def test_bad_devices_are_refused_before_the_workload_runs(device):
    ran = []
    with pytest.raises(ValueError, match="device"):
        trace_memory(lambda: ran.append(1), device=device)
    assert ran == []


def test_workload_must_be_callable():
    with pytest.raises(TypeError, match="workload"):
        trace_memory(torch.ones(3))


def test_nothing_stays_behind_after_a_trace_or_an_error():
    existing = torch.ones(16)
    error = RuntimeError("owner's failure")

    def failing():
        existing.mul(2)
        raise error

    with pytest.raises(RuntimeError) as raised:
        trace_memory(failing)
    assert raised.value is error
    trace_memory(lambda: existing.mul(2))
    assert _get_current_dispatch_mode_stack() == []
    assert weakref.getweakrefcount(existing.untyped_storage()) == 0


def test_a_caller_can_file_storages_under_categories_of_its_own():
    model = nn.Linear(256, 256)
    timeline = MemoryTimeline()
    with TraceMode(timeline):
        model(torch.ones(4, 256)).sum().backward()
    labelled = [timeline.label(parameter.grad, "gradients") for parameter in model.parameters()]
    assert timeline.label(torch.ones(3), "gradients") is False  # a storage the timeline never saw
    with pytest.raises(ValueError, match="category"):
        timeline.label(model.weight.grad, "")
    timeline.close()
    at_end = timeline.summary()["at_end"]
    assert labelled == [True, True] and value(at_end["gradients"]) == (256 * 256 + 256) * 4
    assert value(at_end["pre_existing"]) == (256 * 256 + 256) * 4  # the parameters


# --- models: the trace against the measured peak, CPU against meta ---------------------------------------------


def traced_and_measured(workload: Any) -> tuple[int, int]:
    workload()  # a first call, so that one-time allocations (thread pools, caches) are not in either number
    return value(trace_memory(workload)["peak"]), measure_peak_memory(workload, device="cpu")["peak_bytes"]


def inference(model: nn.Module, *args: Any) -> Any:
    model.eval()

    def forward() -> Any:
        with torch.no_grad():
            return model(*args)
    return forward


def resnet18() -> nn.Module:
    torch.manual_seed(0)
    return import_torchvision().models.resnet18()


def small_bert(layers: int) -> nn.Module:
    library = import_transformers()
    torch.manual_seed(0)
    return library.BertForSequenceClassification(library.BertConfig(
        vocab_size=1000, hidden_size=128, num_hidden_layers=layers, num_attention_heads=4, intermediate_size=512))


def test_a_no_grad_forward_of_resnet18_traces_its_measured_peak():
    # At 160 px the activations of the stem outweigh what the convolution kernels allocate inside themselves.
    traced, measured = traced_and_measured(inference(resnet18(), torch.randn(4, 3, 160, 160)))
    assert traced == pytest.approx(measured, rel=0.01)


@pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN")
def test_a_no_grad_forward_of_mobilenet_v2_traces_its_measured_peak_without_onednn_workspaces():
    model = import_torchvision().models.mobilenet_v2()
    forward = inference(model, torch.randn(2, 3, 32, 32))
    with torch.backends.mkldnn.flags(enabled=False):
        traced, measured = traced_and_measured(forward)
    assert traced == pytest.approx(measured, rel=0.01)
    traced, measured = traced_and_measured(forward)  # oneDNN's reorder buffers are kernel workspaces: not traced
    assert traced <= measured


def test_a_no_grad_forward_of_bert_traces_its_measured_peak():
    model = small_bert(2)
    traced, measured = traced_and_measured(inference(model, torch.randint(0, 1000, (2, 32))))
    assert traced == pytest.approx(measured, rel=0.01)


def adamw_step(model: nn.Module, inputs: torch.Tensor, labels: torch.Tensor) -> Any:
    """A training step (forward, loss, backward, AdamW step) from a clean start each time it runs: no gradients,
    no optimizer state, so that the traced and the measured run allocate the same."""
    model.train()

    def step() -> None:
        for parameter in model.parameters():
            parameter.grad = None
        optimizer = torch.optim.AdamW(model.parameters())
        output = model(inputs)
        nn.functional.cross_entropy(getattr(output, "logits", output), labels).backward()  # transformers' or not
        optimizer.step()
    return step


@pytest.mark.parametrize("case", ["resnet18", "bert"])
def test_an_adamw_training_step_traces_its_measured_peak(case):
    if case == "resnet18":
        step = adamw_step(resnet18(), torch.randn(2, 3, 64, 64), torch.tensor([1, 2]))
    else:
        step = adamw_step(small_bert(2), torch.randint(0, 1000, (2, 32)), torch.tensor([0, 1]))
    traced, measured = traced_and_measured(step)
    assert traced == pytest.approx(measured, rel=0.05)


def test_a_convolutional_training_step_traces_the_same_on_meta_as_on_cpu():
    timelines = []
    for device in ("cpu", "meta"):
        model = resnet18().to(device)
        images = torch.randn(2, 3, 64, 64, device=device)
        timelines.append(trace_memory(lambda: model(images).sum().backward()))  # noqa: B023 - runs at once
    cpu, meta = timelines
    assert cpu["timeline"] == meta["timeline"] and cpu["peak"] == meta["peak"]
    assert cpu["devices"] == ["cpu"] and meta["devices"] == ["meta"]


def test_an_evaluation_forward_on_meta_differs_from_cpu_only_by_batch_norm_statistics():
    # The meta kernel of native_batch_norm returns the per-channel mean and inverse deviation even in evaluation
    # mode, where the CPU kernel returns empty ones: 2 x 64 float32 more at the stem's batch norm, the peak.
    cpu, meta = (trace_memory(inference(resnet18().to(device), torch.randn(2, 3, 64, 64, device=device)))
                 for device in ("cpu", "meta"))
    assert [step["operator"] for step in cpu["timeline"]] == [step["operator"] for step in meta["timeline"]]
    assert {cpu_step["operator"] for cpu_step, meta_step in zip(cpu["timeline"], meta["timeline"], strict=True)
            if cpu_step != meta_step} == {"aten.native_batch_norm"}
    assert value(meta["peak"]) - value(cpu["peak"]) == 2 * 64 * 4


def test_activation_checkpointing_shrinks_the_bytes_saved_for_backward():
    batch, width, depth = 16, 256, 4
    activation = batch * width * 4
    torch.manual_seed(0)
    blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU())
                           for _ in range(depth))
    inputs = torch.randn(batch, width)

    def saved_after_forward(checkpointed: bool) -> int:
        def forward() -> torch.Tensor:
            hidden = inputs
            for layer in blocks:
                hidden = checkpoint(layer, hidden, use_reentrant=False) if checkpointed else layer(hidden)
            return hidden.sum()  # the loss keeps the graph, and with it the saved tensors, alive
        return value(trace_memory(forward)["at_end"]["created"])

    # Without checkpointing each block saves both ReLU outputs (the second Linear reads the first one); with it,
    # only the inputs of blocks 2 to 4 stay. Both keep the 4-byte loss.
    assert saved_after_forward(False) == 2 * depth * activation + 4
    assert saved_after_forward(True) == (depth - 1) * activation + 4
