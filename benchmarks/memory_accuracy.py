"""Traced memory against ``measure_peak_memory`` on CPU, for the models of issue 31's "Done when".

Run from the repository root: ``python benchmarks/memory_accuracy.py``. For each model it prints the traced peak
above the start of a ``no_grad`` forward (``crawl_module(..., memory=True)``) beside the measured peak of the same
forward, and for training steps with AdamW the traced step's peak above what existed before it (parameters, buffers
and inputs) beside the measured peak of the same step. Random weights; nothing is downloaded.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "site_models")]

from zoo.torchvision_ops import ensure_torchvision  # noqa: E402

from torchscan import crawl_module, crawl_training_step, measure_peak_memory  # noqa: E402

MIB = 2**20


def torchvision_model(name: str) -> Callable[[], tuple[nn.Module, torch.Tensor]]:
    def build() -> tuple[nn.Module, torch.Tensor]:
        ensure_torchvision()
        import torchvision

        return getattr(torchvision.models, name)(), torch.randn(1, 3, 224, 224)
    return build


def transformers_model(kind: str, batch: int, layers: int | None = None, length: int = 128
                       ) -> Callable[[], tuple[nn.Module, torch.Tensor]]:
    def build() -> tuple[nn.Module, torch.Tensor]:
        ensure_torchvision()
        import transformers

        if kind == "bert":
            config = transformers.BertConfig(**({"num_hidden_layers": layers} if layers else {}))
            model: nn.Module = transformers.BertModel(config)
        else:
            config = transformers.GPT2Config(**({"n_layer": layers} if layers else {}))
            model = transformers.GPT2LMHeadModel(config)
        return model, torch.randint(0, 1000, (batch, length))
    return build


FORWARDS = {
    "ResNet-18": torchvision_model("resnet18"), "ResNet-50": torchvision_model("resnet50"),
    "MobileNetV2": torchvision_model("mobilenet_v2"), "ViT-B/16": torchvision_model("vit_b_16"),
    "BERT-base": transformers_model("bert", 1), "GPT-2 batch 1": transformers_model("gpt2", 1),
    "GPT-2 batch 8": transformers_model("gpt2", 8),
}
STEPS = {
    "ResNet-18": torchvision_model("resnet18"), "BERT 2 layers": transformers_model("bert", 2, 2),
    "GPT-2 2 layers": transformers_model("gpt2", 2, 2),
}


def first_output(output: Any) -> torch.Tensor:
    """The tensor a step's loss sums: logits, a model's last hidden state, or the output itself."""
    for name in ("logits", "last_hidden_state"):
        if hasattr(output, name):
            return getattr(output, name)
    return output


def forward_row(name: str, build: Callable[[], tuple[nn.Module, torch.Tensor]]) -> str:
    torch.manual_seed(0)
    model, inputs = build()
    model.eval()
    traced = crawl_module(model, args=(inputs,), memory=True)["memory"]["peak_above_start"]["value"]

    def forward() -> None:
        with torch.no_grad():
            model(inputs)
    measured = measure_peak_memory(forward, device="cpu")["peak_bytes"]
    return f"forward  {name:<27} traced {traced / MIB:9.2f} MiB  measured {measured / MIB:9.2f} MiB  " \
           f"difference {100 * (traced - measured) / measured:+6.2f} %"


def step_row(name: str, build: Callable[[], tuple[nn.Module, torch.Tensor]]) -> str:
    torch.manual_seed(0)
    model, inputs = build()
    report = crawl_training_step(model, args=(inputs,), optimizer="adamw", memory=True,
                                 loss=lambda output: first_output(output).sum())
    memory = report["training"]["memory"]
    at_peak = {key: result["value"] for key, result in memory["at_peak"].items()}
    traced = sum(at_peak.values()) - at_peak["parameters"] - at_peak["buffers"] - at_peak["inputs"]

    def step() -> None:
        for parameter in model.parameters():
            parameter.grad = None
        optimizer = torch.optim.AdamW(model.parameters())
        first_output(model(inputs)).sum().backward()
        optimizer.step()
    model.train()
    measured = measure_peak_memory(step, device="cpu")["peak_bytes"]
    return f"training {name:<27} traced {traced / MIB:9.2f} MiB  measured {measured / MIB:9.2f} MiB  " \
           f"difference {100 * (traced - measured) / measured:+6.2f} %  (peak in the {memory['phase_at_peak']})"


def main() -> None:
    for name, build in FORWARDS.items():
        print(forward_row(name, build), flush=True)
    with torch.backends.mkldnn.flags(enabled=False):  # oneDNN's convolutions allocate workspaces the trace cannot see
        for name in ("ResNet-18", "ResNet-50", "MobileNetV2"):
            print(forward_row(f"{name} (no oneDNN)", FORWARDS[name]), flush=True)
    for name, build in STEPS.items():
        print(step_row(name, build), flush=True)


if __name__ == "__main__":
    main()
