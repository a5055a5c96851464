"""The sharded step from the public entry points: ``crawl_training_step(..., parallel=...)``'s ``training.parallel``
section, and ``fit_devices`` across world sizes, with their errors."""

from __future__ import annotations

import pytest
import torch
from sharded_models import adamw, measured_peak, mlp, mlp_call

from torchscan import crawl_training_step, fit_devices
from torchscan.parallel.fit import device_bytes
from torchscan.schema import validate_report

PLAN = {"strategy": "fsdp", "world_size": 4}


def test_a_training_report_carries_the_per_device_peak_of_the_sharded_step():
    model = mlp()
    (args, kwargs, loss) = mlp_call()
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    report = crawl_training_step(model, args=args, kwargs=kwargs, loss=loss, optimizer=adamw, parallel=PLAN)
    validate_report(report)
    parallel = report["training"]["parallel"]
    assert parallel["plan"]["strategy"] == "fsdp" and parallel["plan"]["world_size"] == 4
    assert parallel["per_device"]["peak"]["value"] == measured_peak(mlp, mlp_call(), PLAN)
    assert parallel["collectives"]["matches"]
    assert all(torch.equal(before[name], tensor) for name, tensor in model.state_dict().items())
    assert not torch.distributed.is_initialized()


def test_a_plan_needs_an_optimizer_and_its_keys_are_checked_before_anything_runs():
    model = mlp()
    (args, _, _) = mlp_call()
    with pytest.raises(ValueError, match="parallel needs an optimizer"):
        crawl_training_step(model, args=args, parallel=PLAN)
    with pytest.raises(ValueError, match="unknown key 'world'"):
        crawl_training_step(model, args=args, optimizer="adamw", parallel={"strategy": "fsdp", "world": 4})


def test_fit_devices_gives_the_peak_at_each_world_size_and_the_smallest_that_fits():
    with torch.device("meta"):
        model = mlp()
    x = torch.empty(16, 256, device="meta")
    sizes = [1, 2, 4, 8]
    wide = fit_devices(model, args=(x,), parallel={"strategy": "fsdp"}, world_sizes=sizes, device_memory=10**12)
    peaks = [point["per_device_peak"]["value"] for point in wide["points"]]
    assert [point["world_size"] for point in wide["points"]] == sizes
    assert peaks == sorted(peaks, reverse=True) and len(set(peaks)) == len(peaks)  # sharding shrinks each device
    assert wide["smallest_world_size"] == 1 and wide["reason"] is None
    # a device between the peaks at 2 and 4 ranks, with 10% kept free
    memory = int((peaks[1] + peaks[2]) / 2 / 0.9)
    tight = fit_devices(model, args=(x,), parallel={"strategy": "fsdp"}, world_sizes=sizes, device_memory=memory)
    assert tight["smallest_world_size"] == 4 and tight["usable"] == int(memory * 0.9)
    none = fit_devices(model, args=(x,), parallel={"strategy": "fsdp"}, world_sizes=[2], device_memory="1MB")
    assert none["smallest_world_size"] is None and "even at world size 2" in none["reason"]


@pytest.mark.parametrize(("value", "expected"), [("80GB", 80 * 10**9), ("80 GiB", 80 * 2**30), (141 * 10**9, 141e9),
                                                 ("1.5TB", 1.5e12)])
def test_device_memory_is_read_in_either_unit(value, expected):
    assert device_bytes(value) == int(expected)


@pytest.mark.parametrize(("keywords", "message"), [
    ({"device_memory": "80 gigs"}, "device_memory must be a size such as '80GB'"),
    ({"device_memory": 0}, "device_memory must be more than 0 bytes"),
    ({"world_sizes": []}, "world_sizes must be a non-empty list of ints >= 1"),
    ({"world_sizes": [0, 2]}, "world_sizes must be a non-empty list"),
    ({"headroom": 1.0}, "headroom must be a fraction in"),
    ({"parallel": {"strategy": "zero3"}}, "'strategy' must be one of"),
])
def test_fit_devices_names_the_bad_argument(keywords, message):
    arguments = {"parallel": {"strategy": "fsdp"}, "world_sizes": [2], "device_memory": "80GB", **keywords}
    with pytest.raises(ValueError, match=message):
        fit_devices(mlp(), args=(torch.randn(2, 256),), **arguments)
