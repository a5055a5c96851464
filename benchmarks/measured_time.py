"""Measured time (issue 46, the measured half): the per-call kernel times of ``crawl_module(..., time=True)`` against
the measured total, and a training step's measured time with its spread, on the device at hand.

For each model (torchvision ResNet-50 and MobileNetV2, Hugging Face BERT-base and GPT-2, torchvision ViT-B/16; built
from their configurations with random weights, nothing downloaded) it prints, from one ``time=True`` report:

* ``measured``: the median wall clock of the plain forward (``time.measured``: nothing attached), with its
  interquartile range and extremes;
* ``kernels``: the median over profiled iterations of the layer calls' self kernel times plus the
  ``outside_layer_calls`` line (in each iteration they add up exactly), and ``reconciled``: (kernels - measured) /
  measured, which issue 46 wants within 5%. What is left is the time between operators (Python, the dispatcher's
  entry), which no kernel time includes. The plain and profiled iterations alternate, so load hits both alike;
* ``sum of medians``: the per-call medians added up (medians do not add exactly: this shows by how much);
* ``FLOP/s``: the report's operator FLOPs over the measured median: achieved FLOP/s, ready to be divided by a
  hardware peak (``torchscan.measure_hardware``) for an efficiency.

``--training`` models (ResNet-50 and BERT-base by default) then run ``crawl_training_step(..., optimizer="adamw",
time=True)``: the step's measured time (median, IQR, min-max), its reconciliation (calls' forward and backward
self times plus every line: the kernel total), its phases and the step's FLOPs over its median: the achieved FLOP/s from which an MFU
follows once a peak is joined. Inputs: one 224x224 image, one 128-token row.

    python benchmarks/measured_time.py [--models resnet50,mobilenet_v2,bert_base,gpt2,vit_b_16]
                                       [--training resnet50,bert_base] [--repeats 5] [--warmup 2] [--threads N]
                                       [--device cuda]

``--device cuda`` (or another accelerator) moves each model and its inputs there first: the same checks, with the
kernel time of the device's kernels (``time.kernel_clock`` ``device_kernel_time``).

A quick check that it runs: ``python benchmarks/measured_time.py --models mobilenet_v2 --training none
--repeats 1 --warmup 0``. Run it on a quiet machine: the load average is printed with the results.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "site_models")]

from zoo.torchvision_ops import ensure_torchvision  # noqa: E402

from torchscan import crawl_module, crawl_training_step  # noqa: E402

Case = tuple[nn.Module, tuple, dict[str, Any]]
STEP_LINES = ("outside_layer_calls", "loss_forward", "loss_backward", "engine", "recomputation", "optimizer")


def _image(model: nn.Module) -> Case:
    generator = torch.Generator().manual_seed(0)
    return model, (torch.rand(1, 3, 224, 224, generator=generator),), {}


def _tokens(model: nn.Module, vocab: int) -> Case:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (1, 128), generator=generator)
    return model, (ids,), {"attention_mask": torch.ones_like(ids)}


def resnet50() -> Case:
    return _image(ensure_torchvision().models.resnet50())


def mobilenet_v2() -> Case:
    return _image(ensure_torchvision().models.mobilenet_v2())


def vit_b_16() -> Case:
    return _image(ensure_torchvision().models.vit_b_16())


def bert_base() -> Case:
    ensure_torchvision()  # transformers imports torchvision
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    return _tokens(BertModel(BertConfig()), BertConfig().vocab_size)


def gpt2() -> Case:
    ensure_torchvision()
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    return _tokens(GPT2Model(GPT2Config()), GPT2Config().vocab_size)


MODELS: dict[str, Callable[[], Case]] = {"resnet50": resnet50, "mobilenet_v2": mobilenet_v2, "bert_base": bert_base,
                                         "gpt2": gpt2, "vit_b_16": vit_b_16}


def median(statistics: dict[str, float]) -> float:
    return statistics["median"]


def spread_text(statistics: dict[str, float]) -> str:
    """``median ms (IQR x ms, min-max a-b ms)``."""
    return (f"{median(statistics) * 1e3:8.1f} ms (IQR {statistics['iqr'] * 1e3:.1f} ms, "
            f"min-max {statistics['min'] * 1e3:.1f}-{statistics['max'] * 1e3:.1f} ms)")


def on(case: Case, device: str) -> Case:
    """The model and its inputs on ``device``."""
    model, args, kwargs = case
    return (model.to(device), tuple(arg.to(device) for arg in args),
            {key: value.to(device) for key, value in kwargs.items()})


def forward_row(name: str, options: dict[str, int], device: str) -> None:
    model, args, kwargs = on(MODELS[name](), device)
    report = crawl_module(model, args=args, kwargs=kwargs, time=options)
    time = report["time"]
    attributed = sum(median(row["self"]) for row in time["layers"]) + median(time["outside_layer_calls"])
    measured = median(time["measured"])
    flops = report["operator_flops"]["total"]["known_value"] or 0
    kernels = median(time["kernels"])
    print(f"{name:13s} measured {spread_text(time['measured'])}  kernels {spread_text(time['kernels'])}  "
          f"reconciled {100 * (kernels - measured) / measured:+5.1f}%  "
          f"sum of medians {attributed * 1e3:8.1f} ms ({100 * (attributed - kernels) / kernels:+.1f}% of kernels)  "
          f"outside calls {median(time['outside_layer_calls']) * 1e3:.2f} ms  "
          f"{flops / measured / 1e9:6.1f} GFLOP/s ({report['operator_flops']['total']['status']})", flush=True)


def training_row(name: str, options: dict[str, int], device: str) -> None:
    model, args, kwargs = on(MODELS[name](), device)
    report = crawl_training_step(model, args=args, kwargs=kwargs, optimizer="adamw", time=options)
    time = report["time"]
    attributed = (sum(median(row["self"]) + median(row["backward_self"]) for row in time["layers"])
                  + sum(median(time[line]) for line in STEP_LINES))
    measured = median(time["measured"])
    step = report["training"]["totals"]["step"]
    flops = step["known_value"] or 0
    phases = "  ".join(f"{phase} {median(value) * 1e3:.1f}" for phase, value in time["phases"].items())
    kernels = median(time["kernels"])
    print(f"{name:13s} step {spread_text(time['measured'])}  kernels {spread_text(time['kernels'])}  "
          f"reconciled {100 * (kernels - measured) / measured:+5.1f}%  "
          f"sum of medians {100 * (attributed - kernels) / kernels:+.1f}% of kernels  phases (ms): {phases}  "
          f"step {flops / 1e9:.1f} GFLOP ({step['status']}) -> {flops / measured / 1e9:6.1f} GFLOP/s achieved",
          flush=True)


def chosen(text: str) -> list[str]:
    names = [] if text in ("", "none") else text.split(",")
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        raise SystemExit(f"unknown models {unknown}: choose from {sorted(MODELS)}")
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--models", default=",".join(MODELS), help="forward models, comma-separated ('none': none)")
    parser.add_argument("--training", default="resnet50,bert_base", help="training-step models ('none': none)")
    parser.add_argument("--repeats", type=int, default=5, help="timed iterations of each run")
    parser.add_argument("--warmup", type=int, default=2, help="untimed iterations before them")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    parser.add_argument("--device", default="cpu", help="where the models run (cpu, cuda, ...)")
    options = parser.parse_args()
    if options.threads is not None:
        torch.set_num_threads(options.threads)
    timing = {"warmup": options.warmup, "repeats": options.repeats}
    print(f"torch {torch.__version__}, {options.device}, {torch.get_num_threads()} threads, load average "
          f"{' '.join(f'{load:.2f}' for load in os.getloadavg())}, warmup {options.warmup}, repeats {options.repeats}")
    for name in chosen(options.models):
        forward_row(name, timing, options.device)
    for name in chosen(options.training):
        training_row(name, timing, options.device)


if __name__ == "__main__":
    main()
