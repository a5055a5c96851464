"""Llama-2-7B on meta: traced forward peak at 4k and 32k context and the AdamW training-step peak, timed.

Run from the repository root: ``python benchmarks/memory_llama.py``. Builds transformers' ``LlamaForCausalLM`` with
Llama-2-7B's sizes and 32k maximum positions in bfloat16 on ``meta`` (nothing is allocated or downloaded) and
prints each figure with the seconds it took; issue 31 asks for all three in under 30 s together. Each runs three
times: on meta by default (``meta_kernels="accelerator"``: attention runs the fused kernel CUDA picks, flash for
bfloat16, and never materializes its score matrices), on meta with ``meta_kernels="math"`` (meta's own math path,
which materializes them), and with ``as_device="cpu"``, on fake-tensor stand-ins that keep the CPU's kernel choices
(its fused flash attention).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "site_models")]

from zoo.hf_llama import llama2_7b  # noqa: E402

from torchscan import crawl_module, crawl_training_step  # noqa: E402

GIB = 2**30


def model() -> torch.nn.Module:
    with torch.device("meta"):
        built = llama2_7b(max_position_embeddings=32768)
    return built.to(torch.bfloat16)


def tokens(length: int) -> torch.Tensor:
    return torch.zeros(1, length, dtype=torch.long, device="meta")


def foreach_adamw(parameters: list[torch.Tensor]) -> torch.optim.Optimizer:
    """AdamW in the implementation a GPU runs by default (CPU stand-ins would pick the single-tensor one)."""
    return torch.optim.AdamW(parameters, foreach=True)


#: The analyses compared: their label and the keyword arguments of the entry points.
SETTINGS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("meta, an accelerator's attention kernel (the default)", {}),
    ("meta, meta_kernels='math'", {"meta_kernels": "math"}),
    ("as_device='cpu', foreach AdamW (a GPU's default)", {"as_device": "cpu", "optimizer": foreach_adamw}),
)


def main() -> None:
    llama = model()
    for label, options in SETTINGS:
        print(f"-- {label}")
        run(llama, options)


def run(llama: torch.nn.Module, options: dict[str, Any]) -> None:
    total = 0.0
    for length in (4096, 32768):
        start = time.perf_counter()
        report = crawl_module(llama, args=(tokens(length),), memory=True,
                              **{key: value for key, value in options.items() if key != "optimizer"})
        seconds = time.perf_counter() - start
        total += seconds
        memory = report["memory"]
        print(f"forward {length:>5} tokens: peak {memory['peak']['value'] / GIB:7.2f} GiB "
              f"(activations above the start {memory['peak_above_start']['value'] / GIB:6.2f} GiB, parameters "
              f"{memory['at_peak']['parameters']['value']:,} bytes = {report['totals']['parameters']['total']:,} x 2), "
              f"attention kernel {memory['attention_kernel']['name']}, {seconds:.1f} s")
    start = time.perf_counter()
    report = crawl_training_step(llama, args=(tokens(4096),), memory=True, **{"optimizer": "adamw", **options},
                                 loss=lambda output: output.logits.float().sum())
    seconds = time.perf_counter() - start
    total += seconds
    memory = report["training"]["memory"]
    parts = ", ".join(f"{name} {result['value'] / GIB:.2f}" for name, result in memory["at_peak"].items())
    first = memory["first_step"]
    print(f"training step 4096 tokens, AdamW ({report['training']['optimizer']['implementation']}): steady-state "
          f"peak {memory['peak']['value'] / GIB:.2f} GiB in the {memory['phase_at_peak']} ({parts} GiB); first "
          f"step {first['peak']['value'] / GIB:.2f} GiB in the {first['phase_at_peak']}; {seconds:.1f} s")
    print(f"total {total:.1f} s")


if __name__ == "__main__":
    main()
