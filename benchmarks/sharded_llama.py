"""Will it fit? Per-device memory of an FSDP training step of Llama-2-7B and a Llama-70B config, by world size.

Run from the repository root: ``python benchmarks/sharded_llama.py [--models 7b 70b] [--world-sizes 8 16 32 64]``.
Builds transformers' ``LlamaForCausalLM`` on ``meta`` (nothing is allocated or downloaded), and for each world size,
with and without activation checkpointing, runs `torchscan.parallel.step.sharded_step`: FSDP2's ``fully_shard`` on
every decoder layer and the root over a fake process group, fp32 parameters sharded with
``MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32)`` (the bf16 recipe of FSDP2 training), AdamW,
4,096 tokens per device (batch 1) with the model's own cross-entropy loss (``labels=input_ids``). It prints the
steady-state per-device peak, what is live at the peak, and the seconds each analysis took (target: under 60 s
each), then the smallest world size whose peak fits an 80 GB device with 10% headroom (72 GB usable).

The figures are traced live tensor bytes on CPU stand-ins (CPU's kernel choices: fused flash attention, the
single-tensor AdamW); a GPU adds the communication library's buffers, the CUDA context and allocator
fragmentation, which is what the headroom is for (see docs/parallel.md).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "site_models")]

from zoo.hf_llama import llama2_7b  # noqa: E402

from torchscan.parallel.step import sharded_step  # noqa: E402

GB, GIB = 10**9, 2**30
DEVICE_BYTES, HEADROOM = 80 * GB, 0.10
TOKENS = 4096
MODELS: dict[str, dict[str, Any]] = {
    "7b": {},
    "70b": {"hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80, "num_attention_heads": 64,
            "num_key_value_heads": 8},
}
PRECISION = {"param_dtype": "bfloat16", "reduce_dtype": "float32"}


def model(name: str) -> torch.nn.Module:
    with torch.device("meta"):
        return llama2_7b(**MODELS[name])


def analyze(llama: torch.nn.Module, world_size: int, checkpointing: bool) -> tuple[dict[str, Any], float]:
    ids = torch.zeros(1, TOKENS, dtype=torch.long)
    plan = {"strategy": "fsdp", "world_size": world_size, "mixed_precision": PRECISION}
    start = time.perf_counter()
    section = sharded_step(llama, (), {"input_ids": ids, "labels": ids, "use_cache": False}, lambda output: output.loss,
                           "adamw", plan,
                           activation_checkpointing=checkpointing)
    return section, time.perf_counter() - start


def line(name: str, world_size: int, checkpointing: bool, section: dict[str, Any], seconds: float) -> str:
    device = section["per_device"]
    live = {key: value["value"] for key, value in device["at_peak"].items() if value["value"]}
    parts = ", ".join(f"{key} {value / GIB:.2f}" for key, value in sorted(live.items(), key=lambda kv: -kv[1])[:5])
    return (f"{name:>4} fsdp x{world_size:<3} {'AC   ' if checkpointing else 'no AC'}  peak "
            f"{device['peak']['value'] / GB:7.2f} GB ({device['peak']['value'] / GIB:6.2f} GiB) in "
            f"{device['phase_at_peak']} at {device['peak_operator']}; first step {device['first_step']['peak']['value'] / GB:6.2f} GB; "
            f"{seconds:5.1f} s  [GiB: {parts}]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["7b", "70b"], choices=sorted(MODELS))
    parser.add_argument("--world-sizes", nargs="+", type=int, default=[8, 16, 32, 64])
    options = parser.parse_args()
    warnings.filterwarnings("ignore")
    usable = DEVICE_BYTES * (1 - HEADROOM)
    for name in options.models:
        llama = model(name)
        print(f"-- Llama {name}: {sum(p.numel() for p in llama.parameters()):,} parameters")
        for checkpointing in (False, True):
            fits = []
            for world_size in options.world_sizes:
                section, seconds = analyze(llama, world_size, checkpointing)
                print(line(name, world_size, checkpointing, section, seconds), flush=True)
                if section["per_device"]["peak"]["value"] <= usable:
                    fits.append(world_size)
            verdict = f"none of {options.world_sizes}" if not fits else f"{min(fits)} devices" + (
                " (the smallest analyzed: pass smaller --world-sizes to look below it)"
                if min(fits) == min(options.world_sizes) else "")
            print(f"   smallest world size that fits {DEVICE_BYTES / GB:.0f} GB with {HEADROOM:.0%} headroom "
                  f"({'with' if checkpointing else 'without'} activation checkpointing): {verdict}")


if __name__ == "__main__":
    main()
