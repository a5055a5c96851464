"""``measure_time``: its statistics and their shape, its refusals (naming the argument, before the workload runs),
and the global state it leaves as found. No assertion here depends on how fast anything runs."""

from __future__ import annotations

import gc
import json

import pytest
import torch

from torchscan import measure_time
from torchscan.timing.measured import spread

KEYS = {"device", "device_name", "threads", "method", "unit", "warmup", "repeats", "median", "q1", "q3", "iqr", "min",
        "max", "samples"}


class Counter:
    """A workload that counts its runs."""

    def __init__(self) -> None:
        self.runs = 0

    def __call__(self) -> None:
        self.runs += 1
        torch.ones(64).sum()


def test_the_result_names_the_device_and_its_spread():
    workload = Counter()
    result = measure_time(workload, device="cpu", warmup=2, repeats=5)
    assert set(result) == KEYS and json.loads(json.dumps(result)) == result
    assert workload.runs == 2 + 5  # warm-up runs are run, not timed
    assert result["device"] == "cpu" and result["device_name"] and result["threads"] == torch.get_num_threads()
    assert (result["method"], result["unit"], result["warmup"], result["repeats"]) == ("wall_clock", "seconds", 2, 5)
    samples = result["samples"]
    assert len(samples) == 5 and all(sample > 0 for sample in samples)
    assert result["min"] == min(samples) and result["max"] == max(samples)
    assert result["min"] <= result["q1"] <= result["median"] <= result["q3"] <= result["max"]
    assert result["iqr"] == pytest.approx(result["q3"] - result["q1"])


def test_cpu_is_the_default_device_without_an_accelerator_and_cpu_0_is_the_cpu():
    if torch.accelerator.is_available():
        with pytest.raises(ValueError, match="device must be named"):
            measure_time(Counter())
    else:
        assert measure_time(Counter(), repeats=1)["device"] == "cpu"
    assert measure_time(Counter(), device="cpu:0", warmup=0, repeats=1)["device"] == "cpu"


def test_the_statistics_of_known_samples():
    assert spread([5.0, 1.0, 3.0, 2.0, 4.0]) == {"median": 3.0, "q1": 2.0, "q3": 4.0, "iqr": 2.0, "min": 1.0,
                                                 "max": 5.0}
    assert spread([0.5]) == {"median": 0.5, "q1": 0.5, "q3": 0.5, "iqr": 0.0, "min": 0.5, "max": 0.5}


@pytest.mark.parametrize(("arguments", "error", "message"), [
    ({"workload": 3}, TypeError, "workload must be a callable"),
    ({"repeats": 0}, ValueError, "repeats must be at least 1"),
    ({"warmup": -1}, ValueError, "warmup must be at least 0"),
    ({"warmup": True}, TypeError, "warmup must be an int"),
    ({"repeats": 2.0}, TypeError, "repeats must be an int"),
    ({"device": "meta"}, ValueError, "device='meta' runs no kernels"),
    ({"device": "not-a-device"}, ValueError, "device must be 'cpu' or an accelerator"),
])
def test_bad_arguments_are_refused_before_the_workload_runs(arguments, error, message):
    workload = Counter()
    call = {"workload": workload, "device": "cpu", **arguments}
    with pytest.raises(error, match=message):
        measure_time(call.pop("workload"), **call)
    assert workload.runs == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="a machine without CUDA refuses it")
def test_an_absent_accelerator_is_refused():
    with pytest.raises(ValueError, match="device='cuda' is not available"):
        measure_time(Counter(), device="cuda")


@pytest.mark.parametrize("collector_on", [True, False])
def test_global_state_is_left_as_found_also_when_the_workload_raises(collector_on):
    def failing() -> None:
        assert not gc.isenabled()  # paused while timed
        raise RuntimeError("the workload failed")

    was = gc.isenabled()
    threads = torch.get_num_threads()
    try:
        gc.enable() if collector_on else gc.disable()
        measure_time(Counter(), device="cpu", warmup=0, repeats=2)
        assert gc.isenabled() is collector_on
        with pytest.raises(RuntimeError, match="the workload failed"):
            measure_time(failing, device="cpu", warmup=0, repeats=1)
        assert gc.isenabled() is collector_on
        assert torch.is_grad_enabled() and torch.get_num_threads() == threads
    finally:
        gc.enable() if was else gc.disable()
