"""Llama-2-7B's roofline bound on named hardware: the decode step at batch 1 and context 4k, and the 4k prefill.

Run from the repository root: ``python benchmarks/roofline_llama.py [--hardware "A100 SXM 80GB"] [--context 4096]``.
Builds transformers' ``LlamaForCausalLM`` with Llama-2-7B's sizes in bfloat16 on ``meta`` (nothing is allocated or
downloaded), analyzes one decode step (``decode_step_inputs``: one token after ``--context`` cached positions) and a
prefill of ``--context`` tokens, and prints each bound with what it is made of: the decode step must be
memory-bound with a bound equal to its bytes over the device's bandwidth (about 6.6 ms on an A100 80 GB for the
13.5 GB of bfloat16 weights alone), the prefill compute-bound. The script checks both and exits non-zero if either
fails. The decode step's bytes are the unfused model's (docs/time.md): besides the weights and the KV cache read by
attention, they count the ``DynamicCache``'s ``torch.cat`` (which copies each layer's keys and values to append
one position) and the activations; the lines below split them.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "site_models")]

from zoo.hf_llama import llama2_7b  # noqa: E402

from torchscan import HARDWARE, crawl_module, decode_step_inputs, roofline  # noqa: E402

GB = 1e9


def model(context: int) -> torch.nn.Module:
    with torch.device("meta"):
        built = llama2_7b(max_position_embeddings=max(4096, context + 1))
    return built.to(torch.bfloat16)


def shares(operators: list) -> str:
    """The operators with the most bytes, as ``name dtype: GB``."""
    rows = sorted(operators, key=lambda row: -(row["bytes"]["known_value"] or 0))[:5]
    return ", ".join(f"{row['operator']} {row['dtype']}: {row['bytes']['known_value'] / GB:.2f} GB" for row in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", default="A100 SXM 80GB", choices=list(HARDWARE))
    parser.add_argument("--context", type=int, default=4096)
    options = parser.parse_args()
    device = HARDWARE[options.hardware]
    llama = model(options.context)
    weights = sum(p.numel() * p.element_size() for p in llama.parameters())
    print(f"Llama-2-7B, bfloat16, on {device['name']} ({device['memory_bandwidth'] / GB:.0f} GB/s, "
          f"{device['peak_flops']['bfloat16'] / 1e12:.0f} TFLOP/s bfloat16); source: {device['source']}")
    print(f"weights: {weights / GB:.2f} GB -> {weights / device['memory_bandwidth'] * 1e3:.2f} ms at the bandwidth")
    ok = True

    start = time.perf_counter()
    args, kwargs = decode_step_inputs(llama, options.context, device="meta")
    decode = crawl_module(llama, args=args, kwargs=kwargs)
    bound = roofline(decode, device)["model"]
    kv = decode["inputs"]["kv_cache"]["bytes"]["value"]
    nbytes = bound["bytes"]["value"]
    print(f"\ndecode step, batch 1, context {options.context} ({time.perf_counter() - start:.1f} s to analyze)")
    print(f"  KV cache read: {kv / GB:.2f} GB; weights + KV cache: {(weights + kv) / GB:.2f} GB -> "
          f"{(weights + kv) / device['memory_bandwidth'] * 1e3:.2f} ms")
    print(f"  counted bytes (unfused): {nbytes / GB:.2f} GB; FLOPs: {bound['flops']['value'] / 1e9:.1f} G; "
          f"intensity {bound['arithmetic_intensity']:.2f} FLOP/byte")
    rows = roofline(decode, device)["operators"]
    print(f"  largest: {shares(rows)}")
    print(f"  bound: {bound['bound']['value'] * 1e3:.3f} ms ({bound['bound']['status']}), {bound['bound_by']}-bound; "
          f"bytes / bandwidth = {nbytes / device['memory_bandwidth'] * 1e3:.3f} ms")
    decode_ok = (bound["bound_by"] == "memory" and bound["bound"]["value"] == nbytes / device["memory_bandwidth"]
                 and nbytes >= weights - 2 * llama.config.vocab_size * llama.config.hidden_size + kv)
    print(f"  memory-bound with bound == bytes / bandwidth, bytes >= weights read + KV cache: {decode_ok}\n")
    ok &= decode_ok

    start = time.perf_counter()
    prefill = crawl_module(llama, args=(torch.zeros(1, options.context, dtype=torch.long, device="meta"),))
    result = roofline(prefill, device)["model"]
    print(f"\nprefill, batch 1, {options.context} tokens ({time.perf_counter() - start:.1f} s to analyze)")
    print(f"  FLOPs: {result['flops']['value'] / 1e12:.2f} T; bytes: {result['bytes']['value'] / GB:.2f} GB; "
          f"intensity {result['arithmetic_intensity']:.0f} FLOP/byte (ridge "
          f"{device['peak_flops']['bfloat16'] / device['memory_bandwidth']:.0f})")
    print(f"  bound: {result['bound']['value'] * 1e3:.2f} ms ({result['bound']['status']}), "
          f"{result['bound_by']}-bound; compute {result['compute_seconds'] * 1e3:.2f} ms, memory "
          f"{result['memory_seconds'] * 1e3:.2f} ms")
    prefill_ok = result["bound_by"] == "compute"
    print(f"  compute-bound: {prefill_ok}")
    ok &= prefill_ok
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
