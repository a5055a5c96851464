"""TorchScan's per-device peak of a sharded training step beside the measurement and the other estimators.

Run from the repository root: ``python benchmarks/sharded_peers.py [--models mlp llama] [--world-sizes 2 4 8]
[--llama7b 8 16 32 64]``.

For the tests' 4-block MLP and 2-layer transformers Llama with grouped-query attention
(``tests/parallel/sharded_models.py``), AdamW, fp32, at each world size, with FSDP2's full sharding (``fsdp``,
ZeRO-3-like) and without resharding after the forward (``fsdp_no_reshard``, ZeRO-2-like), it prints per device:

- **TorchScan**: `torchscan.parallel.step.sharded_step`'s ``per_device.peak`` (the steady-state step, rank 0,
  PyTorch's FSDP2 on fake-tensor stand-ins over a fake process group), what ``crawl_training_step(...,
  parallel=plan)`` reports;
- **measured**: the same plan's third step on real CPU tensors over the same fake process group, the bytes the rank
  holds at its start plus `torchscan.measure_peak_memory` of the step (``sharded_models.measured_peak``, the tests'
  reference);
- **FSDPMemTracker**: PyTorch's private ``torch.distributed._tools.fsdp2_mem_tracker.FSDPMemTracker`` around the
  same third step of the same real run (built after two steps with the model and the optimizer, the inputs given
  to ``track_inputs``): the ``Total`` of its ``"peak"`` snapshot. A benchmark dependency only: the package never
  imports it;
- **DeepSpeed ZeRO-3 / ZeRO-2**: the model-states rule of DeepSpeed's ``estimate_zero3_model_states_mem_needs`` and
  ``estimate_zero2_model_states_mem_needs`` (https://deepspeed.readthedocs.io/en/latest/memory.html), without
  offload, per GPU: ZeRO-3 ``4 * largest_layer_params + 18 * total_params / world_size``, ZeRO-2
  ``4 * total_params + 16 * total_params / world_size`` (the largest layer: the module with the most parameters of
  its own; shared parameters counted once). DeepSpeed is not installed: the formula is implemented here;
- **accelerate 4x**: the Hugging Face model-memory rule (``accelerate estimate-memory`` and the Hub's memory
  calculator: "when training with Adam, you can expect roughly 4x the reported results": 1x weights, 1x gradients,
  2x optimizer), 4 times the weights' bytes, for one device: it has no world size.

With ``--llama7b`` it adds Llama-2-7B (transformers' config: nothing downloaded), bf16 parameters over fp32
shards, AdamW (``foreach``, an accelerator's default), 4,096 tokens per device with the model's own loss, ``fsdp``,
at the given world sizes (default 8 16 32 64; about two minutes each here): TorchScan's analysis of the model built
on ``meta``, FSDPMemTracker around the second step of the same plan with the model built under a
``FakeTensorMode`` (as its documentation suggests for models that do not fit; the first step creates the
optimizer's state), and the rules. No measurement: the step does not fit this machine.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "site_models"), str(ROOT / "tests" / "integrations"),
                str(ROOT / "tests" / "parallel")]

from sharded_models import MODELS, adamw, measured_peak  # noqa: E402

from torchscan.parallel.fake_world import fake_world  # noqa: E402
from torchscan.parallel.plan import parse_plan  # noqa: E402
from torchscan.parallel.sharding import shard, trainable  # noqa: E402
from torchscan.parallel.step import loop_step, sharded_step  # noqa: E402

MB = 10**6
STRATEGIES = ("fsdp", "fsdp_no_reshard")


# -- the rules -----------------------------------------------------------------------------------------------------


def parameter_counts(model: nn.Module) -> tuple[int, int, int]:
    """(total parameters, the largest layer's own parameters, the weights' bytes), each shared tensor once, as
    DeepSpeed's ``model_to_params`` and accelerate's ``calculate_maximum_sizes`` count them."""
    unique = {id(p): p for p in model.parameters()}
    total = sum(p.numel() for p in unique.values())
    largest = max(sum(p.numel() for p in module.parameters(recurse=False)) for module in model.modules())
    weights = sum(p.numel() * p.element_size() for p in unique.values())
    return total, largest, weights


def deepspeed_zero3(total: int, largest: int, world_size: int) -> int:
    """``estimate_zero3_model_states_mem_needs(..., cpu_offload=False)``'s bytes per GPU."""
    return 4 * largest + int(18 * total / world_size)


def deepspeed_zero2(total: int, world_size: int) -> int:
    """``estimate_zero2_model_states_mem_needs(..., cpu_offload=False)``'s bytes per GPU."""
    return 4 * total + int(16 * total / world_size)


def accelerate_adam(weights: int) -> int:
    """The Hugging Face rule for training with Adam: 4 times the weights (weights, gradients, two moments)."""
    return 4 * weights


# -- FSDPMemTracker --------------------------------------------------------------------------------------------------


def tracker_peak(model_name: str, plan: dict[str, Any]) -> int:
    """``FSDPMemTracker``'s peak (the ``Total`` of its peak snapshot) of the third step of the real run that
    ``measured_peak`` measures (real CPU tensors, FSDP2 over the fake process group)."""
    build, call = MODELS[model_name]
    args, kwargs, loss = call()
    with fake_world(parse_plan(plan)) as world:
        model = build()
        shard(model, world)
        optimizer = adamw(trainable(model))
        for _ in range(2):
            loop_step(model, args, kwargs, loss, optimizer)
        return tracked_step_peak(model, args, kwargs, loss, optimizer)


def tracker_peak_fake(build: Any, call: tuple, plan: dict[str, Any]) -> int:
    """``FSDPMemTracker``'s peak of the second (steady-state) step, everything under a ``FakeTensorMode``: the
    model built by ``build()``, sharded over the fake process group, AdamW ``foreach``."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    args, kwargs, loss = call
    with fake_world(parse_plan(plan)) as world, FakeTensorMode(allow_non_fake_inputs=True):
        model = build()
        shard(model, world)
        optimizer = torch.optim.AdamW(trainable(model), foreach=True)
        loop_step(model, args, kwargs, loss, optimizer)
        return tracked_step_peak(model, args, kwargs, loss, optimizer)


def tracked_step_peak(model: Any, args: tuple, kwargs: dict[str, Any], loss: Any, optimizer: Any) -> int:
    """``FSDPMemTracker``'s peak (the ``Total`` of its peak snapshot) of one more `loop_step`."""
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

    tracker = FSDPMemTracker(model, optimizer)
    tracker.track_inputs((args, kwargs))
    with tracker:
        loop_step(model, args, kwargs, loss, optimizer)
    snapshot = tracker.get_tracker_snapshot("peak")
    return max(device["Total"] for device in snapshot.values())


# -- the tables ------------------------------------------------------------------------------------------------------


def small_models(options: argparse.Namespace) -> None:
    header = (f"{'model':<6} {'plan':<20} {'TorchScan':>10} {'measured':>10} {'ratio':>6} {'FSDPMemTr':>10} "
              f"{'ratio':>6} {'DS rule':>10} {'ratio':>6} {'accel 4x':>10} {'ratio':>6}")
    print("Per-device peak, MB (10^6 bytes); each ratio is the estimator's over the measured peak; the last column "
          "says whether the first three are equal to the byte")
    print(header)
    print("-" * len(header))
    for model_name in options.models:
        build, call = MODELS[model_name]
        total, largest, weights = parameter_counts(build())
        print(f"{model_name}: {total:,} parameters, largest layer {largest:,}, weights {weights:,} bytes")
        for size in options.world_sizes:
            for strategy in STRATEGIES:
                plan = {"strategy": strategy, "world_size": size}
                args, kwargs, loss = call()
                ours = sharded_step(build(), args, kwargs, loss, adamw, plan)["per_device"]["peak"]["value"]
                measured = measured_peak(build, call(), plan)
                tracked = tracker_peak(model_name, plan)
                rule = (deepspeed_zero3(total, largest, size) if strategy == "fsdp"
                        else deepspeed_zero2(total, size))
                label = f"{'ZeRO-3' if strategy == 'fsdp' else 'ZeRO-2'}"
                accel = accelerate_adam(weights)
                cells = " ".join(f"{value / MB:>10.3f} {value / measured:>6.3f}"
                                 for value in (tracked, rule, accel))
                same = "TorchScan == measured == FSDPMemTracker" if ours == measured == tracked else "bytes differ"
                print(f"{model_name:<6} {f'{strategy} x{size}':<20} {ours / MB:>10.3f} {measured / MB:>10.3f} "
                      f"{ours / measured:>6.3f} {cells}  ({label}; {same})", flush=True)


def llama7b(world_sizes: list[int]) -> None:
    from zoo.hf_llama import llama2_7b

    with torch.device("meta"):
        model = llama2_7b()
    total, largest, weights = parameter_counts(model)
    ids = torch.zeros(1, 4096, dtype=torch.long)
    call = ((), {"input_ids": ids, "labels": ids, "use_cache": False}, lambda output: output.loss)
    print(f"\nLlama-2-7B (fp32 shards, bf16 parameters, AdamW, 4,096 tokens per device, fsdp): {total:,} "
          f"parameters, largest layer {largest:,}; per device, GB (10^9 bytes)")
    header = (f"{'world size':>10} {'TorchScan':>10} {'FSDPMemTr':>10} {'DS ZeRO-3':>10} {'DS ZeRO-2':>10} "
              f"{'accel 4x':>10} {'seconds':>15}")
    print(header)
    print("-" * len(header))
    for size in world_sizes:
        plan = {"strategy": "fsdp", "world_size": size,
                "mixed_precision": {"param_dtype": "bfloat16", "reduce_dtype": "float32"}}
        began = time.perf_counter()
        section = sharded_step(model, *call[:2], call[2], "adamw", plan)
        ours_seconds = time.perf_counter() - began
        tracked = tracker_peak_fake(llama2_7b, call, plan)
        tracker_seconds = time.perf_counter() - began - ours_seconds
        ours = section["per_device"]["peak"]["value"]
        print(f"{size:>10} {ours / 1e9:>10.2f} {tracked / 1e9:>10.2f} "
              f"{deepspeed_zero3(total, largest, size) / 1e9:>10.2f} {deepspeed_zero2(total, size) / 1e9:>10.2f} "
              f"{accelerate_adam(weights) / 1e9:>10.2f} {ours_seconds:>6.1f} / {tracker_seconds:>5.1f} s  "
              f"({'equal to the byte' if ours == tracked else f'TorchScan - FSDPMemTracker: {ours - tracked:,} B'})",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=sorted(MODELS))
    parser.add_argument("--world-sizes", nargs="+", type=int, default=[2, 4, 8])
    parser.add_argument("--llama7b", nargs="*", type=int, default=None,
                        help="also Llama-2-7B at these world sizes (none given: 8 16 32 64)")
    options = parser.parse_args()
    warnings.filterwarnings("ignore")
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs")
    small_models(options)
    if options.llama7b is not None:
        llama7b(options.llama7b or [8, 16, 32, 64])


if __name__ == "__main__":
    main()
