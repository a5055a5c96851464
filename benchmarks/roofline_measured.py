"""Measured time against the roofline bound on the device at hand (issue 46's efficiency checks).

The device's peaks are measured on the spot (``torchscan.measure_hardware``: matrix-multiply FLOP/s, copy bandwidth,
last-level cache), each model is analyzed with ``time=True`` and ``torchscan.roofline`` joins the two. For each model
(torchvision ResNet-50 and MobileNetV2, Hugging Face BERT-base and GPT-2, torchvision ViT-B/16; configurations with
random weights, nothing downloaded) it prints and checks:

* the model's measured forward (plain wall-clock median) against its bound: never below it;
* every layer call whose working set (its inclusive operator bytes) exceeds the last-level cache: its inclusive kernel
  time at or above its bound; the calls that beat their bound are listed with their bytes (a call whose data stays
  in a cache can beat the DRAM roof, docs/time.md);
* the forward's achieved FLOP/s, FLOPs utilization and bandwidth;

and for ``--training`` models (ResNet-50 and BERT-base) the training step's measured time, its spread and its MFU
(the step's FLOPs over its median time and the device's peak). Exits non-zero if a check fails.

    python benchmarks/roofline_measured.py [--models ...] [--training resnet50,bert_base] [--repeats 5]
                                           [--warmup 2] [--device cpu]

Quick check: ``python benchmarks/roofline_measured.py --models mobilenet_v2 --training none --repeats 1``. Run it on a
quiet machine: measured peaks and times both move with load.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent)]

from measured_time import MODELS, chosen, on  # noqa: E402

from torchscan import crawl_module, crawl_training_step, measure_hardware, roofline  # noqa: E402


def forward_checks(name: str, timing: dict[str, int], device: str, hardware: Any) -> bool:
    model, args, kwargs = on(MODELS[name](), device)
    report = crawl_module(model, args=args, kwargs=kwargs, time=timing)
    result = roofline(report, hardware)
    efficiency, bound = result["efficiency"], result["model"]["bound"]
    model_ok = efficiency["measured_seconds"] >= bound["known_value"]
    cache = hardware["last_level_cache_bytes"] or 0
    large = [layer for layer in result["layers"] if (layer["inclusive"]["bytes"]["known_value"] or 0) > cache
             and "measured_seconds" in layer["inclusive"]]
    beaters = [layer for layer in large
               if layer["inclusive"]["measured_seconds"] < layer["inclusive"]["bound"]["known_value"]]
    print(f"{name:13s} measured {efficiency['measured_seconds'] * 1e3:8.1f} ms (IQR "
          f"{efficiency['spread_seconds'] * 1e3:.1f})  bound {bound['known_value'] * 1e3:7.2f} ms "
          f"({result['model']['bound_by']}-bound, {bound['status']})  {'ok' if model_ok else 'BELOW THE BOUND'}  "
          f"{efficiency['achieved_flops_per_second'] / 1e9:6.1f} GFLOP/s = "
          f"{100 * efficiency['flops_utilization']:5.1f}% of peak  "
          f"{efficiency['achieved_bandwidth'] / 1e9:5.1f} GB/s  calls over the LLC: {len(large)}, "
          f"beating their bound: {len(beaters)}", flush=True)
    for layer in beaters:
        point = layer["inclusive"]
        print(f"    beats its bound: {layer['path'] or '(root)'}#{layer['call_index']}  "
              f"{point['bytes']['known_value'] / 2**20:.1f} MiB  measured {point['measured_seconds'] * 1e3:.3f} ms  "
              f"bound {point['bound']['known_value'] * 1e3:.3f} ms", flush=True)
    return model_ok and not beaters


def training_row(name: str, timing: dict[str, int], device: str, hardware: Any) -> None:
    model, args, kwargs = on(MODELS[name](), device)
    report = crawl_training_step(model, args=args, kwargs=kwargs, optimizer="adamw", time=timing)
    efficiency = roofline(report, hardware)["efficiency"]
    time = report["time"]["measured"]
    print(f"{name:13s} training step {time['median'] * 1e3:8.1f} ms (IQR {time['iqr'] * 1e3:.1f}, min-max "
          f"{time['min'] * 1e3:.1f}-{time['max'] * 1e3:.1f})  {efficiency['flops']['known_value'] / 1e9:.1f} GFLOP "
          f"({efficiency['flops']['status']})  {efficiency['achieved_flops_per_second'] / 1e9:6.1f} GFLOP/s  "
          f"MFU {100 * efficiency['flops_utilization']:.1f}%", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--models", default=",".join(MODELS), help="forward models, comma-separated ('none': none)")
    parser.add_argument("--training", default="resnet50,bert_base", help="training-step models ('none': none)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    options = parser.parse_args()
    hardware = measure_hardware(options.device)
    print(f"torch {torch.__version__}, {hardware['name']}, {torch.get_num_threads()} threads, load average "
          f"{' '.join(f'{load:.2f}' for load in os.getloadavg())}; measured peaks: "
          + ", ".join(f"{key} {value / 1e9:.1f} GFLOP/s" for key, value in hardware["peak_flops"].items())
          + f", bandwidth {hardware['memory_bandwidth'] / 1e9:.1f} GB/s, last-level cache "
          f"{(hardware['last_level_cache_bytes'] or 0) / 2**20:.0f} MiB")
    timing = {"warmup": options.warmup, "repeats": options.repeats}
    results = [forward_checks(name, timing, options.device, hardware) for name in chosen(options.models)]
    for name in chosen(options.training):
        training_row(name, timing, options.device, hardware)
    if not all(results):
        raise SystemExit("a measured time is below its bound (see above)")


if __name__ == "__main__":
    main()
