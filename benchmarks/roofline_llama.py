"""Llama-2-7B's roofline bound on named hardware: the decode step at batch 1 and context 4k, and the 4k prefill.

Run from the repository root: ``python benchmarks/roofline_llama.py [--hardware "A100 SXM 80GB"] [--context 4096]``.
Builds transformers' ``LlamaForCausalLM`` with Llama-2-7B's sizes in bfloat16 on ``meta`` (nothing is allocated or
downloaded), analyzes one decode step (``decode_step_inputs``: one token after ``--context`` cached positions) with
each cache ``decode_step_inputs`` builds, and a prefill of ``--context`` tokens, and prints each bound with what it
is made of. The checks, and the script exits non-zero if one fails:

* the decode step with a static cache (preallocated and written in place, as compiled serving runs it) is
  memory-bound, with a bound equal to its bytes over the device's bandwidth, and those bytes equal to the weights
  it reads plus the KV cache within 1% (about 6.6 ms on an A100 80 GB for the 13.5 GB of bfloat16 weights alone);
* the decode step with ``generate()``'s default dynamic cache is memory-bound too; its bytes also count the
  ``torch.cat`` with which ``DynamicCache`` appends a position (a copy of every layer's keys and values), printed
  apart;
* the prefill is compute-bound.

The bytes are the unfused model's (docs/time.md). The weights a decode step reads are every parameter except the
input embedding table, of which it reads one row per token.
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


def decode(llama: torch.nn.Module, context: int, cache: str, device: dict) -> bool:
    """Analyze one decode step with ``cache``, print its bound and what it is made of, and check it."""
    start = time.perf_counter()
    args, kwargs = decode_step_inputs(llama, context, device="meta", cache=cache)
    report = crawl_module(llama, args=args, kwargs=kwargs)
    bound = roofline(report, device)
    model, bandwidth = bound["model"], device["memory_bandwidth"]
    table = llama.get_input_embeddings().weight
    weights = sum(p.numel() * p.element_size() for p in llama.parameters()) - table.numel() * table.element_size()
    weights += table.shape[1] * table.element_size()  # the token's row
    kv, nbytes = report["inputs"]["kv_cache"]["bytes"]["value"], model["bytes"]["value"]
    copies = sum(row["bytes"]["value"] for row in bound["operators"] if row["operator"] == "aten.cat")
    print(f"\ndecode step, {cache} cache, batch 1, context {context} ({time.perf_counter() - start:.1f} s to analyze)")
    print(f"  weights read {weights / GB:.3f} GB + KV cache read ({report['inputs']['kv_cache']['positions']} "
          f"positions) {kv / GB:.3f} GB = {(weights + kv) / GB:.3f} GB -> {(weights + kv) / bandwidth * 1e3:.3f} ms")
    print(f"  counted bytes (unfused): {nbytes / GB:.3f} GB, of which torch.cat {copies / GB:.3f} GB and the rest "
          f"(activations) {(nbytes - weights - kv - copies) / GB:.3f} GB; FLOPs {model['flops']['value'] / 1e9:.1f} G, "
          f"intensity {model['arithmetic_intensity']:.2f} FLOP/byte")
    print(f"  largest: {shares(bound['operators'])}")
    print(f"  bound: {model['bound']['value'] * 1e3:.3f} ms ({model['bound']['status']}), {model['bound_by']}-bound; "
          f"bytes / bandwidth = {nbytes / bandwidth * 1e3:.3f} ms")
    ok = model["bound_by"] == "memory" and model["bound"]["value"] == nbytes / bandwidth
    if cache == "static":
        ok &= abs(nbytes - weights - kv) <= 0.01 * (weights + kv)
        print(f"  memory-bound, bound == bytes / bandwidth, bytes == weights read + KV cache within 1%: {ok}")
    else:
        print(f"  memory-bound, bound == bytes / bandwidth: {ok}")
    return ok


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

    for cache in ("static", "dynamic"):
        ok &= decode(llama, options.context, cache, device)

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
